"""The text report of `torchdoctor env`: what the machine has, then what is wrong and how to fix it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torchdoctor.env.facts import Facts
from torchdoctor.findings import Finding
from torchdoctor.report import text as text_report


def render(facts: dict[str, Any], findings: Sequence[Finding], *, color: bool = False,
           snapshot: str | None = None) -> str:
    """``snapshot``: the file the facts came from (the report then speaks of that machine)."""
    f = Facts(facts, snapshot=snapshot is not None)
    title = f"torchdoctor env: the machine of snapshot {snapshot}" if snapshot is not None else "torchdoctor env"
    lines = [title, *_summary(f), ""]
    if findings:
        lines.append(text_report.render(findings, color=color).rstrip("\n"))
    else:
        lines.append(f"No problems found: CUDA is usable {f.here}.")
    return "\n".join(lines) + "\n"


def _summary(f: Facts) -> list[str]:
    system = " ".join(x for x in (f.text("platform"), f.text("machine")) if x) or "unknown system"
    extra = [f"Python {f.text('python_version')}"] if f.str("python_version") else []
    if f.bool("in_container"):
        extra.append("in a container")
    if f.bool("is_wsl"):
        extra.append(f"WSL {f.int('wsl_version') or '?'}")
    out = [f"  system:  {system}" + (f" ({', '.join(extra)})" if extra else "")]
    out.append(f"  torch:   {_torch_line(f)}")
    out.append(f"  driver:  {_driver_line(f)}")
    if f.str("cvd") is not None:
        out.append(f"  CUDA_VISIBLE_DEVICES={f.text('cvd')!r}")
    gpus = f.gpus
    avail = f.bool("cuda_available")
    state = {True: "yes", False: "no", None: "unknown"}[avail]
    out.append(f"  CUDA available: {state}" + (f", {f.int('device_count')} device(s)" if f.int("device_count") else ""))
    for g in gpus:
        mem = f", {g.memory_mb / 1024:.0f} GiB" if g.memory_mb else ""
        cap = f", compute capability {g.cc // 10}.{g.cc % 10}, bf16: {'yes' if g.cc >= 80 else 'no'}" if g.cc is not None else ""
        mig = ", MIG enabled" if g.mig_mode.lower() == "enabled" else ""
        out.append(f"    GPU {g.index}: {g.name}{cap}{mem}{mig}")
    if not gpus:
        out.append("    no NVIDIA GPU found" if not f.nvidia_present else f"    {f.nvidia_count or '?'} NVIDIA GPU(s), details unknown")
    if f.platform == "darwin":
        out.append(f"  MPS available: {'yes' if f.bool('mps_available') else 'no'}")
    shm = f.int("shm_bytes")
    host = [f"CPUs: {f.int('cpu_count')}"] if f.int("cpu_count") else []
    if shm is not None:
        host.append(f"/dev/shm: {shm / 2**30:.1f} GiB" if shm >= 2**30 else f"/dev/shm: {shm // 2**20} MiB")
    if f.str("mp_start_method"):
        host.append(f"start method: {f.text('mp_start_method')}")
    if host:
        out.append("  host:    " + ", ".join(host))
    for err in f.list("probe_errors"):
        out.append(f"  (unknown: {err})")
    return out


def _torch_line(f: Facts) -> str:
    if f.str("torch_import_error"):
        return "cannot be imported"
    version = f.str("torch_version")
    if version is None:
        return "unknown"
    if f.str("torch_cuda"):
        build = f"CUDA {f.text('torch_cuda')} build"
        archs = f.list("arch_list")
        if archs:
            build += f", kernels: {' '.join(archs)}"
    elif f.str("torch_hip"):
        build = f"ROCm (HIP {f.text('torch_hip')}) build"
    else:
        build = "CPU-only build" if "torch_cuda" in f.raw else "build unknown"
    return f"{version} ({build})"


def _driver_line(f: Facts) -> str:
    driver = f.str("driver_version") or f.str("proc_driver_version")
    cuda = f.drv_cuda
    if driver is None and cuda is None:
        return "no NVIDIA driver found" if f.bool("proc_driver_present") is False or f.platform != "linux" else "unknown"
    parts = [f"NVIDIA {driver}" if driver else "NVIDIA driver"]
    if cuda:
        parts.append(f"supports CUDA up to {cuda[0]}.{cuda[1]}")
    return ", ".join(parts)
