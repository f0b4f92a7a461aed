"""Stage 6 rules, the steps of a loop: which loop runs a node on every step (through helper calls, and
through the loops of other modules that call this one), ``empty_cache()`` per step (TD602), and the
explicit host-device reads of a step (TD603: ``.item()``, ``.cpu()``, ``print(t)``, f-strings, helpers of
other modules that read their arguments back). The implicit reads are in ``syncs.py``."""

from __future__ import annotations

import ast
import builtins
import os
from typing import TYPE_CHECKING

from torchdoctor.check.astutil import FACTORIES, call_argument, dotted, is_none, method_name, param_default, root_name
from torchdoctor.check.patterns import lazy
from torchdoctor.check.registry import rule
from torchdoctor.check.rules.bounded import branch_no_caller_chooses, few_in_range, few_iterations, first_pass_only, last_pass_only, made_once, \
    retry_loop, while_few_kept
from torchdoctor.check.rules.host_values import SYNC_METHODS, before_the_first_move, host_copy_of_cpu_data, host_number, \
    made_on_host, state_names, sync_site, tensor_value
from torchdoctor.check.rules.kept import collected_on_host, copied_for_a_checkpoint, phase_without_backward, returned_copy
from torchdoctor.check.rules.waits import after_timing_sync, decoding_stop, drained_at_entry, env_action, read_again, stepped_with, \
    stop_signal
from torchdoctor.check.semantic import flow, program
from torchdoctor.check.semantic.placement import cpu_only_loop
from torchdoctor.check.semantic.loops import EVAL_FUNC
from torchdoctor.check.semantic.call_records import chosen_value, host_args_of
from torchdoctor.check.semantic.forwards import reached_from_forward
from torchdoctor.check.semantic.models import built_nowhere

if TYPE_CHECKING:
    from torchdoctor.check.context import Context


# ---- per-step sites (TD602, TD603) ---------------------------------------------------


def per_step_loop(ctx: Context, node: ast.AST, depth: int = 0) -> ast.AST | None:
    """The batch loop that runs ``node`` on every iteration, unguarded; through helper calls too."""
    sem = ctx.semantic
    if depth == 0 and (any(isinstance(a, ast.Raise) for a in sem.ancestors(node)) or _after_a_return(ctx, node)
                       or _under_a_guard_never_true(ctx, node)):
        return None  # an error message is built once, on the way out; code after a ``return`` never runs
    loop = sem.enclosing_loop(node, "batch")
    if loop is not None:
        if sem.under_step_guard(node, loop) or sem.in_handler(node, loop) or sem.in_exit_branch(node, loop) \
                or first_pass_only(ctx, node, loop) or last_pass_only(ctx, node, loop) or retry_loop(ctx, node, loop) \
                or few_iterations(ctx, loop) \
                or while_few_kept(ctx, node, loop) or _visual_debug_branch(ctx, node, loop):
            return None
        return loop
    func = sem.function_of(node)
    if func is None and depth < 3 and isinstance(lam := sem.scope_of(node), ast.Lambda) and not sem.under_step_guard(node):
        for call in _lambda_calls(ctx, lam):  # ``to_np = lambda t: t.detach().cpu().numpy()``, then ``to_np(loss)``
            found = per_step_loop(ctx, call, depth + 1)
            if found is not None:
                return found
        return None
    if func is None or depth >= 3 or sem.under_step_guard(node):
        return None
    for call in [*sem.call_sites(func), *_handed_on(ctx, func), *_instance_calls(ctx, func)]:
        if fills_a_none_branch(sem, node, func, call):
            continue  # (``self.decode(state, z)`` in forward; ``if z is None: z = torch.randn(...)`` is for others)
        found = per_step_loop(ctx, call, depth + 1)
        if found is not None and not _evaluation_pass(ctx, node, func, found) and not _other_mode_branch(ctx, node, found):
            return found
    return None


def _under_a_guard_never_true(ctx: Context, node: ast.AST) -> bool:
    """``if epoch_sep_loss: epoch_sep_loss += sep_loss.item()`` with ``epoch_sep_loss = 0`` before the loop: the name is
    set to a false constant, and changed only inside the ``if`` it guards, so the body never runs."""
    sem = ctx.semantic
    for up in sem.ancestors(node):
        if isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return False
        if not (isinstance(up, ast.If) and isinstance(up.test, ast.Name) and any(sem.contains(s, node) for s in up.body)):
            continue
        name, region = up.test.id, sem.function_of(up)
        if region is None and (sem.enclosing_loop(up, "batch") is None or any(
                name in g.names for g in sem.of_type(ast.Global))):  # type: ignore[attr-defined]
            return False  # (a module's flag, unless the script's own loop tests it and no function sets it)
        if region is not None and name in {a.arg for a in (*region.args.posonlyargs, *region.args.args,  # type: ignore[attr-defined]
                                                           *region.args.kwonlyargs)}:  # type: ignore[attr-defined]
            return False  # (a parameter its callers set)
        falsy = inside = False  # (a switch the user edits, ``log_every_step = False``, changes nowhere: live code)
        for n in sem.local_nodes(region) if region is not None else sem.body(sem.tree):
            if isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names:
                return False
            targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, (ast.AugAssign, ast.AnnAssign)) \
                else [n.target] if isinstance(n, (ast.For, ast.AsyncFor)) else []
            if not any(isinstance(m, ast.Name) and m.id == name for t in targets for m in sem.subtree(t)):
                continue
            if any(sem.contains(s, n) for s in up.body):
                inside = True
                continue  # (changed only where the guard already holds)
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and not n.value.value:
                falsy = True
                continue
            break
        else:
            if falsy and inside:
                return True
    return False


def fills_a_none_branch(sem, node: ast.AST, func: ast.AST, site: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``node`` sits under ``if z is None:`` of a parameter of ``func`` that defaults to None, and the call ``site``
    passes ``z`` (a VAE's forward calling ``self.decode(state, z)``): that call never takes the branch."""
    if not isinstance(site, ast.Call) or any(k.arg is None for k in site.keywords) \
            or any(isinstance(a, ast.Starred) for a in site.args):
        return False
    filled = [t.left.id for t, holds in sem.guards.branch_tests(node)
              if holds and isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Is)
              and isinstance(t.left, ast.Name) and is_none(t.comparators[0]) and is_none(param_default(func, t.left.id))
              and (b := sem.binding_at(t.left.id, node)) is not None and b.is_param]
    return bool(filled) and all(call_argument(site, func, name) is not None for name in filled)


def _other_mode_branch(ctx: Context, node: ast.AST, loop: ast.AST) -> bool:
    """``node`` sits in the branch of ``if self.training:`` that the loop's mode never takes: the ``else`` (an
    evaluation's exact decoding) in a training loop, the body in an evaluation loop."""
    sem = ctx.semantic
    kind = sem.loop_kind(loop)
    if kind not in ("train", "eval"):
        return False
    runs_in_training = next((holds for test, holds in sem.guards.branch_tests(node) if dotted(test) == "self.training"),
                            None)
    return runs_in_training is not None and runs_in_training != (kind == "train")


def _evaluation_pass(ctx: Context, node: ast.AST, func: ast.AST, loop: ast.AST) -> bool:
    """``func`` is a whole evaluation (it sets eval mode, ``node`` runs without autograd, no batch loop of its own)
    that a full-batch training loop calls once per step: its metrics are read once per evaluation, as after an
    evaluation loop (``for split in ("train", "val"): acc = pred[m].eq(y[m]).sum().item()``)."""
    sem = ctx.semantic
    named = bool(EVAL_FUNC.search(func.name)) and "backward" not in sem.effects(func) and any(  # type: ignore[attr-defined]
        isinstance(n, ast.Call) and flow.consumer_kind(sem, n) == "model" for n in sem.local_nodes(func))
    # (``score_model(epoch)``, named for an evaluation, running the model and training nothing, without ``.eval()``:
    # TD401/TD402's business; not ``accuracy_fn(y, pred)``, a metric read on every step)
    return ("eval" in sem.effects(func) or named) and sem.enclosing_loop(node, "batch") is None \
        and "backward" in sem.cached(("loop_effects", loop, False), lambda: sem.region_effects(sem.body(loop))) \
        and (named or sem.grad_mode(node) == "off" or phase_without_backward(ctx, node, func))


def _lambda_calls(ctx: Context, lam: ast.Lambda) -> list[ast.Call]:
    """The calls of a lambda bound to a name (``to_np = lambda t: ...``): ``to_np(loss)``."""
    sem = ctx.semantic
    stmt = sem.parent(lam)
    if not (isinstance(stmt, ast.Assign) and stmt.value is lam and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)):
        return []
    name = stmt.targets[0].id
    return [call for r in sem.reads_of(name) if isinstance(call := sem.parent(r), ast.Call) and call.func is r
            and (b := sem.binding_at(name, r)) is not None and b.value is lam]


def _instance_calls(ctx: Context, func: ast.AST) -> list[ast.Call]:
    """The calls of a loss module's ``forward``: ``crit(pred, labels)`` with ``crit = BoxLoss(...)`` made in this
    file from its class here (YOLO losses that read targets back to the host in a helper method). Models are left
    to the rules about them: only a class whose instances' results are backpropagated."""
    sem = ctx.semantic
    cls = sem.class_of(func)
    if func.name != "forward" or cls is None or cls.name not in sem.module_classes:  # type: ignore[attr-defined]
        return []
    def compute() -> list[ast.Call]:  # (``head = DetHead().to(device)``)
        return [call for call in sem.object_calls(cls.name)  # type: ignore[attr-defined]
                if sem.feeds_backward(call) or _in_a_forward(sem, call)] + _injected_calls(sem, cls)

    return sem.cached(("instance_calls", cls.name), compute)  # type: ignore[no-any-return]


def _injected_calls(sem, cls: ast.ClassDef) -> list[ast.Call]:  # type: ignore[no-untyped-def]
    """``Parent(Step())``: an instance handed to another module class of the file, which keeps it
    (``self.step = step``) and calls it in its ``forward`` (``self.step(x, h)``): those calls run it."""
    out = []
    for made in sem.calls_named(cls.name):
        outer = sem.parent(made)
        if isinstance(outer, ast.keyword):
            param, outer = outer.arg, sem.parent(outer)
        else:
            param = None
        if not isinstance(outer, ast.Call) or (owner_name := (dotted(outer.func) or "").rsplit(".", 1)[-1]) \
                not in sem.module_classes or (owner := sem.calls_index.classes.get(owner_name)) is None:
            continue
        init = next((f for f in owner.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
        if init is None:
            continue
        if param is None:
            params = [a.arg for a in init.args.args[1:]]
            index = next((i for i, a in enumerate(outer.args) if a is made), None)
            param = params[index] if index is not None and index < len(params) else None
        attrs = {t.attr for n in sem.local_nodes(init) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Name)
                 and n.value.id == param for t in n.targets if isinstance(t, ast.Attribute)
                 and isinstance(t.value, ast.Name) and t.value.id == "self"}
        for f in owner.body:
            if attrs and isinstance(f, ast.FunctionDef) and f.name == "forward":
                out += [c for c in sem.local_nodes(f) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                        and c.func.attr in attrs and isinstance(c.func.value, ast.Name) and c.func.value.id == "self"]
    return out


def _in_a_forward(sem, call: ast.Call) -> bool:  # type: ignore[no-untyped-def]
    """``self.crit(s, t)`` in ``Wrapper.forward``: a part of a module class of the file, run by its forward (whose own
    instances' calls are then asked the same)."""
    func = sem.function_of(call)
    cls = sem.class_of(func) if func is not None else None
    return func is not None and func.name == "forward" and cls is not None and cls.name in sem.module_classes


def _handed_on(ctx: Context, func: ast.AST) -> list[ast.Call]:
    """Calls in the scope that defines ``func`` that take it as an argument and run it: ``loss = timer(train_step)``
    for a ``def train_step()`` written inside the loop."""
    sem = ctx.semantic
    scope = sem.scope_of(func)
    return [p for r in sem.reads_of(func.name) if isinstance(p := sem.parent(r), ast.Call)  # type: ignore[attr-defined]
            and r in p.args and sem.scope_of(p) is scope]


@rule("TD602", calls=("empty_cache",))
def empty_cache_per_step(node: ast.Call, ctx: Context) -> None:
    """`torch.cuda.empty_cache()` inside the training loop.

    What it does: finds `empty_cache()` that runs on every batch (in a batch loop,
    or in a helper called from one), not behind a `step % N` guard or in an
    `except` handler. Between epochs or trials it is fine.
    Why is this bad? It returns cached blocks to the driver, so the next step must
    allocate them again (slow, synchronising), and frees nothing this process still uses.
    Use instead: remove it; call it between epochs or phases if another process needs the memory.
    """
    if ctx.call_name(node) != "torch.cuda.empty_cache":
        return
    loop = per_step_loop(ctx, node)
    loss = loss_forward_class(ctx, node) if loop is None else None
    if loop is None and loss is None or loop is not None and (_whole_runs(ctx, loop) or _drops_the_model_it_built(ctx, loop)):
        return
    where = "every step" if loss is None else f"every step (in the forward of the loss `{loss.name}`)"
    ctx.report(
        "TD602",
        node,
        f"`torch.cuda.empty_cache()` runs {where}: the allocator must re-acquire the memory next step "
        "and nothing is freed for this process",
        fix="remove it from the step (at most call it between epochs)",
    )


def _drops_the_model_it_built(ctx: Context, loop: ast.AST) -> bool:
    """Each pass builds a model, runs it and drops it (``model = create_model(); ... output, model = None, None`` or
    ``del model``): a trial a pass (a memory profile per input size), so ``empty_cache()`` runs between trials. A step
    that drops its loss and output (``del loss, out``) drops no model: nothing in it is called as one."""
    sem = ctx.semantic
    body = sem.body(loop)
    dropped = {t.id for n in body if isinstance(n, ast.Delete) for t in n.targets if isinstance(t, ast.Name)}
    for n in body:
        if isinstance(n, ast.Assign) and len(n.targets) == 1:
            target, value = n.targets[0], n.value
            pairs = zip(target.elts, value.elts) if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) \
                and len(target.elts) == len(value.elts) else [(target, value)]
            dropped |= {t.id for t, v in pairs if isinstance(t, ast.Name) and is_none(v)}
    built = {n.targets[0].id for n in body if isinstance(n, ast.Assign) and len(n.targets) == 1
             and isinstance(n.targets[0], ast.Name) and n.targets[0].id in dropped and isinstance(n.value, ast.Call)}
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in built for n in body)


_LOADERISH = lazy(r"(?i)loader|dataset|\bdata\b")


def _whole_runs(ctx: Context, loop: ast.AST) -> bool:
    """A loop whose every pass is a whole run, not a step: nothing in it backpropagates or steps an optimizer,
    and its body loops itself or hands a loader on (``for loaders in list_of_loaders: ... m.fit(loaders["train"])``,
    one dataset, one ensemble member a pass): ``empty_cache()`` there runs between trials."""
    sem = ctx.semantic
    body = sem.body(loop)
    if {"backward", "step"} & sem.region_effects(body, True):
        return False  # (through the functions of the project it calls too)
    if any(isinstance(n, ast.Call) and sem.is_device_move(n) and next(iter(sem.loops_around(n)), None) is loop
           for n in body):
        return False  # (``batch = batch.to(device)``, then a loop over its time steps: a batch a pass)
    return any(isinstance(n, (ast.For, ast.While, ast.comprehension)) for n in body) or any(
        isinstance(n, ast.Call) and any(_LOADERISH.search(sem.segment(a)) for a in [*n.args, *(k.value for k in n.keywords)])
        for n in body)


@rule("TD603", calls=("item", "cpu", "tolist", "float", "int", "bool", "str", "to_python_float", "print", "log10", "log", "log2", "sqrt", "exp", "isnan",
                    "isinf", "isfinite", "floor", "ceil", "max", "min"))
def sync_every_step(node: ast.Call, ctx: Context) -> None:
    """Host-device synchronisation every step.

    What it does: in a CUDA program, finds `.item()`, `.cpu()`, `.tolist()`,
    `float(t)` and `print(t)` that run on every batch of a training or evaluation
    loop, not behind a `step % N` guard. A CPU-only program is never told.
    Why is this bad? The CPU waits for the GPU to finish all queued work before it
    can read the value: the GPU idles while the next step is being queued.
    Use instead: accumulate on the device (`total += loss.detach()`) and read it
    every N steps or once per epoch.
    """
    what = sync_site(ctx, node)  # (first: most calls of these names are no sync at all: ``torch.log(x)``)
    if what is None or program.is_rpc_program(ctx.semantic) or ctx.semantic.guards.on_cpu_branch(node) \
            or copied_for_a_checkpoint(ctx, node) or branch_no_caller_chooses(ctx, node) or _number_fallback(ctx, node) \
            or _stepped_by_lbfgs(ctx, node):
        return  # (RPC programs copy to the CPU on purpose: RPC sends host tensors; a checkpoint reads its tensors)
    loop = per_step_loop(ctx, node)
    if loop is None:
        report_sync_for_callers(ctx, node, what)  # (the caller runs on an accelerator)
        report_for_base_loop(ctx, node, what)
        _report_in_a_loss_forward(ctx, node, what)
        _report_in_a_model_forward(ctx, node, what)
        _report_in_an_engine_step(ctx, node, what)
        _report_in_a_lightning_step(ctx, node, what)
        return
    if not program.runs_on_accelerator(ctx.semantic) or cpu_only_loop(ctx.semantic, loop) or few_in_range(ctx, loop):
        return
    if isinstance(node.func, ast.Attribute) and node.func.attr in SYNC_METHODS \
            and (host_copy_of_cpu_data(ctx, node, loop) or collected_on_host(ctx, node, loop)
                 or stop_signal(ctx, node, loop) or env_action(ctx, node, loop) or decoding_stop(ctx, node, loop)
                 or _stage_on_the_host(ctx.semantic, node) or _decoded_to_text(ctx, node, loop)):
        return
    report_sync(ctx, node, what, loop)


_SHOW_FLAG = lazy(r"(?i)^(vis|visuali[sz]e|visuali[sz]ation|show|show_?images?|plot|draw|debug|save_?(img|imgs|images?|vis|fig|figs))$")


def _visual_debug_branch(ctx: Context, node: ast.AST, loop: ast.AST) -> bool:
    """``if args.vis: vis_data(images, targets)`` (or ``if visualize:`` around heat maps written out per image): a
    branch a flag named for drawing turns on, whose copies to the host are what it draws; off, it never runs."""
    sem = ctx.semantic
    child = node
    for up in sem.ancestors(node):
        if up is loop:
            return False
        if isinstance(up, ast.If) and any(s is child for s in up.body) and isinstance(up.test, (ast.Name, ast.Attribute)) \
                and _SHOW_FLAG.match((dotted(up.test) or "").rsplit(".", 1)[-1]):
            return True
        child = up
    return False


_DECODES = lazy(r"(?i)^(decode|decode_ids|batch_decode|decode_batch|convert_ids_to_tokens|detokeni[sz]e|ids_to_text|"
               r"ids_to_tokens|to_text|seq2sen|idx2sent)$")


def _decoded_to_text(ctx: Context, node: ast.Call, loop: ast.AST) -> bool:
    """``tokenizer_en.decode_ids(generation.tolist())`` in a loop that trains nothing: generated ids turned into
    text, which only the host can do; there is nothing to keep on the device (and the generation read the GPU back
    at every token to stop)."""
    up = ctx.semantic.parent(node)
    return isinstance(up, ast.Call) and node in up.args and isinstance(up.func, (ast.Attribute, ast.Name)) \
        and bool(_DECODES.match(up.func.attr if isinstance(up.func, ast.Attribute) else up.func.id)) \
        and "backward" not in ctx.semantic.region_effects(ctx.semantic.body(loop))


def _stepped_by_lbfgs(ctx: Context, node: ast.AST) -> bool:
    """The read sits in a function that runs an L-BFGS step (``loss = optimizer.step(closure)`` of ``optimizer =
    optim.LBFGS(...)``), or in the closure handed to it: L-BFGS reads the loss back itself, several times a step,
    so one more read waits for nothing new (a full-batch PDE solve)."""
    sem = ctx.semantic
    stepping = sem.cached("lbfgs_steppers", lambda: _lbfgs_steppers(sem))
    func = sem.function_of(node)
    while func is not None and stepping:
        if func in stepping:
            return True
        func = sem.function_of(func)
    return False


def _lbfgs_steppers(sem) -> frozenset:  # type: ignore[no-untyped-def]
    """The functions of the file that call ``.step(closure)`` of an optimizer bound to ``LBFGS(...)`` (once a file)."""
    out = set()
    for c in sem.calls_named("step"):
        if c.args and isinstance(c.func, ast.Attribute) and isinstance(c.func.value, ast.Name) \
                and (b := sem.binding_at(c.func.value.id, c)) is not None and not b.is_param \
                and isinstance(b.value, ast.Call) and (sem.call_name(b.value) or "").rsplit(".", 1)[-1] == "LBFGS" \
                and (func := sem.function_of(c)) is not None:
            out.add(func)
    return frozenset(out)


def _number_fallback(ctx: Context, node: ast.AST) -> bool:
    """``try: vals.append(metric.item())`` / ``except: vals.append(metric)``: the code expects ``metric`` may be a
    Python number already (a metric function that returns ``.item()``), for which ``.item()`` raises; whether the
    read waits for the GPU depends on a value this file does not show."""
    if not (isinstance(node, ast.Call) and method_name(node) == "item" and isinstance(node.func.value, ast.Name)):  # type: ignore[attr-defined]
        return False
    name = node.func.value.id  # type: ignore[attr-defined]
    sem = ctx.semantic
    child = node
    for up in sem.ancestors(node):
        if isinstance(up, ast.Try) and any(s is child for s in up.body):
            return any(isinstance(n, ast.Name) and n.id == name and not isinstance(sem.parent(n), ast.Attribute)
                       for h in up.handlers for st in h.body for n in sem.subtree(st))
        if isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef, ast.For, ast.While)):
            return False
        child = up
    return False


def _after_a_return(ctx: Context, node: ast.AST) -> bool:
    """``return`` (or ``raise``) earlier in a block around ``node``, in its function: dead code that never runs."""
    return any(isinstance(s, (ast.Return, ast.Raise)) for s in ctx.semantic.index.earlier_statements(node))


def _copies_a_parameter(ctx: Context, node: ast.Call, func: ast.AST) -> bool:
    """``torch.argmax(start_logits, -1).cpu()``: what is copied is computed from a parameter of ``func`` (what the
    caller handed it), not from a tensor the helper made on the device itself."""
    sem = ctx.semantic
    todo, seen = [node.func.value], set()  # type: ignore[attr-defined]
    while todo and len(seen) < 12:  # (``outputs = net(input); out = torch.argmax(outputs, 1); out.cpu()``: a few hops)
        expr = todo.pop()
        for n in sem.subtree(expr):
            if not isinstance(n, ast.Name) or (n.id, id(expr)) in seen or _sizes_a_new_tensor(ctx, n):
                continue
            seen.add((n.id, id(expr)))
            b = sem.binding_at(n.id, n)
            if b is not None and b.is_param and b.node is func:
                return True
            if b is not None and not b.is_param and b.value is not None and sem.function_of(b.node) is func:
                todo.append(b.value)
    return False


def _sizes_a_new_tensor(ctx: Context, name: ast.Name) -> bool:
    """``torch.randn(size, device="cuda")``: the name only sizes a tensor the helper makes itself."""
    up = ctx.semantic.parent(name)
    return isinstance(up, ast.Call) and name in up.args and (ctx.call_name(up) or "").startswith("torch.") \
        and (ctx.call_name(up) or "").rsplit(".", 1)[-1] in FACTORIES


def _of_an_input(ctx: Context, node: ast.Call, func: ast.AST) -> bool:
    """The copied value comes from a parameter of ``func`` (``item`` of ``for item, n in zip(inputs, lengths)``),
    not from a tensor the helper made on the device itself."""
    sem = ctx.semantic
    name = root_name(node.func.value) if isinstance(node.func, ast.Attribute) else None
    at: ast.AST = node
    for _ in range(6):
        b = sem.binding_at(name, at) if name else None
        if b is None:
            return False
        if b.is_param:
            return b.node is func
        if b.value is None:  # a loop target: what the loop takes its items from
            loop = sem.parent(b.node)
            iters = loop.iter.args if isinstance(loop, ast.For) and isinstance(loop.iter, ast.Call) \
                and dotted(loop.iter.func) in ("zip", "enumerate") else [getattr(loop, "iter", None)]
            name, at = next((n.id for n in iters if isinstance(n, ast.Name)), None), loop
            continue
        value = b.value
        if isinstance(value, ast.Call) and not isinstance(value.func, ast.Attribute):
            # ``anchors = clip_boxes(regress(anchors, deltas), x)``: what a call makes of its first argument
            value = next((a for a in value.args if not isinstance(a, ast.Constant)), value)
            if isinstance(value, ast.Call) and not isinstance(value.func, ast.Attribute):
                value = next((a for a in value.args if not isinstance(a, ast.Constant)), value)
        name, at = root_name(value), b.node
    return False


def report_sync(ctx: Context, node: ast.AST, what: str, loop: ast.AST | str, fix: str | None = None) -> None:
    sem = ctx.semantic
    if not isinstance(loop, str) and (after_timing_sync(ctx, node, loop) or read_again(ctx, node, loop)
                                      or drained_at_entry(ctx, node, loop)):
        return
    if isinstance(loop, str) and (func := sem.function_of(node)) is not None and read_again(ctx, node, func):
        return  # (in a helper a loop elsewhere calls: an earlier read of the helper's own body drained the queue)
    stmt = sem.statement_of(node)
    told: set[int] = sem.memo.setdefault("td603_statements", set())  # type: ignore[assignment]
    if stmt is not None:
        if id(stmt) in told:
            return  # one statement, one finding: ``crit(p.detach().cpu(), t.detach().cpu())`` waits once
        told.add(id(stmt))
    where = loop if isinstance(loop, str) else f"the loop at line {loop.lineno}"  # type: ignore[attr-defined]
    fix = fix or "keep values on the device (`total += loss.detach()`) and read them every N steps or per epoch"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("max", "min") \
            and len(node.args) == 2 and (bound := next((a for a in node.args if isinstance(a, ast.Constant)), None)):
        tensor = next(a for a in node.args if a is not bound)  # ``max(num_pos.sum().float(), 1)``: stay on the device
        side = "min" if node.func.id == "max" else "max"
        fix = f"clamp on the device instead: `{ctx.name(tensor)}.clamp({side}={ctx.name(bound)})`"
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("max", "min"):
        fix = (f"read it once with `int({ctx.name(node.args[0])}.{node.func.id}())`, or keep a host copy of it "
               "(lengths as the loader made them)")
    tested = node.operand if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not) else node
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "data":
        fix = (f"`{ctx.name(node.value)}[0]` fails on PyTorch 0.4 and later for a 0-dim loss: keep "
               f"`total += {ctx.name(node.value.value)}.detach()` and call `.item()` every N steps or per epoch")
    elif isinstance(tested, ast.Subscript):  # ``if same[i]:``, ``if not same[i]:`` per element: one read of the whole
        fix = (f"copy `{ctx.name(tested.value)}` to the host once (`.tolist()`) before walking its elements, or "
               "count on the device with a mask")  # tensor instead
    ctx.report("TD603", node, f"{what} synchronises with the GPU on every step of {where}", fix=fix)


def report_for_base_loop(ctx: Context, node: ast.AST, what: str) -> None:
    """A method a base class of another module calls on every step (``self.forward_backward(data)`` in
    ``Engine.train``'s batch loop), overridden here: its sync runs every step."""
    sem = ctx.semantic
    func, cls = sem.function_of(node), sem.class_of(node)
    if func is None or cls is None or sem.project is None or sem.call_sites(func) or sem.under_step_guard(node) \
            or not program.runs_on_accelerator(sem) or sem.enclosing_loop(node, "batch") is not None:
        return
    if isinstance(node, ast.Call) and method_name(node) in ("cpu", "tolist", "numpy") and any(
            sem.guards.grad_call(d) in ("off", "maybe") for d in func.decorator_list):  # type: ignore[attr-defined]
        return  # ``@torch.no_grad() def pred_step(self, batch)``: a prediction step's outputs, copied to be kept
    for base in cls.bases:  # type: ignore[attr-defined]
        written = dotted(base)
        if written and sem.class_of(func) is cls and sem.project.calls_every_step(sem, written, func.name):  # type: ignore[attr-defined]
            report_sync(ctx, node, what, f"the batch loop of `{written}` that calls `self.{func.name}()`")
            return


_LOSS_CLASS = lazy(r"(?i:criterion|loss)$|Loss|(^|_)loss")  # (``SetCriterion``, ``TripletLossVaryingLength``, not ``Gloss``)


def _report_in_a_loss_forward(ctx: Context, node: ast.AST, what: str) -> None:
    """A read in the ``forward`` of a loss module (DETR's ``SetCriterion``, whose ``num_boxes = torch.clamp(...).item()``
    normalises every step's loss; OpenNMT's ``LossCompute``): a loss is computed on every training step, wherever the
    object is handed (a builder of another module returns it, a train function of a third calls it), so on an
    accelerator the read runs every step. Asked of modules that run on one, or that a module which does imports."""
    cls = loss_forward_class(ctx, node)
    if cls is None:
        return
    func = ctx.semantic.function_of(node)
    if ctx.semantic.grad_mode(node) == "off" and _returned_by(ctx.semantic, node, func):  # type: ignore[arg-type]
        return  # (``with torch.no_grad(): f_max = diff.abs().max().item()`` then ``return loss, f_max``: statistics the
        # loss hands its caller as numbers, on purpose: an L-BFGS driver's, which needs host values anyway)
    report_sync(ctx, node, what, f"the training loop that computes the loss `{cls.name}` (its forward)")  # type: ignore[attr-defined]


def loss_forward_class(ctx: Context, node: ast.AST) -> ast.ClassDef | None:
    """The loss module class (the one the program builds) whose ``forward`` runs ``node`` on every training step, in a
    program on an accelerator (not under a step guard of its own): else None."""
    sem = ctx.semantic
    func = sem.function_of(node)
    cls = sem.class_of(func) if func is not None else None
    if cls is None or func.name != "forward" or not _LOSS_CLASS.search(cls.name) \
            or cls.name not in sem.module_classes or sem.under_step_guard(node):  # type: ignore[attr-defined]
        return None
    sites = sem.call_sites(func)
    heirs = _loss_heirs(sem, cls, sites) if sites else []
    if heirs is None:
        return None  # (called as a function of the file: its callers' loops decide)
    if all(built_nowhere(sem, h) for h in heirs) if heirs else built_nowhere(sem, cls):
        return None  # (``CPCLoss`` beside the ``CPCLoss_sameSeq`` the training script builds: no step computes it)
    if heirs:
        cls = heirs[0]  # (the subclass the program builds, whose forward runs this one through ``super()``)
    return cls if _on_an_accelerator(sem, cls) else None


def _report_in_an_engine_step(ctx: Context, node: ast.AST, what: str) -> None:
    """A read in an ignite process function, ``def train(engine, mini_batch)`` (a static method of a subclass of
    ``ignite.engine.Engine``, or a function handed to ``Engine(...)``): the engine's ``run(loader)`` calls it on every
    batch, so on an accelerator the read runs every step."""
    sem = ctx.semantic
    func = sem.function_of(node)
    if func is None or "ignite" not in sem.text.source or sem.under_step_guard(node):
        return  # (a closure of ``train()`` too, as in ignite's own examples: it sees the model and optimizer)
    params = [a.arg for a in func.args.posonlyargs + func.args.args]  # type: ignore[attr-defined]
    cls = sem.class_of(func)
    engine_class = cls is not None and params[:1] == ["engine"] and len(params) == 2 and any(
        (sem.qualname(b) or "").startswith("ignite.engine") for b in cls.bases)  # type: ignore[attr-defined]
    handed = any(isinstance(r, ast.Name) and isinstance(c := sem.parent(r), ast.Call) and c.args[:1] == [r]
                 and (sem.call_name(c) or "").startswith("ignite.engine") for r in sem.reads_of(func.name))  # type: ignore[attr-defined]
    if not (engine_class or handed) or not _on_an_accelerator(sem, cls or func):  # type: ignore[arg-type]
        return
    report_sync(ctx, node, what, f"the ignite engine that runs `{func.name}`")  # type: ignore[attr-defined]


_LIGHTNING_STEPS = frozenset({"training_step", "validation_step", "test_step"})


def _report_in_a_lightning_step(ctx: Context, node: ast.AST, what: str) -> None:
    """A scalar read in a LightningModule's ``training_step``/``validation_step``/``test_step``
    (``self.log("train_loss", loss.item())``): Lightning's loop calls the hook on every batch, so where the program
    trains on an accelerator (its ``Trainer``, here or in a module of the project that imports the class) the read
    waits for the GPU every step; ``self.log`` takes the tensor itself. Only ``.item()`` and number conversions: a
    copy to the host of a step's outputs (``preds.cpu().numpy()`` for a metric) is the collection TD603 leaves alone
    in loops too."""
    sem = ctx.semantic
    func = sem.function_of(node)
    cls = sem.class_of(func) if func is not None else None
    if cls is None or func.name not in _LIGHTNING_STEPS or "ightning" not in sem.text.source \
            or sem.under_step_guard(node) or not (isinstance(node, ast.Call) and (
                method_name(node) == "item" or isinstance(node.func, ast.Name) and node.func.id in ("float", "int"))):  # type: ignore[attr-defined]
        return
    if not any((sem.qualname(b) or dotted(b) or "").rsplit(".", 1)[-1] == "LightningModule" for b in cls.bases):  # type: ignore[attr-defined]
        return
    if not _on_an_accelerator(sem, cls):  # type: ignore[arg-type]
        return
    log = next((up for up in sem.ancestors(node) if isinstance(up, ast.Call) and isinstance(up.func, ast.Attribute)
                and up.func.attr == "log" and dotted(up.func.value) == "self" and up.args), None)
    tensor = ctx.name(node.func.value) if method_name(node) == "item" else ctx.name(node.args[0])  # type: ignore[attr-defined]
    report_sync(ctx, node, what, f"Lightning's loop, which calls `{func.name}` on every batch",  # type: ignore[attr-defined]
                fix=f"hand `self.log` the tensor itself (`self.log({ctx.name(log.args[0])}, {tensor})`): Lightning "
                    "reads it when it logs" if log is not None else None)


def _on_an_accelerator(sem, cls: ast.ClassDef) -> bool:  # type: ignore[no-untyped-def]
    """The module runs on an accelerator, or a module of the project that imports it (or its class ``cls``) does, or
    one module between them (``models/mttr.py``'s ``build``): where a step computes the class's forward."""
    return program.runs_on_accelerator(sem) or sem.project is not None and (
        sem.project.accelerated_importer(sem) or sem.project.accelerated_importer(sem, cls.name)) is not None


_POST_PROCESS = lazy(r"(?i)^post_?process")
_HOST_ARGUMENTS = frozenset({"pack_padded_sequence", "pack_sequence"})


def _report_in_a_model_forward(ctx: Context, node: ast.AST, what: str) -> None:
    """A read in the ``forward`` of a model class of the program (a YOLO layer's ``labels.cpu()`` for its target
    assignment, an encoder's ``length.item()`` per sample): the forward runs on every training or evaluation step, so
    on an accelerator the read does too. Not a copy PyTorch wants on the host (``pack_padded_sequence(x,
    lengths.cpu())``), nor one the forward hands back, nor work behind ``if not self.training:`` (inference
    post-processing), nor a forward this file calls itself (its callers' loops decide)."""
    sem = ctx.semantic
    func = sem.function_of(node)
    cls = sem.class_of(func) if func is not None else None
    if cls is None or _LOSS_CLASS.search(cls.name) or cls.name not in sem.module_classes or sem.under_step_guard(node):
        return
    if func.name != "forward":  # (a method only the forward runs, reading the module's own state back: MoCo's
        # ``_dequeue_and_enqueue`` and its ``int(self.queue_ptr)``; other reads there hand host data on, or run in a
        # fallback the caller picks: ``if mode == "cpu":``)
        if sem.function_of(func) is not None or not _reads_module_state(ctx, node, cls) \
                or not reached_from_forward(sem, func, cls) or sem.guards.on_cpu_branch(node) \
                or any(sem.class_of(s) is not cls for s in sem.call_sites(func)):  # type: ignore[arg-type]
            return
    elif sem.call_sites(func):
        return
    if _lengths_for_packing(sem, node) \
            or isinstance(node, ast.Call) and returned_copy(ctx, node) or _inference_only(sem, node) \
            or _post_processing(sem, func) or _set_once_or_asked(ctx, node, func) or built_nowhere(sem, cls) \
            or _stage_on_the_host(sem, node) or _tried_outside_loops(sem, cls) or not _on_an_accelerator(sem, cls):
        return
    report_sync(ctx, node, what, f"the loop that runs `{cls.name}` (its forward)")  # type: ignore[attr-defined]


def _reads_module_state(ctx: Context, node: ast.AST, cls: ast.ClassDef) -> bool:
    """The read is of a buffer or parameter the module class registers (``int(self.queue_ptr)``)."""
    state = state_names(ctx, cls)
    return bool(state) and any(isinstance(n, ast.Attribute) and n.attr in state and isinstance(n.value, ast.Name)
                               and n.value.id == "self" for n in ctx.semantic.subtree(node))


def _tried_outside_loops(sem, cls: ast.ClassDef) -> bool:  # type: ignore[no-untyped-def]
    """Every object of the class this file makes is a name only called directly, outside any loop (a notebook's scratch
    ``rnn = RNNDropout()``, then ``rnn(a)`` on a sample): its forward runs when the cell runs, not every step."""
    made = [c for c in sem.calls_named(cls.name) if isinstance(c.func, ast.Name)]  # type: ignore[attr-defined]
    if not made:
        return False
    for call in made:
        up = sem.parent(call)
        if not (isinstance(up, ast.Assign) and len(up.targets) == 1 and isinstance(up.targets[0], ast.Name)) \
                or sem.function_of(call) is not None or sem.enclosing_loop(call, "batch") is not None:
            return False
        for r in sem.reads_of(up.targets[0].id):
            if not (isinstance(c := sem.parent(r), ast.Call) and c.func is r) or sem.enclosing_loop(r, "batch") is not None:
                return False
    return True


def _stage_on_the_host(sem, node: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``out = self.flatten(x).cpu()`` in the forward of a model split over devices that puts some of its own layers on
    the CPU in ``__init__`` (``self.fc1 = nn.Linear(784, 512).cpu()``, the next ones ``.to("cuda:0")``): the copy hands
    the activations to the host stage, the design of a CPU-offloaded model, not a read to avoid."""
    def to_host(call: ast.AST) -> bool:
        return isinstance(call, ast.Call) and (method_name(call) == "cpu" and not call.args or method_name(call) == "to"
                                               and (sem.move_device(call) or "").strip("'\"") == "cpu")

    func = sem.function_of(node)
    cls = sem.class_of(func) if to_host(node) and func is not None and func.name == "forward" else None
    return cls is not None and any(isinstance(n, ast.Assign) and to_host(n.value) and (f := sem.function_of(n)) is not None
                                   and f.name == "__init__" for n in sem.subtree(cls))


def _post_processing(sem, func: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """The ``forward`` of a post-processor (DETR's ``PostProcessPanoptic``; a ``@torch.no_grad()`` forward): it turns a
    model's outputs into results for the host (the COCO API), which it must read."""
    cls = sem.class_of(func)
    return func.name == "forward" and cls is not None and (  # type: ignore[attr-defined]
        bool(_POST_PROCESS.match(cls.name)) or any(sem.guards.grad_call(d) == "off" for d in func.decorator_list))  # type: ignore[attr-defined]


def _lengths_for_packing(sem, node: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``pack_padded_sequence(x, lengths.cpu().numpy())``, or ``cap_lens = cap_lens.data.tolist()`` handed to it
    next: PyTorch takes the lengths on the host (where the loader made them, the copy waits for nothing)."""
    cur, up = node, sem.parent(node)
    while isinstance(up, ast.Attribute) and up.attr in ("numpy", "tolist", "data", "long", "int") \
            or isinstance(up, ast.Call) and up.func is cur:
        cur, up = up, sem.parent(up)
    if isinstance(up, ast.Assign) and len(up.targets) == 1 and isinstance(up.targets[0], ast.Name):
        name = up.targets[0].id
        uses = [r for r in sem.reads_of(name) if sem.function_of(r) is sem.function_of(node)
                and (b := sem.binding_at(name, r)) is not None and b.node is up]
        return bool(uses) and all(isinstance(c := sem.parent(r), ast.Call) and r in c.args
                                  and (dotted(c.func) or "").rsplit(".", 1)[-1] in _HOST_ARGUMENTS for r in uses)
    return isinstance(up, ast.Call) and cur in up.args and (dotted(up.func) or "").rsplit(".", 1)[-1] in _HOST_ARGUMENTS


def _set_once_or_asked(ctx: Context, node: ast.AST, func: ast.AST, flags: bool = True) -> bool:
    """``if self.Z_t is None: self.Z_t = (out.mean() * n).item()``: read on the first call only; under ``if
    print_attn_probs:`` of a parameter that defaults to False (a debugging option a caller turns on); or on the path
    a NaN test takes (``if torch.isnan(y).any(): print(mask)``). ``flags=False``: not the debugging options (where the
    callers are known, what they pass decides: ``_may_take_branch``)."""
    sem = ctx.semantic
    if isinstance(node, ast.Call) and made_once(ctx, node, func):
        return True
    for test, holds in sem.guards.branch_tests(node):  # (the tests of this function, ``not`` taken off)
        if not holds:
            continue
        if any(isinstance(c, ast.Call) and (method_name(c) in ("any", "all") or (dotted(c.func) or "").endswith(
                ("isnan", "isinf"))) for c in sem.subtree(test)):
            return True  # (``if torch.isnan(new_y).any(): print(mask)``: a report on a failure path)
        if not flags:
            continue
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.IsNot) \
                and is_none(test.comparators[0]) and isinstance(test.left, ast.Name):
            test = test.left  # (``if plotter is not None:`` of ``plotter=None``: a plot a caller asks for)
        if isinstance(test, ast.Name) and (b := sem.binding_at(test.id, test)) is not None and b.is_param \
                and b.node is func and isinstance(d := param_default(func, test.id), ast.Constant) \
                and d.value in (False, None):  # type: ignore[arg-type]
            return True
    return False


def _inference_only(sem, node: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``node`` runs only when the module is not training (``if not self.training:``, the ``else`` of ``if
    self.training:``, ``if targets is None:`` at inference)."""
    for test, holds in sem.guards.branch_tests(node):  # (the tests of this function, ``not`` taken off)
        if dotted(test) == "self.training" and not holds:
            return True
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.IsNot)) \
                and is_none(test.comparators[0]) and holds == isinstance(test.ops[0], ast.Is) \
                and isinstance(test.left, ast.Name) and test.left.id in ("targets", "target", "labels", "y"):
            return True
    return False


def _loss_heirs(sem, cls: ast.ClassDef, sites: list[ast.Call]) -> list[ast.ClassDef] | None:  # type: ignore[no-untyped-def]
    """The loss classes of the file that run ``cls.forward`` through ``super(...).forward(...)`` (Fast-SCNN's
    ``MixSoftmaxCrossEntropyOHEMLoss`` over ``SoftmaxCrossEntropyOHEMLoss``), when every call of it is such a one;
    else None."""
    out: list[ast.ClassDef] = []
    for site in sites:
        func = site.func
        owner = sem.class_of(site)
        if not (isinstance(func, ast.Attribute) and func.attr == "forward" and isinstance(func.value, ast.Call)
                and dotted(func.value.func) == "super" and owner is not None and owner is not cls
                and any(dotted(b) == cls.name for b in owner.bases) and _LOSS_CLASS.search(owner.name)
                and owner.name in sem.module_classes):
            return None
        if owner not in out:
            out.append(owner)
    return out


def _returned_by(sem, node: ast.AST, func: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """The value read at ``node`` is bound to a name that a ``return`` of ``func`` hands back."""
    stmt = sem.statement_of(node)
    names = {n.id for t in getattr(stmt, "targets", ()) for n in sem.subtree(t) if isinstance(n, ast.Name)}
    return bool(names) and any(isinstance(r, ast.Return) and r.value is not None and any(
        isinstance(n, ast.Name) and n.id in names for n in sem.subtree(r.value)) for r in sem.local_nodes(func))


def _added_to_state(sem, node: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``self.tp += tp.double().cpu()`` in a metric's ``addBatch``: the copy is added to what the object keeps, on
    every call, not handed back to the caller."""
    up = sem.parent(node)
    return isinstance(up, ast.AugAssign) and up.value is node and isinstance(up.target, ast.Attribute) \
        and isinstance(up.target.value, ast.Name) and up.target.value.id == "self"


def report_sync_for_callers(ctx: Context, node: ast.AST, what: str) -> None:
    """A helper with no caller in its own file (``utils.clip_gradients(model, clip)``) whose sync runs on every
    step because another module of the project calls it from its batch loop: reported here, at the sync."""
    sem = ctx.semantic
    func = sem.function_of(node)
    if func is None or sem.project is None or sem.function_of(func) is not None \
            or sem.under_step_guard(node) or sem.enclosing_loop(node, "batch") is not None \
            or _set_once_or_asked(ctx, node, func, flags=False) or _post_processing(sem, func):
        return  # (a method counts: ``eng.fit_batch(x, y)`` of ``eng = Engine(...)`` in another module's loop)
    if sem.call_sites(func):
        if isinstance(node, ast.Call) and method_name(node) in ("cpu", "tolist", "numpy"):
            return
        if _param_roots(ctx, node, func) and all(before_the_first_move(ctx, site) for site in sem.call_sites(func)):
            return  # ``self.round_batch(x, lengths)`` before the step's ``to_cuda``: it reads host tensors
        for entry in method_entries(ctx, func):  # ``self.optimize(loss)`` in ``lm_step``, which another module's loop calls
            callers = sem.project.step_callers(sem, entry)  # type: ignore[attr-defined]
            if callers:
                here = os.path.dirname(os.path.abspath(sem.path))
                site = min(f"{os.path.relpath(c.path, here)}:{c.line}" for c in callers)
                report_sync(ctx, node, what, f"the loop that calls `{entry.name}` (which calls `{func.name}`) at {site}")  # type: ignore[attr-defined]
                return
        return
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "cpu":
        name, at = root_name(node.func.value) or "", node
        for _ in range(4):  # through rebindings of itself: ``if range_norm: tensor = tensor.add(1.0).div(2.0)``
            b = sem.binding_at(name, at)
            if b is None or b.is_param or b.value is None or root_name(b.value) != name:
                break
            at = b.node
        if b is not None and b.is_param and b.node is func:
            return  # ``image.cpu()`` of an input: the caller may well hand it a host batch
    if isinstance(node, ast.Call) and method_name(node) in ("cpu", "tolist", "numpy") and returned_copy(ctx, node) \
            and _of_an_input(ctx, node, func):
        return  # ``remove_pad`` handing its callers host arrays of what they gave it: they keep them on the host
    if sem.class_of(func) is not None and isinstance(node, ast.Call) and method_name(node) in ("cpu", "tolist", "numpy") \
            and not _read_as_a_number(sem, node) and not _added_to_state(sem, node) \
            or stepped_with(ctx, node, sem.local_nodes(func)):
        return  # a method of an object made in another module: its scalar reads are told (``return loss.item()``),
        # not its copies (``upsampler.enhance(img)`` handing back the image it made); nor, in any helper, the action
        # it hands the environment it steps (``self.env.step(a.item())``, ``envs.step(actions)``)
    inner = next(iter(sem.loops_around(node)), None)
    if inner is not None and isinstance(node, ast.Call) and method_name(node) in ("cpu", "numpy", "tolist") \
            and sem.loop_kind(inner) != "train" and collected_on_host(ctx, node, inner):
        return  # ``scores.append(out.detach().cpu())`` in an evaluation helper's own loop: its outputs, kept
    callers = [c for c in sem.project.step_callers(sem, func) if _may_take_branch(ctx, node, func, c)]  # type: ignore[attr-defined]
    if not callers or _reads_host_arguments(ctx, node, func, callers) or decoding_stop(ctx, node):
        return
    if isinstance(node, ast.Call) and method_name(node) in ("cpu", "numpy", "tolist") \
            and all(c.eval_before or c.grad_mode == "off" for c in callers) and _copies_a_parameter(ctx, node, func):
        return  # (``bert_extract_item(start_logits, end_logits)`` decoding an evaluation's outputs on the host)
    here = os.path.dirname(os.path.abspath(sem.path))
    sites = sorted({f"{os.path.relpath(c.path, here)}:{c.line}" for c in callers})
    cls = sem.class_of(func)
    callee = f"{cls.name}.forward" if func.name == "forward" and cls is not None else func.name  # (``crit(out, y)``)
    if len(sites) == 1:
        report_sync(ctx, node, what, f"the loop that calls `{callee}` at {sites[0]}")
    else:
        more = f" and {len(sites) - 2} more" if len(sites) > 2 else ""
        loops = "loops that call" if len({c.path for c in callers}) > 1 else "loop that calls"  # (one file: one loop, mostly)
        report_sync(ctx, node, what, f"the {loops} `{callee}` at {sites[0]}, {sites[1]}{more}")


def _read_as_a_number(sem, copy: ast.Call) -> bool:  # type: ignore[no-untyped-def]
    """``loss.cpu().item()``, ``float(loss.cpu())``: the host copy is read at once as a scalar, not kept."""
    cur, up = copy, sem.parent(copy)
    while isinstance(up, ast.Attribute) and up.attr in ("data", "detach"):  # (``.cpu().data.item()``)
        if up.attr == "detach":
            if not isinstance(call := sem.parent(up), ast.Call) or call.func is not up:
                break
            cur, up = call, sem.parent(call)
        else:
            cur, up = up, sem.parent(up)
    if isinstance(up, ast.Attribute) and up.attr == "item":
        return True
    return isinstance(up, ast.Call) and isinstance(up.func, ast.Name) and up.func.id in ("float", "int") \
        and len(up.args) == 1 and up.args[0] is cur


def method_entries(ctx: Context, func: ast.AST) -> list[ast.AST]:
    """The methods of the class (or of its in-file subclasses) that call ``func`` on every call of their own
    (``self.optimize(loss)`` at the top level of ``mlm_step``, not in a loop or behind a guard), themselves called
    from no code of this file: the entries that another module's loop may call (two levels up at most)."""
    sem = ctx.semantic
    cls = sem.class_of(func)
    if cls is None:
        return []
    entries: list[ast.AST] = []
    todo, seen = [(func, 0)], {func}
    while todo:
        f, depth = todo.pop()
        for site in sem.call_sites(f):
            outer = sem.function_of(site)
            owner = sem.class_of(outer) if outer is not None else None
            if outer is None or outer in seen or sem.function_of(outer) is not None or owner is None or not (
                    owner is cls or sem.calls_index._inherits(owner, cls)) or sem.under_step_guard(site) or any(
                    isinstance(a, (ast.If, ast.For, ast.While, ast.Try)) for a in sem.ancestors(site)
                    if a is not outer and sem.contains(outer, a)):
                continue
            seen.add(outer)
            if not sem.call_sites(outer):
                entries.append(outer)
            elif depth < 1:
                todo.append((outer, depth + 1))
    return sorted(entries, key=lambda e: e.lineno)  # type: ignore[attr-defined]


def _reads_host_arguments(ctx: Context, node: ast.AST, func: ast.AST, callers: list) -> bool:
    """The read's tensor is computed from parameters alone (``(a_len + b_len).max().item()``, ``a_len[i].item()``)
    and every caller hands those parameters host tensors, made in its step before the step moves the batch to the
    device (``CallRecord.host_args``): the read waits for no GPU."""
    found = _param_roots(ctx, node, func)
    if not found:
        return False
    params, used = found
    return all(all(p in c.host_args or f"#{params.index(p)}" in c.host_args  # (or left to its default)
                   or "*" not in c.passed and p not in c.passed and f"#{params.index(p)}" not in c.passed for p in used)
               for c in callers)


_BUILTINS = frozenset(dir(builtins))


def _param_roots(ctx: Context, node: ast.AST, func: ast.AST) -> tuple[list[str], set[str]] | None:
    """(``func``'s parameters, those the read at ``node`` is computed from) when ``node`` is an ``.item()`` or
    ``.tolist()`` of a tensor computed from parameters alone (and loop counters); None otherwise."""
    sem = ctx.semantic
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("item", "tolist")):
        return None
    params = [a.arg for a in func.args.posonlyargs + func.args.args]  # type: ignore[attr-defined]
    if sem.class_of(func) is not None and params[:1] == ["self"]:
        params = params[1:]
    used: set[str] = set()
    return (params, used) if _derived(sem, node.func.value, node, func, params, used, 0) and used else None


def _derived(sem, expr: ast.AST, at: ast.AST, func: ast.AST, params: list[str], used: set[str], depth: int) -> bool:
    """Every name ``expr`` reads is a parameter of ``func`` (added to ``used``), a loop counter over ``range``, a
    builtin or module, or a local computed so (a module-level function: a nested recursive one would be a cycle)."""
    for n in ast.walk(expr):
        if not (isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)):
            continue
        b = sem.binding_at(n.id, at)
        if b is None and (n.id in _BUILTINS or n.id in sem.names.modules):
            continue  # ``len(lengths)``, ``torch.randperm(n)``
        if b is None or depth > 4:
            return False
        if b.is_param:
            if b.node is not func or n.id not in params:
                return False
            used.add(n.id)
        elif b.value is None:  # a loop counter over ``range(...)``: a number
            loop = sem.parent(b.node)
            if not (isinstance(loop, ast.For) and isinstance(loop.iter, ast.Call) and dotted(loop.iter.func) == "range"):
                return False
        elif not _derived(sem, b.value, b.node, func, params, used, depth + 1):
            return False
    return True


def _may_take_branch(ctx: Context, node: ast.AST, func: ast.AST, caller: object) -> bool:
    """``caller`` may run ``node``: not when ``node`` sits under ``if deterministic:`` of a parameter that defaults
    to False (or None) and the caller leaves it out (``select_actions(pi)`` of ``def select_actions(pi,
    deterministic=False)``), or passes False."""
    passed = getattr(caller, "passed", frozenset())
    if "*" in passed:
        return True
    params = [a.arg for a in func.args.posonlyargs + func.args.args]  # type: ignore[attr-defined]
    if ctx.semantic.class_of(func) is not None and params[:1] == ["self"]:
        params = params[1:]  # (a method's call passes its self implicitly)
    for up in ctx.semantic.ancestors(node):
        if up is func:
            return True
        if isinstance(up, ast.If) and isinstance(up.test, ast.Name) and up.test.id in params \
                and any(ctx.semantic.contains(s, node) for s in up.body):
            default = param_default(func, up.test.id)  # type: ignore[arg-type]
            slot = f"#{params.index(up.test.id)}"
            given = up.test.id in passed or slot in passed
            if isinstance(default, ast.Constant) and default.value in (False, None) and not given:
                return False
            if chosen_value(getattr(caller, "choices", ()), given, up.test.id, slot, default) is False:
                return False  # (``anneal_Langevin_dynamics(..., verbose=False)``)
    return True


@rule("TD603", ast.JoinedStr)
def tensor_formatted_every_step(node: ast.AST, ctx: Context) -> None:
    """An f-string that formats a tensor (``f"{loss}"``, ``f"{loss=}"``) reads it back to the host, whatever
    prints or logs the string (``print``, ``accelerator.print``, ``logger.info``, a progress bar)."""
    assert isinstance(node, ast.JoinedStr)
    sem = ctx.semantic
    values = [v.value for v in node.values if isinstance(v, ast.FormattedValue)]
    tensor = next((v for v in values if tensor_value(ctx, v, node)  # also ``{loss.detach().float()}``
                   or isinstance(v, ast.Call) and sem.expr_kind(v, node) == "tensor"
                   or isinstance(v, ast.BinOp) and any(isinstance(o, ast.Name) and tensor_value(ctx, o, node)
                                                       for o in (v.left, v.right))), None)  # ``{total / n:.3f}``
    if tensor is None or not program.runs_on_accelerator(sem) or program.is_rpc_program(sem) or _stepped_by_lbfgs(ctx, node):
        return
    loop = per_step_loop(ctx, node)
    if loop is not None and not cpu_only_loop(sem, loop) and not few_in_range(ctx, loop):
        report_sync(ctx, node, f"formatting tensor `{ctx.name(tensor)}` in an f-string", loop)


@rule("TD603", ast.For, ast.AsyncFor, ast.While)
def sync_in_another_module(loop: ast.AST, ctx: Context) -> None:
    """A step calls a function or method of another module of the project that reads tensors back
    (``metric_logger.update(loss=loss, **loss_dict)`` whose ``update`` calls ``.item()``): the sync happens
    there, on every step; in-file helpers are reported at their own ``.item()``."""
    sem = ctx.semantic
    if sem.project is None or sem.loop_kind(loop) not in ("train", "eval"):
        return  # (the loop's kind first: whether the module runs on an accelerator is a dear question)
    if not program.runs_on_accelerator(sem) or program.is_rpc_program(sem) or cpu_only_loop(sem, loop):
        return  # (a notebook's CPU baseline: ``cpu_model = nn.Linear(4, 2)``, never moved, before its GPU twin)
    for node in sem.body(loop):
        if not isinstance(node, ast.Call) or sem.enclosing_loop(node, "batch") is not loop:
            continue
        ext = sem.external(node)
        effects = getattr(ext, "effects", ())
        if ext is None or "sync" not in effects or getattr(ext, "one_step", False) or per_step_loop(ctx, node) is not loop:
            continue  # (``engine.train(x, y)``, a whole step of another module: its reads are told where they are)
        if sem.loop_kind(loop) == "eval" and ("read" not in effects or _DECODER.search(getattr(ext, "name", ""))):
            continue  # (an evaluation's outputs copied to the host by a post-processing helper: NMS, decoding; one
            # named for what it decodes, ``get_all_boxes``, reads the sizes its decoding needs as well)
        if not _passes_tensors(ctx, node) or _host_tensors_only(ctx, node) or env_action(ctx, node, loop) \
                or len(host_args_of(sem, node)) == len(node.args) + len(node.keywords):
            continue  # (``act = epsilon_pick(q, eps)`` handed to ``env.step``: the environment needs it; a batch
            # handed on before the step moves it: host tensors)
        report_sync(ctx, node, f"`{ctx.name(node.func)}(...)`, which reads tensors back in `{getattr(ext, 'name', '?')}`,",
                     loop)


_DECODER = lazy(r"(?i)box|detection|decod|post_?process|nms")


def _host_tensors_only(ctx: Context, call: ast.Call) -> bool:
    """Every tensor the call is given was made or copied on the host (``process_batch(predn, labelsn, iouv)``
    of CPU copies): what the helper reads back never waits for the GPU."""
    args = [a for a in [*call.args, *(k.value for k in call.keywords)] if not isinstance(a, ast.Constant)
            and not _python_value(ctx, a, call)]
    return bool(args) and all(made_on_host(ctx, a, call) for a in args)


def _python_value(ctx: Context, arg: ast.AST, at: ast.AST) -> bool:
    """``idx`` of ``idx = [1, 2, 3, 4]``, a literal list or a Python number: no tensor at all."""
    if isinstance(arg, (ast.List, ast.Tuple)):
        return all(isinstance(e, ast.Constant) for e in arg.elts)
    if not isinstance(arg, ast.Name):
        return False
    b = ctx.semantic.binding_at(arg.id, at)
    return b is not None and not b.is_param and b.index is None and isinstance(b.value, (ast.List, ast.Tuple)) \
        and all(isinstance(e, ast.Constant) for e in b.value.elts) or host_number(ctx, arg, at)


def _passes_tensors(ctx: Context, call: ast.Call) -> bool:
    """An argument is a tensor (a loss, an output) or a ``**dict`` of them."""
    sem = ctx.semantic
    for arg in [*call.args, *(k.value for k in call.keywords)]:
        if any(k.arg is None and k.value is arg for k in call.keywords):
            if not _dict_of_numbers(ctx, arg, call):
                return True
            continue
        if isinstance(arg, (ast.Name, ast.Attribute)) and tensor_value(ctx, arg, call):
            return True
        if isinstance(arg, ast.Call) and sem.is_model_call(arg):
            return True
        if isinstance(arg, ast.Name) and _tensor_or_none(ctx, arg, call):
            return True
    return False


def _dict_of_numbers(ctx: Context, arg: ast.AST, at: ast.AST) -> bool:
    """``**reduced`` of ``reduced = {k: v.item() for k, v in ...}``: a dict of Python numbers, read already."""
    b = ctx.semantic.binding_at(arg.id, at) if isinstance(arg, ast.Name) else None
    value = b.value if b is not None and not b.is_param and b.index is None else None
    return isinstance(value, ast.DictComp) and isinstance(value.value, ast.Call) \
        and isinstance(value.value.func, ast.Attribute) and value.value.func.attr in ("item", "tolist")


def _compared_then_reduced(value: ast.AST) -> bool:
    """``(out.max(-1)[-1] == y).float().mean()``: an elementwise comparison turned into numbers by tensor methods (a
    Python bool has no ``.float()``): a tensor."""
    methods = 0
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and not value.args \
            and value.func.attr in ("float", "sum", "mean", "long", "double", "half", "int"):
        value, methods = value.func.value, methods + 1
    return methods > 0 and isinstance(value, ast.Compare) and len(value.ops) == 1 \
        and isinstance(value.ops[0], (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE))


def _tensor_or_none(ctx: Context, name: ast.Name, at: ast.AST) -> bool:
    """``class_acc = (out.argmax(-1) == y).float().mean()`` in one branch, ``class_acc = None`` in the other: every
    binding of the name in its function is a tensor or None, one at least a tensor."""
    sem = ctx.semantic
    scope = sem.scope_of(at)
    values = [b for b in sem.bindings_of(name.id) if b.scope is scope]
    if len(values) < 2 or any(b.is_param or b.value is None or b.index is not None for b in values):
        return False
    kinds = [None if isinstance(b.value, ast.Constant) and b.value.value is None else
             "tensor" if _compared_then_reduced(b.value) else sem.expr_kind(b.value, b.node) for b in values]
    return "tensor" in kinds and all(k in (None, "tensor") for k in kinds) and \
        sum(isinstance(b.value, ast.Constant) and b.value.value is None for b in values) + kinds.count("tensor") == len(values)
