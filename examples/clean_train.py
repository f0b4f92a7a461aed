"""A clean training script: `torchdoctor run` and `torchdoctor check` report nothing on it."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def make_loaders(use_cuda: bool) -> tuple[DataLoader, DataLoader]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(512, 20, generator=generator)
    y = (x[:, :5].sum(dim=1) > 0).long()
    workers = 2 if use_cuda else 0
    train = DataLoader(TensorDataset(x[:384], y[:384]), batch_size=32, shuffle=True,
                       num_workers=workers, pin_memory=use_cuda)
    val = DataLoader(TensorDataset(x[384:], y[384:]), batch_size=64, num_workers=workers, pin_memory=use_cuda)
    return train, val


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader, device: torch.device) -> float:
    model.eval()
    correct = 0
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        correct += (model(x).argmax(dim=1) == y).sum()
    return correct.item() / len(loader.dataset)


def main() -> None:
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train, val = make_loaders(device.type == "cuda")
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 2)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    criterion = nn.CrossEntropyLoss()
    for epoch in range(3):
        model.train()
        running = torch.zeros((), device=device)
        for x, y in train:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            running += loss.detach()
        accuracy = evaluate(model, val, device)
        print(f"epoch {epoch}: loss {running.item() / len(train):.3f}, val accuracy {accuracy:.2f}")


if __name__ == "__main__":
    main()
