"""Mixed-precision training with gradient accumulation, clipping, an EMA model and torch.compile."""
import copy
import math

import torch
import torch.nn as nn
from torch.utils.data import DataLoader


class MLPBlock(nn.Module):
    def __init__(self, dim, hidden, p=0.1):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(p)

    def forward(self, x):
        return x + self.drop(self.fc2(torch.relu(self.fc1(self.norm(x)))))


class Model(nn.Module):
    def __init__(self, dim=256, depth=6, classes=1000):
        super().__init__()
        self.blocks = nn.Sequential(*[MLPBlock(dim, 4 * dim) for _ in range(depth)])
        self.head = nn.Linear(dim, classes)
        self.register_buffer("scale", torch.tensor(1.0 / math.sqrt(dim)))
        self.temperature = nn.Parameter(torch.ones(1))

    def forward(self, x):
        return self.head(self.blocks(x) * self.scale) / self.temperature


@torch.no_grad()
def update_ema(ema, model, decay=0.999):
    for e, p in zip(ema.parameters(), model.parameters()):
        e.mul_(decay).add_(p.detach(), alpha=1 - decay)


@torch.no_grad()
def validate(model, loader, device):
    model.eval()
    correct = torch.zeros((), device=device)
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            correct += (model(x).argmax(1) == y).sum()
    return correct.item() / len(loader.dataset)


def train(train_set, val_set, epochs=20, accum_steps=4, use_bf16=False):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    amp_dtype = torch.bfloat16 if use_bf16 else torch.float16
    train_loader = DataLoader(train_set, batch_size=64, shuffle=True, num_workers=8,
                              pin_memory=True, persistent_workers=True, drop_last=True)
    val_loader = DataLoader(val_set, batch_size=256, num_workers=4, pin_memory=True)

    model = Model().to(device)
    ema = copy.deepcopy(model)
    compiled = torch.compile(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.05)
    scaler = torch.amp.GradScaler("cuda", enabled=amp_dtype == torch.float16)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)

    for epoch in range(epochs):
        compiled.train()
        optimizer.zero_grad(set_to_none=True)
        for step, (x, y) in enumerate(train_loader):
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with torch.autocast(device_type="cuda", dtype=amp_dtype):
                loss = criterion(compiled(x), y) / accum_steps
            scaler.scale(loss).backward()
            if (step + 1) % accum_steps == 0:
                scaler.unscale_(optimizer)
                nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
                update_ema(ema, model)
            if step % 100 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item() * accum_steps:.4f}")
        acc = validate(ema, val_loader, device)
        print(f"epoch {epoch}: EMA top-1 {acc:.4f}")
        torch.save({"model": model.state_dict(), "ema": ema.state_dict(), "epoch": epoch}, "last.pt")
