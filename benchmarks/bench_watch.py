"""Overhead of torchdoctor.watch(): step time with versus without, side by side, interleaved.

Two workloads: a small CNN on synthetic 32x32 images (target: <= 3 % slower)
and a tiny MLP, where per-step hook work dominates. Prints both ratios.
Usage: python benchmarks/bench_watch.py [--reps 7] [--steps 30]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

import torchdoctor


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 10))


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def steps(model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]], opt: torch.optim.Optimizer) -> float:
    criterion = nn.CrossEntropyLoss()
    t0 = time.perf_counter()
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        loss = criterion(model(x), y)
        loss.backward()
        opt.step()
    return (time.perf_counter() - t0) / len(batches)


def measure(make: type | object, shape: tuple[int, ...], classes: int, reps: int, n: int) -> float:
    torch.manual_seed(0)
    model = make()  # type: ignore[operator]
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = [(torch.randn(*shape), torch.randint(0, classes, (shape[0],))) for _ in range(n)]
    steps(model, batches, opt)  # warm-up
    plain, watched = [], []
    for _ in range(reps):  # interleaved, so that drift in machine load hits both alike
        plain.append(steps(model, batches, opt))
        with torchdoctor.watch(environment=False):
            watched.append(steps(model, batches, opt))
    return statistics.median(watched) / statistics.median(plain)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    ratio_cnn = measure(cnn, (32, 3, 32, 32), 10, args.reps, args.steps)
    ratio_mlp = measure(mlp, (32, 16), 4, args.reps, args.steps * 10)
    print(f"small CNN, 32x32 images: watched/plain step time = {ratio_cnn:.3f} ({(ratio_cnn - 1) * 100:+.1f} %; target <= +3 %)")
    print(f"tiny MLP:                watched/plain step time = {ratio_mlp:.3f} ({(ratio_mlp - 1) * 100:+.1f} %)")


if __name__ == "__main__":
    main()
