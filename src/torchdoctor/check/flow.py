"""Value flow inside one loop or function: which names hold batch data, device tensors, consumers."""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from torchdoctor.check.astutil import COMP_TYPES, LOOP_TYPES, comp_body, dotted, method_name, root_name, walk_local

if TYPE_CHECKING:
    from torchdoctor.check.context import Context

_LOSS_FUNCS = re.compile(r"(_loss|cross_entropy|binary_cross_entropy(_with_logits)?|kl_div|cosine_embedding_loss)$")
# Batch elements meant for the CPU: lengths for pack_padded_sequence, ids, names, paths, raw text.
_CPU_NAMES = re.compile(
    r"(?i)^(.*_)?(len|lens|lengths?|seq_lens?|idx|idxs|index|indices|names?|paths?|files?|filenames?|meta|"
    r"metadata|infos?|texts?|captions?|sentences?|raw|keys?|uids?|ids?|strings?|words?|tokens_str|fnames?)$"
)
_TENSOR_IDS = {"input_ids", "token_type_ids", "position_ids", "decoder_input_ids", "label_ids", "labels_ids"}


def is_cpu_name(name: str) -> bool:
    return name not in _TENSOR_IDS and bool(_CPU_NAMES.match(name))


def consumer_kind(ctx: Context, call: ast.Call) -> str | None:
    """"model" or "loss" when a call runs a model (or a submodule in forward) or computes a loss."""
    func = call.func
    if method_name(call) == "forward":
        func = func.value  # type: ignore[attr-defined]
    key = dotted(func)
    q = ctx.call_name(call) or ""
    if q.startswith("torch.nn.functional.") and _LOSS_FUNCS.search(q) and not q.endswith("ctc_loss"):
        return "loss"
    if key is None:
        return None
    kind = ctx.facts.kind_of(key, call)
    if kind in ("model", "wrapper"):
        return "model"
    if kind == "loss_fn":
        return "loss"
    return None


def path_to_consumer(ctx: Context, use: ast.AST, stop: ast.AST) -> tuple[ast.Call | None, bool]:
    """Follow an expression upward to the model/loss call that takes it.

    Returns (the consumer call or None, whether a device move was passed on the way).
    Only value-preserving steps are followed (method chains, indexing, arithmetic,
    tuples, ``**``); an argument to any other call stops the walk (it may move the value).
    """
    child = use
    for a in ctx.facts.ancestors(use):
        if a is stop or isinstance(a, ast.stmt):
            return None, False
        if isinstance(a, ast.Call):
            if ctx.facts.is_device_move(a) and (child is a.func or child in a.args):
                return None, True
            if child is a.func:  # a method chain on the value: x.float()
                child = a
                continue
            if consumer_kind(ctx, a):
                return a, False
            return None, False
        if isinstance(a, (ast.Attribute, ast.Subscript, ast.Starred, ast.keyword, ast.BinOp, ast.UnaryOp,
                          ast.Tuple, ast.List)):
            if isinstance(a, ast.Subscript) and child is a.slice:
                return None, False
            child = a
            continue
        return None, False
    return None, False


_REGIONS: dict[int, tuple[ast.AST, list[ast.AST]]] = {}


def region_nodes(region: ast.AST) -> list[ast.AST]:
    """The nodes of a loop's or a function's body, same scope, in source order (cached per node)."""
    hit = _REGIONS.get(id(region))
    if hit is not None and hit[0] is region:
        return hit[1]
    if len(_REGIONS) > 4096:
        _REGIONS.clear()
    nodes = _region_nodes(region)
    _REGIONS[id(region)] = (region, nodes)
    return nodes


def _region_nodes(region: ast.AST) -> list[ast.AST]:
    if isinstance(region, LOOP_TYPES):
        return list(walk_local(list(region.body)))
    if isinstance(region, COMP_TYPES):
        return list(walk_local(comp_body(region)))  # type: ignore[arg-type]
    return list(walk_local(list(getattr(region, "body", []))))


def device_names(ctx: Context, region: ast.AST, seeds: set[str]) -> set[str]:
    """Names in a region that hold device tensors: moved values, model outputs, and what is computed from them."""
    facts = ctx.facts
    out = set(seeds)
    for node in region_nodes(region):
        if not isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) or node.value is None:
            continue
        value = node.value
        hot = any(isinstance(n, ast.Call) and (facts.is_device_move(n) or consumer_kind(ctx, n) or _self_call(n))
                  for n in ast.walk(value))
        hot = hot or any(isinstance(n, ast.Name) and n.id in out for n in ast.walk(value))
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name) and hot:
                    out.add(n.id)
    return out


def _self_call(call: ast.Call) -> bool:
    """``self.layer(x)`` inside a module: its output lives where the module's weights live."""
    return isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name) and call.func.value.id == "self"


def mentions(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node)) or root_name(node) in names


_HOST_METHODS = {"cpu", "numpy", "tolist", "to", "cuda", "item"}


def combined_in_helper(ctx: Context, use: ast.Name, loop: ast.AST) -> ast.Call | None:
    """``dice(logits, masks)``: ``use`` is passed, next to a device tensor, to an in-file function that
    combines the two parameters arithmetically and moves nothing: the helper call, else None."""
    call = ctx.facts.parent(use)
    if not isinstance(call, ast.Call) or not any(a is use for a in call.args) or call.keywords:
        return None
    funcs = ctx.facts.resolve(call)
    if len(funcs) != 1 or not isinstance(funcs[0], ast.FunctionDef):
        return None
    func = funcs[0]
    params = [a.arg for a in func.args.args]
    if params[:1] == ["self"] or len(params) < len(call.args) or func.args.vararg is not None:
        return None
    if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _HOST_METHODS
           for n in walk_local(func.body)):
        return None  # the helper moves or reads back values itself
    hot = device_names(ctx, loop, set())
    index = next(i for i, a in enumerate(call.args) if a is use)
    mine = _tainted(func, params[index])
    for i, arg in enumerate(call.args):
        if i != index and isinstance(arg, ast.Name) and arg.id in hot and not _read_back(ctx, arg) \
                and _combined(func, mine, _tainted(func, params[i])):
            return call
    return None


def _read_back(ctx: Context, name: ast.Name) -> bool:
    """``preds = model(x).cpu()``: computed from the model, yet on the host."""
    b = ctx.facts.scopes.binding_at(name.id, name)
    value = b.value if b is not None else None
    return value is None or any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                                and n.func.attr in ("cpu", "numpy", "tolist", "item") for n in ast.walk(value))


def _tainted(func: ast.FunctionDef, param: str) -> set[str]:
    out = {param}
    for node in walk_local(func.body):
        if isinstance(node, ast.Assign) and any(isinstance(n, ast.Name) and n.id in out for n in ast.walk(node.value)):
            out |= {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return out


def _combined(func: ast.FunctionDef, left: set[str], right: set[str]) -> bool:
    """A binary operation takes one side from each set (and neither side from both)."""
    for node in walk_local(func.body):
        if isinstance(node, (ast.BinOp, ast.Compare)):
            a, b = (node.left, node.right) if isinstance(node, ast.BinOp) else (node.left, node.comparators[0])
            na = {n.id for n in ast.walk(a) if isinstance(n, ast.Name)}
            nb = {n.id for n in ast.walk(b) if isinstance(n, ast.Name)}
            if (na & left and nb & right and not na & right and not nb & left) or \
                    (na & right and nb & left and not na & left and not nb & right):
                return True
    return False
