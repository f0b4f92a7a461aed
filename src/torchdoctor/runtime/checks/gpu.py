"""Decisions that need accelerator readings: TD103, TD603, TD607, TD608, TD609.

Pure functions over readings, so that tests feed them numbers; the session
collects the readings through its probe.
"""

from __future__ import annotations

from collections import Counter

from torchdoctor.findings import Finding, Location

MiB = 1 << 20


def gpu_unused(cuda_available: bool, trained_device_types: set[str], steps: int) -> bool:
    """TD103: a GPU is there, and every training step ran on the CPU."""
    return cuda_available and steps > 0 and trained_device_types == {"cpu"}


def syncs_every_step(sync_steps: dict[Location, set[int]], steps: int, *, min_steps: int = 10, share: float = 0.8) -> list[Location]:
    """TD603: places that synchronised in (nearly) every training step; a `step % N` guard would make them rare."""
    if steps < min_steps:
        return []
    return sorted((loc for loc, seen in sync_steps.items() if len(seen) >= share * steps),
                  key=lambda l: (l.path, l.line, l.column))


def memory_leak(allocated: list[int], *, warmup: int = 3, min_steps: int = 10) -> int | None:
    """TD607: bytes gained after warm-up when memory grows step after step, else None."""
    series = allocated[warmup:]
    if len(series) < min_steps:
        return None
    rises = sum(b > a for a, b in zip(series, series[1:]))
    gained = series[-1] - series[0]
    if rises >= 0.8 * (len(series) - 1) and gained >= max(8 * MiB, 0.1 * series[0]):
        return gained
    return None


def memory_fit(peak: int, capacity: int, steps: int, *, low: float = 0.10, high: float = 0.95, min_steps: int = 50) -> str | None:
    """TD609: 'low' when the peak stays far below capacity over a long run, 'high' within 5 % of it."""
    if capacity <= 0 or steps <= 0:
        return None
    share = peak / capacity
    if share >= high:
        return "high"
    if share < low and steps >= min_steps:
        return "low"
    return None


def amp_missing(capability: tuple[int, int] | None, autocast_steps: int, steps: int, fp32_params: bool, *, min_steps: int = 10) -> bool:
    """TD608: tensor cores (compute capability >= 7.0) idle: float32 training with no autocast."""
    return capability is not None and capability >= (7, 0) and steps >= min_steps and autocast_steps == 0 and fp32_params


def decide(readings: dict, where: Location | None) -> list[Finding]:
    """All accelerator findings from one session's readings (see WatchSession._gpu_readings)."""
    out: list[Finding] = []
    steps = readings["steps"]
    if gpu_unused(readings["cuda_available"], readings["trained_devices"], steps):
        out.append(Finding("TD103", f"a CUDA GPU is available, yet all {steps} training steps ran on the CPU", where,
                           "pick the device with torch.device('cuda' if torch.cuda.is_available() else 'cpu') and move model and batches"))
    if readings["on_accelerator"]:
        for loc in syncs_every_step(readings["sync_steps"], readings["steps"]):
            n = min(len(readings["sync_steps"][loc]), steps)
            out.append(Finding("TD603", f"host-device synchronisation here in {n} of {steps} steps: the CPU waits for the GPU every step",
                               loc, "read values back only every N steps (if step % 100 == 0: ...) or accumulate on the device"))
        gained = memory_leak(readings["allocated"])
        if gained is not None:
            out.append(Finding("TD607", f"device memory grows step after step: +{gained / MiB:.0f} MiB over {len(readings['allocated'])} steps",
                               where, "look for tensors kept across steps (loss.item() instead of loss, detach() stored outputs)"))
        fit = memory_fit(readings["peak"], readings["capacity"], steps) if readings["capacity"] else None
        if fit == "high":
            out.append(Finding("TD609", f"peak device memory {readings['peak'] / MiB:.0f} MiB is within 5 % of the "
                               f"{readings['capacity'] / MiB:.0f} MiB available: one larger batch runs out of memory", where,
                               "lower the batch size, or use AMP / gradient checkpointing"))
        elif fit == "low":
            out.append(Finding("TD609", f"peak device memory {readings['peak'] / MiB:.0f} MiB uses under 10 % of the "
                               f"{readings['capacity'] / MiB:.0f} MiB available", where, "a larger batch size would use the GPU better"))
        if amp_missing(readings["capability"], readings["autocast_steps"], steps, readings["fp32_params"]):
            major, minor = readings["capability"]
            out.append(Finding("TD608", f"training in float32 without autocast on a GPU with tensor cores (compute capability {major}.{minor})",
                               where, "wrap forward and loss in torch.autocast('cuda', dtype=torch.bfloat16)"))
    return out


def most_common_device(devices: list[str]) -> str | None:
    return Counter(devices).most_common(1)[0][0] if devices else None
