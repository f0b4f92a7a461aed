"""Time `torchdoctor explain` spends on a long training log, side by side with reading the log's lines (its floor).

Run: python benchmarks/bench_explain.py [--lines N] [--runs N]
A synthetic log of N progress lines with three real errors in it (nothing is
downloaded); explain runs from the text alone, interleaved with a plain
`str.splitlines()` of the same text, so load changes hit both alike. The ratio
says how many line splits one scan of every message family costs.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from torchdoctor.explain import explain_text  # noqa: E402

ERRORS = (
    "ValueError: sampler option is mutually exclusive with shuffle",
    "RuntimeError: CUDA error: device-side assert triggered",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.06 GiB is free.",
)


def make_log(n: int) -> str:
    rng = random.Random(0)
    lines = [f"epoch {i // 1000} step {i} loss={rng.random():.4f} lr=3e-4 grad_norm={rng.random():.3f} samples/s=1234.5" for i in range(n)]
    for k, error in enumerate(ERRORS, 1):
        lines.insert(k * n // 4, error)
    return "\n".join(lines)


def timed(fn) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    text = make_log(args.lines)
    found = [f.code for f in explain_text(text)]
    assert found == ["TD702", "TD307", "TD610"], found
    scans, splits = [], []
    for _ in range(args.runs):
        scans.append(timed(lambda: explain_text(text)))
        splits.append(timed(text.splitlines))
    ratios = [a / b for a, b in zip(scans, splits)]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; log of {args.lines} lines, {len(text) / 2**20:.1f} MiB, {args.runs} runs")
    print(f"explain      median {statistics.median(scans):.3f} s (min {min(scans):.3f}, max {max(scans):.3f})")
    print(f"splitlines   median {statistics.median(splits):.3f} s (min {min(splits):.3f}, max {max(splits):.3f})")
    print(f"explain/splitlines ratio: median {statistics.median(ratios):.1f} (min {min(ratios):.1f}, max {max(ratios):.1f})")
    print(f"throughput: {len(text) / 2**20 / statistics.median(scans):.1f} MiB/s")


if __name__ == "__main__":
    main()
