"""fit() against the checklist's hand-written training loop: throughput ratio and peak memory.

Run: python benchmarks/bench_fit.py [--reps 15] [--epochs 1] [--threads 1] [--device cpu]

Both loops train the same model from the same initial weights on the same
synthetic data and DataLoader settings. Repetitions are interleaved (hand,
fit, hand, fit, ... in alternating order) so that machine noise hits both
alike; the ratio is taken per repetition and its median reported, and
the ratio of the best rates (the least disturbed runs) beside it.
fit() runs with its tqdm progress bar ON, written to a null stream
(os.devnull): the bar's cost is counted, its terminal output is not.
Peak memory is measured in a fresh subprocess per loop (peak RSS from
getrusage, and tracemalloc's peak of Python-level allocations after set-up).
If `lightning` is installed, a Lightning Trainer (progress bar and
checkpointing off) joins the comparison; it is not a dependency.
Targets: fit()/hand >= 0.97 throughput on the CPU, and no more memory.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from typing import Any, Callable

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from torchdoctor import fit


def small_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    )  # fmt: skip


def tiny_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))


def make_data(model_name: str) -> TensorDataset:
    gen = torch.Generator().manual_seed(0)
    n, shape = (2048, (1, 16, 16)) if model_name == "cnn" else (8192, (32,))
    return TensorDataset(torch.randn(n, *shape, generator=gen), torch.randint(0, 10, (n,), generator=gen))


MODELS: dict[str, Callable[[], nn.Module]] = {"cnn": small_cnn, "mlp": tiny_mlp}


def hand_written(model: nn.Module, loader: DataLoader, epochs: int, device: torch.device) -> float:  # type: ignore[type-arg]
    """The checklist's template loop, as a careful user writes it."""
    model.to(device)
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    total = 0.0
    for _ in range(epochs):
        model.train()
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss.item()  # on the CPU a sync costs nothing
    return total


def with_fit(model: nn.Module, loader: DataLoader, epochs: int, device: torch.device) -> float:  # type: ignore[type-arg]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    with open(os.devnull, "w") as null:
        history = fit(model, loader, loss_fn=nn.CrossEntropyLoss(), optimizer=optimizer, epochs=epochs,
                      device=device, progress=null)  # fmt: skip
    return float(sum(history["train_loss"]))


def with_lightning(model: nn.Module, loader: DataLoader, epochs: int, device: torch.device) -> float:  # type: ignore[type-arg]
    import lightning as L  # optional: only when installed

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def training_step(self, batch: Any, _: int) -> torch.Tensor:
            x, y = batch
            return nn.functional.cross_entropy(self.model(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)

    trainer = L.Trainer(max_epochs=epochs, accelerator=device.type, devices=1, logger=False,
                        enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(Module(), loader)
    return 0.0


def variants() -> dict[str, Callable[..., float]]:
    found = {"hand": hand_written, "fit": with_fit}
    try:
        import lightning  # noqa: F401

        found["lightning"] = with_lightning
    except ImportError:
        pass
    return found


def throughput(model_name: str, reps: int, epochs: int, device: torch.device) -> dict[str, dict[str, list[float]]]:
    data = make_data(model_name)
    torch.manual_seed(0)
    start = MODELS[model_name]()
    loops = variants()
    rates: dict[str, dict[str, list[float]]] = {"wall": {n: [] for n in loops}, "cpu": {n: [] for n in loops}}
    for rep in range(reps + 1):  # repetition 0 warms up caches and is not counted
        order = list(loops) if rep % 2 else list(reversed(loops))
        for name in order:
            torch.manual_seed(rep)  # the same shuffling for every loop in this repetition
            loader = DataLoader(data, batch_size=64, shuffle=True)
            model = copy.deepcopy(start)
            began, began_cpu = time.perf_counter(), time.process_time()
            loops[name](model, loader, epochs, device)
            if rep:
                rates["wall"][name].append(len(data) * epochs / (time.perf_counter() - began))
                # This process's CPU time: what other programs on a busy machine do barely moves it.
                rates["cpu"][name].append(len(data) * epochs / max(time.process_time() - began_cpu, 1e-9))
    return rates


def memory_child(model_name: str, name: str, epochs: int, device: str) -> None:
    """In a fresh process: run one loop and print its peak memory as JSON."""
    data = make_data(model_name)
    torch.manual_seed(0)
    model = MODELS[model_name]()
    loader = DataLoader(data, batch_size=64, shuffle=True)
    # A short warm-up first: the first optimizer step imports modules (tens of MB) in either loop.
    warm = DataLoader(torch.utils.data.Subset(data, range(128)), batch_size=64)
    variants()[name](copy.deepcopy(model), warm, 1, torch.device(device))
    before_kb = _current_rss_kb()
    tracemalloc.start()
    variants()[name](model, loader, epochs, torch.device(device))
    _, peak = tracemalloc.get_traced_memory()
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"python_peak_kb": peak / 1024, "peak_rss_kb": rss_kb, "rss_growth_kb": rss_kb - before_kb}))


def _current_rss_kb() -> float:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1024
    except OSError:  # not Linux: growth is then measured from zero
        return 0.0


def memory(model_name: str, epochs: int, device: str) -> dict[str, dict[str, float]]:
    result = {}
    for name in variants():
        cmd = [sys.executable, __file__, "--memory-child", model_name, name, "--epochs", str(epochs), "--device", device,
               "--threads", str(torch.get_num_threads())]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        result[name] = json.loads(out.strip().splitlines()[-1])
    return result


def report(model_name: str, rates: dict[str, dict[str, list[float]]], mem: dict[str, dict[str, float]]) -> None:
    print(f"\n{model_name}: samples/s over {len(rates['wall']['hand'])} interleaved repetitions")
    print("  loop        clock  median     best   ratio to hand: median of pairs  best/best")
    for clock, table in rates.items():
        for name, values in table.items():
            ratios = [v / h for v, h in zip(values, table["hand"])]
            print(f"  {name:10s} {clock:5s} {statistics.median(values):7.0f}  {max(values):7.0f}"
                  f"   {statistics.median(ratios):30.3f}  {max(values) / max(table['hand']):9.3f}")  # fmt: skip
    print("  loop        peak RSS   RSS growth (after warm-up)   Python peak (tracemalloc)")
    for name, m in mem.items():
        print(f"  {name:10s} {m['peak_rss_kb'] / 1024:6.1f} MB   {m['rss_growth_kb'] / 1024:8.1f} MB"
              f"   {m['python_peak_kb'] / 1024:24.3f} MB")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description="fit() vs a hand-written loop")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--models", default="mlp,cnn")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: least sensitive to a busy machine)")
    parser.add_argument("--memory-child", nargs=2, metavar=("MODEL", "LOOP"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.memory_child:
        memory_child(*args.memory_child, epochs=args.epochs, device=args.device)
        return
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}; "
          f"loops: {', '.join(variants())}; fit() progress bar on, to os.devnull")  # fmt: skip
    for model_name in args.models.split(","):
        rates = throughput(model_name, args.reps, args.epochs, torch.device(args.device))
        report(model_name, rates, memory(model_name, args.epochs, args.device))


if __name__ == "__main__":
    main()
