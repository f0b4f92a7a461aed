"""Run by test_distributed.py under torchrun: fit() on two gloo ranks; each rank writes what it saw."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from torchdoctor.train import fit


class Counting(nn.Module):
    """Counts the training samples this rank's model sees."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 3))
        self.seen = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.seen += x.shape[0]
        return self.net(x)


def main() -> None:
    if hasattr(signal, "alarm"):
        signal.alarm(450)  # never outlive the test: a rank orphaned by a killed launcher would wait for ever
    out, epochs = Path(sys.argv[1]), int(sys.argv[2])
    rank = int(os.environ["RANK"])
    torch.manual_seed(rank)  # different initial weights per rank: DDP must broadcast rank 0's
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(96, 8, generator=gen)
    data = TensorDataset(x, (x[:, 0] > 0).long())
    model = Counting()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    history = fit(model, DataLoader(data, batch_size=8, shuffle=True), loss_fn=nn.CrossEntropyLoss(), optimizer=opt,
                  epochs=epochs, val_loader=DataLoader(data, batch_size=16), checkpoint_dir=out / "ckpt",
                  log_every=2, progress=False)  # fmt: skip
    torch.save(model.state_dict(), out / f"weights-{rank}.pt")
    report = {"history": history.rows, "seen": model.seen}
    (out / f"report-{rank}.json").write_text(json.dumps(report))  # noqa: TD703 - one file per rank


if __name__ == "__main__":
    main()
