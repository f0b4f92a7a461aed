"""TD701: DistributedSampler without set_epoch(): every epoch sees the same order."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

torch.manual_seed(0)
data = TensorDataset(torch.randn(128, 10), torch.randn(128, 1))
sampler = DistributedSampler(data, num_replicas=2, rank=0, shuffle=True)  # as under torchrun
loader = DataLoader(data, batch_size=16, sampler=sampler)
model = nn.Linear(10, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(3):
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
