"""TD404: optimizer.zero_grad() is missing, so every step adds to the old gradients."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(10, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(20):
    x, y = torch.randn(16, 10), torch.randn(16, 1)
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
print(f"final loss {loss.item():.3f}")
