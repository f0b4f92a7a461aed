"""What the device helpers buy on a GPU: prefetching, pinned copies, AMP, and the watch's cost with syncs detected.

Run: python benchmarks/bench_device.py [--device cuda] [--reps 7] [--steps 40] [--size 64] [--json out.json]

Four comparisons, each as the median of per-repetition ratios (interleaved, the
order alternating) with the 25th-75th percentile spread:
  prefetch  DeviceLoader (side-stream copies from pinned memory) vs a plain loop
            that copies each batch itself: training throughput, higher is better;
  pinned    host-to-device copy bandwidth from pinned vs pageable memory (CUDA only);
  amp_bf16  a training step under bf16 autocast vs fp32 (throughput);
  amp_fp16  a training step under fp16 autocast with a GradScaler vs fp32 (throughput);
  watch     the same loop (it reads loss.item() every step: a sync on CUDA) watched vs
            plain (step-time ratio, lower is better) and the codes the watch reported.
On the CPU every part still runs (pinned copies are skipped): that is how
benchmarks/gpu_check.sh --dry-run proves itself without a GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any, Callable

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from torchdoctor import DeviceLoader, watch


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def pairs(first: Callable[[], float], second: Callable[[], float], reps: int) -> dict[str, float]:
    """Median and quartiles of first()/second() over interleaved repetitions (each returns a rate or a time)."""
    first(), second()  # warm-up: kernels, allocator, imports
    ratios = []
    for rep in range(reps):
        a, b = (first(), second()) if rep % 2 == 0 else tuple(reversed((second(), first())))
        ratios.append(a / b)
    q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
    return {"ratio_median": statistics.median(ratios), "ratio_q1": q1, "ratio_q3": q3, "reps": reps}


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10),
    )  # fmt: skip


def _images(n: int, size: int) -> TensorDataset:
    gen = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 3, size, size, generator=gen), torch.randint(0, 10, (n,), generator=gen))


def _train_rate(model: nn.Module, batches: Any, device: torch.device, move: bool, amp: str = "fp32") -> float:
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler(device.type) if amp == "fp16" else None
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)
    _sync(device)
    began, n = time.perf_counter(), 0
    for x, y in batches:
        if move:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        n += len(y)
    _sync(device)
    return n / (time.perf_counter() - began)


def _on_device(data: TensorDataset, size: int, device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Batches already on the device: the step alone is measured."""
    x, y = data.tensors
    return list(zip(x.split(size), y.split(size))) if device.type == "cpu" else [
        (a.to(device), b.to(device)) for a, b in zip(x.split(size), y.split(size))]  # fmt: skip


def prefetch(device: torch.device, reps: int, steps: int, size: int) -> dict[str, float]:
    data = _images(steps * 64, size)
    model = cnn().to(device)
    pin = device.type == "cuda"

    # No workers on either side: what differs is only who copies, and when.
    def plain() -> float:
        return _train_rate(model, DataLoader(data, batch_size=64, pin_memory=pin), device, move=True)  # noqa: TD305

    def prefetched() -> float:
        loader = DataLoader(data, batch_size=64, pin_memory=pin)  # noqa: TD305
        return _train_rate(model, DeviceLoader(loader, device), device, move=False)

    return pairs(prefetched, plain, reps)


def pinned(device: torch.device, reps: int) -> dict[str, Any]:
    if device.type != "cuda":
        return {"skipped": "pinned memory needs CUDA"}
    pageable = torch.randn(16 * 1024 * 1024)  # 64 MB
    pinned_copy = pageable.pin_memory()

    def rate(source: torch.Tensor) -> Callable[[], float]:
        def copy() -> float:
            _sync(device)
            began = time.perf_counter()
            copied = source.to(device, non_blocking=True)
            _sync(device)
            return copied.numel() * 4 / (time.perf_counter() - began)

        return copy

    return pairs(rate(pinned_copy), rate(pageable), reps)


def amp(device: torch.device, reps: int, steps: int, size: int, kind: str) -> dict[str, float]:
    batches = _on_device(_images(steps * 64, size), 64, device)
    model = cnn().to(device)
    return pairs(lambda: _train_rate(model, batches, device, False, kind), lambda: _train_rate(model, batches, device, False), reps)


def watch_cost(device: torch.device, reps: int, steps: int, size: int) -> dict[str, Any]:
    batches = _on_device(_images(steps * 32, size // 2), 32, device)
    model = cnn().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    codes: set[str] = set()

    def loop() -> float:
        _sync(device)
        began = time.perf_counter()
        for x, y in batches:
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            loss.item()  # noqa: TD603 - a sync every step, on purpose: what the watch must name
        _sync(device)
        return (time.perf_counter() - began) / len(batches)

    def watched() -> float:
        with watch(environment=False) as session:
            seconds = loop()
        codes.update(f.code for f in session.findings)
        return seconds

    result: dict[str, Any] = pairs(watched, loop, reps)
    result["codes"] = sorted(codes)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--size", type=int, default=64, help="image side in pixels (16 for a quick CPU run)")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    device = torch.device(args.device)
    results: dict[str, Any] = {"device": str(device), "torch": torch.__version__}
    if device.type == "cuda":
        results["gpu"] = torch.cuda.get_device_name(device)
    parts: dict[str, Callable[[], Any]] = {
        "prefetch": lambda: prefetch(device, args.reps, args.steps, args.size),
        "pinned": lambda: pinned(device, args.reps),
        "amp_bf16": lambda: amp(device, args.reps, args.steps, args.size, "bf16"),
        "amp_fp16": lambda: amp(device, args.reps, args.steps, args.size, "fp16"),
        "watch": lambda: watch_cost(device, args.reps, args.steps, args.size),
    }
    for name, measure in parts.items():
        try:
            results[name] = measure()
        except Exception as exc:  # noqa: BLE001 - one failed part must not cost the others' figures
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
        print(f"{name:9s} {json.dumps(results[name])}", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(results, out, indent=2)


if __name__ == "__main__":
    main()
