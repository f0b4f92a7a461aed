"""Facts read from files and the environment: PCI, modules, device nodes, container, WSL, packages, shm."""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

from torchdoctor.env.system import System

ENV_VARS = (
    "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "PYTORCH_NVML_BASED_CUDA_CHECK", "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "CONDA_PREFIX", "VIRTUAL_ENV", "KUBERNETES_SERVICE_HOST",
    "SINGULARITY_CONTAINER", "APPTAINER_CONTAINER", "CUDA_MODULE_LOADING", "CUDA_LAUNCH_BLOCKING",
    "PYTORCH_CUDA_ALLOC_CONF", "WSL_DISTRO_NAME", "container", "LOCAL_RANK", "WORLD_SIZE",
)
_MODULES = re.compile(r"^(nvidia\w*|nouveau|amdgpu|radeon|vfio_pci)$")
_DRIVER_PKGS = re.compile(r"^(nvidia-driver|libnvidia-compute|nvidia-dkms|cuda-drivers|nvidia-utils|xserver-xorg-video-nvidia)")
_TORCH_DISTS = re.compile(r"^(torch|torchvision|torchaudio|pytorch-triton|triton|nvidia-cuda-runtime-cu\d+|nvidia-cudnn-cu\d+)$")
_CONDA_PKGS = ("pytorch", "pytorch-cuda", "pytorch-gpu", "pytorch-cpu", "cpuonly", "libtorch", "cudatoolkit", "cuda-version", "pytorch-mutex")


def environment(sysm: System) -> dict[str, Any]:
    env = sysm.environ
    return {
        "cvd": env.get("CUDA_VISIBLE_DEVICES"),
        "cuda_device_order": env.get("CUDA_DEVICE_ORDER"),
        "ld_library_path": env.get("LD_LIBRARY_PATH"),
        "env": {k: env[k] for k in ENV_VARS if k in env},
    }


def linux_driver(sysm: System) -> dict[str, Any]:
    """The kernel side: /proc/driver/nvidia, /proc/modules, /dev nodes, PCI functions."""
    out: dict[str, Any] = {}
    text = sysm.read("/proc/driver/nvidia/version")
    out["proc_driver_present"] = text is not None
    m = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)", text or "")
    if m:
        out["proc_driver_version"] = m.group(1)
    modules = sysm.read("/proc/modules")
    if modules is not None:
        names = (line.split(" ", 1)[0] for line in modules.splitlines())
        out["kernel_modules"] = sorted({n for n in names if _MODULES.match(n)})
    devs = sysm.listdir("/dev")
    if devs:
        out["dev_nvidia_present"] = "nvidiactl" in devs or any(re.fullmatch(r"nvidia\d+", d) for d in devs)
        out["dev_nvidia_uvm_present"] = "nvidia-uvm" in devs
        out["dev_dxg_present"] = "dxg" in devs
        out["dev_kfd_present"] = "kfd" in devs
    out["rocm_present"] = sysm.exists("/opt/rocm")
    out.update(_pci(sysm))
    return out


def _pci(sysm: System) -> dict[str, Any]:
    base = "/sys/bus/pci/devices"
    entries = sysm.listdir(base)
    if not entries:
        return {}
    nvidia = amd = 0
    for dev in entries:
        vendor = (sysm.read(f"{base}/{dev}/vendor") or "").strip().lower()
        klass = (sysm.read(f"{base}/{dev}/class") or "").strip().lower()
        if not klass.startswith("0x03"):  # display controllers: VGA 0300, 3D 0302
            continue
        nvidia += vendor == "0x10de"
        amd += vendor == "0x1002"
    return {"pci_nvidia_devices": nvidia, "pci_amd_devices": amd}


def container(sysm: System) -> dict[str, Any]:
    markers = [p for p in ("/.dockerenv", "/run/.containerenv") if sysm.exists(p)]
    cgroup = sysm.read("/proc/1/cgroup") or ""
    markers += [f"cgroup:{w}" for w in ("docker", "kubepods", "containerd", "lxc", "libpod") if w in cgroup]
    env = sysm.environ
    markers += [f"env:{k}" for k in ("container", "KUBERNETES_SERVICE_HOST", "SINGULARITY_CONTAINER", "APPTAINER_CONTAINER") if env.get(k)]
    return {"in_container": bool(markers), "container_markers": markers}


def wsl(sysm: System) -> dict[str, Any]:
    osrelease = (sysm.read("/proc/sys/kernel/osrelease") or "").strip()
    out: dict[str, Any] = {"osrelease": osrelease} if osrelease else {}
    low = osrelease.lower()
    out["is_wsl"] = "microsoft" in low
    if out["is_wsl"]:
        out["wsl_version"] = 2 if ("wsl2" in low or "microsoft-standard" in low) else 1
        out["wsl_libcuda_present"] = sysm.exists("/usr/lib/wsl/lib/libcuda.so.1") or sysm.exists("/usr/lib/wsl/lib/libcuda.so")
    pkgs = [n[: -len(".list")].split(":")[0] for n in sysm.listdir("/var/lib/dpkg/info") if n.endswith(".list")]
    out["linux_driver_pkgs"] = sorted({p for p in pkgs if _DRIVER_PKGS.match(p)})
    return out


def stub_on_path(sysm: System, ld_library_path: str | None) -> dict[str, Any]:
    for entry in (ld_library_path or "").split(os.pathsep):
        if entry and sysm.exists(os.path.join(entry, "libcuda.so.1")) and "stub" in entry:
            return {"ld_stub_libcuda": os.path.join(entry, "libcuda.so.1")}
    return {}


def shm(sysm: System) -> dict[str, Any]:
    try:
        st = os.statvfs("/dev/shm")
    except (OSError, AttributeError):
        return {}
    return {"shm_bytes": st.f_frsize * st.f_blocks}


def python_packages() -> dict[str, Any]:
    """pip-installed torch-family distributions (conda's own are in conda_pkgs) and conda packages."""
    pip: list[str] = []
    try:
        from importlib import metadata

        for dist in metadata.distributions():
            name = (dist.metadata.get("Name") or "").lower()
            if not _TORCH_DISTS.match(name):
                continue
            installer = (dist.read_text("INSTALLER") or "").strip().lower()
            if installer != "conda":
                pip.append(f"{name} {dist.version}")
    except Exception:  # a broken dist-info must not stop the probe
        pass
    return {"pip_dists": sorted(set(pip)), "conda_pkgs": _conda(sys.prefix)}


def _conda(prefix: str) -> list[str]:
    meta = os.path.join(prefix, "conda-meta")
    try:
        names = os.listdir(meta)
    except OSError:
        return []
    out = []
    for fname in sorted(names):
        if not fname.endswith(".json"):
            continue
        parts = fname[: -len(".json")].rsplit("-", 2)
        if len(parts) == 3 and parts[0] in _CONDA_PKGS:
            out.append(" ".join(parts))
    return out


def dmesg_xids(sysm: System, timeout: float) -> dict[str, Any]:
    """Xid numbers from the kernel log, when this user may read it."""
    restricted = (sysm.read("/proc/sys/kernel/dmesg_restrict") or "1").strip() != "0"
    if restricted and getattr(os, "geteuid", lambda: 1)() != 0:
        return {}
    res = sysm.run(["dmesg"], timeout)
    if not res.ok:
        return {}
    return {"dmesg_xid": sorted({int(x) for x in re.findall(r"NVRM: Xid \([^)]*\): (\d+)", res.stdout)})}


def load_json_lines(text: str) -> dict[str, Any]:
    """Merge the JSON objects a child printed, one per line; ignore anything else."""
    out: dict[str, Any] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.update(obj)
    return out
