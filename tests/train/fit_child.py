"""Run by test_fit_kill_resume.py in a subprocess: fit() with step checkpoints, announcing each step it finishes."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from torchdoctor.train import FitState, fit


class Augmented(Dataset):  # type: ignore[type-arg]
    """Noise drawn in __getitem__ from the global RNG, beside the model's dropout."""

    def __init__(self, n: int = 64) -> None:
        gen = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 8, generator=gen)
        self.y = (self.x[:, 0] > 0).long() + (self.x[:, 1] > 1).long()

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i] + 0.1 * torch.randn(8), self.y[i]


class Announce:
    def on_step_end(self, state: FitState) -> None:
        print("step", state.step, flush=True)


def train(out: Path, ckpt: Path, announce: bool = True) -> None:
    """Train, checkpointing every 2 steps in ``ckpt``; write the weights and the history in ``out``."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 3))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.8)
    history = fit(model, DataLoader(Augmented(), batch_size=8, shuffle=True), loss_fn=nn.CrossEntropyLoss(),
                  optimizer=opt, epochs=3, val_loader=DataLoader(Augmented(16), batch_size=16), scheduler=sched,
                  scheduler_interval="step", checkpoint_dir=ckpt, checkpoint_every=2, callbacks=[Announce()] if announce else [],
                  log_every=5, progress=False)  # fmt: skip
    if announce:
        sys.stdin.read()  # the test closes our stdin unless it means to kill us first: then we never get here
    torch.save(model.state_dict(), out / "weights.pt")
    rows = [{k: v for k, v in row.items() if k not in ("seconds", "samples_per_s")} for row in history.rows]
    (out / "history.json").write_text(json.dumps(rows))


def main() -> None:
    if hasattr(signal, "alarm"):
        signal.alarm(300)  # never outlive the test that started it
    torch.set_num_threads(1)  # the same kernels' summation order in every run
    train(Path(sys.argv[1]), Path(sys.argv[2]))
    print("finished", flush=True)


if __name__ == "__main__":
    main()
