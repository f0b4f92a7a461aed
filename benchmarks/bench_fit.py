"""fit() against the checklist's hand-written loop and, when installed, Lightning, Fabric and Accelerate.

Run: python benchmarks/bench_fit.py [--reps 15] [--epochs 1] [--threads 1] [--device cpu|cuda]
                                    [--precision fp32|bf16] [--models mlp,cnn] [--json out.json] [--no-memory]

Every loop trains the same model from the same initial weights on the same
synthetic data, DataLoader settings and optimizer, with the same precision.
Repetitions are interleaved (the order of the loops alternates each
repetition) so that machine noise hits all alike; each loop's rate is divided
by the hand loop's rate *of the same repetition*, and the median of those
ratios is reported with their spread (25th-75th percentile) and the ratio of
the best rates (the least disturbed runs). Rates count the whole call, set-up
included, as a user pays it. On the CPU the process's CPU time is reported
beside wall time (less disturbed by other programs on a busy machine); on CUDA
every loop ends with a synchronize and wall time is what counts.
fit() runs with its progress bar ON, written to os.devnull. Peers are
optional (`pip install torchdoctor[bench]`), never a test dependency.
Peak memory is measured in a fresh subprocess per loop (peak RSS; tracemalloc's
Python-level peak after a warm-up). Target: fit()/hand >= 0.98, ahead of each peer.
"""

from __future__ import annotations

import argparse
import contextlib
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

LR, MOMENTUM = 0.05, 0.9


def small_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    )  # fmt: skip


def tiny_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))


MODELS: dict[str, Callable[[], nn.Module]] = {"cnn": small_cnn, "mlp": tiny_mlp}


def make_data(model_name: str) -> TensorDataset:
    gen = torch.Generator().manual_seed(0)
    n, shape = (2048, (1, 16, 16)) if model_name == "cnn" else (8192, (32,))
    return TensorDataset(torch.randn(n, *shape, generator=gen), torch.randint(0, 10, (n,), generator=gen))


def _autocast(device: torch.device, precision: str) -> Any:
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def hand_written(model: nn.Module, loader: DataLoader, epochs: int, device: torch.device, precision: str) -> float:  # type: ignore[type-arg]
    """The checklist's template loop, as a careful user writes it (no per-step sync)."""
    model.to(device)
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    total = torch.zeros((), device=device)
    for _ in range(epochs):
        model.train()
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            with _autocast(device, precision):
                loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss.detach()
    return float(total)  # the one sync


def with_fit(model: nn.Module, loader: DataLoader, epochs: int, device: torch.device, precision: str) -> float:  # type: ignore[type-arg]
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    with open(os.devnull, "w") as null:
        history = fit(model, loader, loss_fn=nn.CrossEntropyLoss(), optimizer=optimizer, epochs=epochs,
                      device=device, precision=precision, progress=null)  # fmt: skip
    return float(sum(history["train_loss"]))


def with_lightning(model: nn.Module, loader: DataLoader, epochs: int, device: torch.device, precision: str) -> float:  # type: ignore[type-arg]
    import lightning as L

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def training_step(self, batch: Any, _: int) -> torch.Tensor:
            x, y = batch
            return nn.functional.cross_entropy(self.model(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=LR, momentum=MOMENTUM)

    trainer = L.Trainer(max_epochs=epochs, accelerator=device.type, devices=1, logger=False,
                        precision="bf16-mixed" if precision == "bf16" else "32-true", enable_progress_bar=False,
                        enable_checkpointing=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(Module(), loader)
    return 0.0


def with_fabric(model: nn.Module, loader: DataLoader, epochs: int, device: torch.device, precision: str) -> float:  # type: ignore[type-arg]
    from lightning.fabric import Fabric

    fabric = Fabric(accelerator=device.type, devices=1, precision="bf16-mixed" if precision == "bf16" else "32-true")
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    model, optimizer = fabric.setup(model, optimizer)
    loader = fabric.setup_dataloaders(loader)
    loss_fn = nn.CrossEntropyLoss()
    total = torch.zeros((), device=fabric.device)
    for _ in range(epochs):
        model.train()
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            fabric.backward(loss)
            optimizer.step()
            total += loss.detach()
    return float(total)


def with_accelerate(model: nn.Module, loader: DataLoader, epochs: int, device: torch.device, precision: str) -> float:  # type: ignore[type-arg]
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=device.type == "cpu", mixed_precision="bf16" if precision == "bf16" else "no")
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    loss_fn = nn.CrossEntropyLoss()
    total = torch.zeros((), device=accelerator.device)
    for _ in range(epochs):
        model.train()
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            total += loss.detach()
    return float(total)


def _quiet_peers() -> None:
    """Lightning's banners and tips ("GPU available", "💡 Tip") would drown the table."""
    import logging
    import warnings

    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning", "accelerate"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="lightning")
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")


ONLY: list[str] = []  # --loops: a subset to compare (the hand loop always runs)


def variants() -> dict[str, Callable[..., float]]:
    found: dict[str, Callable[..., float]] = {"hand": hand_written, "fit": with_fit}
    for name, module, loop in (("lightning", "lightning", with_lightning), ("fabric", "lightning.fabric", with_fabric),
                               ("accelerate", "accelerate", with_accelerate)):  # fmt: skip
        if ONLY and name not in ONLY:
            continue
        try:
            __import__(module)
        except ImportError:
            continue
        found[name] = loop
    _quiet_peers()  # after the imports: Lightning sets its loggers' levels when imported
    return found


def throughput(model_name: str, reps: int, epochs: int, device: torch.device, precision: str) -> dict[str, dict[str, list[float]]]:
    data = make_data(model_name)
    torch.manual_seed(0)
    start = MODELS[model_name]()
    loops = variants()
    clocks = ("wall", "cpu") if device.type == "cpu" else ("wall",)
    rates: dict[str, dict[str, list[float]]] = {clock: {n: [] for n in loops} for clock in clocks}
    for rep in range(reps + 1):  # repetition 0 warms up caches and imports, and is not counted
        for name in list(loops) if rep % 2 else list(reversed(loops)):
            torch.manual_seed(rep)  # the same shuffling for every loop in this repetition
            # In-memory tensors: worker processes would add only IPC; every loop gets the same loader.
            loader = DataLoader(data, batch_size=64, shuffle=True, pin_memory=device.type == "cuda")  # noqa: TD305
            model = copy.deepcopy(start)
            began, began_cpu = time.perf_counter(), time.process_time()
            loops[name](model, loader, epochs, device, precision)
            if device.type == "cuda":
                torch.cuda.synchronize()
            if rep:
                rates["wall"][name].append(len(data) * epochs / (time.perf_counter() - began))
                if "cpu" in rates:
                    rates["cpu"][name].append(len(data) * epochs / max(time.process_time() - began_cpu, 1e-9))
    return rates


def summarize(rates: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per clock and loop: median rate, and the ratio to hand (median of pairs, quartiles, best/best)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for clock, table in rates.items():
        hand = table["hand"]
        out[clock] = {}
        for name, values in table.items():
            ratios = sorted(v / h for v, h in zip(values, hand))
            q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
            out[clock][name] = {"median_rate": statistics.median(values), "ratio_median": statistics.median(ratios),
                                "ratio_q1": q1, "ratio_q3": q3, "ratio_best": max(values) / max(hand)}  # fmt: skip
    return out


def memory_child(model_name: str, name: str, epochs: int, device: str, precision: str) -> None:
    """In a fresh process: run one loop and print its peak memory as JSON."""
    data = make_data(model_name)
    torch.manual_seed(0)
    model = MODELS[model_name]()
    pin = device == "cuda"
    loader = DataLoader(data, batch_size=64, shuffle=True, pin_memory=pin)  # noqa: TD305 - as in throughput()
    # A short warm-up first: the first optimizer step imports modules (tens of MB) in every loop.
    warm = DataLoader(torch.utils.data.Subset(data, range(128)), batch_size=64, pin_memory=pin)  # noqa: TD305
    variants()[name](copy.deepcopy(model), warm, 1, torch.device(device), precision)
    before_kb = _current_rss_kb()
    tracemalloc.start()
    variants()[name](model, loader, epochs, torch.device(device), precision)
    _, peak = tracemalloc.get_traced_memory()
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"python_peak_kb": peak / 1024, "peak_rss_kb": rss_kb, "rss_growth_kb": rss_kb - before_kb}))


def _current_rss_kb() -> float:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1024
    except OSError:  # not Linux: growth is then measured from zero
        return 0.0


def memory(model_name: str, epochs: int, device: str, precision: str) -> dict[str, dict[str, float]]:
    result = {}
    for name in variants():
        cmd = [sys.executable, __file__, "--memory-child", model_name, name, "--epochs", str(epochs), "--device", device,
               "--precision", precision, "--threads", str(torch.get_num_threads()), "--loops", ",".join(ONLY)]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=600).stdout
        result[name] = json.loads(out.strip().splitlines()[-1])
    return result


def report(model_name: str, summary: dict[str, dict[str, dict[str, float]]], reps: int, mem: dict[str, Any]) -> None:
    print(f"\n{model_name}: samples/s over {reps} interleaved repetitions; ratio = loop / hand of the same repetition")
    print("  loop        clock  median rate   ratio: median  [25%-75%]        best/best")
    for clock, table in summary.items():
        for name, s in table.items():
            print(f"  {name:10s}  {clock:5s} {s['median_rate']:10.0f}   {s['ratio_median']:13.3f}  "
                  f"[{s['ratio_q1']:.3f}-{s['ratio_q3']:.3f}]  {s['ratio_best']:9.3f}")  # fmt: skip
    if mem:
        print("  loop        peak RSS   RSS growth (after warm-up)   Python peak (tracemalloc)")
        for name, m in mem.items():
            print(f"  {name:10s} {m['peak_rss_kb'] / 1024:6.1f} MB   {m['rss_growth_kb'] / 1024:8.1f} MB"
                  f"   {m['python_peak_kb'] / 1024:24.3f} MB")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description="fit() vs a hand-written loop and its peers")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    parser.add_argument("--models", default="mlp,cnn")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: least sensitive to a busy machine)")
    parser.add_argument("--json", metavar="PATH", help="also write the ratios as JSON")
    parser.add_argument("--no-memory", action="store_true", help="skip the per-loop memory subprocesses")
    parser.add_argument("--loops", default="", help="compare only these (e.g. fit,fabric); default: all installed")
    parser.add_argument("--memory-child", nargs=2, metavar=("MODEL", "LOOP"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    ONLY[:] = [name for name in args.loops.split(",") if name]
    if args.memory_child:
        memory_child(*args.memory_child, epochs=args.epochs, device=args.device, precision=args.precision)
        return
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}, {args.precision}; "
          f"loops: {', '.join(variants())}; fit() progress bar on, to os.devnull")  # fmt: skip
    results: dict[str, Any] = {"device": args.device, "precision": args.precision, "reps": args.reps,
                               "epochs": args.epochs, "loops": list(variants()), "workloads": {}}  # fmt: skip
    for model_name in args.models.split(","):
        summary = summarize(throughput(model_name, args.reps, args.epochs, torch.device(args.device), args.precision))
        mem = {} if args.no_memory else memory(model_name, args.epochs, args.device, args.precision)
        report(model_name, summary, args.reps, mem)
        results["workloads"][model_name] = {"throughput": summary, "memory": mem}
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(results, out, indent=2)


if __name__ == "__main__":
    main()
