"""The same classifier as buggy_train.py, done right: `torchdoctor check` finds nothing here.

One `device` decides where everything lives; buffers, loss weights and new
tensors follow it; AMP and pinned memory turn themselves off on the CPU;
values are read back once per epoch, not once per step.
"""

import os
import tempfile

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
use_cuda = device.type == "cuda"
out_dir = os.environ.get("CHECKPOINT_DIR") or tempfile.mkdtemp(prefix="fixed_train_")


def make_data(n, prototypes):
    """Synthetic 32x32 RGB images: a class prototype plus noise."""
    labels = torch.randint(0, 10, (n,))
    images = prototypes[labels] + 0.5 * torch.randn(n, 3, 32, 32)
    return TensorDataset(images, labels)


class Net(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        # A buffer follows model.to(device) and is saved in the state_dict.
        self.register_buffer("mean", torch.tensor([0.5, 0.5, 0.5]))
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(0.2), nn.Linear(16 * 8 * 8, num_classes))

    def forward(self, x):
        x = x - self.mean.view(1, 3, 1, 1)
        return self.head(self.features(x))


def main():
    prototypes = torch.rand(10, 3, 32, 32)
    train_set, val_set = make_data(512, prototypes), make_data(128, prototypes)
    # On a GPU, workers prepare batches while it computes and pinned batches copy
    # asynchronously; on the CPU, workers would only compete with training for the cores.
    workers = 2 if use_cuda else 0
    train_loader = DataLoader(train_set, batch_size=64, shuffle=True, num_workers=workers,
                              pin_memory=use_cuda, persistent_workers=workers > 0)
    val_loader = DataLoader(val_set, batch_size=128, num_workers=workers,
                            pin_memory=use_cuda, persistent_workers=workers > 0)

    model = Net().to(device)
    class_weights = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 1.0, 1.0, 1.0, 1.0], device=device)
    criterion = nn.CrossEntropyLoss(weight=class_weights)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda", enabled=use_cuda)

    for epoch in range(3):
        model.train()
        running_loss = torch.zeros((), device=device)
        for images, labels in train_loader:
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            images = images + 0.05 * torch.randn_like(images)
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device_type=device.type, enabled=use_cuda):
                outputs = model(images)
                loss = criterion(outputs, labels)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            running_loss += loss.detach()  # stays on the device: no sync per step

        model.eval()
        correct = torch.zeros((), device=device, dtype=torch.long)
        with torch.no_grad():
            for images, labels in val_loader:
                images, labels = images.to(device), labels.to(device)
                outputs = model(images)
                correct += (outputs.argmax(1) == labels).sum()
        # One sync per epoch: read the totals back here.
        print(f"epoch {epoch + 1}: train loss {running_loss.item() / len(train_loader):.3f}, "
              f"val acc {correct.item() / len(val_set):.3f}")
        torch.save(model.state_dict(), os.path.join(out_dir, "checkpoint.pt"))

    state = torch.load(os.path.join(out_dir, "checkpoint.pt"), map_location=device, weights_only=True)
    restored = Net().to(device)
    restored.load_state_dict(state)

    sample = torch.randn(4, 3, 32, 32, device=device)
    restored.eval()
    with torch.no_grad():
        probs = torch.softmax(restored(sample), dim=1)
    print("predicted classes:", probs.detach().cpu().numpy().argmax(axis=1))


if __name__ == "__main__":  # DataLoader workers re-import this file on spawn platforms
    main()
