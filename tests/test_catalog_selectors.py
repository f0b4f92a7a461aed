"""Rule selectors behave like ruff's: a code, a prefix or ALL; typos are errors."""

from __future__ import annotations

import pytest

from torchdoctor.catalog import RULES, get_rule, select_codes
from torchdoctor.errors import UsageError


def test_prefix_ALL_and_ignore():
    assert select_codes(["TD7"], None) == {c for c in RULES if c.startswith("TD7")}
    assert select_codes(["ALL"], ["TD0", "td1"]) == {c for c in RULES if c[2] not in "01"}
    assert select_codes(None, None) == set(RULES)


@pytest.mark.parametrize("bad", ["TD9", "XX1", "TD3021", "E501"])
def test_unknown_selectors_are_usage_errors(bad):
    with pytest.raises(UsageError, match="selector"):
        select_codes([bad], None)


def test_rule_records_are_consistent():
    for code, rule in RULES.items():
        assert rule.code == code and rule.stage == int(code[2])
        assert rule.name == rule.name.lower() and " " not in rule.name
        assert set(rule.detection.split("+")) <= {"S", "R", "E"}
    assert len({r.name for r in RULES.values()}) == len(RULES)
    with pytest.raises(UsageError, match="TD999"):
        get_rule("TD999")
