"""TD302: inputs moved to the device, targets forgotten; explained before PyTorch's error.

Without a GPU, the `meta` device stands in for it, so the example fails the
same way on any machine.
"""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "meta")
data = TensorDataset(torch.randn(64, 10), torch.randint(0, 2, (64,)))
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2)).to(device)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in DataLoader(data, batch_size=16):
    x = x.to(device)
    loss = criterion(model(x), y)  # y is still on the CPU
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
