"""`torchdoctor run` refuses before the script starts what would fail only after it: report paths, the script itself."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pytest

from torchdoctor.cli import main

pytestmark = pytest.mark.slow


def run(*args: str, out: io.StringIO | None = None) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(out or io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["run", "--no-env", *args])
    return code, err.getvalue()


@pytest.fixture
def script(tmp_path: Path) -> Path:
    """A script that leaves a mark when it runs: a refused run must leave none."""
    path = tmp_path / "train.py"
    path.write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    return path


@pytest.mark.parametrize("option", ["--output-file", "--html"])
def test_report_path_in_a_missing_folder_is_refused_before_the_run(tmp_path: Path, script: Path, option: str) -> None:
    target = tmp_path / "no" / "report"
    code, err = run(option, str(target), str(script))
    assert code == 2 and f"{option} {target}: cannot write" in err and "does not exist" in err
    assert "nothing was run" in err and not (tmp_path / "ran").exists()


def test_read_only_or_folder_report_paths_are_refused(tmp_path: Path, script: Path) -> None:
    locked = tmp_path / "report.json"
    locked.write_text("{}")
    os.chmod(locked, 0o444)
    code, err = run("--output-format", "json", "-o", str(locked), str(script))
    assert code == 2 and "Permission denied" in err and not (tmp_path / "ran").exists()
    code, err = run("--html", str(tmp_path), str(script))
    assert code == 2 and "is a directory" in err and not (tmp_path / "ran").exists()


def test_writable_report_paths_let_the_script_run(tmp_path: Path, script: Path) -> None:
    code, err = run("-o", str(tmp_path / "report.txt"), "--html", str(tmp_path / "r.html"), str(script))
    assert code == 0, err
    assert (tmp_path / "ran").exists() and (tmp_path / "report.txt").exists() and (tmp_path / "r.html").exists()


def test_a_script_that_does_not_compile_shows_its_syntax_error_and_no_report(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("print('ok')\ndef broken(:\n    pass\n")
    out = io.StringIO()
    code, err = run(str(bad), out=out)
    assert code == 2 and "does not compile; nothing was run" in err
    assert 'line 2' in err and "SyntaxError" in err and "def broken(:" in err
    assert "All checks passed" not in err and out.getvalue() == ""  # its first line never ran


def test_a_folder_is_named_as_a_folder(tmp_path: Path) -> None:
    code, err = run(str(tmp_path))
    assert code == 2 and f"{tmp_path} is a folder, not a script" in err
    (tmp_path / "__main__.py").write_text("")
    code, err = run(str(tmp_path))
    assert code == 2 and f"torchdoctor run {tmp_path / '__main__.py'}" in err
