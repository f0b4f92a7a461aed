"""TD402: validation runs with dropout still active (model.eval() forgotten)."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
data = TensorDataset(torch.randn(256, 10), torch.randint(0, 2, (256,)))
train, val = DataLoader(data, batch_size=32, shuffle=True), DataLoader(data, batch_size=64)
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
criterion = nn.CrossEntropyLoss()
for epoch in range(2):
    for x, y in train:
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()
    with torch.no_grad():  # but the model is still in training mode
        correct = sum((model(x).argmax(1) == y).sum().item() for x, y in val)
    print(f"epoch {epoch}: accuracy {correct / len(data):.2f}")
