"""Where each code cell's source sits in a notebook's JSON text, and fixes written into those places only.

A notebook is rewritten by replacing the text of the ``source`` values that
changed, in the file's own JSON style (its indentation, one string per line,
ASCII escapes or not): outputs, metadata, key order and every other byte stay
as they were. The positions come from a small walk over the JSON text
(``json``'s own string scanner reads each string), since ``json.loads`` keeps
none.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from json.decoder import scanstring

from torchdoctor.check.notebook import CodeCell, Notebook
from torchdoctor.findings import Edit, Finding

Span = tuple[int, int]
_WS = re.compile(r"[ \t\n\r]*")
_ATOM = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null")


@lru_cache(maxsize=8)
def source_positions(raw: str) -> dict[int, tuple[Span, list[Span]]]:
    """Cell index -> (span of its ``source`` value, spans of the value's strings), offsets into ``raw``."""
    found: dict[int, tuple[Span, list[Span]]] = {}
    try:
        _value(raw, _skip(raw, 0), (), found)
    except (ValueError, IndexError):  # json.loads accepted it: a quirk of this walk, so no positions
        return {}
    return found


def _skip(s: str, i: int) -> int:
    return _WS.match(s, i).end()  # type: ignore[union-attr]


def _value(s: str, i: int, path: tuple, found: dict) -> int:
    c = s[i]
    if c == "{":
        i = _skip(s, i + 1)
        while s[i] != "}":
            key, i = scanstring(s, i + 1)
            i = _skip(s, _skip(s, i) + 1)  # past the colon
            i = _skip(s, _value(s, i, (*path, key), found))
            if s[i] == ",":
                i = _skip(s, i + 1)
        return i + 1
    if c == "[":
        start, items, n = i, [], 0
        i = _skip(s, i + 1)
        while s[i] != "]":
            item = i
            i = _value(s, i, (*path, n), found)
            items.append((item, i))
            i = _skip(s, i)
            if s[i] == ",":
                i = _skip(s, i + 1)
            n += 1
        _record(path, (start, i + 1), items, found)
        return i + 1
    if c == '"':
        start = i
        _, i = scanstring(s, i + 1)
        _record(path, (start, i), [(start, i)], found)
        return i
    m = _ATOM.match(s, i)
    if m is None:
        raise ValueError(f"unexpected {c!r} at {i}")
    return m.end()


def _record(path: tuple, span: Span, items: list[Span], found: dict) -> None:
    if len(path) == 3 and path[0] == "cells" and isinstance(path[1], int) and path[2] == "source":
        found[path[1]] = (span, items)


def fix_cells(nb: Notebook, findings: list[Finding]) -> tuple[dict[int, str], int]:
    """New source text per cell number for the findings' edits (joined-text positions), and how many were fixed."""
    from torchdoctor.check.fix import apply_fixes

    per_cell: dict[int, list[Finding]] = {}
    for f in findings:
        if not f.edits:
            continue
        cells = {nb.where(e.line)[0] for e in f.edits} | {nb.where(e.end_line)[0] for e in f.edits}
        if len(cells) != 1 or None in cells:
            continue  # an edit across cells cannot be written into one cell
        cell = cells.pop()
        if cell in nb.left_out:
            continue  # a cell that does not parse is kept byte for byte
        shift = nb.first_line(cell) - 1
        edits = tuple(Edit(e.line - shift, e.column, e.end_line - shift, e.end_column, e.replacement) for e in f.edits)
        per_cell.setdefault(cell, []).append(Finding(f.code, f.message, f.location, f.fix, edits=edits))
    out, total = {}, 0
    by_number = {c.number: c for c in nb.cells}
    for number, fs in per_cell.items():
        code = by_number[number]
        if code.index < 0:
            continue  # nbformat 3: not rewritten
        new, n = apply_fixes(code.source, fs)
        if n and new != code.source:
            out[number], total = new, total + n
    return out, total


def rewrite(nb: Notebook, sources: dict[int, str]) -> str:
    """The notebook's JSON text with the given cells' sources replaced, every other byte kept."""
    positions = source_positions(nb.raw)
    by_number = {c.number: c for c in nb.cells}
    edits = []
    for number, text in sources.items():
        code = by_number[number]
        (start, end), items = positions[code.index]
        edits.append((start, end, _serialise(nb.raw, start, end, items, code, text)))
    raw = nb.raw
    for start, end, replacement in sorted(edits, reverse=True):
        raw = raw[:start] + replacement + raw[end:]
    return raw


def _serialise(raw: str, start: int, end: int, items: list[Span], code: CodeCell, text: str) -> str:
    old = raw[start:end]
    ascii_only = "\\u" in old and not any(ord(ch) > 127 for ch in old)
    if not code.as_list:
        return json.dumps(text, ensure_ascii=ascii_only)
    strings = [json.dumps(line, ensure_ascii=ascii_only) for line in text.splitlines(keepends=True)]
    if not items:  # an empty list: no style to copy
        return json.dumps(text.splitlines(keepends=True), ensure_ascii=ascii_only)
    # the file's own separators: "[\n    " before the first string, ",\n    " between, "\n   " after the last
    head, tail = raw[start + 1:items[0][0]], raw[items[-1][1]:end - 1]
    sep = raw[items[0][1]:items[1][0]] if len(items) >= 2 else ("," + head if head else ", ")
    return "[" + head + sep.join(strings) + tail + "]" if strings else "[]"


def cell_diff(path: str, nb: Notebook, sources: dict[int, str]) -> str:
    """A unified diff of the changed cells' sources, one hunk set per cell (``a/nb.ipynb:cell 3``)."""
    from torchdoctor.check.fix import unified_diff

    by_number = {c.number: c for c in nb.cells}
    return "".join(unified_diff(f"{path}:cell {n}", by_number[n].source, sources[n]) for n in sorted(sources))
