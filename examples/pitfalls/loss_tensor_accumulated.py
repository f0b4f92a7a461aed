"""TD405: `total += loss` keeps every step's autograd graph alive."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(10, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
total = 0
for step in range(20):
    x, y = torch.randn(16, 10), torch.randn(16, 1)
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    total += loss  # should be loss.item()
print(f"mean loss {total.item() / 20:.3f}")
