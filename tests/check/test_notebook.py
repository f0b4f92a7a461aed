"""Notebooks: code cells joined, IPython syntax masked, findings and syntax errors placed by cell."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.check.fake_rules import fake_rules  # noqa: F401 - a fixture
from torchdoctor.check.notebook import read_notebook
from torchdoctor.check.runner import check_file


def nb(*cells: str | tuple[str, str], **meta) -> bytes:
    out = []
    for c in cells:
        kind, src = c if isinstance(c, tuple) else ("code", c)
        out.append({"cell_type": kind, "metadata": {}, "source": src.splitlines(keepends=True)})
    return json.dumps({"cells": out, "metadata": meta, "nbformat": 4, "nbformat_minor": 5}).encode()


def test_cells_joined_with_line_map() -> None:
    book = read_notebook(nb("import torch\nx = 1", ("markdown", "# title"), "y = 2\nz = 3\n"))
    assert book.text == "import torch\nx = 1\ny = 2\nz = 3\n"
    assert book.lines == ((1, 1), (1, 2), (2, 1), (2, 2))


@pytest.mark.parametrize("line", ["%matplotlib inline", "!pip install timm", "    %time f()", "model?", "?model",
                                  "files = !ls", "t = %timeit -o f()"])
def test_magics_are_masked(line: str) -> None:
    book = read_notebook(nb(f"import torch\nif True:\n    pass\n{line}\nx = 1\n"))
    compile(book.text, "nb", "exec")
    assert book.text.splitlines()[4] == "x = 1"


def test_python_lines_starting_with_bang_stay() -> None:
    src = "x = (a\n     != b)\n"
    assert read_notebook(nb(src)).text == src


def test_cell_magics() -> None:
    book = read_notebook(nb("%%time\nimport torch\n", "%%bash\necho hi && ls\n", "x = 1\n"))
    compile(book.text, "nb", "exec")
    assert "import torch" in book.text and "echo" not in book.text
    assert book.where(book.text.splitlines().index("x = 1") + 1) == (3, 1)


def test_non_python_kernel_is_skipped() -> None:
    assert not read_notebook(nb("library(x)\n", kernelspec={"language": "R", "name": "ir"})).python


def test_nbformat3_worksheets() -> None:
    doc = {"worksheets": [{"cells": [{"cell_type": "code", "input": ["import torch\n"]}]}], "nbformat": 3}
    assert read_notebook(json.dumps(doc).encode()).text == "import torch\n"


def test_findings_and_syntax_errors_located_by_cell(fake_rules, tmp_path: Path) -> None:
    p = tmp_path / "t.ipynb"
    p.write_bytes(nb("import torch\n", ("markdown", "text"), "\n\nnet.cuda()\n"))
    f = check_file(str(p)).findings[0]
    assert (f.location.cell, f.location.line, f.location.column, f.location.display_path) == (2, 3, 1, f"{p}:cell 2")
    p.write_bytes(nb("import torch\n", "x = (\n"))
    assert "syntax error at cell 2, line 1" in check_file(str(p)).errors[0]


@pytest.mark.parametrize("data, needle", [
    (b"", "invalid JSON"), (b"{not json", "invalid JSON at line 1"), (b"[1, 2]", "not an object"),
    (b'{"cells": 3}', "no 'cells' list"), (b"\xff\xfe{", "not valid UTF-8"),
])
def test_bad_notebooks_are_per_file_errors(tmp_path: Path, data: bytes, needle: str) -> None:
    p = tmp_path / "bad.ipynb"
    p.write_bytes(data)
    [err] = check_file(str(p)).errors
    assert err.startswith(f"{p}: error: ") and needle in err
