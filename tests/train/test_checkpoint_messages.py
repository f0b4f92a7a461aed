"""What checkpoint.load says, word for word: the notes, the warnings (at the caller's line) and every error."""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from torchdoctor.train import checkpoint
from torchdoctor.train.checkpoint import CheckpointError, CheckpointWarning


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def _opt_sched(model: nn.Module) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.StepLR]:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return opt, torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)


def test_load_passes_map_location_and_says_which_file(tmp_path: Path, monkeypatch) -> None:
    path = checkpoint.save(tmp_path / "c.pt", model=_model())
    assert all(t.device.type == "cpu" for t in checkpoint.read(path)["model"].values())  # the default place
    seen = []
    real = checkpoint.read
    monkeypatch.setattr(checkpoint, "read", lambda source, where: seen.append(where) or real(source, where))
    assert checkpoint.load(path, _model(), map_location="cpu").path == path
    assert seen == ["cpu"]


def test_states_the_file_lacks_are_named_and_the_others_still_load(tmp_path: Path) -> None:
    model = _model()
    opt, sched = _opt_sched(model)
    sched.step()
    path = checkpoint.save(tmp_path / "c.pt", model=model, scheduler=sched)  # no optimizer, no scaler state
    other = _model(1)
    other_opt, other_sched = _opt_sched(other)
    scaler = torch.amp.GradScaler("cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = checkpoint.load(path, other, other_opt, scaler, other_sched)
    assert result.notes == [f"{path}: holds no optimizer state; the optimizer starts fresh",
                            f"{path}: holds no scaler state; the scaler starts fresh"]
    assert other_sched.last_epoch == 1  # loaded although the optimizer before it was missing
    assert [str(w.message) for w in caught if w.category is CheckpointWarning] == result.notes
    assert all(w.filename == __file__ for w in caught)  # the warning points at the caller, not at checkpoint.py


def test_a_scheduler_alone_is_restored(tmp_path: Path) -> None:
    model = _model()
    opt, sched = _opt_sched(model)
    sched.step()
    sched.step()
    path = checkpoint.save(tmp_path / "c.pt", model=model, optimizer=opt, scheduler=sched)
    _, other_sched = _opt_sched(_model(1))
    checkpoint.load(path, _model(1), scheduler=other_sched)
    assert other_sched.last_epoch == 2


def test_a_state_that_does_not_fit_names_the_object(tmp_path: Path) -> None:
    model = _model()
    opt, _ = _opt_sched(model)
    path = checkpoint.save(tmp_path / "c.pt", model=model, optimizer=opt)
    other = _model()
    wrong = torch.optim.SGD([{"params": [other[0].weight]}, {"params": [other[0].bias]}], lr=0.1)  # 2 groups, not 1
    with pytest.raises(CheckpointError, match=rf"^{path}: the saved optimizer state does not fit this optimizer: "):
        checkpoint.load(path, other, wrong)


def test_prefix_notes_name_the_file_and_warn_at_the_caller(tmp_path: Path) -> None:
    path = tmp_path / "dp.pt"
    torch.save({f"module.{k}": v for k, v in _model().state_dict().items()}, path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = checkpoint.load(path, _model(1))
    assert result.notes == [f"{path}: stripped the prefix 'module.' on 4 key(s) to match the model "
                            "(the file was saved from a DataParallel/DDP/compiled wrapper, TD205)"]
    assert [w.filename for w in caught] == [__file__]


def test_file_errors_word_for_word(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError) as info:
        checkpoint.read(tmp_path / "nope.pt")
    assert str(info.value) == f"no checkpoint at {str(tmp_path / 'nope.pt')!r}"
    with pytest.raises(CheckpointError) as info:
        checkpoint.read(tmp_path)
    assert str(info.value) == f"{str(tmp_path)!r} is a directory, not a checkpoint file"
    torch.save([1, 2, 3], tmp_path / "list.pt")
    with pytest.raises(CheckpointError) as info:
        checkpoint.read(tmp_path / "list.pt")
    assert str(info.value) == (f"{str(tmp_path / 'list.pt')!r} is not a checkpoint: it holds a list, "
                               "not a torchdoctor checkpoint, a state_dict or one under 'model', 'state_dict', 'model_state_dict'")


def test_unreadable_files_are_described_by_what_went_wrong(tmp_path: Path) -> None:
    path = tmp_path / "c.pt"
    path.write_bytes(b"12345")
    describe = checkpoint._describe_unreadable
    assert describe(path, RuntimeError("first line\nsecond line")) == (
        f"{str(path)!r} is truncated, corrupt or not a PyTorch file (5 bytes): first line")
    assert describe(path, EOFError()) == f"{str(path)!r} is truncated, corrupt or not a PyTorch file (5 bytes): EOFError"
    refused = (f"{str(path)!r} holds pickled Python objects that a safe load refuses (weights_only=True): "
               "{}. Save state_dicts, not whole objects")
    for text in ("Weights only load failed.", "In PyTorch 2.6, we changed the default value of weights_only"):
        assert describe(path, pickle.UnpicklingError(text)) == refused.format(text)
    path.write_bytes(b"")
    assert describe(path, EOFError("Ran out of input")) == (
        f"{str(path)!r} is empty (0 bytes): a write was interrupted; use an earlier checkpoint")


def test_key_mismatches_word_for_word(tmp_path: Path) -> None:
    path = checkpoint.save(tmp_path / "c.pt", model=nn.ModuleDict({"a": nn.Linear(2, 2), "extra": nn.Linear(2, 2)}))
    target = nn.ModuleDict({"a": nn.Linear(2, 2)})
    # Only unexpected keys, strict: our error, not the raw RuntimeError of load_state_dict.
    with pytest.raises(CheckpointError) as info:
        checkpoint.load(path, target)
    assert str(info.value) == (f"{str(path)!r} does not hold weights for this ModuleDict; in the file but not in the "
                               "model: 2 (extra.weight, extra.bias). Was it saved from another model?")
    with pytest.warns(CheckpointWarning) as caught:
        result = checkpoint.load(path, target, strict=False)
    assert result.notes == [f"{path}: loaded non-strictly; missing none, unexpected 2 (extra.weight, extra.bias)"]
    assert caught[0].filename == __file__


@pytest.mark.parametrize("count, shown", [
    (5, "5 (k0, k1, k2, k3, k4)"),
    (6, "6 (k0, k1, k2, k3, k4, ...)"),
])
def test_long_key_lists_are_cut_after_five(count: int, shown: str) -> None:
    assert checkpoint._few([f"k{i}" for i in range(count)]) == shown
    assert checkpoint._few([]) == "none"
