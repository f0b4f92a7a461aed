"""torchrun's own multi-node launch: fit() as 2 nodes x 1 rank on this machine (two launchers, one c10d endpoint)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.train.launch import torchrun

WORKER = Path(__file__).with_name("multinode_worker.py")


@pytest.mark.slow
def test_fit_on_two_nodes_writes_one_set_of_checkpoints_and_averages_metrics(tmp_path: Path) -> None:
    launchers = torchrun(["--nproc-per-node=1"], [str(WORKER), str(tmp_path)], nodes=2)
    for done in launchers:
        assert done.returncode == 0, done.stderr[-4000:]
    reports = [json.loads((tmp_path / f"report-{rank}.json").read_text()) for rank in (0, 1)]
    assert {r["node"] for r in reports} == {"0", "1"}  # two nodes of one rank each
    assert reports[0]["history"] == reports[1]["history"]
    assert [row["train_rank"] for row in reports[0]["history"]] == [0.5, 0.5]  # averaged over the nodes' ranks
    a, b = (torch.load(tmp_path / f"weights-{rank}.pt", map_location="cpu", weights_only=True) for rank in (0, 1))
    assert all(torch.equal(a[k], b[k]) for k in a)  # one model across the nodes
    # One set of files, by global rank 0 alone: 4 steps per epoch and rank, step checkpoints at 3 and 6.
    names = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert names == ["epoch-0001.pt", "epoch-0002-step-00000006.pt", "epoch-0002.pt", "metrics.csv"]
