"""Throwaway rules for the platform's tests: they exercise dispatch, noqa, fixes and crashes
without depending on the real rules (which other tests cover).

Use the ``fake_rules`` fixture: it registers exactly these rules and restores the registry after.
"""

from __future__ import annotations

import ast

import pytest

from torchdoctor.check.context import Context
from torchdoctor.check.registry import RegisteredRule, only_rules


def cuda_call(node: ast.AST, ctx: Context) -> None:
    """TD102 on every ``x.cuda()``; the fix rewrites it to ``x.to("cuda")``."""
    assert isinstance(node, ast.Call)
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr == "cuda" and not node.args:
        new = f'{ctx.segment(func.value)}.to("cuda")'
        ctx.report("TD102", node, f"`{ctx.segment(node)}` uses .cuda()", fix="use .to(device)",
                   edits=(ctx.replace_edit(node, new),))


def load_call(node: ast.AST, ctx: Context) -> None:
    """TD502 on ``torch.load(...)`` without map_location; the fix appends ``map_location="cpu"``."""
    assert isinstance(node, ast.Call)
    if ctx.call_name(node) == "torch.load" and not any(k.arg == "map_location" for k in node.keywords):
        end = ctx.insert_edit(node.end_lineno, node.end_col_offset - 1, ', map_location="cpu"')
        ctx.report("TD502", node, "torch.load without map_location", fix="pass map_location", edits=(end,))


def boom(node: ast.AST, ctx: Context) -> None:
    """TD704 crashes on a call to ``boom()``: the engine must report it and go on."""
    assert isinstance(node, ast.Call)
    if isinstance(node.func, ast.Name) and node.func.id == "boom":
        raise ZeroDivisionError("boom")


def broken_fix(node: ast.AST, ctx: Context) -> None:
    """TD601 on a name ``breakme``, whose 'fix' would leave invalid Python."""
    if isinstance(node, ast.Name) and node.id == "breakme":
        ctx.report("TD601", node, "breakme", fix="none", edits=(ctx.replace_edit(node, "(("),))


def module_rule(node: ast.AST, ctx: Context) -> None:
    """TD203 once per file whose text contains ``FLAG_MODULE``, on line 1 (a whole-file rule)."""
    if "FLAG_MODULE" in ctx.source:
        ctx.report("TD203", node.body[0] if node.body else node, "module flagged")  # type: ignore[attr-defined]


FAKE_RULES = (
    RegisteredRule("TD102", (ast.Call,), cuda_call),
    RegisteredRule("TD502", (ast.Call,), load_call),
    RegisteredRule("TD704", (ast.Call,), boom),
    RegisteredRule("TD601", (ast.Name,), broken_fix),
    RegisteredRule("TD201", (ast.Module,), module_rule, codes=("TD201", "TD203")),
)


@pytest.fixture
def fake_rules():
    with only_rules(*FAKE_RULES) as registry:
        yield registry
