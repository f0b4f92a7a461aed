"""Jupyter notebooks: code cells joined into one module (IPython magics masked), findings mapped back to cells.

The cells are checked as one program, as the kernel runs them: a model made in
cell 2 and trained in cell 5 is one model. Each line of the joined text
remembers its cell (numbered among code cells, from 1) and its line there.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, replace

from torchdoctor.check.source import SourceError
from torchdoctor.findings import Finding, Location

__all__ = ["Notebook", "read_notebook"]

# Cell magics whose body is Python run by the kernel; any other (%%bash, %%html...) is not Python.
_PYTHON_CELL_MAGICS = {"time", "timeit", "capture", "prun", "debug", "pypy", "python", "python3"}
_MAGIC_LINE = re.compile(r"^(\s*)(?:[%!]|\w[\w.]*\?\??\s*$|\?)")
_MAGIC_ASSIGN = re.compile(r"^(\s*)(\w+)\s*=\s*[%!]")  # files = !ls ; t = %timeit -o f()


@dataclass(frozen=True)
class Notebook:
    text: str
    lines: tuple[tuple[int, int], ...]  # joined line - 1 -> (cell number, line in that cell)
    python: bool = True  # False for a notebook of another kernel language (R, Julia...)

    def where(self, line: int) -> tuple[int | None, int]:
        if 0 < line <= len(self.lines):
            return self.lines[line - 1]
        return (None, line)

    def locate(self, finding: Finding) -> Finding:
        """The finding placed in its cell; its edits dropped (notebooks are not fixed)."""
        loc = finding.location
        if loc is None:
            return finding
        cell, line = self.where(loc.line)
        end_line, end_col = loc.end_line, loc.end_column
        if end_line is not None:
            end_cell, end_line = self.where(end_line)
            if end_cell != cell:
                end_line = end_col = None
        new = Location(loc.path, line, loc.column, end_line, end_col, cell=cell)
        return replace(finding, location=new, edits=())


def read_notebook(data: bytes) -> Notebook:
    """Raise SourceError when the bytes are not a notebook."""
    try:
        doc = json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise SourceError(f"notebook is not valid UTF-8 (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise SourceError(f"not a valid notebook: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    if not isinstance(doc, dict):
        raise SourceError("not a valid notebook: the JSON document is not an object")
    if not _is_python(doc):
        return Notebook("", (), python=False)
    cells = doc.get("cells")
    if cells is None and isinstance(doc.get("worksheets"), list):  # nbformat 3
        cells = [c for ws in doc["worksheets"] if isinstance(ws, dict) for c in ws.get("cells", [])]
    if not isinstance(cells, list):
        raise SourceError("not a valid notebook: no 'cells' list")
    parts: list[str] = []
    where: list[tuple[int, int]] = []
    number = 0
    for cell in cells:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        number += 1
        source = cell.get("source", cell.get("input", ""))
        if isinstance(source, list):
            source = "".join(s for s in source if isinstance(s, str))
        if not isinstance(source, str):
            raise SourceError(f"not a valid notebook: cell {number} has no source text")
        lines = _python_lines(source)
        for i, line in enumerate(lines, 1):
            parts.append(line + "\n")
            where.append((number, i))
    return Notebook("".join(parts), tuple(where))


def _is_python(doc: dict) -> bool:
    meta = doc.get("metadata")
    if not isinstance(meta, dict):
        return True
    for key, sub in (("kernelspec", "language"), ("language_info", "name")):
        info = meta.get(key)
        if isinstance(info, dict) and isinstance(info.get(sub), str):
            return info[sub].lower() in ("python", "python3", "ipython", "python2")
    return True


def _python_lines(source: str) -> list[str]:
    """The cell's lines with IPython syntax masked by ``pass``, keeping line numbers."""
    lines = source.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if lines and lines[0].startswith("%%"):
        magic = lines[0][2:].split(maxsplit=1)
        if not magic or magic[0] not in _PYTHON_CELL_MAGICS:
            return ["" for _ in lines]  # another language: keep the numbering, check nothing
        lines[0] = ""
    if not any(_MAGIC_LINE.match(line) or _MAGIC_ASSIGN.match(line) for line in lines):
        return lines
    try:  # A line such as "    != b)" inside brackets is Python: mask only when needed.
        ast.parse("\n".join(lines))
        return lines
    except (SyntaxError, ValueError):
        pass
    return [_mask(line) for line in lines]


def _mask(line: str) -> str:
    if m := _MAGIC_ASSIGN.match(line):
        return f"{m.group(1)}{m.group(2)} = None"
    if m := _MAGIC_LINE.match(line):
        return m.group(1) + "pass"
    return line
