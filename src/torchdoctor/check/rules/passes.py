"""Stage 4 rules, inference passes (TD401): a step function shared with training that its caller tells not to train
(``one_pass(val_loader, None)``), and a loop over phases whose forward runs with autograd on in the phase that
backpropagates nothing (``for phase in ["train", "val"]:``). ``inference.py`` has the other TD401 forwards."""

from __future__ import annotations

import ast

from torchdoctor.check.astutil import dotted
from torchdoctor.check.context import Context
from torchdoctor.check.patterns import lazy
from torchdoctor.check.registry import rule
from torchdoctor.check.semantic import flow, program


def _grad_mode_follows(ctx: Context, func: ast.AST, param: str) -> bool:
    """The pass sets autograd by the same parameter: ``with torch.set_grad_enabled(phase == "train"):``, or
    ``torch.set_grad_enabled(True) if phase == "train" else torch.set_grad_enabled(False)``."""
    sem = ctx.semantic
    for call in sem.calls_named("set_grad_enabled"):
        if sem.function_of(call) is not func:
            continue
        up = sem.parent(call)
        decides = [*call.args, *(k.value for k in call.keywords)] + ([up.test] if isinstance(up, ast.IfExp) else [])
        if any(isinstance(n, ast.Name) and n.id == param for d in decides for n in sem.subtree(d)):
            return True
    return False


# ---- TD401: a shared step function told not to train ---------------------------------------------------
@rule("TD401", ast.Module)
def pass_told_not_to_train(node: ast.AST, ctx: Context) -> None:
    """``def one_pass(loader, optimizer): ... if optimizer is not None: loss.backward()`` called as
    ``one_pass(val_loader, None)`` (or ``validate=True``) outside ``no_grad``: the pass evaluates, and every
    forward in it records a graph nobody uses."""
    sem = ctx.semantic
    switches = {}  # the functions of this file whose backward hangs on a parameter (a notebook may define one twice)
    for func in {sem.function_of(c) for c in sem.calls_named("backward")}:  # (not every function's effects: costly)
        if func is not None and (flag := _training_switch(ctx, func)) is not None:
            switches[id(func)] = (func, flag)
    if not switches:
        return
    names = {f.name for f, _ in switches.values()}  # type: ignore[attr-defined]
    for site in sem.calls:
        name = site.func.id if isinstance(site.func, ast.Name) else site.func.attr \
            if isinstance(site.func, ast.Attribute) else None
        if name not in names or len(resolved := sem.resolve(site)) != 1 or id(resolved[0]) not in switches:
            continue
        func, flag = switches[id(resolved[0])]
        param, trains_when = flag
        holder = sem.function_of(site)
        if sem.under_no_grad(site) or program.in_test(sem, site) or _grad_mode_follows(ctx, func, param) \
                or holder is not None and sem.called_elsewhere_without_grad(holder):
            continue
        value = _value_given(site, func, param)
        if value is None or trains_when(value) is not False:
            continue
        ctx.report("TD401", site, f"evaluation through `{ctx.name(site.func)}(...)` with `{param}={ctx.name(value)}` (so it "
                   "does not backpropagate) runs with autograd on: it builds a graph it never uses",
                   fix="call it under `with torch.no_grad():` (or `torch.inference_mode()`)")


def _value_given(site: ast.Call, func: ast.AST, param: str) -> ast.AST | None:
    """What ``site`` passes for ``param`` of ``func`` (by keyword, by position past ``self``, or its default)."""
    params = [a.arg for a in func.args.posonlyargs + func.args.args]  # type: ignore[attr-defined]
    found = next((k.value for k in site.keywords if k.arg == param), None)
    if found is not None:
        return found
    shift = 1 if params[:1] == ["self"] and isinstance(site.func, ast.Attribute) else 0
    if param in params and not any(isinstance(a, ast.Starred) for a in site.args) \
            and 0 <= params.index(param) - shift < len(site.args):
        return site.args[params.index(param) - shift]
    defaults = dict(zip(params[len(params) - len(func.args.defaults):], func.args.defaults))  # type: ignore[attr-defined]
    return defaults.get(param)


def _training_switch(ctx: Context, func: ast.AST):  # type: ignore[no-untyped-def]
    """The parameter whose value decides whether ``func`` backpropagates, with the test as a function of a
    constant (True: trains, False: does not, None: cannot tell); None when every backward does not hang on one."""
    sem = ctx.semantic
    nodes = sem.local_nodes(func)
    backwards = [n for n in nodes if isinstance(n, ast.Call) and sem.is_backward_call(n)]
    if not backwards or not any(isinstance(n, ast.Call) and flow.consumer_kind(sem, n) == "model" for n in nodes):
        return None
    params = {a.arg for a in func.args.posonlyargs + func.args.args + func.args.kwonlyargs}  # type: ignore[attr-defined]
    if any(isinstance(n, ast.Call) and sem.call_name(n) == "torch.set_grad_enabled" and n.args
           and isinstance(n.args[0], ast.Name) and n.args[0].id in params for n in nodes):
        return None  # ``with torch.set_grad_enabled(train):``: autograd follows the same switch
    found = None
    for call in backwards:
        switch = None
        for test, runs_if_true in sem.guards.branch_tests(call):
            switch = _switch(test, runs_if_true, params)
            if switch is not None:
                break
        if switch is None or found is not None and switch[0] != found[0]:
            return None
        found = switch
    if found is not None and any(isinstance(n, ast.Call) and sem.under_no_grad(n) and flow.consumer_kind(sem, n) == "model"
                                 and any((s := _switch(test, holds, params)) is not None and s[0] == found[0]
                                         for test, holds in sem.guards.branch_tests(n)) for n in nodes):
        return None  # ``if inference: with torch.no_grad(): output = model(x)`` / ``else: ... backward()``: the pass
        # turns autograd off itself where the switch says not to train
    return found


def _switch(test: ast.AST, runs_if_true: bool, params: set[str]):  # type: ignore[no-untyped-def]
    """``optimizer is not None``, ``optimizer``, ``not validate``, ``mode == "train"``, ``phase == Phase.TRAIN`` on a
    parameter: the parameter, and a function of the value a call passes (a node) that says whether the pass trains
    (None: cannot tell)."""
    if isinstance(test, ast.Name) and test.id in params:
        return test.id, lambda v: bool(v.value) == runs_if_true if isinstance(v, ast.Constant) else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name) \
            and test.left.id in params and (other := _phase_value(test.comparators[0])) is not None:
        op = test.ops[0]
        if isinstance(op, (ast.Is, ast.IsNot)) and other == ("constant", None):
            return test.left.id, lambda v: None if not isinstance(v, ast.Constant) else \
                ((v.value is None) == isinstance(op, ast.Is)) == runs_if_true
        if isinstance(op, (ast.Eq, ast.NotEq)):
            def trains(v: ast.AST) -> bool | None:
                given = _phase_value(v)
                if given is None or given[0] != other[0]:
                    return None
                return ((given == other) == isinstance(op, ast.Eq)) == runs_if_true
            return test.left.id, trains
    return None


def _phase_value(node: ast.AST) -> tuple[str, object] | None:
    """A value a phase is told by: a constant, or an enum member or module constant (``LoopPhase.TEST``, ``TRAIN``:
    upper-case, so ``args.mode`` is not one)."""
    if isinstance(node, ast.Constant):
        return "constant", node.value
    name = dotted(node)
    return ("name", name) if name and name.rsplit(".", 1)[-1].isupper() else None


# ---- TD401: a loop over phases that backpropagates in one of them only ------------------------------------
_TRAIN_PHASE = lazy(r"(?i)^train")
_HELD_PHASE = lazy(r"(?i)^(val|valid|validation|test|eval|dev)")


@rule("TD401", ast.For)
def phase_loop_with_autograd(node: ast.AST, ctx: Context) -> None:
    """``for phase in ["train", "val"]:`` whose backward runs only ``if phase == "train":`` while the forward runs in
    every phase with autograd on: the ``val`` pass records a graph it never uses (the transfer-learning tutorial's
    older shape; the current one wraps the pass in ``torch.set_grad_enabled(phase == "train")``)."""
    sem = ctx.semantic
    target, it = node.target, node.iter  # type: ignore[attr-defined]
    if isinstance(target, ast.Tuple) and len(target.elts) == 2 and isinstance(it, ast.Call) \
            and dotted(it.func) == "enumerate" and len(it.args) == 1:
        target, it = target.elts[1], it.args[0]  # ``for i, mod in enumerate(mode_list):`` (``data_loader[i]``)
    phase = target.id if isinstance(target, ast.Name) else None
    names = _phase_names(sem, it)
    held = [n for n in names if _HELD_PHASE.match(n)]
    if phase is None or not held or not any(_TRAIN_PHASE.match(n) for n in names) or program.in_test(sem, node):
        return
    body = sem.body(node)
    backwards = [n for n in body if isinstance(n, ast.Call) and sem.is_backward_call(n)]
    if not backwards or not all(_under_phase_test(sem, b, node, phase) for b in backwards):
        return  # (every phase backpropagates, or nothing does)
    forwards = [n for n in body if isinstance(n, ast.Call) and flow.consumer_kind(sem, n) == "model"]
    if any(sem.under_no_grad(f) or _under_phase_test(sem, f, node, phase) for f in forwards):
        return  # (``if phase == "val": with torch.no_grad(): out = model(x)``: the phases are told apart already)
    for call in forwards:
        if sem.guards.grad_mode(call) != "on" or any(_mentions(sem, w, phase) for w in _with_items_around(sem, call, node)):
            continue
        name = ctx.name(call.func)
        ctx.report("TD401", call, f"`{name}(...)` runs with autograd on in the `{held[0]}` pass of `for {phase} in ...` "
                   f"(only the training pass backpropagates): it builds a graph it never uses",
                   fix=f'run the pass under `with torch.set_grad_enabled({phase} == "{next(n for n in names if _TRAIN_PHASE.match(n))}"):`')
        return  # (one finding a loop: the first forward says it)


def _phase_names(sem, it: ast.AST) -> list[str]:  # type: ignore[no-untyped-def]
    """The string constants ``for phase in ["train", "val"]`` (or a name bound to such a list) goes over."""
    if isinstance(it, ast.Name):
        b = sem.binding_at(it.id, it)
        it = b.value if b is not None and not b.is_param and b.index is None and b.value is not None else it
    return _string_items(it) or []


def _string_items(it: ast.AST, depth: int = 0) -> list[str] | None:
    """``["train", "val"]``; also ``["train", "valid"] + (["test"] if args.test else [])``: every string it may hold."""
    if isinstance(it, (ast.List, ast.Tuple)):
        if not all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in it.elts):
            return None
        return [e.value for e in it.elts]  # type: ignore[attr-defined]
    if depth < 3 and (isinstance(it, ast.BinOp) and isinstance(it.op, ast.Add) or isinstance(it, ast.IfExp)):
        parts = [it.left, it.right] if isinstance(it, ast.BinOp) else [it.body, it.orelse]
        found = [_string_items(p, depth + 1) for p in parts]
        return None if any(f is None for f in found) else [x for f in found for x in f]  # type: ignore[union-attr]
    return None


def _mentions(sem, expr: ast.AST, name: str) -> bool:  # type: ignore[no-untyped-def]
    return any(isinstance(n, ast.Name) and n.id == name for n in sem.subtree(expr))


def _under_phase_test(sem, node: ast.AST, loop: ast.AST, phase: str) -> bool:  # type: ignore[no-untyped-def]
    """``node`` runs only under an ``if`` (or a conditional expression) of the loop that tests ``phase``."""
    for up in sem.ancestors(node):
        if up is loop:
            return False
        if isinstance(up, (ast.If, ast.IfExp)) and _mentions(sem, up.test, phase):
            return True
    return False


def _with_items_around(sem, node: ast.AST, loop: ast.AST) -> list[ast.AST]:  # type: ignore[no-untyped-def]
    out: list[ast.AST] = []
    for up in sem.ancestors(node):
        if up is loop:
            break
        if isinstance(up, (ast.With, ast.AsyncWith)):
            out += [i.context_expr for i in up.items]
    return out
