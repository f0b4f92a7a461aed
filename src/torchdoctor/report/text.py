"""Human-readable report: ``path:line:col: CODE [severity] message`` and a ``fix:`` line."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from torchdoctor.findings import Finding, Severity

_COLORS = {Severity.ERROR: "\033[31m", Severity.WARNING: "\033[33m", Severity.INFO: "\033[36m"}
_BOLD, _DIM, _RESET = "\033[1m", "\033[2m", "\033[0m"


def _paint(text: str, code: str, color: bool) -> str:
    return f"{code}{text}{_RESET}" if color else text


def format_finding(f: Finding, *, color: bool = False) -> str:
    loc = f.location
    where = f"{loc.display_path}:{loc.line}:{loc.column}: " if loc else ""
    rank = f"[rank {f.rank}] " if f.rank is not None else ""
    head = (
        f"{_paint(where, _BOLD, color)}{_paint(f.code, _COLORS[f.severity], color)} "
        f"[{f.severity.value}] {rank}{f.message}"
    )
    if f.fix:
        mark = " (fixable with --fix)" if f.fixable else " (fixable with --fix --unsafe-fixes)" if f.unsafe_fixable else ""
        head += "\n    " + _paint(f"fix: {f.fix}{mark}", _DIM, color)
    return head


def summary(findings: Sequence[Finding]) -> str:
    if not findings:
        return "All checks passed."
    counts = Counter(f.severity for f in findings)
    parts = [
        f"{counts[s]} {s.value}{'' if counts[s] == 1 else 's'}"
        for s in (Severity.ERROR, Severity.WARNING, Severity.INFO)
        if counts[s]
    ]
    n = len(findings)
    fixable = sum(f.fixable for f in findings)
    unsafe = sum(f.unsafe_fixable for f in findings)
    tail = f"\n{fixable} fixable with the `--fix` option." if fixable else ""
    if unsafe:
        tail += f"\n{unsafe} more with `--fix --unsafe-fixes` (these fixes may change what the code does: review them)."
    return f"Found {n} problem{'' if n == 1 else 's'} ({', '.join(parts)}).{tail}"


def render(findings: Sequence[Finding], *, color: bool = False) -> str:
    lines = [format_finding(f, color=color) for f in findings]
    lines.append(summary(findings))
    return "\n".join(lines) + "\n"
