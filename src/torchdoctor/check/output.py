"""What ``torchdoctor check`` prints and which exit code it returns, from the per-file results."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence

from torchdoctor.check.runner import CELL_LEFT_OUT, FileResult
from torchdoctor.findings import Finding, sort_findings
from torchdoctor.report import emit, render, use_color

__all__ = ["report", "statistics"]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def report(results: Sequence[FileResult], args: argparse.Namespace) -> int:
    """Print the errors (stderr), the report or diff (stdout / --output-file); return the exit code."""
    errors = [line for r in results for line in r.errors]
    for line in errors + [line for r in results for line in r.notes]:
        print(line, file=sys.stderr)
    unreadable = _unchecked(results)
    if args.diff:
        return _report_diff(results, args, unreadable)
    findings = sort_findings([f for r in results for f in r.findings])
    fixed = sum(r.fixed for r in results)
    stdin_fixed = next((r.fixed_source for r in results if r.fixed_source is not None), None)
    # With --fix on standard input the fixed code owns stdout; the report goes to stderr.
    stream = sys.stderr if (args.fix and stdin_fixed is not None) else sys.stdout
    if stdin_fixed is not None:
        sys.stdout.write(stdin_fixed)
    if args.statistics:
        text = statistics(findings, args.output_format)
    elif args.output_format == "text":
        text = _text(findings, fixed, unreadable, color=not args.output_file and use_color(stream))
    else:
        text = render(findings, args.output_format)
        _tail_to_stderr(fixed, unreadable)
    if text or args.output_file:
        emit(text, args.output_file, stream)
    if unreadable:
        return 2
    return 1 if findings and not args.exit_zero else 0


def _unchecked(results: Sequence[FileResult]) -> str:
    """The summary's last line when some file, or some cell of a notebook, could not be checked; else ""."""
    partly = sum(1 for r in results if r.errors and all(e.endswith(CELL_LEFT_OUT) for e in r.errors))
    whole = sum(1 for r in results if r.errors) - partly
    said = []
    if whole:
        said.append(f"{_plural(whole, 'file')} could not be checked")
    if partly:
        said.append(f"{_plural(partly, 'notebook')} {'was' if partly == 1 else 'were'} checked without "
                    "the cells that do not parse")
    return f"{'; '.join(said)} (see the errors above)." if said else ""


def _text(findings: list[Finding], fixed: int, unreadable: str, *, color: bool) -> str:
    from torchdoctor.report import text as text_report

    lines = [text_report.format_finding(f, color=color) for f in findings]
    if fixed:
        lines.append(f"Fixed {_plural(fixed, 'problem')}; {_plural(len(findings), 'problem')} remaining.")
    if findings or not unreadable:
        lines.append(text_report.summary(findings))
    if unreadable:
        lines.append(unreadable)
    return "\n".join(lines) + "\n"


def _tail_to_stderr(fixed: int, unreadable: str) -> None:
    # Machine-readable reports stay pure; the human notes go to stderr.
    if fixed:
        print(f"Fixed {_plural(fixed, 'problem')}.", file=sys.stderr)
    if unreadable:
        print(unreadable, file=sys.stderr)


def _report_diff(results: Sequence[FileResult], args: argparse.Namespace, unreadable: str) -> int:
    diffs = [r.diff for r in results if r.diff]
    if diffs or args.output_file:
        emit("".join(diffs), args.output_file)
    fixable = sum(r.fixed for r in results if r.diff)
    if diffs:
        print(f"Would fix {_plural(fixable, 'problem')} in {_plural(len(diffs), 'file')}.", file=sys.stderr)
    else:
        print("No fixes to apply.", file=sys.stderr)
    if unreadable:
        print(unreadable, file=sys.stderr)
        return 2
    return 1 if diffs else 0


def statistics(findings: Sequence[Finding], fmt: str) -> str:
    """Counts per code, most frequent first (``--statistics``)."""
    from torchdoctor.catalog import RULES

    counts = Counter(f.code for f in findings)
    fixable = Counter(f.code for f in findings if f.fixable)
    rows = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    if fmt == "json":
        import json

        data = [{"code": c, "name": RULES[c].name, "count": n, "fixable": fixable[c]} for c, n in rows]
        return json.dumps(data, indent=2) + "\n"
    width = max((len(str(n)) for _, n in rows), default=1)
    lines = [f"{n:>{width}}  {c}  {RULES[c].name}{'  [*]' if fixable[c] else ''}" for c, n in rows]
    if any(fixable.values()):
        lines.append("[*] fixable with --fix")
    return "\n".join(lines) + ("\n" if lines else "")
