"""Run by test_distributed.py under torchrun: fit() three times in one process, as a sweep would."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from torchdoctor.train import fit


def main() -> None:
    if hasattr(signal, "alarm"):
        signal.alarm(300)  # never outlive the test (see ddp_worker.py)
    out, rank = Path(sys.argv[1]), int(os.environ["RANK"])
    rows = []
    for run in range(3):
        torch.manual_seed(run)
        x = torch.randn(32, 8)
        model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
        history = fit(model, DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=8, shuffle=True),
                      loss_fn=nn.CrossEntropyLoss(), optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                      epochs=1, progress=False)  # fmt: skip
        # Still joined: leaving here is what hung a rank (distributed.teardown), and re-joining
        # would read the previous group's addresses from the store.
        rows.append({"loss": history[-1]["train_loss"], "joined": dist.is_initialized()})
    (out / f"refit-{rank}.json").write_text(json.dumps(rows))  # noqa: TD703 - one file per rank


if __name__ == "__main__":
    main()
