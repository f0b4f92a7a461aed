"""The reporters render findings faithfully in every format."""

from __future__ import annotations

import io
import json
import os

import pytest

from torchdoctor.catalog import RULES
from torchdoctor.errors import InputError
from torchdoctor.findings import Edit, Finding, Location, Severity, sort_findings
from torchdoctor.report import emit, render, use_color, write_text_atomic

F1 = Finding("TD302", "batch element `labels` used on the CPU", Location("train.py", 12, 5, 12, 20), "move it: labels.to(device)")
F2 = Finding("TD503", "torch.load without weights_only", Location("nb.ipynb", 3, 1, cell=2), "add weights_only=True",
             edits=(Edit(3, 10, 3, 10, ", weights_only=True"),))
F3 = Finding("TD009", "no GPU at all")


def test_severity_defaults_to_catalog_and_can_be_overridden():
    assert F1.severity is Severity.ERROR
    assert Finding("TD306", "m", severity="warning").severity is Severity.WARNING


def test_sort_is_by_file_then_position_then_severity():
    a = Finding("TD603", "x", Location("a.py", 5, 1))
    b = Finding("TD302", "x", Location("a.py", 5, 1))
    c = Finding("TD101", "x", Location("a.py", 2, 9))
    assert sort_findings([a, b, c]) == [c, b, a]


def test_text_has_location_code_severity_fix_and_summary():
    out = render([F1, F2, F3], "text")
    assert "train.py:12:5: TD302 [error] batch element `labels` used on the CPU" in out
    assert "    fix: move it: labels.to(device)" in out
    assert "nb.ipynb:cell 2:3:1: TD503 [warning]" in out
    assert "(fixable with --fix)" in out
    assert out.rstrip().splitlines()[-2] == "Found 3 problems (1 error, 1 warning, 1 info)."
    assert "\033[" not in out
    assert "\033[31m" in render([F1], "text", color=True)


def test_text_for_nothing_says_so():
    assert render([], "text").strip() == "All checks passed."


def test_json_keys_are_exactly_the_documented_ones():
    data = json.loads(render([F1, F2, F3], "json"))
    keys = {"code", "severity", "message", "path", "cell", "line", "column", "end_line", "end_column", "fix", "fixable",
            "unsafe_fix", "related"}
    assert all(set(d) == keys for d in data)
    assert data[0] == {
        "code": "TD302", "severity": "error", "message": "batch element `labels` used on the CPU",
        "path": "train.py", "cell": None, "line": 12, "column": 5, "end_line": 12, "end_column": 20,
        "fix": "move it: labels.to(device)", "fixable": False, "unsafe_fix": False, "related": [],
    }
    assert (data[1]["path"], data[1]["cell"], data[1]["line"]) == ("nb.ipynb", 2, 3) and data[1]["fixable"] is True
    assert data[2]["path"] is None


def test_sarif_has_rules_from_the_catalog_and_one_result_per_finding():
    log = json.loads(render([F1, F2], "sarif"))
    assert log["version"] == "2.1.0"
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == sorted(RULES)
    assert all(r["shortDescription"]["text"] and r["help"]["text"] for r in rules)
    res = run["results"]
    assert len(res) == 2
    assert res[0]["ruleId"] == "TD302" and res[0]["level"] == "error"
    assert rules[res[0]["ruleIndex"]]["id"] == "TD302"
    region = res[0]["locations"][0]["physicalLocation"]["region"]
    assert region == {"startLine": 12, "startColumn": 5, "endLine": 12, "endColumn": 20}
    assert res[1]["level"] == "warning"


def test_github_annotations_escape_and_map_levels():
    f = Finding("TD603", "sync: a, b\nnext", Location("dir/t,1.py", 3, 2))
    line = render([f], "github").strip()
    assert line.startswith("::notice file=dir/t%2C1.py,line=3,col=2,title=TD603::")
    assert "%0A" in line and "\n" not in line
    assert render([F1], "github").startswith("::error ")


def test_no_color_is_respected(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert use_color(Tty())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_color(Tty())
    assert not use_color(io.StringIO())


def test_emit_writes_file_atomically(tmp_path):
    target = tmp_path / "report.json"
    emit("[]", str(target))
    assert target.read_text() == "[]\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask
    with pytest.raises(InputError, match="does not exist"):
        write_text_atomic(str(tmp_path / "missing" / "r.txt"), "x")
