"""`%load_ext torchdoctor` in IPython's own shell: `%%torchdoctor` watches a cell, `%torchdoctor on|off` every cell.

The cells run in a real ``InteractiveShell`` in a subprocess (IPython sets up
global state: display hooks, builtins), one cell at a time through
``run_cell`` as a notebook would; each cell's printed output comes back.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("IPython")
pytestmark = pytest.mark.slow

DRIVER = """
import json, sys
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
shell = InteractiveShell.instance(colors="NoColor")
out = []
for cell in json.load(open(sys.argv[1])):
    with capture_output() as cap:
        result = shell.run_cell(cell, store_history=True)
    out.append({"stdout": cap.stdout, "stderr": cap.stderr, "ok": result.success,
                "result": repr(result.result) if result.result is not None else None})
json.dump(out, open(sys.argv[2], "w"))
"""

SETUP = """import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = [(torch.randn(8, 8), torch.randint(0, 2, (8,))) for _ in range(6)]
def epoch(zero=True):
    for x, y in data:
        if zero:
            opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
"""

EVAL_IN_TRAIN_MODE = """%%torchdoctor --no-env
for _ in range(2):
    epoch()
    with torch.no_grad():
        scores = [model(x) for x, _ in data]
len(scores)
"""

NEVER_ZEROED = """for _ in range(2):
    epoch(zero=False)
"""

DEVICE_ERROR = """%%torchdoctor --no-env
meta_model = nn.Linear(8, 2).to("meta")
meta_model(torch.randn(4, 8))
"""


@pytest.fixture(scope="module")
def cells(tmp_path_factory) -> list[dict]:
    tmp = tmp_path_factory.mktemp("magic")
    page = tmp / "cell.html"
    script = [
        "%load_ext torchdoctor",             # 1
        SETUP,                                # 2
        EVAL_IN_TRAIN_MODE,                   # 3
        NEVER_ZEROED,                         # 4: not watched yet
        "%torchdoctor on --no-env",           # 5
        NEVER_ZEROED,                         # 6: watched
        "x = 1",                              # 7: watched, nothing to say
        "%torchdoctor off",                   # 8
        NEVER_ZEROED,                         # 9: not watched
        DEVICE_ERROR,                         # 10
        f"%%torchdoctor --no-env --html {page}\nepoch()\n",  # 11
        "%torchdoctor sideways",              # 12
    ]
    (tmp / "cells.json").write_text(json.dumps(script))
    (tmp / "driver.py").write_text(DRIVER)
    done = subprocess.run([sys.executable, str(tmp / "driver.py"), str(tmp / "cells.json"), str(tmp / "out.json")],
                          capture_output=True, text=True, timeout=600, cwd=tmp)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads((tmp / "out.json").read_text())
    for i, cell in enumerate(out, 1):
        cell["n"] = i
    out.append({"html": page.read_text() if page.exists() else None})
    return out


def test_cell_magic_prints_the_report_under_the_cell_naming_its_line(cells):
    cell = cells[2]
    assert cell["ok"] and cell["result"] == "6"  # the cell's last value is still its output
    assert "torchdoctor: watched 12 optimizer steps" in cell["stdout"]
    line = EVAL_IN_TRAIN_MODE.splitlines().index("        scores = [model(x) for x, _ in data]") + 1  # the cell's own numbering
    assert re.search(rf"In\[3\]:{line}:\d+: TD402 \[error\]", cell["stdout"]), cell["stdout"]


def test_cells_are_not_watched_until_switched_on_and_not_after_off(cells):
    for n in (4, 9):
        assert cells[n - 1]["ok"] and "torchdoctor" not in cells[n - 1]["stdout"]
    assert "watching every cell" in cells[4]["stdout"] and "no longer watching" in cells[7]["stdout"]


def test_switched_on_a_training_cell_gets_its_report_and_a_quiet_cell_none(cells):
    assert re.search(r"In\[6\]:\d+:\d+: TD404 \[error\]|TD404 \[error\]", cells[5]["stdout"]), cells[5]["stdout"]
    assert cells[6]["ok"] and cells[6]["stdout"] == ""


def test_a_device_error_is_explained_before_a_traceback_without_torchdoctors_frames(cells):
    cell = cells[9]
    assert not cell["ok"]
    text = cell["stdout"] + cell["stderr"]
    assert "TD201" in text or "TD302" in text or "TD303" in text
    report = min(text.index(c) for c in ("TD201", "TD302", "TD303") if c in text)
    trace = text.index("RuntimeError")
    assert report < trace
    assert "torchdoctor/runtime" not in text[report:].split("RuntimeError", 1)[0].split("Traceback", 1)[-1]


def test_html_option_writes_the_page(cells):
    assert "HTML report written" in cells[10]["stdout"]
    assert cells[-1]["html"] and 'id="step-chart"' in cells[-1]["html"]


def test_bad_arguments_say_how_to_call_it(cells):
    assert "unexpected 'sideways'" in cells[11]["stderr"] and "%torchdoctor on|off" in cells[11]["stderr"]
