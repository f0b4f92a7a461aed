"""Value flow inside one loop or function: which names hold batch data, device tensors, consumers."""

from __future__ import annotations

import ast

from torchdoctor.check.astutil import FACTORIES, dotted, method_name, root_name
from torchdoctor.check.patterns import lazy
from torchdoctor.check.semantic.model import SemanticModel
from torchdoctor.check.semantic.models import LEGACY_TENSORS

__all__ = ["is_cpu_name", "consumer_kind", "path_to_consumer", "device_names", "mentions", "combined_in_helper"]

_LOSS_FUNCS = lazy(r"(_loss|cross_entropy|binary_cross_entropy(_with_logits)?|kl_div|cosine_embedding_loss)$")
# Batch elements meant for the CPU: lengths for pack_padded_sequence, ids, names, paths, raw text.
_CPU_NAMES = lazy(
    r"(?i)^(.*_)?(len|lens|lengths?|seq_lens?|idx|idxs|index|indices|names?|paths?|files?|filenames?|meta|"
    r"metadata|infos?|texts?|captions?|sentences?|questions?|answers?|prompts?|raw|keys?|uids?|ids?|strings?|words?|"
    r"tokens_str|fnames?|modes?|tags?|kinds?|splits?|tasks?|text_quer(?:y|ies)|lists|oovs?|oov_dicts?|vocabs?)$"
    r"|^(?i:[xy]|src|tgt|seq)(lens?|lengths?)$"  # (``xlens``, ``ylens``, ``srclens``: lengths without an underscore)
)
_TENSOR_IDS = {"input_ids", "token_type_ids", "position_ids", "decoder_input_ids", "label_ids", "labels_ids"}


def is_cpu_name(name: str) -> bool:
    return name not in _TENSOR_IDS and bool(_CPU_NAMES.match(name))


_TORCH_OBJECTS = frozenset({"Generator", "Stream", "Event", "device", "Size", "dtype"})


def consumer_kind(sem: SemanticModel, call: ast.Call) -> str | None:
    """"model" or "loss" when a call runs a model (or a submodule in forward) or computes a loss."""
    func = call.func
    if method_name(call) == "forward":
        func = func.value  # type: ignore[attr-defined]
    q = sem.call_name(call) or ""
    if q.startswith("torch.nn.functional.") and _LOSS_FUNCS.search(q) and not q.endswith("ctc_loss"):
        return "loss"
    key = dotted(func)
    if key is None or q.startswith("torch.") and q.rsplit(".", 1)[-1] in _TORCH_OBJECTS:
        return None  # (``torch.Generator().manual_seed(0)``: a random number generator, named like a GAN's part)
    kind = sem.kind_of(key, call)
    if kind in ("model", "wrapper"):
        if any(isinstance(a, ast.JoinedStr) or isinstance(a, ast.Constant) and isinstance(a.value, str)
               for a in call.args):
            return None  # ``test_model(name, "baseline")``, ``classifier("a review")``: given text, not tensors (a
            # helper named for a model, a pipeline that runs without autograd itself)
        return "model"
    if kind == "loss_fn":
        return "loss"
    return None


def path_to_consumer(sem: SemanticModel, use: ast.AST, stop: ast.AST) -> tuple[ast.Call | None, bool]:
    """Follow an expression upward to the model/loss call that takes it.

    Returns (the consumer call or None, whether a device move was passed on the way).
    Only value-preserving steps are followed (method chains, indexing, arithmetic,
    tuples, ``**``); an argument to any other call stops the walk (it may move the value).
    """
    child = use
    for a in sem.ancestors(use):
        if a is stop or isinstance(a, ast.stmt):
            return None, False
        if isinstance(a, ast.Call):
            if sem.is_device_move(a) and (child is a.func or child in a.args):
                return None, True
            if child is a.func:  # a method chain on the value: x.float()
                child = a
                continue
            if consumer_kind(sem, a):
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


def device_names(sem: SemanticModel, region: ast.AST, seeds: set[str]) -> set[str]:
    """Names in a region that hold device tensors: moved values, model outputs, and what is computed from them."""
    key = ("device_names", region, frozenset(seeds))
    return sem.cached(key, lambda: _device_names(sem, region, seeds))  # type: ignore[no-any-return]


def _device_names(sem: SemanticModel, region: ast.AST, seeds: set[str]) -> set[str]:
    out = set(seeds)
    for node in sem.body(region):
        if not isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) or node.value is None:
            continue
        if _copied_to_host(sem, node.value):
            continue  # ``tbox = target[b].view(-1, 5).to("cpu")``: a host copy, whatever it was copied from
        value_nodes = sem.subtree(node.value)
        hot = any(isinstance(n, ast.Call) and (sem.is_device_move(n) or consumer_kind(sem, n) or _self_call(n))
                  for n in value_nodes)
        if not hot:
            sizes = {id(i) for n in value_nodes if isinstance(n, ast.Subscript) for i in sem.subtree(n.slice)}
            sizes.update(id(i) for n in value_nodes if isinstance(n, ast.Call) and (
                isinstance(n.func, ast.Attribute) and n.func.attr in _SHAPE_ARGS or _factory(sem, n))
                for a in n.args for i in sem.subtree(a))
            hot = any(isinstance(n, ast.Name) and n.id in out and id(n) not in sizes and not _metadata_read(sem, n)
                      for n in value_nodes)  # (``boxes[b * n:(b + 1) * n]``: where ``boxes`` is, whatever ``n`` is;
            # ``torch.arange(n, dtype=torch.float)``: on the host, whatever ``n`` is; ``.view(n, -1)``: a shape)
        if hot:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Tuple) and len(t.elts) == 2 and isinstance(node.value, ast.Call) \
                        and (sem.call_name(node.value) or "").endswith("pad_packed_sequence"):
                    t = t.elts[0]  # (``out, lengths = pad_packed_sequence(...)``: the lengths are a CPU tensor always)
                out.update(n.id for n in sem.subtree(t) if isinstance(n, ast.Name))
    return out


_SHAPE_ARGS = frozenset({"view", "reshape", "expand", "repeat", "unsqueeze", "squeeze", "permute", "transpose", "narrow",
                         "split", "chunk", "flatten", "size"})
_SIZED = FACTORIES - {"tensor", "as_tensor", "normal", "bernoulli"}  # (made of sizes, not of the tensors handed)


def _factory(sem: SemanticModel, call: ast.Call) -> bool:
    """``torch.zeros(n)``, ``torch.arange(n, dtype=...)``: a factory given sizes and no device."""
    name = sem.call_name(call) or ""
    return name.startswith("torch.") and name.count(".") == 1 and name[6:] in _SIZED \
        and not any(k.arg == "device" for k in call.keywords)


def _copied_to_host(sem: SemanticModel, value: ast.AST) -> bool:
    """``value`` ends in a copy to the host (``.cpu()``, ``.numpy()``, ``.tolist()``, ``.item()``, ``.to("cpu")``), or
    is a legacy constructor's tensor, maybe reshaped: on the host, whatever it was made from."""
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)):
        return False
    attr = value.func.attr
    if attr in ("cpu", "numpy", "tolist", "item") and not value.args \
            or attr == "to" and (sem.move_device(value) or "").strip("'\"") == "cpu":
        return True
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and not sem.is_device_move(value):
        name = sem.call_name(value) or ""
        if name.startswith("torch.") and name.count(".") == 1 and name[6:] in LEGACY_TENSORS:
            return True  # ``torch.FloatTensor([gx, gy, gw, gh]).repeat(n, 1).t()``: a legacy constructor makes CPU tensors
        value = value.func.value
    return False


_METADATA = frozenset({"shape", "size", "dtype", "device", "ndim", "dim", "numel"})


def _metadata_read(sem: SemanticModel, name: ast.Name) -> bool:
    """``b, c, w = x.shape``, ``n = x.size(0)``: Python numbers (or a dtype) read off a device tensor, not a tensor."""
    cur, up = name, sem.parent(name)
    while isinstance(up, ast.Subscript) and up.value is cur:  # ``cache[0].size(0)``: of an element of a list
        cur, up = up, sem.parent(up)
    return isinstance(up, ast.Attribute) and up.value is cur and up.attr in _METADATA


def _self_call(call: ast.Call) -> bool:
    """``self.layer(x)`` inside a module: its output lives where the module's weights live."""
    return isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name) and call.func.value.id == "self"


def mentions(sem: SemanticModel, node: ast.AST, names: set[str]) -> bool:
    return root_name(node) in names or any(isinstance(n, ast.Name) and n.id in names for n in sem.subtree(node))


_HOST_METHODS = {"cpu", "numpy", "tolist", "to", "cuda", "item"}


def combined_in_helper(sem: SemanticModel, use: ast.Name, loop: ast.AST) -> ast.Call | None:
    """``dice(logits, masks)``: ``use`` is passed, next to a device tensor, to an in-file function that
    combines the two parameters arithmetically and moves nothing: the helper call, else None."""
    call = sem.parent(use)
    if not isinstance(call, ast.Call) or not any(a is use for a in call.args) or call.keywords:
        return None
    funcs = sem.resolve(call)
    if len(funcs) != 1 or not isinstance(funcs[0], ast.FunctionDef):
        return None
    func = funcs[0]
    params = [a.arg for a in func.args.args]
    if params[:1] == ["self"] or len(params) < len(call.args) or func.args.vararg is not None:
        return None
    body = sem.local_nodes(func)
    if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _HOST_METHODS for n in body):
        return None  # the helper moves or reads back values itself
    hot = device_names(sem, loop, set())
    index = next(i for i, a in enumerate(call.args) if a is use)
    mine = _tainted(sem, body, params[index])
    for i, arg in enumerate(call.args):
        if i != index and isinstance(arg, ast.Name) and arg.id in hot and not _read_back(sem, arg) \
                and _combined(sem, body, mine, _tainted(sem, body, params[i])):
            return call
    return None


def _read_back(sem: SemanticModel, name: ast.Name) -> bool:
    """``preds = model(x).cpu()``: computed from the model, yet on the host."""
    b = sem.binding_at(name.id, name)
    value = b.value if b is not None else None
    return value is None or any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                                and n.func.attr in ("cpu", "numpy", "tolist", "item") for n in sem.subtree(value))


def _tainted(sem: SemanticModel, body: list[ast.AST], param: str) -> set[str]:
    out = {param}
    for node in body:
        if isinstance(node, ast.Assign) and any(isinstance(n, ast.Name) and n.id in out for n in sem.subtree(node.value)):
            out |= {n.id for t in node.targets for n in sem.subtree(t) if isinstance(n, ast.Name)}
    return out


_SIZE_ATTRS = frozenset({"shape", "ndim", "dtype", "device"})
_SIZE_CALLS = frozenset({"len", "size", "dim", "numel"})


def _value_names(sem: SemanticModel, expr: ast.AST) -> set[str]:
    """The names whose values ``expr`` computes with: not those it only measures (``len(predictions)``,
    ``x.shape[0]``, ``x.size(1)``), so ``assert len(predictions) == len(out_ligs)`` combines no values."""
    sized: set[int] = set()
    names: set[str] = set()
    for n in sem.subtree(expr):
        if id(n) in sized:
            continue
        measured = isinstance(n, ast.Attribute) and n.attr in _SIZE_ATTRS or isinstance(n, ast.Call) and (
            isinstance(n.func, ast.Name) and n.func.id == "len" or isinstance(n.func, ast.Attribute)
            and n.func.attr in _SIZE_CALLS)
        if measured:
            sized.update(id(m) for m in sem.subtree(n))
        elif isinstance(n, ast.Name):
            names.add(n.id)
    return names


def _combined(sem: SemanticModel, body: list[ast.AST], left: set[str], right: set[str]) -> bool:
    """A binary operation takes one side from each set (and neither side from both)."""
    for node in body:
        if isinstance(node, (ast.BinOp, ast.Compare)):
            a, b = (node.left, node.right) if isinstance(node, ast.BinOp) else (node.left, node.comparators[0])
            na, nb = _value_names(sem, a), _value_names(sem, b)
            if (na & left and nb & right and not na & right and not nb & left) or \
                    (na & right and nb & left and not na & left and not nb & right):
                return True
    return False
