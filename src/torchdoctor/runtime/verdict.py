"""The end of a watch session: every check's findings gathered, merged across ranks, the stats written down."""

from __future__ import annotations

from typing import Any

from torchdoctor.findings import Finding, sort_findings
from torchdoctor.runtime.checks import data, devices, gpu

_DEVICE_CODES = {"TD201", "TD202", "TD203", "TD302", "TD303", "TD406", "TD707"}


def finish(session: Any, exc: BaseException | None) -> None:
    """Close ``session``: its findings final, its stats filled, its references to the program's objects dropped."""
    s = session
    s.end_stretch()  # the steps passed through since the last one read get their times
    found = list(s._findings) + s._modes.finish(interrupted=exc is not None) + s._grads.findings + s._losses.judge()
    found += s._samplers.findings + data.bottleneck_findings(s.timeline.steps, s._loader_location or s._step_location)
    found += gpu.decide(gpu_readings(s), s._step_location)
    if exc is not None and id(exc) not in s._explained and devices.is_device_error(exc):
        found.append(devices.explain_error(exc, s))
    found = [f for f in found if f is not None]
    if exc is not None:  # the error it died with, read through the table `torchdoctor explain` uses
        from torchdoctor.explain import explain_exception

        found += explain_exception(exc, found, probe=s._environment)
    from torchdoctor.runtime import distributed

    s._findings = distributed.merge(sort_findings(dedup([f for f in found if f is not None])))
    s.stats = s.timeline.stats()
    s.stats["peak_memory"] = s._peak or None
    s.stats["devices"] = sorted(d for d in s._train_devices if d)
    s._closed = True
    s._release_refs()
    if exc is not None and devices.is_device_error(exc) and hasattr(exc, "add_note"):
        for f in s._findings:
            if f.code in _DEVICE_CODES:
                exc.add_note(f"torchdoctor: {f.code} {f.message}\n    fix: {f.fix}")


def gpu_readings(s: Any) -> dict[str, Any]:
    """What ``checks.gpu.decide`` judges, from the session's probe and counters."""
    probe = s._probe_obj
    return {
        "steps": s.timeline.count,
        "cuda_available": probe.cuda_available(),
        "trained_devices": set(s._train_devices),
        "on_accelerator": probe.accelerator is not None and probe.accelerator in s._train_devices,
        "sync_steps": s._sync_steps,
        "allocated": s._memory,
        "peak": s._peak,
        "capacity": probe.memory_capacity() or 0,
        "capability": probe.capability(),
        "autocast_steps": s._autocast_steps,
        "fp32_params": bool(s._facts and s._facts[3]),
    }


def dedup(findings: list[Finding]) -> list[Finding]:
    seen: set[tuple[Any, ...]] = set()
    out = []
    for f in findings:
        key = (f.code, f.location, f.message, f.rank)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out
