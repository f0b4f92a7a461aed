"""Run by test_multinode.py: fit() as one rank of a 2-node torchrun launch; writes what this rank saw."""

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


def main() -> None:
    if hasattr(signal, "alarm"):
        signal.alarm(400)  # never outlive the test
    out = Path(sys.argv[1])
    rank = int(os.environ["RANK"])
    torch.manual_seed(rank)  # different initial weights per node: DDP must broadcast rank 0's
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=gen)
    data = TensorDataset(x, (x[:, 0] > 0).long())
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    # A metric that is this rank's number: averaged over both ranks it is 0.5 on both.
    history = fit(model, DataLoader(data, batch_size=8, shuffle=True), loss_fn=nn.CrossEntropyLoss(),
                  optimizer=torch.optim.SGD(model.parameters(), lr=0.1), epochs=2, checkpoint_dir=out / "ckpt",
                  checkpoint_every=3, metrics={"rank": lambda out, y: float(rank)}, progress=False)  # fmt: skip
    torch.save(model.state_dict(), out / f"weights-{rank}.pt")
    rows = [{k: v for k, v in row.items() if k not in ("seconds", "samples_per_s")} for row in history.rows]
    (out / f"report-{rank}.json").write_text(json.dumps({"history": rows, "node": os.environ.get("GROUP_RANK")}))  # noqa: TD703


if __name__ == "__main__":
    main()
