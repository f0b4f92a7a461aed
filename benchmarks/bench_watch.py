"""Overhead of torchdoctor.watch(): step time with versus without, side by side, interleaved, with the spread.

Two workloads: a small CNN on synthetic 32x32 images (target: <= 1 % slower)
and a tiny MLP, whose steps are so short that the watch's fixed cost per step
shows (target: <= 5 us a step). Each repetition times the same batches plain
and watched, alternating which goes first, so that drift in the machine's
load hits both alike. Printed: the median over repetitions of watched/plain
and of the watch's cost per step in this thread's CPU time (less disturbed by
other processes than wall time), with the quartiles of the repetitions as the
spread, and the wall-time ratio beside it. Two untimed steps start each run,
plain and watched alike: a session's once-per-session work (reading the model,
finding the user's lines) is not a cost per step.
Usage: python benchmarks/bench_watch.py [--reps 21] [--steps 20]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

import torchdoctor

Batches = list[tuple[torch.Tensor, torch.Tensor]]


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 10))


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def steps(model: nn.Module, batches: Batches, opt: torch.optim.Optimizer, warm: int = 2) -> tuple[float, float]:
    """(wall, thread CPU) seconds per step, after ``warm`` untimed steps (in a watch: its once-per-session work,
    such as reading the model and finding the user's lines, is not a cost per step)."""
    criterion = nn.CrossEntropyLoss()

    def run(part: Batches) -> None:
        for x, y in part:
            opt.zero_grad(set_to_none=True)
            loss = criterion(model(x), y)
            loss.backward()
            opt.step()

    run(batches[:warm])
    t0, c0 = time.perf_counter(), time.thread_time()
    run(batches)
    return (time.perf_counter() - t0) / len(batches), (time.thread_time() - c0) / len(batches)


def watched_steps(model: nn.Module, batches: Batches, opt: torch.optim.Optimizer) -> tuple[float, float]:
    with torchdoctor.watch(environment=False):
        return steps(model, batches, opt)


def measure(make: Callable[[], nn.Module], shape: tuple[int, ...], classes: int, reps: int, n: int) -> dict[str, list[float]]:
    """Per repetition: watched/plain (wall, CPU) and the watch's CPU microseconds per step."""
    torch.manual_seed(0)
    model = make()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = [(torch.randn(*shape), torch.randint(0, classes, (shape[0],))) for _ in range(n)]
    steps(model, batches, opt)  # warm-up, both ways
    watched_steps(model, batches, opt)
    out: dict[str, list[float]] = {"wall": [], "cpu": [], "extra_us": [], "plain_us": []}
    for rep in range(reps):
        if rep % 2 == 0:
            plain, watched = steps(model, batches, opt), watched_steps(model, batches, opt)
        else:
            watched, plain = watched_steps(model, batches, opt), steps(model, batches, opt)
        out["wall"].append(watched[0] / plain[0])
        out["cpu"].append(watched[1] / plain[1])
        out["extra_us"].append((watched[1] - plain[1]) * 1e6)
        out["plain_us"].append(plain[1] * 1e6)
    return out


def spread(values: list[float]) -> tuple[float, float, float]:
    """(median, first quartile, third quartile)."""
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return median, q1, q3


def line(name: str, r: dict[str, list[float]], *, ratio_target: float | None = None, us_target: float | None = None) -> str:
    cpu, cpu_lo, cpu_hi = spread(r["cpu"])
    extra, extra_lo, extra_hi = spread(r["extra_us"])
    wall = statistics.median(r["wall"])
    parts = [f"{name}: watched/plain CPU time {cpu:.3f} ({(cpu - 1) * 100:+.1f} %, quartiles {(cpu_lo - 1) * 100:+.1f} .. "
             f"{(cpu_hi - 1) * 100:+.1f} %" + (f"; target <= +{ratio_target:g} %" if ratio_target is not None else "") + ")",
             f"watch {extra:+.1f} us a step (quartiles {extra_lo:+.1f} .. {extra_hi:+.1f} us"
             + (f"; target <= {us_target:g} us" if us_target is not None else "") + ")",
             f"wall {wall:.3f}", f"plain step {statistics.median(r['plain_us']):.0f} us CPU",
             f"{len(r['cpu'])} interleaved pairs"]
    return "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=21)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    if args.reps < 4:
        parser.error("--reps must be at least 4 (quartiles)")
    torch.set_num_threads(1)
    print(line("small CNN, 32x32 images", measure(cnn, (32, 3, 32, 32), 10, args.reps, args.steps), ratio_target=1))
    print(line("tiny MLP               ", measure(mlp, (32, 16), 4, args.reps, args.steps * 10), us_target=5))


if __name__ == "__main__":
    main()
