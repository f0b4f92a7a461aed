"""TD403: model.eval() for validation, and training never switches back to model.train()."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
data = TensorDataset(torch.randn(256, 10), torch.randint(0, 2, (256,)))
train, val = DataLoader(data, batch_size=32, shuffle=True), DataLoader(data, batch_size=64)
model = nn.Sequential(nn.Linear(10, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
criterion = nn.CrossEntropyLoss()
model.train()
for epoch in range(3):
    for x, y in train:
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        correct = sum((model(x).argmax(1) == y).sum().item() for x, y in val)
    print(f"epoch {epoch}: accuracy {correct / len(data):.2f}")
