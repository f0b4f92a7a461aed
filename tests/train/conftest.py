"""Small synthetic problems for the fit() tests (nothing is downloaded)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    """A tiny classifier with dropout, so that RNG state and train/eval mode both matter."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def make_data(n: int = 96, seed: int = 0) -> TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=gen)
    return TensorDataset(x, (x[:, 0] > 0).long() + (x[:, 1] > 1).long())


def make_run(seed: int = 0, lr: float = 0.1) -> tuple[Net, torch.optim.Optimizer, DataLoader, DataLoader]:  # type: ignore[type-arg]
    torch.manual_seed(seed)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    data = make_data()
    return model, optimizer, DataLoader(data, batch_size=16, shuffle=True), DataLoader(data, batch_size=32)


@pytest.fixture
def run() -> tuple[Net, torch.optim.Optimizer, DataLoader, DataLoader]:  # type: ignore[type-arg]
    return make_run()
