"""Overhead of torchdoctor.watch(): step time with versus without, side by side, interleaved.

Two workloads: a small CNN on synthetic 32x32 images (target: <= 3 % slower)
and a tiny MLP, where per-step hook work dominates (target: <= 15 %). Each
repetition times the same batches plain and watched, alternating which goes
first; the median over repetitions of watched/plain is printed for wall time
and for this thread's CPU time (less disturbed by other processes on a shared
machine), with the watch's median cost per step in microseconds.
Usage: python benchmarks/bench_watch.py [--reps 21] [--steps 20]
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


def steps(model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]], opt: torch.optim.Optimizer) -> tuple[float, float]:
    """(wall, thread CPU) seconds per step."""
    criterion = nn.CrossEntropyLoss()
    t0, c0 = time.perf_counter(), time.thread_time()
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        loss = criterion(model(x), y)
        loss.backward()
        opt.step()
    return (time.perf_counter() - t0) / len(batches), (time.thread_time() - c0) / len(batches)


def watched_steps(model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]], opt: torch.optim.Optimizer) -> tuple[float, float]:
    with torchdoctor.watch(environment=False):
        return steps(model, batches, opt)


def measure(make: type | object, shape: tuple[int, ...], classes: int, reps: int, n: int) -> dict[str, float]:
    torch.manual_seed(0)
    model = make()  # type: ignore[operator]
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = [(torch.randn(*shape), torch.randint(0, classes, (shape[0],))) for _ in range(n)]
    steps(model, batches, opt)  # warm-up
    watched_steps(model, batches, opt)
    pairs = []
    for rep in range(reps):  # interleaved pairs, so that drift in machine load hits both alike
        order = (steps, watched_steps) if rep % 2 == 0 else (watched_steps, steps)
        first, second = (run(model, batches, opt) for run in order)
        pairs.append((first, second) if rep % 2 == 0 else (second, first))
    ratio = {k: statistics.median(w[i] / p[i] for p, w in pairs) for i, k in enumerate(("wall", "cpu"))}
    plain_cpu = statistics.median(p[1] for p, _ in pairs)
    return {**ratio, "plain_us": plain_cpu * 1e6, "extra_us": statistics.median(w[1] - p[1] for p, w in pairs) * 1e6}


def line(name: str, r: dict[str, float], target: float) -> str:
    return (f"{name}: watched/plain step time = {r['wall']:.3f} wall ({(r['wall'] - 1) * 100:+.1f} %), "
            f"{r['cpu']:.3f} CPU ({(r['cpu'] - 1) * 100:+.1f} %; target <= +{target:.0f} %); "
            f"plain step {r['plain_us']:.0f} us CPU, watch {r['extra_us']:+.1f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=21)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(line("small CNN, 32x32 images", measure(cnn, (32, 3, 32, 32), 10, args.reps, args.steps), 3))
    print(line("tiny MLP               ", measure(mlp, (32, 16), 4, args.reps, args.steps * 10), 15))


if __name__ == "__main__":
    main()
