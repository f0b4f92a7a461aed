"""TD405 inside a function whose frame is gone when the run ends: judged while the losses live."""

import torch
from torch import nn


def train(model, optimizer, steps):
    history = []
    for _ in range(steps):
        x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        history.append(loss)  # the keeper
    return [h.item() for h in history]


torch.manual_seed(0)
net = nn.Linear(4, 2)
print(len(train(net, torch.optim.SGD(net.parameters(), lr=0.1), 6)))
