"""Where models come from and where things are placed: constructions seen through wrappers,
dropout/batch-norm, names moved to a device, the device inputs are moved to.

Shared by the model, data and loop rules (reached through ``ctx.facts`` or the functions below).
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from torchdoctor.check.astutil import FUNC_TYPES, dotted, method_name

if TYPE_CHECKING:
    from torchdoctor.check.context import Context
    from torchdoctor.check.facts import Facts

_DROPOUT_BN = re.compile(r"Dropout|BatchNorm|dropout|batch_norm|SyncBatchNorm|InstanceNorm")


# ---- model constructions ----------------------------------------------------------------
def has_dropout_or_bn(facts: Facts, expr: ast.AST, at: ast.AST) -> bool | None:
    """Whether the model ``expr`` evaluates to uses dropout or batch-norm (None: unknown)."""
    value = construction(facts, expr, at)
    if value is None:
        return None
    q = facts.ctx.call_name(value) or ""
    if q in facts.module_classes:
        return class_has_dropout_or_bn(facts, q)
    if q.startswith(("torchvision.", "timm.", "transformers.", "torch.hub.")) or q.endswith("from_pretrained"):
        return True
    if q.startswith("torch.nn."):
        return bool(_DROPOUT_BN.search(facts.ctx.segment(value)))
    return None


def construction(facts: Facts, expr: ast.AST, at: ast.AST, depth: int = 0) -> ast.Call | None:
    """The constructor call a model expression came from, through names, ``.to()``, wrappers."""
    if depth > 8:
        return None
    scopes = facts.scopes
    if isinstance(expr, ast.Call):
        kind = scopes.call_kind(expr, at)
        if kind == "model" and method_name(expr) not in ("to", "cuda", "train", "eval"):
            return expr
        inner = _wrapped(facts, expr, kind)
        return construction(facts, inner, at, depth + 1) if inner is not None else None
    if isinstance(expr, ast.Attribute) and expr.attr in ("module", "_orig_mod"):
        return construction(facts, expr.value, at, depth + 1)
    key = dotted(expr)
    if key is None:
        return None
    b = scopes.binding_at(key, at)
    if b is not None and b.value is not None and b.index is None and not isinstance(b.node, FUNC_TYPES):
        return construction(facts, b.value, b.node, depth + 1)
    if b is not None and isinstance(b.node, FUNC_TYPES):
        for arg, site in _arguments_for(facts, b.node, key):
            found = construction(facts, arg, site, depth + 1)
            if found is not None:
                return found
    for other in scopes.bindings_of(key):  # a parameter: any construction of that name
        if other.value is not None and other.index is None and not isinstance(other.node, FUNC_TYPES):
            found = construction(facts, other.value, other.node, depth + 1)
            if found is not None:
                return found
    return None


def _wrapped(facts: Facts, call: ast.Call, kind: str | None) -> ast.AST | None:
    """The model a call passes through: ``m.to(d)`` -> m; ``DDP(m)``, ``torch.compile(m)``,
    ``nn.SyncBatchNorm.convert_sync_batchnorm(m)`` -> m (calls of imported functions)."""
    func = call.func
    first = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg in ("module", "model")), None)
    if kind == "wrapper" or not isinstance(func, ast.Attribute):
        return first
    root = func
    while isinstance(root, ast.Attribute):
        root = root.value
    if isinstance(root, ast.Name) and root.id in facts.ctx.imports and facts.scopes.binding_at(root.id, call) is None:
        return first
    return func.value


def _arguments_for(facts: Facts, func: ast.AST, param: str) -> list[tuple[ast.AST, ast.Call]]:
    """What each call site passes for ``param`` of ``func``."""
    args = func.args  # type: ignore[attr-defined]
    names = [a.arg for a in args.posonlyargs + args.args]
    if facts.class_of(func) is not None and names[:1] == ["self"]:
        names = names[1:]
    out: list[tuple[ast.AST, ast.Call]] = []
    for site in facts.call_sites(func):
        for kw in site.keywords:
            if kw.arg == param:
                out.append((kw.value, site))
        if param in names and names.index(param) < len(site.args):
            out.append((site.args[names.index(param)], site))
    return out


def class_has_dropout_or_bn(facts: Facts, name: str, seen: frozenset[str] = frozenset()) -> bool:
    cls = next((n for n in facts.nodes if isinstance(n, ast.ClassDef) and n.name == name), None)
    if cls is None or name in seen:
        return False
    seen = seen | {name}
    if any(_DROPOUT_BN.search(word) for word in _code_words(cls)):
        return True
    used = {dotted(n.func) for n in ast.walk(cls) if isinstance(n, ast.Call)}
    used |= {dotted(b) for b in cls.bases}
    return any(u in facts.module_classes and class_has_dropout_or_bn(facts, u, seen) for u in used if u)


def _code_words(node: ast.AST) -> list[str]:
    """The identifiers of the code (names, attributes, keywords, parameters), not its docstrings or comments:
    a docstring saying "no dropout" is not a dropout layer."""
    words: list[str] = []
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            words.append(n.id)
        elif isinstance(n, ast.Attribute):
            words.append(n.attr)
        elif isinstance(n, (ast.keyword, ast.arg)) and n.arg:
            words.append(n.arg)
    return words


# ---- placement -------------------------------------------------------------------------------
def last_name(key: str) -> str:
    """``model`` for ``self.model``: moves and uses are matched by the last name part."""
    return key.rsplit(".", 1)[-1]


def first_input_device(ctx: Context) -> str | None:
    """The device of the first tensor moved off the CPU in the file, if any."""
    return ctx.facts.cached("first_input_device", lambda: _find_input_device(ctx))  # type: ignore[no-any-return]


def _find_input_device(ctx: Context) -> str | None:
    facts = ctx.facts
    for node in sorted(facts.calls, key=lambda n: (n.lineno, n.col_offset)):
        if facts.is_device_move(node):
            dev = facts.move_device(node) or ""
            recv = node.func.value if isinstance(node.func, ast.Attribute) else (node.args[0] if node.args else None)
            kind = facts.expr_kind(recv, node) if recv is not None else None
            if kind in ("model", "wrapper", "loss_fn") or dev.strip("'\"") in ("cpu",) or "cpu" == dev:
                continue
            if recv is not None and _looks_like_model_expr(ctx, recv):
                continue
            return dev
    return None


def _looks_like_model_expr(ctx: Context, recv: ast.AST) -> bool:
    return isinstance(recv, ast.Call) and ctx.facts.scopes.call_kind(recv, recv) in ("model", "wrapper")


def moved_keys(ctx: Context) -> set[str]:
    """Last name parts of every receiver moved to a device, or handed to a device-aware helper."""
    return ctx.facts.cached("moved_keys", lambda: _find_moved_keys(ctx))  # type: ignore[no-any-return]


def _find_moved_keys(ctx: Context) -> set[str]:
    facts = ctx.facts
    out: set[str] = set()
    for node in facts.calls:
        meth = method_name(node)
        if meth in ("to", "cuda", "to_empty", "xpu", "mps") and isinstance(node.func, ast.Attribute):
            recv = node.func.value
            key = dotted(recv) or dotted(getattr(recv, "func", None))
            if key:
                out.add(last_name(key))
            if isinstance(recv, ast.Call):  # convert_sync_batchnorm(model).to(device) moves `model` too
                out |= {last_name(dotted(a) or "") for a in recv.args}
        elif meth in ("prepare", "setup", "prepare_model", "setup_module") or facts.is_device_move(node):
            out |= {last_name(dotted(a) or "") for a in node.args}
    # a function that moves one of its parameters moves whatever is passed in
    for funcs in facts.functions.values():
        for func in funcs:
            params = {a.arg for a in func.args.args + func.args.kwonlyargs}
            if params & out:
                out |= _passed_to(ctx, func)
    return out


def _passed_to(ctx: Context, func: ast.AST) -> set[str]:
    """Names passed to ``func``: by its name, or to its class for an ``__init__`` (``Trainer(net, ...)``)."""
    calls = list(ctx.facts.calls_to.get(func.name, [])) + list(ctx.facts.call_sites(func))  # type: ignore[attr-defined]
    out: set[str] = set()
    for node in calls:
        out |= {last_name(dotted(a) or "") for a in list(node.args) + [k.value for k in node.keywords]}
    return out


# ---- wrappers ---------------------------------------------------------------------------------
_PARALLEL = {"DataParallel", "DistributedDataParallel", "DDP", "FullyShardedDataParallel", "FSDP"}
_SAME_MODULE = ("to", "cuda", "train", "eval", "half", "float", "bfloat16", "requires_grad_")


def wrapper_prefix(facts: Facts, expr: ast.AST, at: ast.AST, depth: int = 0) -> str | None:
    """The key prefix a wrapper adds to ``expr.state_dict()``: ``module.`` (DataParallel/DDP),
    ``_orig_mod.`` (torch.compile), or None for a plain module (or when unknown).

    ``m.module`` is what the wrapper wraps, which may itself be compiled (nanoGPT's
    ``raw_model = model.module if ddp else model`` around ``DDP(torch.compile(model))``).
    """
    if depth > 8:
        return None
    if isinstance(expr, ast.Call):
        q = facts.ctx.call_name(expr) or ""
        if q.rsplit(".", 1)[-1] in _PARALLEL:
            return "module."
        if q == "torch.compile":
            return "_orig_mod."
        if method_name(expr) in _SAME_MODULE:
            return wrapper_prefix(facts, expr.func.value, at, depth + 1)  # type: ignore[attr-defined]
        return None
    if isinstance(expr, ast.IfExp):  # `m.module if wrapped else m`: the unwrapping branch decides
        unwrap = [b for b in (expr.body, expr.orelse) if isinstance(b, ast.Attribute) and b.attr in ("module", "_orig_mod")]
        if unwrap:
            return wrapper_prefix(facts, unwrap[0], at, depth + 1)
        return wrapper_prefix(facts, expr.body, at, depth + 1) or wrapper_prefix(facts, expr.orelse, at, depth + 1)
    if isinstance(expr, ast.Attribute) and expr.attr in ("module", "_orig_mod"):
        inner = _wrapped_argument(facts, expr.value, at, depth)
        return wrapper_prefix(facts, inner[0], inner[1], depth + 1) if inner is not None else None
    key = dotted(expr)
    b = facts.scopes.binding_at(key, at) if key else None
    if b is None or b.value is None or b.index is not None or isinstance(b.node, FUNC_TYPES):
        return None
    return wrapper_prefix(facts, b.value, b.node, depth + 1)


def _wrapped_argument(facts: Facts, expr: ast.AST, at: ast.AST, depth: int) -> tuple[ast.AST, ast.AST] | None:
    """The module a wrapper expression was built around, and where: ``DDP(m)`` -> (m, that call)."""
    for _ in range(8 - depth):
        if isinstance(expr, ast.Call):
            q = facts.ctx.call_name(expr) or ""
            if (q.rsplit(".", 1)[-1] in _PARALLEL or q == "torch.compile") and expr.args:
                return expr.args[0], at
            return None
        key = dotted(expr)
        b = facts.scopes.binding_at(key, at) if key else None
        if b is None or b.value is None or b.index is not None or isinstance(b.node, FUNC_TYPES):
            return None
        expr, at = b.value, b.node
    return None
