"""The top-level command line: sub-command dispatch and ruff's exit codes."""

from __future__ import annotations

import subprocess
import sys

from torchdoctor.cli import main


def test_no_command_and_unknown_command_are_usage_errors(capsys):
    assert main([]) == 2
    assert main(["bogus"]) == 2
    assert "invalid choice: 'bogus'" in capsys.readouterr().err


def test_version_exits_0(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("torchdoctor ")


def test_python_dash_m_runs_the_same_cli():
    out = subprocess.run([sys.executable, "-m", "torchdoctor", "rules", "TD404"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0
    assert "gradients-never-zeroed" in out.stdout and "## Why is this bad?" in out.stdout


def test_checking_imports_no_part_but_the_checker(tmp_path):
    script = tmp_path / "t.py"
    script.write_text("import torch\nx = torch.ones(3)\n")
    code = (
        "import sys; from torchdoctor.cli import main; rc = main(['check', %r]);"
        "print(rc, sorted(m for m in sys.modules if m.startswith(('torchdoctor.runtime', 'torchdoctor.env', 'torchdoctor.train', 'torch.'))) or 'none')"
    ) % str(script)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "0 none"
