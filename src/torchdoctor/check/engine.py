"""One file in, findings out: parse once, resolve imports, one walk dispatching to rules."""

from __future__ import annotations

import ast
from collections import defaultdict

from torchdoctor.check.context import Context
from torchdoctor.check.registry import REGISTRY, RegisteredRule
from torchdoctor.findings import Finding, sort_findings

_RULE_MODULES = ("device", "model", "data", "loop", "results", "perf", "distributed")
_loaded = False


def load_rules() -> list[RegisteredRule]:
    """Import every rule module once (each registers its rules on import)."""
    global _loaded
    if not _loaded:
        import importlib

        for name in _RULE_MODULES:
            try:
                importlib.import_module(f"torchdoctor.check.rules.{name}")
            except ModuleNotFoundError as exc:  # a stage with no rules yet
                if exc.name != f"torchdoctor.check.rules.{name}":
                    raise
        _loaded = True
    return REGISTRY


def _collect_imports(tree: ast.Module, ctx: Context) -> None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    ctx.imports[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    ctx.imports.setdefault(top, top)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if alias.name != "*":
                    ctx.imports[alias.asname or alias.name] = f"{node.module}.{alias.name}"


def check_source(source: str, path: str = "<stdin>", *, tree: ast.Module | None = None,
                 enabled: set[str] | None = None, settings: object | None = None) -> list[Finding]:
    """All findings for one Python source. Raises SyntaxError for invalid code."""
    if tree is None:
        tree = ast.parse(source, filename=path)
    ctx = Context(path, source, tree, settings)
    ctx.enabled = enabled
    _collect_imports(tree, ctx)
    dispatch: dict[type, list] = defaultdict(list)
    for reg in load_rules():
        if enabled is None or reg.code in enabled:
            for t in reg.node_types:
                dispatch[t].append(reg.func)
    parents = ctx.parents
    # One pre-order walk (parents before children, earlier statements first):
    # rules see nodes in source order, so findings and rule state are deterministic.
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        for func in dispatch.get(type(node), ()):
            func(node, ctx)
        children = list(ast.iter_child_nodes(node))
        for child in children:
            parents[child] = node
        stack.extend(reversed(children))
    return sort_findings(ctx.findings)
