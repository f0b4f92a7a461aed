"""One source in, findings out: parse once, one walk into the semantic model, rules over its lists, noqa.

``check_source`` is the stable entry point that the rules' tests and the
fixture harness call; runner.py wraps it with reading, notebooks, fixing and
parallelism over files.
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Iterable

from torchdoctor.check.context import Context
from torchdoctor.check.noqa import filter_noqa
from torchdoctor.check.patterns import lazy
from torchdoctor.check.registry import REGISTRY, RegisteredRule
from torchdoctor.findings import Finding, sort_findings

__all__ = ["check_source", "load_rules", "parse", "may_be_torch", "RuleError", "merge_constructs"]

_RULE_MODULES = ("device", "model", "wrappers", "attributes", "data", "pipeline", "created", "loop", "losses", "inference", "passes", "host", "results", "perf", "steps", "syncs",
                 "distributed", "writes")
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


_OTHER_FRAMEWORKS = frozenset({"mxnet", "tensorflow", "keras", "jax", "flax", "paddle", "mindspore", "oneflow"})


def other_framework(tree: ast.Module) -> bool:
    """Code of another deep-learning framework that borrows a torchvision transform or two (ResNeSt's Gluon
    scripts: ``mxnet`` models, ``from torchvision import transforms``): its module-level imports never name
    ``torch`` itself, and PyTorch's pitfalls are not its own (part of the gate: ``Mode(gate=False)`` judges it)."""
    roots: set[str] = set()
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        stmt = todo.pop()
        if isinstance(stmt, ast.Import):
            roots.update(a.name.split(".", 1)[0] for a in stmt.names)
        elif isinstance(stmt, ast.ImportFrom) and stmt.module and not stmt.level:
            roots.add(stmt.module.split(".", 1)[0])
        elif isinstance(stmt, (ast.If, ast.Try)):
            todo.extend(stmt.body + stmt.orelse + [s for h in getattr(stmt, "handlers", []) for s in h.body])
    return "torch" not in roots and not roots.isdisjoint(_OTHER_FRAMEWORKS)


def parse(source: str | bytes, path: str) -> ast.Module:
    """ast.parse without the SyntaxWarnings ("invalid escape sequence") that CPython prints. Code written for torch
    before 0.4 passes ``.cuda(async=True)``, a syntax error since Python 3.7: such a keyword is read as ``asyn_``
    (same length, so every column and the source text the findings quote stay the user's)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return ast.parse(source, filename=path)
        except SyntaxError:
            if not isinstance(source, str) or "async" not in source or not _ASYNC_KEYWORD.search(source):
                raise
            return ast.parse(_ASYNC_KEYWORD.sub("asyn_", source), filename=path)


_ASYNC_KEYWORD = lazy(r"(?<=[(,\s])async(?=\s*=(?!=))")


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
                 enabled: set[str] | None = None, settings: object | None = None,
                 project: object | None = None) -> list[Finding]:
    """All findings for one Python source. Raises SyntaxError for invalid code.

    A rule that raises propagates its exception (tests want the traceback);
    ``analyse`` is the forgiving variant the command line uses.
    """
    return analyse(source, path, tree=tree, enabled=enabled, settings=settings, errors=None, project=project)


def analyse(source: str, path: str, *, tree: ast.Module | None = None, enabled: Iterable[str] | None = None,
            settings: object | None = None, errors: list[RuleError] | None = None,
            project: object | None = None, prebuilt: tuple | None = None) -> list[Finding]:
    """``check_source``, except that with an ``errors`` list a failing rule is recorded
    there and skipped for the rest of the file while the other rules go on. ``prebuilt``:
    the syntax-only parts of the semantic model, made for this tree before (SemanticModel)."""
    if tree is None:
        tree = parse(source, path)
    codes = enabled_codes(path, enabled, settings)
    rules = [r for r in load_rules() if codes is None or not codes.isdisjoint(r.all_codes)]
    if not rules:
        return []
    ctx = Context(path, source, tree, settings, project, prebuilt)
    ctx.enabled = codes
    if project is not None:
        project.begin(ctx.semantic)  # type: ignore[attr-defined]
    try:
        _run(ctx, rules, errors)
        dead = shadowed_definitions(ctx.semantic) if ctx.findings else []
    finally:
        if project is not None:
            project.end(ctx.semantic)  # type: ignore[attr-defined]
        ctx.semantic.release()  # the tree goes at once, not at the next full collection
    if not ctx.findings:
        return []
    if dead:  # (a module pasted twice: the first ``class Saver`` is rebound before anything uses it)
        ctx.findings[:] = [f for f in ctx.findings if f.location is None or not any(
            a <= f.location.line <= b for a, b in dead)]
    kept = {id(f) for f in filter_noqa(ctx.findings, ctx.lines)}
    return sort_findings(merge_constructs([(f, n) for f, n in zip(ctx.findings, ctx.sites) if id(f) in kept]))


def shadowed_definitions(sem) -> list[tuple[int, int]]:  # type: ignore[no-untyped-def]
    """The line ranges of module-level functions and classes that a later statement of the module defines again
    under the same name, when nothing before that reads the name (a file pasted twice, a helper rewritten below the
    old one): that code never runs. A notebook cell that calls the first definition before a later cell redefines it
    keeps it alive, as does a function defined earlier that calls it."""
    defs: dict[str, list[ast.stmt]] = {}
    for stmt in sem.tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs.setdefault(stmt.name, []).append(stmt)
    twice = {name: found for name, found in defs.items() if len(found) > 1}
    if not twice:
        return []
    reads: dict[str, list[tuple[int, int]]] = {}
    for n in sem.of_type(ast.Name, ast.Attribute):
        name = n.id if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) else n.attr \
            if isinstance(n, ast.Attribute) else None  # (``module.Saver``, ``self.helper``: maybe it)
        if name in twice:
            reads.setdefault(name, []).append((n.lineno, n.col_offset))
    out = []
    for name, found in twice.items():
        for first, second in zip(found, found[1:]):
            inside = (first.lineno, first.end_lineno or first.lineno)
            if not any(at < (second.lineno, 0) and not inside[0] <= at[0] <= inside[1] for at in reads.get(name, ())):
                # (a read before the redefinition, even in an earlier function that a statement between them calls,
                # may run the first one; a read in the first definition itself does not)
                out.append((min([first.lineno, *(d.lineno for d in first.decorator_list)]), first.end_lineno or first.lineno))
    return out


def _targets(reg: RegisteredRule, ctx: Context) -> list[ast.AST]:
    sem = ctx.semantic
    if reg.calls or reg.keywords:
        found = list(sem.calls_named(*reg.calls)) if reg.calls else []
        for arg in reg.keywords:
            found += sem.calls_with_keyword(arg)
        if reg.keywords and len(found) > 1:
            found = sorted(set(found), key=sem.index.pos.__getitem__)
        return found
    if reg.node_types == (ast.Module,):
        return [ctx.tree]
    return sem.of_type(*reg.node_types)


def _run(ctx: Context, rules: list[RegisteredRule], errors: list[RuleError] | None) -> None:
    """Each rule over exactly the nodes it registered for, in source order."""
    for reg in rules:
        for node in _targets(reg, ctx):
            try:
                reg.func(node, ctx)
            except Exception as exc:
                if errors is None:
                    raise
                errors.append(RuleError(reg.code, getattr(node, "lineno", None), exc))
                break


def merge_constructs(found: list[tuple[Finding, ast.AST]]) -> list[Finding]:
    """One construct, one finding: findings reported at the same node fold into the most severe one
    (ties: the later stage, which is the more specific), whose message names the others' codes.
    A code that was not selected or is silenced by ``# noqa`` never reached this point, so the next
    code in line then leads."""
    groups: dict[int, list[Finding]] = {}
    order: list[int] = []
    for f, node in found:
        key = id(node)
        if key not in groups:
            groups[key] = []
            order.append(key)
        if all(g.code != f.code for g in groups[key]):
            groups[key].append(f)
    out = []
    for key in order:
        group = groups[key]
        if len(group) == 1:
            out.append(group[0])
            continue
        group.sort(key=lambda f: (f.severity.rank, _reverse_code(f.code)))
        out.append(_fold(group[0], group[1:]))
    return out


def _reverse_code(code: str) -> tuple[int, ...]:
    return tuple(-ord(c) for c in code)


def _fold(primary: Finding, others: list[Finding]) -> Finding:
    from torchdoctor.record import replace

    from torchdoctor.catalog import get_rule

    also = "; ".join(f"{o.code}: {get_rule(o.code).title}" for o in others)
    fixes = [primary.fix] + [o.fix for o in others if o.fix and o.fix != primary.fix]
    edits = list(primary.edits)
    for o in others:
        for e in o.edits:
            same = next((i for i, x in enumerate(edits) if (x.line, x.column, x.end_line, x.end_column)
                         == (e.line, e.column, e.line, e.column) == (e.line, e.column, e.end_line, e.end_column)), None)
            if same is not None:  # two insertions at one point: one edit, in this order
                x = edits[same]
                if e.replacement not in x.replacement:
                    edits[same] = replace(x, replacement=x.replacement + e.replacement)
            elif e not in edits:
                edits.append(e)
    return replace(primary, message=f"{primary.message} (also {also})", fix="; ".join(x for x in fixes if x) or None,
                   edits=tuple(edits), unsafe_fix=any(f.unsafe_fix for f in (primary, *others) if f.edits),
                   related=tuple(o.code for o in others))
