"""Stage 3 rules: batches, targets and the input pipeline (tensors made in the loop: created.py)."""

from __future__ import annotations

import ast
import os

from torchdoctor.check.astutil import PLACEMENT_METHODS, call_argument, dotted, has_kwargs, is_false, is_true, keyword, \
    method_name, param_slot, root_name, string_value, strip_methods
from torchdoctor.check.context import Context
from torchdoctor.check.patterns import lazy
from torchdoctor.check.registry import rule
from torchdoctor.check.rules.pipeline import collates_onto_device, dataset_on_device, is_torch_dataloader
from torchdoctor.check.semantic import flow, loaders, program
from torchdoctor.check.semantic.call_records import unpinned_loader_args
from torchdoctor.check.semantic.loaders import unpinned_returns
from torchdoctor.check.semantic.forwards import forward_moved_params
from torchdoctor.check.semantic.models import construction, moved_keys
from torchdoctor.check.semantic.placement import cpu_only_loop, never_moved
from torchdoctor.findings import Severity

_LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


# ---- TD301 ----------------------------------------------------------------------------
@rule("TD301", calls=("to", "cuda", "cpu"))
def move_result_discarded(call: ast.AST, ctx: Context) -> None:
    """tensor.to(...)/.cuda() as a statement: tensors are not moved in place."""
    assert isinstance(call, ast.Call)
    node = ctx.semantic.parent(call)
    if not isinstance(node, ast.Expr) or not isinstance(call.func, ast.Attribute):
        return
    recv = call.func.value
    if isinstance(recv, ast.Call) or not _is_tensor_value(ctx, recv, call):
        return  # (a fresh temporary moved and dropped, a CUDA warm-up: no name stays behind)
    text = ctx.segment(recv)
    edits = (ctx.replace_edit(node, f"{text} = {ctx.segment(call)}"),) if isinstance(recv, ast.Name) else ()
    name, what = ctx.name(recv), ctx.name(call, 50)
    ctx.report("TD301", call, f"`{what}` returns a moved copy that is discarded: `{name}` stays where it was",
               fix=f"assign the result: `{name} = {what}`", edits=edits)


def _is_tensor_value(ctx: Context, recv: ast.AST, at: ast.AST) -> bool:
    sem = ctx.semantic
    if isinstance(recv, ast.Subscript):
        base = root_name(recv)
        return base is not None and sem.kind_of(base, at) == "tensor" and not _dict_like_batch(ctx, base, at, ok_subscript=True)
    if isinstance(recv, ast.Call):
        return sem.expr_kind(recv, at) == "tensor"
    key = dotted(recv)
    if key is None:
        return False
    if sem.kind_of(key, at) != "tensor":
        return _tensor_parameter(ctx, recv, at) or _field_of_the_batch(ctx, recv, at)
    return not _dict_like_batch(ctx, key, at)


def _field_of_the_batch(ctx: Context, recv: ast.AST, at: ast.AST) -> bool:
    """``src = batch.src`` of ``for i, batch in enumerate(data_loader)``: a field of the loop's batch (a torchtext
    batch's tensor), not a module (which ``.cuda()`` would move in place)."""
    sem = ctx.semantic
    b = sem.binding_at(recv.id, at) if isinstance(recv, ast.Name) else None
    value = b.value if b is not None and not b.is_param and b.index is None else None
    loop = sem.enclosing_loop(at, "batch")
    return isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and loop is not None \
        and value.value.id in sem.batch_vars(loop) and sem.contains(loop, b.node)  # type: ignore[union-attr]


_TENSOR_NAME = lazy(r"(?i)(^|_)tensors?$")


def _tensor_parameter(ctx: Context, recv: ast.AST, at: ast.AST) -> bool:
    """``input_tensor`` of ``def evaluate(encoder, decoder, input_tensor)``: a parameter named for a tensor, not
    annotated as anything else, and every call of the function here hands it a value not known as a model."""
    sem = ctx.semantic
    if not isinstance(recv, ast.Name) or not _TENSOR_NAME.search(recv.id):
        return False
    b = sem.binding_at(recv.id, at)
    if b is None or not b.is_param or b.value is not None and "Tensor" not in (dotted(b.value) or ""):
        return False  # (``b.value``: the annotation)
    func = b.node
    return all(sem.expr_kind(arg, site) not in ("model", "wrapper") for site in sem.call_sites(func)  # type: ignore[arg-type]
               if (arg := call_argument(site, func, recv.id)) is not None)  # type: ignore[arg-type]


def _dict_like_batch(ctx: Context, key: str, at: ast.AST, ok_subscript: bool = False) -> bool:
    """A whole batch object (HF BatchEncoding, PyG Data) whose ``.to()`` works in place."""
    if "torch_geometric" in ctx.source or "BatchEncoding" in ctx.source:
        return True
    if ok_subscript:
        return False
    b = ctx.semantic.binding_at(key, at)
    if b is None or b.value is not None or isinstance(ctx.semantic.parent(b.node), ast.Tuple):
        return False
    return not isinstance(b.node, ast.Tuple) or _enumerated_item(ctx, b.node, key)


def _enumerated_item(ctx: Context, target: ast.Tuple, key: str) -> bool:
    """``for step, batch in enumerate(loader)``: ``batch`` is the whole item, as in ``for batch in loader``."""
    loop = ctx.semantic.parent(target)
    it = getattr(loop, "iter", None)
    return len(target.elts) == 2 and isinstance(target.elts[1], ast.Name) and target.elts[1].id == key \
        and isinstance(it, ast.Call) and (dotted(it.func) or "").rsplit(".", 1)[-1] == "enumerate"


# ---- TD302 ----------------------------------------------------------------------------
@rule("TD302", *_LOOPS)
def batch_not_moved(node: ast.AST, ctx: Context) -> None:
    """A batch element flows into the model or the loss without being moved to the device."""
    sem = ctx.semantic
    info = sem.loop_info(node)
    if not info.is_batch or not info.batch_vars or program.is_rpc_program(sem):
        return
    loader = _loader_construction(ctx, info.loader, node)
    if loader is not None and (dataset_on_device(ctx, loader) or collates_onto_device(ctx, loader)) \
            or _iterator_given_a_device(ctx, info.loader, node):
        return  # ``DataLoader(TensorDataset(u, i, r))`` of tensors already on the device: its batches are there
    body = ctx.semantic.body(node)
    batch = set(info.batch_vars)
    moves = [n for n in body if isinstance(n, ast.Call) and sem.is_device_move(n) and _moves_batch(ctx, n, batch)
             and (sem.move_device(n) or "").strip("'\"") != "cpu"]  # a CPU copy (for logging) is not the input move
    partial = bool(moves)
    # ``batch.to(device)`` as a statement on a whole batch object (BatchEncoding, PyG Data) moves it in place.
    in_place = {root_name(m.func.value) for m in moves if isinstance(ctx.semantic.parent(m), ast.Expr)  # type: ignore[attr-defined]
              and method_name(m) == "to" and isinstance(m.func.value, ast.Name)  # type: ignore[attr-defined]
              and _dict_like_batch(ctx, m.func.value.id, m)}  # type: ignore[attr-defined]
    in_place |= _moved_key_by_key(ctx, body, batch)
    if not partial and (not _whole_batch_unmoved_applies(ctx, node) or cpu_only_loop(sem, node)):
        return  # (``train(model)`` that every call hands a model nothing moves: a notebook's CPU phase, before the
        # cell that picks a device and defines ``train`` again)
    device = (sem.move_device(moves[0]) if moves else None) or _model_device(ctx) or "device"
    if device.strip("'\"") == "cpu":
        return  # ``cpu_model.to("cpu")``: host batches are where the model is
    seen: set[str] = set()
    for use in body:
        if not (isinstance(use, ast.Name) and isinstance(use.ctx, ast.Load)):
            continue
        if flow.is_cpu_name(use.id) or use.id in in_place or not _unmoved(ctx, use.id, use, node, batch) \
                or sem.guards.on_cpu_branch(use) or _unmoved_on_the_cpu_branch_only(ctx, use):
            continue  # (``else: out = model(batch["img"])`` of ``if torch.cuda.is_available():`` runs on the CPU)
        consumer, moved = flow.path_to_consumer(ctx.semantic, use, node)
        if consumer is None and not moved:
            consumer = flow.combined_in_helper(ctx.semantic, use, node)
        if consumer is None or moved or _scatters_inputs(ctx, consumer) or _forward_moves_input(ctx, consumer, use) \
                or isinstance(consumer.func, ast.Name) \
                and flow.consumer_kind(sem, consumer) == "model" and never_moved(sem, consumer.func.id, consumer) \
                or _meets_host_copies(ctx, consumer, use) or _kept_on_the_cpu(ctx, consumer):
            continue  # (``table(ent)`` of a lookup table kept on the host on purpose: host ids, host table)
        element = _element_text(ctx, use)
        if element in seen or flow.is_cpu_name(element.split("[")[-1].strip("'\"]")):
            continue
        seen.add(element)
        callee = ctx.name(consumer.func)
        # (the others moved: the inputs, when what is left feeds the loss; else e.g. the targets)
        moved_what = "inputs were" if flow.consumer_kind(sem, consumer) == "loss" else "other batch elements were"
        why = f"({moved_what} moved)" if partial else f"(the model is on `{device}`)"
        ctx.report("TD302", use, f"batch element `{element}` is used by `{callee}(...)` without being moved to `{device}` {why}",
                   fix=f"move it with the others: `{element}.to({device})`")


def _forward_moves_input(ctx: Context, consumer: ast.Call, use: ast.AST) -> bool:
    """``model(feats)`` of a module class (of this file or of another module of the project) whose ``forward`` moves
    that input itself (``x = x.to("cuda:0")``: a model split over GPUs puts its input on its first stage; a diffusion
    imputer's ``self.process_data(batch)`` moves each element of the batch dict)."""
    sem = ctx.semantic
    if flow.consumer_kind(sem, consumer) == "model" and any(k.arg == "device" for k in consumer.keywords):
        return True  # ``model(audio, device=device)``: the model is told where to put what it is given
    func = consumer.func
    target = func.value if isinstance(func, ast.Attribute) and func.attr == "forward" else func
    made = construction(sem, target, consumer)
    if made is None and isinstance(target, ast.Name) and (b := sem.binding_at(target.id, consumer)) is not None \
            and not b.is_param and b.index is None and b.value is not None:
        made = strip_methods(b.value, PLACEMENT_METHODS)  # ``criterion = MaskedLoss().to(device)``: a loss class's
        made = made if isinstance(made, ast.Call) else None  # object (no model's construction)
    arg = next((i for i, a in enumerate(consumer.args) if sem.contains(a, use)), None)
    if made is None or arg is None:
        return False
    cls = sem.calls_index.classes.get(sem.call_name(made) or "")
    if cls is not None:
        return arg in forward_moved_params(sem, cls)
    written = dotted(made.func)  # a class of another module of the project (``Physio(config, args.device)``)
    return bool(written and sem.project is not None and arg in sem.project.class_moved_inputs(sem, written))  # type: ignore[attr-defined]


def _meets_host_copies(ctx: Context, consumer: ast.Call, use: ast.AST) -> bool:
    """``pred = model(x.to(dev)).cpu()`` then ``criterion(target, pred)``: the loss is computed on the host, where the
    output was brought back; the target rightly stays there. So too when the call itself copies an argument to the
    host (``criterion(float_out.to("cpu"), targets, output_sizes, target_sizes)``: warp-ctc's CTC loss, which wants
    its labels and lengths on the CPU)."""
    sem = ctx.semantic
    others = [a for a in (*consumer.args, *(k.value for k in consumer.keywords)) if not sem.contains(a, use)]
    if not others:
        return False
    if any(_host_copy(sem, a) for a in others):
        return True
    for arg in others:
        if isinstance(arg, ast.Name):
            b = sem.binding_at(arg.id, consumer)
            arg = b.value if b is not None and not b.is_param and b.index is None and b.value is not None else arg
        arg = strip_methods(arg, ("detach", "float", "double", "numpy", "squeeze"), depth=8)
        if not (isinstance(arg, ast.Call) and method_name(arg) == "cpu"):
            return False
    return True


def _host_copy(sem, arg: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``out.cpu()``, ``out.to("cpu")`` (after ``.float()``/``.detach()`` at most), as the argument is written."""
    arg = strip_methods(arg, ("detach", "float", "double", "contiguous"), depth=4)
    return isinstance(arg, ast.Call) and (method_name(arg) == "cpu" and not arg.args or sem.is_device_move(arg)
                                          and (sem.move_device(arg) or "").strip("'\"") == "cpu")


@rule("TD302", ast.Module)
def peeked_batch_not_moved(node: ast.AST, ctx: Context) -> None:
    """``_, (sample_x, sample_y) = next(enumerate(loader))`` (or ``next(iter(loader))``) peeks at a host batch;
    handed as it is to a model that was moved to the device, the forward fails."""
    sem = ctx.semantic
    for stmt in sem.of_type(ast.Assign):
        value = stmt.value  # type: ignore[attr-defined]
        if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "next"):
            continue
        loader = _peeked_loader(ctx, value)
        if loader is None or not program.runs_on_accelerator(sem):
            continue
        names = {n.id for t in stmt.targets for n in sem.subtree(t) if isinstance(n, ast.Name)}  # type: ignore[attr-defined]
        for key in sorted(names):
            for use in sem.reads_of(key):
                b = sem.binding_at(key, use)
                if b is None or b.node is not stmt:
                    continue
                consumer, moved = flow.path_to_consumer(sem, use, stmt)
                if consumer is None or moved or flow.consumer_kind(sem, consumer) != "model" \
                        or not isinstance(consumer.func, ast.Name) or not sem.is_moved(consumer.func.id, consumer) \
                        or _forward_moves_input(ctx, consumer, use):
                    continue  # (``FasterRCNN.forward`` begins with ``x = x.to(device)``)
                ctx.report("TD302", use, f"`{key}`, peeked from `{ctx.name(loader)}` on the host, is used by "
                           f"`{consumer.func.id}(...)`, which was moved to the device",
                           fix=f"move it first: `{key}.to(device)`")
                break


def _peeked_loader(ctx: Context, value: ast.AST) -> ast.AST | None:
    """The loader of ``next(iter(loader))`` / ``next(enumerate(loader))``, when it is a DataLoader of host data."""
    if not (isinstance(value, ast.Call) and dotted(value.func) == "next" and len(value.args) == 1
            and isinstance(inner := value.args[0], ast.Call) and dotted(inner.func) in ("iter", "enumerate")
            and len(inner.args) == 1):
        return None
    loader = inner.args[0]
    made = _loader_construction(ctx, loader, value)
    return loader if made is not None and is_torch_dataloader(ctx, made) and not dataset_on_device(ctx, made) \
        and not collates_onto_device(ctx, made) else None


def _unmoved_on_the_cpu_branch_only(ctx: Context, use: ast.Name) -> bool:
    """``if torch.cuda.is_available(): toks = b.words.cuda()`` / ``else: toks = b.words``, then ``net(toks)``: the
    binding that leaves the element on the host is the CPU branch's, where the model stays on the host too."""
    sem = ctx.semantic
    b = sem.binding_at(use.id, use)
    if b is None or b.is_param or b.value is None or not sem.guards.on_cpu_branch(b.node):
        return False
    return any(other is not b and sem.in_other_branch(other.node, b.node) and other.value is not None
               and any(isinstance(n, ast.Call) and sem.is_device_move(n) for n in sem.subtree(other.value))
               for other in sem.bindings_of(use.id))


def _iterator_given_a_device(ctx: Context, loader: ast.AST | None, at: ast.AST, depth: int = 0) -> bool:
    """torchtext's ``BucketIterator(data, batch_size, device=DEVICE)`` (or ``BucketIterator.splits(...,
    device=DEVICE)``) builds each batch on that device; followed through names and, for a parameter, the loaders
    every caller of this file passes."""
    sem = ctx.semantic
    if depth > 3 or loader is None:
        return False
    if isinstance(loader, ast.Call) and isinstance(loader.func, ast.Name) and loader.func.id in ("enumerate", "iter") \
            and loader.args:
        return _iterator_given_a_device(ctx, loader.args[0], at, depth + 1)
    if isinstance(loader, ast.Call):
        name = (ctx.call_name(loader) or dotted(loader.func) or "").split(".")
        device = keyword(loader, "device")
        return any(part.endswith("Iterator") for part in name[-2:]) and device is not None \
            and (string_value(device.value) or "cuda").split(":")[0] != "cpu"
    key = dotted(loader)
    b = sem.binding_at(key, at) if key else None
    if b is None or b.value is None and not b.is_param:
        return False
    if b.is_param:
        sites = sem.call_sites(b.node)
        return bool(sites) and all(_iterator_given_a_device(ctx, call_argument(site, b.node, key), site, depth + 1)
                                   for site in sites)
    return _iterator_given_a_device(ctx, b.value, b.node, depth + 1)


def _loader_construction(ctx: Context, loader: ast.AST | None, at: ast.AST) -> ast.Call | None:
    """The ``DataLoader(...)`` call a loop's loader expression is (or a name bound to one)."""
    sem = ctx.semantic
    for _ in range(3):
        if isinstance(loader, ast.Call):
            return loader if (ctx.call_name(loader) or "").rsplit(".", 1)[-1] == "DataLoader" else None
        key = dotted(loader) if loader is not None else None
        b = sem.binding_at(key, at) if key else None
        if b is None or b.value is None or b.is_param:
            return None
        loader, at = b.value, b.node
    return None


def _scatters_inputs(ctx: Context, call: ast.Call) -> bool:
    """``net = nn.DataParallel(model).cuda(); net([img.cuda(), annot])``: DataParallel's forward scatters every
    tensor of its inputs to the GPUs itself."""
    sem = ctx.semantic
    key = dotted(call.func)
    b = sem.binding_at(key, call) if key else None
    if b is not None and b.is_param and isinstance(key, str) and "." not in key:
        return _handed_a_wrapper(ctx, b.node, key, 0)
    value = b.value if b is not None and not b.is_param else None
    return value is not None and _data_parallel_value(ctx, value, call)


def _handed_a_wrapper(ctx: Context, func: ast.AST, param: str, depth: int) -> bool:
    """Every call of ``func`` in the file hands ``param`` a DataParallel wrapper (``validate(val_loader, model, ...)``
    given ``nn.DataParallel(net).cuda()``), or a parameter of its own caller that is handed one in turn
    (``Trainer.train(model, ...)`` calling ``Trainer.epoch_train(model, ...)``); with no call in the file, a module
    that calls it wraps the model (``model = make_data_parallel(model, ...)`` in main.py): the same scatter, out of this
    file's sight."""
    sem = ctx.semantic
    sites = sem.call_sites(func)
    if sites:
        given = [call_argument(site, func, param) for site in sites]  # type: ignore[arg-type]
        return all(g is not None and (_data_parallel_value(ctx, g, site) or depth < 2 and isinstance(g, ast.Name)
                                      and (up := _param_behind(sem, g.id, site)) is not None and up is not func
                                      and _handed_a_wrapper(ctx, up, g.id, depth + 1))
                   for g, site in zip(given, sites))
    method = sem.class_of(func) is not None and func.name != "__init__"  # type: ignore[attr-defined]
    return sem.project is not None and sem.project.callers_mention(sem, func, _DATA_PARALLEL, by_class=method)  # type: ignore[attr-defined]


def _param_behind(sem, name: str, at: ast.AST) -> ast.AST | None:  # type: ignore[no-untyped-def]
    """The function whose parameter ``name`` holds at ``at``: bound as one, or rebound only to itself moved (``model =
    model.cuda()``, which keeps a DataParallel wrapper a wrapper)."""
    b, _ = sem.binding_before_self_moves(name, at, PLACEMENT_METHODS)
    return b.node if b is not None and b.is_param else None


def _data_parallel_value(ctx: Context, value: ast.AST, at: ast.AST) -> bool:
    """``nn.DataParallel(net).cuda()``, ``DistributedDataParallel(net, device_ids=[rank])``, or a name bound to one."""
    sem = ctx.semantic
    if isinstance(value, ast.Name):
        b = sem.binding_at(value.id, at)
        if b is None or b.is_param or b.value is None:
            return False
        value = b.value
    return any(isinstance(n, ast.Call) and ((ctx.call_name(n) or "").rsplit(".", 1)[-1] == "DataParallel" or (
        ctx.call_name(n) or "").rsplit(".", 1)[-1] == "DistributedDataParallel" and keyword(n, "device_ids") is not None)
        for n in sem.subtree(value))  # (DDP given ``device_ids`` moves its inputs to ``device_ids[0]`` in forward)


_DATA_PARALLEL = lazy(r"(?i)\bDataParallel\(|data_parallel\(")


def _moved_key_by_key(ctx: Context, body: list[ast.AST], batch: set[str]) -> set[str]:
    """``for k in batch: batch[k] = batch[k].to(device)`` (or ``batch[k] = v.to(device)`` over items(), or
    ``batch[k] = to_var(v)`` of a helper that moves what it is handed): a batch dict moved entry by entry, in place."""
    from torchdoctor.check.rules.host_values import moving_helper  # (host_values imports this stage's neighbours)

    sem = ctx.semantic
    out: set[str] = set()
    for node in body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript):
            base = root_name(node.targets[0])
            if base in batch and any(isinstance(n, ast.Call) and (sem.is_device_move(n) or moving_helper(ctx, n))
                                     for n in sem.subtree(node.value)):
                out.add(base)  # type: ignore[arg-type]
    return out


def _moves_batch(ctx: Context, call: ast.Call, batch: set[str]) -> bool:
    if method_name(call) in ("to", "cuda"):
        return root_name(call.func.value) in batch  # type: ignore[attr-defined]
    return any(root_name(a) in batch for a in call.args)


def _element_text(ctx: Context, use: ast.Name) -> str:
    parent = ctx.semantic.parent(use)
    if isinstance(parent, ast.Subscript) and parent.value is use and isinstance(parent.slice, ast.Constant):
        return ctx.name(parent)
    return use.id


def _unmoved(ctx: Context, name: str, at: ast.AST, loop: ast.AST, batch: set[str], depth: int = 0) -> bool:
    """The value of ``name`` at ``at`` is batch data that no device move touched."""
    b = ctx.semantic.binding_at(name, at)
    if b is None or depth > 6:
        return False
    if b.value is None:  # the loop's own target (a comprehension's: under its ``for`` clause)
        if ctx.semantic.elements_moved(name, at):
            return False  # ``for i in range(len(batch)): batch[i] = batch[i].cuda()`` before ``at``
        parent = ctx.semantic.parent(b.node)
        return parent is loop or b.node is getattr(loop, "target", None) or \
            (isinstance(parent, ast.comprehension) and ctx.semantic.parent(parent) is loop)
    if any(isinstance(n, ast.Call) and (ctx.semantic.is_device_move(n) or method_name(n) == "pin_memory")
           for n in ctx.semantic.subtree(b.value)):
        return False
    if not any(b.node is n for n in ctx.semantic.body(loop)):
        return False
    root = _data_root(b.value)
    if root is None or _entry_moved_before(ctx, b.value, b.node, loop):
        return False
    return _unmoved(ctx, root, b.node, loop, batch, depth + 1)


def _entry_moved_before(ctx: Context, value: ast.AST, at: ast.AST, loop: ast.AST) -> bool:
    """``driving = x["video"][:, :, i]`` after ``x["video"] = x["video"].cuda()`` in the same loop: that entry moved."""
    node = value
    while isinstance(node, ast.Subscript | ast.Attribute | ast.Call):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and isinstance(node.slice, ast.Constant):
            entry = (node.value.id, node.slice.value)
            break
        node = node.func.value if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else \
            node.value if not isinstance(node, ast.Call) else None
    else:
        return False
    sem = ctx.semantic
    here = (at.lineno, at.col_offset)  # type: ignore[attr-defined]
    for n in sem.body(loop):
        if isinstance(n, ast.Assign) and (n.lineno, n.col_offset) < here and len(n.targets) == 1 \
                and isinstance(t := n.targets[0], ast.Subscript) and isinstance(t.value, ast.Name) \
                and isinstance(t.slice, ast.Constant) and (t.value.id, t.slice.value) == entry \
                and any(isinstance(c, ast.Call) and sem.is_device_move(c) for c in sem.subtree(n.value)):
            return True
    return False


_KEEPS_DATA = {"long", "float", "half", "double", "int", "bool", "byte", "view", "reshape", "squeeze", "unsqueeze",
               "permute", "transpose", "flatten", "contiguous", "clone", "detach", "type", "to", "t", "expand",
               "repeat", "get", "narrow", "chunk", "split", "unbind", "values"}
_NOT_DATA = {"shape", "device", "dtype", "ndim", "is_cuda"}


def _data_root(value: ast.AST) -> str | None:
    """The batch name an expression still carries as tensor data (``batch["y"].long()`` -> batch), else None."""
    node = value
    while True:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Call):
            if method_name(node) not in _KEEPS_DATA:
                return None
            node = node.func.value  # type: ignore[attr-defined]
        elif isinstance(node, ast.Attribute):
            if node.attr in _NOT_DATA:
                return None
            node = node.value
        elif isinstance(node, (ast.Subscript, ast.Starred)):
            node = node.value
        else:
            return None


def _whole_batch_unmoved_applies(ctx: Context, loop: ast.AST) -> bool:
    """Nothing in the loop is moved: report only when the model is surely on a GPU and the data surely not."""
    sem = ctx.semantic
    if not program.runs_on_accelerator(sem) or sem.loop_kind(loop) not in ("train", "eval"):
        return False
    loader = sem.loader_of(loop)
    key = dotted(loader) if loader is not None else None
    b = sem.binding_at(key, loop) if key else None
    if b is None or not isinstance(b.value, ast.Call) or (ctx.call_name(b.value) or "").rsplit(".", 1)[-1] != "DataLoader":
        return False
    if keyword(b.value, "collate_fn") or has_kwargs(b.value) or _data_preloaded_on_device(ctx):
        return False
    models = [n for n in ctx.semantic.body(loop) if isinstance(n, ast.Call) and flow.consumer_kind(ctx.semantic, n) == "model"]
    moved = moved_keys(ctx.semantic)
    keys = [dotted(m.func) for m in models]
    return any(k and (k.rsplit(".", 1)[-1] in moved or sem.is_moved(k, loop)) and not _made_again_on_host(ctx, k, loop)
               for k in keys)


def _made_again_on_host(ctx: Context, key: str, loop: ast.AST) -> bool:
    """``net = Net(); net.load_state_dict(torch.load(PATH))`` just before the test loop: the model that loop
    runs is a new one on the CPU (the one moved earlier is gone), and its inputs rightly stay there."""
    sem = ctx.semantic
    b = sem.binding_at(key, loop)
    if b is None or not isinstance(b.value, ast.Call) or sem.value_is_moved(b.value) or \
            sem.scope_of(b.node) is not sem.scope_of(loop) or sem.call_kind(b.value, b.node) != "model":
        return False
    return not any(isinstance(c.func, ast.Attribute) and dotted(c.func.value) == key and sem.is_device_move(c)
                   and b.node.lineno < c.lineno < loop.lineno for c in sem.calls_named("to", "cuda"))  # type: ignore[attr-defined]


def _data_preloaded_on_device(ctx: Context) -> bool:
    """Tensors moved outside any batch loop (a dataset built on the GPU) or moved inside a Dataset class."""
    return ctx.semantic.cached("data_preloaded", lambda: _find_preloaded(ctx))  # type: ignore[no-any-return]


def _find_preloaded(ctx: Context) -> bool:
    sem = ctx.semantic
    for node in sem.calls_named("to", "cuda", "to_device", "move_to_device", "move_to", "send_to_device"):
        if sem.is_device_move(node):
            kind = sem.expr_kind(node.func.value, node) if isinstance(node.func, ast.Attribute) else None
            if kind in ("model", "wrapper", "loss_fn") or sem.enclosing_loop(node, "batch") is not None:
                continue
            func = sem.function_of(node)
            if func is not None and func.name == "forward":
                continue
            return True
    return False


def _kept_on_the_cpu(ctx: Context, consumer: ast.Call) -> bool:
    """``cpu_model.to("cpu")`` and no other move of it: a model kept on the CPU on purpose (a course's CPU-versus-GPU
    timing), whose host batches are where it is."""
    key = dotted(consumer.func)
    if not key or flow.consumer_kind(ctx.semantic, consumer) != "model":
        return False
    moves = [c for c in ctx.semantic.calls_named("to", "cuda") if dotted(c.func.value) == key  # type: ignore[attr-defined]
             and ctx.semantic.is_device_move(c)]
    return bool(moves) and all(method_name(c) == "to" and (ctx.semantic.move_device(c) or "").strip("'\"") == "cpu"
                               for c in moves)


def _model_device(ctx: Context) -> str | None:
    moves = [n for n in ctx.semantic.calls_named("to", "cuda", "to_device", "move_to_device", "move_to", "send_to_device")
             if ctx.semantic.is_device_move(n)]
    return ctx.semantic.move_device(min(moves, key=lambda n: (n.lineno, n.col_offset))) if moves else None


# ---- TD306 ----------------------------------------------------------------------------------
@rule("TD306", keywords=("non_blocking",))
def non_blocking_misuse(node: ast.AST, ctx: Context) -> None:
    """non_blocking=True read before a sync (device->host), or from pageable memory (host->device)."""
    assert isinstance(node, ast.Call)
    nb = keyword(node, "non_blocking")
    if nb is None or not is_true(nb.value) or method_name(node) not in ("to", "cuda", "cpu"):
        return
    dev = ctx.semantic.move_device(node) if method_name(node) != "cpu" else "cpu"
    if dev is not None and dev.strip("'\"") == "cpu":
        _device_to_host(ctx, node)
    elif dev is not None:
        _host_to_device(ctx, node, dev)


def _device_to_host(ctx: Context, call: ast.Call) -> None:
    read = _first_unsynced_read(ctx, call)
    if read is not None:
        ctx.report("TD306", call, f"`{ctx.name(call)}` copies to the host asynchronously and `{ctx.name(read)}` "
                   "reads it before any synchronize()", fix="call `torch.cuda.synchronize()` (or an event's) before "
                   "reading, or drop non_blocking=True", severity=Severity.ERROR)


_FACTORIES = frozenset(f"torch.{n}" for n in ("zeros", "ones", "empty", "full", "rand", "randn", "randint",
                                                "arange", "linspace", "eye", "tensor", "zeros_like", "ones_like",
                                                "empty_like", "full_like", "from_numpy", "as_tensor", "LongTensor",
                                                "FloatTensor", "IntTensor", "DoubleTensor", "BoolTensor", "ByteTensor",
                                                "HalfTensor", "Tensor"))
# host data: it must cross the bus, pinned to overlap (``torch.LongTensor(ids)``: the legacy constructors of a list)
_FROM_HOST_DATA = ("torch.from_numpy", "torch.as_tensor", "torch.LongTensor", "torch.FloatTensor", "torch.IntTensor",
                   "torch.DoubleTensor", "torch.BoolTensor", "torch.ByteTensor", "torch.HalfTensor", "torch.Tensor")


_RESHAPES = frozenset({"reshape", "view", "flatten", "unsqueeze", "squeeze", "permute", "transpose", "t", "float",
                       "half", "long", "int", "contiguous"})


def _fresh_host_tensor(ctx: Context, expr: ast.AST, at: ast.AST) -> ast.Call | None:
    """The factory call that made ``expr`` on the host, unpinned (``torch.zeros(n)``, or a name bound to it)."""
    for _ in range(4):  # ``mask = torch.zeros(h, w)``, filled, ``mask = mask.reshape(-1)``: still that host tensor
        if isinstance(expr, ast.Name):
            b = ctx.semantic.bindings.at(expr.id, at)
            if b is None or b.value is None or b.node is expr:
                break
            at, expr = b.node, b.value
        expr = strip_methods(expr, _RESHAPES)
        if not isinstance(expr, ast.Name):
            break
    if not isinstance(expr, ast.Call) or ctx.call_name(expr) not in _FACTORIES:
        return None
    if keyword(expr, "device") is not None or keyword(expr, "pin_memory") is not None or has_kwargs(expr):
        return None
    return expr


def _filled_on_host(ctx: Context, made: ast.Call, copy: ast.Call) -> bool:
    """The name the factory's tensor is bound to is written element-wise (``mask[i, j, a, b] = 1``) or in place
    (``out.index_put_(...)``) between the factory and the copy."""
    sem = ctx.semantic
    pos = sem.index.pos
    start, end = pos[made], pos[copy]
    parent = sem.parent(made)
    if not (isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name)):
        return False
    name = parent.targets[0].id
    scope = sem.scope_of(parent)
    for n in sem.local_nodes(scope) if scope is not None else ():
        if not start < pos.get(n, -1) < end:
            continue
        if isinstance(n, (ast.Assign, ast.AugAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            if any(isinstance(t, ast.Subscript) and dotted(t.value) == name for t in targets):
                return True
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr.endswith("_") \
                and not n.func.attr.startswith("_") and dotted(n.func.value) == name:
            return True
    return False


def _host_to_device(ctx: Context, call: ast.Call, dev: str) -> None:
    sem = ctx.semantic
    recv = call.func.value  # type: ignore[attr-defined]
    made = _fresh_host_tensor(ctx, recv, call)
    if made is not None:
        what = ctx.name(recv) if isinstance(recv, ast.Name) else f"{ctx.call_name(made)}(...)"
        # filled element by element on the host (``mask[i, j] = 1`` in loops): made on the device, each write would
        # be a kernel launch; pin it instead
        name = ctx.call_name(made)
        fix = "pin it first (`.pin_memory()`), or drop non_blocking=True: from pageable memory the copy waits" \
            if name in _FROM_HOST_DATA else \
            f"make it in pinned memory (`pin_memory=True` in the `{name}` call), or drop non_blocking=True: it is " \
            "filled on the host" if _filled_on_host(ctx, made, call) else \
            "make it on the device (`device=...` in the factory call) instead of copying it"
        ctx.report("TD306", call, f"non_blocking=True copies `{what}`, a tensor just made by `{ctx.call_name(made)}` "
                   "in pageable memory: the copy is synchronous all the same", fix=fix, severity=Severity.WARNING)
        return
    loop = sem.enclosing_loop(call, "batch")
    if loop is None or root_name(recv) not in set(sem.batch_vars(loop)):
        return
    loader = _loader_call(ctx, loop)
    factory = _unpinning_factory(ctx, loop) if loader is None else None
    handed = _handed_unpinned(ctx, loop) if loader is None and factory is None else None
    if handed is not None:
        ctx.report("TD306", call, f"`{ctx.name(call)}` copies from pageable memory (the DataLoader {handed} does not "
                   "pin it): non_blocking has no effect", fix="pass `pin_memory=True` to that DataLoader",
                   severity=Severity.WARNING)
        return
    if factory is not None:
        ctx.report("TD306", call, f"`{ctx.name(call)}` copies from pageable memory (the DataLoader `{factory}()` makes "
                   "does not pin it): non_blocking has no effect", fix=f"pass `pin_memory=True` to the DataLoader in "
                   f"`{factory}`", severity=Severity.WARNING)
        return
    if loader is None or _may_pin(ctx, loader) or dataset_on_device(ctx, loader):
        return
    pin = keyword(loader, "pin_memory")
    if pin is None or is_false(pin.value):
        ctx.report("TD306", call, f"`{ctx.name(call)}` copies from pageable memory (the DataLoader does not pin it): "
                   "non_blocking has no effect", fix="pass `pin_memory=True` to the DataLoader", severity=Severity.WARNING)


def _handed_unpinned(ctx: Context, loop: ast.AST) -> str | None:
    """``def train(model, train_loader, ...)`` whose every caller hands ``train_loader`` a DataLoader made without
    pinned memory (in this file, or in another module of the project): where the loader is made, for the message."""
    sem = ctx.semantic
    loader = sem.loader_of(loop)
    b = sem.binding_at(loader.id, loop) if isinstance(loader, ast.Name) else None
    func = sem.function_of(loop)
    if b is None or not b.is_param or b.node is not func or func is None:
        return None
    sites = sem.call_sites(func)
    if sites:
        slot = param_slot(func, loader.id)  # type: ignore[union-attr]
        if all(loader.id in (given := unpinned_loader_args(sem, s)) or slot in given for s in sites):  # type: ignore[union-attr]
            return f"handed in at line {sites[0].lineno}"
        return None
    if sem.project is None or sem.frame(func).kind != "module":
        return None
    record = sem.project.callers_hand_unpinned_loaders(sem, func, loader.id)  # type: ignore[attr-defined,union-attr]
    if record is None:
        return None
    here = os.path.dirname(os.path.abspath(sem.path))
    return f"handed in at {os.path.relpath(record.path, here)}:{record.line}"


def _unpinning_factory(ctx: Context, loop: ast.AST) -> str | None:
    """``train_loader, test_loader = get_loaders(4)`` where ``get_loaders`` (of this file or another module of the
    project) returns DataLoaders made without ``pin_memory``: the factory's name, when the loop's loader is one."""
    sem = ctx.semantic
    loader = sem.loader_of(loop)
    key = dotted(loader) if loader is not None else None
    b = sem.binding_at(key, loop) if key else None
    made = b.value if b is not None and not b.is_param else None
    if not isinstance(made, ast.Call) or not isinstance(made.func, (ast.Name, ast.Attribute)):
        return None
    funcs = sem.resolve(made)
    if funcs:
        unpinned = unpinned_returns(sem, funcs[0]) if len(funcs) == 1 else frozenset()
    else:
        unpinned = getattr(sem.external(made), "unpinned", frozenset())
    return ctx.name(made.func) if (-1 if b.index is None else b.index) in unpinned else None  # type: ignore[union-attr]


def _loader_call(ctx: Context, loop: ast.AST) -> ast.Call | None:
    sem = ctx.semantic
    loader = sem.loader_of(loop)
    key = dotted(loader) if loader is not None else None
    b = sem.binding_at(key, loop) if key else None
    if b is not None and b.value is not None:
        found = _loader_construction(ctx, loader, loop)
        return found if found is not None and is_torch_dataloader(ctx, found) else None
    calls = [n for n in ctx.semantic.calls_named("DataLoader") if is_torch_dataloader(ctx, n)]
    unpinned = [c for c in calls if keyword(c, "pin_memory") is None and not _may_pin(ctx, c)]
    return unpinned[0] if calls and len(unpinned) == len(calls) else None


def _may_pin(ctx: Context, loader: ast.Call) -> bool:
    """A ``**`` argument of the loader call may turn pinning on (not ``**loader_kwargs()`` of other known keys)."""
    if not has_kwargs(loader):
        return False
    keys = loaders.spread_keys(ctx.semantic, loader)
    return keys is None or "pin_memory" in keys


_READS = ("numpy", "item", "tolist")
_SYNCS = ("synchronize", "wait", "wait_stream", "wait_event")


def _first_unsynced_read(ctx: Context, call: ast.Call) -> ast.AST | None:
    """The first read of an async device-to-host copy before any synchronize(), in the same body."""
    sem = ctx.semantic
    parent = sem.parent(call)
    if isinstance(parent, ast.Attribute) and parent.attr in _READS:
        return parent
    if not (isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name)):
        return None
    name = parent.targets[0].id
    scope = sem.scope_of(call)
    after = (parent.end_lineno or 0, parent.end_col_offset or 0)
    for node in ctx.semantic.body(scope):
        if (getattr(node, "lineno", 0), getattr(node, "col_offset", 0)) < after:
            continue
        if isinstance(node, ast.Call) and method_name(node) in _SYNCS:
            return None
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
            return None
        if isinstance(node, ast.Name) and node.id == name and _is_read(ctx, node):
            return sem.parent(node) or node
    return None


def _is_read(ctx: Context, use: ast.Name) -> bool:
    parent = ctx.semantic.parent(use)
    if isinstance(parent, ast.Attribute) and parent.attr in _READS:
        return True
    if isinstance(parent, ast.Subscript) and parent.value is use:
        return True
    if isinstance(parent, ast.Call) and use in parent.args:
        q = ctx.call_name(parent) or ""
        return q in ("print", "float", "int", "list") or q.startswith(("numpy.", "np."))
    return False
