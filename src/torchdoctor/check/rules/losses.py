"""Stage 4 rules, loss handling: a loss tensor kept across steps with its graph (TD405)."""

from __future__ import annotations

import ast

from torchdoctor.check.astutil import dotted, is_true, method_name
from torchdoctor.check.context import Context
from torchdoctor.check.registry import rule
from torchdoctor.check.rules.loop import loop_effects
from torchdoctor.check.semantic import flow


# ---- TD405 -----------------------------------------------------------------------------------
@rule("TD405", ast.AugAssign)
def loss_accumulated(node: ast.AST, ctx: Context) -> None:
    """A loss tensor summed across steps without .item()/.detach()."""
    assert isinstance(node, ast.AugAssign)
    if isinstance(node.op, ast.Add):
        _loss_graph_kept(ctx, node, node.target, node.value)


@rule("TD405", ast.Module)
def loss_summed_by_reassignment(module: ast.AST, ctx: Context) -> None:
    """``running = running + loss``: the spelled-out ``+=`` (one pass over the file's assignments: a rule called
    per assignment would cost a call for each of them)."""
    for node in ctx.semantic.of_type(ast.Assign):
        value = node.value  # type: ignore[attr-defined]
        if not (isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add)) or len(node.targets) != 1:  # type: ignore[attr-defined]
            continue
        key = dotted(node.targets[0])  # type: ignore[attr-defined]
        if key is None:
            continue
        if dotted(value.left) == key:
            _loss_graph_kept(ctx, node, node.targets[0], value.right)  # type: ignore[attr-defined]
        elif dotted(value.right) == key:
            _loss_graph_kept(ctx, node, node.targets[0], value.left)  # type: ignore[attr-defined]


@rule("TD405", calls=("append", "extend"))
def loss_collected(node: ast.AST, ctx: Context) -> None:
    """A loss tensor appended to a list across steps without .item()/.detach()."""
    assert isinstance(node, ast.Call)
    if len(node.args) == 1 and isinstance(node.func, ast.Attribute):
        _loss_graph_kept(ctx, node, node.func.value, node.args[0])


@rule("TD405", calls=("update",))
def loss_kept_by_a_meter(node: ast.AST, ctx: Context) -> None:
    """``losses.update(loss, n)`` of a meter class of this file whose ``update`` adds what it is handed to an attribute
    (``self.sum += val * n``): the meter keeps every step's graph alive."""
    assert isinstance(node, ast.Call)
    if not node.args or not isinstance(node.func, ast.Attribute):
        return
    sem = ctx.semantic
    funcs = sem.resolve(node)
    if len(funcs) != 1 or not isinstance(update := funcs[0], ast.FunctionDef):
        return
    params = [a.arg for a in update.args.args]
    if params[:1] != ["self"] or len(params) < 2:
        return
    val = params[1]
    if any(isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add) and (dotted(n.target) or "").startswith("self.")
           and any(isinstance(m, ast.Name) and m.id == val and (b := sem.binding_at(val, m)) is not None and b.is_param
                   for m in sem.subtree(n.value))  # (not ``val = val.item()`` first)
           and not any(isinstance(c, ast.Call) and method_name(c) in ("item", "detach", "tolist", "cpu")
                       or isinstance(c, ast.Call) and dotted(c.func) == "float" for c in sem.subtree(n.value))
           for n in sem.local_nodes(update)):
        _loss_graph_kept(ctx, node, node.func.value, node.args[0])


def _loss_graph_kept(ctx: Context, node: ast.AST, acc: ast.AST, value: ast.AST) -> None:
    sem = ctx.semantic
    loop = sem.enclosing_loop(node, "batch")
    # a training or evaluation loop: its steps are optimizer steps or batches; a loop over one step's
    # micro-batches that backpropagates once after it keeps only that step's graph
    if loop is None or sem.loop_kind(loop) not in ("train", "eval") or sem.under_no_grad(node) \
            or not _is_loss_tensor(ctx, value, node, 0):
        return
    acc_key = dotted(acc.value if isinstance(acc, ast.Subscript) else acc)
    if acc_key is None or _bound_in(ctx, acc_key, loop, node) or _backpropagated(ctx, acc_key, node) \
            or _one_steps_micro_batches(ctx, acc_key, loop) or _an_optimizer_closure_total(ctx, acc_key, loop, node) \
            or _differentiates_through_steps(ctx, node):
        return
    text = ctx.name(value)
    ctx.report("TD405", node, f"`{ctx.name(acc)}` accumulates the loss tensor `{text}`: every step's graph stays alive",
               fix=f"accumulate `{text}.item()` (or `{text}.detach()`)")


def _differentiates_through_steps(ctx: Context, node: ast.AST) -> bool:
    """The function around ``node`` takes gradients with ``create_graph=True`` (MAML's inner loop: ``grad =
    autograd.grad(loss, fast_weights, create_graph=True)``): the meta-loss backpropagates through every inner step,
    so the losses it keeps carry the graph on purpose."""
    sem = ctx.semantic
    func = sem.function_of(node)
    return func is not None and any(
        (sem.call_name(c) or "") == "torch.autograd.grad" and any(k.arg == "create_graph" and is_true(k.value)
                                                                 for k in c.keywords)
        for c in sem.local_nodes(func) if isinstance(c, ast.Call))


def _is_loss_tensor(ctx: Context, expr: ast.AST, at: ast.AST, depth: int) -> bool:
    sem = ctx.semantic
    if depth > 5:
        return False
    if isinstance(expr, ast.BinOp):
        return _is_loss_tensor(ctx, expr.left, at, depth + 1) or _is_loss_tensor(ctx, expr.right, at, depth + 1)
    if isinstance(expr, ast.Call):
        if method_name(expr) in ("mean", "sum", "cpu", "clone", "float", "double", "squeeze") and not expr.args:
            return _is_loss_tensor(ctx, expr.func.value, at, depth + 1)  # type: ignore[attr-defined]
            # (``loss.float()`` of a float32 loss is the loss itself, graph and all)
        # ``criterion(pred.detach().cpu(), true.detach().cpu())``: a loss of detached copies has no graph
        return (flow.consumer_kind(sem, expr) == "loss" or _loss_module_call(ctx, expr)) \
            and not (expr.args and all(_detached(a) for a in expr.args)) \
            and not (expr.args and all(_without_graph(ctx, a, at) for a in expr.args))
    if isinstance(expr, ast.Attribute):
        if expr.attr != "loss":
            return False
        base = sem.binding_at(expr.value.id, at) if isinstance(expr.value, ast.Name) else None
        return base is None or not sem.under_no_grad(base.node)  # ``outputs.loss`` of a no_grad forward: no graph
    if isinstance(expr, ast.Subscript):
        return isinstance(expr.slice, ast.Constant) and expr.slice.value == "loss" and not _numbers_stored_as_loss(ctx, expr, at)
    if not isinstance(expr, ast.Name):
        return False
    b = sem.binding_at(expr.id, at)
    if b is None or b.value is None or b.is_param:
        return False
    if sem.under_no_grad(b.node):
        return False  # computed under no_grad: no graph to keep alive
    if depth == 0 and _itself_backpropagated(ctx, expr.id, b, at):
        return True  # ``loss = -torch.sum(F.logsigmoid(d))`` (or ``model.loss(pred, y)``), then ``loss.backward()``
    if b.index is not None:  # logits, loss = model(x, y)
        if isinstance(b.value, ast.Call) and _returns_numbers_at(ctx, b.value, b.index):
            return False  # ``pi_loss, v_loss = self.update_model(obs)`` that returns ``pi_loss.item(), v_loss.item()``
        return "loss" in expr.id.lower() and isinstance(b.value, ast.Call) and (
            flow.consumer_kind(sem, b.value) == "model" or _sibling_backpropagated(ctx, b.node)
            and (_returns_graph_at(ctx, b.value, b.index) or _made_loss_module(ctx, b.value)))
    return _is_loss_tensor(ctx, b.value, b.node, depth + 1)


def _itself_backpropagated(ctx: Context, name: str, b: object, at: ast.AST) -> bool:
    """``name.backward()`` in the same batch loop, of the same binding: a loss with its graph, however it was made."""
    sem = ctx.semantic
    loop = sem.enclosing_loop(at, "batch")
    return loop is not None and any(
        isinstance(c.func, ast.Attribute) and isinstance(c.func.value, ast.Name) and c.func.value.id == name
        and sem.contains(loop, c) and sem.binding_at(name, c) is b for c in sem.calls_named("backward"))


def _loss_module_call(ctx: Context, call: ast.Call) -> bool:
    """``loss = crit(emb)`` of ``crit = GE2ELoss(device)``, a loss module of another module of the project (a class of
    this file or torch's named so is a loss function already)."""
    sem = ctx.semantic
    b = sem.binding_at(call.func.id, call) if isinstance(call.func, ast.Name) else None
    made = b.value if b is not None and not b.is_param and b.index is None else None
    return isinstance(made, ast.Call) and (dotted(made.func) or "").rsplit(".", 1)[-1].endswith("Loss") \
        and flow.consumer_kind(sem, call) == "model"


def _numbers_stored_as_loss(ctx: Context, expr: ast.Subscript, at: ast.AST) -> bool:
    """``record = self.one_batch(xb, yb)`` then ``record["loss"]``, where ``one_batch`` stores ``record["loss"] =
    loss.item()``: a Python number under that key."""
    sem = ctx.semantic
    b = sem.binding_at(expr.value.id, at) if isinstance(expr.value, ast.Name) else None
    funcs = sem.resolve(b.value) if b is not None and not b.is_param and isinstance(b.value, ast.Call) else []
    stored = [n.value for f in funcs for n in sem.local_nodes(f) if isinstance(n, ast.Assign) and any(
        isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant) and t.slice.value == "loss" for t in n.targets)]
    if not funcs and (key := dotted(expr.value)):  # ``self.iter_info["loss"] = loss.data.item()``, read back here
        stored = [n.value for n in sem.of_type(ast.Assign) if any(  # type: ignore[attr-defined]
            isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant) and t.slice.value == "loss"
            and dotted(t.value) == key for t in n.targets)]  # type: ignore[attr-defined]
    return bool(stored) and all(isinstance(v, ast.Call) and (method_name(v) in ("item", "tolist") or dotted(v.func) == "float")
                                for v in stored)


def _returns_graph_at(ctx: Context, call: ast.Call, index: int) -> bool:
    """``call`` runs functions of this file whose every ``return`` hands back, at ``index``, a value not cut from the
    graph (not ``sloss.data * norm``, ``loss.item()``, ``loss.detach()``): unknown callees do not count."""
    funcs = ctx.semantic.resolve(call)
    values = [ctx.semantic.kinds.returned_values(f, index) for f in funcs]
    return bool(funcs) and all(v is not None and not any(
        _detached(e) or isinstance(e, ast.Call) and method_name(e) == "item" for e in v) for v in values)


def _made_loss_module(ctx: Context, call: ast.Call) -> bool:
    """``loss = SSDLoss(...)`` made here, then ``loss(cls_preds, ...)``: a criterion module whose outputs are losses
    (not a parameter of unknown kind: ``loss_compute`` may hand back ``sloss.data``)."""
    sem = ctx.semantic
    b = sem.binding_at(call.func.id, call) if isinstance(call.func, ast.Name) else None
    return b is not None and not b.is_param and isinstance(b.value, ast.Call) and flow.consumer_kind(sem, call) == "loss"


def _sibling_backpropagated(ctx: Context, stmt: ast.AST) -> bool:
    """``batch_loss, loc_loss, class_loss = loss(...)`` then ``batch_loss.backward()``: the parts unpacked next to
    a loss that is backpropagated carry the same graph."""
    sem = ctx.semantic
    targets = stmt.targets if isinstance(stmt, ast.Assign) else []
    names = {n.id for t in targets for n in sem.subtree(t) if isinstance(n, ast.Name)}
    return any(sem.is_backward_call(n) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
               and n.func.value.id in names and sem.binding_at(n.func.value.id, n) is not None
               and sem.binding_at(n.func.value.id, n).node is stmt
               for n in sem.local_nodes(sem.scope_of(stmt)) if isinstance(n, ast.Call))


def _returns_numbers_at(ctx: Context, call: ast.Call, index: int) -> bool:
    """Every ``return`` of the functions ``call`` runs hands back a Python number at ``index`` of its tuple."""
    funcs = ctx.semantic.resolve(call)
    values = [ctx.semantic.kinds.returned_values(f, index) for f in funcs]
    return bool(funcs) and all(v is not None and all(
        isinstance(e, ast.Call) and (method_name(e) == "item" or dotted(e.func) in ("float", "int")) for e in v)
        for v in values)


def _without_graph(ctx: Context, expr: ast.AST, at: ast.AST) -> bool:
    """``criterion(te_predictions, te_label)`` where the predictions were computed under ``torch.no_grad()`` and the
    labels are the batch's (moved, at most): no input of the loss carries a graph. A name only."""
    sem = ctx.semantic
    if _detached(expr):
        return True
    if not isinstance(expr, ast.Name):
        return False
    b = sem.binding_at(expr.id, at)
    if b is None or b.is_param:
        return False
    if b.value is not None and sem.under_no_grad(b.node):
        return True
    loop = sem.enclosing_loop(at, "batch")
    if loop is None or expr.id not in sem.batch_vars(loop):
        return False
    value = b.value
    while isinstance(value, ast.Call) and method_name(value) in ("to", "cuda", "long", "float") \
            and isinstance(value.func, ast.Attribute):
        value = value.func.value  # ``te_label = te_label.cuda()``: the batch's labels, moved
    return b.value is None or isinstance(value, ast.Name) and value.id == expr.id


def _detached(expr: ast.AST) -> bool:
    """``pred.detach().cpu()``, ``out.data``: a value cut from the graph by a method or attribute of its chain."""
    while isinstance(expr, (ast.Call, ast.Attribute, ast.Subscript)):
        if isinstance(expr, ast.Attribute) and expr.attr in ("detach", "data"):
            return True
        expr = expr.func if isinstance(expr, ast.Call) else expr.value
    return False


def _bound_in(ctx: Context, key: str, loop: ast.AST, node: ast.AST) -> bool:
    """The accumulator is (re)set inside the loop: it does not live across steps. A reset every N steps (``if i %
    every == 0: print(running.item()); running = 0``) keeps N steps' graphs alive meanwhile: it does not count."""
    sem = ctx.semantic
    for n in sem.body(loop):
        if isinstance(n, (ast.Assign, ast.AnnAssign)) and n is not node:
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            if any(dotted(t) == key for t in targets) and not sem.under_step_guard(n, loop):
                return True
    return False


def _an_optimizer_closure_total(ctx: Context, key: str, loop: ast.AST, node: ast.AST) -> bool:
    """``def closure(): total = torch.tensor(0.0); for batch in loader: ...; total += batch_loss; return total``
    handed to ``optimizer.step(closure)`` (L-BFGS over the whole dataset): the total is made afresh on each call and
    handed back to the optimizer, so it holds one optimizer step's losses only."""
    sem = ctx.semantic
    func = sem.function_of(loop)
    b = sem.binding_at(key, node)
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) or b is None or b.is_param \
            or sem.function_of(b.node) is not func or not sem.contains(func, b.node) or sem.contains(loop, b.node):
        return False
    return any(any(isinstance(a, ast.Name) and a.id == func.name for a in [*c.args, *(k.value for k in c.keywords)])
               for c in sem.calls_named("step"))


def _one_steps_micro_batches(ctx: Context, key: str, loop: ast.AST) -> bool:
    """``forward_outputs = []`` then ``for sub in chunks: out = loss_fn(sub); forward_outputs.append(out);
    loss.backward()`` and the optimizer step after the loop, in the same block, over parts this function cut
    (``chunks = split(data, n)``): the loop runs the micro-batches of one step and the list, made afresh before
    it, holds that step's outputs only."""
    sem = ctx.semantic
    block = sem.parent(loop)
    body = getattr(block, "body", None)
    if not isinstance(loop, (ast.For, ast.AsyncFor)) or "step" in loop_effects(ctx, loop) \
            or not isinstance(body, list) or loop not in body:
        return False
    it = loop.iter.args[0] if isinstance(loop.iter, ast.Call) and dotted(loop.iter.func) == "enumerate" \
        and loop.iter.args else loop.iter  # type: ignore[attr-defined]
    bound = [b for b in sem.bindings_of(it.id) if sem.scope_of(b.node) is sem.scope_of(loop)] \
        if isinstance(it, ast.Name) else []
    if not bound or any(b.is_param or b.value is None or isinstance(b.value, ast.Call)
                        and "loader" in (dotted(b.value.func) or "").lower() for b in bound):
        return False  # (a loader, or what the caller hands over: batches, not one batch's parts)
    at = body.index(loop)
    made = any(isinstance(s, ast.Assign) and any(dotted(t) == key for t in s.targets)
               and isinstance(s.value, (ast.List, ast.Dict)) and not getattr(s.value, "elts", getattr(s.value, "keys", []))
               for s in body[:at])
    return made and any(isinstance(n, ast.Call) and sem.is_optimizer_step(n) for s in body[at + 1:] for n in sem.subtree(s))


def _backpropagated(ctx: Context, key: str, node: ast.AST) -> bool:
    """``total = total + ...; total.backward()`` sums losses on purpose."""
    sem = ctx.semantic
    scope = sem.scope_of(node)
    if isinstance(scope, ast.Lambda):
        return False
    keys = {key}
    for n in sem.local_nodes(scope):  # ``loss = losses[i]`` / ``for loss in losses:``: the kept losses, one by one
        if isinstance(n, ast.Assign) and any(isinstance(s, ast.Subscript) and dotted(s.value) == key
                                             for s in ([n.value.left] if isinstance(n.value, ast.BinOp) else [n.value])):
            keys.update(d for t in n.targets if (d := dotted(t)))  # (``loss_q = losses_q[-1] / task_num`` too)
        elif isinstance(n, (ast.For, ast.AsyncFor)) and dotted(n.iter) == key and dotted(n.target):
            keys.add(dotted(n.target))  # type: ignore[arg-type]
    for n in sem.local_nodes(scope):  # ``mean = total / len(envs)``, ``obj = mean + penalty``: arithmetic of the sum
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.BinOp) and keys & {
                dotted(x) for x in sem.subtree(n.value) if isinstance(x, (ast.Name, ast.Attribute))}:
            keys.update(d for t in n.targets if (d := dotted(t)))
    for n in sem.local_nodes(scope):
        if sem.is_backward_call(n) and keys & {dotted(x) for x in sem.subtree(n)}:
            return True  # (backpropagated later: the graphs are kept on purpose)
        if isinstance(n, ast.Call) and (ctx.call_name(n) or "") in ("torch.stack", "torch.cat", "sum"):
            if any(dotted(a) == key for a in n.args) and _feeds_backward(ctx, n):
                return True
    return False


def _feeds_backward(ctx: Context, call: ast.Call) -> bool:
    sem = ctx.semantic
    for a in sem.ancestors(call):
        if isinstance(a, ast.Call) and sem.is_backward_call(a):
            return True
        if isinstance(a, ast.stmt):
            return isinstance(a, ast.Assign) and any(
                sem.is_backward_call(n) and dotted(getattr(n.func, "value", None)) in {dotted(t) for t in a.targets}
                for n in sem.calls_named("backward") if sem.scope_of(n) is sem.scope_of(a))
    return False
