"""Notebooks: code cells joined, IPython syntax masked, findings and syntax errors placed by cell."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.check.fake_rules import fake_rules  # noqa: F401 - a fixture
from torchdoctor.check.notebook import read_notebook
from torchdoctor.check.runner import Mode, check_file


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


@pytest.mark.parametrize("line", ["%matplotlib inline", "!pip install timm", "    %time f()", "model?", "?model", "torch.nn.Module??",
                                  "torch.*Tensor?", "*int*?",
                                  "files = !ls", "t = %timeit -o f()", "pip install -r requirements.txt",
                                  "conda install -y tqdm"])
def test_magics_are_masked(line: str) -> None:
    book = read_notebook(nb(f"import torch\nif True:\n    pass\n{line}\nx = 1\n"))
    compile(book.text, "nb", "exec")
    assert book.text.splitlines()[4] == "x = 1"


def test_a_shell_command_continued_over_lines_is_masked_whole() -> None:
    """``out = !python demo.py \\`` and its ``--flag ... \\`` lines: all the shell's; a Python line continued
    with a backslash after it stays Python."""
    book = read_notebook(nb("import torch\nout = !python demo.py \\\n--model TPS --batch 8 \\\n--image_folder demo/\n"
                            "x = 1 + \\\n    2\n"))
    compile(book.text, "nb", "exec")
    assert book.text.splitlines() == ["import torch", "out = None", "", "", "x = 1 + \\", "    2"]


def test_a_variable_named_pip_stays_python() -> None:
    src = "pip = 3\npip -install\n"
    assert read_notebook(nb(src)).text == src


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


def test_a_syntax_errors_column_is_counted_in_its_cell_not_in_the_notebook_file(tmp_path: Path) -> None:
    """CPython reads an error's line from the file it is named after: the cells are not named after the notebook,
    whose line 1 here is ``{``."""
    p = tmp_path / "t.ipynb"
    p.write_text(json.dumps(json.loads(nb("total = (3 +\n")), indent=1))
    assert check_file(str(p)).errors == [f"{p}: error: syntax error at cell 1, line 1, column 9: '(' was never closed"
                                          " (the cell is left out; the other cells were checked)"]


# -- a code cell that does not parse: reported, left out, the other cells checked -------------------------

def test_a_cell_that_does_not_parse_is_reported_and_the_other_cells_are_checked(fake_rules, tmp_path: Path) -> None:
    p = tmp_path / "t.ipynb"
    book = nb("import torch\nnet.cuda()\n", ("markdown", "notes"), "total = (3 +\nbest.cuda()\n",
              "Epoch 3 | loss 0.25\n", "state = torch.load('w.pt')\n")
    p.write_text(json.dumps(json.loads(book), indent=1))  # (the file's line 1 is "{": no column is counted in it)
    result = check_file(str(p))
    assert [(f.code, f.location.cell, f.location.line) for f in result.findings] == [("TD102", 1, 2), ("TD502", 4, 1)]
    assert result.errors[0] == f"{p}: error: syntax error at cell 2, line 1, column 9: '(' was never closed " \
                               "(the cell is left out; the other cells were checked)"
    assert result.errors[1].startswith(f"{p}: error: syntax error at cell 3, line 1, column ") and len(result.errors) == 2
    p.write_bytes(nb("boom()\n", "width = (2\n"))  # no torch in it: the gate still keeps every rule away
    assert [e.split(", column")[0] for e in check_file(str(p)).errors] == [f"{p}: error: syntax error at cell 2, line 1"]


def test_the_names_a_cell_that_does_not_parse_binds() -> None:
    from torchdoctor.check.notebook import _bound_names

    lines = ["import torch as T", "from x import y", "a, (b, c) = f(k=1)", "if a <= b:", "    d += 1", "if x == 1: pass",
             "for i, j in pairs:", "with open(p) as fh:", "def step(model, lr=0.1):", "    inner = 1", "e: int = 2",
             "g = h = [1, 2]", "self.model = Net()", "table['key'] = 3", "call(arg=1)", "t = lambda q=1: q",
             "s = 'x=1'; r = 2", "print((n := 3))", "out = out.cpu())"]
    assert _bound_names(lines) == ["a", "b", "c", "d", "i", "j", "fh", "step", "e", "g", "h", "table", "t", "s", "r",
                                   "n", "out"]


def test_names_a_left_out_cell_binds_are_unknown_and_whole_program_codes_wait(tmp_path: Path) -> None:
    """The left-out cell checks for a GPU and moves ``out`` to the host before the last cell reads it: neither
    TD101 (no availability check in the file) nor TD501 (``.numpy()`` of a GPU tensor) may be reported; the
    last cell's own ``torch.load`` still is."""
    p = tmp_path / "t.ipynb"
    p.write_bytes(nb("import torch\nimport torch.nn as nn\nnet = nn.Linear(4, 2).to('cuda')\n"
                     "out = net(torch.ones(1, 4).to('cuda'))\n",
                     "device = 'cuda' if torch.cuda.is_available() else 'cpu'\nout = out.detach().cpu()\n"
                     "print('epoch', 1))\n",
                     "print(out.numpy())\nckpt = torch.load('last.pt', map_location='cpu')\n"))
    result = check_file(str(p))
    assert [(f.code, f.location.cell, f.location.line) for f in result.findings] == [("TD503", 3, 2)]
    assert len(result.errors) == 1 and "syntax error at cell 2, line 3" in result.errors[0]


EVAL_CELLS = ("import torch\nfrom torch import nn\nnet = nn.Sequential(nn.Linear(4, 2), nn.Dropout(0.2))\n"
              "test_loader = [(torch.randn(2, 4), torch.zeros(2)) for _ in range(3)]\n",
              "def evaluate(model, loader):\n    model.eval()\n    outs = []\n    for x, y in loader:\n"
              "        outs.append(model(x))\n    return outs\n")


@pytest.mark.parametrize(("left_out", "reported"), [
    ("preds = evaluate(net, test_loader\n", [("TD401", 2, 5)]),  # a blank left for the student: it changes no mode
    ("with torch.no_grad():\n    preds = evaluate(net, test_loader\n", []),  # its text turns autograd off: wait
])
def test_an_evaluation_forward_is_judged_unless_the_left_out_cell_speaks_of_grad_mode(
        tmp_path: Path, left_out: str, reported: list) -> None:
    """Exercise notebooks leave a cell unfinished: TD401 waits for it only when its text names grad mode or a mode
    call (the cell may hold the ``no_grad`` that makes the forward fine), not whenever a cell is left out."""
    p = tmp_path / "t.ipynb"
    p.write_bytes(nb(*EVAL_CELLS, left_out))
    result = check_file(str(p))
    assert [(f.code, f.location.cell, f.location.line) for f in result.findings if f.code == "TD401"] == reported
    assert len(result.errors) == 1 and "syntax error at cell 3" in result.errors[0]


def test_a_left_out_cells_findings_keep_their_cell_in_json_sarif_and_github(fake_rules, tmp_path: Path) -> None:
    from torchdoctor.report import render

    p = tmp_path / "t.ipynb"
    p.write_bytes(bad_cell_notebook())
    [f] = [f for f in check_file(str(p)).findings if f.location.cell == 3]
    lines = p.read_text().splitlines()
    assert (f.code, f.location.line, f.location.column) == ("TD102", 2, 1) and "net.cuda()" in lines[f.location.file_line - 1]
    [row] = json.loads(render([f], "json"))
    assert (row["path"], row["cell"], row["line"], row["column"]) == (str(p), 3, 2, 1)
    result = json.loads(render([f], "sarif"))["runs"][0]["results"][0]
    assert result["locations"][0]["physicalLocation"]["region"] == {"startLine": f.location.file_line}
    assert render([f], "github").startswith(f"::notice file={p},line={f.location.file_line},title=TD102::cell 3, line 2,")


def test_an_exercise_cells_blanks_are_filled_so_the_rest_of_it_is_checked(tmp_path: Path) -> None:
    """A course leaves ``<YOUR CODE HERE>`` blanks for the learner: the blanks are read as ``...`` (columns kept),
    so the loop around them is checked (its ``.cuda()``) instead of the whole cell being left out. A cell that does
    not parse for another reason is still left out and reported."""
    book = read_notebook(nb("x = <YOUR CODE HERE>\ny = f(<your answer>, 2)\n"))
    assert book.text == "x = ...             \ny = f(...          , 2)\n"
    assert read_notebook(nb("if a <b> c:\n    pass\n")).text == "if a <b> c:\n    pass\n"  # (Python as it is)
    p = tmp_path / "t.ipynb"
    p.write_bytes(nb("import torch\nmodel = torch.nn.Linear(4, 2).cuda()\nloader = [(torch.ones(2, 4), torch.ones(2))]\n",
                     "for x, y in loader:\n    <YOUR CODE HERE>\n    loss = <YOUR LOSS>\n    print(y.cuda())\n",
                     "Epoch 3 | loss 0.25\n"))
    result = check_file(str(p))
    assert ("TD102", 2, 4) in [(f.code, f.location.cell, f.location.line) for f in result.findings]
    assert len(result.errors) == 1 and "syntax error at cell 3" in result.errors[0]


def bad_cell_notebook() -> bytes:
    """As Jupyter writes it, with code cell 2 pasted from a log (and a ``.cuda()`` inside it): outputs, metadata."""
    doc = {"cells": [
        {"cell_type": "code", "execution_count": 1, "metadata": {"tags": ["setup"]},
         "outputs": [{"name": "stdout", "output_type": "stream", "text": ["ready\n"]}],
         "source": ["import torch\n", "net.cuda()"]},
        {"cell_type": "code", "execution_count": 2, "metadata": {"collapsed": True},
         "outputs": [{"ename": "SyntaxError", "evalue": "invalid syntax", "output_type": "error", "traceback": []}],
         "source": ["iters: 100 | loss: 0.47\n", "model.cuda()\n", "speed: 0.21s/iter"]},
        {"cell_type": "code", "execution_count": 3, "metadata": {}, "outputs": [],
         "source": ["x = 1\n", "net.cuda()\n"]},
    ], "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4, "nbformat_minor": 5}
    return (json.dumps(doc, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


def test_fix_leaves_a_cell_that_does_not_parse_byte_for_byte_and_fixes_the_others(fake_rules, tmp_path: Path) -> None:
    p = tmp_path / "t.ipynb"
    before = bad_cell_notebook()
    p.write_bytes(before)
    diff = check_file(str(p), mode=Mode(diff=True))
    assert diff.fixed == 2 and ":cell 2" not in diff.diff and p.read_bytes() == before
    result = check_file(str(p), mode=Mode(fix=True))
    assert result.fixed == 2 and result.findings == [] and len(result.errors) == 1
    after = p.read_bytes()
    assert [(x.strip(), y.strip()) for x, y in changed_lines(before, after)] == [
        (b'"net.cuda()"', b'"net.to(\\"cuda\\")"'), (b'"net.cuda()\\n"', b'"net.to(\\"cuda\\")\\n"')]
    old, new = json.loads(before)["cells"], json.loads(after)["cells"]
    assert old[1] == new[1] and [{k: v for k, v in c.items() if k != "source"} for c in old] == \
        [{k: v for k, v in c.items() if k != "source"} for c in new]


def test_a_cell_that_does_not_parse_exits_2_even_with_exit_zero(fake_rules, tmp_path: Path, monkeypatch, capsys) -> None:
    from torchdoctor.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NO_COLOR", "1")
    (tmp_path / "t.ipynb").write_bytes(bad_cell_notebook())
    (tmp_path / "broken.py").write_text("import torch\ndef f(:\n")
    assert main(["check", "--isolated", "--exit-zero", "t.ipynb", "broken.py"]) == 2
    out, err = capsys.readouterr()
    assert "t.ipynb:cell 1:2:1: TD102" in out and "t.ipynb:cell 3:2:1: TD102" in out and ":cell 2:" not in out
    [py, book] = err.splitlines()  # each file as before: one line that names the line (and the cell) that fails
    assert py.startswith("broken.py: error: syntax error at line 2, column ")
    assert book.startswith("t.ipynb: error: syntax error at cell 2, line ")
    assert book.endswith("(the cell is left out; the other cells were checked)")  # (not the notebook: the cell)
    assert "1 file could not be checked; 1 notebook was checked without the cells that do not parse" in out


def test_a_line_named_in_a_message_is_given_as_its_cell_and_line(tmp_path: Path) -> None:
    """"the loop at line 9" of the joined cells would point nowhere: it says the loop's cell and line in it."""
    p = tmp_path / "t.ipynb"
    p.write_bytes(nb('import torch\ndevice = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n',
                     ("markdown", "# Evaluate"),
                     "def evaluate(model, loader, criterion):\n    total = 0\n    with torch.no_grad():\n"
                     "        for x, y in loader:\n            loss = criterion(model(x.to(device)), y.to(device))\n"
                     "            total += loss.item()\n    return total\n"))
    found = [f for f in check_file(str(p)).findings if f.code == "TD603"]
    assert [(f.location.cell, f.location.line) for f in found] == [(2, 6)]
    assert "the loop at cell 2, line 4" in found[0].message


_DDP_BRANCH = ("import torch\nimport torch.nn as nn\n",
               "def build(distributed, rank):\n    model = nn.Linear(4, 2).to(torch.device('cuda', rank))\n"
               "    if distributed:\n        model = nn.parallel.DistributedDataParallel(model, device_ids=[rank])\n"
               "    torch.save(model.state_dict(), 'model.pth')\n    return model\n")


@pytest.mark.parametrize("launch, written", [
    ("net = build(distributed=False, rank=0)\n", []),
    ("import torch.multiprocessing as mp\nmp.spawn(build, args=(True,), nprocs=2)\n", [(2, 5)]),
])
def test_a_notebooks_files_are_written_by_one_process_unless_it_launches_more(tmp_path: Path, launch: str,
                                                                           written: list) -> None:
    """A demo notebook keeping a DDP branch it never takes runs in one kernel, one process: its writes race with
    nothing. One that spawns processes runs the spawned function on each (its save is every rank's), while the
    kernel's own cells still run once."""
    p = tmp_path / "demo.ipynb"
    p.write_bytes(nb(*_DDP_BRANCH, "base = nn.Linear(4, 2)\ntorch.save(base.state_dict(), 'base.pth')\n"
                     "with open('gt.json', 'w') as fh:\n    fh.write('{}')\n", launch))
    found = [f for f in check_file(str(p)).findings if f.code == "TD703"]
    assert [(f.location.cell, f.location.line) for f in found] == written


@pytest.mark.parametrize("data, needle", [
    (b"", "invalid JSON"), (b"{not json", "invalid JSON at line 1"), (b"[1, 2]", "not an object"),
    (b'{"cells": 3}', "no 'cells' list"), (b"\xff\xfe{", "not valid UTF-8"),
])
def test_bad_notebooks_are_per_file_errors(tmp_path: Path, data: bytes, needle: str) -> None:
    p = tmp_path / "bad.ipynb"
    p.write_bytes(data)
    [err] = check_file(str(p)).errors
    assert err.startswith(f"{p}: error: ") and needle in err


# -- positions in every format, and fixes that touch nothing but the cells' sources -----------------------

def real_notebook(*, indent: int = 1, ensure_ascii: bool = False, newline: str = "\n") -> bytes:
    """A notebook as Jupyter writes it: outputs, metadata, execution counts, one string per source line."""
    doc = {"cells": [
        {"cell_type": "markdown", "metadata": {}, "source": ["# Training ü\n", "notes"]},
        {"cell_type": "code", "execution_count": 3, "metadata": {"scrolled": True, "tags": ["setup"]},
         "outputs": [{"name": "stdout", "output_type": "stream", "text": ["loaded é\n"]},
                     {"data": {"image/png": "iVBORw0KGgo" * 40}, "metadata": {}, "output_type": "display_data"}],
         "source": ["%matplotlib inline\n", "import torch\n", "state = torch.load(\"m.pt\")\n", "net.cuda()"]},
        {"cell_type": "code", "execution_count": 4, "metadata": {}, "outputs": [], "source": "x = 1\nnet.cuda()\n"},
    ], "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4, "nbformat_minor": 5}
    text = json.dumps(doc, indent=indent, ensure_ascii=ensure_ascii) + "\n"
    return text.replace("\n", newline).encode("utf-8")


def changed_lines(before: bytes, after: bytes) -> list[tuple[bytes, bytes]]:
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    assert len(a) == len(b)  # nothing added or removed: only source lines rewritten in place
    return [(x, y) for x, y in zip(a, b) if x != y]


@pytest.mark.parametrize("style", [dict(), dict(indent=2, ensure_ascii=True), dict(newline="\r\n")])
def test_fix_rewrites_only_the_cells_sources_byte_for_byte(fake_rules, tmp_path: Path, style) -> None:
    p = tmp_path / "train.ipynb"
    before = real_notebook(**style)
    p.write_bytes(before)
    result = check_file(str(p), mode=Mode(fix=True))
    assert result.fixed == 3 and result.findings == [] and not result.errors
    after = p.read_bytes()
    changes = changed_lines(before, after)
    assert [(x.strip(), y.strip()) for x, y in changes] == [
        (b'"state = torch.load(\\"m.pt\\")\\n",', b'"state = torch.load(\\"m.pt\\", map_location=\\"cpu\\")\\n",'),
        (b'"net.cuda()"', b'"net.to(\\"cuda\\")"'),
        (b'"source": "x = 1\\nnet.cuda()\\n"', b'"source": "x = 1\\nnet.to(\\"cuda\\")\\n"'),
    ]
    doc_before, doc_after = json.loads(before), json.loads(after)
    for old, new in zip(doc_before["cells"], doc_after["cells"]):
        assert {k: v for k, v in old.items() if k != "source"} == {k: v for k, v in new.items() if k != "source"}
    assert check_file(str(p), mode=Mode(fix=True)).fixed == 0  # nothing left to fix


def test_fix_keeps_a_byte_order_mark_and_leaves_an_unfixable_notebook_alone(fake_rules, tmp_path: Path) -> None:
    p = tmp_path / "bom.ipynb"
    p.write_bytes(b"\xef\xbb\xbf" + real_notebook())
    check_file(str(p), mode=Mode(fix=True))
    assert p.read_bytes().startswith(b"\xef\xbb\xbf") and b'net.to(\\"cuda\\")' in p.read_bytes()
    q = tmp_path / "quiet.ipynb"
    q.write_bytes(nb("import torch\nx = 1\n"))
    data = q.read_bytes()
    assert check_file(str(q), mode=Mode(fix=True)).fixed == 0 and q.read_bytes() == data


def test_diff_shows_each_cells_change_and_writes_nothing(fake_rules, tmp_path: Path) -> None:
    p = tmp_path / "train.ipynb"
    p.write_bytes(real_notebook())
    result = check_file(str(p), mode=Mode(diff=True))
    assert p.read_bytes() == real_notebook() and result.fixed == 3
    assert f"--- a/{p}:cell 1\n+++ b/{p}:cell 1\n" in result.diff and f"--- a/{p}:cell 2\n" in result.diff
    assert '-net.cuda()\n\\ No newline at end of file\n+state = torch.load("m.pt", map_location="cpu")\n' in result.diff
    assert '+net.to("cuda")\n\\ No newline at end of file\n' in result.diff and " x = 1\n-net.cuda()\n" in result.diff


def test_findings_know_the_notebook_files_line_and_their_edits_are_in_cell_positions(fake_rules, tmp_path: Path) -> None:
    p = tmp_path / "train.ipynb"
    p.write_bytes(real_notebook())
    found = {(f.code, f.location.cell): f for f in check_file(str(p)).findings}
    lines = p.read_text().splitlines()
    f = found[("TD502", 1)]
    assert (f.location.line, f.location.column) == (3, 9) and "torch.load" in lines[f.location.file_line - 1]
    assert f.fixable and f.edits[0].line == 3  # inside the cell, as the location
    g = found[("TD102", 2)]
    assert g.location.line == 2 and '"source": "x = 1\\nnet.cuda()\\n"' in lines[g.location.file_line - 1]


def test_json_sarif_and_github_point_at_the_notebook_file_and_name_the_cell(fake_rules, tmp_path: Path) -> None:
    from torchdoctor.report import render

    p = tmp_path / "train.ipynb"
    p.write_bytes(real_notebook())
    findings = check_file(str(p)).findings
    f = next(f for f in findings if f.code == "TD502")
    [row] = [r for r in json.loads(render([f], "json"))]
    assert (row["path"], row["cell"], row["line"], row["column"]) == (str(p), 1, 3, 9)
    result = json.loads(render([f], "sarif"))["runs"][0]["results"][0]
    physical = result["locations"][0]["physicalLocation"]
    assert physical["artifactLocation"]["uri"] == str(p) and physical["region"] == {"startLine": f.location.file_line}
    assert result["message"]["text"].startswith("cell 1, line 3, column 9: ")
    annotation = render([f], "github")
    assert annotation.startswith(f"::warning file={p},line={f.location.file_line},title=TD502::cell 1, line 3, column 9: ")
    assert "col=" not in annotation  # a column of the cell is not a column of the JSON line


def test_text_output_keeps_the_cell_form(fake_rules, tmp_path: Path) -> None:
    from torchdoctor.report import render

    p = tmp_path / "train.ipynb"
    p.write_bytes(real_notebook())
    assert f"{p}:cell 1:3:9: TD502 [warning]" in render(check_file(str(p)).findings, "text")


def test_fix_from_standard_input_prints_the_fixed_notebook(fake_rules) -> None:
    data = real_notebook()
    result = check_file("nb.ipynb", mode=Mode(fix=True), data=data, stdin=True)
    assert result.fixed_source is not None and json.loads(result.fixed_source)["cells"][2]["source"] == 'x = 1\nnet.to("cuda")\n'


# Round 58's notebook shapes: what a cell displays, what a later cell makes again, a model kept on the CPU.
_SETUP = ("import torch\nfrom torch import nn\nfrom torch.utils.data import DataLoader, TensorDataset\n"
          "device = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
          "ds = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))\n")


def _codes(tmp_path: Path, *cells: str) -> list[tuple[int | None, int, str]]:
    p = tmp_path / "t.ipynb"
    p.write_bytes(nb(*cells))
    result = check_file(str(p))
    assert not result.errors, result.errors
    return sorted((f.location.cell, f.location.line, f.code) for f in result.findings)


def test_a_cells_last_expression_is_displayed_not_dropped_or_handed_on(tmp_path: Path) -> None:
    """``y_preds.cpu()`` on a cell's last line shows the copy (no TD301); ``train_dl, test_dl`` shows the loaders
    (they feed nothing there: no TD304); ``conv2d`` shows the module (it is not moved there: no TD501 after it). The
    same move inside a cell, not its last statement, is dropped."""
    found = _codes(tmp_path, _SETUP,
                   "train_dl = DataLoader(ds, batch_size=1, num_workers=1)\ntest_dl = DataLoader(ds, batch_size=1)\n"
                   "train_dl, test_dl\n",
                   "img, label = next(iter(train_dl))\nconv2d = nn.Conv2d(3, 8, 3)\nconv2d\n",
                   "fmap = conv2d(torch.rand(1, 3, 8, 8))\nprint(fmap.detach().numpy().shape)\n",
                   "model = nn.Linear(4, 2).to(device)\nwith torch.inference_mode():\n    y_preds = model(torch.rand(3, 4).to(device))\n",
                   "y_preds.cpu()\n",
                   "y_preds.cpu()\nprint(y_preds.shape)\n")
    assert found == [(7, 1, "TD301")]


def test_a_loader_made_again_in_a_later_cell_is_the_one_handed_on(tmp_path: Path) -> None:
    (tmp_path / "trainer.py").write_text(
        "import torch\n\nclass Trainer:\n    def __init__(self, model, opt):\n"
        "        self.device = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
        "        self.model, self.opt = model.to(self.device), opt\n\n"
        "    def fit(self, loader):\n        for x, y in loader:\n            x, y = x.to(self.device), y.to(self.device)\n"
        "            loss = torch.nn.functional.cross_entropy(self.model(x), y)\n"
        "            self.opt.zero_grad()\n            loss.backward()\n            self.opt.step()\n")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    found = _codes(tmp_path, _SETUP + "from trainer import Trainer\n",
                   "train_loader = DataLoader(ds, batch_size=16, shuffle=True)\n",
                   "train_loader = DataLoader(ds, batch_size=16, shuffle=True, pin_memory=True, num_workers=2)\n",
                   "model = nn.Linear(4, 2)\nt = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1))\n"
                   "t.fit(train_loader)\n",
                   "slow = DataLoader(ds, batch_size=16)\nt.fit(slow)\n")
    assert found == [(5, 1, "TD304")]  # the pinned loader is the one the trainer iterates; the last one is not pinned


def test_a_model_kept_on_the_cpu_and_its_baseline_loop_read_nothing_from_a_gpu(tmp_path: Path) -> None:
    """``cpu_model.to("cpu")`` fed host batches: not "not moved to cpu" (TD302); its loop reads a host tensor
    (TD603). The GPU twin's loop reads every step."""
    found = _codes(tmp_path, _SETUP + "loader = DataLoader(ds, batch_size=8, pin_memory=True, num_workers=2)\n",
                   "cpu_model = nn.Linear(4, 2)\ncpu_model.to('cpu')\nopt = torch.optim.SGD(cpu_model.parameters(), lr=0.1)\n"
                   "for X, y in loader:\n    loss = nn.functional.cross_entropy(cpu_model(X), y)\n"
                   "    opt.zero_grad()\n    loss.backward()\n    opt.step()\n",
                   "gpu_model = nn.Linear(4, 2).to(device)\nopt = torch.optim.SGD(gpu_model.parameters(), lr=0.1)\n"
                   "for X, y in loader:\n    X, y = X.to(device), y.to(device)\n"
                   "    loss = nn.functional.cross_entropy(gpu_model(X), y)\n"
                   "    opt.zero_grad()\n    loss.backward()\n    opt.step()\n    print(loss.item())\n")
    assert found == [(3, 9, "TD603")]


def test_losses_gathered_into_a_new_tensor_and_a_model_frozen_by_a_helper(tmp_path: Path) -> None:
    """``torch.tensor(loss_values).numpy()`` is a fresh host tensor with no graph (TD405 still says the list keeps
    the graphs); a model that ``freeze_model(backbone)`` froze records nothing in an evaluation forward."""
    found = _codes(tmp_path, _SETUP + "loader = DataLoader(ds, batch_size=8, pin_memory=True, num_workers=2)\n",
                   "model = nn.Linear(4, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.01)\n"
                   "X, y = torch.rand(10, 4), torch.rand(10, 1)\nloss_values = []\nfor epoch in range(100):\n"
                   "    loss = nn.functional.l1_loss(model(X), y)\n    opt.zero_grad()\n    loss.backward()\n"
                   "    opt.step()\n    if epoch % 10 == 0:\n        loss_values.append(loss)\n",
                   "curve = torch.tensor(loss_values).numpy()\n",
                   "def freeze_model(m):\n    for p in m.parameters():\n        p.requires_grad = False\n",
                   "def extract_features(m, batches):\n    feats = []\n    for x, _ in batches:\n        m.eval()\n"
                   "        feats.append(m(x.to(device)).detach().cpu())\n    return torch.cat(feats)\n",
                   "backbone = nn.Sequential(nn.Linear(4, 8), nn.ReLU()).to(device)\nfreeze_model(backbone)\n"
                   "features = extract_features(backbone, loader)\n")
    assert found == [(2, 11, "TD405")]


def test_a_cell_after_one_that_raises_is_still_checked_but_code_after_a_raise_in_a_block_is_not(tmp_path: Path) -> None:
    """A course notebook's exercise cell ends with ``raise NotImplementedError`` at its top: the next cells still run
    (each is run on its own), so their findings count. Inside a function, statements after ``raise`` never run."""
    found = _codes(tmp_path, _SETUP,
                   "def exercise():\n    pass\nraise NotImplementedError('fill in the exercise')\n",
                   "with torch.cuda.amp.autocast():\n    y = torch.ones(2, device=device) * 2\n",
                   "def broken(x):\n    raise NotImplementedError\n    with torch.cuda.amp.autocast():\n"
                   "        return x * 2\n")
    assert found == [(3, 1, "TD601")]
