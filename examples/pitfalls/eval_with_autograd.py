"""TD401: evaluation builds autograd graphs it never uses (no torch.no_grad())."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
data = TensorDataset(torch.randn(256, 10), torch.randint(0, 2, (256,)))
train, val = DataLoader(data, batch_size=32, shuffle=True), DataLoader(data, batch_size=64)
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
criterion = nn.CrossEntropyLoss()
for epoch in range(2):
    model.train()
    for x, y in train:
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()
    model.eval()
    val_loss = sum(criterion(model(x), y).item() for x, y in val)  # graphs built for nothing
    print(f"epoch {epoch}: val loss {val_loss:.3f}")
