"""Stage 4 rules: train/eval modes, no_grad, zero_grad and loss handling."""

from __future__ import annotations

import ast

from torchdoctor.check import flow
from torchdoctor.check.astutil import FUNC_TYPES, LOOP_TYPES, dotted, keyword, method_name
from torchdoctor.check.context import Context
from torchdoctor.check.models import first_input_device
from torchdoctor.check.registry import rule


# ---- TD401 / TD402: evaluation forward passes ---------------------------------------------
def _eval_forward(ctx: Context, node: ast.AST) -> ast.AST | None:
    """The evaluation loop around a model call, or None."""
    if not isinstance(node, ast.Call) or flow.consumer_kind(ctx, node) != "model":
        return None
    if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) and node.func.value.id == "self":
        if ctx.facts.class_of(node) is not None and ctx.facts.class_of(node).name in ctx.facts.module_classes:
            return None  # a submodule inside forward()
    return ctx.facts.enclosing_loop(node, "eval")


@rule("TD401", ast.Call)
def eval_with_autograd(node: ast.AST, ctx: Context) -> None:
    """Evaluation forward pass with autograd on."""
    loop = _eval_forward(ctx, node)
    if loop is None or ctx.facts.under_no_grad(node):
        return
    name = ctx.segment(node.func)  # type: ignore[attr-defined]
    ctx.report("TD401", node, f"evaluation forward `{name}(...)` runs with autograd on: it builds a graph it never uses",
               fix="wrap the evaluation loop in `with torch.no_grad():` (or `torch.inference_mode()`)")


@rule("TD402", ast.Call)
def eval_in_train_mode(node: ast.AST, ctx: Context) -> None:
    """Evaluation with the model still in training mode."""
    loop = _eval_forward(ctx, node)
    if loop is None:
        return
    facts = ctx.facts
    func = node.func.value if method_name(node) == "forward" else node.func  # type: ignore[union-attr]
    if facts.has_dropout_or_bn(func, node) is not True or _eval_mode_set(ctx, loop):
        return
    name = ctx.segment(func)
    ctx.report("TD402", node, f"`{name}` evaluates in training mode: dropout/batch-norm stay active (no `{name}.eval()`)",
               fix=f"call `{name}.eval()` before the evaluation loop (and `{name}.train()` before training again)")


def _eval_mode_set(ctx: Context, loop: ast.AST) -> bool:
    """An eval-mode call in the loop's function, or in a function calling it."""
    facts = ctx.facts
    scope = facts.scope_of(loop)
    if any(facts.mode_call(n) == "eval" and _reaches(ctx, n, loop) for n in _scope_nodes(scope)):
        return True
    seen: set[int] = set()
    todo = [scope]
    while todo:
        f = todo.pop()
        if id(f) in seen or not isinstance(f, FUNC_TYPES):
            continue
        seen.add(id(f))
        for site in facts.call_sites(f):
            caller = facts.scope_of(site)
            if any(facts.mode_call(n) == "eval" for n in _scope_nodes(caller)):
                return True
            todo.append(caller)
    return False


def _reaches(ctx: Context, call: ast.AST, loop: ast.AST) -> bool:
    """The mode call can run before ``loop``: earlier in the source, or in a loop around both
    (a final ``model.eval()`` for the test set does not cover the validation loop above it)."""
    if (call.lineno, call.col_offset) < (loop.lineno, loop.col_offset):  # type: ignore[attr-defined]
        return True
    around = {id(a) for a in ctx.facts.ancestors(loop) if isinstance(a, LOOP_TYPES)}
    return any(id(a) in around for a in ctx.facts.ancestors(call))


def _scope_nodes(scope: ast.AST) -> list[ast.AST]:
    return flow.region_nodes(scope)


# ---- TD403 -----------------------------------------------------------------------------------
@rule("TD403", ast.Call)
def eval_never_undone(node: ast.AST, ctx: Context) -> None:
    """model.eval() inside the epoch loop and model.train() never called again before training."""
    facts = ctx.facts
    if facts.mode_call(node) != "eval":
        return
    recv = node.func.value  # type: ignore[attr-defined]
    if facts.has_dropout_or_bn(recv, node) is not True:
        return
    loops = _training_loops_around(ctx, node)
    if not loops or any(_sets_train_mode(ctx, loop) for loop in loops):
        return
    name = ctx.segment(recv)
    ctx.report("TD403", node, f"`{name}.eval()` is never undone: the next training pass runs in eval mode "
               "(no `.train()` in the loop)", fix=f"call `{name}.train()` at the start of each epoch")


def _training_loops_around(ctx: Context, node: ast.AST) -> list[ast.AST]:
    """The innermost loops that train and run ``node`` (directly, or through the function holding it)."""
    facts = ctx.facts
    out: list[ast.AST] = []
    todo: list[tuple[ast.AST, int]] = [(node, 0)]
    while todo:
        site, depth = todo.pop()
        loop = next((a for a in _loops_around(facts, site) if _trains(ctx, a)), None)
        if loop is not None:
            out.append(loop)
            continue
        func = facts.function_of(site)
        if func is not None and depth < 3:
            todo.extend((s, depth + 1) for s in facts.call_sites(func))
    return out


def _loops_around(facts, node: ast.AST) -> list[ast.AST]:
    scope = facts.scope_of(node)
    out = []
    for a in facts.ancestors(node):
        if a is scope:
            break
        if isinstance(a, LOOP_TYPES):
            out.append(a)
    return out


def _loop_nodes(ctx: Context, loop: ast.AST) -> list[ast.AST]:
    """The loop body's nodes plus those of every in-file function it calls."""
    return ctx.facts.cached(("loop_nodes", id(loop)), lambda: _find_loop_nodes(ctx, loop))  # type: ignore[no-any-return]


def _find_loop_nodes(ctx: Context, loop: ast.AST) -> list[ast.AST]:
    facts = ctx.facts
    nodes = [n for stmt in list(loop.body) for n in ast.walk(stmt)]  # type: ignore[attr-defined]
    funcs: list[ast.AST] = []
    for n in nodes:
        if isinstance(n, ast.Call):
            for f in facts.resolve(n):
                funcs += [g for g in facts.reachable(f) if g not in funcs]
    for f in funcs:
        nodes += [n for stmt in f.body for n in ast.walk(stmt)]  # type: ignore[attr-defined]
    return nodes


def _trains(ctx: Context, loop: ast.AST) -> bool:
    return any(ctx.facts.is_backward_call(n) for n in _loop_nodes(ctx, loop))


def _sets_train_mode(ctx: Context, loop: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and ctx.facts.mode_call(n) == "train" for n in _loop_nodes(ctx, loop))


# ---- TD404 -----------------------------------------------------------------------------------
@rule("TD404", ast.For, ast.AsyncFor, ast.While)
def gradients_never_zeroed(node: ast.AST, ctx: Context) -> None:
    """backward() + step() in a loop with no zero_grad()."""
    nodes = _loop_nodes(ctx, node)
    backward = next((n for n in nodes if ctx.facts.is_backward_call(n)), None)
    step = next((n for n in nodes if _is_optimizer_step(ctx, n)), None)
    if backward is None or step is None or any(_zeroes_grads(n) for n in nodes):
        return
    inner = [n for n in nodes if isinstance(n, LOOP_TYPES) and n is not node]
    if any(_has_both(ctx, i) for i in inner):
        return  # the inner loop is the one that trains
    ctx.report("TD404", node, f"this loop calls `{ctx.segment(backward)}` and `{ctx.segment(step)}` but never "
               "`zero_grad()`: gradients add up across steps", fix="call `optimizer.zero_grad()` once per step "
               "(or every k steps when accumulating gradients)")


def _has_both(ctx: Context, loop: ast.AST) -> bool:
    nodes = _loop_nodes(ctx, loop)
    return any(ctx.facts.is_backward_call(n) for n in nodes) and any(_is_optimizer_step(ctx, n) for n in nodes)


def _is_optimizer_step(ctx: Context, node: ast.AST) -> bool:
    if not isinstance(node, ast.Call) or method_name(node) != "step":
        return False
    key = dotted(node.func.value) or ""  # type: ignore[attr-defined]
    kind = ctx.facts.kind_of(key, node) if key else None
    if kind in ("optimizer", "scaler"):
        return True
    return kind is None and "opt" in key.rsplit(".", 1)[-1].lower()


def _zeroes_grads(node: ast.AST) -> bool:
    if isinstance(node, ast.Call) and method_name(node) in ("zero_grad", "zero_grad_"):
        return True
    if isinstance(node, ast.Assign):  # p.grad = None
        return any(isinstance(t, ast.Attribute) and t.attr == "grad" for t in node.targets)
    if isinstance(node, ast.Call) and method_name(node) in ("zero_", "fill_", "detach_"):
        return "grad" in (dotted(node.func.value) or "")  # type: ignore[attr-defined]
    return False


# ---- TD405 -----------------------------------------------------------------------------------
@rule("TD405", ast.AugAssign, ast.Call)
def loss_graph_kept(node: ast.AST, ctx: Context) -> None:
    """A loss tensor accumulated across steps without .item()/.detach()."""
    facts = ctx.facts
    if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
        acc, value = node.target, node.value
    elif isinstance(node, ast.Call) and method_name(node) in ("append", "extend") and len(node.args) == 1:
        acc, value = node.func.value, node.args[0]  # type: ignore[attr-defined]
    else:
        return
    loop = facts.enclosing_loop(node, "batch")
    if loop is None or facts.under_no_grad(node) or not _is_loss_tensor(ctx, value, node, 0):
        return
    acc_key = dotted(acc.value if isinstance(acc, ast.Subscript) else acc)
    if acc_key is None or _bound_in(ctx, acc_key, loop, node) or _backpropagated(ctx, acc_key, node):
        return
    text = ctx.segment(value)
    ctx.report("TD405", node, f"`{ctx.segment(acc)}` accumulates the loss tensor `{text}`: every step's graph stays alive",
               fix=f"accumulate `{text}.item()` (or `{text}.detach()`)")


def _is_loss_tensor(ctx: Context, expr: ast.AST, at: ast.AST, depth: int) -> bool:
    if depth > 5:
        return False
    if isinstance(expr, ast.BinOp):
        return _is_loss_tensor(ctx, expr.left, at, depth + 1) or _is_loss_tensor(ctx, expr.right, at, depth + 1)
    if isinstance(expr, ast.Call):
        if method_name(expr) in ("mean", "sum", "cpu", "clone") and not expr.args:
            return _is_loss_tensor(ctx, expr.func.value, at, depth + 1)  # type: ignore[attr-defined]
        return flow.consumer_kind(ctx, expr) == "loss"
    if isinstance(expr, ast.Attribute):
        return expr.attr == "loss"
    if isinstance(expr, ast.Subscript):
        return isinstance(expr.slice, ast.Constant) and expr.slice.value == "loss"
    if not isinstance(expr, ast.Name):
        return False
    b = ctx.facts.scopes.binding_at(expr.id, at)
    if b is None or b.value is None or isinstance(b.node, FUNC_TYPES):
        return False
    if b.index is not None:  # logits, loss = model(x, y)
        return "loss" in expr.id.lower() and isinstance(b.value, ast.Call) and flow.consumer_kind(ctx, b.value) == "model"
    return _is_loss_tensor(ctx, b.value, b.node, depth + 1)


def _bound_in(ctx: Context, key: str, loop: ast.AST, node: ast.AST) -> bool:
    """The accumulator is (re)set inside the loop: it does not live across steps."""
    for n in flow.region_nodes(loop):
        if isinstance(n, (ast.Assign, ast.AnnAssign)) and n is not node:
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            if any(dotted(t) == key for t in targets):
                return True
    return False


def _backpropagated(ctx: Context, key: str, node: ast.AST) -> bool:
    """``total = total + ...; total.backward()`` sums losses on purpose."""
    scope = ctx.facts.scope_of(node)
    for n in _scope_nodes(scope) if not isinstance(scope, ast.Lambda) else []:
        if ctx.facts.is_backward_call(n) and key in {dotted(x) for x in ast.walk(n)}:
            return True
        if isinstance(n, ast.Call) and (ctx.call_name(n) or "") in ("torch.stack", "torch.cat", "sum"):
            if any(dotted(a) == key for a in n.args) and _feeds_backward(ctx, n):
                return True
    return False


def _feeds_backward(ctx: Context, call: ast.Call) -> bool:
    for a in ctx.facts.ancestors(call):
        if isinstance(a, ast.Call) and ctx.facts.is_backward_call(a):
            return True
        if isinstance(a, ast.stmt):
            return isinstance(a, ast.Assign) and any(
                ctx.facts.is_backward_call(n) and dotted(getattr(n.func, "value", None)) in {dotted(t) for t in a.targets}
                for n in _scope_nodes(ctx.facts.scope_of(a)))
    return False


# ---- TD406 -----------------------------------------------------------------------------------
_WEIGHT_FIRST = ("CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss", "MultiLabelSoftMarginLoss")


@rule("TD406", ast.Call)
def loss_weights_on_cpu(node: ast.AST, ctx: Context) -> None:
    """Loss function holding tensors (weight=, pos_weight=) not moved to the device."""
    assert isinstance(node, ast.Call)
    facts = ctx.facts
    if facts.scopes.call_kind(node, node) != "loss_fn" or not facts.is_cuda_program:
        return
    last = (ctx.call_name(node) or "").rsplit(".", 1)[-1]
    held = [(k.arg, k.value) for k in node.keywords if k.arg in ("weight", "pos_weight")]
    if node.args and last in _WEIGHT_FIRST:
        held.append(("weight", node.args[0]))
    held = [(arg, v) for arg, v in held if _cpu_tensor(ctx, v, node)]
    if not held or _loss_moved(ctx, node):
        return
    device = first_input_device(ctx)
    if device is None:
        return
    arg, value = held[0]
    ctx.report("TD406", node, f"`{last}` holds `{arg}={ctx.segment(value)}` on the CPU while its inputs are on `{device}`",
               fix=f"create the weight on the device (`{ctx.segment(value)}.to({device})`) or move the loss with `.to({device})`")


def _cpu_tensor(ctx: Context, value: ast.AST, at: ast.AST, depth: int = 0) -> bool:
    facts = ctx.facts
    if depth > 4:
        return False
    if isinstance(value, ast.Call):
        if facts.value_is_moved(value) or keyword(value, "device"):
            return False
        q = ctx.call_name(value) or ""
        if q.startswith("torch.") and (q.split(".")[1] in ("tensor", "as_tensor", "ones", "full", "from_numpy", "linspace")
                                       or q.endswith("Tensor")):
            return q.count(".") == 1 and not any(k.arg is None for k in value.keywords)
        if method_name(value) in ("float", "double", "long", "half") and isinstance(value.func, ast.Attribute):
            return _cpu_tensor(ctx, value.func.value, at, depth + 1)
        return False
    key = dotted(value)
    if not isinstance(value, ast.Name) or key is None:
        return False
    b = facts.scopes.binding_at(key, at)
    if b is None or b.value is None or isinstance(b.node, FUNC_TYPES) or b.index is not None:
        return False
    return _cpu_tensor(ctx, b.value, b.node, depth + 1)


def _loss_moved(ctx: Context, call: ast.Call) -> bool:
    facts = ctx.facts
    parent = facts.parent(call)
    if isinstance(parent, ast.Attribute) and parent.attr in ("to", "cuda"):
        return True
    if isinstance(parent, ast.Assign):
        keys = {dotted(t) for t in parent.targets}
        for n in ctx.facts.calls:
            if method_name(n) in ("to", "cuda") and dotted(n.func.value) in keys:  # type: ignore[attr-defined]
                return True
    return False


# ---- TD407 -----------------------------------------------------------------------------------
@rule("TD407", ast.Call)
def backward_under_no_grad(node: ast.AST, ctx: Context) -> None:
    """backward() inside a no_grad()/inference_mode() block."""
    if ctx.facts.is_backward_call(node) and ctx.facts.under_no_grad(node, strict=True):
        ctx.report("TD407", node, f"`{ctx.segment(node)}` runs under no_grad/inference_mode: the loss has no graph "
                   "and backward() raises", fix="move the forward pass and backward() out of the no_grad block")
