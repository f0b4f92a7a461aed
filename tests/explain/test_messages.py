"""Every family, in the wordings of several torch versions, gives its code and names the concrete things; look-alikes stay quiet."""

from __future__ import annotations

import pytest

from tests.explain import messages, messages_machine, messages_training
from torchdoctor.explain import explain_text
from torchdoctor.explain.match import clean, scan
from torchdoctor.explain.table import FAMILIES

CASES = messages.CASES + messages_machine.CASES + messages_training.CASES
LOOKALIKES = messages.LOOKALIKES + messages_machine.LOOKALIKES


@pytest.mark.parametrize("case", CASES, ids=[f"{c.family}-{i}" for i, c in enumerate(CASES)])
def test_real_message_gives_its_code_and_names_what_it_is_about(case):
    assert {h.family.key for h in scan(clean(case.text), FAMILIES)} == {case.family}, case.source
    found = explain_text(case.text)  # the text alone: no facts, nothing from this machine
    assert [f.code for f in found] == [case.code], (case.source, [(f.code, f.message) for f in found])
    said = f"{found[0].message}\n{found[0].fix}"
    missing = [name for name in case.names if name not in said]
    assert not missing, (case.source, missing, said)


@pytest.mark.parametrize("text,allowed,source", LOOKALIKES, ids=[f"lookalike-{i}" for i in range(len(LOOKALIKES))])
def test_lookalike_gives_no_other_code(text, allowed, source):
    codes = {f.code for f in explain_text(text)}
    assert codes == set(allowed), (source, codes)
