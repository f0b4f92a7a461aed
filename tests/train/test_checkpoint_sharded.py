"""Sharded checkpoint folders on one process: layout, load, key checks, interrupted saves, latest() and pruning."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from torchdoctor.train import checkpoint, distributed, sharded
from torchdoctor.train.checkpoint import CheckpointError
from torchdoctor.train.run_state import RunFiles


def _model(seed: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    model(torch.randn(5, 4)).sum().backward()
    opt.step()
    return model, opt


def _save(path: Path, model: nn.Module, opt: torch.optim.Optimizer, epoch: int = 2) -> Path:
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
    return sharded.save(path, model=model, optimizer=opt, scaler=None, scheduler=sched, epoch=epoch, step=20,
                        extra={"k": 1}, world=distributed.World())  # fmt: skip


def test_a_sharded_folder_round_trips_model_optimizer_and_counters(tmp_path: Path) -> None:
    model, opt = _model(0)
    path = _save(tmp_path / "epoch-0002", model, opt)
    assert sorted(p.name for p in path.iterdir()) == [".metadata", "__0_0.distcp", "torchdoctor.pt"]
    assert not list(tmp_path.glob(".*partial"))  # renamed into place
    other, other_opt = _model(1)
    sched = torch.optim.lr_scheduler.StepLR(other_opt, step_size=1)
    info = checkpoint.load(checkpoint.latest(tmp_path), other, other_opt, scheduler=sched)
    assert (info.epoch, info.step, info.extra) == (2, 20, {"k": 1})
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), other.state_dict().values()))
    assert torch.equal(other_opt.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])


def test_a_sharded_checkpoint_of_another_model_names_the_keys(tmp_path: Path) -> None:
    model, opt = _model(0)
    path = _save(tmp_path / "c", model, opt)
    with pytest.raises(CheckpointError, match=r"shape differs: 2 \(0.weight: file \(8, 4\) vs model \(6, 4\), 0.bias"):
        checkpoint.load(path, nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(8, 2)))
    with pytest.raises(CheckpointError, match=r"missing from the file: 2 \(3.weight, 3.bias\)"):
        checkpoint.load(path, nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2), nn.Linear(2, 2)))
    bigger = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2), nn.Linear(2, 2))
    with pytest.warns(match="loaded non-strictly"):
        checkpoint.load(path, bigger, strict=False)
    assert torch.equal(bigger[0].weight, model[0].weight)


def test_an_interrupted_sharded_save_is_never_taken_for_a_checkpoint(tmp_path: Path) -> None:
    model, opt = _model(0)
    _save(tmp_path / "epoch-0001", model, opt, epoch=1)
    (tmp_path / ".epoch-0002.partial").mkdir()  # a save killed before its rename
    (tmp_path / "epoch-0003").mkdir()  # a folder without DCP's .metadata
    (tmp_path / "epoch-0003" / "__0_0.distcp").write_bytes(b"half")
    assert checkpoint.latest(tmp_path) == tmp_path / "epoch-0001"
    with pytest.raises(CheckpointError, match=r"is a directory, not a checkpoint file, and not a complete sharded checkpoint \(no \.metadata"):
        checkpoint.load(tmp_path / "epoch-0003", _model(1)[0])
    files = RunFiles(tmp_path, keep_last=3, world=distributed.World(), sharded=True)
    assert [p.name for p in files.prune()] == [".epoch-0002.partial"]


def test_latest_orders_epoch_ends_after_their_steps_across_files_and_folders(tmp_path: Path) -> None:
    model, opt = _model(0)
    checkpoint.save(tmp_path / "epoch-0001.pt", model=model)
    checkpoint.save(tmp_path / "epoch-0002-step-00000015.pt", model=model)
    assert checkpoint.latest(tmp_path).name == "epoch-0002-step-00000015.pt"
    _save(tmp_path / "epoch-0002-step-00000018", model, opt)
    assert checkpoint.latest(tmp_path).name == "epoch-0002-step-00000018"
    checkpoint.save(tmp_path / "epoch-0002.pt", model=model)
    assert checkpoint.latest(tmp_path).name == "epoch-0002.pt"
    files = RunFiles(tmp_path, keep_last=2, world=distributed.World())
    assert sorted(p.name for p in files.prune()) == ["epoch-0001.pt", "epoch-0002-step-00000015.pt"]
