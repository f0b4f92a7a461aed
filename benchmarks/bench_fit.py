"""fit() against the checklist's hand-written training loop: throughput ratio and peak memory.

Run: python benchmarks/bench_fit.py [--reps 7] [--epochs 2] [--device cpu]

Both loops train the same model from the same initial weights on the same
synthetic data and DataLoader settings. Repetitions are interleaved (hand,
fit, hand, fit, ... in alternating order) so that machine noise hits both
alike; the ratio is taken per repetition and its median reported.
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


def throughput(model_name: str, reps: int, epochs: int, device: torch.device) -> dict[str, list[float]]:
    data = make_data(model_name)
    torch.manual_seed(0)
    start = MODELS[model_name]()
    loops = variants()
    rates: dict[str, list[float]] = {name: [] for name in loops}
    for rep in range(reps + 1):  # repetition 0 warms up caches and is not counted
        order = list(loops) if rep % 2 else list(reversed(loops))
        for name in order:
            torch.manual_seed(rep)  # the same shuffling for every loop in this repetition
            loader = DataLoader(data, batch_size=64, shuffle=True)
            model = copy.deepcopy(start)
            began = time.perf_counter()
            loops[name](model, loader, epochs, device)
            if rep:
                rates[name].append(len(data) * epochs / (time.perf_counter() - began))
    return rates


def memory_child(model_name: str, name: str, epochs: int, device: str) -> None:
    """In a fresh process: run one loop and print its peak memory as JSON."""
    data = make_data(model_name)
    torch.manual_seed(0)
    model = MODELS[model_name]()
    loader = DataLoader(data, batch_size=64, shuffle=True)
    tracemalloc.start()
    variants()[name](model, loader, epochs, torch.device(device))
    _, peak = tracemalloc.get_traced_memory()
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"python_peak_kb": peak / 1024, "peak_rss_kb": rss_kb}))


def memory(model_name: str, epochs: int, device: str) -> dict[str, dict[str, float]]:
    result = {}
    for name in variants():
        cmd = [sys.executable, __file__, "--memory-child", model_name, name, "--epochs", str(epochs), "--device", device,
               "--threads", str(torch.get_num_threads())]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        result[name] = json.loads(out.strip().splitlines()[-1])
    return result


def report(model_name: str, rates: dict[str, list[float]], mem: dict[str, dict[str, float]]) -> None:
    print(f"\n{model_name}: samples/s (median of {len(rates['hand'])} interleaved repetitions)")
    for name, values in rates.items():
        ratios = [v / h for v, h in zip(values, rates["hand"])]
        print(f"  {name:10s} {statistics.median(values):10.0f}   ratio to hand: median {statistics.median(ratios):.3f}"
              f" (min {min(ratios):.3f}, max {max(ratios):.3f})   peak RSS {mem[name]['peak_rss_kb'] / 1024:7.1f} MB"
              f"   Python peak {mem[name]['python_peak_kb']:8.1f} KB")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description="fit() vs a hand-written loop")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--epochs", type=int, default=2)
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
