"""Stage 5 rules, results back on the host: `.numpy()` on a tensor that may be on a GPU or require grad (TD501).
`torch.load`/`torch.save` safety and pickled models are in ``results.py``."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from torchdoctor.check.astutil import call_argument, dotted, keyword, method_name, root_name, strip_methods
from torchdoctor.check.registry import rule
from torchdoctor.check.semantic import frozen, models, placement, program
from torchdoctor.findings import Edit

if TYPE_CHECKING:
    from torchdoctor.check.context import Context


# ---- TD501 ---------------------------------------------------------------------

_HOST = (False, False)  # (may be on a GPU, may require grad)
# Results that never require grad (integer/bool tensors, detached views).
_NO_GRAD_METHODS = frozenset({"detach", "argmax", "argmin", "argsort", "long", "int", "bool", "eq", "ne", "gt",
                              "lt", "ge", "le", "isnan", "isfinite", "nonzero", "byte", "short"})


# torch functions whose result is an integer or bool tensor: it never requires grad.
_INTEGER_RESULTS = frozenset({"argmax", "argmin", "argsort", "isnan", "isinf", "isfinite", "nonzero", "eq", "ne", "gt",
                              "lt", "ge", "le", "searchsorted", "bucketize", "multinomial", "logical_and", "logical_or",
                              "logical_not"})
# ``values, indices = t.max(dim)``: the second (``[1]``, ``.indices``) is an integer tensor.
_WITH_INDICES = frozenset({"max", "min", "topk", "sort", "kthvalue", "mode", "median"})


# Tensor fields of a transformers model output.
_OUTPUT_FIELDS = frozenset({"logits", "last_hidden_state", "pooler_output", "start_logits", "end_logits",
                            "image_embeds", "text_embeds"})


def _with_indices(ctx: Context, expr: ast.AST) -> bool:
    """``q.max(1)`` or ``torch.topk(q, 5)``: a call that hands back (values, indices)."""
    if not isinstance(expr, ast.Call):
        return False
    name = ctx.call_name(expr) or ""
    return (name.rsplit(".", 1)[-1] if name.startswith("torch.") else method_name(expr)) in _WITH_INDICES


def _binding_value(ctx: Context, name: str, at: ast.AST) -> ast.AST | None:
    """The value last assigned to ``name`` before ``at``; None if unknown (a parameter, a loop target:
    ``for inputs, labels in val_loader`` re-binds a name, so an earlier move no longer holds)."""
    b = ctx.semantic.binding_at(name, at)
    if b is None or b.is_param or b.value is None or b.index is not None:
        return None
    return b.value


def _is_empty_list(value: ast.AST | None) -> bool:
    if isinstance(value, ast.List):
        return not value.elts
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "list" and not value.args


def _appended(ctx: Context, name: str, at: ast.AST) -> list[ast.AST]:
    """What ``name.append(v)`` / ``name.extend(v)`` add to a list in the scope of ``at``."""
    sem = ctx.semantic
    scope = sem.scope_of(at)
    return [n.args[0] for n in sem.calls_named("append", "extend")
            if isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) and n.func.value.id == name
            and len(n.args) == 1 and sem.scope_of(n) is scope]


_INTEGER_FIELDS = frozenset({"labels", "classes", "class_ids", "indices", "idx", "ids"})  # detector outputs, ids


def _returned_element(ctx: Context, expr: ast.AST, index: int, at: ast.AST) -> list[ast.AST] | None:
    """``losses = self.update_model(x)`` then ``losses[0]``: element ``index`` of every tuple the functions of this
    file that the call runs hand back (None when a return is no tuple that long, or nothing resolves)."""
    sem = ctx.semantic
    if isinstance(expr, ast.Name):
        b = sem.binding_at(expr.id, at)
        expr = b.value if b is not None and not b.is_param and b.index is None and b.value is not None else expr
    funcs = sem.resolve(expr) if isinstance(expr, ast.Call) else []
    values = [sem.kinds.returned_values(f, index) for f in funcs]
    if not funcs or any(v is None for v in values):
        return None
    return [x for v in values for x in v]  # type: ignore[union-attr]


def _or(*flags: tuple[bool, bool]) -> tuple[bool, bool]:
    return (any(f[0] for f in flags), any(f[1] for f in flags))


def _flags(ctx: Context, expr: ast.AST, depth: int = 0) -> tuple[bool, bool]:
    """Whether the tensor ``expr`` may live on a GPU and may require grad, as far as the file shows."""
    if depth > 8:
        return _HOST
    sem = ctx.semantic
    if isinstance(expr, ast.Name):
        value = _binding_value(ctx, expr.id, expr)
        if _is_empty_list(value):  # outputs = []; outputs.append(model(x)); torch.cat(outputs)
            return _or(_HOST, *(_flags(ctx, v, depth + 1) for v in _appended(ctx, expr.id, expr)))
        if value is not None:  # follows moves too: `.to("cpu")` lands on the host
            return _flags(ctx, value, depth + 1)
        return (True, False) if sem.is_moved(expr.id, expr) else _HOST
    if isinstance(expr, ast.Attribute):
        if expr.attr in _OUTPUT_FIELDS:  # ``model(**batch).logits``: the model's output tensor
            return _flags(ctx, expr.value, depth + 1)
        if expr.attr == "indices" and _with_indices(ctx, expr.value):
            return (_flags(ctx, expr.value, depth + 1)[0], False)
        return (_flags(ctx, expr.value, depth + 1)[0], False) if expr.attr in ("data", "grad") else _HOST
    if isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Constant) and expr.slice.value == 1 \
            and _with_indices(ctx, expr.value):
        return (_flags(ctx, expr.value, depth + 1)[0], False)  # ``q.max(1)[1]``: the indices
    if isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Constant) and type(expr.slice.value) is int \
            and (returned := _returned_element(ctx, expr.value, expr.slice.value, expr)) is not None:
        return _or(*(_flags(ctx, r, depth + 1) for r in returned))  # ``losses[0]`` of ``return pi.data, q.data``
    if isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Constant) and expr.slice.value in _INTEGER_FIELDS:
        return (_flags(ctx, expr.value, depth + 1)[0], False)  # ``pred[0]["labels"]`` of a detector: class ids
    if isinstance(expr, (ast.Subscript, ast.Starred)):
        return _flags(ctx, expr.value, depth + 1)
    if isinstance(expr, ast.BinOp):  # (``x * probs.size(0)``: a size is a Python int, wherever ``probs`` is)
        return _or(*(_flags(ctx, side, depth + 1) for side in (expr.left, expr.right) if not _size_of(side)))
    if isinstance(expr, ast.Compare):  # comparisons give bool tensors: no grad
        return (_or(*(_flags(ctx, e, depth + 1) for e in [expr.left, *expr.comparators]))[0], False)
    if isinstance(expr, ast.UnaryOp):
        return _flags(ctx, expr.operand, depth + 1)
    if isinstance(expr, ast.IfExp):
        return _or(_flags(ctx, expr.body, depth + 1), _flags(ctx, expr.orelse, depth + 1))
    if isinstance(expr, ast.Call):
        return _call_flags(ctx, expr, depth)
    return _HOST


def _size_of(expr: ast.AST) -> bool:
    """``probs.size(0)``, ``x.shape[1]``, ``x.numel()``, ``len(x)``: a host int."""
    if isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Attribute) and expr.value.attr == "shape":
        return True
    return isinstance(expr, ast.Call) and (isinstance(expr.func, ast.Attribute) and expr.func.attr in (
        "size", "numel", "dim", "nelement") or isinstance(expr.func, ast.Name) and expr.func.id == "len")


_HOST_FACTORIES = frozenset({"torch.tensor", "torch.from_numpy", "torch.as_tensor", "torch.Tensor", "torch.FloatTensor",
                             "torch.LongTensor"})
_RESHAPES = frozenset({"float", "double", "long", "unsqueeze", "view", "reshape", "permute", "contiguous"})


def _fed_a_host_tensor(ctx: Context, call: ast.Call) -> bool:
    """The model is called on a tensor just made on the host (``net(torch.tensor(points))``, or a name bound to one in
    the same scope): a model on a GPU would fail at that forward, so its output is on the host."""
    if not call.args:
        return False
    arg = call.args[0]
    if isinstance(arg, ast.Name):
        b = ctx.semantic.binding_at(arg.id, call)
        arg = b.value if b is not None and not b.is_param and b.index is None and b.value is not None \
            and ctx.semantic.scope_of(b.node) is ctx.semantic.scope_of(call) else arg
    arg = strip_methods(arg, _RESHAPES, depth=8)
    return isinstance(arg, ast.Call) and (ctx.call_name(arg) or "") in _HOST_FACTORIES and keyword(arg, "device") is None


def _callers_hand_a_host_model(ctx: Context, call: ast.Call) -> bool:
    """``model(x)`` where ``model`` is a parameter of a plain function that every call in this file hands a model
    moved to the host (``pred(net.cpu().eval(), img)``, or a name bound to one before the call)."""
    sem = ctx.semantic
    func = sem.function_of(call)
    if not isinstance(call.func, ast.Name) or func is None or sem.class_of(func) is not None:
        return False
    b = sem.binding_at(call.func.id, call)
    sites = sem.call_sites(func) if b is not None and b.is_param and b.node is func else []
    if not sites:
        return False
    for site in sites:
        arg = call_argument(site, func, call.func.id)  # type: ignore[arg-type]
        if isinstance(arg, ast.Name):
            bound = sem.binding_at(arg.id, site)
            arg = bound.value if bound is not None and not bound.is_param else None
        if arg is None or "cpu" not in _chain_methods(arg):
            return False
    return True


def _call_flags(ctx: Context, call: ast.Call, depth: int) -> tuple[bool, bool]:
    sem = ctx.semantic
    if sem.is_model_call(call):
        if models.model_is_stateless(sem, call.func, call):  # an activation class: the output follows its inputs
            return _or(_HOST, *(_flags(ctx, a, depth + 1) for a in call.args))
        key = dotted(call.func)
        on_gpu = program.runs_on_accelerator(sem) and not (key and placement.moved_to_host_before(sem, key, call)) \
            and not (isinstance(call.func, ast.Name) and (placement.never_moved(sem, call.func.id)
                                                         or placement.never_moved(sem, call.func.id, call)
                                                         or _unmoved_yet(sem, call))) \
            and not _fed_a_host_tensor(ctx, call) and not _callers_hand_a_host_model(ctx, call)
        grad = not sem.under_no_grad(call)
        if grad and frozen.calls_a_frozen_model(sem, call):
            grad = any(_flags(ctx, a, depth + 1)[1] for a in call.args)  # (a feature extractor frozen in its
            # ``__init__``: its output needs grad only where its input does)
        if grad and models.model_has_no_parameters(sem, call.func, call):
            # ``FCLegendre(d=2)(f, dim=1)``: a module of buffers records a graph only from inputs that need one
            grad = any(_flags(ctx, a, depth + 1)[1] for a in call.args)
        return (on_gpu, grad)
    if (sem.call_name(call) or "") in _GRAD_NORMS:  # the total norm, where the model's gradients are
        return (program.runs_on_accelerator(sem), False)
    imported = root_name(call.func) in ctx.imports and isinstance(call.func, (ast.Name, ast.Attribute))
    if isinstance(call.func, ast.Attribute) and not (imported and dotted(call.func)):
        meth, recv = call.func.attr, call.func.value
        if meth in ("item", "tolist", "numpy", "state_dict", "parameters"):
            return _HOST
        if meth in _NO_GRAD_METHODS:
            return (_flags(ctx, recv, depth + 1)[0], False)
        if meth == "sample" and _distribution(ctx, recv):  # ``Normal(mean, std).sample()``: drawn without a graph
            return (_or(_HOST, *(_flags(ctx, a, depth + 1) for a in _distribution(ctx, recv).args))[0], False)  # type: ignore[union-attr]
        if meth == "detach":
            return (_flags(ctx, recv, depth + 1)[0], False)
        if meth == "cpu":
            return (False, _flags(ctx, recv, depth + 1)[1])
        if meth == "type" and call.args and (q := sem.qualname(call.args[0]) or "").startswith("torch.") \
                and q.endswith("Tensor"):  # ``action.type(torch.FloatTensor)``: a host tensor of that type
            return (".cuda." in q, _flags(ctx, recv, depth + 1)[1])
        if meth == "type" and call.args and isinstance(t := call.args[0], ast.Constant) and isinstance(t.value, str) \
                and t.value.startswith("torch.") and t.value.endswith("Tensor"):  # ``ids.type("torch.FloatTensor")``
            return (".cuda." in t.value, _flags(ctx, recv, depth + 1)[1])
        if meth in ("cuda", "to") and sem.is_device_move(call):
            target = (sem.move_device(call) or "").strip("'\"")
            on_host = target == "cpu" or "torch.device('cpu')" in target or 'torch.device("cpu")' in target
            return (not on_host, _flags(ctx, recv, depth + 1)[1])
        if sem.expr_kind(recv, call) in ("model", "wrapper"):
            return _HOST  # model.parameters(), model.generate(): not followed
        return _flags(ctx, recv, depth + 1)
    name = ctx.call_name(call) or ""
    kind = sem.expr_kind(call.func, call)
    if name in ("torch.tensor", "torch.Tensor", "torch.FloatTensor", "torch.LongTensor") \
            and not any(k.arg in ("device", "requires_grad") for k in call.keywords):
        return _HOST  # ``torch.tensor(loss_values)``: a new leaf on the host, copied from the values, with no graph
    if name.startswith("torch.") and name.rsplit(".", 1)[-1] in _INTEGER_RESULTS:  # ``torch.argmax(q, dim=1)``
        return (_or(_HOST, *(_flags(ctx, a, depth + 1) for a in call.args[:1]))[0], False)
    if kind == "loss_fn" or name.startswith("torch."):
        args = [a for arg in call.args for a in (arg.elts if isinstance(arg, (ast.List, ast.Tuple)) else [arg])]
        return _or(*(_flags(ctx, a, depth + 1) for a in args)) if args else _HOST
    return _HOST


def _distribution(ctx: Context, expr: ast.AST) -> ast.Call | None:
    """The ``torch.distributions`` constructor call ``expr`` is (or a name bound to one)."""
    if isinstance(expr, ast.Name):
        b = ctx.semantic.binding_at(expr.id, expr)
        expr = b.value if b is not None and not b.is_param and b.index is None and b.value is not None else expr
    return expr if isinstance(expr, ast.Call) and (ctx.call_name(expr) or "").startswith("torch.distributions.") \
        else None


def _chain_methods(expr: ast.AST) -> list[str]:
    out: list[str] = []
    while True:
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            out.append(expr.func.attr)
            expr = expr.func.value
        elif isinstance(expr, ast.Attribute):
            out.append(expr.attr)
            expr = expr.value
        elif isinstance(expr, ast.Subscript):
            expr = expr.value
        else:
            return out


@rule("TD501", calls=("numpy",))
def numpy_on_device_tensor(node: ast.Call, ctx: Context) -> None:
    """`.numpy()` on a tensor that may be on a GPU or require grad.

    What it does: follows the tensor back to where it came from (a model output, a
    device move, a loss) and reports `.numpy()` when, in a CUDA program, it may be on
    a GPU, or when it may require grad. `.numpy()` after `.detach().cpu()`, on data
    that never left the CPU, or on outputs computed under `no_grad` is fine.
    Why is this bad? `.numpy()` raises on CUDA tensors ("can't convert cuda:0 device
    type tensor to numpy") and on tensors that require grad.
    Use instead: `t.detach().cpu().numpy()`.
    Fix safety: inserts the missing `.detach()`/`.cpu()` before `.numpy()`.
    """
    func = node.func
    if not (isinstance(func, ast.Attribute) and func.attr == "numpy") or node.args:
        return
    if any(k.arg == "force" for k in node.keywords) or node.keywords:
        return
    if _shows_the_error(ctx, node):
        return
    gpu, grad = _flags(ctx, func.value)
    gpu = gpu and program.runs_on_accelerator(ctx.semantic) and not ctx.semantic.guards.on_cpu_branch(node)
    if grad and _callers_turn_grad_off(ctx, node):
        grad = False
    if not (gpu or grad):
        return
    chain = _chain_methods(func.value)
    missing = ("" if {"detach", "data"} & set(chain) else ".detach()") + ("" if "cpu" in chain else ".cpu()")
    edits: tuple[Edit, ...] = ()
    col = func.end_col_offset - len(".numpy")  # type: ignore[operator]
    line_text = ctx.lines[func.end_lineno - 1].encode("utf-8") if func.end_lineno else b""
    if missing and line_text[col:col + 6] == b".numpy":
        edits = (ctx.insert_edit(func.end_lineno, col, missing),)  # type: ignore[arg-type]
    recv = ctx.name(func.value)
    if isinstance(func.value, (ast.BinOp, ast.Compare, ast.UnaryOp)):
        recv = f"({recv})"  # (``(probs * 2).numpy()``, as written)
    if len(recv) > 40:
        recv = "tensor"
    why = " and ".join(w for w, on in (("may be on the GPU", gpu), ("may require grad", grad)) if on)
    ctx.report(
        "TD501",
        node,
        f"`{recv}.numpy()`: `{recv}` {why}; `.numpy()` raises on such a tensor",
        fix=f"use `{recv}{missing or '.detach().cpu()'}.numpy()`",
        edits=edits,
    )


_SHOWN_ERRORS = frozenset({"Exception", "BaseException", "TypeError", "RuntimeError"})


def _shows_the_error(ctx: Context, call: ast.Call) -> bool:
    """``try: tensor_gpu.numpy()`` / ``except Exception as e: print(e)``: a tutorial calls ``.numpy()`` for nothing but
    the error it raises, which it catches (a statement whose value nobody keeps, in a ``try`` whose handler takes it)."""
    stmt = ctx.semantic.parent(call)
    up = ctx.semantic.parent(stmt) if isinstance(stmt, ast.Expr) else None
    return isinstance(up, ast.Try) and stmt in up.body and any(
        h.type is None or (dotted(h.type) or "").rsplit(".", 1)[-1] in _SHOWN_ERRORS for h in up.handlers)


# ---- TD501 without a `.numpy()`: NumPy converting a tensor itself -----------------------------------------------
_GRAD_NORMS = frozenset({"torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad.clip_grad_norm_",
                         "torch.nn.utils.get_total_norm"})
_NUMPY_GATHERS = frozenset({"numpy.concatenate", "numpy.stack", "numpy.vstack", "numpy.hstack", "numpy.array",
                            "numpy.asarray"})
_NUMPY_TESTS = frozenset({"numpy.isnan", "numpy.isinf", "numpy.isfinite"})
_NUMPY_MAKERS = frozenset({"numpy.zeros", "numpy.ones", "numpy.empty", "numpy.full", "numpy.zeros_like",
                           "numpy.ones_like"})


@rule("TD501", calls=("concatenate", "stack", "vstack", "hstack", "array", "asarray", "isnan", "isinf", "isfinite"))
def numpy_gathers_device_tensors(node: ast.Call, ctx: Context) -> None:
    """``np.concatenate(preds)`` of a list the loop filled with GPU tensors (``preds.append(model(x).data)``), or
    ``np.isnan(grad_norm)`` of the norm ``clip_grad_norm_`` returns (WaveRNN): NumPy converts the tensor with
    ``Tensor.__array__``, that is ``.numpy()``, which raises on a CUDA tensor."""
    name = ctx.call_name(node) or ""
    if not name.startswith("numpy.") or (name not in _NUMPY_GATHERS and name not in _NUMPY_TESTS) or len(node.args) != 1:
        return
    arg = node.args[0]
    if not isinstance(arg, ast.Name) or not _on_gpu(ctx, arg, node) \
            or any(_fed_numpy(ctx, v) for v in _appended(ctx, arg.id, node)):
        return
    if name in _NUMPY_TESTS:
        ctx.report("TD501", node, f"`{ctx.name(node.func)}({arg.id})` converts the GPU tensor `{arg.id}` to NumPy "
                   "(`Tensor.__array__` calls `.numpy()`): it raises on a CUDA tensor",
                   fix=f"test it with torch: `torch.{name.rsplit('.', 1)[-1]}({arg.id})` (or `math` on `{arg.id}.item()`)")
        return
    ctx.report("TD501", node, f"`{ctx.name(node.func)}({arg.id})` converts the GPU tensors in `{arg.id}` to NumPy "
               "(`Tensor.__array__` calls `.numpy()`): it raises on a CUDA tensor",
               fix=f"collect host copies (`{arg.id}.append(t.detach().cpu())`), or `torch.cat` on the device first")


@rule("TD501", ast.Assign)
def device_tensor_into_numpy_array(node: ast.AST, ctx: Context) -> None:
    """``canvas[i*28:(i+1)*28, :] = generator(z).data[0, 0]``: NumPy converts the tensor written into a slice of its
    array with ``.numpy()``, which raises on a CUDA tensor (an element ``arr[i] = t`` reads a number instead: TD603)."""
    assert isinstance(node, ast.Assign)
    target = node.targets[0] if len(node.targets) == 1 else None
    if not (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)) or not any(
            isinstance(n, ast.Slice) for n in ctx.semantic.subtree(target.slice)):
        return
    b = ctx.semantic.binding_at(target.value.id, node)
    if b is None or not isinstance(b.value, ast.Call) or (ctx.call_name(b.value) or "") not in _NUMPY_MAKERS \
            or ctx.semantic.guards.never_together(b.node, node):
        return  # (``else: acts = np.empty(n)`` of ``if use_torch:``, written under ``if use_torch:``: a tensor there)
    if not _on_gpu(ctx, node.value, node) or _fed_numpy(ctx, node.value):
        return
    ctx.report("TD501", node, f"writing `{ctx.name(node.value)}` into NumPy array `{target.value.id}` converts it with "
               "`.numpy()`, which raises on a CUDA tensor", fix="write a host copy: `(...).detach().cpu()`")


def _callers_turn_grad_off(ctx: Context, node: ast.AST) -> bool:
    """``def act(self, obs): ... return action.cpu().numpy()``, called only from other modules, each time under
    ``torch.no_grad()`` (drqv2's ``with torch.no_grad(): action = agent.act(...)``): nothing it computes needs grad.
    Also through a method of the file that calls it (world-models' ``rollout`` calls ``get_action_and_transition``,
    and every module that runs ``rollout`` does so under ``no_grad``)."""
    sem = ctx.semantic
    func = sem.function_of(node)
    return func is not None and sem.grad_mode(node) != "off" and _run_without_grad(sem, func)


def _run_without_grad(sem, func: ast.AST, depth: int = 0) -> bool:  # type: ignore[no-untyped-def]
    by_class = sem.class_of(func) is not None
    sites = sem.call_sites(func)
    if not sites:
        return sem.called_elsewhere_without_grad(func, by_class=by_class)
    if depth >= 2 or sem.project is None or not sem.project.never_called_with_grad(sem, func, by_class=by_class):
        return False  # (a call of ``func`` itself from another module, with autograd on)
    return all(sem.grad_mode(s) == "off" or (caller := sem.function_of(s)) is not None and caller is not func
               and _run_without_grad(sem, caller, depth + 1) for s in sites)


def _unmoved_yet(sem, call: ast.Call) -> bool:  # type: ignore[no-untyped-def]
    """A script's (a notebook's) statement outside any function and loop, calling a model nothing has moved or been
    handed by then (``G = Generator()``, ``G(z).detach().numpy()`` in a quick-check cell; ``train(G, ...)`` cells
    later moves it): run once, on the CPU."""
    if sem.function_of(call) is not None or sem.loops_around(call):
        return False
    return placement.never_moved(sem, call.func.id, call, upto=sem.index.pos[call])


def _on_gpu(ctx: Context, expr: ast.AST, at: ast.AST) -> bool:
    sem = ctx.semantic
    return _flags(ctx, expr)[0] and program.runs_on_accelerator(sem) and not sem.guards.on_cpu_branch(at)


def _fed_numpy(ctx: Context, value: ast.AST) -> bool:
    """``value`` is the output of a model called on NumPy arrays (``outputs = self.model(batch_x)`` with ``batch_x =
    x.cpu().numpy()``: a statistical model of LTSF-Linear, no torch module): NumPy already."""
    sem = ctx.semantic
    for _ in range(6):
        if isinstance(value, (ast.Subscript, ast.Attribute)):
            value = value.value
        elif isinstance(value, ast.Name):
            b = sem.binding_at(value.id, value)
            if b is None or b.value is None or b.is_param or b.index is not None:
                return False
            value = b.value
        else:
            break
    if not isinstance(value, ast.Call) or not sem.is_model_call(value):
        return False
    for arg in value.args:
        for _ in range(4):
            if isinstance(arg, ast.Subscript):
                arg = arg.value
            elif isinstance(arg, ast.Name) and (b := sem.binding_at(arg.id, arg)) is not None and b.value is not None \
                    and not b.is_param and b.index is None:
                arg = b.value
            else:
                break
        if isinstance(arg, ast.Call) and (method_name(arg) == "numpy" or (ctx.call_name(arg) or "").startswith("numpy.")):
            return True
    return False
