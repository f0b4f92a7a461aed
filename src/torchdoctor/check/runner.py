"""Files in, results out: read, decode, parse, gate, analyse, fix; in parallel when there are many.

Nothing here raises for a bad file: every problem becomes a per-file message
in ``FileResult.errors``, so one unreadable file never stops the run.
"""

from __future__ import annotations

import ast
import gc
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial

from torchdoctor.check.engine import RuleError, analyse, load_rules, may_be_torch, other_framework, parse
from torchdoctor.check.project import Project
from torchdoctor.record import FrozenRecord, Record
from torchdoctor.check.source import Decoded, SourceError, decode_source, encode_source
from torchdoctor.config import Settings
from torchdoctor.errors import InputError
from torchdoctor.findings import Finding

__all__ = ["FileResult", "Mode", "check_file", "check_files"]

# The file name a notebook's cells are parsed under. Not the notebook's path: for a file that exists, CPython
# reads the error's line from that file (a line of its JSON) and counts the error's column in it.
NOTEBOOK_CELLS = "<notebook cells>"
PARALLEL_MIN_FILES = 48  # below this, starting processes costs more than it saves
MAX_FIX_PASSES = 8


class Mode(FrozenRecord):
    """What to do with each file, beyond finding problems."""

    __slots__ = ("gate", "fix", "diff", "unsafe_fixes")

    def __init__(self, gate: bool = True, fix: bool = False, diff: bool = False, unsafe_fixes: bool = False) -> None:
        # gate: only files that can be torch code get rules; fix: write fixed files; diff: compute the diff the
        # fixes would make; unsafe_fixes: apply (or show) the fixes that may change behaviour too
        self._fill(gate, fix, diff, unsafe_fixes)


class FileResult(Record):
    __slots__ = ("path", "findings", "errors", "notes", "fixed", "diff", "fixed_source")

    def __init__(self, path: str, findings: list[Finding] | None = None, errors: list[str] | None = None,
                 notes: list[str] | None = None, fixed: int = 0, diff: str = "", fixed_source: str | None = None) -> None:
        self.path = path
        self.findings: list[Finding] = [] if findings is None else findings
        self.errors: list[str] = [] if errors is None else errors  # "path: error: ..." lines, for stderr
        self.notes: list[str] = [] if notes is None else notes  # informational lines, for stderr
        self.fixed = fixed
        self.diff = diff
        self.fixed_source = fixed_source  # the fixed text when the input came from stdin

    def error(self, message: str, where: str | None = None) -> None:
        self.errors.append(f"{where or self.path}: error: {message}")


def check_file(path: str, settings: Settings | None = None, mode: Mode = Mode(), data: bytes | None = None,
               *, stdin: bool = False, project: Project | None = None) -> FileResult:
    """One file's result; ``data`` is the content when it does not come from ``path`` (stdin,
    whose fixed text is returned in ``fixed_source`` instead of being written to ``path``).
    ``project`` answers questions about the other modules (by default: the files near ``path``)."""
    result = FileResult(path)
    settings = settings or Settings()
    if project is None:
        project = Project([path], getattr(settings, "root", None))
    try:
        if data is None:
            with open(path, "rb") as fh:
                data = fh.read()
        if path.endswith(".ipynb"):
            _check_notebook(result, data, settings, mode, project, stdin=stdin)
        else:
            _check_python(result, data, settings, mode, project, stdin=stdin)
    except OSError as exc:
        from torchdoctor.check.discovery import describe_os_error

        result.error(f"cannot read: {describe_os_error(exc)}")
    except SourceError as exc:
        result.error(str(exc))
    except InputError as exc:
        result.error(str(exc))
    except Exception as exc:  # a bug of ours: say so, keep going with the other files
        result.error(f"internal error: {type(exc).__name__}: {exc} (please report it)")
    return result


def _parse_or_report(result: FileResult, text: str, where=None):
    try:
        return parse(text, result.path)
    except (SyntaxError, RecursionError, MemoryError, ValueError) as exc:
        _parse_error(result, exc, where)
    return None


# How a notebook's cell that does not parse, left out of a check of the others, ends its error line.
CELL_LEFT_OUT = "(the cell is left out; the other cells were checked)"


def _parse_error(result: FileResult, exc: Exception, where=None, left_out: bool = False) -> None:  # type: ignore[no-untyped-def]
    if isinstance(exc, SyntaxError):
        line, col = exc.lineno or 1, exc.offset or 1
        cell, line = where(line) if where else (None, line)
        at = f"cell {cell}, line {line}" if cell else f"line {line}"
        result.error(f"syntax error at {at}, column {col}: {exc.msg}" + (f" {CELL_LEFT_OUT}" if left_out else ""))
    elif isinstance(exc, (RecursionError, MemoryError)):
        result.error("cannot parse: the code is nested too deeply for Python's parser")
    else:  # ValueError: NUL bytes in a notebook's text
        result.error(f"cannot parse: {exc}")


def _noqa_warnings(path: str, text: str, where=None) -> list[str]:  # type: ignore[no-untyped-def]
    if "noqa" not in text.lower():  # most files: one scan, no per-line work (a case-blind regex scan cost 5x)
        return []
    from torchdoctor.check.noqa import noqa_warnings
    from torchdoctor.check.source import split_lines

    return noqa_warnings(path, split_lines(text), where)


def _report_rule_errors(result: FileResult, errors: list[RuleError]) -> None:
    for err in errors:
        line = f"{result.path}: {err}"
        if line not in result.errors:
            result.errors.append(line)


def _check_python(result: FileResult, data: bytes, settings: Settings, mode: Mode, project: Project,
                  *, stdin: bool) -> None:
    decoded = decode_source(data)
    kept = None if stdin else project.take(result.path, decoded.text)  # parsed already, for another file's questions
    tree = kept[0] if kept else _parse_or_report(result, decoded.text)
    if tree is None or (mode.gate and (not may_be_torch(decoded.text) or other_framework(tree))):
        return
    errors: list[RuleError] = []
    result.findings = analyse(decoded.text, result.path, tree=tree, settings=settings, errors=errors, project=project,
                              prebuilt=kept[1:] if kept else None)
    result.notes.extend(_noqa_warnings(result.path, decoded.text))
    if (mode.fix or mode.diff) and any(_applicable(f, mode) for f in result.findings):
        _fix(result, decoded, settings, mode, errors, project, stdin=stdin, original=data)
    _report_rule_errors(result, errors)


def _applicable(finding: Finding, mode: Mode) -> bool:
    return finding.fixable or (mode.unsafe_fixes and finding.unsafe_fixable)


def _fix(result: FileResult, decoded: Decoded, settings: Settings, mode: Mode, errors: list[RuleError],
         project: Project, *, stdin: bool, original: bytes) -> None:
    """Apply fixes pass after pass (overlapping ones wait a pass); re-parse each time; write once.

    ``original`` is the file's bytes as read: the write refuses a file that changed since.
    """
    from torchdoctor.check.fix import apply_fixes, unified_diff, write_bytes_atomic

    text, findings, total = decoded.text, result.findings, 0
    for _ in range(MAX_FIX_PASSES):
        new, n = apply_fixes(text, [f for f in findings if _applicable(f, mode)])
        if n == 0 or new == text:
            break
        try:
            tree = parse(new, result.path)
        except (SyntaxError, ValueError, RecursionError) as exc:
            line = getattr(exc, "lineno", None)
            result.error(f"fixing would make invalid Python ({getattr(exc, 'msg', exc)} at line {line}); "
                         "file left unchanged (please report this)")
            return
        text, total = new, total + n
        findings = analyse(text, result.path, tree=tree, settings=settings, errors=errors, project=project)
    if total == 0:
        return
    if mode.diff:
        result.fixed = total
        result.diff = unified_diff(result.path, decoded.text, text)
    if mode.fix:
        if stdin:
            result.fixed_source = text
        else:
            try:
                data = encode_source(text, decoded.encoding)
            except UnicodeEncodeError:
                result.error(f"fixed text cannot be written in the file's encoding {decoded.encoding}; file left unchanged")
                return
            write_bytes_atomic(result.path, data, original)  # InputError: reported, nothing counted as fixed
        result.fixed = total
        result.findings = findings


def _check_notebook(result: FileResult, data: bytes, settings: Settings, mode: Mode, project: Project, *,
                    stdin: bool = False) -> None:
    from torchdoctor.check.notebook import read_notebook

    nb = read_notebook(data)
    if not nb.python:
        return
    tree, nb = _parse_notebook(result, nb)
    if tree is None or (mode.gate and (not may_be_torch(nb.text) or other_framework(tree))):
        return
    errors: list[RuleError] = []
    found = _analyse_notebook(result.path, nb, tree, settings, errors, project)
    result.notes.extend(_noqa_warnings(result.path, nb.text, nb.where))
    if (mode.fix or mode.diff) and any(_applicable(f, mode) for f in found):
        fixed = _fix_notebook(result, data, nb, found, settings, mode, errors, project, stdin=stdin)
        if fixed is not None:
            nb, found = fixed
    result.findings = [nb.locate(f) for f in found]
    _report_rule_errors(result, errors)


def _analyse_notebook(path: str, nb, tree, settings: Settings, errors: list[RuleError],  # type: ignore[no-untyped-def]
                      project: Project) -> list[Finding]:
    """The cells' findings. With a cell left out, the codes that judge the whole program are not reported
    (the cell may hold what they would miss; TD401 and TD402 only when its text names what they ask about), and
    nothing is reported in that cell."""
    if not nb.left_out:
        return _without_displayed_moves(nb, tree, analyse(nb.text, path, tree=tree, settings=settings, errors=errors,
                                                          project=project))
    from torchdoctor.check.engine import enabled_codes
    from torchdoctor.check.notebook import JUDGED_UNLESS_LEFT_OUT_SAYS, WHOLE_PROGRAM_CODES
    from torchdoctor.catalog import RULES

    codes = enabled_codes(path, None, settings)
    left = "\n".join(c.source for c in nb.cells if c.number in nb.left_out)
    skipped = {c for c in WHOLE_PROGRAM_CODES if c not in JUDGED_UNLESS_LEFT_OUT_SAYS
               or JUDGED_UNLESS_LEFT_OUT_SAYS[c].search(left)}
    codes = (set(RULES) if codes is None else codes) - skipped
    found = analyse(nb.text, path, tree=tree, enabled=codes, settings=settings, errors=errors, project=project)
    return [f for f in _without_displayed_moves(nb, tree, found)
            if f.location is None or nb.where(f.location.line)[0] not in nb.left_out]


def _without_displayed_moves(nb, tree, found: list[Finding]) -> list[Finding]:  # type: ignore[no-untyped-def]
    """A cell's last statement, when an expression, is displayed: ``y_preds.cpu()`` there shows the copy, it
    does not drop it (TD301 is about a move whose result nobody sees)."""
    if not any(f.code == "TD301" for f in found):
        return found
    body = tree.body
    shown = set()
    for i, stmt in enumerate(body):
        if isinstance(stmt, ast.Expr) and (i + 1 == len(body) or nb.where(body[i + 1].lineno)[0]
                                           != nb.where(stmt.lineno)[0]):
            shown.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    return [f for f in found if not (f.code == "TD301" and f.location is not None and f.location.line in shown)]


def _parse_notebook(result: FileResult, nb):  # type: ignore[no-untyped-def]
    """The cells' tree, and the notebook it is the tree of. A code cell that does not parse on its own (a
    typo, pasted output, a shell command) is reported and left out: the other cells are checked as if it were
    absent. When they still do not parse together, the notebook is reported whole, as a file is."""
    try:
        return parse(nb.text, NOTEBOOK_CELLS), nb
    except (SyntaxError, RecursionError, MemoryError, ValueError) as exc:
        failed = exc
    bad: dict[int, SyntaxError] = {}
    if isinstance(failed, SyntaxError):
        for number, text in nb.cell_texts().items():
            try:
                parse(text, NOTEBOOK_CELLS)
            except SyntaxError as exc:
                bad[number] = exc
            except (RecursionError, MemoryError, ValueError):  # not a syntax error: report the notebook's own
                bad.clear()
                break
    if bad:
        rest = nb.without(frozenset(bad))
        try:
            tree = parse(rest.text, NOTEBOOK_CELLS)
        except (SyntaxError, RecursionError, MemoryError, ValueError):
            pass
        else:
            for number, exc in bad.items():
                _parse_error(result, exc, lambda line, cell=number: (cell, line), left_out=True)
            return tree, rest
    _parse_error(result, failed, nb.where)
    return None, nb


def _fix_notebook(result: FileResult, data: bytes, nb, found: list[Finding], settings: Settings, mode: Mode,  # type: ignore[no-untyped-def]
                  errors: list[RuleError], project: Project, *, stdin: bool):
    """Fix the cells' sources pass after pass; write the notebook once, only its changed sources replaced.

    Returns the fixed notebook and its findings (``None`` when nothing changed).
    """
    import codecs

    from torchdoctor.check.fix import write_bytes_atomic
    from torchdoctor.check.notebook import read_notebook
    from torchdoctor.check.notebook_fix import cell_diff, fix_cells, rewrite

    original, current, total = nb, nb, 0
    sources: dict[int, str] = {}
    for _ in range(MAX_FIX_PASSES):
        changed, n = fix_cells(current, [f for f in found if _applicable(f, mode)])
        if not n:
            break
        sources = {**sources, **changed}
        candidate = read_notebook(rewrite(original, sources).encode("utf-8"))
        if original.left_out:  # (their sources are never rewritten: the same cells, blank again)
            candidate = candidate.without(original.left_out)
        try:
            tree = parse(candidate.text, NOTEBOOK_CELLS)
        except (SyntaxError, ValueError, RecursionError) as exc:
            result.error(f"fixing would make invalid Python ({getattr(exc, 'msg', exc)}); notebook left unchanged (please report this)")
            return None
        current, total = candidate, total + n
        found = _analyse_notebook(result.path, current, tree, settings, errors, project)
    if total == 0:
        return None
    result.fixed = total
    if mode.diff:
        result.diff = cell_diff(result.path, original, sources)
    if not mode.fix:
        return None
    text = rewrite(original, sources)
    if stdin:
        result.fixed_source = text
    else:
        bom = codecs.BOM_UTF8 if data.startswith(codecs.BOM_UTF8) else b""
        write_bytes_atomic(result.path, bom + text.encode("utf-8"), data)
    return current, found


def check_files(paths: Sequence[str], settings: Settings | None = None, mode: Mode = Mode(),
                jobs: int | None = None) -> list[FileResult]:
    """Results in the order of ``paths``; in worker processes when there are many files."""
    settings = settings or Settings()
    project = Project(paths, getattr(settings, "root", None))
    jobs = jobs or os.cpu_count() or 1
    if len(paths) > 1:  # (checked in another order, reported in this one)
        ordered = project.importers_first(paths)
        results = dict(zip(ordered, _check_ordered(ordered, settings, mode, project, jobs)))
        return [results[p] for p in paths]
    return _check_ordered(paths, settings, mode, project, jobs)


def _check_ordered(paths: Sequence[str], settings: Settings, mode: Mode, project: Project, jobs: int) -> list[FileResult]:
    with _collector_paused():
        if jobs <= 1 or len(paths) < PARALLEL_MIN_FILES:
            return _check_in_turn(paths, settings, mode, project)
        load_rules()  # once here: forked workers inherit the registry instead of importing it each
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        # Each worker checks a run of consecutive files in turn (_check_in_turn), as -j 1 checks all of them.
        work = partial(_check_in_turn, settings=settings, mode=mode, project=project)
        size = max(1, min(64, len(paths) // (jobs * 4)))
        chunks = [paths[i:i + size] for i in range(0, len(paths), size)]
        try:
            with ProcessPoolExecutor(max_workers=jobs, initializer=gc.disable) as pool:
                return [r for part in pool.map(work, chunks) for r in part]
        except (BrokenProcessPool, OSError):  # a worker died (memory, a signal): finish in this process
            return _check_in_turn(paths, settings, mode, project)


def _check_in_turn(paths: Sequence[str], settings: Settings, mode: Mode, project: Project) -> list[FileResult]:
    """Each file once, in order, except that a file the project index has just parsed (to answer another
    file's questions) is checked next, while its tree is still kept: in the given order, the index's
    few kept trees were soon taken by files checked already, and ~15 % of the files were parsed twice."""
    by_abs: dict[str, str] = {}
    for p in paths:
        by_abs.setdefault(os.path.abspath(p), p)
    done: dict[str, FileResult] = {}
    for p in paths:
        if p not in done:
            done[p] = _check_counted(p, settings, mode, project)
        while True:
            waiting = (by_abs.get(a) for a in project.waiting())
            nxt = next((q for q in waiting if q is not None and q not in done), None)
            if nxt is None:
                break
            done[nxt] = _check_counted(nxt, settings, mode, project)
    project.forget_kept()
    return [done[p] for p in paths]


# The checker's own objects form no reference cycles (SemanticModel.release breaks them), so the cyclic
# collector, set off by the allocations of every parse, would only rescan the live trees: about a quarter
# of a check's CPU. It is paused while files are checked; a collection of the younger generations every
# COLLECT_EVERY files bounds whatever a cycle elsewhere might hold (what outlives two of them, the
# modules and the project's caches, is not rescanned each time: a full collection cost ~50 ms).
COLLECT_EVERY = 100
_checked = 0


@contextmanager
def _collector_paused() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _check_counted(path: str, settings: Settings, mode: Mode, project: Project) -> FileResult:
    global _checked
    _checked += 1
    if _checked % COLLECT_EVERY == 0:
        gc.collect(1)
    result = check_file(path, settings, mode, project=project)
    project.finished(path)
    return result
