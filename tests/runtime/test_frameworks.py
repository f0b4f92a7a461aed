"""Under Lightning and Accelerate: correct loops stay quiet, a kept loss is reported at the user's line.

These frameworks are optional (the `dev` extra); the tests run where they are
installed. Each script trains a correct loop first and a buggy one after, so
a false alarm on the correct loop would show as a second finding or a wrong
line. A subprocess per script keeps the frameworks' global set-up (logging,
warnings filters) out of the test process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
SCRIPTS = Path(__file__).parent / "scripts"
pytestmark = pytest.mark.slow


def _run(script: Path, tmp_path: Path) -> list[dict]:
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "torchdoctor", "run", "--no-env", "--output-format", "json",
                           "--output-file", str(report), str(script)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(report.read_text())["findings"]


def _keeper_line(script: Path) -> int:
    return next(i for i, line in enumerate(script.read_text().splitlines(), 1) if "# the keeper" in line)


@pytest.mark.parametrize("framework, script, keeper", [
    ("lightning", "lightning_loops.py", "`self.hist` of `KeepsLosses`"),
    ("accelerate", "accelerate_loops.py", "`keep`"),
])
def test_kept_loss_is_reported_at_the_users_line_and_the_correct_loop_is_quiet(framework, script, keeper, tmp_path):
    pytest.importorskip(framework)
    path = SCRIPTS / script
    found = _run(path, tmp_path)
    assert [(f["code"], f["path"], f["line"]) for f in found] == [("TD405", f"tests/runtime/scripts/{script}", _keeper_line(path))]
    assert keeper in found[0]["message"]
