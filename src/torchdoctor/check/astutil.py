"""Small, pure helpers over ``ast`` nodes that the facts and the rules share."""

from __future__ import annotations

import ast
from collections.abc import Iterator

SCOPE_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
FUNC_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef)
LOOP_TYPES = (ast.For, ast.AsyncFor, ast.While)
COMP_TYPES = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)  # loops written as expressions

# torch functions that make a new tensor and take ``device=``.
FACTORIES = frozenset({
    "zeros", "ones", "full", "empty", "arange", "range", "linspace", "logspace", "eye",
    "tensor", "as_tensor", "rand", "randn", "randint", "randperm", "normal", "bernoulli",
    "empty_strided", "tril_indices", "triu_indices",
})
# Attribute names that name dtypes: ``.to(torch.float16)`` changes the dtype, not the device.
DTYPES = frozenset({
    "float", "float16", "float32", "float64", "half", "double", "bfloat16", "int", "int8",
    "int16", "int32", "int64", "long", "short", "bool", "uint8", "complex64", "complex128",
    "cfloat", "cdouble", "float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64", "complex32", "chalf",
    "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2", "qint8", "quint8", "qint32",
    "quint4x2", "quint2x4",
})


def dotted(node: ast.AST | None) -> str | None:
    """``self.model`` for an Attribute chain over a Name; None for anything else."""
    if isinstance(node, ast.Name):  # (most calls: a plain name, or no name at all)
        return node.id
    if not isinstance(node, ast.Attribute):
        return None
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def root_name(node: ast.AST | None) -> str | None:
    """The Name at the bottom of attributes, subscripts and method calls: ``batch`` in ``batch["x"].float()``."""
    while True:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            node = node.func.value
        else:
            return None


def method_name(call: ast.AST) -> str | None:
    """``"to"`` for ``x.to(...)``; None when the call is not a method call."""
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def receiver(call: ast.Call) -> ast.AST | None:
    return call.func.value if isinstance(call.func, ast.Attribute) else None


def int_literal(expr: ast.AST) -> int | None:
    """The integer a literal says (``0``, ``-1``), else None (``True`` is no integer here)."""
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        inner = int_literal(expr.operand)
        return None if inner is None else -inner
    return expr.value if isinstance(expr, ast.Constant) and type(expr.value) is int else None


def keyword(call: ast.Call, name: str) -> ast.keyword | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw
    return None


def argument(call: ast.Call, name: str, position: int) -> ast.AST | None:
    """The argument given as ``name=`` or at ``position`` (None when absent or behind a ``*args``)."""
    kw = keyword(call, name)
    if kw is not None:
        return kw.value
    if len(call.args) > position and not any(isinstance(a, ast.Starred) for a in call.args[:position + 1]):
        return call.args[position]
    return None


def has_kwargs(call: ast.Call) -> bool:
    """A ``**kwargs`` argument may carry any keyword: rules never report it as missing."""
    return any(kw.arg is None for kw in call.keywords)


def is_false(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value in (False, 0, None) and node.value is not True


def is_none(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def is_true(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def walk_local(nodes: ast.AST | list[ast.stmt]) -> Iterator[ast.AST]:
    """Every node under ``nodes`` without entering nested functions, lambdas or classes."""
    stack = list(reversed(nodes)) if isinstance(nodes, list) else [nodes]
    while stack:
        node = stack.pop()
        yield node
        children = [c for c in ast.iter_child_nodes(node) if not isinstance(c, SCOPE_TYPES)]
        stack.extend(reversed(children))


def body_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes inside a loop/function body (not its header), in source order, same scope."""
    if isinstance(node, LOOP_TYPES):
        stmts = list(node.body) + list(node.orelse)
    elif isinstance(node, FUNC_TYPES):
        stmts = list(node.body)
    elif isinstance(node, COMP_TYPES):
        stmts = comp_body(node)  # type: ignore[assignment]
    else:
        stmts = [node]
    return walk_local(stmts)


def comp_body(comp: ast.AST) -> list[ast.AST]:
    """What a comprehension runs per item: its element(s), its conditions, the iterables after the first."""
    elts = [comp.key, comp.value] if isinstance(comp, ast.DictComp) else [comp.elt]  # type: ignore[attr-defined]
    gens = comp.generators  # type: ignore[attr-defined]
    return [*elts, *(c for g in gens for c in g.ifs), *(g.iter for g in gens[1:])]


def target_names(target: ast.AST) -> list[str]:
    """Names bound by an assignment or loop target, tuple unpacking included."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for elt in target.elts for n in target_names(elt)]
    if isinstance(target, ast.Starred):
        return target_names(target.value)
    return []


def names_in(node: ast.AST) -> set[str]:
    """Every Name id read in an expression."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def func_params(func: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> list[str]:
    a = func.args
    names = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
    if a.vararg:
        names.append(a.vararg.arg)
    if a.kwarg:
        names.append(a.kwarg.arg)
    return names


def call_argument(call: ast.Call, func: ast.FunctionDef | ast.AsyncFunctionDef, param: str) -> ast.AST | None:
    """What ``call`` passes for ``func``'s parameter ``param``: by keyword, or by position (a method called on
    an object, ``self.save(path)``, passes its ``self``/``cls`` implicitly, as a construction ``Trainer(args, model)``
    does for ``__init__``)."""
    hit = next((k.value for k in call.keywords if k.arg == param), None)
    if hit is not None:
        return hit
    names = [a.arg for a in func.args.posonlyargs + func.args.args]
    if (isinstance(call.func, ast.Attribute) or func.name == "__init__") and names[:1] in (["self"], ["cls"]):
        names = names[1:]
    return call.args[names.index(param)] if param in names and names.index(param) < len(call.args) else None


def param_default(func: ast.FunctionDef | ast.AsyncFunctionDef, param: str) -> ast.AST | None:
    """The default value of ``func``'s parameter ``param``, if it has one."""
    args = func.args
    positional = [*args.posonlyargs, *args.args]
    defaults = dict(zip([a.arg for a in positional[len(positional) - len(args.defaults):]], args.defaults))
    defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
    return defaults.get(param)


def param_slot(func: ast.AST, param: str) -> str | None:
    """``"#i"``, the position a call passes ``param`` of ``func`` at (``self`` left out), or None for a keyword-only
    parameter."""
    params = [a.arg for a in func.args.posonlyargs + func.args.args]  # type: ignore[attr-defined]
    if params[:1] == ["self"]:
        params = params[1:]
    return f"#{params.index(param)}" if param in params else None


# Methods that copy a tensor's values to the host (reading them back from the device)
HOST_COPIES = frozenset({"cpu", "numpy", "tolist", "item"})
# the names of torch's dtypes (``torch.float32``, ``torch.long``): a ``.to()`` given one casts, it moves nothing
DTYPE_NAMES = frozenset({"float", "float16", "float32", "float64", "half", "double", "bfloat16", "int", "int8", "int16",
                         "int32", "int64", "long", "short", "uint8", "bool", "complex64", "complex128"})

# Methods that hand back the same object, placed or put in a mode: ``Net().to(dev)`` is still a ``Net``
PLACEMENT_METHODS = frozenset({"to", "cuda", "cpu", "eval", "train", "float", "half", "double", "bfloat16"})


def strip_views(expr: ast.AST | None) -> ast.AST | None:
    """``out`` of ``out.data``, ``loss.detach()``, ``p.detach().data``: the tensor these views share storage with."""
    while isinstance(expr, ast.Attribute) and expr.attr == "data" or isinstance(expr, ast.Call) and isinstance(
            expr.func, ast.Attribute) and expr.func.attr == "detach" and not expr.args:
        expr = expr.value if isinstance(expr, ast.Attribute) else expr.func.value  # type: ignore[union-attr]
    return expr


def strip_methods(expr: ast.AST, methods: frozenset[str] | set[str] | tuple[str, ...], *, subscripts: bool = False,
                  depth: int = 4) -> ast.AST:
    """``x`` of ``x.detach().float()`` (calls of ``methods`` on it), and of ``x[:10].view(...)`` with
    ``subscripts``: the value under methods that keep it what it is."""
    for _ in range(depth):
        if subscripts and isinstance(expr, ast.Subscript):
            expr = expr.value
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in methods:
            expr = expr.func.value
        else:
            break
    return expr


def string_value(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None
