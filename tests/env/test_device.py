"""pick_device(): CUDA, then MPS, then CPU; an explicit choice is honoured or refused clearly."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torchdoctor.env import pick_device  # noqa: E402
from torchdoctor.errors import UsageError  # noqa: E402


def test_auto_is_cpu_here():
    assert not torch.cuda.is_available()
    assert pick_device() == torch.device("cpu")
    assert pick_device(None) == torch.device("cpu") and pick_device(" AUTO ") == torch.device("cpu")


def test_explicit_cpu_and_meta_are_honoured():
    assert pick_device("cpu") == torch.device("cpu")
    assert pick_device(torch.device("meta")) == torch.device("meta")


@pytest.mark.parametrize("choice", ["cuda", "cuda:1", torch.device("cuda", 0)])
def test_cuda_here_is_a_clear_usage_error(choice):
    with pytest.raises(UsageError, match="torchdoctor env"):
        pick_device(choice)


def test_not_a_device():
    with pytest.raises(UsageError, match="not a device"):
        pick_device("gpu0")


def test_auto_prefers_cuda_and_honours_local_rank(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert pick_device() == torch.device("cuda", 1)


def test_cuda_index_beyond_the_visible_devices(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(UsageError, match="does not exist"):
        pick_device("cuda:1")


def test_mps_when_asked_but_unavailable():
    with pytest.raises(UsageError, match="MPS"):
        pick_device("mps")
