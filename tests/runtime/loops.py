"""Small real training loops for the watch tests: synthetic data, CPU, a fraction of a second each."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def data(n: int = 64, features: int = 8) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, features, generator=g), torch.randint(0, 2, (n,), generator=g))


def net(dropout: bool = True) -> nn.Module:
    layers: list[nn.Module] = [nn.Linear(8, 16), nn.ReLU()]
    if dropout:
        layers.append(nn.Dropout(0.1))
    return nn.Sequential(*layers, nn.Linear(16, 2))


def setup(dropout: bool = True) -> tuple[nn.Module, torch.optim.Optimizer, DataLoader, DataLoader]:
    torch.manual_seed(0)
    model = net(dropout)
    ds = data()
    return model, torch.optim.SGD(model.parameters(), lr=0.1), DataLoader(ds, batch_size=8, shuffle=True), DataLoader(ds, batch_size=16)


def train_epoch(model: nn.Module, opt: torch.optim.Optimizer, loader: DataLoader, *, zero: bool = True) -> list[float]:
    losses = []
    for x, y in loader:
        if zero:
            opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses
