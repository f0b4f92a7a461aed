"""Atomic saves, safe loads, prefixes, pruning, and every way a checkpoint file can be bad."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from torchdoctor import _files
from torchdoctor.errors import InputError
from torchdoctor.train import checkpoint
from torchdoctor.train.checkpoint import CheckpointError, CheckpointWarning


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def test_round_trip_restores_model_optimizer_scheduler_and_counters(tmp_path: Path) -> None:
    model = _model(0)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    model(torch.ones(3, 4)).sum().backward()
    opt.step()
    sched.step()
    path = checkpoint.save(tmp_path / "c.pt", model=model, optimizer=opt, scheduler=sched, epoch=3, step=30, extra={"k": [1, 2]})

    other = _model(1)
    other_opt = torch.optim.Adam(other.parameters(), lr=0.5)
    other_sched = torch.optim.lr_scheduler.StepLR(other_opt, step_size=1, gamma=0.5)
    result = checkpoint.load(path, other, other_opt, scheduler=other_sched)
    assert (result.epoch, result.step, result.extra, result.notes) == (3, 30, {"k": [1, 2]}, [])
    for a, b in zip(model.parameters(), other.parameters()):
        assert torch.equal(a, b)
    assert other_opt.param_groups[0]["lr"] == opt.param_groups[0]["lr"] == 0.005
    assert torch.equal(other_opt.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])


def test_save_unwraps_data_parallel_so_keys_have_no_module_prefix(tmp_path: Path) -> None:
    path = checkpoint.save(tmp_path / "c.pt", model=nn.DataParallel(_model()))  # noqa: TD204 - the wrapper is the point
    keys = torch.load(path, map_location="cpu", weights_only=True)["model"].keys()
    assert keys and not any(k.startswith("module.") for k in keys)


def test_save_unwraps_a_compiled_model(tmp_path: Path) -> None:
    compiled = torch.compile(_model())  # never called: nothing is compiled
    assert any(k.startswith("_orig_mod.") for k in compiled.state_dict())
    path = checkpoint.save(tmp_path / "c.pt", model=compiled)
    assert not any(k.startswith("_orig_mod.") for k in torch.load(path, map_location="cpu", weights_only=True)["model"])


def test_load_strips_a_module_prefix_and_says_so(tmp_path: Path) -> None:
    source = _model(0)
    path = tmp_path / "dp.pt"
    torch.save(nn.DataParallel(source).state_dict(), path)  # noqa: TD204, TD205 - a wrapped save, on purpose
    target = _model(1)
    with pytest.warns(CheckpointWarning, match="stripped the prefix 'module.'"):
        result = checkpoint.load(path, target)
    assert "module." in result.notes[0]
    assert torch.equal(target[0].weight, source[0].weight)


class _Holder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.module = nn.Linear(4, 2)  # a real attribute named "module": keys are module.weight


def test_load_adds_a_prefix_the_model_has(tmp_path: Path) -> None:
    torch.manual_seed(0)
    bare = nn.Linear(4, 2)
    path = checkpoint.save(tmp_path / "c.pt", model=bare)
    holder = _Holder()
    with pytest.warns(CheckpointWarning, match="added the prefix 'module.'"):
        checkpoint.load(path, holder)
    assert torch.equal(holder.module.weight, bare.weight)


def test_checkpoint_of_another_model_is_a_clear_key_mismatch(tmp_path: Path) -> None:
    path = checkpoint.save(tmp_path / "c.pt", model=nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2)))
    with pytest.raises(CheckpointError, match=r"does not hold weights for this Sequential.*shape differs: 3 \(0.weight: file \(8, 4\) vs model \(16, 4\)"):
        checkpoint.load(path, nn.Sequential(nn.Linear(4, 16), nn.Linear(16, 2)))
    with pytest.raises(CheckpointError, match=r"missing from the file: 2 \(encoder.weight, encoder.bias\)"):
        checkpoint.load(path, nn.ModuleDict({"encoder": nn.Linear(4, 8)}))


def test_non_strict_load_reports_what_it_skipped(tmp_path: Path) -> None:
    path = checkpoint.save(tmp_path / "c.pt", model=nn.Sequential(nn.Linear(4, 8)))
    with pytest.warns(CheckpointWarning, match="non-strictly"):
        checkpoint.load(path, nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2)), strict=False)


def test_missing_truncated_empty_and_foreign_files_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        checkpoint.load(tmp_path / "nope.pt", _model())
    good = checkpoint.save(tmp_path / "good.pt", model=_model())
    data = good.read_bytes()
    (tmp_path / "half.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated, corrupt or not a PyTorch file"):
        checkpoint.load(tmp_path / "half.pt", _model())
    (tmp_path / "empty.pt").write_bytes(b"")
    with pytest.raises(CheckpointError, match="is empty"):
        checkpoint.load(tmp_path / "empty.pt", _model())
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(CheckpointError, match="not a PyTorch file"):
        checkpoint.load(tmp_path / "notes.txt", _model())
    torch.save([1, 2, 3], tmp_path / "list.pt")
    with pytest.raises(CheckpointError, match="holds a list"):
        checkpoint.load(tmp_path / "list.pt", _model())
    assert issubclass(CheckpointError, InputError)


class Evil:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (print, ("code ran while loading",))


def test_pickled_objects_are_refused_not_executed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch.save({"model": Evil()}, tmp_path / "evil.pt")
    with pytest.raises(CheckpointError, match="weights_only=True"):
        checkpoint.load(tmp_path / "evil.pt", _model())
    assert "code ran" not in capsys.readouterr().out


def test_a_failed_save_leaves_the_previous_checkpoint_intact(tmp_path: Path) -> None:
    model = _model(0)
    path = checkpoint.save(tmp_path / "c.pt", model=model, epoch=1)
    before = path.read_bytes()
    with pytest.raises(Exception):  # a lambda cannot be pickled: the write dies half-way
        checkpoint.save(path, model=_model(1), epoch=2, extra={"f": lambda: 0})
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["c.pt"]  # no temporary file left behind
    assert checkpoint.load(path, _model(2)).epoch == 1


def test_unwritable_directory_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(CheckpointError, match="cannot write a checkpoint in"):
        checkpoint.save(tmp_path / "file" / "c.pt", model=_model())


def test_keep_last_prunes_older_numbered_files_only(tmp_path: Path) -> None:
    (tmp_path / "notes-0001.txt").write_text("unrelated")
    for epoch in (1, 2, 3, 10, 11):
        checkpoint.save(tmp_path / f"epoch-{epoch:04d}.pt", model=_model(), epoch=epoch, keep_last=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch-0010.pt", "epoch-0011.pt", "notes-0001.txt"]
    assert checkpoint.latest(tmp_path) == tmp_path / "epoch-0011.pt"
    assert checkpoint.latest(tmp_path / "missing") is None
    with pytest.raises(CheckpointError, match="keep_last"):
        checkpoint.save(tmp_path / "epoch-0012.pt", model=_model(), keep_last=0)


def test_keep_last_counts_only_complete_checkpoints(tmp_path: Path) -> None:
    import subprocess
    import sys

    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, timeout=60).stdout)
    for epoch in (1, 2):
        checkpoint.save(tmp_path / f"epoch-{epoch:04d}.pt", model=_model(), epoch=epoch)
    (tmp_path / "epoch-0003.pt").write_bytes(b"PK\x03\x04 cut short by a copy")  # not a whole archive
    alive = _files.temp_name(tmp_path / "epoch-0004.pt")  # a save under way in this process
    alive.write_bytes(b"half")
    stale = Path(str(alive).replace(f".{os.getpid()}.", f".{dead}."))  # a killed save
    stale.write_bytes(b"half")
    checkpoint.save(tmp_path / "epoch-0005.pt", model=_model(), epoch=5, keep_last=2)
    # epoch 2 and 5 are the two newest complete ones; the truncated 3 is neither counted nor deleted.
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["epoch-0002.pt", "epoch-0003.pt", "epoch-0005.pt", alive.name])


def test_latest_ignores_leftover_temporary_files(tmp_path: Path) -> None:
    checkpoint.save(tmp_path / "epoch-0001.pt", model=_model())
    (tmp_path / ".epoch-0002.pt.123.abcd.tmp").write_bytes(b"half")
    assert checkpoint.latest(tmp_path) == tmp_path / "epoch-0001.pt"


def test_map_location_places_the_loaded_tensors(tmp_path: Path) -> None:
    path = checkpoint.save(tmp_path / "c.pt", model=_model())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a clean load warns about nothing
        payload = checkpoint.read(path, map_location="meta")
    assert all(t.device.type == "meta" for t in payload["model"].values())


def test_the_file_format_is_fixed_so_older_checkpoints_keep_loading(tmp_path: Path) -> None:
    # Files written by earlier releases say format "torchdoctor-checkpoint", version 1: the marker is
    # a contract with every checkpoint already on disk, not a detail a round trip would notice.
    path = checkpoint.save(tmp_path / "c.pt", model=_model(), epoch=2)
    raw = torch.load(path, weights_only=True)
    assert (raw["format"], raw["version"], raw["epoch"]) == ("torchdoctor-checkpoint", 1, 2)
    old = {"format": "torchdoctor-checkpoint", "version": 1, "model": _model(1).state_dict(), "epoch": 7,
           "step": None, "extra": {}}
    torch.save(old, tmp_path / "old.pt")
    model = _model()
    assert checkpoint.load(tmp_path / "old.pt", model).epoch == 7
    assert torch.equal(model[0].weight, _model(1)[0].weight)


def test_save_creates_the_missing_folders_of_its_path(tmp_path: Path) -> None:
    # fit(checkpoint_dir="runs/exp1/ckpt") on a fresh machine: none of the three folders exists yet.
    path = checkpoint.save(tmp_path / "runs" / "exp1" / "ckpt" / "epoch-0001.pt", model=_model(), epoch=1)
    assert path.is_file() and checkpoint.load(path, _model()).epoch == 1
