"""Image classification split into train_one_epoch / evaluate / main, as many projects structure it."""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, random_split
from torchvision import datasets, transforms


class SmallVGG(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(128, 256, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Dropout(0.5), nn.Linear(256 * 16, 512), nn.ReLU(),
                                        nn.Dropout(0.5), nn.Linear(512, num_classes))

    def forward(self, x):
        return self.classifier(self.features(x))


def train_one_epoch(model, loader, optimizer, criterion, device):
    running_loss, seen = 0.0, 0
    start = time.time()
    for images, targets in loader:
        images, targets = images.to(device), targets.to(device)
        optimizer.zero_grad()
        loss = criterion(model(images), targets)
        loss.backward()
        optimizer.step()
        running_loss += loss.item() * images.size(0)  # expect: TD603
        seen += images.size(0)
        torch.cuda.empty_cache()  # expect: TD602
    print(f"  train: {running_loss / seen:.4f} ({time.time() - start:.1f}s)")
    return running_loss / seen


def evaluate(model, loader, criterion, device):
    model.eval()  # expect: TD403
    total_loss, correct, seen = 0.0, 0, 0
    for images, targets in loader:
        images = images.to(device)
        outputs = model(images)  # expect: TD401
        total_loss += criterion(outputs, targets).item() * images.size(0)  # expect: TD302, TD603
        correct += (outputs.argmax(dim=1).cpu() == targets).sum().item()  # expect: TD603
        seen += images.size(0)
    return total_loss / seen, correct / seen


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    tf = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.5,) * 3, (0.5,) * 3)])
    full = datasets.CIFAR10("data", train=True, download=True, transform=tf)
    train_set, val_set = random_split(full, [45000, 5000], generator=torch.Generator().manual_seed(0))
    loader_kwargs = {"num_workers": args.workers, "pin_memory": device.type == "cuda"}
    train_loader = DataLoader(train_set, batch_size=128, shuffle=True, **loader_kwargs)
    val_loader = DataLoader(val_set, batch_size=256, **loader_kwargs)

    model = SmallVGG().to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, nesterov=True)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=8, gamma=0.1)

    best = 0.0
    for epoch in range(args.epochs):
        print(f"epoch {epoch + 1}/{args.epochs}")
        train_one_epoch(model, train_loader, optimizer, criterion, device)
        val_loss, val_acc = evaluate(model, val_loader, criterion, device)
        scheduler.step()
        torch.cuda.empty_cache()
        print(f"  val: loss {val_loss:.4f} acc {val_acc:.4f}")
        if val_acc > best:
            best = val_acc
            torch.save(model.state_dict(), "best.pt")


if __name__ == "__main__":
    main()
