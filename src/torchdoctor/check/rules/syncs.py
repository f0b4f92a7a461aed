"""Stage 6 rules, the implicit host-device syncs of a step (TD603): a tensor tested by ``if``/``assert``,
a device tensor written into a host tensor, ``GradScaler.get_scale()``, ``torch.cuda.synchronize()``,
``%``-formatting and TensorBoard's ``add_scalar`` of a device tensor.

The explicit reads (``.item()``, ``.cpu()``, ``print(t)``, f-strings) are in ``steps.py``; these are the
ones a reader does not see as a read: Python asks the tensor for a bool, or copies it element-wise.
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from torchdoctor.check.astutil import call_argument, dotted, strip_methods
from torchdoctor.check.patterns import lazy
from torchdoctor.check.registry import rule
from torchdoctor.check.rules.bounded import branch_no_caller_chooses, few_in_range
from torchdoctor.check.rules.perf import _scaler_names
from torchdoctor.check.rules.waits import CLOCKS, SYNCHRONIZE, legacy_item, legacy_item_used_as_a_tensor, \
    timed_iteration, timer_call
from torchdoctor.check.rules.forward_values import computed_in_forward, forward_value, reached_from_forward
from torchdoctor.check.rules.host_values import SAME_PLACE, batch_on_device, computed_from_moved, host_number, \
    is_sync_call, made_on_host, meter_feeds, module_state, tensor_value
from torchdoctor.check.rules.steps import report_for_base_loop, per_step_loop, report_sync, report_sync_for_callers
from torchdoctor.check.semantic import program
from torchdoctor.check.semantic.placement import cpu_only_loop

if TYPE_CHECKING:
    from torchdoctor.check.context import Context

# reductions whose result is a 0-d tensor still on the device: ``t.max() > 1`` asks it for a bool
_REDUCTIONS = frozenset({"min", "max", "all", "any", "sum", "mean", "norm", "amax", "amin", "abs", "isnan",
                         "isinf", "isfinite", "count_nonzero", "eq", "ne", "gt", "lt", "ge", "le"})
_TORCH_TESTS = frozenset({"torch.isnan", "torch.isinf", "torch.isfinite", "torch.any", "torch.all", "torch.equal",
                          "torch.allclose", "torch.is_nonzero", "torch.min", "torch.max", "torch.amin", "torch.amax",
                          "torch.sum", "torch.mean", "torch.norm", "torch.count_nonzero"})
_COMPARISONS = frozenset({"torch.eq", "torch.ne", "torch.gt", "torch.lt", "torch.ge", "torch.le"})
_LOSSISH_CALL = lazy(r"(?i)(loss|cross_entropy|criterion|nll|mse)")
_HOST_TENSORS = ("torch.zeros", "torch.ones", "torch.empty", "torch.full", "numpy.zeros", "numpy.ones", "numpy.empty",
                 "numpy.full")


def _accelerated(ctx: Context) -> bool:
    sem = ctx.semantic
    return program.runs_on_accelerator(sem) and not program.is_rpc_program(sem)


def _report(ctx: Context, node: ast.AST, what: str) -> None:
    """At a site that runs every step of a loop of this file, or of a helper that another module calls from its
    batch loop (``utils.clip_gradients``'s ``if clip_coef < 1:``), on an accelerator. (The project is asked only
    about a site already known to read a device tensor: few in a file.)"""
    if branch_no_caller_chooses(ctx, node):
        return  # (``elif distance == "l_2":`` of a loss every call of which passes ``"l_inf"``)
    loop = per_step_loop(ctx, node)
    if loop is not None:
        if _accelerated(ctx) and not few_in_range(ctx, loop) and not cpu_only_loop(ctx.semantic, loop):
            report_sync(ctx, node, what, loop)  # (``for i in range(9)``: a grid of 9 images shown; a CPU trainer's loop)
    elif not program.is_rpc_program(ctx.semantic):
        report_sync_for_callers(ctx, node, what)  # (callers that run on an accelerator only)


def _handed_device_tensors(ctx: Context, name: ast.Name, at: ast.AST, depth: int) -> bool:
    """``yhat`` of ``def accuracy(yhat, y)``, a helper of this file every call of which hands it a device tensor at that
    place (``accuracy(torch.sigmoid(model(x)), y)`` after the model moved): one on the device here too."""
    sem = ctx.semantic
    b = sem.binding_at(name.id, at)
    func = b.node if b is not None and b.is_param else None
    if depth > 1 or func is None or isinstance(func, ast.Lambda) or sem.function_of(func) is not None \
            or sem.class_of(func) is not None:
        return False
    return sem.cached(("handed_device_tensors", func, name.id, depth),  # type: ignore[no-any-return]
                      lambda: _all_sites_hand_device_tensors(ctx, func, name, depth))


def _all_sites_hand_device_tensors(ctx: Context, func: ast.AST, name: ast.Name, depth: int) -> bool:
    sites = ctx.semantic.call_sites(func)
    if not all(isinstance(site.func, ast.Name) and site.func.id == func.name for site in sites):  # type: ignore[attr-defined]
        return False  # (through ``partial(helper, flag)`` or an alias: the arguments sit in other places)
    return bool(sites) and all(isinstance(arg := call_argument(site, func, name.id), ast.Name)  # type: ignore[arg-type]
                               and _device_tensor_name(ctx, arg, site, depth + 1) for site in sites)


def _device_tensor_name(ctx: Context, expr: ast.AST, at: ast.AST, depth: int = 0) -> str | None:
    """``expr`` names a tensor the program keeps on the device (its kind is known to be a tensor)."""
    if isinstance(expr, ast.Name):
        sem = ctx.semantic
        loop = sem.enclosing_loop(at, "batch")
        if loop is not None and expr.id in sem.batch_vars(loop):  # batch data is on the host until it is moved
            return expr.id if batch_on_device(ctx, expr.id, at, loop) and not host_number(ctx, expr, at) else None
            # (``num_lb, num_ulb = img_x.shape[0], img_u_w.shape[0]``: sizes of the batch are host ints)
        if sem.kind_of(expr.id, at) != "tensor" and not _derived_in_another_module(ctx, expr, at) \
                and not _backpropagated_param(ctx, expr, at) \
                and not (loop is not None and computed_from_moved(ctx, expr.id, at, loop)) \
                and not _handed_device_tensors(ctx, expr, at, depth) and not _item_of_a_moved_batch(ctx, expr, at, depth):
            return None  # (``pos_total = (label != 0).sum()`` of a batch moved element by element: on the device)
        return None if host_number(ctx, expr, at) or made_on_host(ctx, expr, at) else expr.id
    if isinstance(expr, ast.Attribute) and (ctx.semantic.expr_kind(expr, at) == "tensor" or expr.attr == "grad"
                                            or _meter_of_device_tensors(ctx, expr, at)):
        return ctx.name(expr)  # (``p.grad``: a gradient lives where its parameter does)
    if isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Attribute) and expr.value.attr == "data" \
            and isinstance(expr.value.value, ast.Name) and isinstance(expr.slice, ast.Constant) and depth < 2:
        return ctx.name(expr) if _device_tensor_name(ctx, expr.value.value, at, depth + 1) else None  # ``loss.data[0]``
    if isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Subscript) and depth < 2 \
            and isinstance(expr.slice, (ast.Name, ast.Constant)):  # ``selector[j][1]``: an element of a row
        return ctx.name(expr) if _device_tensor_name(ctx, expr.value, at, depth + 1) else None
    if isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Name) and (
            isinstance(expr.slice, (ast.Name, ast.Constant)) or isinstance(expr.slice, ast.Tuple) and all(
                isinstance(e, (ast.Name, ast.Constant)) for e in expr.slice.elts)) \
            and _device_tensor_name(ctx, expr.value, at, depth) and (ctx.semantic.kind_of(expr.value.id, at) == "tensor"
                                                                     or _handed_device_tensors(ctx, expr.value, at, depth)):
        return ctx.name(expr)  # ``preds[i]``: one element of a device tensor, read for its truth value
    if isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Attribute) and isinstance(expr.value.value, ast.Name) \
            and not expr.value.attr.startswith(("num_", "n_")) and expr.value.attr not in ("shape", "stride") \
            and isinstance(expr.slice, (ast.Constant, ast.UnaryOp)):  # (``images.shape[0]``: a Python int)
        sem = ctx.semantic
        loop = sem.enclosing_loop(at, "batch")
        name = expr.value.value.id
        if loop is not None and name in sem.batch_vars(loop) and batch_on_device(ctx, name, at, loop) \
                and sem.is_moved(name, at):
            return ctx.name(expr)  # ``batch.batch[-1]`` of a PyG batch moved whole: an element of one of its tensors
    return None


def _item_of_a_moved_batch(ctx: Context, name: ast.Name, at: ast.AST, depth: int) -> bool:
    """``n`` of ``for lg, y, n in zip(logits, ys, lengths)`` where ``lengths`` is an element of the batch the step moved
    (``batch = [b.to(device) for b in batch]; x, ys, lengths = batch``): a 0-dim device tensor."""
    from torchdoctor.check.rules.host_values import iterated_source

    if depth > 2:
        return False
    sem = ctx.semantic
    b = sem.binding_at(name.id, at)
    if b is None or b.value is not None or b.is_param:
        return False
    source = iterated_source(ctx, name.id, b.node)
    loop = sem.enclosing_loop(at, "batch")
    return isinstance(source, ast.Name) and loop is not None and source.id in sem.batch_vars(loop) \
        and batch_on_device(ctx, source.id, at, loop)


_METER_READS = frozenset({"avg", "val", "sum", "mean", "average", "value"})


def _meter_of_device_tensors(ctx: Context, expr: ast.Attribute, at: ast.AST) -> bool:
    """``top1.avg`` of ``top1 = AverageMeter()`` that this function feeds device tensors (``top1.update(prec1[0],
    n)`` of ``prec1 = accuracy(outputs.data, targets.data)``, no ``.item()``): the meter's sums are device tensors,
    so formatting its average reads one back."""
    sem = ctx.semantic
    if expr.attr not in _METER_READS or not isinstance(expr.value, ast.Name):
        return False
    name = expr.value.id
    b = sem.binding_at(name, at)
    made = b.value if b is not None and not b.is_param and b.index is None else None
    if not isinstance(made, ast.Call) or not (dotted(made.func) or "").rsplit(".", 1)[-1][:1].isupper():
        return False
    for call in meter_feeds(sem, name, sem.scope_of(at)):
        if call.func.attr != "update" or not call.args or sem.binding_at(name, call) is not b:  # type: ignore[attr-defined]
            continue
        arg = call.args[0]
        base = arg.value if isinstance(arg, ast.Subscript) and isinstance(arg.slice, ast.Constant) else arg
        if isinstance(base, ast.Name) and _device_tensor_name(ctx, base, call) is not None:
            return True
    return False


def _backpropagated_param(ctx: Context, name: ast.Name, at: ast.AST) -> bool:
    """A parameter the function backpropagates (``def optimize(self, loss): ... loss.backward()``): a loss tensor; or a
    name bound in the loop and backpropagated there (``loss = masked_l1(...)``, ``loss.backward()``)."""
    sem = ctx.semantic
    b = sem.binding_at(name.id, at)
    func = sem.function_of(at)
    if b is None:
        return False
    if not b.is_param:
        loop = sem.enclosing_loop(at, "batch")
        return loop is not None and b.value is not None and b.index is None and sem.contains(loop, b.node) and any(
            isinstance(c.func, ast.Attribute) and isinstance(c.func.value, ast.Name) and c.func.value.id == name.id
            and not c.args and sem.contains(loop, c) and sem.binding_at(name.id, c) is b for c in sem.calls_named("backward"))
    return b.node is func and any(
        isinstance(c.func, ast.Attribute) and isinstance(c.func.value, ast.Name) and c.func.value.id == name.id
        and sem.function_of(c) is func for c in sem.calls_named("backward"))


def _derived_in_another_module(ctx: Context, name: ast.Name, at: ast.AST) -> bool:
    """``reduced_loss = reduce_mean(loss, n)`` where ``utils.reduce_mean`` is tensor arithmetic on its parameters
    (``rt = t.clone(); dist.all_reduce(rt); rt /= n; return rt``): a tensor where ``loss`` is. (Asked only here, of
    names a sync reads: the project's summaries are not read for every call.)"""
    sem = ctx.semantic
    b = sem.binding_at(name.id, at)
    call = b.value if b is not None and not b.is_param and b.index is None else None
    head = (dotted(call.func) or "").split(".")[0] if isinstance(call, ast.Call) else ""
    if sem.project is None or not head or head not in sem.names.imports and head not in sem.names.relative \
            or not any(sem.expr_kind(a, call) == "tensor" for a in call.args if isinstance(a, (ast.Name, ast.Attribute))):
        return False
    return getattr(sem.project.function_for(sem, call), "returns", None) == "derived"  # type: ignore[attr-defined]


def _tested_tensor(ctx: Context, expr: ast.AST, at: ast.AST) -> str | None:
    """The tensor whose truth value ``expr`` (an ``if``/``assert`` test) asks for, if any."""
    if isinstance(expr, ast.BoolOp):
        for v in expr.values:
            if isinstance(expr.op, ast.And) and any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod)
                                                    for n in ctx.semantic.subtree(v)):
                return None  # ``step % N == 0 and loss.isnan()``: what follows the step test runs on its steps only
            if (t := _tested_tensor(ctx, v, at)) is not None:
                return t
        return None
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
        return _tested_tensor(ctx, expr.operand, at)
    if isinstance(expr, ast.Attribute) and expr.attr == "data" and isinstance(expr.value, ast.Call):
        return _tested_tensor(ctx, expr.value, at)  # ``if torch.isnan(loss).data:``: the same tensor, its data
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("any", "all") \
            and len(expr.args) == 1 and isinstance(expr.args[0], (ast.GeneratorExp, ast.ListComp)) \
            and ctx.semantic.qualname(expr.func) in (None, "any", "all", "builtins.any", "builtins.all"):
        # ``if any(not torch.isfinite(p.grad).all() for p in params):``: one truth value read per element
        return _tested_tensor(ctx, expr.args[0].elt, at)
    if isinstance(expr, ast.Compare):
        if any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in expr.ops) or any(
                isinstance(v, ast.Constant) and v.value is None for v in expr.comparators):
            return None  # ``x is None``, ``k in batch``, ``x == None`` (a tensor compared to None is plain False)
        return next((t for v in (expr.left, *expr.comparators) if (t := _reduced_tensor(ctx, v, at)
                                                                      or _device_tensor_name(ctx, v, at)
                                                                      or computed_in_forward(ctx, v, at)
                                                                      or module_state(ctx, v, at))), None)
    return _reduced_tensor(ctx, expr, at) or _device_tensor_name(ctx, expr, at)


def _reduced_tensor(ctx: Context, expr: ast.AST, at: ast.AST) -> str | None:
    """``t.max()``, ``t.isnan().any()``, ``torch.isfinite(loss)``: a reduction of a device tensor."""
    if not isinstance(expr, ast.Call):
        return None
    if (ctx.call_name(expr) or "") in _TORCH_TESTS:
        if not expr.args:
            return None
        inner = _reduced_tensor(ctx, expr.args[0], at) or _device_tensor_name(ctx, expr.args[0], at) \
            or forward_value(ctx, expr.args[0], at)
        return f"{dotted(expr.func)}({inner})" if inner and "(" not in inner else inner
    if isinstance(expr.func, ast.Attribute) and expr.func.attr in _REDUCTIONS:
        recv = expr.func.value
        inner = _reduced_tensor(ctx, recv, at) or _tensor_operand(ctx, recv, at) or forward_value(ctx, recv, at)
        return f"{inner}.{expr.func.attr}()" if inner and "(" not in inner else inner
    return None


_SHAPE_READS = frozenset({"numel", "nelement", "size", "dim", "ndimension", "element_size"})


def _tensor_operand(ctx: Context, expr: ast.AST, at: ast.AST, depth: int = 0) -> str | None:
    """The device tensor under elementwise work: ``(y.int() < 0)``, ``(a - b).abs()``, ``x.float()``."""
    if depth > 8:
        return None
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _SHAPE_READS:
        return None  # (``offset + param.numel()``: a Python int, from the tensor's metadata)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in SAME_PLACE:
        return _tensor_operand(ctx, expr.func.value, at, depth + 1)
    if isinstance(expr, ast.Attribute) and expr.attr == "data":  # ``(loss != loss).data.any()``
        return _tensor_operand(ctx, expr.value, at, depth + 1)
    if isinstance(expr, (ast.Compare, ast.BinOp)):
        parts = [expr.left, *expr.comparators] if isinstance(expr, ast.Compare) else [expr.left, expr.right]
        return next((t for p in parts if (t := _tensor_operand(ctx, p, at, depth + 1))), None)
    return _device_tensor_name(ctx, expr, at)


@rule("TD603", ast.If, ast.Assert, ast.IfExp)
def tensor_tested_every_step(node: ast.AST, ctx: Context) -> None:
    """``if torch.isnan(loss):`` / ``assert mask.max() <= 1`` / ``a if loss < 1 else b`` in a step: Python needs a bool,
    so the CPU waits for the GPU to compute the tensor and copies it back, on every step."""
    tensor = _tested_tensor(ctx, node.test, node)  # type: ignore[attr-defined]
    if tensor is not None and (not isinstance(node, ast.IfExp) or _accelerated(ctx)):
        what = "`assert`" if isinstance(node, ast.Assert) else "a conditional expression" if isinstance(node, ast.IfExp) \
            else "`if`"
        _report(ctx, node.test, f"{what} on tensor `{tensor}` (its truth value)")  # type: ignore[attr-defined]


@rule("TD603", ast.Slice)
def tensor_slice_bound_every_step(node: ast.AST, ctx: Context) -> None:
    """``o[:n]`` with ``n`` a 0-dim device tensor (a length the batch carries, ``mask[:, t].sum()``): Python asks the
    tensor for its index value, a read back per slice, on every step."""
    assert isinstance(node, ast.Slice)
    for bound in (node.lower, node.upper):
        if bound is None:
            continue
        name = (_device_tensor_name(ctx, bound, node) or computed_in_forward(ctx, bound, node)) \
            if isinstance(bound, ast.Name) else _tensor_operand(ctx, bound, node) if isinstance(bound, ast.BinOp) else None
        if name is not None:
            _report(ctx, bound, f"slicing with tensor `{name}` as a bound (Python reads its value)")
            return


def _host_tensor(ctx: Context, target: ast.AST, at: ast.AST) -> str | None:
    """``losses`` of ``losses[k] = ...`` when it was made on the host: ``torch.zeros(n)`` without a device."""
    if not (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)):
        return None
    b = ctx.semantic.binding_at(target.value.id, at)
    if b is None or not isinstance(b.value, ast.Call) or (ctx.call_name(b.value) or "") not in _HOST_TENSORS \
            or ctx.semantic.guards.never_together(b.node, at):
        return None
    return None if any(k.arg == "device" for k in b.value.keywords) else target.value.id


def _device_value(ctx: Context, value: ast.AST, at: ast.AST) -> str | None:
    """The value written is a tensor of the step: a model output, a loss call, a device tensor name."""
    if isinstance(value, ast.Call):
        if is_sync_call(value):
            return None  # ``losses[k] = loss.item()``: the ``.item()`` is reported where it is
        if ctx.semantic.is_model_call(value) or isinstance(value.func, ast.Subscript) and (key := dotted(
                value.func.value)) and ctx.semantic.kind_of(key, value) in ("model", "wrapper"):
            return f"{ctx.name(value.func)}(...)"  # (``heads[i](x[:, i])``: a layer of a ModuleList)
        callee = value.func.attr if isinstance(value.func, ast.Attribute) else getattr(value.func, "id", "")
        if _LOSSISH_CALL.search(callee or ""):
            return f"{callee}(...)"
    if isinstance(value, (ast.Call, ast.BinOp, ast.Compare)):  # ``100 - 100 * (pred.argmax(1) == y).float().mean()``
        return _tensor_operand(ctx, value, at)
    return _device_tensor_name(ctx, value, at)


@rule("TD603", ast.Assign)
def device_value_into_host_tensor(node: ast.AST, ctx: Context) -> None:
    """``losses = torch.zeros(n)`` then ``losses[k] = loss_fn(logits, y)`` per batch: each write copies a GPU
    scalar into host memory, a blocking device-to-host copy every step."""
    assert isinstance(node, ast.Assign)
    host = _host_tensor(ctx, node.targets[0], node) if len(node.targets) == 1 else None
    what = _device_value(ctx, node.value, node) if host else None
    if what is not None:
        _report(ctx, node, f"writing `{what}` into host array `{host}` (made without a device)")


_SCALER_NAME = lazy(r"(^|\.|_)scaler$", re.IGNORECASE)  # ``loss_scaler``: timm's and Swin's NativeScaler wrappers


@rule("TD603", calls=("get_scale", "state_dict"))
def scale_read_every_step(node: ast.Call, ctx: Context) -> None:
    """``scaler.get_scale()`` returns a Python float: it calls ``.item()`` on the scale tensor;
    ``scaler.state_dict()`` (or a wrapper's, which returns its GradScaler's) calls it and reads the growth tracker."""
    recv = dotted(node.func.value) if isinstance(node.func, ast.Attribute) else None
    if recv is None:
        return
    if node.func.attr == "get_scale":  # type: ignore[attr-defined]
        if recv in _scaler_names(ctx):
            _report(ctx, node, f"`{recv}.get_scale()` (an `.item()` on the scale tensor)")
    elif recv in _scaler_names(ctx) or _SCALER_NAME.search(recv):
        _report(ctx, node, f"`{recv}.state_dict()` (GradScaler.state_dict() reads its scale and growth tracker with "
                           "`.item()`)")


@rule("TD603", calls=("synchronize",))
def synchronize_every_step(node: ast.Call, ctx: Context) -> None:
    """``torch.cuda.synchronize()`` on every step waits for all queued GPU work; right only to time a step
    (a clock read beside it), where it is left alone."""
    if (ctx.call_name(node) or "") not in SYNCHRONIZE:
        return
    sem = ctx.semantic
    loop = per_step_loop(ctx, node)
    func = sem.function_of(node)
    if loop is None and func is not None and not any(
            isinstance(n, ast.Call) and ((ctx.call_name(n) or "") in CLOCKS or timer_call(n) or _reports_time(n))
            for n in sem.local_nodes(func)):  # (an override of a step method a base class's loop calls)
        report_for_base_loop(ctx, node, f"`{ctx.call_name(node)}()`")
    if loop is None or not _accelerated(ctx):
        return
    region = sem.body(loop) if sem.contains(loop, node) else sem.local_nodes(func) if func is not None else []
    if any(isinstance(n, ast.Call) and ((ctx.call_name(n) or "") in CLOCKS or timer_call(n) or _async_copy_to_host(n)
                                         or _reports_time(n)) for n in region) or _inside_a_timer(ctx, node) or sem.contains(loop, node) and timed_iteration(ctx, loop) \
            or not sem.contains(loop, node) and _loop_reads_a_clock(ctx, loop):
        return  # timing the step (the sync makes the clock honest), or waiting for a non_blocking copy to land
    report_sync(ctx, node, f"`{ctx.call_name(node)}()`", loop)


def _loop_reads_a_clock(ctx: Context, loop: ast.AST) -> bool:
    """The loop that runs a helper's ``torch.cuda.synchronize()`` reads the clock itself, or through a function or
    method of the file (``sync(device); prof.tick("forward")`` with ``tick`` of ``prof = Profiler()`` calling
    ``time.perf_counter()``): the helper's sync times the step."""
    sem = ctx.semantic
    for n in sem.body(loop):
        if not isinstance(n, ast.Call):
            continue
        if (ctx.call_name(n) or "") in CLOCKS or timer_call(n):
            return True
        if any(isinstance(c, ast.Call) and (ctx.call_name(c) or "") in CLOCKS for f in sem.resolve(n)
               for c in sem.local_nodes(f)):
            return True
    return False


_TIMER_NAME = lazy(r"(?i)timer|stopwatch|timing|timeit|profil")
_TIME_REPORT = lazy(r"(?i)^((report|log|print|record|show|measure)_?(time|timing|elapsed)\w*|tick|lap)$")


def _reports_time(call: ast.Call) -> bool:
    """``logger.report_time("Forwarding")``, ``prof.tick("step")``: a method, of any module, named for reporting the
    time since its last call: the synchronize beside it makes that clock honest."""
    return isinstance(call.func, ast.Attribute) and bool(_TIME_REPORT.match(call.func.attr))


def _inside_a_timer(ctx: Context, node: ast.AST) -> bool:
    """``with Stopwatch("step"):`` around the synchronize, whose ``__exit__`` reads the clock (a class of this file),
    or a context manager named for timing: the sync makes the clock honest."""
    sem = ctx.semantic
    for up in sem.ancestors(node):
        if isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return False
        if not isinstance(up, (ast.With, ast.AsyncWith)):
            continue
        for item in up.items:
            made = item.context_expr
            name = dotted(made.func if isinstance(made, ast.Call) else made) or ""
            if _TIMER_NAME.search(name.rsplit(".", 1)[-1]):
                return True
            cls = sem.calls_index.classes.get(ctx.call_name(made) or "") if isinstance(made, ast.Call) else None
            methods = [f for f in getattr(cls, "body", []) if isinstance(f, ast.FunctionDef)
                       and f.name in ("__enter__", "__exit__")]
            if any(isinstance(n, ast.Call) and (ctx.call_name(n) or "") in CLOCKS for f in methods
                   for n in sem.local_nodes(f)):
                return True
    return False


def _async_copy_to_host(call: ast.Call) -> bool:
    """``t.to("cpu", non_blocking=True)`` / ``t.cpu(non_blocking=True)``: the host must wait before reading it."""
    if not any(k.arg == "non_blocking" for k in call.keywords) or not isinstance(call.func, ast.Attribute):
        return False
    if call.func.attr == "cpu":
        return True
    first = call.args[0] if call.func.attr == "to" and call.args else None
    return first is not None and "cpu" in (first.value if isinstance(first, ast.Constant) and isinstance(first.value, str)
                                           else dotted(first) or "")


def _string_template(expr: ast.AST) -> bool:
    """``"%.4g"``, ``("%11s" * 2 + "%11.4g" * 5)``: a printf-style template."""
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, str)
    return isinstance(expr, ast.BinOp) and (_string_template(expr.left) or _string_template(expr.right))


@rule("TD603", ast.BinOp)
def tensor_printf_every_step(node: ast.AST, ctx: Context) -> None:
    """``"%11.4g" % (*mloss, n)`` formats each element of a device tensor: one read back per element."""
    assert isinstance(node, ast.BinOp)
    if not isinstance(node.op, ast.Mod) or not _string_template(node.left):
        return
    values = node.right.elts if isinstance(node.right, ast.Tuple) else [node.right]
    for v in values:
        inner = strip_methods(v.value if isinstance(v, ast.Starred) else v, SAME_PLACE)  # (``loss.detach()``)
        # (``"%.3f" % (running / (i + 1))``: arithmetic on a device tensor is one too)
        name = _device_tensor_name(ctx, inner, node) or (_tensor_operand(ctx, inner, node) if isinstance(inner, ast.BinOp)
                                                         else None)
        if name is not None:
            _report(ctx, v, f"formatting tensor `{name}` with `%`")  # (at the tensor: the template may start lines above)
            return


@rule("TD603", calls=("format",))
def tensor_str_format_every_step(node: ast.Call, ctx: Context) -> None:
    """``'loss {:.4f}'.format(loss)`` formats a device tensor: one read back, as an f-string's."""
    if not (isinstance(node.func, ast.Attribute) and _string_template(node.func.value)):
        return
    for v in [*node.args, *(k.value for k in node.keywords)]:
        inner = strip_methods(v.value if isinstance(v, ast.Starred) else v, SAME_PLACE)  # ``loss.detach()``
        name = _device_tensor_name(ctx, inner, node) or (_tensor_operand(ctx, inner, node) if isinstance(inner, ast.BinOp)
                                                         else None)
        if name is not None:
            _report(ctx, v, f"formatting tensor `{name}` with `str.format`")
            return


@rule("TD603", ast.Subscript)
def legacy_scalar_read_every_step(node: ast.AST, ctx: Context) -> None:
    """``epoch_loss.append(loss.data[0])``: PyTorch 0.3's spelling of ``loss.item()``, a read back of the loss on every
    step (and, since 0.4, an IndexError on a 0-dim tensor)."""
    if not (legacy_item(node) and isinstance(node.ctx, ast.Load)):  # type: ignore[attr-defined]
        return  # (the cheap shape test first: every subscript of every file comes here)
    value = node.value  # type: ignore[attr-defined]
    up = ctx.semantic.parent(node)
    if isinstance(up, ast.Call) and isinstance(up.func, ast.Name) and up.func.id in ("float", "int", "bool", "str"):
        return  # (``float(loss.data[0])``: the conversion's own read, reported as such)
    if legacy_item_used_as_a_tensor(ctx, node):
        return  # (``torch.sum(pred.data[0] == target.data[0])``: the first image of a batch, indexed, not read)
    inner = value.value
    if isinstance(inner, ast.Call):  # ``F.mse_loss(output, target).data[0]``: a loss torch computes
        counted = isinstance(inner.func, ast.Attribute) and inner.func.attr in ("sum", "mean") \
            and isinstance(inner.func.value, ast.Call) and (ctx.call_name(inner.func.value) or "") in _COMPARISONS
        if not counted and (ctx.semantic.expr_kind(inner, node) != "tensor"
                            or not _LOSSISH_CALL.search(dotted(inner.func) or "")):
            return  # (``torch.eq(pred, y).sum().data[0]``: a count of hits, read back as well)
    elif not tensor_value(ctx, inner, node) or host_number(ctx, inner, node) \
            or not _LOSSISH_CALL.search(inner.id) and ctx.semantic.kind_of(inner.id, node) != "tensor":
        return
    _report(ctx, node, f"`{ctx.name(node)}` (PyTorch 0.3's `.item()`)")


@rule("TD603", calls=("add_scalar", "add_scalars", "add_histogram"))
def tensor_logged_every_step(node: ast.Call, ctx: Context) -> None:
    """``writer.add_scalar("loss", loss, step)`` with a device tensor: TensorBoard copies it to the host
    (``.cpu().numpy()``) on every call."""
    if not isinstance(node.func, ast.Attribute) or len(node.args) < 2:
        return
    given = node.args[1]
    values = given.values if isinstance(given, ast.Dict) and node.func.attr == "add_scalars" else [given]
    for value in values:  # (``add_scalars("loss", {"sup": loss_sup, "con": loss_con}, step)``: each one)
        name = _device_tensor_name(ctx, value, node) or _reduced_tensor(ctx, value, node)
        if name is None and isinstance(value, (ast.Name, ast.Attribute)) and tensor_value(ctx, value, node):
            name = ctx.name(value)
        if name is None and isinstance(value, ast.BinOp):  # ``torch.sum(m) / m.numel()``: arithmetic of a device value
            name = next((t for side in (value.left, value.right) if (t := _reduced_tensor(ctx, side, node)
                                                                   or _device_tensor_name(ctx, side, node))), None)
        if name is not None:
            _report(ctx, node, f"`{ctx.name(node.func)}` of tensor `{name}` (TensorBoard copies it to the host)")
            return
