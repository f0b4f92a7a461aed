"""Train a small CNN on synthetic images with torchdoctor's fit(): the whole checklist, done right.

Run: python examples/train_fit.py [--epochs 3] [--checkpoint-dir runs/demo] [--checkpoint-every 16]
Runs on the CPU in seconds; on a machine with a GPU the same script uses it
(bf16/fp16 autocast, pinned prefetching), and under torchrun it trains with DDP
(or shards with FSDP2: --strategy fsdp). Stop it at any point and run it again
with the same --checkpoint-dir: it resumes at the last saved step, mid-epoch
included, in the same shuffled order.
"""

from __future__ import annotations

import argparse
import tempfile

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from torchdoctor import fit


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 4) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        )  # fmt: skip
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(0.1), nn.Linear(16, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def synthetic_images(n: int, seed: int) -> TensorDataset:
    """Noisy 16x16 images whose class is the quadrant holding a bright square."""
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 4, (n,), generator=gen)
    images = torch.randn(n, 1, 16, 16, generator=gen) * 0.5
    for quadrant in range(4):
        rows, cols = divmod(quadrant, 2)
        chosen = labels == quadrant
        images[chosen, :, rows * 8 + 2 : rows * 8 + 6, cols * 8 + 2 : cols * 8 + 6] += 2.0
    return TensorDataset(images, labels)


def accuracy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return (logits.argmax(dim=1) == labels).float().mean()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--checkpoint-dir", default=None, help="default: a temporary directory")
    parser.add_argument("--checkpoint-every", type=int, default=16, help="optimizer steps between checkpoints")
    parser.add_argument("--strategy", default="auto", choices=("auto", "ddp", "fsdp"), help="under torchrun")
    args = parser.parse_args()

    torch.manual_seed(0)
    pin = torch.cuda.is_available()  # pinned host memory only pays off when copying to a GPU
    train_loader = DataLoader(synthetic_images(2048, seed=1), batch_size=64, shuffle=True, pin_memory=pin)
    val_loader = DataLoader(synthetic_images(512, seed=2), batch_size=256, pin_memory=pin)
    model = SmallCNN()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs)

    with tempfile.TemporaryDirectory() as scratch:
        history = fit(
            model,
            train_loader,
            loss_fn=nn.CrossEntropyLoss(),
            optimizer=optimizer,
            epochs=args.epochs,
            val_loader=val_loader,
            scheduler=scheduler,
            metrics={"acc": accuracy},
            checkpoint_dir=args.checkpoint_dir or scratch,
            checkpoint_every=args.checkpoint_every,
            strategy=args.strategy,
            log_every=8,
        )
    last = history[-1]
    print(f"done: {len(history)} epochs, val_loss={last['val_loss']:.3f}, val_acc={last['val_acc']:.1%}")


if __name__ == "__main__":
    main()
