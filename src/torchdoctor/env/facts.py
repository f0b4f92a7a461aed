"""A tolerant view of a facts snapshot: every key optional, wrong types read as unknown."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from torchdoctor.env.knowledge import cuda_pair, parse_version

# The snapshot keys of the issue (plus a few the probe adds: gpus[].uuid,
# pci_amd_devices, dev_kfd_present, rocm_present, ld_stub_libcuda, probe_errors).
SNAPSHOT_KEYS = (
    "platform", "machine", "python_version", "torch_version", "torch_cuda", "torch_hip", "torch_file",
    "torch_import_error", "cuda_available", "device_count", "arch_list", "mps_built", "mps_available",
    "proc_translated", "macos_version", "driver_version", "drv_cuda", "proc_driver_present",
    "proc_driver_version", "nvml_lib_version", "dev_nvidia_present", "dev_nvidia_uvm_present",
    "libcuda_loadable", "libcuda_path", "nvidia_smi_present", "nvidia_smi_error", "nvml_device_count",
    "pci_nvidia_devices", "kernel_modules", "cvd", "cuda_device_order", "ld_library_path", "env", "gpus",
    "torch_device_names", "in_container", "container_markers", "is_wsl", "wsl_version", "osrelease",
    "dev_dxg_present", "wsl_libcuda_present", "linux_driver_pkgs", "pip_dists", "conda_pkgs", "shm_bytes",
    "cpu_count", "init_warning", "init_error", "dmesg_xid", "mp_start_method",
)


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    cc: int | None  # 86 for 8.6
    memory_mb: int | None
    compute_mode: str
    mig_mode: str
    mig_instances: int | None
    uuid: str
    ecc_uncorrected: int | None

    @property
    def label(self) -> str:
        cap = f" (compute capability {self.cc // 10}.{self.cc % 10})" if self.cc is not None else ""
        return f"GPU {self.index} {self.name}{cap}"


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


class Facts:
    """Read access to a snapshot; nothing here raises on a malformed value.

    ``snapshot``: the facts were read from a file taken on some machine, so the
    findings speak of "that machine" and "there" (``this``, ``here``).
    """

    def __init__(self, raw: dict[str, Any], *, snapshot: bool = False) -> None:
        self.raw = raw if isinstance(raw, dict) else {}
        self.snapshot = snapshot

    @property
    def this(self) -> str:
        return "that" if self.snapshot else "this"

    @property
    def here(self) -> str:
        return "there" if self.snapshot else "here"

    def str(self, key: str) -> str | None:
        v = self.raw.get(key)
        return v if isinstance(v, str) else None

    def text(self, key: str) -> str:
        return self.str(key) or ""

    def bool(self, key: str) -> bool | None:
        v = self.raw.get(key)
        return v if isinstance(v, bool) else None

    def int(self, key: str) -> int | None:
        return _int(self.raw.get(key))

    def list(self, key: str) -> list[str]:
        v = self.raw.get(key)
        return [str(x) for x in v if isinstance(x, (str, int))] if isinstance(v, list) else []

    def env(self, name: str) -> str | None:
        v = self.raw.get("env")
        if isinstance(v, dict) and isinstance(v.get(name), str):
            return v[name]
        return None

    # -- derived ---------------------------------------------------------------
    @property
    def gpus(self) -> list[Gpu]:
        out = []
        raw = self.raw.get("gpus")
        for i, g in enumerate(raw if isinstance(raw, list) else []):
            if not isinstance(g, dict):
                continue
            cap = g.get("capability")
            cc = None
            if isinstance(cap, (list, tuple)) and len(cap) == 2 and all(_int(c) is not None for c in cap):
                cc = _int(cap[0]) * 10 + _int(cap[1])  # type: ignore[operator]
            elif isinstance(cap, str) and cuda_pair(cap):
                major, minor = cuda_pair(cap)  # type: ignore[misc]
                cc = major * 10 + minor
            out.append(Gpu(
                index=_int(g.get("index")) if _int(g.get("index")) is not None else i,  # type: ignore[arg-type]
                name=str(g.get("name") or "NVIDIA GPU"),
                cc=cc,
                memory_mb=_int(g.get("memory_mb")),
                compute_mode=str(g.get("compute_mode") or ""),
                mig_mode=str(g.get("mig_mode") or ""),
                mig_instances=_int(g.get("mig_instances")),
                uuid=str(g.get("uuid") or ""),
                ecc_uncorrected=_int(g.get("ecc_uncorrected")),
            ))
        return out

    @property
    def platform(self) -> str:
        return self.text("platform")

    @property
    def linux(self) -> bool:
        return self.platform.startswith("linux")

    @property
    def windows_driver_numbers(self) -> bool:
        """Windows and WSL report the Windows driver's version numbers."""
        return self.platform in ("win32", "cygwin") or bool(self.bool("is_wsl"))

    @property
    def torch_ok(self) -> bool:
        return self.str("torch_version") is not None and not self.str("torch_import_error")

    @property
    def torch_cuda(self) -> tuple[int, int] | None:
        return cuda_pair(self.str("torch_cuda"))

    @property
    def driver(self) -> tuple[int, ...] | None:
        for key in ("driver_version", "proc_driver_version", "nvml_lib_version"):
            v = parse_version(self.str(key))
            if v is not None and len(v) >= 2:
                # NVML's own version reads "12.550.54.14" or "12.550.120" (two-part drivers):
                # a leading CUDA major (< 100, no driver branch is that low) is not the driver.
                return v[1:] if key == "nvml_lib_version" and len(v) >= 3 and v[0] < 100 else v
        return None

    @property
    def drv_cuda(self) -> tuple[int, int] | None:
        """The driver's CUDA version; else the one PyTorch's 'driver too old (found version 11040)' names."""
        v = cuda_pair(self.int("drv_cuda"))
        if v is None:
            m = re.search(r"too old \(found version (\d+)\)", self.init_text)
            v = cuda_pair(int(m.group(1))) if m else None
        return v

    @property
    def nvidia_count(self) -> int | None:
        """NVIDIA GPUs this machine has, by the best evidence; None when nothing says."""
        counts = [c for c in (self.int("nvml_device_count"), self.int("pci_nvidia_devices")) if c is not None]
        if self.gpus:
            counts.append(len(self.gpus))
        return max(counts) if counts else None

    @property
    def nvidia_present(self) -> bool:
        """Hardware evidence of an NVIDIA GPU (not just software)."""
        return bool(self.nvidia_count) or bool(self.bool("cuda_available"))

    @property
    def amd_present(self) -> bool:
        return bool(self.int("pci_amd_devices")) or bool(self.bool("dev_kfd_present"))

    @property
    def modules(self) -> set[str]:
        return {m.strip() for m in self.list("kernel_modules")}

    @property
    def nvidia_module_loaded(self) -> bool | None:
        mods = self.modules
        if mods:
            return "nvidia" in mods
        return self.bool("proc_driver_present")

    @property
    def init_text(self) -> str:
        return "\n".join(t for t in (self.text("init_error"), self.text("init_warning"), self.text("nvidia_smi_error")) if t)

    @property
    def cvd(self) -> str | None:
        return self.str("cvd")
