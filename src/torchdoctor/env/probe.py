"""probe(): collect the facts of this machine; never raises, never initialises CUDA in this process."""

from __future__ import annotations

import multiprocessing
import os
import platform
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from torchdoctor.env import probe_host as host
from torchdoctor.env._child import DRIVER_SCRIPT, TORCH_SCRIPT
from torchdoctor.env.system import CommandResult, System

__all__ = ["probe", "Timeouts"]


class Timeouts:
    """Seconds each outside step may take. A cold ``import torch`` plus CUDA start-up on an
    8-GPU node takes seconds, so the torch child gets the most."""

    def __init__(self, torch: float = 60.0, driver: float = 20.0, command: float = 10.0) -> None:
        self.torch, self.driver, self.command = torch, driver, command


def probe(*, init_cuda: bool = True, system: System | None = None, timeouts: Timeouts | None = None) -> dict[str, Any]:
    """The facts snapshot of this machine (keys of the issue's snapshot format).

    With ``init_cuda=False`` nothing initialises CUDA anywhere (the runtime
    auditor calls it at start-up); otherwise CUDA is initialised, but only in a
    child process. A step that fails, hangs or is missing leaves its keys
    unknown and a line in ``probe_errors``.
    """
    sysm = _never_raising(system or System())
    t = timeouts or Timeouts()
    errors: list[str] = []
    facts: dict[str, Any] = _basics()
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            torch_job = pool.submit(_torch_facts, sysm, init_cuda, t.torch, errors)
            driver_job = pool.submit(_driver_facts, sysm, t, errors)
            facts.update(_guarded(lambda: _host_facts(sysm, t), errors, "host"))
            facts.update(_guarded(driver_job.result, errors, "driver"))
            facts.update(_guarded(torch_job.result, errors, "torch"))
    except Exception as exc:  # a thread could not even start: keep what we have
        errors.append(f"probe: {type(exc).__name__}: {exc}")
    _settle(facts)
    if errors:
        facts["probe_errors"] = errors
    return facts


def _never_raising(sysm: System) -> System:
    """The same system, except that a read, listing or command that raises reads as 'unknown'."""

    def wrap(fn: Any, default: Any) -> Any:
        def safe(*args: Any) -> Any:
            try:
                return fn(*args)
            except Exception:
                return default
        return safe

    return System(
        run=wrap(sysm.run, CommandResult(None, missing=True)), read=wrap(sysm.read, None),
        listdir=wrap(sysm.listdir, []), exists=wrap(sysm.exists, False), which=wrap(sysm.which, None),
        environ=sysm.environ,
    )


def _guarded(fn: Any, errors: list[str], what: str) -> dict[str, Any]:
    try:
        return fn() or {}
    except Exception as exc:  # the probe's promise: unknown, never a traceback
        errors.append(f"{what}: {type(exc).__name__}: {exc}")
        return {}


def _basics() -> dict[str, Any]:
    out: dict[str, Any] = {
        "platform": sys.platform,
        "machine": platform.machine(),
        "python_version": platform.python_version(),
    }
    try:
        out["cpu_count"] = len(os.sched_getaffinity(0))  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        out["cpu_count"] = os.cpu_count()
    try:
        out["mp_start_method"] = multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
    except Exception:
        pass
    return out


def _host_facts(sysm: System, t: Timeouts) -> dict[str, Any]:
    out = host.environment(sysm)
    if sys.platform.startswith("linux"):
        for part in (host.linux_driver, host.container, host.wsl):
            out.update(part(sysm))
        out.update(host.stub_on_path(sysm, out.get("ld_library_path")))
        out.update(host.shm(sysm))
        if out.get("pci_nvidia_devices") or out.get("proc_driver_present"):
            out.update(host.dmesg_xids(sysm, t.command))
    if sys.platform == "darwin":
        out.update(_macos(sysm, t.command))
    out.update(host.python_packages())
    return out


def _macos(sysm: System, timeout: float) -> dict[str, Any]:
    out: dict[str, Any] = {"macos_version": platform.mac_ver()[0]}
    res = sysm.run(["sysctl", "-n", "sysctl.proc_translated"], timeout)
    if res.ok and res.stdout.strip().isdigit():
        out["proc_translated"] = int(res.stdout.strip())
    return out


def _driver_facts(sysm: System, t: Timeouts, errors: list[str]) -> dict[str, Any]:
    """libcuda and NVML through ctypes in a child; nvidia-smi when NVML could not answer."""
    out: dict[str, Any] = {}
    if sys.platform != "darwin":
        res = sysm.run([sys.executable, "-c", DRIVER_SCRIPT], t.driver)
        out = host.load_json_lines(res.stdout)
        if res.timed_out:
            errors.append(f"driver query (NVML) did not answer within {t.driver:g} s")
        elif not out and not res.missing:
            errors.append(f"driver query failed: {(res.stderr.strip().splitlines() or [f'exit status {res.rc}'])[-1]}")
    smi = sysm.which("nvidia-smi")
    out["nvidia_smi_present"] = smi is not None
    if smi and not out.get("gpus"):
        out.update(_nvidia_smi(sysm, smi, t.command, errors))
    return out


_SMI_FIELDS = ("index", "name", "pci.bus_id", "memory.total", "compute_mode", "mig.mode.current", "uuid", "driver_version")


def _nvidia_smi(sysm: System, smi: str, timeout: float, errors: list[str]) -> dict[str, Any]:
    for fields in (_SMI_FIELDS + ("compute_cap",), _SMI_FIELDS):  # compute_cap needs driver >= 510
        res = sysm.run([smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"], timeout)
        if res.timed_out:
            errors.append(f"nvidia-smi did not answer within {timeout:g} s")
            return {"nvidia_smi_error": f"timed out after {timeout:g} s"}
        if res.ok:
            return _parse_smi(res.stdout, fields)
        if res.missing:
            return {}
        message = (res.stdout + res.stderr).strip()
        if "not a valid field" not in message.lower():
            return {"nvidia_smi_error": message.splitlines()[0] if message else f"exit status {res.rc}"}
    return {}


def _parse_smi(text: str, fields: tuple[str, ...]) -> dict[str, Any]:
    gpus = []
    driver = None
    for line in text.strip().splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) != len(fields):
            continue
        row = dict(zip(fields, cols))
        g: dict[str, Any] = {"name": row["name"], "pci": row["pci.bus_id"], "compute_mode": row["compute_mode"],
                             "mig_mode": row["mig.mode.current"], "uuid": row["uuid"]}
        if row["index"].isdigit():
            g["index"] = int(row["index"])
        if row["memory.total"].isdigit():
            g["memory_mb"] = int(row["memory.total"])
        m = re.fullmatch(r"(\d+)\.(\d+)", row.get("compute_cap", ""))
        if m:
            g["capability"] = [int(m.group(1)), int(m.group(2))]
        driver = row["driver_version"] or driver
        gpus.append(g)
    out: dict[str, Any] = {"gpus": gpus} if gpus else {}
    if driver:
        out["driver_version"] = driver
    return out


def _torch_facts(sysm: System, init_cuda: bool, timeout: float, errors: list[str]) -> dict[str, Any]:
    torch = sys.modules.get("torch")
    if not init_cuda and torch is not None and hasattr(torch, "version"):
        return _torch_in_process(torch)
    res = sysm.run([sys.executable, "-c", TORCH_SCRIPT, "1" if init_cuda else "0"], timeout)
    out = host.load_json_lines(res.stdout)
    if res.timed_out:
        stage = "CUDA initialisation" if "torch_version" in out else "import torch"
        errors.append(f"{stage} did not finish within {timeout:g} s (the torch probe was stopped)")
    elif not out and not res.missing:
        tail = (res.stderr.strip().splitlines() or [f"exit status {res.rc}"])[-1]
        errors.append(f"torch probe failed: {tail}")
    return out


def _torch_in_process(torch: Any) -> dict[str, Any]:
    """Static build facts from an already imported torch; reads nothing that initialises CUDA."""
    out: dict[str, Any] = {
        "torch_version": str(getattr(torch, "__version__", "")),
        "torch_cuda": getattr(torch.version, "cuda", None),
        "torch_hip": getattr(torch.version, "hip", None),
        "torch_file": getattr(torch, "__file__", None),
    }
    try:
        flags = torch._C._cuda_getArchFlags() if hasattr(torch._C, "_cuda_getArchFlags") else ""
        out["arch_list"] = flags.split() if flags else []
        out["cuda_initialized"] = bool(torch.cuda.is_initialized())
    except Exception:
        pass
    return out


def _settle(facts: dict[str, Any]) -> None:
    """Fill what NVML and nvidia-smi left open from torch's own device list."""
    devs = facts.pop("torch_devices", None)
    if not facts.get("gpus") and isinstance(devs, list) and devs:
        facts["gpus"] = devs  # CUDA's order and only the visible ones, but better than nothing
