"""``# noqa`` comments: bare, with codes, with prefixes, other tools' codes, multi-line statements."""

from __future__ import annotations

import pytest

from tests.check.fake_rules import fake_rules  # noqa: F401 - a fixture
from torchdoctor.check import check_source
from torchdoctor.check.noqa import ALL, noqa_codes


@pytest.mark.parametrize("line, want", [
    ("x = 1", None),
    ("x = 1  # noqa", ALL),
    ("x = 1  # NOQA", ALL),
    ("x = 1  # noqa - reason given", ALL),
    ("x = 1  # noqa: TD302", {"TD302"}),
    ("x = 1  # noqa:TD302,TD603", {"TD302", "TD603"}),
    ("x = 1  # noqa: TD302, TD603 because", {"TD302", "TD603"}),
    ("x = 1  # noqa: E501", {"E501"}),
    ("x = 1  # type: ignore  # noqa: td3", {"TD3"}),
    ("x = 'noqa'", None),
    ("x = 1  # noqa: TD1O2", set()),  # a letter O: no code at all, not the prefix TD1
    ("x = 1  # noqa: TD302, TD1O2", {"TD302"}),
])
def test_parse(line: str, want) -> None:
    got = noqa_codes(line)
    assert got == (frozenset(want) if isinstance(want, set) else want)


def lines(src: str) -> list[tuple[int, str]]:
    return [(f.location.line, f.code) for f in check_source(src, "a.py")]


def test_bare_noqa_silences_every_code_on_the_line(fake_rules) -> None:
    assert lines("import torch\nx = torch.load(a.cuda())  # noqa\ny = b.cuda()\n") == [(3, "TD102")]


def test_noqa_with_codes_silences_only_those(fake_rules) -> None:
    src = "import torch\nx = torch.load(a.cuda())  # noqa: TD502\n"
    assert lines(src) == [(2, "TD102")]
    assert lines(src.replace("TD502", "TD502, TD102")) == []
    assert lines(src.replace("TD502", "TD1")) == [(2, "TD502")]  # a prefix
    assert lines(src.replace("TD502", "E501")) == [(2, "TD502"), (2, "TD102")]  # not ours; warning sorts first


def test_multi_line_statement_uses_the_reported_line(fake_rules) -> None:
    src = "import torch\nx = torch.load(  # noqa: TD502\n    'w.pt',\n)\ny = torch.load(\n    'w.pt',\n)  # noqa\n"
    assert lines(src) == [(5, "TD502")]


def test_noqa_in_a_notebook_cell(fake_rules, tmp_path) -> None:
    import json

    from torchdoctor.check.runner import check_file

    nb = {"cells": [{"cell_type": "code", "source": "import torch\na.cuda()  # noqa\nb.cuda()\n"}]}
    p = tmp_path / "n.ipynb"
    p.write_text(json.dumps(nb))
    assert [(f.location.cell, f.location.line) for f in check_file(str(p)).findings] == [(1, 3)]


def test_unknown_codes_are_ours_that_name_no_rule() -> None:
    from torchdoctor.check.noqa import unknown_codes

    src = ["a  # noqa: TD999, TD302", "b  # noqa: E501", "c  # noqa: TD3, td30", "d  # noqa", "e  # noqa: TD8",
           "s = 'a docstring shows # noqa: TD999'"]
    assert unknown_codes(src) == [(1, "TD999"), (5, "TD8")]


def test_unknown_noqa_code_is_a_warning_that_names_it(fake_rules, tmp_path, capsys) -> None:
    from torchdoctor.cli import main

    path = tmp_path / "a.py"
    path.write_text("import torch\nx = a.cuda()  # noqa: TD999\n")  # a typo of TD102: it silences nothing
    assert main(["check", "--isolated", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}:2: warning: unknown rule code TD999 in `# noqa`" in err
    path.write_text("import torch\nx = a.cuda()  # noqa: TD102\n")
    assert main(["check", "--isolated", str(path)]) == 0
    assert "warning" not in capsys.readouterr().err


def test_noqa_on_a_last_line_without_newline(fake_rules) -> None:
    assert lines("import torch\nx = a.cuda()  # noqa: TD102") == []
    assert lines("import torch\nx = a.cuda()  # noqa: TD502") == [(2, "TD102")]


def test_findings_without_a_place_or_outside_the_file_are_kept() -> None:
    from torchdoctor.check.noqa import filter_noqa
    from torchdoctor.findings import Finding, Location

    src = ["x = 1  # noqa", "y = 2", "z = 3  # noqa"]
    nowhere, outside, zero = Finding("TD102", "m"), Finding("TD102", "m", Location("a.py", 9, 1)), Finding("TD102", "m", Location("a.py", 0, 1))
    first, second = Finding("TD102", "m", Location("a.py", 1, 1)), Finding("TD102", "m", Location("a.py", 2, 1))
    # Line 0 is no line (it must not borrow the last line's noqa); line 1 is a line like any other.
    assert filter_noqa([nowhere, outside, zero, first, second], src) == [nowhere, outside, zero, second]


def test_unknown_noqa_code_in_a_notebook_names_the_cell(fake_rules, tmp_path, capsys) -> None:
    import json

    from torchdoctor.cli import main

    nb = {"cells": [{"cell_type": "code", "source": "import torch\n"},
                    {"cell_type": "code", "source": "x = 1\ny = a.cuda()  # noqa: TD999\n"}]}
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps(nb))
    main(["check", "--isolated", str(path)])
    assert capsys.readouterr().err.splitlines() == [
        f"{path}:cell 2:2: warning: unknown rule code TD999 in `# noqa` (it silences nothing; `torchdoctor rules` lists the codes)",
    ]


def test_a_code_run_into_letters_is_named_whole() -> None:
    from torchdoctor.check.noqa import unknown_codes

    # "TD1O2" (a letter O) would otherwise read as the prefix TD1 and silence a whole family.
    assert unknown_codes(["y = a.cuda()  # noqa: TD1O2", "z = 1  # noqa: TD102 because"]) == [(1, "TD1O2")]
    assert unknown_codes(["y = a.cuda()  # noqa: TD302, TD1O2"]) == [(1, "TD1O2")]  # the last code, whole
    assert unknown_codes(["y = 1  # noqa: E501x"]) == []  # another tool's (mistyped) code is not ours
