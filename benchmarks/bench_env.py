"""Wall time of `torchdoctor env` here, side by side with a bare `import torch` (its floor).

Run: python benchmarks/bench_env.py [--runs N]
The doctor imports torch in a child process, so its wall time is roughly one
`python -c "import torch"` plus the probe's own work; the ratio shows that overhead
on this machine. Target: `torchdoctor env` under 3 s here.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time


def wall(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the command and its children): CPU time shows the cost
    without the noise of a loaded machine."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    cases = {
        "import torch": [sys.executable, "-c", "import torch"],
        "torchdoctor env": [sys.executable, "-m", "torchdoctor", "env"],
        "torchdoctor env --no-cuda-init": [sys.executable, "-m", "torchdoctor", "env", "--no-cuda-init"],
        "python startup": [sys.executable, "-c", "pass"],
    }
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in cases}
    wall(cases["import torch"])  # warm the file cache once
    for _ in range(runs):  # interleaved, so load changes hit every case alike
        for name, argv in cases.items():
            times[name].append(wall(argv))
    base = statistics.median(t for t, _ in times["import torch"])
    base_cpu = statistics.median(c for _, c in times["import torch"])
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs, {runs} runs each")
    print(f"{'case':32} {'wall s':>7} {'min s':>6} {'cpu s':>6} {'wall/import':>12} {'cpu/import':>11}")
    for name, ts in times.items():
        med = statistics.median(t for t, _ in ts)
        cpu = statistics.median(c for _, c in ts)
        print(f"{name:32} {med:7.2f} {min(t for t, _ in ts):6.2f} {cpu:6.2f} {med / base:12.2f} {cpu / base_cpu:11.2f}")
    env = statistics.median(t for t, _ in times["torchdoctor env"])
    print(f"\ntorchdoctor env: {env:.2f} s median wall ({'meets' if env < 3 else 'misses'} the 3 s target here)")


if __name__ == "__main__":
    main()
