"""The catalog is complete: every code has its doc, static codes have rules and fixtures, and the
table agrees with the design contract (shared/design/CATALOG.md)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.check.expectations import expected, fixture_files
from torchdoctor.catalog import RULES, rule_doc
from torchdoctor.cli import main as cli_main

HEADINGS = ["What it does", "Why is this bad?", "Example", "Use instead", "Fix safety", "References"]
FIXTURES = Path(__file__).parent / "check" / "fixtures"
_REPO = Path(__file__).resolve().parents[1]
# CI keeps shared/ beside the clone; a checkout may also carry it inside.
_CONTRACT_PATHS = [_REPO.parent / "shared/design/CATALOG.md", _REPO / "shared/design/CATALOG.md"]
ALL = sorted(RULES)
# Codes the project added after the contract (it may add, never renumber): errors first met as a message,
# and TD611 (TD303's made-then-moved shape, a cost rather than an error, met on real repositories).
ADDED_BEYOND_CONTRACT = {"TD104", "TD307", "TD610", "TD611"}
STATIC = [c for c in ALL if RULES[c].static]


def _sections(doc: str) -> dict[str, str]:
    parts = re.split(r"^## (.+)$", doc, flags=re.M)
    assert not parts[0].strip(), "text before the first heading"
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def _blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of each fenced code block."""
    return re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.M | re.S)


def test_catalog_has_the_64_codes_of_the_contract_and_the_added_ones() -> None:
    assert len(RULES) == 64 + len(ADDED_BEYOND_CONTRACT) == 68
    assert ADDED_BEYOND_CONTRACT <= set(RULES)
    assert all(re.fullmatch(r"TD[0-7]\d\d", c) for c in RULES)


@pytest.mark.parametrize("code", ALL)
def test_doc_follows_ruffs_outline(code: str) -> None:
    doc = rule_doc(code)
    assert doc, f"src/torchdoctor/catalog/docs/{code}.md is missing"
    sections = _sections(doc)
    assert list(sections) == HEADINGS
    assert all(body.strip() for body in sections.values())
    first = sections["What it does"].strip().split("\n\n")[0]
    assert len(re.findall(r"[.!?](?=\s|$)", first)) <= 2, "SARIF's fullDescription: one or two sentences"
    assert re.search(r"\]\(https://(pytorch\.org|docs\.nvidia\.com|developer\.nvidia\.com|docs\.docker\.com|pip\.pypa\.io)/",
                     sections["References"]), "References link to PyTorch/NVIDIA documentation"
    for heading in ("Example", "Use instead"):
        blocks = _blocks(sections[heading])
        assert blocks, f"{heading} has no code block"
        if code[2] != "0":  # environment codes show error text and shell commands instead
            python = [body for lang, body in blocks if lang == "python"]
            assert python, f"{heading} has no ```python block"
            for body in python:
                ast.parse(body)


@pytest.mark.parametrize("code", ALL)
def test_fix_safety_says_how_it_is_found_for_non_static_codes(code: str) -> None:
    text = _sections(rule_doc(code))["Fix safety"]
    if not RULES[code].static:
        assert "torchdoctor env" in text or "torchdoctor run" in text


def _registered_codes() -> set[str]:
    from torchdoctor.check.engine import load_rules

    return {reg.code for reg in load_rules()}


@pytest.mark.parametrize("code", STATIC)
def test_static_code_has_a_rule_and_fixtures(code: str) -> None:
    folder = FIXTURES / code
    files = fixture_files(folder) if folder.is_dir() else []
    assert files, f"no fixtures in tests/check/fixtures/{code}/"
    wants = {p: {c for _, c in expected(p.read_text("utf-8"))} for p in files}
    assert any(code in w for w in wants.values()), f"no fixture line says '# expect: {code}'"
    assert any(code not in w for w in wants.values()), f"no quiet look-alike fixture for {code}"
    if code in _registered_codes():
        return
    # A rule may report several codes under one registration: then the code must really be found.
    from torchdoctor.check import check_source

    found = {f.code for p in files for f in check_source(p.read_text("utf-8"), str(p))}
    assert code in found, f"{code} has no registered static rule and no rule reports it"


def _contract_rows(text: str) -> dict[str, tuple[str, str]]:
    """code -> (severity, detection) from the markdown tables."""
    rows: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and re.fullmatch(r"TD\d{3}", cells[0]):
            sev = cells[1].split("/")[0]  # TD306 "error/warning": the catalog's default is the first
            det = cells[2] if len(cells) >= 4 else "E"  # the environment table has no detection column
            rows[cells[0]] = (sev, det)
    return rows


def test_table_matches_the_design_contract() -> None:
    path = next((p for p in _CONTRACT_PATHS if p.is_file()), None)
    if path is None:
        pytest.skip("shared/design/CATALOG.md is not beside this checkout")
    contract = _contract_rows(path.read_text("utf-8"))
    ours = {c: (r.severity.value, r.detection) for c, r in RULES.items() if c not in ADDED_BEYOND_CONTRACT}
    assert ours == contract
    assert not ADDED_BEYOND_CONTRACT & set(contract), "an added code must not take a number the contract uses"


def test_contract_parser_reads_both_table_shapes() -> None:
    text = "| TD001 | error | PyTorch cannot be imported |\n| TD306 | error/warning | S | misuse |\n"
    assert _contract_rows(text) == {"TD001": ("error", "E"), "TD306": ("error", "S")}


# ---- torchdoctor rules ------------------------------------------------------


def test_rules_lists_every_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["rules"]) == 0
    listed = re.findall(r"^(TD\d{3}) ", capsys.readouterr().out, flags=re.M)
    assert listed == ALL


def test_rules_code_prints_its_doc(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["rules", "td302"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# TD302 (batch-not-moved)")
    assert rule_doc("TD302").strip() in out


def test_rules_unknown_code_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["rules", "TD999"]) == 2
    captured = capsys.readouterr()
    assert "TD999" in captured.err and "unknown" in captured.err
    assert captured.out == ""


def test_rules_prefix_lists_the_stage(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["rules", "TD3"]) == 0
    listed = re.findall(r"^(TD\d{3}) ", capsys.readouterr().out, flags=re.M)
    assert listed == [c for c in ALL if c.startswith("TD3")] and len(listed) == 7
