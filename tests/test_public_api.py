"""The public namespace is small, deliberate, and importing it pulls in no torch."""

from __future__ import annotations

import subprocess
import sys

import torchdoctor


def test_every_public_name_resolves_and_nothing_else_is_offered():
    for name in torchdoctor.__all__:
        assert getattr(torchdoctor, name) is not None, name
    assert len(set(torchdoctor.__all__)) == len(torchdoctor.__all__)
    assert sorted(dir(torchdoctor)) == sorted(torchdoctor.__all__)
    try:
        torchdoctor.not_a_name  # noqa: B018
    except AttributeError as exc:
        assert "not_a_name" in str(exc)
    else:
        raise AssertionError("unknown attribute did not raise")


def test_importing_the_package_imports_no_torch():
    code = "import sys, torchdoctor, torchdoctor.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "False"


def test_lazy_names_resolve():
    assert torchdoctor.Finding.__name__ == "Finding"
    assert callable(torchdoctor.pick_device)
