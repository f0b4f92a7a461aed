"""Jupyter notebooks: code cells joined into one module (IPython magics masked), findings mapped back to cells.

The cells are checked as one program, as the kernel runs them: a model made in
cell 2 and trained in cell 5 is one model. Each line of the joined text
remembers its cell (numbered among code cells, from 1) and its line there.
A finding also learns the line of the notebook file (its JSON) that holds
that source line, for reports that can only point into the file (SARIF,
GitHub annotations). Fixes edit the cells' source and nothing else: outputs,
metadata and the file's formatting stay byte for byte (``notebook_fix.py``).
A code cell that does not parse on its own is left out (``Notebook.without``):
its lines go blank, and the other cells are checked as if it were absent.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from dataclasses import dataclass

from torchdoctor.check.source import SourceError
from torchdoctor.findings import Edit, Finding, Location
from torchdoctor.record import replace

__all__ = ["Notebook", "read_notebook"]

# Cell magics whose body is Python run by the kernel; any other (%%bash, %%html...) is not Python.
_PYTHON_CELL_MAGICS = {"time", "timeit", "capture", "prun", "debug", "pypy", "python", "python3"}
# (``torch.*Tensor?``: IPython's wildcard search, as ``model?`` is its help)
# (``pip install x`` with no ``%``: IPython's automagic runs it as ``%pip``; masked only when the cell does not parse)
_MAGIC_LINE = re.compile(r"^(\s*)(?:[%!]|[\w*][\w.*]*\?\??\s*$|\?|(?:pip|conda|mamba)\s+(?:install|uninstall)\s)")
_MAGIC_ASSIGN = re.compile(r"^(\s*)(\w+)\s*=\s*[%!]")  # files = !ls ; t = %timeit -o f()


@dataclass(frozen=True)
class CodeCell:
    number: int  # among code cells, from 1
    index: int  # its place in the notebook's list of cells (-1 in nbformat 3 worksheets: not editable)
    source: str  # as the file has it (a list of lines joined)
    as_list: bool  # the file stores it as a list of lines (nbformat's usual form)


# What a left-out cell's names are bound to: a call of nothing the checker knows.
LEFT_OUT = "__cell_left_out__"  # (no "torch" in it: the gate before any rule reads the text)
# Codes whose finding says that something is missing from the whole program (an availability check
# anywhere in the file, a move, eval(), train(), zero_grad(), no_grad, a GradScaler and its step/update,
# set_epoch, set_device, a synchronize, a rank guard, convert_sync_batchnorm: CATALOG.md, Boundaries):
# a cell left out may hold that very thing, so a notebook with a cell left out is not judged for them.
WHOLE_PROGRAM_CODES = frozenset({"TD101", "TD201", "TD306", "TD401", "TD402", "TD403", "TD404", "TD406",
                                 "TD604", "TD605", "TD701", "TD703", "TD705", "TD706"})
# Of those, the codes a left-out cell can only wrong when its text says so: an evaluation forward is judged on its own
# cell's grad mode and its model's mode calls, which a cell elsewhere changes only through these words (a
# ``with torch.no_grad(): evaluate(model)`` there, a ``model.eval()`` there).
JUDGED_UNLESS_LEFT_OUT_SAYS = {"TD401": re.compile(r"no_grad|inference_mode|set_grad_enabled|grad_enabled|\.eval\(|\.train\("),
                               "TD402": re.compile(r"\.eval\(|\.train\(")}
_LINE_REF = re.compile(r"(?<![\w.:/])line (\d+)\b")  # a line of this file named in a message (not ``f.py:12``)


@dataclass(frozen=True)
class Notebook:
    text: str
    lines: tuple[tuple[int, int], ...]  # joined line - 1 -> (cell number, line in that cell)
    python: bool = True  # False for a notebook of another kernel language (R, Julia...)
    raw: str = ""  # the file's JSON text
    cells: tuple[CodeCell, ...] = ()
    left_out: frozenset[int] = frozenset()  # cells that do not parse: blank in ``text``, never rewritten

    def cell_texts(self) -> dict[int, str]:
        """Each code cell's Python as ``text`` holds it (IPython syntax masked), in the cell's own line numbers."""
        out: dict[int, list[str]] = {c.number: [] for c in self.cells}
        for line, (cell, _) in zip(self.text.split("\n"), self.lines):
            out[cell].append(f"{line}\n")
        return {cell: "".join(lines) for cell, lines in out.items()}

    def without(self, cells: frozenset[int]) -> Notebook:
        """The same notebook with these cells (which do not parse) left out: the other cells are checked as if
        they were absent, every position unchanged. A later cell may read a name that a left-out cell rebinds
        (``out = out.detach().cpu()``): the cell's first line binds each such name to an unknown value, so that
        what an earlier cell put in it is not taken for what the later one reads."""
        lines = self.text.split("\n")
        at: dict[int, list[int]] = {number: [] for number in cells}
        for i, (cell, _) in enumerate(self.lines):
            if cell in at:
                at[cell].append(i)
        for rows in at.values():
            names = _bound_names([lines[i] for i in rows])
            for i in rows:
                lines[i] = ""
            if rows and names:
                lines[rows[0]] = " = ".join(names) + f" = {LEFT_OUT}()"
        text = "".join(f"{line}\n" for line, _ in zip(lines, self.lines))
        return dataclasses.replace(self, text=text, left_out=self.left_out | cells)

    def where(self, line: int) -> tuple[int | None, int]:
        if 0 < line <= len(self.lines):
            return self.lines[line - 1]
        return (None, line)

    def first_line(self, cell: int) -> int:
        """The joined text's line where ``cell`` starts (1-based); 0 for a cell with no lines."""
        return next((i for i, (c, _) in enumerate(self.lines, 1) if c == cell), 0)

    def locate(self, finding: Finding) -> Finding:
        """The finding placed in its cell (and in the file's JSON line); its edits moved into the cell too."""
        loc = finding.location
        if loc is None:
            return finding
        cell, line = self.where(loc.line)
        end_line, end_col = loc.end_line, loc.end_column
        if end_line is not None:
            end_cell, end_line = self.where(end_line)
            if end_cell != cell:
                end_line = end_col = None
        file_line = self.file_line(cell, line) if cell is not None else None
        new = Location(loc.path, line, loc.column, end_line, end_col, cell=cell, file_line=file_line)
        return replace(finding, location=new, edits=self._cell_edits(finding.edits, cell),
                       message=_LINE_REF.sub(self._cell_ref, finding.message))

    def _cell_ref(self, m: re.Match[str]) -> str:
        """``the loop at line 130`` of the joined text: ``the loop at cell 12, line 3``."""
        cell, line = self.where(int(m.group(1)))
        return f"cell {cell}, line {line}" if cell is not None else m.group(0)

    def _cell_edits(self, edits: tuple[Edit, ...], cell: int | None) -> tuple[Edit, ...]:
        """Edits in the cell's own line numbers; none when one reaches into another cell (not fixable there)."""
        if not edits or cell is None or any(self.where(e.line)[0] != cell or self.where(e.end_line)[0] != cell for e in edits):
            return ()
        shift = self.first_line(cell) - 1
        return tuple(replace(e, line=e.line - shift, end_line=e.end_line - shift) for e in edits)

    def file_line(self, cell: int, line: int) -> int | None:
        from torchdoctor.check.notebook_fix import source_positions

        code = next((c for c in self.cells if c.number == cell), None)
        if code is None or code.index < 0 or not self.raw:
            return None
        spans = source_positions(self.raw).get(code.index)
        if spans is None:
            return None
        value, items = spans
        start = items[line - 1][0] if code.as_list and 0 < line <= len(items) else value[0]
        return self.raw.count("\n", 0, start) + 1


def read_notebook(data: bytes) -> Notebook:
    """Raise SourceError when the bytes are not a notebook."""
    try:
        raw = data.decode("utf-8-sig")
        doc = json.loads(raw)
    except UnicodeDecodeError as exc:
        raise SourceError(f"notebook is not valid UTF-8 (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise SourceError(f"not a valid notebook: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    if not isinstance(doc, dict):
        raise SourceError("not a valid notebook: the JSON document is not an object")
    if not _is_python(doc):
        return Notebook("", (), python=False)
    cells = doc.get("cells")
    editable = cells is not None
    if cells is None and isinstance(doc.get("worksheets"), list):  # nbformat 3
        cells = [c for ws in doc["worksheets"] if isinstance(ws, dict) for c in ws.get("cells", [])]
    if not isinstance(cells, list):
        raise SourceError("not a valid notebook: no 'cells' list")
    parts: list[str] = []
    where: list[tuple[int, int]] = []
    code: list[CodeCell] = []
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        number = len(code) + 1
        source = cell.get("source", cell.get("input", ""))
        as_list = isinstance(source, list)
        if as_list:
            as_list = all(isinstance(s, str) for s in source)
            source = "".join(s for s in source if isinstance(s, str))
        if not isinstance(source, str):
            raise SourceError(f"not a valid notebook: cell {number} has no source text")
        code.append(CodeCell(number, index if editable else -1, source, as_list))
        lines = _python_lines(source)
        for i, line in enumerate(lines, 1):
            parts.append(line + "\n")
            where.append((number, i))
    return Notebook("".join(parts), tuple(where), raw=raw, cells=tuple(code))


_TARGETS = re.compile(r"\s*((?:[^=#'\"()\[\]{}]|\([^()]*\)|\[[^\[\]]*\])*?)"
                      r"(?:[-+*/%&|^@]|//|\*\*|>>|<<)?(?<![<>!=])=(?!=)")
_FOR = re.compile(r"\s*(?:async\s+)?for\s+(.+?)\s+in\b")
_DEF = re.compile(r"(\s*)(?:async\s+)?(?:def|class)\s+(\w+)")
_AS = re.compile(r"\bas\s+(\w+)")
_WALRUS = re.compile(r"(\w+)\s*:=")
_STRING = re.compile(r"'[^'\\]*'|\"[^\"\\]*\"")
_SUBSCRIPT = re.compile(r"(?<=[\w\])])\s*\[[^\[\]]*\]")
_IDENT = re.compile(r"(?<![\w.])[A-Za-z_]\w*(?![\w.(\[])")


def _bound_names(lines: list[str]) -> list[str]:
    """The names a cell that does not parse seems to bind (assignments, ``for`` and ``with`` targets,
    ``def`` and ``class``), read line by line; not those bound inside its functions and classes (their own
    locals), nor by imports (a module is the same module whichever cell imports it)."""
    import keyword

    found: dict[str, None] = {}
    body = None  # the indentation of the def or class whose body is being skipped
    for line in lines:
        text = _STRING.sub('""', line).split("#", 1)[0]
        if not text.strip():
            continue
        indent = len(text) - len(text.lstrip())
        if body is not None:
            if indent > body:
                continue
            body = None
        if m := _DEF.match(text):
            found[m.group(2)] = None
            body = len(m.group(1))
            continue
        if re.match(r"\s*(?:import|from)\s", text):
            continue
        targets = _AS.findall(text) + _WALRUS.findall(text)
        for rest in text.split(";"):
            if m := _FOR.match(rest):
                targets.append(m.group(1))
            while (m := _TARGETS.match(rest)) and not m.group(1).lstrip().startswith("lambda"):  # a = b = value
                targets.append(m.group(1).split(":", 1)[0])
                rest = rest[m.end():]
        for target in targets:
            for name in _IDENT.findall(_SUBSCRIPT.sub("", target)):
                if not keyword.iskeyword(name):
                    found[name] = None
    return list(found)


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
        return _filled(lines)
    try:  # A line such as "    != b)" inside brackets is Python: mask only when needed.
        ast.parse("\n".join(lines))
        return lines
    except (SyntaxError, ValueError):
        pass
    return _filled(_masked(lines))


# An exercise's blank for the learner: ``all_phones = <YOUR CODE HERE>``, ``return <YOUR LOSS>``, ``<TODO>``.
_PLACEHOLDER = re.compile(r"<\s*(?i:your|todo|fill|insert|code)\b[^<>\n]*>|<[A-Z][A-Z0-9_ ]{2,}>")


def _filled(lines: list[str]) -> list[str]:
    """An exercise cell with its blanks filled by ``...`` (padded to keep the columns), when the blanks are what
    keeps it from parsing: the rest of the cell (a model class with one method left to write, the training loop
    around one blank line) is checked, not left out."""
    if not any("<" in line and _PLACEHOLDER.search(line) for line in lines):
        return lines
    try:
        ast.parse("\n".join(lines))
        return lines
    except (SyntaxError, ValueError):
        pass
    return [_PLACEHOLDER.sub(lambda m: "..." + " " * (len(m.group(0)) - 3), line) if "<" in line else line for line in lines]


def _masked(lines: list[str]) -> list[str]:
    out, continued = [], False
    for line in lines:
        if continued:  # ``!cmd \`` goes on over the next lines: they are the shell's too
            out.append("")
        else:
            masked = _mask(line)
            out.append(masked)
            if masked is line:
                continue
        continued = line.rstrip().endswith("\\")
    return out


def _mask(line: str) -> str:
    if m := _MAGIC_ASSIGN.match(line):
        return f"{m.group(1)}{m.group(2)} = None"
    if m := _MAGIC_LINE.match(line):
        return m.group(1) + "pass"
    return line
