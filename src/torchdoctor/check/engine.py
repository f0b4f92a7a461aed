"""One source in, findings out: parse once, resolve imports, one walk dispatching to rules, noqa.

``check_source`` is the stable entry point that the rules' tests and the
fixture harness call; runner.py wraps it with reading, notebooks, fixing and
parallelism over files.
"""

from __future__ import annotations

import ast
import warnings
from collections import defaultdict
from collections.abc import Iterable

from torchdoctor.check.context import Context
from torchdoctor.check.noqa import filter_noqa
from torchdoctor.check.registry import REGISTRY, RegisteredRule
from torchdoctor.check.source import split_lines
from torchdoctor.findings import Finding, sort_findings

__all__ = ["check_source", "load_rules", "parse", "may_be_torch", "RuleError"]

_RULE_MODULES = ("device", "model", "data", "loop", "results", "perf", "distributed")
# A file that mentions none of these cannot be PyTorch code: it is parsed (syntax
# errors are still reported) but no rule looks at it.
TORCH_MARKERS = ("torch", ".cuda(")
_loaded = False


class RuleError(Exception):
    """A rule raised on one file; carries which rule and where, for the per-file message."""

    def __init__(self, code: str, line: int | None, exc: BaseException) -> None:
        where = f" at line {line}" if line else ""
        super().__init__(f"internal error in rule {code}{where}: {type(exc).__name__}: {exc}")
        self.code = code


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


def may_be_torch(source: str) -> bool:
    """The cheap gate before any walk: substring tests only."""
    return any(marker in source for marker in TORCH_MARKERS)


def parse(source: str | bytes, path: str) -> ast.Module:
    """ast.parse without the SyntaxWarnings ("invalid escape sequence") that CPython prints."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(source, filename=path)


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


def enabled_codes(path: str, enabled: Iterable[str] | None, settings: object | None) -> set[str] | None:
    """The codes to report for ``path``: ``enabled`` (else the settings' selection) less per-file ignores."""
    codes: set[str] | None = set(enabled) if enabled is not None else None
    if codes is None and settings is not None and hasattr(settings, "enabled"):
        codes = set(settings.enabled)
    ignored_for = getattr(settings, "ignored_for", None)
    if ignored_for is not None:
        ignored = ignored_for(path)
        if ignored:
            codes = (codes if codes is not None else _all_codes()) - ignored
    return codes


def _all_codes() -> set[str]:
    from torchdoctor.catalog import RULES

    return set(RULES)


def check_source(source: str, path: str = "<stdin>", *, tree: ast.Module | None = None,
                 enabled: set[str] | None = None, settings: object | None = None) -> list[Finding]:
    """All findings for one Python source. Raises SyntaxError for invalid code.

    A rule that raises propagates its exception (tests want the traceback);
    ``analyse`` is the forgiving variant the command line uses.
    """
    return analyse(source, path, tree=tree, enabled=enabled, settings=settings, errors=None)


def analyse(source: str, path: str, *, tree: ast.Module | None = None, enabled: Iterable[str] | None = None,
            settings: object | None = None, errors: list[RuleError] | None = None) -> list[Finding]:
    """``check_source``, except that with an ``errors`` list a failing rule is recorded
    there and skipped for the rest of the file while the other rules go on."""
    if tree is None:
        tree = parse(source, path)
    codes = enabled_codes(path, enabled, settings)
    ctx = Context(path, source, tree, settings)
    ctx.enabled = codes
    rules = [r for r in load_rules() if codes is None or not codes.isdisjoint(r.all_codes)]
    if rules:
        _collect_imports(tree, ctx)
        _walk(tree, ctx, rules, errors)
    if not ctx.findings:
        return []
    return sort_findings(filter_noqa(ctx.findings, split_lines(source)))


def _walk(tree: ast.Module, ctx: Context, rules: list[RegisteredRule], errors: list[RuleError] | None) -> None:
    dispatch: dict[type, list[RegisteredRule]] = defaultdict(list)
    for reg in rules:
        for t in reg.node_types:
            dispatch[t].append(reg)
    failed: set[int] = set()
    parents = ctx.parents
    # One pre-order walk (parents before children, earlier statements first):
    # rules see nodes in source order, so findings and rule state are deterministic.
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        for reg in dispatch.get(type(node), ()):
            if id(reg) in failed:
                continue
            try:
                reg.func(node, ctx)
            except Exception as exc:
                if errors is None:
                    raise
                failed.add(id(reg))
                errors.append(RuleError(reg.code, getattr(node, "lineno", None), exc))
        children = list(ast.iter_child_nodes(node))
        for child in children:
            parents[child] = node
        stack.extend(reversed(children))
