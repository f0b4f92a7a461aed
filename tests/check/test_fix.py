"""--fix and --diff: edits applied from the end, overlaps deferred, re-parse guard, idempotence."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.check.fake_rules import fake_rules  # noqa: F401 - a fixture
from torchdoctor.check.fix import apply_fixes, line_starts
from torchdoctor.cli import main
from torchdoctor.findings import Edit, Finding, Location

BUGGY = 'import torch\nnet.cuda()\nx = torch.load("w.pt")\ny = torch.load(\n    "é.pt")\n'
FIXED = 'import torch\nnet.to("cuda")\nx = torch.load("w.pt", map_location="cpu")\ny = torch.load(\n    "é.pt", map_location="cpu")\n'


def finding(*edits: Edit) -> Finding:
    return Finding("TD102", "m", Location("a.py", edits[0].line, edits[0].column + 1), edits=edits)


def test_line_starts_count_ast_newlines_only() -> None:
    assert line_starts("a\r\nb\rc\x0cd\n") == [0, 3, 5, 9]


def test_apply_from_the_end_and_skip_overlaps() -> None:
    text = "abcdef\nghij\n"
    fs = [finding(Edit(1, 1, 1, 3, "X")), finding(Edit(1, 2, 1, 4, "Y")), finding(Edit(2, 0, 2, 0, ">"))]
    assert apply_fixes(text, fs) == ("aXdef\n>ghij\n", 2)


def test_multi_edit_finding_is_all_or_nothing() -> None:
    text = "abc\n"
    both = finding(Edit(1, 0, 1, 0, "("), Edit(1, 3, 1, 3, ")"))
    assert apply_fixes(text, [both]) == ("(abc)\n", 1)
    outside = finding(Edit(1, 0, 1, 0, "("), Edit(9, 0, 9, 0, ")"))
    assert apply_fixes(text, [outside]) == (text, 0)


def test_columns_are_characters() -> None:
    assert apply_fixes("é = b\n", [finding(Edit(1, 4, 1, 5, "c"))]) == ("é = c\n", 1)


@pytest.fixture
def proj(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(BUGGY, encoding="utf-8")
    return tmp_path


def test_fix_writes_and_is_idempotent(fake_rules, proj: Path, capsys) -> None:
    os.chmod(proj / "train.py", 0o754)
    assert main(["check", "--isolated", "--fix", "train.py"]) == 0
    assert (proj / "train.py").read_text("utf-8") == FIXED
    assert stat.S_IMODE(os.stat(proj / "train.py").st_mode) == 0o754  # permissions kept
    assert "Fixed 3 problems; 0 problems remaining." in capsys.readouterr().out
    assert main(["check", "--isolated", "--fix", "train.py"]) == 0
    assert (proj / "train.py").read_text("utf-8") == FIXED
    assert "Fixed" not in capsys.readouterr().out


def test_fix_keeps_crlf_bom_and_latin1(fake_rules, proj: Path) -> None:
    (proj / "crlf.py").write_bytes(b"\xef\xbb\xbfimport torch\r\nnet.cuda()\r\n")
    (proj / "l1.py").write_bytes(b"# -*- coding: latin-1 -*-\nimport torch\nx = '\xe9'; net.cuda()\n")
    main(["check", "--isolated", "--fix", "crlf.py", "l1.py"])
    assert (proj / "crlf.py").read_bytes() == b'\xef\xbb\xbfimport torch\r\nnet.to("cuda")\r\n'
    assert (proj / "l1.py").read_bytes() == b"# -*- coding: latin-1 -*-\nimport torch\nx = '\xe9'; net.to(\"cuda\")\n"


def test_fix_reports_what_remains(fake_rules, proj: Path, capsys) -> None:
    (proj / "train.py").write_text("import torch\nnet.cuda()\nbreakme = 1\n")
    # breakme's fix is refused by the re-parse guard: nothing is written for the file.
    assert main(["check", "--isolated", "--fix", "train.py"]) == 2
    assert (proj / "train.py").read_text() == "import torch\nnet.cuda()\nbreakme = 1\n"
    captured = capsys.readouterr()
    assert "train.py: error: fixing would make invalid Python" in captured.err
    main(["check", "--isolated", "--fix", "--ignore", "TD601", "train.py"])
    assert (proj / "train.py").read_text() == 'import torch\nnet.to("cuda")\nbreakme = 1\n'


def test_nested_edits_are_applied_over_passes(fake_rules, proj: Path) -> None:
    (proj / "train.py").write_text("import torch\nx = torch.load(a.cuda())\n")
    main(["check", "--isolated", "--fix", "train.py"])
    assert (proj / "train.py").read_text() == 'import torch\nx = torch.load(a.to("cuda"), map_location="cpu")\n'


def test_diff_prints_and_writes_nothing(fake_rules, proj: Path, capsys) -> None:
    assert main(["check", "--isolated", "--diff", "train.py"]) == 1
    captured = capsys.readouterr()
    assert (proj / "train.py").read_text("utf-8") == BUGGY
    assert "--- a/train.py\n+++ b/train.py\n" in captured.out
    assert '-net.cuda()\n-x = torch.load("w.pt")\n+net.to("cuda")\n' in captured.out
    assert "Would fix 3 problems in 1 file." in captured.err
    (proj / "train.py").write_text(FIXED, encoding="utf-8")
    assert main(["check", "--isolated", "--diff", "train.py"]) == 0
    assert capsys.readouterr().out == ""


def test_notebooks_are_fixed_in_their_cells(fake_rules, proj: Path, capsys) -> None:
    import json

    text = json.dumps({"cells": [{"cell_type": "code", "source": "import torch\nnet.cuda()\n"}]})
    (proj / "n.ipynb").write_text(text)
    assert main(["check", "--isolated", "--fix", "n.ipynb"]) == 0
    assert (proj / "n.ipynb").read_text() == text.replace("net.cuda()", 'net.to(\\"cuda\\")')
    assert "Fixed 1 problem" in capsys.readouterr().out


# ---- edge cases found by mutation testing ---------------------------------------------------------------


def test_an_edit_on_the_last_line_without_a_newline() -> None:
    assert apply_fixes("abc", [finding(Edit(1, 0, 1, 1, "X"))]) == ("Xbc", 1)


@pytest.mark.parametrize("edit", [
    Edit(1, 3, 1, 3, "X"),  # one past the end of "ab": that would be the newline
    Edit(1, 9, 1, 9, "X"),  # far past the end (it must not reach into the next line)
    Edit(1, 0, 9, 0, "X"),  # ends past the file
    Edit(9, 0, 1, 0, "X"),  # starts past the file
    Edit(2, 0, 1, 0, "X"),  # ends before it starts
    Edit(0, 0, 3, 0, "X"),  # line 0: lines count from 1 (it must not wrap round to the end of the file)
])
def test_edits_outside_the_text_are_not_applied(edit: Edit) -> None:
    assert apply_fixes("ab\ncd\n", [finding(edit)]) == ("ab\ncd\n", 0)


def test_line_ends_count_trailing_spaces_and_letters_but_not_line_breaks() -> None:
    assert apply_fixes("x = 1  \r\ny\n", [finding(Edit(1, 7, 1, 7, "#"))]) == ("x = 1  #\r\ny\n", 1)
    assert apply_fixes("MAX\nb\n", [finding(Edit(1, 3, 1, 3, "!"))]) == ("MAX!\nb\n", 1)


def test_conflicts_adjacent_nested_and_insertions() -> None:
    from torchdoctor.check.fix import _conflict

    assert not _conflict((1, 3), (3, 5)) and not _conflict((3, 5), (1, 3))  # touching ends: both can apply
    assert _conflict((2, 3), (1, 5)) and _conflict((1, 5), (2, 3))  # one inside the other
    assert _conflict((2, 2), (2, 2))  # two insertions at one point: no order between them
    assert _conflict((1, 1), (1, 3)) and _conflict((2, 2), (1, 3))  # insertion at the start of / inside a replacement
    assert not _conflict((3, 3), (1, 3))  # insertion right after it


def test_adjacent_edits_apply_in_one_pass_nested_ones_wait() -> None:
    text = "abcdef\n"
    assert apply_fixes(text, [finding(Edit(1, 1, 1, 3, "X")), finding(Edit(1, 3, 1, 5, "Y"))]) == ("aXYf\n", 2)
    assert apply_fixes(text, [finding(Edit(1, 1, 1, 5, "X")), finding(Edit(1, 2, 1, 3, "Y"))]) == ("aXf\n", 1)


def test_a_bad_finding_does_not_stop_the_ones_after_it() -> None:
    text = "abcdef\n"
    outside = finding(Edit(1, 0, 1, 0, "("), Edit(9, 0, 9, 0, ")"))
    self_overlapping = finding(Edit(1, 0, 1, 2, "X"), Edit(1, 1, 1, 3, "Y"))
    good = finding(Edit(1, 5, 1, 6, "F"))
    assert apply_fixes(text, [outside, self_overlapping, good]) == ("abcdeF\n", 1)


def test_diff_marks_a_missing_final_newline_and_keeps_cr_line_ends() -> None:
    from torchdoctor.check.fix import unified_diff

    assert unified_diff("a.py", "a\nb", "a\nc") == (
        "--- a/a.py\n+++ b/a.py\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n")
    assert unified_diff("a.py", "a\rb\r", "a\rc\r") == "--- a/a.py\n+++ b/a.py\n@@ -1,2 +1,2 @@\n a\r-b\r+c\r"


def test_a_fix_is_written_without_fsync(fake_rules, proj: Path, monkeypatch) -> None:
    # Sources are rewritten by the thousand in pre-commit: a crash leaves the old file, not half of one,
    # so the cost of an fsync per file buys nothing (checkpoints and their folder are fsynced).
    calls: list[int] = []
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd))
    assert main(["check", "--isolated", "--fix", "train.py"]) == 0
    assert (proj / "train.py").read_text("utf-8") == FIXED and calls == []
