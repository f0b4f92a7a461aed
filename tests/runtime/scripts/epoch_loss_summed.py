"""TD405: a loss summed per epoch over a few steps and read once per epoch (the graph lives until the reset)."""

import torch
from torch import nn


def make():
    return nn.Sequential(nn.Linear(10, 8), nn.ReLU(), nn.Linear(8, 1))


torch.manual_seed(0)
model = make()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(3):
    epoch_loss = 0
    for step in range(5):
        x, y = torch.randn(16, 10), torch.randn(16, 1)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        epoch_loss += loss  # the keeper
    print(f"epoch {epoch}: {epoch_loss.item() / 5:.3f}")
