"""A correct Accelerate loop (train + evaluation) first, then one that keeps every loss in a list."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accelerate import Accelerator

torch.manual_seed(0)
accelerator = Accelerator(cpu=True)
data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, train, val = accelerator.prepare(model, optimizer, DataLoader(data, batch_size=8, shuffle=True),
                                                   DataLoader(data, batch_size=16))


def epoch(keep=None):
    model.train()
    for x, y in train:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        if keep is not None:
            keep.append(loss)  # the keeper
    model.eval()
    with torch.no_grad():
        for x, y in val:
            accelerator.gather_for_metrics(model(x).argmax(1) == y)


for _ in range(2):
    epoch()
losses = []
epoch(losses)
