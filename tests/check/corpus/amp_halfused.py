"""Image segmentation with AMP copied from an older tutorial."""
# corpus-unscored: TD605 (the catalog does not say on which line a half-used scaler is reported)
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader


class TinyUNet(nn.Module):
    def __init__(self, classes=21):
        super().__init__()
        self.down = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2))
        self.mid = nn.Sequential(nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU())
        self.up = nn.ConvTranspose2d(64, 32, 2, stride=2)
        self.out = nn.Conv2d(32, classes, 1)

    def forward(self, x):
        return self.out(F.relu(self.up(self.mid(self.down(x)))))


def fit(train_set, val_set, epochs=30):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loader = DataLoader(train_set, batch_size=8, shuffle=True, num_workers=4, pin_memory=True)
    val_loader = DataLoader(val_set, batch_size=8, num_workers=4, pin_memory=True)
    model = TinyUNet().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scaler = torch.cuda.amp.GradScaler()  # expect: TD601

    for epoch in range(epochs):
        model.train()
        for step, (image, mask) in enumerate(loader):
            image, mask = image.to(device), mask.to(device)
            optimizer.zero_grad()
            with torch.cuda.amp.autocast():  # expect: TD601
                loss = F.cross_entropy(model(image), mask, ignore_index=255)
            scaler.scale(loss).backward()
            optimizer.step()

        model.eval()
        inter = torch.zeros(21, device=device)
        union = torch.zeros(21, device=device)
        with torch.inference_mode():
            for image, mask in val_loader:
                pred = model(image.to(device)).argmax(1)
                mask = mask.to(device)
                for c in range(21):
                    inter[c] += ((pred == c) & (mask == c)).sum()
                    union[c] += ((pred == c) | (mask == c)).sum()
        miou = (inter / union.clamp(min=1)).mean().item()
        print(f"epoch {epoch}: mIoU {miou:.3f}")
        torch.save(model.state_dict(), "unet.pt")
