"""What surrounds a node: grad mode, ``step % N`` guards, rank-0 guards."""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from torchdoctor.check.astutil import FUNC_TYPES, is_false, is_true, keyword

if TYPE_CHECKING:
    from torchdoctor.check.facts import Facts

_RANKISH = re.compile(
    r"(?i)(rank|is_main|main_process|is_master|master_process|is_primary|is_global_zero|"
    r"is_world_process_zero|is_local_main|local_master|is_chief)"
)


def _grad_call(facts: Facts, expr: ast.AST) -> str | None:
    """"off", "on" or "maybe" for a grad-mode context manager or decorator expression."""
    call = expr if isinstance(expr, ast.Call) else None
    q = facts.ctx.qualname(call.func if call else expr) or ""
    last = q.rsplit(".", 1)[-1]
    if last == "no_grad":
        return "off"
    if last == "enable_grad":
        return "on"
    if last == "inference_mode":
        arg = (call.args[0] if call and call.args else None) or (keyword(call, "mode").value if call and keyword(call, "mode") else None)  # type: ignore[union-attr]
        return "on" if is_false(arg) else ("off" if arg is None or is_true(arg) else "maybe")
    if last == "set_grad_enabled" and call is not None and call.args:
        arg = call.args[0]
        return "off" if is_false(arg) else ("on" if is_true(arg) else "maybe")
    return None


def grad_mode(facts: Facts, node: ast.AST) -> str:
    """The autograd mode at ``node`` as far as the file shows: "on", "off" or "maybe"."""
    for a in facts.ancestors(node):
        if isinstance(a, (ast.With, ast.AsyncWith)):
            for item in a.items:
                mode = _grad_call(facts, item.context_expr)
                if mode is not None:
                    return mode
        elif isinstance(a, FUNC_TYPES):
            for dec in a.decorator_list:
                mode = _grad_call(facts, dec)
                if mode is not None:
                    return mode
            if _set_grad_disabled_before(facts, a, node):
                return "off"
            return _callers_mode(facts, a)
        elif isinstance(a, ast.Lambda):
            return "on"
    return "off" if _set_grad_disabled_before(facts, facts.ctx.tree, node) else "on"


_busy: set[int] = set()


def _callers_mode(facts: Facts, func: ast.AST) -> str:
    """A function runs in the grad mode of its call sites when every one of them agrees."""
    if id(func) in _busy:
        return "on"
    _busy.add(id(func))
    try:
        sites = facts.call_sites(func)
        modes = {grad_mode(facts, s) for s in sites}
        if len(modes) == 1:
            return modes.pop()
        return "maybe" if "on" not in modes and modes else "on"
    finally:
        _busy.discard(id(func))


def _set_grad_disabled_before(facts: Facts, scope: ast.AST, node: ast.AST) -> bool:
    """A statement ``torch.set_grad_enabled(False)`` earlier in the same body."""
    here = (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
    for stmt in getattr(scope, "body", []):
        if (stmt.lineno, stmt.col_offset) >= here:
            break
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            if _grad_call(facts, stmt.value) == "off" and (facts.ctx.call_name(stmt.value) or "").endswith("set_grad_enabled"):
                return True
    return False


def _has_mod(test: ast.AST) -> bool:
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(test))


_COUNTER = re.compile(r"(?i)^(i|j|k|n|it|idx|step|steps|iter|iteration|batch_?(idx|id|i|num|index)?|.*_(step|iter|idx))$")


def _one_off(test: ast.AST) -> bool:
    """``i == 0`` / ``batch_idx == len(loader) - 1`` / ``step < 3``: a step counter tested against a fixed value."""
    for n in ast.walk(test):
        if not isinstance(n, ast.Compare) or len(n.ops) != 1 or not isinstance(n.ops[0], (ast.Eq, ast.Lt, ast.LtE)):
            continue
        sides = [n.left, n.comparators[0]]
        names = [s.id if isinstance(s, ast.Name) else s.attr if isinstance(s, ast.Attribute) else "" for s in sides]
        fixed = [isinstance(s, ast.Constant) or (isinstance(s, ast.BinOp) and "len" in ast.dump(s)) for s in sides]
        if any(_COUNTER.match(name) for name in names) and any(fixed):
            return True
    return False


def _in_body(test_node: ast.If | ast.IfExp, child: ast.AST) -> bool:
    """``child`` is in the branch the test selects (not the else-branch, which runs on every other step)."""
    if isinstance(test_node, ast.IfExp):
        return child is test_node.body
    return any(child is s for s in test_node.body)


def under_step_guard(facts: Facts, node: ast.AST) -> bool:
    """Inside an ``if`` whose test uses ``%`` (``step % log_every == 0``) or runs on one step only
    (``if i == 0:``), in its body or else-branch."""
    child = node
    for a in facts.ancestors(node):
        if isinstance(a, (*FUNC_TYPES, ast.Lambda, ast.ClassDef)):
            return False
        if isinstance(a, (ast.If, ast.IfExp)) and child is not a.test and _has_mod(a.test):
            return True
        if isinstance(a, (ast.If, ast.IfExp)) and child is not a.test and _in_body(a, child) and _one_off(a.test):
            return True
        child = a
    return False


def _rank_test(facts: Facts, test: ast.AST) -> bool:
    return bool(_RANKISH.search(facts.ctx.segment(test)))


def under_rank_guard(facts: Facts, node: ast.AST) -> bool:
    """Inside a rank test, after an early ``if rank != 0: return``, or in a ``@rank_zero_only`` function."""
    child = node
    for a in facts.ancestors(node):
        if isinstance(a, (ast.If, ast.IfExp, ast.While)) and child is not a.test and _rank_test(facts, a.test):
            return True
        if isinstance(a, FUNC_TYPES):
            if any("rank_zero" in facts.ctx.segment(d) or "main_process" in facts.ctx.segment(d) for d in a.decorator_list):
                return True
            if _early_exit_on_rank(facts, a, node):
                return True
        child = a
    return False


def _early_exit_on_rank(facts: Facts, func: ast.AST, node: ast.AST) -> bool:
    here = (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
    for stmt in func.body:  # type: ignore[attr-defined]
        if (stmt.lineno, stmt.col_offset) >= here:
            break
        if isinstance(stmt, ast.If) and _rank_test(facts, stmt.test):
            if stmt.body and isinstance(stmt.body[-1], (ast.Return, ast.Continue, ast.Raise)):
                return True
    return False
