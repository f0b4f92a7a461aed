"""Model parallel with fit(): a model split into two stages over two GPUs stays where its author put it.

Run: python examples/train_model_parallel.py [--epochs 2]
With two GPUs, stage 1 lives on cuda:0 and stage 2 on cuda:1. fit() sees
parameters on several devices and leaves them there (it never moves such a
model to one device), sends each batch to cuda:0, the device of the first
parameter, and each target to the output's device, cuda:1, where the loss is
computed. With fewer GPUs both stages share one device and fit() places the
model as usual, so the script runs anywhere.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from torchdoctor import fit


class TwoStage(nn.Module):
    """An encoder on one device feeding a head on another; the hand-off is the one copy between them."""

    def __init__(self, first: torch.device, second: torch.device) -> None:
        super().__init__()
        self.second = second
        self.stage1 = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU()).to(first)
        self.stage2 = nn.Sequential(nn.Dropout(0.1), nn.Linear(256, 4)).to(second)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stage2(self.stage1(x).to(self.second))


def devices() -> tuple[torch.device, torch.device]:
    if torch.cuda.device_count() >= 2:
        return torch.device("cuda", 0), torch.device("cuda", 1)
    one = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    return one, one


def synthetic(n: int, seed: int) -> TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 32, generator=gen)
    return TensorDataset(x, (x[:, :4].argmax(dim=1)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    first, second = devices()
    model = TwoStage(first, second)
    pin = torch.cuda.is_available()
    history = fit(
        model,
        DataLoader(synthetic(2048, 1), batch_size=64, shuffle=True, pin_memory=pin),
        loss_fn=nn.CrossEntropyLoss(),
        optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3),
        epochs=args.epochs,
        val_loader=DataLoader(synthetic(512, 2), batch_size=256, pin_memory=pin),
        metrics={"acc": lambda out, y: (out.argmax(dim=1) == y).float().mean()},
        progress=False,
    )
    print(f"stages on {first} and {second}: val_loss={history[-1]['val_loss']:.3f}, val_acc={history[-1]['val_acc']:.1%}")


if __name__ == "__main__":
    main()
