"""Tensors of a module's forward, for TD603: what ``forward`` (or a method or helper only forwards run) takes as
inputs or gets back from its parts is a tensor where the model runs; a reduction of it, read, is a sync."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from torchdoctor.check.astutil import method_name
from torchdoctor.check.rules.host_values import REDUCING_METHODS, host_number
from torchdoctor.check.semantic.forwards import reached_from_forward

if TYPE_CHECKING:
    from torchdoctor.check.context import Context

__all__ = ["computed_in_forward", "forward_value", "of_the_forward", "reached_from_forward", "run_by_forwards"]


def forward_value(ctx: Context, expr: ast.AST, at: ast.AST) -> str | None:
    """A tensor of a module's ``forward``: one of its inputs (``torch.min(x)``), or what a part returns (``out, h =
    self.rnn(x)``; ``out[-1]``); also of a helper only forwards run (``def focal(pred, gt)``, a loss's). Asked only of
    a reduction's operand: a reduction of it is a tensor where the model runs."""
    sem = ctx.semantic
    base = expr.value if isinstance(expr, ast.Subscript) else expr
    if not isinstance(base, ast.Name) or base.id == "self":
        return None
    func = sem.function_of(at)
    cls = sem.class_of(func) if func is not None else None
    if func is None or not (cls is not None and cls.name in sem.module_classes  # type: ignore[attr-defined]
                            and (func.name == "forward" or reached_from_forward(sem, func, cls))
                            or cls is None and sem.function_of(func) is None and run_by_forwards(sem, func)):
        return None
    return ctx.name(expr) if of_the_forward(sem, base, at, func, 0) else None


def run_by_forwards(sem, func: ast.AST, depth: int = 0) -> bool:  # type: ignore[no-untyped-def]
    """A module-level helper every call of which is in a module class's ``forward`` (or a method only it calls), or
    in another such helper (PointNet++'s ``farthest_point_sample``, called by ``sample_and_group``, called by the
    set abstraction's forward): it runs on every forward."""
    if depth == 0:
        return sem.cached(("run_by_forwards", func), lambda: _run_by_forwards(sem, func, 0))  # type: ignore[no-any-return]
    return _run_by_forwards(sem, func, depth)


def _run_by_forwards(sem, func: ast.AST, depth: int) -> bool:  # type: ignore[no-untyped-def]
    sites = sem.call_sites(func)
    return bool(sites) and depth <= 2 and all(
        (f := sem.function_of(c)) is not None and f is not func and (
            (k := sem.class_of(c)) is not None and k.name in sem.module_classes
            and (f.name == "forward" or reached_from_forward(sem, f, k))  # type: ignore[attr-defined]
            or k is None and sem.function_of(f) is None and run_by_forwards(sem, f, depth + 1)) for c in sites)


def computed_in_forward(ctx: Context, expr: ast.AST, at: ast.AST) -> str | None:
    """``n = torch.sum(mask)`` in a module's ``forward``, of its inputs (``if n != 0:``, a loss module's test): a tensor
    where the model runs. A parameter itself may be a Python flag (``if mode == "train":``): not this."""
    sem = ctx.semantic
    if not isinstance(expr, ast.Name) or (b := sem.binding_at(expr.id, at)) is None or b.is_param \
            or not isinstance(b.value, ast.Call) or not ((sem.call_name(b.value) or "").startswith("torch.")
                                                         or method_name(b.value) in REDUCING_METHODS) \
            or host_number(ctx, expr, at):
        return None  # (``n_valid = valid.sum()``: a reduction of a mask of the inputs, as ``torch.sum(valid)``)
    return forward_value(ctx, expr, at)


def of_the_forward(sem, expr: ast.AST, at: ast.AST, func: ast.AST, depth: int) -> bool:  # type: ignore[no-untyped-def]
    """``expr`` is an input of the forward (not ``self``), what a part hands back (``self.rnn(x)``), or computed
    from those (``h = x @ self.W``, ``torch.relu(h)``, ``h.view(-1)``, ``out[-1]``), a few bindings deep."""
    if depth > 6:
        return False
    if isinstance(expr, ast.Subscript):
        return of_the_forward(sem, expr.value, at, func, depth + 1)
    if isinstance(expr, ast.BinOp):
        return any(of_the_forward(sem, o, at, func, depth + 1) for o in (expr.left, expr.right))
    if isinstance(expr, ast.Compare):  # ``torch.sum(a > 0)``: a mask of an input
        return any(of_the_forward(sem, o, at, func, depth + 1) for o in (expr.left, *expr.comparators))
    if isinstance(expr, ast.Call):
        if method_name(expr) in ("size", "dim", "numel", "nelement", "ndimension", "stride", "tolist", "item"):
            return False  # ``b, v, f = x.size()``: Python ints (a read already, when ``.item()``)
        if isinstance(expr.func, ast.Attribute) and isinstance(expr.func.value, ast.Name) and expr.func.value.id == "self":
            return True  # ``self.rnn(x)``: a part's output
        if (sem.call_name(expr) or "").startswith("torch."):
            return bool(expr.args) and of_the_forward(sem, expr.args[0], at, func, depth + 1)
        return isinstance(expr.func, ast.Attribute) and of_the_forward(sem, expr.func.value, at, func, depth + 1)
    if not isinstance(expr, ast.Name) or expr.id == "self":
        return False
    b = sem.binding_at(expr.id, at)
    if b is None or b.node is not func and sem.function_of(b.node) is not func:
        return False
    if b.is_param:
        return True
    return b.value is not None and of_the_forward(sem, b.value, b.node, func, depth + 1)
