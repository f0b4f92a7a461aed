"""A run killed mid-way and resumed gives bit-for-bit the losses and weights of an uninterrupted run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from torchdoctor.errors import UsageError
from torchdoctor.train import FitState, fit
from tests.train.conftest import make_run

CE = nn.CrossEntropyLoss()


class _Crash(Exception):
    pass


class _KillAt:
    """Dies in the middle of an epoch, as a killed process would (after the last checkpoint)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, state: FitState) -> None:
        if state.step == self.step:
            raise _Crash


def _train(tmp: Path, epochs: int, seed: int, kill_at: int | None = None) -> tuple[nn.Module, list[dict[str, float]]]:
    model, opt, train, val = make_run(seed)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    callbacks = [_KillAt(kill_at)] if kill_at else []
    history = fit(model, train, loss_fn=CE, optimizer=opt, epochs=epochs, val_loader=val, scheduler=sched,
                  checkpoint_dir=tmp, callbacks=callbacks, log_every=4, progress=False)  # fmt: skip
    return model, history.rows


def test_killed_and_resumed_run_matches_an_uninterrupted_one_bitwise(tmp_path: Path) -> None:
    straight, rows = _train(tmp_path / "straight", epochs=4, seed=0)

    with pytest.raises(_Crash):  # dies in epoch 3 (6 batches per epoch), after epoch 2's checkpoint
        _train(tmp_path / "broken", epochs=4, seed=0, kill_at=15)
    torch.manual_seed(1234)  # a new process: whatever RNG state it happens to have
    resumed, resumed_rows = _train(tmp_path / "broken", epochs=4, seed=99)  # other initial weights too

    keys = ["epoch", "step", "train_loss", "val_loss", "lr"]
    assert [[r[k] for k in keys] for r in resumed_rows] == [[r[k] for k in keys] for r in rows]
    for a, b in zip(straight.state_dict().values(), resumed.state_dict().values()):
        assert torch.equal(a, b)
    csv = (tmp_path / "broken" / "metrics.csv").read_text().splitlines()
    assert len(csv) == 5  # the history survived the crash


def test_finished_runs_do_nothing_and_resume_false_never_mixes_runs(tmp_path: Path) -> None:
    _, rows = _train(tmp_path, epochs=2, seed=0)
    _, again = _train(tmp_path, epochs=2, seed=0)  # resume=True and already done: no training
    assert again == rows
    model, opt, train, _ = make_run(0)
    with pytest.raises(UsageError, match=r"already holds checkpoints \(epoch-0002.pt\); pass resume=True"):
        fit(model, train, loss_fn=CE, optimizer=opt, epochs=1, checkpoint_dir=tmp_path, resume=False, progress=False)
    fresh = fit(model, train, loss_fn=CE, optimizer=opt, epochs=1, checkpoint_dir=tmp_path / "new", resume=False, progress=False)
    assert fresh["epoch"] == [1]
