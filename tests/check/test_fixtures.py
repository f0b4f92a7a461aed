"""Every fixture under fixtures/ yields exactly the findings its ``# expect:`` comments name."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.check.expectations import config_lines, expected, fixture_files, reported
from torchdoctor.check import check_source

ROOT = Path(__file__).parent / "fixtures"


def _settings(source: str):
    lines = config_lines(source)
    if not lines:
        return None
    from torchdoctor.config import settings_from_toml  # the platform's config reader

    return settings_from_toml("\n".join(lines))


@pytest.mark.parametrize("path", fixture_files(ROOT), ids=lambda p: str(p.relative_to(ROOT)))
def test_fixture(path: Path) -> None:
    source = path.read_text("utf-8")
    findings = check_source(source, str(path), settings=_settings(source))
    got = reported(findings)
    want = expected(source)
    missing = sorted(want - got)
    extra = sorted((line, code, next(f.message for f in findings if f.location.line == line and code in (f.code, *f.related)))
                   for line, code in got - want)
    assert not missing and not extra, f"missing: {missing}\nunexpected: {extra}"


def test_td303_names_the_device_tensor_a_torch_call_holds_not_the_module() -> None:
    path = ROOT / "TD611" / "moved_after_a_reshape.py"
    [f] = [f for f in check_source(path.read_text("utf-8"), str(path)) if f.code == "TD303"]
    assert f.message.endswith("combined with device tensor `same`")  # in torch.ones_like(same), not `torch`
