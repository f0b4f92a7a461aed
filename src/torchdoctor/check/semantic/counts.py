"""How many times a loop runs, when the code says so: ``for i in range(1, rows * cols + 1)`` with ``rows = cols = 2``,
``for n in LENGTHS`` with ``LENGTHS = (256, 512)``. Rules ask it for reads that run a few times, not every step."""

from __future__ import annotations

import ast

from torchdoctor.check.astutil import dotted
from torchdoctor.check.semantic.model import SemanticModel

__all__ = ["FEW", "few_passes"]

FEW = 32  # passes: a loop that stops after this many shows a few examples, it does not run steps


def few_passes(sem: SemanticModel, loop: ast.AST) -> bool:
    """A ``for`` loop over ``range()`` of a few constants, or over a few constants (``for seq_len in (256, 512)``,
    ``loaders.items()`` of a dict built from them): at most ``FEW`` passes."""
    if not isinstance(loop, ast.For):
        return False
    items, at = loop.iter, loop
    for _ in range(4):  # ``for n in LENGTHS``, ``for n, dl in loaders.items()`` of ``{n: make(n) for n in LENGTHS}``
        if isinstance(items, ast.Name):
            b = sem.binding_at(items.id, at)
            if b is None or b.is_param or b.value is None:
                break
            items, at = b.value, b.node
        elif isinstance(items, ast.Call) and isinstance(items.func, ast.Attribute) and not items.args \
                and items.func.attr in ("items", "keys", "values"):
            items = items.func.value
        elif isinstance(items, (ast.DictComp, ast.ListComp)) and len(items.generators) == 1:
            items = items.generators[0].iter
        elif isinstance(items, ast.Call) and isinstance(items.func, ast.Name) and items.func.id in ("list", "tuple", "sorted",
                                                                                                   "enumerate") \
                and len(items.args) == 1 and not items.keywords:
            items = items.args[0]  # ``RESOLUTIONS = list(Z_DIMS)`` of ``Z_DIMS = {128: 120, 256: 140, 512: 128}``;
            # ``enumerate(plot_noises)`` of ``plot_noises = [get_noise(1, z) for i in range(5)]``
        else:
            break
    if isinstance(items, ast.Dict):
        return len(items.keys) <= FEW and all(isinstance(k, ast.Constant) for k in items.keys)
    if isinstance(items, (ast.Tuple, ast.List)):
        return len(items.elts) <= FEW and all(isinstance(e, ast.Constant) for e in items.elts)
    if not (isinstance(items, ast.Call) and dotted(items.func) == "range" and 1 <= len(items.args) <= 2
            and not items.keywords):
        return False
    bounds = [_small_int(sem, a, loop) for a in items.args]
    return None not in bounds and bounds[-1] - (bounds[0] if len(bounds) == 2 else 0) <= FEW  # type: ignore[operator]


def _small_int(sem: SemanticModel, expr: ast.AST, at: ast.AST, depth: int = 0) -> int | None:
    """The value of an int expression made of literals and names bound to such where it is read (``rows * cols + 1``
    with ``rows = 2``), when it is at most a few thousand; else None."""
    if isinstance(expr, ast.Constant):
        return expr.value if type(expr.value) is int and abs(expr.value) < 4096 else None
    if isinstance(expr, ast.Name) and depth < 4:
        b = sem.binding_at(expr.id, at)
        if b is None or b.value is None or b.is_param or b.index is not None:
            return None
        return _small_int(sem, b.value, b.node, depth + 1)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Sub, ast.Mult)) and depth < 4:
        left, right = _small_int(sem, expr.left, at, depth + 1), _small_int(sem, expr.right, at, depth + 1)
        if left is None or right is None:
            return None
        value = left + right if isinstance(expr.op, ast.Add) else left - right if isinstance(expr.op, ast.Sub) \
            else left * right
        return value if abs(value) < 4096 else None
    return None
