"""Step checkpoints: a run interrupted inside an epoch resumes at the last saved step, bit-identical on the CPU."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from torchdoctor.train import FitState, checkpoint, fit
from torchdoctor.train.preload import PreloadedLoader
from tests.train.conftest import Net, make_data

CE = nn.CrossEntropyLoss()
TIMING = ("seconds", "samples_per_s")


class Augmented(Dataset):  # type: ignore[type-arg]
    """Noise drawn in __getitem__ from the global RNG: data loading and dropout share one random stream."""

    def __init__(self, n: int = 96) -> None:
        self.x, self.y = make_data(n).tensors

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i] + 0.1 * torch.randn(8), self.y[i]


class _Crash(Exception):
    pass


class _StopAt:
    def __init__(self, step: int | None) -> None:
        self.step = step

    def on_step_end(self, state: FitState) -> None:
        if state.step == self.step:
            raise _Crash


def _train(tmp: Path, loader: str = "dataloader", stop_at: int | None = None, every: int = 2, accum: int = 1,
           seed: int = 0) -> tuple[nn.Module, list[dict[str, Any]]]:  # fmt: skip
    torch.manual_seed(seed)
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1 / (1 + 0.1 * step))
    if loader == "dataloader":
        train: Any = DataLoader(Augmented(), batch_size=8, shuffle=True)
    elif loader == "generator":  # the loader's own generator, not the global RNG, shuffles
        train = DataLoader(Augmented(), batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(5))
    else:
        train = PreloadedLoader(make_data(), "cpu", batch_size=8)
    history = fit(model, train, loss_fn=CE, optimizer=opt, epochs=3, val_loader=DataLoader(make_data(32), batch_size=16),
                  scheduler=sched, scheduler_interval="step", checkpoint_dir=tmp, checkpoint_every=every,
                  grad_accum_steps=accum, metrics={"acc": lambda out, y: (out.argmax(1) == y).float().mean()},
                  callbacks=[_StopAt(stop_at)], log_every=5, keep_last=2, progress=False)  # fmt: skip
    return model, [{k: v for k, v in row.items() if k not in TIMING} for row in history.rows]


def _same(a: nn.Module, b: nn.Module) -> None:
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), name


@pytest.mark.parametrize(("loader", "stop_at", "accum"), [
    ("dataloader", 5, 1), ("dataloader", 19, 1), ("generator", 9, 1), ("preloaded", 15, 1), ("dataloader", 17, 2),
])  # fmt: skip
def test_interrupted_inside_an_epoch_resumes_bit_identical(tmp_path: Path, loader: str, stop_at: int, accum: int) -> None:
    straight, rows = _train(tmp_path / "straight", loader, accum=accum)
    with pytest.raises(_Crash):
        _train(tmp_path / "broken", loader, stop_at=stop_at, accum=accum)
    newest = checkpoint.latest(tmp_path / "broken")
    assert newest is not None and "-step-" in newest.name  # the interruption came between step checkpoints
    torch.manual_seed(1234)  # whatever RNG state a new process happens to have
    resumed, resumed_rows = _train(tmp_path / "broken", loader, accum=accum, seed=99)
    assert resumed_rows == rows
    _same(straight, resumed)


def test_step_checkpoints_are_named_by_epoch_and_step_and_pruned_together(tmp_path: Path) -> None:
    with pytest.raises(_Crash):
        _train(tmp_path, every=4, stop_at=21)
    # 12 steps per epoch: saved at steps 4, 8, the end of epoch 1 (not at 12 as a step too), 16 and 20;
    # keep_last=2 counts both kinds together.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch-0002-step-00000016.pt", "epoch-0002-step-00000020.pt", "metrics.csv"]
    saved = torch.load(tmp_path / "epoch-0002-step-00000020.pt", map_location="cpu", weights_only=True)
    assert (saved["epoch"], saved["step"], saved["extra"]["position"], saved["extra"]["updates"]) == (1, 20, 8, 20)
    info = checkpoint.load(tmp_path / "epoch-0002-step-00000020.pt", Net())
    assert info.epoch == 1 and info.step == 20


def test_a_resumed_epoch_skips_by_index_without_loading_the_trained_batches(tmp_path: Path) -> None:
    class Counting(Augmented):
        loads = 0

        def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
            Counting.loads += 1
            return super().__getitem__(i)

    def train(stop_at: int | None) -> None:
        torch.manual_seed(0)
        model = Net()
        fit(model, DataLoader(Counting(), batch_size=8, shuffle=True), loss_fn=CE, epochs=1, checkpoint_every=3,
            optimizer=torch.optim.SGD(model.parameters(), lr=0.1), checkpoint_dir=tmp_path,
            callbacks=[_StopAt(stop_at)], progress=False)  # fmt: skip

    with pytest.raises(_Crash):
        train(stop_at=8)  # saved at step 6
    Counting.loads = 0
    train(stop_at=None)
    assert Counting.loads == 96 - 6 * 8  # only the six remaining batches were loaded


def test_a_checkpoint_from_another_world_size_restarts_the_shuffle_with_a_warning(tmp_path: Path) -> None:
    with pytest.raises(_Crash):
        _train(tmp_path, stop_at=5)
    path = checkpoint.latest(tmp_path)
    assert path is not None
    payload = torch.load(path, map_location="cpu", weights_only=True)
    payload["extra"]["rng"] = payload["extra"]["rng"] * 2  # as if two ranks had written it
    torch.save(payload, path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, rows = _train(tmp_path)
    assert any("written by 2 rank(s), this run has 1" in str(w.message) for w in caught)
    assert [row["epoch"] for row in rows] == [1, 2, 3] and rows[0]["step"] == 12
