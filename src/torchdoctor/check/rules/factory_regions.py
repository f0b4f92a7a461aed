"""Where a tensor made in a step is made: the training or evaluation loop around it, a ``forward()`` (or a method or
helper only forwards reach), a loop that runs a model on every pass (sampling, generation), or a helper a batch loop of
the file calls every step. TD303 and TD611 (created.py) ask."""

from __future__ import annotations

import ast
import os

from torchdoctor.check.astutil import dotted
from torchdoctor.check.context import Context
from torchdoctor.check.rules.forward_values import reached_from_forward, run_by_forwards
from torchdoctor.check.rules.steps import fills_a_none_branch, method_entries, per_step_loop
from torchdoctor.check.semantic import flow
from torchdoctor.check.semantic.counts import few_passes
from torchdoctor.check.semantic.forwards import NOT_FORWARDS, network_methods
from torchdoctor.check.semantic.models import built_nowhere, construction, moved_keys

__all__ = ["model_loop", "project_step_caller", "region", "step_helper"]


def region(ctx: Context, node: ast.AST) -> ast.AST | None:
    sem = ctx.semantic
    loop = sem.enclosing_loop(node, "train") or sem.enclosing_loop(node, "eval")
    if loop is not None:
        return loop
    func = sem.function_of(node)
    cls = sem.class_of(node)
    if func is not None and cls is not None and cls.name in sem.module_classes and \
            (func.name == "forward" or reached_from_forward(sem, func, cls) and not _forwards_fill_it(sem, node, func, cls)) \
            and not built_nowhere(sem, cls):
        return func
    if func is not None and cls is None and sem.function_of(func) is None and run_by_forwards(sem, func) \
            and not _only_dead_classes_call(sem, func):
        return func  # ``def zero_state(ref, n): return torch.zeros(1, ref.size(0), n).to(ref.device)``, called by forwards
    if func is not None and cls is None and sem.function_of(func) is None \
            and not [s for s in sem.call_sites(func) if not sem.kinds._demo_code(s)] \
            and sem.project is not None and sem.project.run_by_forwards_only(sem, func):  # type: ignore[attr-defined]
        return func  # the same helper in a module of its own (``nn.py``), called by forwards of other modules (its
        # ``__main__`` demo aside)
    if func is not None and cls is not None and func.name != "__init__" and cls.name not in sem.module_classes \
            and sem.function_of(func) is None \
            and sem.cached(("held_by_forwards", func), lambda: _held_and_run_by_forwards(sem, func, cls)):
        return func  # ``x = self.aug.jitter(x)`` in a model's forward, of ``self.aug = Augment(0.1)``: a plain helper
        # object's method run on every forward
    if func is not None and cls is not None and func.name == "__init__" and cls.name not in sem.module_classes \
            and sem.function_of(func) is None \
            and sem.cached(("built_by_forwards", cls), lambda: _built_by_forwards(sem, cls, func)):
        return func  # ``TriangularCausalMask(B, L, device=x.device)`` made in an attention's forward: its ``__init__``
    return None


def _held_and_run_by_forwards(sem, func: ast.AST, cls: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """A model class of this file holds an object of the plain class ``cls`` (``self.aug = Augment(sigma)``) and its
    forward (or a method forward reaches) calls ``self.aug.<func>(...)``."""
    held = set()
    for n in sem.of_type(ast.Assign):
        target = n.targets[0] if len(n.targets) == 1 else None  # type: ignore[attr-defined]
        value = n.value  # type: ignore[attr-defined]
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self" \
                and isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == cls.name \
                and (owner := sem.class_of(n)) is not None and owner.name in sem.module_classes:
            held.add((owner, target.attr))
    if not held:
        return False
    for call in sem.calls_named(func.name):  # type: ignore[attr-defined]
        f = call.func
        if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Attribute)
                and isinstance(f.value.value, ast.Name) and f.value.value.id == "self"):
            continue
        owner, caller = sem.class_of(call), sem.function_of(call)
        if (owner, f.value.attr) in held and caller is not None \
                and (caller.name == "forward" or reached_from_forward(sem, caller, owner)):
            return True
    return False


def _forwards_fill_it(sem, node: ast.AST, func: ast.AST, cls: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """Every call of ``func`` in ``forward`` (or a method it reaches) passes the parameter that ``if z is None:``
    around ``node`` tests (a VAE's ``self.decode(state, z)``; only ``sample()``, run after training, draws ``z``): the
    forward never takes that branch."""
    sites = []
    for r in sem.self_reads(func.name):  # type: ignore[attr-defined]
        caller = sem.function_of(r)
        if caller is None or caller is func or sem.class_of(r) is not cls \
                or not (caller.name == "forward" or reached_from_forward(sem, caller, cls)):
            continue
        site = sem.parent(r)
        if not (isinstance(site, ast.Call) and site.func is r):
            return False  # (handed on as a callable: its calls are not seen)
        sites.append(site)
    return bool(sites) and all(fills_a_none_branch(sem, node, func, s) for s in sites)


def _only_dead_classes_call(sem, func: ast.AST, depth: int = 0) -> bool:  # type: ignore[no-untyped-def]
    """Every forward that runs the helper ``func`` (through helpers of the module) is of a model class nothing builds:
    the module makes none and names it nowhere else, and the modules of the project that import it never name it
    (PointNet++'s set abstraction beside the feature propagation that the training script imports): no step runs it."""
    if sem.project is None or depth > 2:
        return False
    sites = sem.call_sites(func)
    for site in sites:
        owner = sem.class_of(site)
        if owner is None:
            caller = sem.function_of(site)
            if caller is None or not _only_dead_classes_call(sem, caller, depth + 1):
                return False
        elif not built_nowhere(sem, owner):
            return False  # (``super(SetAbstraction, self).__init__()`` in the class itself names it too)
    return bool(sites)


def _built_by_forwards(sem, cls: ast.AST, init: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """Every object of the plain class ``cls`` is made in a module class's forward (in this file, or, when the file
    makes none, in the other modules of the project): its ``__init__`` runs on every forward."""
    sites = [c for c in sem.calls if isinstance(c.func, ast.Name) and c.func.id == cls.name]  # type: ignore[attr-defined]
    if sites:
        return all((f := sem.function_of(c)) is not None and (k := sem.class_of(c)) is not None
                   and k.name in sem.module_classes and (f.name == "forward" or reached_from_forward(sem, f, k))  # type: ignore[attr-defined]
                   for c in sites)
    return sem.project is not None and sem.project.run_by_forwards_only(sem, init)  # type: ignore[attr-defined]


def model_loop(ctx: Context, node: ast.AST) -> ast.AST | None:
    """The innermost loop around ``node`` that runs a model on every pass (a sampling or generation loop:
    ``for start in range(0, n, bs): noise = torch.randn(bs, k).to(dev); outs.append(g(noise).cpu())``)."""
    sem = ctx.semantic
    loop = next(iter(sem.loops_around(node)), None)
    if loop is not None and (cls := sem.class_of(loop)) is not None and cls.name in sem.module_classes \
            and built_nowhere(sem, cls):
        return None  # (a loop of a model class nothing builds runs on no step)
    if loop is None or sem.function_of(loop) is not sem.function_of(node) or sem.loop_kind(loop) == "epoch" \
            and "epoch" in (dotted(getattr(loop, "target", None)) or "").lower():
        return None  # (``for epoch in ...: state = torch.zeros(...).to(dev)`` before the step loop: once an epoch;
        # an RL loop over episodes makes its state once an episode, a few hundred steps apart at most: still told)
    return loop if any(isinstance(c, ast.Call) and (flow.consumer_kind(sem, c) == "model" or _helper_runs_a_model(sem, c)
                                                    or _model_method(sem, c))
                       and next(iter(sem.loops_around(c)), None) is loop and _runs_a_model(c)
                       for c in sem.body(loop)) else None


def _model_method(sem, call: ast.Call) -> bool:  # type: ignore[no-untyped-def]
    """``g.mean_style(z)`` of a model ``g`` whose class (of this file) runs its layers in that method: the model runs."""
    if not (isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)) \
            or call.func.attr in NOT_FORWARDS or sem.expr_kind(call.func.value, call) not in ("model", "wrapper"):
        return False
    made = construction(sem, call.func.value, call)
    cls = sem.calls_index.classes.get(sem.call_name(made) or "") if made is not None else None
    return cls is not None and call.func.attr in network_methods(sem, cls)


def _helper_runs_a_model(sem, call: ast.Call) -> bool:  # type: ignore[no-untyped-def]
    """``self.inference(model, img * scale)``, a function of this file whose own body runs a model (unguarded)."""
    return any(isinstance(n, ast.Call) and flow.consumer_kind(sem, n) == "model" and not sem.loops_around(n)
               for f in sem.resolve(call) for n in sem.local_nodes(f))
    # (a loop over whole runs, whose model runs only in its inner epoch and step loops, makes its buffers once a run)


_NOT_RUNS = frozenset({"prepare", "prepare_model", "unwrap_model", "wrap"})


def _runs_a_model(call: ast.Call) -> bool:
    """Not a call that only hands the model on: ``accelerator.unwrap_model(model)``, ``accelerator.prepare(model)``."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name not in _NOT_RUNS and "unwrap" not in name
    # (a loop over whole runs, whose model runs only in its inner epoch and step loops, makes its buffers once a run)


def step_helper(ctx: Context, node: ast.AST) -> tuple[ast.AST, ast.AST] | None:
    """The function holding ``node`` and the batch loop of this file that calls it on every step (SimCLR's
    ``info_nce_loss``, called by ``train()`` once per batch): a region that runs each step too."""
    func = ctx.semantic.function_of(node)
    inner = ctx.semantic.enclosing_loop(node)  # (``for scale in scales:`` of the helper: each pass makes one more)
    if func is None or func.name == "forward" or inner is not None and ctx.semantic.loop_kind(inner) is not None:
        return None
    if _chosen_by_caller(ctx, node, func):
        return None
    loop = per_step_loop(ctx, node)
    sem = ctx.semantic
    if loop is None and not sem.loops_around(node):  # (``x = sample_bits(torch.sigmoid(rnn(x)))`` on every pass of a
        if _loops_a_model(sem, func):  # generation loop: a model's loop)
            return None  # (``model.generate(mel)``, ``validate(args)``: a whole run a pass, its own loop the steps)
        sites = [s for s in sem.call_sites(func) if sem.function_of(s) is not func]
        loop = next((found for s in sites if (found := model_loop(ctx, s)) is not None
                     and not sem.under_step_guard(s, found) and not few_passes(sem, found)
                     and not _first_pass_of_the_caller(sem, node, func, s, found)
                     and not _flag_the_site_leaves_off(sem, node, func, s)), None)
        # (``for attn_order in [0, 2, 6, 12]: prior.check_sample(...)``: a self-test over a few settings)
        return (func, loop) if loop is not None else None
    if loop is None:
        return None
    if sem.loop_kind(loop) not in ("train", "eval") and not any(
            isinstance(c, ast.Call) and (flow.consumer_kind(sem, c) == "model" or isinstance(c.func, ast.Attribute)
                                         and (dotted(c.func.value) or "").rsplit(".", 1)[-1] in moved_keys(sem)
                                         and sem.expr_kind(c.func.value, c) in ("model", "wrapper"))
            for c in sem.body(loop)):
        return None  # (a solver's data-generation loop draws its coefficients on the host: no model runs there; a
        # moved model's method, ``model.encoding_fn(images)``, is the model running)
    return func, loop


def _first_pass_of_the_caller(sem, node: ast.AST, func: ast.AST, site: ast.Call, loop: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``node`` under ``if sample_t == 0:`` of a helper that ``site`` hands the counter of ``loop`` as ``sample_t``
    (``for sample_t in range(n): x = self.get_emb(sample_t, ...)``): made on the loop's first pass only."""
    target = getattr(loop, "target", None)
    counters = {n.id for n in sem.subtree(target) if isinstance(n, ast.Name)} if target is not None else set()
    params = [a.arg for a in func.args.args]  # type: ignore[attr-defined]
    if params[:1] == ["self"]:
        params = params[1:]
    for test, holds in sem.guards.branch_tests(node):
        if holds and isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq) \
                and isinstance(test.left, ast.Name) and test.left.id in params and isinstance(test.comparators[0], ast.Constant):
            index = params.index(test.left.id)
            arg = site.args[index] if index < len(site.args) else next(
                (k.value for k in site.keywords if k.arg == test.left.id), None)
            if isinstance(arg, ast.Name) and arg.id in counters:
                return True
    return False


def _flag_the_site_leaves_off(sem, node: ast.AST, func: ast.AST, site: ast.Call) -> bool:  # type: ignore[no-untyped-def]
    """``node`` under ``if include_misc:`` (or ``if include_misc and not all_atoms:``) of a flag of ``func`` that
    defaults to False and that ``site`` does not pass (``set_time(g, t, device)`` in the sampling loop; another
    caller, run once, passes ``include_misc=True``): the loop's calls never take that branch."""
    if any(k.arg is None for k in site.keywords) or any(isinstance(a, ast.Starred) for a in site.args):
        return False
    shift = 1 if _positional(func)[:1] == ["self"] and isinstance(site.func, ast.Attribute) else 0
    given = {k.arg for k in site.keywords} | {f"#{i + shift}" for i in range(len(site.args))}
    return _flag_left_off(sem, node, func, given)


def _flag_left_off(sem, node: ast.AST, func: ast.AST, given: set[str] | frozenset[str]) -> bool:  # type: ignore[no-untyped-def]
    """``node`` sits under a test of a False-defaulting flag of ``func`` that a call giving ``given`` (keyword names,
    ``#i`` for the i-th positional parameter, ``self`` counted) does not pass."""
    args = func.args  # type: ignore[attr-defined]
    positional = _positional(func)
    defaults = dict(zip(positional[len(positional) - len(args.defaults):], args.defaults))
    defaults.update((a.arg, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None)
    for test, holds in sem.guards.branch_tests(node):
        if not holds:
            continue
        names = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
        for name in names:
            if isinstance(name, ast.Name) and isinstance(d := defaults.get(name.id), ast.Constant) and d.value is False \
                    and (b := sem.binding_at(name.id, node)) is not None and b.is_param and name.id not in given \
                    and not (name.id in positional and f"#{positional.index(name.id)}" in given):
                return True
    return False


def _positional(func: ast.AST) -> list[str]:
    return [a.arg for a in func.args.posonlyargs + func.args.args]  # type: ignore[attr-defined]


def _loops_a_model(sem, func: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``func`` runs a model in a loop of its own (a decoding loop, a validation's batches): each call is a whole
    run, and what it makes before that loop, it makes once a run."""
    return any(isinstance(n, ast.Call) and sem.loops_around(n) and sem.function_of(next(iter(sem.loops_around(n)))) is func
               and (flow.consumer_kind(sem, n) == "model" or _helper_runs_a_model(sem, n) or _model_method(sem, n))
               for n in sem.local_nodes(func))


def _chosen_by_caller(ctx: Context, node: ast.AST, func: ast.AST) -> bool:
    """``node`` sits in a branch that a string option of the helper picks (``if distribution == "uniform":``):
    which branch runs each step is the caller's choice, not seen here."""
    params = {a.arg for a in func.args.args + func.args.kwonlyargs}  # type: ignore[attr-defined]
    for up in ctx.semantic.ancestors(node):
        if up is func:
            return False
        if isinstance(up, ast.If) and isinstance(t := up.test, ast.Compare) and len(t.comparators) == 1 and \
                any(isinstance(a, ast.Name) and a.id in params for a in (t.left, *t.comparators)) and \
                any(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in (t.left, *t.comparators)):
            return True
    return False


def project_step_caller(ctx: Context, node: ast.AST) -> str | None:
    """``def to_matrix(t): m = torch.zeros(...).to(t.device)``, a module-level function of this module that a batch loop
    of another module of the project calls on every step: where that loop is (``the loop that calls `to_matrix` at
    train.py:9``), else None."""
    sem = ctx.semantic
    func = sem.function_of(node)
    if func is None or sem.project is None or any(sem.loop_kind(loop) is not None for loop in sem.loops_around(node)) \
            or sem.under_step_guard(node):
        return None  # (a loop of the helper's own over the batch's rows, ``for i in range(y.size(0)):``, makes more)
    if sem.frame(func).kind == "class" and sem.function_of(func) is None:
        return _step_of_a_method(ctx, func)  # (``algorithm.update(batches)``, ``trainer.dis_step(stats)``)
    if sem.frame(func).kind != "module":
        return None
    if sem.call_sites(func) and not _only_dead_classes_call(sem, func):
        # (called here only by forwards of classes nothing builds: its callers elsewhere decide; or by a helper of
        # this module that a loop of another module calls every step: ``dual(a, b)`` calling ``info_nce`` twice)
        return _step_caller_of_a_local_helper(ctx, node, func)
    callers = [c for c in sem.project.step_callers(sem, func)  # type: ignore[attr-defined]
               if "*" in c.passed or not _flag_left_off(sem, node, func, c.passed)]
    if not callers and not (not sem.loops_around(node) and _loops_a_model(sem, func)):
        callers = [c for c in sem.project.model_loop_callers(sem, func)  # type: ignore[attr-defined]
                   if "*" in c.passed or not _flag_left_off(sem, node, func, c.passed)]
        # (not for a whole decoding run a call: what it makes before its own loop, it makes once a run)
    return _the_loop_that_calls(sem, callers, func, func) if callers else None


def _step_caller_of_a_local_helper(ctx: Context, node: ast.AST, func: ast.AST) -> str | None:
    """``func`` is called here by module-level functions (up to two calls up, none of them behind a loop of its own),
    and a batch loop of another module calls ``func`` or one of them every step: where that loop is."""
    sem = ctx.semantic
    todo, seen = [(func, 0)], {id(func)}
    while todo:
        f, depth = todo.pop(0)
        callers = sem.project.step_callers(sem, f)  # type: ignore[attr-defined]
        if callers:
            return _the_loop_that_calls(sem, callers, f, func)
        if depth >= 2:
            continue
        for site in sem.call_sites(f):
            g = sem.function_of(site)
            if g is None or id(g) in seen or sem.frame(g).kind != "module" or sem.loops_around(site):
                continue
            seen.add(id(g))
            todo.append((g, depth + 1))
    return None


def _step_of_a_method(ctx: Context, func: ast.AST) -> str | None:
    """A method of a class (not a network's forward: the model rules' business) that a batch loop of another
    module calls on every step through an object of the class (``GroupDRO.update``), or that such a method calls at
    its top level (``self.get_dis_xy()`` in ``dis_step``): where that loop is."""
    sem = ctx.semantic
    cls = sem.class_of(func)
    for entry in [func] if not sem.call_sites(func) else [*method_entries(ctx, func), func]:
        # (``init_hidden``: called by ``__init__`` here, and by another module's batch loop on every step)
        callers = sem.project.step_callers(sem, entry)  # type: ignore[attr-defined]
        if callers:
            return _the_loop_that_calls(sem, callers, entry, func)
        for base in getattr(cls, "bases", ()):  # ``self.train_step(batch)`` in the batch loop of a base class of
            written = dotted(base)  # another module (SPIN's ``BaseTrainer.train``), overridden here
            if written and sem.class_of(entry) is cls and sem.project.calls_every_step(sem, written, entry.name):  # type: ignore[attr-defined]
                via = f" (which calls `{func.name}`)" if entry is not func else ""  # type: ignore[attr-defined]
                return f"the batch loop of `{written}` that calls `self.{entry.name}()`{via}"  # type: ignore[attr-defined]
    return None


def _the_loop_that_calls(sem, callers: list, entry: ast.AST, func: ast.AST) -> str:  # type: ignore[no-untyped-def]
    """How a message names the first of the loops elsewhere that call ``entry`` (which calls ``func``, if another)."""
    here = os.path.dirname(os.path.abspath(sem.path))
    first = min(callers, key=lambda c: (c.path, c.line))
    via = f" (which calls `{func.name}`)" if entry is not func else ""  # type: ignore[attr-defined]
    return f"the loop that calls `{entry.name}`{via} at {os.path.relpath(first.path, here)}:{first.line}"  # type: ignore[attr-defined]
