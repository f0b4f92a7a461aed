"""What a step reads back, for TD603: whether a value is a tensor or a host number, whether a tensor was made or
copied on the host (reading it waits for no GPU), whether a batch was moved to the device, and how a message
names a sync (``.item()``, ``float(loss)``, ``print(t)``)."""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from torchdoctor.check.astutil import DTYPE_NAMES, FACTORIES, HOST_COPIES, call_argument, dotted, method_name, param_default, root_name, strip_methods, string_value, target_names
from torchdoctor.check.patterns import lazy
from torchdoctor.check.semantic import program
from torchdoctor.check.semantic.forwards import moved_params, reached_from_forward
from torchdoctor.check.semantic.kinds import plain_values, unwrap_iter
from torchdoctor.check.semantic.models import construction

if TYPE_CHECKING:
    from torchdoctor.check.context import Context

__all__ = ["SAME_PLACE", "SYNC_METHODS", "before_the_first_move", "batch_on_device", "host_copy_of_cpu_data", "host_number", "inner_sync", "is_sync_call", "loader_batch_on_host",
           "made_on_host", "moving_helper", "sync_site", "tensor_value"]


SYNC_METHODS = ("item", "cpu", "tolist")
REDUCING_METHODS = frozenset({"sum", "mean", "max", "min", "norm", "amax", "amin", "count_nonzero", "prod", "std", "var"})
_LOSS_NAME = lazy(r"^(loss\d?|.*_loss|loss_(?!scale|names?$|keys?$|types?$|fn$|func$).*|losses)$")  # (``loss1``: a part)
# (``loss_scale_value``: AMP's scale, a float; ``loss_name``, ``loss_key``: the strings that name losses)


def is_sync_call(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in SYNC_METHODS and not node.args and not node.keywords)


def inner_sync(node: ast.Call) -> bool:
    """Another sync deeper in the same chain (`x.cpu().numpy().tolist()`): that one is the site."""
    cur = node.func.value if isinstance(node.func, ast.Attribute) else None
    while cur is not None:
        if is_sync_call(cur):
            return True
        if isinstance(cur, ast.Call) and isinstance(cur.func, ast.Attribute):
            cur = cur.func.value
        elif isinstance(cur, (ast.Attribute, ast.Subscript)):
            cur = cur.value
        else:
            cur = None
    return False


def tensor_value(ctx: Context, expr: ast.AST, at: ast.AST) -> bool:
    from torchdoctor.check.rules.forward_values import forward_value  # (it reads host numbers: imported here)

    if isinstance(expr, ast.Compare):  # ``float((pred == label).long().sum())``: an elementwise comparison
        return ctx.semantic.expr_kind(expr, at) == "tensor" and not any(
            isinstance(side, ast.Name) and host_number(ctx, side, at) for side in (expr.left, *expr.comparators))
    if isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Attribute) and expr.value.attr == "data" \
            and isinstance(expr.slice, ast.Constant) and isinstance(expr.value.value, ast.Name):
        return tensor_value(ctx, expr.value.value, at)  # ``loss.data[0]``: PyTorch 0.3's spelling of ``loss.item()``
    if isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Name) and _LOSS_NAME.match(expr.value.id):
        b = ctx.semantic.binding_at(expr.value.id, at)  # ``loss, loss_dict = model.cal_loss(batch)``, then
        made = b.value if b is not None and not b.is_param and b.index is not None else None  # ``loss_dict[name]``
        return isinstance(made, ast.Call) and isinstance(made.func, ast.Attribute) \
            and ctx.semantic.expr_kind(made.func.value, at) in ("model", "wrapper")  # (a model's own loss method)
    if isinstance(expr, ast.Attribute) and expr.attr == "data" and isinstance(expr.value, ast.Name):
        return tensor_value(ctx, expr.value, at)  # ``float(loss1.data)``: the tensor's data, where the tensor is
    if isinstance(expr, ast.Attribute):
        return ctx.semantic.expr_kind(expr, at) == "tensor"  # ``outputs.loss``, ``out.logits``
    if isinstance(expr, ast.Name):
        b = ctx.semantic.binding_at(expr.id, at)
        return (ctx.semantic.kind_of(expr.id, at) == "tensor" or bool(_LOSS_NAME.match(expr.id))
                or b is not None and b.value is not None and _grown_by_tensors(ctx, expr.id, b)
                or b is not None and not b.is_param and isinstance(b.value, ast.Call) and forward_value(ctx, expr, at)) \
            and not host_number(ctx, expr, at)  # (``nlabel = (labels.sum(2) > 0).sum(1)`` of a loss forward's input)
    return False


def host_number(ctx: Context, name: ast.Name, at: ast.AST, depth: int = 0) -> bool:
    """``loss`` bound to a Python number (``loss = 0.0``, ``loss = loss.item()``, a ``range()`` counter, arithmetic
    of such numbers: ``smooth = beta * smooth + (1 - beta) * loss_f``)."""
    b = ctx.semantic.binding_at(name.id, at)
    if b is None or b.value is None:
        loop = ctx.semantic.parent(b.node) if b is not None else None
        if not isinstance(loop, (ast.For, ast.AsyncFor, ast.comprehension)):
            return False  # (``["val_{}".format(i) for i in range(n)]``: a comprehension's counter too)
        if isinstance(loop.iter, ast.Call) and (dotted(loop.iter.func) or "").rsplit(".", 1)[-1] in ("trange", "tnrange"):
            return True  # ``for i in tqdm.trange(n)``: ints
        iters, counter = unwrap_iter(loop.iter)  # ``for i in tqdm(range(n))``: ints
        if counter and isinstance(loop.target, ast.Tuple) and loop.target.elts and b.node is loop.target \
                and name.id in target_names(loop.target.elts[0]):
            return True
        target = loop.target.elts[-1] if counter and isinstance(loop.target, ast.Tuple) and len(loop.target.elts) == 2 \
            else loop.target
        if isinstance(target, ast.Tuple) and len(target.elts) == len(iters) > 1:  # ``zip(["train", "val"], loaders)``
            return any(isinstance(t, ast.Name) and t.id == name.id and plain_values(it) for t, it in zip(target.elts, iters))
        return all(isinstance(i, ast.Call) and (dotted(i.func) or "") in ("range",) for i in iters)
    value = b.value
    if isinstance(value, ast.BinOp) and depth < 3:
        return _host_arithmetic(ctx, value, b.node, depth + 1)
    if isinstance(value, ast.Call) and depth < 3 and (funcs := ctx.semantic.resolve(value)):
        if value.args and all(_host_leaf(a) for a in value.args) and not value.keywords:
            return True  # ``overflow = bad_number(loss.item())``: an in-file helper handed host numbers only
        return all(_returns_host(ctx, f, b.index) for f in funcs)  # ``test_loss, acc = evaluate(...)``
    if isinstance(value, ast.Call) and b.index is None and (returns := getattr(ctx.semantic.external(value), "returns",
                                                                                None)) in ("host", "host_or_first"):
        if returns == "host":
            return True  # ``train_iou = iou_on_batch(masks, preds)`` of another module, returning ``np.mean(ious)``
        first = value.args[0] if value.args and not isinstance(value.args[0], ast.Starred) else None
        if isinstance(first, ast.Name) and depth < 3 and host_number(ctx, first, b.node, depth + 1) \
                or first is not None and _host_leaf(first):
            return True  # ``loss_value_reduce = misc.all_reduce_mean(loss_value)`` of ``loss_value = loss.item()``
    if isinstance(value, ast.Call) and depth < 3 and dotted(value.func) in ("min", "max", "abs") and value.args \
            and not value.keywords:
        args = value.args[0].elts if len(value.args) == 1 and isinstance(value.args[0], (ast.List, ast.Tuple)) \
            else value.args  # (``min([int(lengths.min().item()), 100])``)
        if all(_host_operand(ctx, a, b.node, depth + 1) for a in args):
            return True  # ``end = min(self.args.enc_in + start, x.shape[-1])``: Python compares host ints
        if any(_host_leaf(a) for a in args) and not any(_maybe_tensor(ctx, a, b.node) for a in args):
            return True  # ``n = min(int(lengths.min().item()), max_len // 2)``: an int, and no tensor to pick
    if _size_read(value):
        return True  # ``H, W = target.size(1), target.size(2)``: a tensor's sizes are host ints
    return _host_leaf(value) and not _grown_by_tensors(ctx, name.id, b) or _tracker_reading(ctx, value)


_SIZE_METHODS = frozenset({"size", "dim", "numel", "nelement", "ndimension"})
_OPTIONS = lazy(r"^(self\.)?(args|opt|opts|config|cfg|conf|hparams|hp|params|options|settings)\.\w+$")


def _size_read(expr: ast.AST) -> bool:
    """``x.shape[-1]``, ``x.size(1)``, ``x.ndim``, ``x.numel()``: a tensor's sizes are host ints (no device read)."""
    if isinstance(expr, ast.Subscript):
        expr = expr.value
    if isinstance(expr, ast.Attribute):
        return expr.attr in ("shape", "ndim")
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _SIZE_METHODS


def _maybe_tensor(ctx: Context, expr: ast.AST, at: ast.AST) -> bool:
    """An operand that may be a tensor: a name or attribute whose kind is a tensor, a call that is no host
    conversion, a subscript of one (``lengths[0]``); arithmetic of such."""
    if isinstance(expr, ast.Constant) or _host_leaf(expr) or _size_read(expr):
        return False
    if isinstance(expr, ast.BinOp):
        return _maybe_tensor(ctx, expr.left, at) or _maybe_tensor(ctx, expr.right, at)
    if isinstance(expr, ast.UnaryOp):
        return _maybe_tensor(ctx, expr.operand, at)
    if isinstance(expr, ast.Name):
        return not host_number(ctx, expr, at, 3) and ctx.semantic.kind_of(expr.id, at) in ("tensor", None) \
            and _bound_to_a_tensor_maybe(ctx, expr, at)
    if isinstance(expr, ast.Attribute):
        return ctx.semantic.expr_kind(expr, at) == "tensor" and not _OPTIONS.match(dotted(expr) or "")
    return True


def _bound_to_a_tensor_maybe(ctx: Context, name: ast.Name, at: ast.AST) -> bool:
    """``max_len = config.get("max_len", 200)`` is an option, not a tensor; a name of no known binding (a
    parameter, a loop target) may hold one."""
    b = ctx.semantic.binding_at(name.id, at)
    if b is None or b.is_param or b.value is None:
        return ctx.semantic.kind_of(name.id, at) == "tensor" or b is not None
    value = b.value
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "get" \
            and len(value.args) == 2 and isinstance(value.args[1], ast.Constant):
        return False  # (a config's value with a literal default)
    if isinstance(value, ast.Constant) or _OPTIONS.match(dotted(value) or ""):
        return False
    return ctx.semantic.kind_of(name.id, at) == "tensor"


def _host_operand(ctx: Context, expr: ast.AST, at: ast.AST, depth: int) -> bool:
    """An operand of Python's ``min``/``max`` that is a host number: a literal, a size, an option (``self.args.enc_in``),
    a name bound to one of them, or arithmetic of such."""
    if isinstance(expr, ast.Constant):
        return type(expr.value) in (int, float)
    if isinstance(expr, ast.BinOp):
        return _host_operand(ctx, expr.left, at, depth) and _host_operand(ctx, expr.right, at, depth)
    if isinstance(expr, ast.UnaryOp):
        return _host_operand(ctx, expr.operand, at, depth)
    if _size_read(expr) or _host_leaf(expr) or isinstance(expr, ast.Attribute) and _OPTIONS.match(dotted(expr) or ""):
        return True
    if isinstance(expr, ast.Name) and depth < 3:
        if host_number(ctx, expr, at, depth):
            return True
        b = ctx.semantic.binding_at(expr.id, at)
        return b is not None and not b.is_param and b.index is None and b.value is not None \
            and (_size_read(b.value) or isinstance(b.value, ast.Attribute) and bool(_OPTIONS.match(dotted(b.value) or "")))
    return False


_TRACKER_FEEDS = frozenset({"update", "add", "append", "log", "record", "push", "add_scalar"})


def _tracker_reading(ctx: Context, value: ast.AST) -> bool:
    """``running = self.book.result()["loss"]`` / ``meter.avg`` of an object that the file feeds Python numbers
    only (``self.book.update("loss", loss.item())``, every such call): what it hands back is a number too."""
    recv, read = value, False
    while isinstance(recv, (ast.Subscript, ast.Call, ast.Attribute)):
        if isinstance(recv, ast.Call):
            if not isinstance(recv.func, ast.Attribute) or any(not isinstance(a, ast.Constant) for a in recv.args):
                return False
            recv = recv.func
        read = read or isinstance(recv, ast.Attribute)
        recv = recv.value
        key = dotted(recv)
        if key and read and (fed := _feeds_of(ctx, key)) is not None:
            return bool(fed)
    return False


def _feeds_of(ctx: Context, key: str) -> list[ast.Call] | None:
    """The calls that feed ``key`` (``key.update(...)``), when each one hands it Python numbers and constants only
    (at least one host number: ``.item()``, ``float(...)``); None when some call may hand it a tensor."""
    fed = [c for c in ctx.semantic.calls_named(*_TRACKER_FEEDS) if isinstance(c.func, ast.Attribute)
           and dotted(c.func.value) == key]
    if not fed:
        return None
    for c in fed:
        args = [*c.args, *(k.value for k in c.keywords)]
        if not any(_host_leaf(a) and not isinstance(a, ast.Constant) for a in args) or not all(
                _host_leaf(a) or isinstance(a, ast.Name) and host_number(ctx, a, c, 3) for a in args):
            return None
    return fed


def _grown_by_tensors(ctx: Context, name: str, b: object) -> bool:
    """``part = 0`` then ``part += crit(o, y)`` in the same function: the number becomes a tensor."""
    sem = ctx.semantic
    scope = sem.scope_of(b.node)  # type: ignore[attr-defined]
    return any(isinstance(aug.target, ast.Name) and aug.target.id == name and sem.scope_of(aug) is scope
               and isinstance(aug.value, ast.Call) and not _host_leaf(aug.value)
               and (sem.expr_kind(aug.value, aug) == "tensor" or sem.call_kind(aug.value, aug) == "loss_fn"
                    or sem.expr_kind(aug.value.func, aug) in ("loss_fn", "model") or _keyed_loss(aug.value.func))
               and not any(isinstance(c, ast.Call) and method_name(c) in HOST_COPIES for c in sem.subtree(aug.value))  # (``+= pred.eq(y).cpu().sum()``: a host tensor)
               for aug in sem.of_type(ast.AugAssign))


_LOSS_KEY = lazy(r"(?i)^(loss|criterion)(_?(fn|func|function))?$")


def _keyed_loss(func: ast.AST) -> bool:
    """``params['loss_function'](out, y)``: the loss function kept in a dict of training parts."""
    return isinstance(func, ast.Subscript) and bool(_LOSS_KEY.match(string_value(func.slice) or ""))


def _returns_host(ctx: Context, func: ast.AST, index: int | None) -> bool:
    """Every ``return`` of the in-file function ``func`` hands back host numbers (element ``index`` of the tuple
    when one is unpacked): ``return losses.avg, accs.avg`` of meters fed ``loss.item()``, ``return total / n``."""
    values = ctx.semantic.kinds.returned_values(func, index)
    return values is not None and all(
        _host_leaf(value) or isinstance(value, ast.Name) and host_number(ctx, value, value, 3)
        or _meter_reading(ctx, value, func) for value in values)


def _meter_reading(ctx: Context, value: ast.AST, func: ast.AST) -> bool:
    """``losses.avg`` of an object made in ``func`` (``losses = AverageMeter()``) whose every method call there is
    given host numbers (``losses.update(loss.item(), n)``): what it averages is a host number too."""
    if not (isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name)):
        return False
    sem, name = ctx.semantic, value.value.id
    b = sem.binding_at(name, value)
    if b is None or not isinstance(b.value, ast.Call) or b.index is not None or sem.scope_of(b.node) is not func \
            or sem.expr_kind(b.value.func, b.node) is not None:
        return False
    fed = meter_feeds(sem, name, func)
    return bool(fed) and all(c.args and _host_leaf(c.args[0]) for c in fed)


def meter_feeds(sem, name: str, func: ast.AST) -> list[ast.Call]:  # type: ignore[no-untyped-def]
    """The method calls on the object ``name`` in the body of ``func`` (``losses.update(loss.item(), n)``): what feeds
    a meter there."""
    return [c for c in sem.body(func) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
            and isinstance(c.func.value, ast.Name) and c.func.value.id == name]


def _host_leaf(value: ast.AST) -> bool:
    if isinstance(value, ast.Constant):
        return value.value is not None  # (``x = None`` in an ``else``: the other branch says what ``x`` holds)
    if isinstance(value, ast.Call) and dotted(value.func) == "getattr" and len(value.args) == 3:
        return isinstance(value.args[2], ast.Constant)  # ``getattr(args, "loss_scale", "none")``: an option
    return isinstance(value, ast.Call) and (isinstance(value.func, ast.Attribute) and value.func.attr in ("item", "tolist")
                                            or dotted(value.func) in ("float", "int", "len", "sum", "round"))


def _host_arithmetic(ctx: Context, expr: ast.BinOp, at: ast.AST, depth: int) -> bool:
    """No operand is known to be a tensor, and some operand is a host number."""
    leaves = [expr.left, expr.right]
    host = False
    while leaves:
        leaf = leaves.pop()
        if isinstance(leaf, ast.BinOp):
            leaves += [leaf.left, leaf.right]
        elif isinstance(leaf, ast.UnaryOp):
            leaves.append(leaf.operand)
        elif isinstance(leaf, ast.Name):
            if host_number(ctx, leaf, at, depth):  # (first: ``k`` of ``enumerate(batch.unbind(0))`` counts, an int)
                host = True
            elif ctx.semantic.kind_of(leaf.id, at) == "tensor":
                return False
        elif _host_leaf(leaf):
            host = True
        elif not isinstance(leaf, (ast.Attribute, ast.Subscript)):
            return False  # a call of unknown result
    return host


def batch_on_device(ctx: Context, name: str, at: ast.AST, loop: ast.AST) -> bool:
    """A batch value of ``loop`` is on the device at ``at``: moved there, or delivered there by Accelerate /
    Fabric (their prepared loaders, in a loop that trains or evaluates). Else it is still host data."""
    sem = ctx.semantic
    if sem.is_moved(name, at) or sem.elements_moved(name, at) or program.accelerator_api(sem) \
            and sem.loop_kind(loop) in ("train", "eval"):
        return True
    return computed_from_moved(ctx, name, at, loop)


def computed_from_moved(ctx: Context, name: str, at: ast.AST, loop: ast.AST, depth: int = 0) -> bool:
    """``pos_total = (label != 0).long().sum()`` with ``label`` taken from a batch moved in place (``data[i] =
    data[i].cuda()``) or moved itself: computed on the device."""
    sem = ctx.semantic
    b = sem.binding_at(name, at)
    if depth > 3 or b is None or b.value is None or b.is_param:
        return False
    if sem.elements_moved(root_name(b.value) or "", b.node):
        return True
    if isinstance(b.value, ast.Call) and sem.is_device_move(b.value) and isinstance(b.value.func, ast.Attribute) \
            and isinstance(b.value.func.value, (ast.Attribute, ast.Subscript)) \
            and root_name(b.value.func.value) in sem.batch_vars(loop):
        return True  # ``gt = data.y.to(opt.device)``: a part of the batch, moved
    names = {n.id for n in sem.subtree(b.value) if isinstance(n, ast.Name) and n.id != name}
    return any(sem.is_moved(n, b.node) or computed_from_moved(ctx, n, b.node, loop, depth + 1) for n in names
               if n in sem.batch_vars(loop))


def host_copy_of_cpu_data(ctx: Context, node: ast.Call, loop: ast.AST) -> bool:
    """`.cpu()`/`.tolist()`/`.item()` on a batch element that is not on the device, or on an item of one
    (``for out, i in zip(outputs, img_ids): i.item()``): no device copy at all."""
    sem = ctx.semantic
    if not sem.contains(loop, node):
        return False  # (``masks.cpu()`` in a forward the loop runs: its own parameter, not the loop's batch)
    if isinstance(node.func, ast.Attribute) and _dataset_field(ctx, node.func.value):
        return True
    name = root_name(node.func.value) if isinstance(node.func, ast.Attribute) else None
    at: ast.AST = node
    for _ in range(3):  # ``gold = batch[1]``, ``[g.item() for g in gold]``: an element of a batch value
        if name is None or name in sem.batch_vars(loop):
            break
        b = sem.binding_at(name, at)
        if b is not None and b.value is not None and not b.is_param and b.index is None \
                and isinstance(b.value, (ast.Subscript, ast.Attribute)) and (root := root_name(b.value)) is not None:
            name, at = root, b.node
        else:
            name = _zipped_from(ctx, name, at)
    return name is not None and name in sem.batch_vars(loop) and not batch_on_device(ctx, name, at, loop)


def _loaded_on_host(ctx: Context, load: ast.Call) -> bool:
    """``torch.load(f, map_location="cpu")``, or a load of a file this program saves from host copies only
    (``torch.save(pred.cpu(), fname)``: restored where it was saved)."""
    where = next((k.value for k in load.keywords if k.arg == "map_location"), load.args[1] if len(load.args) > 1 else None)
    if where is not None:
        return string_value(where) == "cpu" or isinstance(where, ast.Call) and (ctx.call_name(where) or "") == \
            "torch.device" and len(where.args) == 1 and string_value(where.args[0]) == "cpu"
    saves = [c for c in ctx.semantic.calls_named("save") if (ctx.call_name(c) or "") == "torch.save" and c.args]
    host = [c for c in saves if isinstance(c.args[0], ast.Call) and isinstance(c.args[0].func, ast.Attribute)
            and c.args[0].func.attr == "cpu"]
    if not host:
        return False
    if len(host) == len(saves):
        return True
    loaded = _file_words(ctx, load.args[0] if load.args else None, load, whole=True)
    return bool(loaded) and any(w in text for c in host for w in _file_words(ctx, c.args[1] if len(c.args) > 1 else None, c)
                                for text in loaded)


def _file_words(ctx: Context, expr: ast.AST | None, at: ast.AST, whole: bool = False) -> set[str]:
    """The pieces (six characters or more) of the file name literals in ``expr``, through one name: ``fname`` of
    ``fname = os.path.join(d, "best_pred_run{}.pt".format(n))`` gives ``best_pred_run``."""
    if isinstance(expr, ast.Name) and (b := ctx.semantic.binding_at(expr.id, at)) is not None and not b.is_param:
        expr = b.value
    if expr is None:
        return set()
    texts = [n.value for n in ctx.semantic.subtree(expr) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    return set(texts) if whole else {p for t in texts for p in re.split(r"\{[^}]*\}|%\w|/|\.", t) if len(p) >= 6}


_DATASET_NAME = lazy(r"(?i)^(\w*_)?(dataset|data_set|ds)$")


def _dataset_field(ctx: Context, expr: ast.AST) -> bool:
    """``dataset.train_idx`` (OGB's split index): a tensor a dataset object holds, on the host as every dataset's
    (its batches are moved, not it), unless the program moves that field or the dataset itself."""
    if not (isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and _DATASET_NAME.match(expr.value.id)):
        return False
    sem = ctx.semantic
    key = f"{expr.value.id}.{expr.attr}"
    if any(dotted(t) == key for a in sem.of_type(ast.Assign) for t in a.targets):  # type: ignore[attr-defined]
        return False  # (``dataset.x = dataset.x.to(device)``: moved, maybe)
    return not any(isinstance(c.func, ast.Attribute) and c.func.attr in ("to", "cuda") and dotted(c.func.value) in (
        expr.value.id, key) for c in sem.calls_named("to", "cuda"))


def _zipped_from(ctx: Context, name: str, at: ast.AST) -> str | None:
    """The name whose items ``name`` takes: ``ids`` for ``i`` in ``for i in ids`` or ``for o, i in zip(outs, ids)``."""
    b = ctx.semantic.binding_at(name, at)
    source = _iterated(ctx, name, b.node) if b is not None and b.value is None else None
    return source.id if isinstance(source, ast.Name) else None


# (the legacy typed constructors make CPU tensors too: ``torch.LongTensor(lengths)``; ``torch.cuda.LongTensor`` does not)
_HOST_MAKERS = ("torch.from_numpy", "torch.tensor", "torch.as_tensor", "torch.Tensor", "torch.FloatTensor",
                "torch.LongTensor", "torch.IntTensor", "torch.DoubleTensor", "torch.ByteTensor", "torch.BoolTensor",
                "torch.HalfTensor", "torch.ShortTensor")
_TO_HOST = lazy(r"^(to_cpu|tensor_to_cpu|to_numpy|tensor_to_numpy|to_host|cpu_tensor)$")
SAME_PLACE = ("mean", "sum", "min", "max", "argmin", "argmax", "float", "double", "long", "int", "detach", "clone",
               "view", "reshape", "flatten", "squeeze", "unsqueeze", "abs", "exp", "log", "sqrt", "norm", "any", "all",
               "clamp", "clamp_", "round", "permute", "transpose", "contiguous", "pow", "sigmoid", "softmax", "byte",
               "half", "bool", "prod", "std", "var", "median", "topk", "sort", "t", "narrow", "select", "mul", "add",
               "sub", "div", "neg", "squeeze_", "unsqueeze_", "expand", "repeat", "numel", "type_as", "add_", "sub_",
               "mul_", "div_", "uniform_", "normal_", "random_", "fill_", "zero_", "bernoulli_", "exponential_",
               "floor", "ceil", "trunc", "sign", "ne", "eq", "gt", "lt", "ge", "le", "copy_", "nonzero")  # (``torch.empty(2).uniform_(-4, 4).round()``: still on the host)


_NUMBERS = frozenset({"len", "int", "float", "round", "abs", "min", "max", "sum"})


def moving_helper(ctx: Context, call: ast.Call) -> bool:
    """``to_gpu(lengths)``: a helper (named for it, or a function of this file or of another module of the project)
    that moves what it is handed to a device (``if torch.cuda.is_available(): x = x.cuda()``)."""
    sem = ctx.semantic
    if sem.moves_by_helper(call):
        return True
    funcs = sem.resolve(call)
    if funcs:
        return any(moved_params(sem, f) for f in funcs)
    return bool(getattr(sem.external(call), "moves", None))


def iterated_source(ctx: Context, name: str, target: ast.AST) -> ast.AST | None:
    """What a ``for`` loop whose target is ``target`` takes ``name`` from (``_iterated``, for the rules)."""
    return _iterated(ctx, name, target)


def _iterated(ctx: Context, name: str, target: ast.AST) -> ast.AST | None:
    """What a ``for`` loop whose target is ``target`` takes ``name`` from: its iterable (``for x in xs``), or
    the matching argument of ``enumerate(xs)`` / ``zip(outs, ids)``."""
    loop = ctx.semantic.parent(target)
    if not isinstance(loop, (ast.For, ast.comprehension)) or loop.target is not target:
        return None
    if isinstance(target, ast.Name):
        return loop.iter
    it = loop.iter
    if not (isinstance(target, ast.Tuple) and isinstance(it, ast.Call) and it.args and not it.keywords):
        return None
    at = next((i for i, e in enumerate(target.elts) if isinstance(e, ast.Name) and e.id == name), None)
    kind = dotted(it.func)
    if kind == "enumerate" and len(target.elts) == 2 and at == 1:
        return it.args[0]
    inner, zipped = target.elts[-1], it.args[0]
    if kind == "enumerate" and len(target.elts) == 2 and isinstance(inner, ast.Tuple) and isinstance(zipped, ast.Call) \
            and dotted(zipped.func) == "zip" and len(inner.elts) == len(zipped.args):  # ``for i, (s, n) in enumerate(zip(a, b))``
        return next((arg for e, arg in zip(inner.elts, zipped.args) if isinstance(e, ast.Name) and e.id == name), None)
    if kind == "zip" and len(target.elts) == len(it.args) and at is not None:
        return it.args[at]
    return None


def made_on_host(ctx: Context, expr: ast.AST, at: ast.AST, depth: int = 0) -> bool:
    """``expr`` is a tensor made on the host and never moved: ``torch.from_numpy(a)``, ``torch.tensor(xs)``
    without a device, ``torch.empty_like(t)`` of such a tensor, or a name last bound to one."""
    if depth > 16:
        return False
    if isinstance(expr, ast.Name):
        b = ctx.semantic.bindings.at(expr.id, at)
        if b is not None and b.node is not expr and _before_the_first_move(ctx, b, at):
            return True  # ``pred_mask = alen[:, None] < lengths[None] - 1`` before ``x, lengths = to_cuda(x, lengths)``
        if b is not None and b.is_param and isinstance(b.node, (ast.FunctionDef, ast.AsyncFunctionDef)) and depth < 6:
            sites = ctx.semantic.call_sites(b.node)  # ``def error(preds, targets)`` every call of which hands it host
            given = [call_argument(s, b.node, expr.id) for s in sites]  # copies: ``error(get_predictions(out),
            return bool(sites) and all(g is not None and made_on_host(ctx, g, s, depth + 2)  # y.cpu())``
                                       and not _numpy_number(ctx, g, s) for g, s in zip(given, sites))
        if b is not None and b.value is None:  # ``for pred in host_list``, ``for i, pred in enumerate(host_list)``
            loop = ctx.semantic.parent(b.node)
            if loop is not None and loop is ctx.semantic.enclosing_loop(at, "batch") and \
                    expr.id in ctx.semantic.batch_vars(loop):
                return not batch_on_device(ctx, expr.id, at, loop)  # ``targets`` of the batch, never moved
            source = _iterated(ctx, expr.id, b.node)
            return source is not None and made_on_host(ctx, source, b.node, depth + 1)
        if b is not None and b.index is not None and isinstance(b.value, ast.Call) \
                and isinstance(b.value.func, ast.Attribute) and b.value.func.attr in SAME_PLACE \
                and not (ctx.call_name(b.value) or "").startswith("torch."):
            return made_on_host(ctx, b.value.func.value, b.node, depth + 1)  # ``values, indices = t.cpu().max(1)``
        if b is not None and b.index is not None and isinstance(b.value, ast.Call) and _handed_back(ctx, b, expr.id):
            given = next(a for a in b.value.args if isinstance(a, ast.Name) and a.id == expr.id)
            return made_on_host(ctx, given, b.node, depth + 1)
        if b is not None and b.index is not None and isinstance(b.value, ast.Call) \
                and (ctx.call_name(b.value) or "") in _PAIRED_REDUCTIONS and b.value.args:
            return made_on_host(ctx, b.value.args[0], b.node, depth + 1)  # ``best, j = torch.max(ious_of_host, 0)``
        if b is not None and b.index is not None and isinstance(b.value, ast.Call):
            return _returns_host_tensor(ctx, b.value, b.index, depth)  # ``out, gt = run_one(...)``
        return b is not None and b.value is not None and b.node is not expr and \
            made_on_host(ctx, b.value, b.node, depth + 1)
    if isinstance(expr, ast.IfExp):  # ``gt = batch["H"] if "H" in batch else None``
        sides = [x for x in (expr.body, expr.orelse) if not (isinstance(x, ast.Constant) and x.value is None)]
        return bool(sides) and all(made_on_host(ctx, x, at, depth + 1) for x in sides)
    if isinstance(expr, ast.Attribute) and expr.attr in ("data", "grad"):  # ``out.data``, ``h0.grad`` of a host tensor
        return made_on_host(ctx, expr.value, at, depth)  # (syntax only, bounded by the tree: no hop counted)
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
        return _host_attribute(ctx, expr, depth)
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and _host_property(ctx, expr, at, depth):
        return True  # ``val_loss.avg`` of Horovod's ``Metric``, which sums host copies: a host tensor
    if isinstance(expr, ast.Attribute) and (root := _numpy_root(ctx, expr)) is not None:
        return root  # ``np.finfo(np.float32).eps``: a NumPy value, no tensor
    if isinstance(expr, ast.Subscript):  # ``losses[i:i + n]`` of a host tensor
        entry = _entry_assigned(ctx, expr, at)
        if entry is not None:  # ``batch["loss"] = self.criterion(**batch)`` before ``batch["loss"].item()``
            return made_on_host(ctx, entry.value, entry, depth + 1)
        return made_on_host(ctx, expr.value, at, depth)
    if isinstance(expr, ast.ListComp):  # ``[x.detach().cpu() for x in outputs]``
        return made_on_host(ctx, expr.elt, expr, depth + 1)
    if isinstance(expr, ast.JoinedStr) or isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod) \
            and isinstance(expr.left, ast.Constant) and isinstance(expr.left.value, str):
        return True  # ``"%4f" % (self.sum_ / self.num_)``: a string, read already (where it was formatted)
    if isinstance(expr, ast.BinOp):  # ``(flow - flow_gt) ** 2`` with ``flow`` copied to the host: a host result
        sides = [x for x in (expr.left, expr.right) if not isinstance(x, ast.Constant) and not (  # (Python numbers
            isinstance(x, ast.Call) and isinstance(x.func, ast.Name) and x.func.id in _NUMBERS)]  # place nothing)
        return bool(sides) and any(made_on_host(ctx, x, at, depth + 1) for x in sides)
    if isinstance(expr, ast.Compare) and len(expr.comparators) == 1:  # ``pred[:, None] > iouv[None]``
        sides = [expr.left, expr.comparators[0]]  # (``int(y[0])``: a Python number, read already)
        return all(isinstance(x, ast.Constant) or isinstance(x, ast.Call) and isinstance(x.func, ast.Name)
                   and x.func.id in _NUMBERS or made_on_host(ctx, x, at, depth + 1) for x in sides)
    if isinstance(expr, ast.Call) and dotted(expr.func) in ("copy.deepcopy", "deepcopy") and expr.args:
        return made_on_host(ctx, expr.args[0], at, depth + 1)
    if not isinstance(expr, ast.Call) or any(k.arg == "device" for k in expr.keywords):
        return False
    name = ctx.call_name(expr) or ""
    if name.startswith("numpy.") or isinstance(expr.func, ast.Attribute) and expr.func.attr == "astype":
        return True  # ``np.ceil(np.log(n)).astype("int")``: a NumPy value (``astype`` is NumPy's, not torch's)
    if any(k.arg == "return_tensors" for k in expr.keywords):
        return True  # ``tokenizer(text, return_tensors="pt")``: a tokenizer makes its tensors on the host
    if name.startswith("torch.") and name.rsplit(".", 1)[-1] in FACTORIES and name not in _HOST_MAKERS \
            or name in ("torch.fft.fftfreq", "torch.fft.rfftfreq"):
        return True  # ``iouv = torch.linspace(0.5, 0.95, 10)``, ``torch.fft.fftfreq(n)``: no device given
    if _TO_HOST.search(name.rsplit(".", 1)[-1]):
        return True  # ``to_cpu(loss)``, ``tensor_to_numpy(x)``: a helper that copies to the host
    if name.startswith("torch.") and name.rsplit(".", 1)[-1] in ("argmin", "argmax", "min", "max", "sum", "mean",
                                                                "topk", "sort", "stack", "cat", "exp", "log", "sigmoid",
                                                                "softmax", "log_softmax", "abs", "sqrt", "tanh", "round",
                                                                "clamp", "squeeze", "unsqueeze", "flatten", "norm",
                                                                "prod", "fftshift", "ifftshift") \
            and expr.args:
        first = expr.args[0]  # a reduction of a host tensor stays on the host
        return made_on_host(ctx, first.elts[0] if isinstance(first, (ast.List, ast.Tuple)) and first.elts else first,
                             at, depth + 1)
    if name in _BINARY_OPS and len(expr.args) >= 2:  # ``torch.matmul(x, self.W.t())`` with ``W`` made on the host: a
        return any(made_on_host(ctx, a, at, depth + 1) for a in expr.args[:2])  # host result (or no result at all)
    if isinstance(expr.func, ast.Attribute) and expr.func.attr in ("cpu", "numpy") and not expr.args:
        return True  # ``out.detach().cpu()``: copied to the host (that copy is the sync, reported where it is)
    if isinstance(expr.func, ast.Attribute) and expr.func.attr == "to" and ctx.semantic.is_device_move(expr) \
            and ((ctx.semantic.move_device(expr) or "").strip("'\"") == "cpu" or _cpu_device_name(ctx, expr)):
        return True  # ``probs_host = probs.to("cpu")``: likewise; ``.to(loss_device)`` of ``torch.device("cpu")``
    if isinstance(expr.func, ast.Attribute) and expr.func.attr in SAME_PLACE and not name.startswith("torch.") \
            or _dtype_cast(ctx, expr):
        return made_on_host(ctx, expr.func.value, at, depth)  # ``losses.mean()`` of a host tensor (``.to(torch.int64)``)
    if isinstance(expr.func, ast.Attribute) and expr.func.attr in ("sample", "rsample") and not expr.args:
        dist = expr.func.value  # ``Categorical(probs).sample()`` of host probabilities: drawn on the host
        if isinstance(dist, ast.Name) and (b := ctx.semantic.binding_at(dist.id, at)) is not None and not b.is_param:
            dist = b.value
        if isinstance(dist, ast.Call) and (ctx.call_name(dist) or "").startswith("torch.distributions.") \
                and (dist.args or dist.keywords):
            values = [*dist.args, *(k.value for k in dist.keywords)]
            return all(made_on_host(ctx, v, at, depth + 1) or _number_parameter(ctx, v, at)
                       for v in values if not isinstance(v, ast.Constant))
    if name in _HOST_MAKERS:
        return name == "torch.from_numpy" or not any(tensor_value(ctx, a, at) for a in expr.args)
    if name == "torch.load":
        return _loaded_on_host(ctx, expr)
    if not name.startswith("torch.") and _returns_host_tensor(ctx, expr, None, depth):
        return True  # ``output = test_video(lq, model)`` whose every return is ``model(x).detach().cpu()`` or such
    if expr.args and (ctx.semantic.expr_kind(expr.func, at) == "loss_fn" or name.startswith("torch.nn.functional.")
                      and name.endswith("_loss")) and all(made_on_host(ctx, a, at, depth + 1) for a in expr.args
                                                          if not isinstance(a, ast.Constant)):
        return True  # ``loss = criterion(pred.cpu(), y.cpu())``: a loss of host tensors is computed on the host
    if isinstance(expr.func, ast.Name) and not name.startswith("torch.") and expr.args \
            and all(isinstance(k.value, ast.Constant) for k in expr.keywords) \
            and ctx.semantic.expr_kind(expr.func, at) is None and ctx.semantic.call_kind(expr, at) is None:
        # ``correct = process_batch(predn, labelsn, iouv)``: a helper given host tensors only hands back host tensors
        values = [a for a in expr.args if not isinstance(a, ast.Constant)]
        return bool(values) and all(made_on_host(ctx, a, at, depth + 1) for a in values) \
            and not _moving_lambda(ctx, expr.func, at) and not moving_helper(ctx, expr)
    return name.startswith("torch.") and name.endswith("_like") and bool(expr.args) and \
        made_on_host(ctx, expr.args[0], at, depth + 1)


def _dtype_cast(ctx: Context, expr: ast.Call) -> bool:
    """``t.to(torch.int64)`` (or ``.to(dtype=...)``): a cast that leaves the tensor where it is."""
    if not (isinstance(expr.func, ast.Attribute) and expr.func.attr == "to") or len(expr.args) > 1 \
            or any(k.arg != "dtype" for k in expr.keywords) or not (expr.args or expr.keywords):
        return False
    return not expr.args or (dotted(expr.args[0]) or "").rsplit(".", 1)[-1] in DTYPE_NAMES \
        and (dotted(expr.args[0]) or "").startswith(("torch.", "th."))


def _number_parameter(ctx: Context, expr: ast.AST, at: ast.AST) -> bool:
    """``alpha`` of ``def mixup_data(x, alpha=0.2)``: a parameter whose default is a number (a hyperparameter,
    handed ``opt.mixup_alpha`` by the caller), so a distribution built from it draws on the host."""
    if not isinstance(expr, ast.Name):
        return False
    b = ctx.semantic.binding_at(expr.id, at)
    if b is None or not b.is_param or not isinstance(b.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    default = param_default(b.node, expr.id)
    return isinstance(default, ast.Constant) and isinstance(default.value, (int, float)) \
        and not isinstance(default.value, bool)


def _handed_back(ctx: Context, b: object, name: str) -> bool:
    """``ys_hat, frame_lens = self.model(xs, frame_lens)``: a model's output rebinds the name of the lengths it was handed
    (a sequence model hands back the lengths it was given, or lengths it computed from them): they are where the
    input was. (A recurrent state handed back, ``out, hidden = rnn(x, hidden)``, is not: it lives with the model.)"""
    call = b.value  # type: ignore[attr-defined]
    return "len" in name.lower() and isinstance(b.node, ast.Assign) and ctx.semantic.expr_kind(call.func, b.node) in ("model", "wrapper") \
        and any(isinstance(a, ast.Name) and a.id == name for a in call.args)  # type: ignore[attr-defined]


def _cpu_device_name(ctx: Context, move: ast.Call) -> bool:
    """``.to(loss_device)`` where every binding of ``loss_device`` is the CPU (``torch.device("cpu")``: a loss computed
    on the host on purpose)."""
    device = ctx.semantic.move_device(move) or ""
    bound = ctx.semantic.bindings_of(device) if device.isidentifier() else []
    return bool(bound) and all(not b.is_param and b.value is not None and program.cpu_device_value(ctx.semantic, b.value)
                               for b in bound)


def _moving_lambda(ctx: Context, func: ast.Name, at: ast.AST) -> bool:
    """``Variable = lambda *a, **k: autograd.Variable(*a, **k).cuda() if USE_CUDA else autograd.Variable(*a, **k)``
    (RL notebooks): the helper moves what it wraps to the device."""
    sem = ctx.semantic
    b = sem.binding_at(func.id, at)
    return b is not None and isinstance(b.value, ast.Lambda) and any(
        isinstance(n, ast.Call) and sem.is_device_move(n) for n in sem.subtree(b.value.body))


_PAIRED_REDUCTIONS = frozenset({"torch.max", "torch.min", "torch.sort", "torch.topk", "torch.kthvalue", "torch.median",
                                "torch.mode"})  # (values and indices, where their input is)
_BINARY_OPS = frozenset({"torch.matmul", "torch.mm", "torch.bmm", "torch.mv", "torch.dot", "torch.add", "torch.sub",
                         "torch.mul", "torch.div"})


def _before_the_first_move(ctx: Context, b: object, at: ast.AST) -> bool:
    """``b`` binds a value in the function of ``at``, before ``at``, from no model call, and the function moves
    values to the device only after ``at`` (``x, lengths = to_cuda(x, lengths)`` further down the step): what it
    computed until then from the batch lies on the host."""
    sem = ctx.semantic
    func = sem.function_of(at)
    if func is None or getattr(b, "is_param", True) or sem.function_of(b.node) is not func:  # type: ignore[attr-defined]
        return False
    stmt = b.node if isinstance(b.node, ast.stmt) else sem.statement_of(b.node)  # type: ignore[attr-defined]
    if not isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
        return False  # (a loop's target, a ``with`` name: asked elsewhere)
    value = stmt.value
    if isinstance(value, ast.Call) and (sem.is_model_call(value) or sem.is_device_move(value)
                                        or any(k.arg == "device" for k in value.keywords)):
        return False
    unpacked = isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Tuple) and isinstance(value, ast.Call)
    if not (unpacked or isinstance(value, ast.Compare) or sem.expr_kind(value, stmt) == "tensor"):
        return False  # (tensors only: ``accumulation = 4`` before ``model.to(device)`` is a number, not a host batch)
    return before_the_first_move(ctx, at)


def before_the_first_move(ctx: Context, at: ast.AST) -> bool:
    """The function of ``at`` moves values to the device (``.to(device)``, ``.cuda()``, ``to_cuda(...)``), and only
    after ``at``: at ``at`` what the step computed from its batch lies on the host."""
    sem = ctx.semantic
    func = sem.function_of(at)
    if func is None:
        return False
    first = next((m for m in sem.device_moves() if sem.function_of(m) is func), None)
    if first is None:
        return False
    here = (at.lineno, at.col_offset)  # type: ignore[attr-defined]
    loop = _innermost_loop(sem, at, func)  # (the same pass: a move in a later loop moves other values)
    if (first.lineno, first.col_offset) <= here or _innermost_loop(sem, first, func) is not loop:
        return False
    moved = [first.func.value] if isinstance(first.func, ast.Attribute) else list(first.args)
    if not any(isinstance(m, ast.Name) for m in moved):
        return False  # (``mask = torch.ones(n, n).to(device)``: a value made for the device, not the step's batch)
    return not any(sem.is_model_call(c) and (c.lineno, c.col_offset) < here and _innermost_loop(sem, c, func) is loop
                   for c in sem.local_nodes(func) if isinstance(c, ast.Call))  # (a model already ran on the batch)


def _innermost_loop(sem: object, node: ast.AST, func: ast.AST) -> ast.AST | None:
    for up in sem.ancestors(node):  # type: ignore[attr-defined]
        if up is func:
            return None
        if isinstance(up, ast.For | ast.AsyncFor | ast.While):
            return up
    return None


def _numpy_root(ctx: Context, expr: ast.Attribute) -> bool | None:
    """True for an attribute of a NumPy call's result (``np.finfo(np.float32).eps``, ``np.random.rand(3).max``);
    None when the chain does not start at a NumPy call."""
    node: ast.AST = expr
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    if isinstance(node, ast.Call):
        return True if (ctx.call_name(node) or "").startswith("numpy.") else None
    return None


def _host_attribute(ctx: Context, expr: ast.Attribute, depth: int) -> bool:
    """``self.cursor`` of a class whose every assignment of it makes a host tensor (``self.cursor =
    torch.zeros(n).long()`` in ``__init__``; ``self.cursor[b] += 16`` keeps it there), never moved."""
    sem = ctx.semantic
    cls = sem.class_of(expr)
    if cls is None or depth > 8:
        return False
    values = [n.value for n in sem.subtree(cls) if isinstance(n, ast.Assign)  # type: ignore[attr-defined]
              and any(isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
                      and t.attr == expr.attr for t in n.targets)]  # type: ignore[attr-defined]
    return bool(values) and all(made_on_host(ctx, v, v, depth + 1) for v in values)


def _host_property(ctx: Context, expr: ast.Attribute, at: ast.AST, depth: int) -> bool:
    """``val_loss.avg`` of ``val_loss = Metric("val_loss")``, a class of this file whose property ``avg`` returns only
    host tensors (``self.sum / self.n`` of ``self.sum = torch.tensor(0.)``: an in-place ``+=`` keeps it there)."""
    sem = ctx.semantic
    b = sem.binding_at(expr.value.id, at)  # type: ignore[attr-defined]
    made = b.value if b is not None and not b.is_param and b.index is None else None
    cls = sem.calls_index.classes.get(made.func.id) if isinstance(made, ast.Call) and isinstance(made.func, ast.Name) \
        else None
    prop = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == expr.attr  # type: ignore[attr-defined]
                 and any(dotted(d) == "property" for d in n.decorator_list)), None) if cls is not None else None
    if prop is None or depth > 8:
        return False
    values = [n.value for n in sem.local_nodes(prop) if isinstance(n, ast.Return)]
    return bool(values) and all(v is not None and made_on_host(ctx, v, v, depth + 1) for v in values)


def _numpy_number(ctx: Context, expr: ast.AST, at: ast.AST, depth: int = 0) -> bool:
    """``lam`` of ``lam = np.random.beta(a, a)`` (also handed back by a helper: ``x, y_a, y_b, lam = mixup_data(x, y)``):
    a NumPy value, a number that meets tensors wherever they are, no host tensor."""
    sem = ctx.semantic
    if depth > 3:
        return False
    if isinstance(expr, ast.Call):
        return (ctx.call_name(expr) or "").startswith("numpy.")
    if not isinstance(expr, ast.Name) or (b := sem.binding_at(expr.id, at)) is None or b.is_param or b.value is None:
        return False
    if b.index is not None and isinstance(b.value, ast.Call):
        funcs = sem.resolve(b.value)
        values = [sem.kinds.returned_values(f, b.index) for f in funcs]
        return bool(funcs) and all(v is not None and all(_numpy_number(ctx, x, x, depth + 1) for x in v) for v in values)
    return _numpy_number(ctx, b.value, b.node, depth + 1)


def _returns_host_tensor(ctx: Context, call: ast.Call, index: int | None, depth: int) -> bool:
    """``call`` runs functions of this file whose every ``return`` hands back a host tensor (element ``index`` of
    the tuple when one is unpacked)."""
    sem = ctx.semantic
    funcs = sem.resolve(call) if depth < 12 else []
    if not funcs and isinstance(call.func, ast.Name) and depth < 12:
        funcs = _call_method_of_object(ctx, call.func, call)  # ``loss_avg()`` of ``loss_avg = MovingAverage()``
    if not funcs and isinstance(call.func, ast.Name) and index is None and depth < 12 \
            and (b := sem.binding_at(call.func.id, call)) is not None and isinstance(b.value, ast.Lambda):
        return made_on_host(ctx, b.value.body, b.value.body, depth + 2)  # ``score = lambda x: f(x).cpu().numpy()``
    if not funcs and sem.project is not None and isinstance(call.func, (ast.Name, ast.Attribute)) \
            and (dotted(call.func) or "").split(".")[0] in (*sem.names.from_imports, *sem.names.imports):
        # ``err = compute_error(pred, gt)`` of another module, whose every return is ``....cpu().numpy()``
        return getattr(sem.project.function_for(sem, call), "returns", None) == "host"  # type: ignore[attr-defined]
    values = [sem.kinds.returned_values(f, index) for f in funcs]
    return bool(funcs) and all(v is not None and all(made_on_host(ctx, x, x, depth + 2) for x in v) for v in values)


def _entry_assigned(ctx: Context, expr: ast.Subscript, at: ast.AST) -> ast.Assign | None:
    """The last ``name["key"] = value`` of the function before ``at``, for ``expr`` = ``name["key"]``."""
    key = string_value(expr.slice)
    if key is None or not isinstance(expr.value, ast.Name):
        return None
    sem = ctx.semantic
    func = sem.function_of(at)
    found = None
    for n in sem.local_nodes(func) if func is not None else ():
        if isinstance(n, ast.Assign) and n.lineno < at.lineno and len(n.targets) == 1 \
                and isinstance(t := n.targets[0], ast.Subscript) and isinstance(t.value, ast.Name) \
                and t.value.id == expr.value.id and string_value(t.slice) == key:
            found = n
    return found


def _call_method_of_object(ctx: Context, func: ast.Name, at: ast.AST) -> list[ast.AST]:
    """``[MovingAverage.__call__]`` for ``loss_avg`` bound to ``MovingAverage()``, a plain class of this file (not a
    module: calling one runs ``forward``)."""
    sem = ctx.semantic
    b = sem.binding_at(func.id, at)
    made = b.value if b is not None and not b.is_param and b.index is None else None
    if not (isinstance(made, ast.Call) and isinstance(made.func, ast.Name)) or made.func.id in sem.module_classes:
        return []
    cls = sem.calls_index.classes.get(made.func.id)
    return [f for f in getattr(cls, "body", ()) if isinstance(f, ast.FunctionDef) and f.name == "__call__"]


def _forward_param_handed_moved(ctx: Context, name: str, at: ast.AST) -> bool:
    """``lengths`` of a module's ``forward(self, x, lengths)`` that the loop calls with a moved tensor there (``x,
    lengths = x.to(device), lengths.to(device)``, then ``model(x, lengths)``): a device tensor in ``forward``."""
    sem = ctx.semantic
    func = sem.function_of(at)
    b = sem.binding_at(name, at)
    if func is None or func.name != "forward" or b is None or not b.is_param or b.node is not func:  # type: ignore[attr-defined]
        return False
    cls = sem.class_of(func)
    params = [a.arg for a in func.args.args][1:]  # type: ignore[attr-defined]
    if cls is None or cls.name not in sem.module_classes or name not in params:  # type: ignore[attr-defined]
        return False
    index = params.index(name)
    for call in sem.calls:
        if not (isinstance(call.func, ast.Name) and len(call.args) > index and isinstance(arg := call.args[index], ast.Name)
                and sem.kind_of(call.func.id, call) in ("model", "wrapper")):
            continue
        made = construction(sem, call.func, call)
        if made is not None and (dotted(made.func) or "").rsplit(".", 1)[-1] == cls.name and sem.is_moved(arg.id, call):  # type: ignore[attr-defined]
            return True
    return False


def module_state(ctx: Context, expr: ast.AST, at: ast.AST) -> str | None:
    """``self.freqs_cos[0, 0]``, ``self.scale`` compared in a module class's ``forward`` (or a method only it runs): a
    buffer or parameter of the module, where the module is."""
    base = expr.value if isinstance(expr, ast.Subscript) else expr
    if not (isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) and base.value.id == "self"):
        return None
    sem = ctx.semantic
    func, cls = sem.function_of(at), sem.class_of(at)
    if func is None or cls is None or cls.name not in sem.module_classes or base.attr not in state_names(ctx, cls) \
            or not (func.name == "forward" or reached_from_forward(sem, func, cls)):  # type: ignore[attr-defined]
        return None
    return ctx.name(expr)


def state_names(ctx: Context, cls: ast.AST) -> set[str]:
    """The attributes a module class registers as buffers (``self.register_buffer("freqs", ...)``) or parameters
    (``self.scale = nn.Parameter(...)``)."""
    sem = ctx.semantic

    def compute() -> set[str]:
        out = set()
        for n in sem.subtree(cls):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "register_buffer" \
                    and n.args and isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str):
                out.add(n.args[0].value)
            elif isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) \
                    and (ctx.call_name(n.value) or "").endswith("nn.Parameter"):
                out.update(t.attr for t in n.targets if isinstance(t, ast.Attribute) and dotted(t.value) == "self")
        return out

    return sem.cached(("state_names", cls), compute)  # type: ignore[no-any-return]


def sync_site(ctx: Context, node: ast.Call) -> str | None:
    """How the message names the sync at ``node``, if it is one."""
    if is_sync_call(node):
        recv = node.func.value  # type: ignore[attr-defined]
        base, keyed = recv, False
        while isinstance(base, ast.Subscript) and node.func.attr == "tolist":  # type: ignore[attr-defined]
            keyed = keyed or not isinstance(base.slice, ast.Name)  # (only rows picked by an index array; not
            # ``enc["input_ids"][0]``, an entry of a batch, nor ``text[:, 0]``, a column of a forward's input)
            base = base.value  # (``pairs[idx_batch].tolist()`` of ``pairs = loader_module.load()``: rows of an array)
        if node.func.attr == "tolist" and isinstance(base, ast.Name) and ctx.semantic.kind_of(base.id, node) != "tensor" \
                and not _forward_param_handed_moved(ctx, base.id, node) \
                and (base is recv or not keyed and not tensor_value(ctx, base, node)
                     and not ctx.semantic.is_moved(base.id, node)):  # type: ignore[attr-defined]
            return None  # most likely a NumPy array already on the host
        if made_on_host(ctx, recv, node):
            return None  # a host tensor: reading it waits for no GPU
        if _own_method(ctx, node):
            return None  # ``meter.item()`` of ``meter = RunningMean()``: the class's own method, not the tensor's
        return None if inner_sync(node) else f"`.{node.func.attr}()`"  # type: ignore[attr-defined]
    number = isinstance(node.func, ast.Name) and node.func.id in ("float", "int", "bool", "str", "to_python_float")
    # (``str(t)`` formats the tensor, as an f-string does; apex's ``to_python_float(t)`` is ``t.item()``)
    if (number or not isinstance(node.func, ast.Attribute) or isinstance(node.func.value, ast.Name)
            and node.func.value.id == "math") and len(node.args) == 1 and (number or (ctx.call_name(node) or "")
                                                                          .startswith("math.")):
        arg = node.args[0]  # ``float(loss)``, ``bool(loss == 0)``, ``10 * log10(1 / mse)``
        parts = [arg.left, *arg.comparators] if isinstance(arg, ast.Compare) else \
            [arg.left, arg.right] if isinstance(arg, ast.BinOp) else [arg]
        tensor = any(tensor_value(ctx, strip_methods(p, SAME_PLACE), node) or _device_element(ctx, p, node)
                     or _torch_reduction_of_a_tensor(ctx, p, node)
                     or isinstance(p, ast.Attribute) and module_state(ctx, p, node) is not None  # ``int(self.queue_ptr)``
                     for p in parts)  # float(loss.detach())
        if tensor and isinstance(arg, ast.Name) and made_on_host(ctx, arg, node):
            return None  # (``float(loss)`` of a parameter every call hands a host value: ``add(loss_avg(), step)``)
        return f"`{ctx.name(node.func)}({ctx.name(arg)})`" if tensor else None
    if isinstance(node.func, ast.Name) and node.func.id in ("max", "min") and len(node.args) == 1 and not node.keywords:
        arg = node.args[0]  # ``range(max(lengths))``: Python compares element by element, one read of each
        if isinstance(arg, ast.Name) and tensor_value(ctx, arg, node) \
                and not made_on_host(ctx, arg, node) and not loader_batch_on_host(ctx, arg, node):
            return f"`{node.func.id}({arg.id})` (Python's, over a tensor: one read per element)"
        return None
    if isinstance(node.func, ast.Name) and node.func.id in ("max", "min") and len(node.args) == 2 and not node.keywords \
            and ctx.semantic.qualname(node.func) in (None, "max", "min", "builtins.max", "builtins.min"):
        names = [a for a in node.args if isinstance(a, ast.Name)]  # ``max(n_valid, 1.0)``: Python compares the two
        if len(names) == 1 and isinstance(other := next(a for a in node.args if a is not names[0]), ast.Constant) \
                and tensor_value(ctx, names[0], node) and not made_on_host(ctx, names[0], node):
            return f"`{node.func.id}({ctx.name(names[0])}, {ctx.name(other)})` (Python's: a bool of the tensor)"
        calls = [a for a in node.args if isinstance(a, ast.Call)]  # ``max(num_pos.data.sum().float(), 1)``: a
        if len(calls) == 1 and isinstance(other := next(a for a in node.args if a is not calls[0]), ast.Constant) \
                and isinstance(other.value, (int, float)) and (  # reduction of a tensor, compared with a number
                    _torch_reduction_of_a_tensor(ctx, calls[0], node)
                    or method_name(calls[0]) in REDUCING_METHODS | {"float", "double", "long", "int"}
                    and tensor_value(ctx, strip_methods(calls[0], SAME_PLACE), node)) \
                and not made_on_host(ctx, calls[0], node):
            return f"`{node.func.id}({ctx.name(calls[0])}, {ctx.name(other)})` (Python's: a bool of the tensor)"
    if isinstance(node.func, ast.Name) and node.func.id == "print":
        grads = [a for a in node.args if isinstance(a, ast.Attribute) and a.attr == "grad"]
        for arg in [*(a for a in node.args if a not in grads), *grads]:  # (an f-string argument is the f-string rule's)
            # (``print(h.grad, h.grad_fn, h)``: ``h`` is the read named; a non-leaf's ``.grad`` may well be None)
            if not isinstance(arg, ast.JoinedStr) and (tensor_value(ctx, arg, node) and not (
                    isinstance(arg, ast.Name) and made_on_host(ctx, arg, node))  # (``pred = out.argmax(1).cpu()``)
                                                       or isinstance(arg, ast.Call)
                                                       and tensor_value(ctx, strip_methods(arg, SAME_PLACE), node)
                                                       and not made_on_host(ctx, arg, node)) \
                    and not loader_batch_on_host(ctx, arg, node):
                return f"`print` of tensor `{ctx.name(arg)}`"  # (``print((pred == y).float().mean())`` too)
    return None


_TESTED_OPS = REDUCING_METHODS | {"isnan", "isinf", "isfinite", "any", "all"}


def _torch_reduction_of_a_tensor(ctx: Context, expr: ast.AST, at: ast.AST) -> bool:
    """``torch.sum(mask)`` (``int(torch.sum(mask))``), ``torch.isnan(loss)`` (``int(torch.isnan(loss).any())``): a
    torch reduction or test of a tensor, where that tensor is (not of a host tensor)."""
    if isinstance(expr, ast.Call) and not (ctx.call_name(expr) or "").startswith("torch."):
        expr = strip_methods(expr, SAME_PLACE)  # (``torch.isnan(loss).any()``)
    if not (isinstance(expr, ast.Call) and expr.args and (ctx.call_name(expr) or "").rsplit(".", 1)[-1] in _TESTED_OPS
            and (ctx.call_name(expr) or "").startswith("torch.")):
        return False
    arg = strip_methods(expr.args[0], SAME_PLACE)
    return (tensor_value(ctx, arg, at) or ctx.semantic.expr_kind(arg, at) == "tensor") and not made_on_host(ctx, arg, at)


def _device_element(ctx: Context, expr: ast.AST, at: ast.AST) -> bool:
    """``int(nlabel[b])``: an element of a tensor computed on the device (not of a batch still on the host, nor of a
    list of names a loader yields)."""
    from torchdoctor.check.rules.forward_values import forward_value

    if not (isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Name)
            and isinstance(expr.slice, (ast.Name, ast.Constant))):
        return False
    sem, name = ctx.semantic, expr.value.id
    loop = sem.enclosing_loop(at, "batch")
    if loop is not None and name in sem.batch_vars(loop):
        return batch_on_device(ctx, name, at, loop)
    b = sem.binding_at(name, at)  # (its kind, or computed in a forward; not a name that sounds like a loss:
    # yolov3's ``loss_components`` is a host copy its loss function hands back)
    return (sem.kind_of(name, at) == "tensor" or b is not None and not b.is_param and isinstance(b.value, ast.Call)
            and bool(forward_value(ctx, expr.value, at))) and not made_on_host(ctx, expr.value, at) \
        and not host_number(ctx, expr.value, at)


def _own_method(ctx: Context, call: ast.Call) -> bool:
    """``meter.item()`` where ``meter = RunningMean()``, a class of this file or of another module of the project
    that defines the method itself (an average kept as Python numbers)."""
    recv = call.func.value  # type: ignore[attr-defined]
    sem = ctx.semantic
    b = sem.binding_at(recv.id, call) if isinstance(recv, ast.Name) else None
    made = b.value if b is not None and not b.is_param else None
    if not isinstance(made, ast.Call) or not (written := dotted(made.func)) or not written.rsplit(".", 1)[-1][:1].isupper():
        return False
    cls = sem.calls_index.classes.get(written)
    if cls is not None:
        return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == call.func.attr  # type: ignore[attr-defined]
                   for n in cls.body)  # type: ignore[attr-defined]
    return sem.project is not None and written.split(".")[0] in (*sem.names.imports, *sem.names.from_imports) \
        and sem.project.function_for(sem, call) is not None  # type: ignore[attr-defined]


def loader_batch_on_host(ctx: Context, expr: ast.AST, at: ast.AST) -> bool:
    """``for feats, tags in loader: print(tags)``: a batch as the loader gives it, never moved: a host tensor."""
    sem = ctx.semantic
    b = sem.binding_at(expr.id, at) if isinstance(expr, ast.Name) else None
    loop = next((up for up in sem.ancestors(b.node) if isinstance(up, (ast.For, ast.AsyncFor))), None) \
        if b is not None and b.value is None and not b.is_param else None
    if not isinstance(loop, (ast.For, ast.AsyncFor)) or not sem.contains(loop.target, b.node) or not sem.contains(loop, at):  # type: ignore[union-attr]
        return False  # (``for i, (images, labels) in enumerate(loader)``: an element of the target, too)
    return any(sem.kinds.is_loader_expr(i) for i in unwrap_iter(loop.iter)[0]) and \
        not batch_on_device(ctx, expr.id, at, loop)  # type: ignore[attr-defined]
