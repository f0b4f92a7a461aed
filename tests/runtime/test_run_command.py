"""`torchdoctor run`: an unmodified program, its argv and exit code, the report at exit in each format."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
pytestmark = pytest.mark.slow


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """In-process through the CLI entry point (a subprocess per test would import torch each time)."""
    import contextlib
    import io
    import os

    from torchdoctor.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["run", "--no-env", *args])
    finally:
        os.chdir(saved)
        sys.modules.pop("pkg.train", None)
        sys.modules.pop("pkg", None)
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def test_real_process_keeps_report_off_stdout(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("import sys\nprint('out')\nsys.exit(4)\n")
    done = subprocess.run([sys.executable, "-m", "torchdoctor", "run", "--no-env", str(script)],
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (4, "out\n") and "All checks passed." in done.stderr


def test_argv_name_and_exit_code_pass_through(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("import sys\nprint(__name__, sys.argv)\nsys.exit(int(sys.argv[2]))\n")
    done = run(str(script), "--flag", "3")
    assert done.returncode == 3
    assert done.stdout == f"__main__ ['{script}', '--flag', '3']\n"  # the report never mixes into stdout
    assert "All checks passed." in done.stderr


def test_pitfall_example_text_report():
    done = run("examples/pitfalls/grads_never_zeroed.py")
    assert done.returncode == 0
    assert "examples/pitfalls/grads_never_zeroed.py:13:5: TD404 [error]" in done.stderr


def test_device_error_is_explained_before_the_traceback_and_exit_code_is_1():
    done = run("examples/pitfalls/target_not_moved.py")
    assert done.returncode == 1
    report, trace = done.stderr.index("TD302"), done.stderr.index("Traceback")
    assert report < trace and "RuntimeError" in done.stderr


def test_json_to_file_and_html(tmp_path):
    out, page = tmp_path / "r.json", tmp_path / "r.html"
    done = run("--output-format", "json", "--output-file", str(out), "--html", str(page), "examples/pitfalls/eval_with_autograd.py")
    assert done.returncode == 0 and done.stderr == ""
    doc = json.loads(out.read_text())
    assert [f["code"] for f in doc["findings"]] == ["TD401"]
    assert doc["stats"]["steps"] == 16 and {"data", "forward", "backward", "optimizer"} <= set(doc["stats"]["share"])
    html = page.read_text()
    assert 'id="step-chart"' in html and len(re.findall(r'<g class="bar( warmup)?"', html)) == 16 and "TD401" in html
    assert 'id="rss-chart"' in html and "No device memory readings" in html  # on the CPU, the host's memory instead


def test_module_mode(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text("import sys\nprint(__name__, sys.argv[1:])\n")
    done = run("-m", "pkg.train", "a", "b", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == "__main__ ['a', 'b']\n"


def test_missing_script_is_a_usage_error():
    done = run("no/such/script.py")
    assert done.returncode == 2 and "no such script" in done.stderr


@pytest.mark.parametrize("fail_on, expected", [(None, 0), ("error", 0), ("warning", 1), ("info", 1)])
def test_fail_on_turns_a_finding_at_or_above_the_severity_into_exit_1(fail_on, expected):
    options = ["--fail-on", fail_on] if fail_on else []
    done = run(*options, "examples/pitfalls/eval_with_autograd.py")  # one TD401, a warning
    assert done.returncode == expected and "TD401" in done.stderr


CLEAN = """import torch
from torch import nn
model = nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    opt.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
"""


def test_fail_on_leaves_a_clean_run_at_0_and_the_programs_own_exit_code_wins(tmp_path):
    clean = tmp_path / "clean.py"
    clean.write_text(CLEAN)
    assert run("--fail-on", "info", str(clean)).returncode == 0
    script = tmp_path / "prog.py"
    script.write_text("import runpy, sys\nrunpy.run_path(sys.argv[1])\nsys.exit(3)\n")
    done = run("--fail-on", "info", str(script), str(ROOT / "examples/pitfalls/eval_with_autograd.py"))
    assert done.returncode == 3 and "TD401" in done.stderr
    assert run("--fail-on", "info", "examples/pitfalls/target_not_moved.py").returncode == 1  # it raises: Python's 1


def test_fail_on_is_checked_by_argparse():
    done = run("--fail-on", "fatal", "examples/pitfalls/grads_never_zeroed.py")
    assert done.returncode == 2 and "--fail-on" in done.stderr


BROKEN = """import torch
from torch import nn


def run():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    return model(torch.randn(2, 5))


try:
    run()
except RuntimeError as exc:
    raise ValueError("wrapped") from exc
"""


def _frames(text: str) -> list[str]:
    # the watch's Module.__call__ does _wrapped_call_impl's work itself: that torch frame is the one not shown
    return [line.strip() for line in text.splitlines() if line.strip().startswith("File ") and "_wrapped_call_impl" not in line]


def test_a_traceback_through_the_patches_shows_the_frames_python_shows(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text(BROKEN)
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    done = run(str(script))
    assert done.returncode == plain.returncode == 1
    trace = done.stderr[done.stderr.index("Traceback"):]
    assert "torchdoctor" not in trace and "runpy" not in trace
    assert _frames(trace) == _frames(plain.stderr) and trace.rstrip().endswith("ValueError: wrapped")
    assert "RuntimeError: mat1 and mat2 shapes cannot be multiplied" in trace


def test_a_file_that_shadows_a_module_torch_imports_is_named_not_an_internal_error(tmp_path):
    """``timeit.py`` beside the script comes first on the path (as for ``python script.py``), and torch imports
    ``timeit``: the watch cannot start. The run says why, names the file, exits 1, and reports nothing else."""
    (tmp_path / "timeit.py").write_text("import sys\nwhich = sys.argv[99]\n")
    script = tmp_path / "prog.py"
    script.write_text("import torch\nprint(torch.ones(2).sum())\n")
    done = subprocess.run([sys.executable, "-m", "torchdoctor", "run", "--no-env", str(script)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 1
    assert "the watch could not start: IndexError" in done.stderr
    assert f"{tmp_path / 'timeit.py'} shadows Python's own `timeit` module" in done.stderr
    assert "internal error" not in done.stderr and done.stdout == ""
