"""``torchdoctor check`` end to end (in-process, with throwaway rules): exit codes, formats, stdin."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from tests.check.fake_rules import fake_rules  # noqa: F401 - a fixture
from torchdoctor.cli import main

BUGGY = 'import torch\nnet = Net()\nnet.cuda()\nx = torch.load("w.pt")\n'
CLEAN = "import torch\nx = torch.zeros(3)\n"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NO_COLOR", "1")
    (tmp_path / "clean.py").write_text(CLEAN)
    return tmp_path


def run(*argv: str) -> int:
    return main(["check", "--isolated", *argv])


def test_clean_exits_0(fake_rules, project: Path, capsys) -> None:
    assert run("clean.py") == 0
    assert capsys.readouterr().out.strip() == "All checks passed."


def test_findings_exit_1_with_text_report(fake_rules, project: Path, capsys) -> None:
    (project / "train.py").write_text(BUGGY)
    assert run(".") == 1
    out = capsys.readouterr().out
    assert "train.py:3:1: TD102 [info] `net.cuda()` uses .cuda()" in out
    assert "    fix: use .to(device) (fixable with --fix)" in out
    assert out.rstrip().endswith("2 fixable with the `--fix` option.")


def test_exit_zero_hides_findings_but_not_unreadable_files(fake_rules, project: Path, capsys) -> None:
    (project / "train.py").write_text(BUGGY)
    assert run("--exit-zero", "train.py") == 0
    (project / "broken.py").write_text("def f(:\n")
    assert run("--exit-zero", ".") == 2
    captured = capsys.readouterr()
    assert "broken.py: error: syntax error at line 1" in captured.err
    assert "1 file could not be checked" in captured.out


def test_unreadable_file_exits_2_even_with_findings(fake_rules, project: Path, capsys) -> None:
    (project / "train.py").write_text(BUGGY)
    (project / "broken.py").write_text("x = (\n")
    assert run(".") == 2
    captured = capsys.readouterr()
    assert "TD102" in captured.out and "TD502" in captured.out  # other files were still checked
    assert "broken.py: error: syntax error" in captured.err


def test_missing_path_exits_2(fake_rules, project: Path, capsys) -> None:
    assert run("nope.py", "clean.py") == 2
    assert "nope.py: error: no such file or directory" in capsys.readouterr().err


def test_output_file(fake_rules, project: Path, capsys) -> None:
    (project / "train.py").write_text(BUGGY)
    assert run("train.py", "--output-format", "json", "--output-file", "out.json") == 1
    assert capsys.readouterr().out == ""
    assert len(json.loads((project / "out.json").read_text())) == 2


def test_json_keys_exactly(fake_rules, project: Path, capsys) -> None:
    (project / "train.py").write_text(BUGGY)
    run("train.py", "--output-format", "json")
    data = json.loads(capsys.readouterr().out)
    assert [set(d) for d in data] == [
        {"code", "severity", "message", "path", "cell", "line", "column", "end_line", "end_column", "fix", "fixable",
         "unsafe_fix", "related"}
    ] * 2
    assert data[0] | {"message": None} == {
        "code": "TD102", "severity": "info", "message": None, "path": "train.py", "cell": None, "line": 3, "column": 1,
        "end_line": 3, "end_column": 11, "fix": "use .to(device)", "fixable": True, "unsafe_fix": False, "related": [],
    }


def test_sarif_structure(fake_rules, project: Path, capsys) -> None:
    (project / "train.py").write_text(BUGGY)
    run("train.py", "--output-format", "sarif")
    log = json.loads(capsys.readouterr().out)
    assert log["version"] == "2.1.0"
    driver = log["runs"][0]["tool"]["driver"]
    ids = [r["id"] for r in driver["rules"]]
    assert "TD102" in ids and "TD502" in ids
    results = log["runs"][0]["results"]
    assert [r["ruleId"] for r in results] == ["TD102", "TD502"]
    assert [r["level"] for r in results] == ["note", "warning"]
    loc = results[0]["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"] == "train.py" and loc["region"]["startLine"] == 3
    assert ids[results[0]["ruleIndex"]] == "TD102"


def test_github_format(fake_rules, project: Path, capsys) -> None:
    (project / "train.py").write_text(BUGGY)
    run("train.py", "--output-format", "github")
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("::notice file=train.py,line=3,col=1,")


def test_statistics(fake_rules, project: Path, capsys) -> None:
    (project / "train.py").write_text(BUGGY + "other.cuda()\n")
    assert run("train.py", "--statistics") == 1
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["2  TD102  cuda-call  [*]", "1  TD502  load-without-map-location  [*]"]


def test_stdin_with_filename(fake_rules, project: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(BUGGY.encode())))
    assert run("-", "--stdin-filename", "pkg/train.py") == 1
    assert "pkg/train.py:3:1: TD102" in capsys.readouterr().out


def test_stdin_fix_prints_fixed_code(fake_rules, project: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"import torch\nnet.cuda()\n")))
    assert run("-", "--fix") == 0
    captured = capsys.readouterr()
    assert captured.out == 'import torch\nnet.to("cuda")\n'
    assert "Fixed 1 problem" in captured.err


def test_select_and_ignore_on_command_line(fake_rules, project: Path, capsys) -> None:
    (project / "train.py").write_text(BUGGY)
    run("train.py", "--select", "TD5", "--output-format", "json")
    assert [d["code"] for d in json.loads(capsys.readouterr().out)] == ["TD502"]
    run("train.py", "--ignore", "TD502,TD1", "--output-format", "json")
    assert json.loads(capsys.readouterr().out) == []


@pytest.mark.parametrize("argv", [("--select", "TD999"), ("--ignore", "XYZ"), ("--per-file-ignores", "nocolon"),
                                  ("--target-torch", "two"), ("--fix", "--diff"), ("--jobs", "0")])
def test_usage_errors_exit_2(fake_rules, project: Path, capsys, argv) -> None:
    assert run("clean.py", *argv) == 2
    assert "torchdoctor: error:" in capsys.readouterr().err


def test_config_with_isolated_is_a_usage_error(fake_rules, project: Path, capsys) -> None:
    (project / "ci.toml").write_text('select = ["TD5"]\n')
    assert run("clean.py", "--config", "ci.toml", "--isolated") == 2
    assert "--config cannot be used with --isolated" in capsys.readouterr().err


def test_notebook_location_in_text_and_json(fake_rules, project: Path, capsys) -> None:
    nb = {"cells": [{"cell_type": "markdown", "source": ["# hi"]},
                    {"cell_type": "code", "source": ["import torch\n", "!pip install x"]},
                    {"cell_type": "code", "source": ["%matplotlib inline\n", "net.cuda()\n"]}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (project / "nb.ipynb").write_text(json.dumps(nb))
    assert run(".") == 1
    assert "nb.ipynb:cell 2:2:1: TD102" in capsys.readouterr().out
    run("nb.ipynb", "--output-format", "json")
    data = json.loads(capsys.readouterr().out)
    assert (data[0]["path"], data[0]["cell"], data[0]["line"], data[0]["fixable"]) == ("nb.ipynb", 2, 2, True)


def test_version_in_check(capsys) -> None:
    from torchdoctor import __version__

    assert main(["check", "--version"]) == 0
    assert capsys.readouterr().out.strip() == f"torchdoctor {__version__}"


def test_pre_commit_hook_invocation(fake_rules, tmp_path: Path, monkeypatch, capsys) -> None:
    """pre-commit runs the hook's entry from the repository root with the staged file names appended."""
    hook = (Path(__file__).parents[2] / ".pre-commit-hooks.yaml").read_text()
    entry = next(line.split(":", 1)[1].strip() for line in hook.splitlines() if line.strip().startswith("entry:"))
    assert entry == "torchdoctor check --force-exclude"
    (tmp_path / "pyproject.toml").write_text('[tool.torchdoctor]\nextend-exclude = ["fixtures/**"]\n')
    for name in ("fixtures/bad.py", "src/train.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(BUGGY)
    monkeypatch.chdir(tmp_path)
    argv = entry.split()[1:] + ["fixtures/bad.py", "src/train.py", "--output-format", "json"]
    assert main(argv) == 1
    assert {d["path"] for d in json.loads(capsys.readouterr().out)} == {"src/train.py"}
