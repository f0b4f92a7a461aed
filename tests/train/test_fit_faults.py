"""fit() on bad input and faults: clear errors, raised before training, nothing broken saved."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from torchdoctor.errors import InputError, TorchDoctorError, UsageError
from torchdoctor.train import CheckpointError, TrainingError, checkpoint, fit

CE = nn.CrossEntropyLoss()


def test_model_without_parameters_is_refused(run: Any) -> None:
    _, opt, train, _ = run
    with pytest.raises(InputError, match="no trainable parameters"):
        fit(nn.ReLU(), train, loss_fn=CE, optimizer=opt, epochs=1, progress=False)


def test_optimizer_of_another_model_is_refused(run: Any) -> None:
    model, _, train, _ = run
    other = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1)
    with pytest.raises(InputError, match="optimizer holds 2 parameter"):
        fit(model, train, loss_fn=CE, optimizer=other, epochs=1, progress=False)


def test_empty_loader_is_refused_before_training(run: Any) -> None:
    model, opt, _, _ = run
    empty = DataLoader(TensorDataset(torch.zeros(3, 8), torch.zeros(3, dtype=torch.long)), batch_size=4, drop_last=True)
    with pytest.raises(InputError, match="train_loader is empty"):
        fit(model, empty, loss_fn=CE, optimizer=opt, epochs=1, progress=False)
    with pytest.raises(InputError, match="yielded no batches in epoch 1"):
        fit(model, iter(()), loss_fn=CE, optimizer=opt, epochs=1, progress=False)  # no len(): found at the end


def test_batches_fit_cannot_use_are_a_clear_error_naming_their_type(run: Any) -> None:
    model, opt, _, _ = run
    with pytest.raises(InputError, match=r"cannot use a batch that is a tuple of 1: each batch must be \(inputs, targets, \.\.\.\)"):
        fit(model, [(torch.zeros(2, 8),)], loss_fn=CE, optimizer=opt, epochs=1, progress=False)
    with pytest.raises(InputError, match=r"cannot use a batch that is a Tensor.*step_fn="):
        fit(model, [torch.zeros(2, 8)], loss_fn=CE, optimizer=opt, epochs=1, progress=False)
    with pytest.raises(InputError, match=r"batch that is a builtins.str"):
        fit(model, ["not a batch"], loss_fn=CE, optimizer=opt, epochs=1, progress=False)


@pytest.mark.parametrize(
    ("option", "value"), [("epochs", 0), ("grad_accum_steps", 0), ("log_every", -1), ("scheduler_interval", "batch")]
)
def test_bad_options_are_usage_errors(run: Any, option: str, value: Any) -> None:
    model, opt, train, _ = run
    kwargs: dict[str, Any] = {"loss_fn": CE, "optimizer": opt, "epochs": 1, option: value}
    with pytest.raises(UsageError, match=option):
        fit(model, train, progress=False, **kwargs)


def test_unwritable_checkpoint_dir_fails_before_any_training(tmp_path: Path, run: Any) -> None:
    model, opt, train, _ = run
    (tmp_path / "a-file").write_text("not a directory")
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(CheckpointError, match="is not a writable directory.*nothing was trained"):
        fit(model, train, loss_fn=CE, optimizer=opt, epochs=1, checkpoint_dir=tmp_path / "a-file" / "ckpt", progress=False)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), before))


def test_nan_loss_stops_at_the_step_that_made_it_and_saves_nothing_after(tmp_path: Path, run: Any) -> None:
    model, opt, train, _ = run
    calls = {"n": 0}

    def poisoned(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        loss = CE(out, target)
        return loss * float("nan") if calls["n"] == 9 else loss  # step 9 = epoch 2, third batch

    with pytest.raises(TrainingError, match=r"training loss at epoch 2, step 9 is nan: training stopped") as err:
        fit(model, train, loss_fn=poisoned, optimizer=opt, epochs=3, checkpoint_dir=tmp_path, log_every=50, progress=False)
    assert isinstance(err.value, TorchDoctorError) and "clip_grad_norm" in str(err.value)
    assert [p.name for p in tmp_path.glob("epoch-*.pt")] == ["epoch-0001.pt"]  # only the good epoch
    loaded = checkpoint.load(tmp_path / "epoch-0001.pt", type(model)())
    assert loaded.epoch == 1


def test_resuming_with_a_checkpoint_of_another_model_reports_the_keys(tmp_path: Path, run: Any) -> None:
    model, opt, train, _ = run
    checkpoint.save(tmp_path / "epoch-0001.pt", model=nn.Linear(8, 3), epoch=1, step=6)
    with pytest.raises(CheckpointError, match=r"does not hold weights for this Net; missing from the file: 4 \(body.0.weight"):
        fit(model, train, loss_fn=CE, optimizer=opt, epochs=2, checkpoint_dir=tmp_path, progress=False)
