"""The table is complete and honest: every family has sources, catalog codes, and several real wordings in the tests."""

from __future__ import annotations

import re
from collections import Counter

from tests.explain.test_messages import CASES
from torchdoctor.catalog import RULES
from torchdoctor.explain.table import FAMILIES


def test_every_family_has_sources_codes_of_the_catalog_and_a_builder():
    assert len({f.key for f in FAMILIES}) == len(FAMILIES)
    for fam in FAMILIES:
        assert fam.sources and all(s.strip() for s in fam.sources), fam.key
        assert set(fam.codes) <= set(RULES), (fam.key, set(fam.codes) - set(RULES))
        assert fam.compiled and callable(fam.build), fam.key


def test_every_family_is_tested_with_several_real_wordings():
    per_family = Counter(c.family for c in CASES)
    assert {f.key for f in FAMILIES} == set(per_family), "a family without a test case, or a case for no family"
    thin = {k: n for k, n in per_family.items() if n < 2}
    assert not thin, thin


def test_a_case_gives_only_codes_its_family_declares():
    families = {f.key: f for f in FAMILIES}
    for case in CASES:
        assert case.code in families[case.family].codes, (case.family, case.code)
        assert case.source.strip()


def test_the_new_codes_are_reachable_from_real_messages():
    produced = {c.code for c in CASES}
    assert {"TD104", "TD307", "TD610"} <= produced


def test_every_issue_a_test_quotes_is_among_its_familys_sources():
    sources = {f.key: " ".join(f.sources) for f in FAMILIES}
    for case in CASES:
        for url in re.findall(r"https://github\.com/\S+?(?=[\s)]|$)", case.source):
            assert url in sources[case.family], (case.family, url)
