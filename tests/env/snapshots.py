"""Realistic facts snapshots of real machines, for the diagnosis tests."""

from __future__ import annotations

import copy
from typing import Any

CU126_ARCHS = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
CU128_ARCHS = ["sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
CU118_ARCHS = ["sm_50", "sm_60", "sm_61", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]


def gpu(index: int, name: str, cap: tuple[int, int], memory_mb: int = 81559, **extra: Any) -> dict[str, Any]:
    g = {
        "index": index, "name": name, "capability": list(cap), "memory_mb": memory_mb,
        "pci": f"00000000:{0x18 + index:02X}:00.0", "compute_mode": "Default", "mig_mode": "Disabled",
        "mig_instances": None, "uuid": f"GPU-{index:08x}-5c2e-4a9b-8f11-9d3e7a1b2c{index:02d}",
    }
    g.update(extra)
    return g


_LINUX_H100: dict[str, Any] = {
    "platform": "linux", "machine": "x86_64", "python_version": "3.11.9",
    "torch_version": "2.7.1+cu126", "torch_cuda": "12.6", "torch_hip": None,
    "torch_file": "/opt/venv/lib/python3.11/site-packages/torch/__init__.py",
    "cuda_available": True, "device_count": 1, "arch_list": CU126_ARCHS,
    "driver_version": "560.35.03", "drv_cuda": 12060, "proc_driver_present": True,
    "proc_driver_version": "560.35.03", "nvml_lib_version": "12.560.35.03",
    "dev_nvidia_present": True, "dev_nvidia_uvm_present": True, "libcuda_loadable": True,
    "libcuda_path": "/usr/lib/x86_64-linux-gnu/libcuda.so.560.35.03", "nvidia_smi_present": True,
    "nvml_device_count": 1, "pci_nvidia_devices": 1,
    "kernel_modules": ["nvidia", "nvidia_drm", "nvidia_modeset", "nvidia_uvm"],
    "cvd": None, "cuda_device_order": None, "ld_library_path": "/usr/local/nvidia/lib64", "env": {},
    "gpus": [gpu(0, "NVIDIA H100 80GB HBM3", (9, 0))],
    "torch_device_names": ["NVIDIA H100 80GB HBM3"], "in_container": False, "container_markers": [],
    "is_wsl": False, "osrelease": "5.15.0-105-generic", "linux_driver_pkgs": ["nvidia-driver-560"],
    "pip_dists": ["torch 2.7.1+cu126", "triton 3.3.1"], "conda_pkgs": [], "shm_bytes": 270 * 2**30,
    "cpu_count": 64, "mp_start_method": "fork",
}

_LAPTOP: dict[str, Any] = {
    "platform": "linux", "machine": "x86_64", "python_version": "3.12.3",
    "torch_version": "2.9.0+cpu", "torch_cuda": None, "torch_hip": None, "cuda_available": False,
    "arch_list": [], "proc_driver_present": False, "dev_nvidia_present": False, "libcuda_loadable": False,
    "nvidia_smi_present": False, "pci_nvidia_devices": 0, "pci_amd_devices": 0, "kernel_modules": [],
    "cvd": None, "in_container": False, "is_wsl": False, "shm_bytes": 8 * 2**30, "cpu_count": 8,
    "pip_dists": ["torch 2.9.0+cpu"], "conda_pkgs": [], "mp_start_method": "fork",
}


def h100(**overrides: Any) -> dict[str, Any]:
    """A healthy H100 server on a cu126 build; keyword arguments replace facts (None deletes)."""
    return _apply(_LINUX_H100, overrides)


def laptop(**overrides: Any) -> dict[str, Any]:
    """A laptop without any GPU and the CPU build of torch."""
    return _apply(_LAPTOP, overrides)


def rtx4090_cu118(**overrides: Any) -> dict[str, Any]:
    """A workstation with an RTX 4090 (sm_89) on a cu118 build that has sm_86 (not sm_89) cubins."""
    base = h100(
        torch_version="2.3.1+cu118", torch_cuda="11.8", arch_list=CU118_ARCHS, driver_version="550.120",
        proc_driver_version="550.120", nvml_lib_version="12.550.120", drv_cuda=12040,
        libcuda_path="/usr/lib/x86_64-linux-gnu/libcuda.so.550.120",
        gpus=[gpu(0, "NVIDIA GeForce RTX 4090", (8, 9), 24564)], torch_device_names=["NVIDIA GeForce RTX 4090"],
        shm_bytes=32 * 2**30,
    )
    return _apply(base, overrides)


def gb10_cu130(**overrides: Any) -> dict[str, Any]:
    """NVIDIA DGX Spark: GB10 (compute capability 12.1), aarch64, torch cu130."""
    base = h100(
        machine="aarch64", torch_version="2.9.1+cu130", torch_cuda="13.0",
        arch_list=["sm_80", "sm_90", "sm_100", "sm_110", "sm_120"], driver_version="580.95.05",
        proc_driver_version="580.95.05", nvml_lib_version="13.580.95.05", drv_cuda=13000,
        libcuda_path="/usr/lib/aarch64-linux-gnu/libcuda.so.580.95.05",
        gpus=[gpu(0, "NVIDIA GB10", (12, 1), None)], torch_device_names=["NVIDIA GB10"],
        shm_bytes=60 * 2**30, cpu_count=20,
    )
    return _apply(base, overrides)


def _apply(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out
