"""The static checker never imports torch, and its start-up stays light (no multiprocessing, difflib)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

TRAIN = """import torch
from torch import nn
model = nn.Linear(2, 2).cuda()
for x, y in loader:
    loss = model(x).sum()
    loss.backward()
    opt.step()
state = torch.load("w.pt")
"""


def run_python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_checking_files_never_imports_torch(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    for i in range(60):  # enough files for the parallel path too
        (tmp_path / f"m{i}.py").write_text(TRAIN)
    proc = run_python("""
        import sys
        sys.modules["torch"] = None  # any `import torch` now raises ImportError
        import torchdoctor.check
        from torchdoctor.cli import main
        code = main(["check", "--isolated", ".", "--output-format", "json", "--output-file", "out.json"])
        assert "torch" not in [m.split(".")[0] for m in sys.modules if sys.modules[m] is not None], "torch imported"
        print("exit", code)
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "exit 1" in proc.stdout, proc.stdout + proc.stderr  # findings, and no crash
    assert "internal error" not in proc.stderr
    findings = json.loads((tmp_path / "out.json").read_text())
    assert {f["path"] for f in findings} >= {"train.py", "m0.py"}


def test_import_and_help_stay_light(tmp_path: Path) -> None:
    proc = run_python("""
        import sys
        import torchdoctor.check
        from torchdoctor.cli import main
        try:
            main(["check", "--help"])
        except SystemExit:
            pass
        heavy = {"torch", "multiprocessing", "concurrent", "difflib", "tomllib", "json", "numpy"}
        print(sorted(heavy & {m.split(".")[0] for m in sys.modules}))
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_starting_the_checker_compiles_no_regular_expression_of_its_own(tmp_path: Path) -> None:
    # Compiling the checker's ~60 patterns cost ~20 ms of every start (one small file in pre-commit); they are
    # compiled on first use instead (check/patterns.py), so importing every rule compiles none of them.
    proc = run_python("""
        import re, sys
        compiled = []
        real = re._compile
        def spy(pattern, flags):
            caller = sys._getframe(2).f_globals.get("__name__", "")
            if caller.startswith("torchdoctor.check") and pattern not in compiled:
                compiled.append(pattern)
            return real(pattern, flags)
        re._compile = spy
        import torchdoctor.check.output, torchdoctor.check.runner
        from torchdoctor.check.engine import load_rules
        from torchdoctor.check.patterns import lazy
        load_rules()
        before = list(compiled)
        assert lazy(r"b+").sub("b", "abbbc") == "abc"
        print(before, compiled)
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[] ['b+']"
