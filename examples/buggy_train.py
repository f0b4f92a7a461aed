"""A small CIFAR-style classifier with the GPU-training mistakes people really make.

It runs (on the CPU too, in seconds), which is the point: none of these bugs
crashes here, several crash or silently misbehave on a GPU. Each line that
`torchdoctor check examples/buggy_train.py` reports says so in an
`# expect:` comment. fixed_train.py is the same program done right.
"""

import os
import tempfile

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
use_amp = device.type == "cuda"
out_dir = os.environ.get("CHECKPOINT_DIR") or tempfile.mkdtemp(prefix="buggy_train_")


def make_data(n, prototypes):
    """Synthetic 32x32 RGB images: a class prototype plus noise."""
    labels = torch.randint(0, 10, (n,))
    images = prototypes[labels] + 0.5 * torch.randn(n, 3, 32, 32)
    return TensorDataset(images, labels)


class Net(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.mean = torch.tensor([0.5, 0.5, 0.5])  # expect: TD203
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(0.2), nn.Linear(16 * 8 * 8, num_classes))

    def forward(self, x):
        x = x - self.mean.view(1, 3, 1, 1)
        return self.head(self.features(x))


prototypes = torch.rand(10, 3, 32, 32)
train_set, val_set = make_data(512, prototypes), make_data(128, prototypes)
train_loader = DataLoader(train_set, batch_size=64, shuffle=True)  # expect: TD304, TD305
val_loader = DataLoader(val_set, batch_size=128)  # expect: TD304, TD305

model = Net()
if use_amp:
    model.cuda()  # expect: TD102
if torch.cuda.device_count() > 1:
    model = nn.DataParallel(model)  # expect: TD204

class_weights = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 1.0, 1.0, 1.0, 1.0])
criterion = nn.CrossEntropyLoss(weight=class_weights)  # expect: TD406
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
scaler = torch.cuda.amp.GradScaler(enabled=use_amp)  # expect: TD601

for epoch in range(3):
    running_loss = 0.0
    for images, labels in train_loader:  # expect: TD404
        images = images.to(device)
        images = images + 0.05 * torch.randn(images.shape)  # expect: TD303
        with torch.cuda.amp.autocast(enabled=use_amp):  # expect: TD601
            outputs = model(images)
            loss = criterion(outputs, labels)  # expect: TD302
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        running_loss += loss  # expect: TD405
        torch.cuda.empty_cache()  # expect: TD602

    model.eval()  # expect: TD403
    correct = 0
    for images, labels in val_loader:
        images, labels = images.to(device), labels.to(device)
        outputs = model(images)  # expect: TD401
        correct += (outputs.argmax(1) == labels).sum().item()  # expect: TD603
    print(f"epoch {epoch + 1}: train loss {running_loss / len(train_loader):.3f}, "
          f"val acc {correct / len(val_set):.3f}")
    torch.save(model.state_dict(), os.path.join(out_dir, "checkpoint.pt"))  # expect: TD205

torch.save(model, os.path.join(out_dir, "model_full.pt"))  # expect: TD504

state = torch.load(os.path.join(out_dir, "checkpoint.pt"))  # expect: TD503
model.load_state_dict(state)
restored = torch.load(os.path.join(out_dir, "model_full.pt"), weights_only=False)  # expect: TD503

print("restored a", type(restored).__name__)

sample = torch.randn(4, 3, 32, 32)
sample.to(device)  # expect: TD301
model.eval()
with torch.no_grad():
    probs = torch.softmax(model(sample), dim=1)
print("predicted classes:", probs.numpy().argmax(axis=1))  # expect: TD501
