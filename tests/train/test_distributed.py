"""fit() under torchrun with two gloo processes on the CPU: DDP, sharding, rank-0 writes, resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from torch.utils.data import DataLoader, TensorDataset

from torchdoctor.errors import UsageError
from torchdoctor.train.distributed import World, shard_loader, world_from_env

WORKER = Path(__file__).with_name("ddp_worker.py")
REFIT_WORKER = Path(__file__).with_name("ddp_refit_worker.py")


def test_world_from_torchrun_environment() -> None:
    assert world_from_env({}) == World()
    assert world_from_env({"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1"}) == World(4, 3, 1)
    with pytest.raises(UsageError, match="RANK=4, WORLD_SIZE=2"):
        world_from_env({"WORLD_SIZE": "2", "RANK": "4"})


def test_shard_loader_keeps_the_loader_options_and_splits_the_data() -> None:
    loader = DataLoader(TensorDataset(torch.arange(10)), batch_size=2, shuffle=True, drop_last=True)
    sharded = shard_loader(loader, World(2, 1, 1))
    assert sharded.batch_size == 2 and sharded.drop_last and sharded.sampler.num_replicas == 2
    assert sharded.sampler.shuffle and len(list(sharded.sampler)) == 5
    assert shard_loader(loader, World()) is loader


def _torchrun(out: Path, epochs: int, worker: Path = WORKER) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(worker), str(out), str(epochs)]
    # A session of its own for torchrun; its workers lead sessions of their own, so each also
    # ends itself by alarm (ddp_worker.py) if a timeout kills only the launcher.
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=420)  # ~17 s on an idle 2-core machine; generous for a loaded one
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    assert proc.returncode == 0, stderr[-3000:]
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def _weights(out: Path, rank: int) -> dict[str, torch.Tensor]:
    return torch.load(out / f"weights-{rank}.pt", map_location="cpu", weights_only=True)


def _metrics(report: dict) -> list[dict]:  # type: ignore[type-arg]
    timing = ("seconds", "samples_per_s")  # each rank's own clock
    return [{k: v for k, v in row.items() if k not in timing} for row in report["history"]]


@pytest.mark.slow
def test_two_gloo_ranks_train_one_model_write_once_and_resume(tmp_path: Path) -> None:
    _torchrun(tmp_path, epochs=2)
    reports = [json.loads((tmp_path / f"report-{r}.json").read_text()) for r in (0, 1)]
    for key, value in _weights(tmp_path, 0).items():
        assert torch.equal(value, _weights(tmp_path, 1)[key]), key  # one model, not two
    assert reports[0]["seen"] == reports[1]["seen"] == 2 * 48  # each rank saw its half, each epoch
    assert _metrics(reports[0]) == _metrics(reports[1])  # averaged over the ranks, so equal on both
    files = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert files == ["epoch-0001.pt", "epoch-0002.pt", "metrics.csv"]  # rank 0 alone wrote

    proc = _torchrun(tmp_path, epochs=3)
    assert proc.stderr.count("resuming from") == 1 and "epoch-0002.pt" in proc.stderr
    resumed = [json.loads((tmp_path / f"report-{r}.json").read_text()) for r in (0, 1)]
    assert resumed[0]["seen"] == 48  # only the third epoch was trained
    assert [row["epoch"] for row in resumed[0]["history"]] == [1, 2, 3]
    assert _metrics(resumed[0])[:2] == _metrics(reports[0])
    for key, value in _weights(tmp_path, 0).items():
        assert torch.equal(value, _weights(tmp_path, 1)[key]), key


@pytest.mark.slow
def test_fit_called_again_in_the_same_torchrun_process_reuses_the_group(tmp_path: Path) -> None:
    _torchrun(tmp_path, epochs=1, worker=REFIT_WORKER)
    rows = [json.loads((tmp_path / f"refit-{r}.json").read_text()) for r in (0, 1)]
    assert rows[0] == rows[1] and len(rows[0]) == 3  # three fits, the same averaged losses on both ranks
    assert all(row["joined"] for row in rows[0])
