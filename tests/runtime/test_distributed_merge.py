"""Merging every rank's findings through torchrun's store: rank 0 reports all, a missing rank never makes it hang."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from torchdoctor.findings import Finding, Location
from torchdoctor.runtime import distributed


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    from torch.distributed import TCPStore

    server = TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=10), wait_for_workers=False)
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(server.port))
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", f"t{time.monotonic_ns()}")
    yield server


def _as_rank(monkeypatch: pytest.MonkeyPatch, rank: int, size: int, local: int = 0, local_size: int = 1) -> None:
    for name, value in (("RANK", rank), ("WORLD_SIZE", size), ("LOCAL_RANK", local), ("LOCAL_WORLD_SIZE", local_size)):
        monkeypatch.setenv(name, str(value))


def _finding(code: str, line: int) -> Finding:
    return Finding(code, f"{code} seen", Location("train.py", line, 1), "fix it")


def test_rank_zero_reports_the_findings_of_every_node(store, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    _as_rank(monkeypatch, 1, 2)  # the only rank of node 1: its own node's first rank
    assert [f.rank for f in distributed.merge([_finding("TD404", 7)], wait_s=5)] == [1]
    assert not distributed.is_reporter()  # node 1 prints nothing: rank 0 prints for everyone
    _as_rank(monkeypatch, 0, 2)
    merged = distributed.merge([_finding("TD402", 3)], wait_s=5)
    assert [(f.code, f.rank, f.location.line) for f in merged] == [("TD402", 0, 3), ("TD404", 1, 7)]
    assert distributed.is_reporter()


def test_a_rank_that_never_reports_costs_rank_zero_only_the_wait(store, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    _as_rank(monkeypatch, 0, 3)
    began = time.monotonic()
    merged = distributed.merge([_finding("TD402", 3)], wait_s=0.5)
    assert time.monotonic() - began < 5 and [f.rank for f in merged] == [0]
    assert "no findings from rank(s) 1, 2 within 0.5 s" in capsys.readouterr().err


def test_without_a_reachable_store_each_rank_falls_back_within_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    began = time.monotonic()
    assert distributed.agent_store(connect_s=1) is None
    assert time.monotonic() - began < 10
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "False")
    assert distributed.agent_store() is None  # not torchrun's store: never connected to
