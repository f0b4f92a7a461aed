"""Applying findings' edits: non-overlapping ones, from the end backwards; writing the fixed file safely.

A finding's edits are applied all together or not at all. When two findings'
edits overlap, the earlier one wins this pass; the engine re-checks the fixed
text and applies what is left in the next pass.
"""

from __future__ import annotations

from collections.abc import Sequence

from torchdoctor.errors import InputError
from torchdoctor.check.source import NEWLINE
from torchdoctor.findings import Edit, Finding

__all__ = ["line_starts", "apply_fixes", "unified_diff", "write_bytes_atomic"]



def line_starts(text: str) -> list[int]:
    """Offset of the first character of each line (1-based line n starts at ``[n - 1]``)."""
    return [0] + [m.end() for m in NEWLINE.finditer(text)]


def _span(edit: Edit, starts: list[int], text: str) -> tuple[int, int] | None:
    """Character offsets of an edit, or None when it points outside the text."""

    def offset(line: int, col: int) -> int | None:
        if not 1 <= line <= len(starts) or col < 0:
            return None
        end = starts[line] if line < len(starts) else len(text)
        body = text[starts[line - 1]:end].rstrip("\r\n")
        return starts[line - 1] + col if col <= len(body) else None

    start, end = offset(edit.line, edit.column), offset(edit.end_line, edit.end_column)
    if start is None or end is None or end < start:
        return None
    return start, end


def _conflict(a: tuple[int, int], b: tuple[int, int]) -> bool:
    # Two insertions at one point have no defined order: treat them as overlapping.
    return (a[0] < b[1] and b[0] < a[1]) or a[0] == b[0]


def apply_fixes(text: str, findings: Sequence[Finding]) -> tuple[str, int]:
    """The text with every applicable finding's edits applied, and how many findings were fixed."""
    starts = line_starts(text)
    taken: list[tuple[int, int, str]] = []
    fixed = 0
    for f in sorted((f for f in findings if f.edits), key=lambda f: min((e.line, e.column) for e in f.edits)):
        spans = [_span(e, starts, text) for e in f.edits]
        if any(s is None for s in spans):
            continue
        mine = [(s[0], s[1], e.replacement) for s, e in zip(spans, f.edits)]  # type: ignore[index]
        if any(_conflict(a[:2], b[:2]) for i, a in enumerate(mine) for b in mine[i + 1:]):
            continue
        if any(_conflict(a[:2], b[:2]) for a in mine for b in taken):
            continue
        taken.extend(mine)
        fixed += 1
    for start, end, replacement in sorted(taken, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text, fixed


def unified_diff(path: str, old: str, new: str) -> str:
    import difflib

    diff = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), fromfile=f"a/{path}", tofile=f"b/{path}"
    )
    out = []
    for line in diff:
        out.append(line if line.endswith(("\n", "\r")) else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def write_bytes_atomic(path: str, data: bytes, original: bytes | None = None) -> None:
    """Write a fixed source file, keeping it as it was: mode, owner, group, hard links, the file behind a link.

    ``original`` is what the file held when it was read: a file changed on disk
    since then is not overwritten. A file this user cannot write is an error
    even when its folder is writable (torchdoctor._files.write_file).
    """
    from torchdoctor._files import ChangedOnDisk, write_file

    try:
        write_file(path, data, durable=False, original=original)
    except ChangedOnDisk:
        raise InputError(f"{path} changed on disk while it was being checked; not overwritten (run --fix again)") from None
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}; file left unchanged") from None
