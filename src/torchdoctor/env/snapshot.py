"""A facts snapshot read from a file is checked before it is diagnosed: wrong types and unknown shapes name the key.

``Facts`` reads every value tolerantly, which is right for the probe's own
output but wrong for a file someone hands us: ``{"gpus": "lots"}`` or ``{}``
would be diagnosed as "no GPU found". :func:`validate` says instead what is
malformed. ``null`` means unknown for every key, and keys this version does
not know are ignored (a newer probe's snapshot still diagnoses), but a
snapshot must hold at least one key this version knows.
"""

from __future__ import annotations

from typing import Any

from torchdoctor.env.facts import SNAPSHOT_KEYS

__all__ = ["validate", "KNOWN_KEYS"]

_STR = (
    "platform", "machine", "python_version", "torch_version", "torch_cuda", "torch_hip", "torch_file",
    "torch_import_error", "macos_version", "driver_version", "proc_driver_version", "nvml_lib_version",
    "libcuda_path", "libcuda_error", "nvml_error", "nvidia_smi_error", "cvd", "cuda_device_order",
    "ld_library_path", "ld_stub_libcuda", "osrelease", "init_warning", "init_error", "mp_start_method",
)
_BOOL = (
    "cuda_available", "mps_built", "mps_available", "proc_driver_present", "dev_nvidia_present",
    "dev_nvidia_uvm_present", "libcuda_loadable", "nvidia_smi_present", "in_container", "is_wsl",
    "dev_dxg_present", "wsl_libcuda_present", "dev_kfd_present", "rocm_present", "cuda_initialized",
)
_INT = (
    "device_count", "drv_cuda", "nvml_device_count", "pci_nvidia_devices", "pci_amd_devices", "shm_bytes",
    "cpu_count", "proc_translated", "wsl_version",
)
_STR_LIST = (
    "arch_list", "kernel_modules", "torch_device_names", "container_markers", "linux_driver_pkgs", "pip_dists",
    "conda_pkgs", "dmesg_xid", "probe_errors",
)
_GPU_STR = ("name", "pci", "compute_mode", "mig_mode", "uuid")
_GPU_INT = ("index", "memory_mb", "mig_instances", "ecc_uncorrected")

KNOWN_KEYS = frozenset(SNAPSHOT_KEYS) | frozenset(_STR + _BOOL + _INT + _STR_LIST) | {"gpus", "env"}


def validate(data: Any) -> list[str]:
    """What is wrong with a snapshot, one line per key ("'gpus' must be a list of objects, not a string")."""
    if not isinstance(data, dict):
        return [f"it must be a JSON object of facts, not {_kind(data)}"]
    if not data:
        return ["it is an empty object: there are no facts to diagnose"]
    if not KNOWN_KEYS & set(data):
        shown = ", ".join(repr(k) for k in sorted(data)[:5])
        return [f"none of its keys ({shown}{', ...' if len(data) > 5 else ''}) is a facts key: "
                "expected the output of `torchdoctor env --save-facts` or `--output-format json`"]
    problems = []
    for key, value in sorted(data.items()):
        if value is not None:
            problems.extend(_check(key, value))
    return problems


def _check(key: str, value: Any) -> list[str]:
    if key in _STR:
        return [] if isinstance(value, str) else [_want(key, "a string", value)]
    if key in _BOOL:
        return [] if isinstance(value, bool) else [_want(key, "true or false", value)]
    if key in _INT:
        return [] if _is_int(value) else [_want(key, "an integer", value)]
    if key in _STR_LIST:
        ok = isinstance(value, list) and all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in value)
        return [] if ok else [_want(key, "a list of strings", value)]
    if key == "env":
        ok = isinstance(value, dict) and all(isinstance(v, str) or v is None for v in value.values())
        return [] if ok else [_want(key, "an object of environment variables (strings)", value)]
    if key == "gpus":
        return _check_gpus(value)
    return []


def _check_gpus(value: Any) -> list[str]:
    if not isinstance(value, list):
        return [_want("gpus", "a list of objects", value)]
    problems = []
    for i, gpu in enumerate(value):
        where = f"gpus[{i}]"
        if not isinstance(gpu, dict):
            problems.append(_want(where, "an object", gpu))
            continue
        for key, item in sorted(gpu.items()):
            if item is None:
                continue
            if key in _GPU_STR and not isinstance(item, str):
                problems.append(_want(f"{where}.{key}", "a string", item))
            elif key in _GPU_INT and not _is_int(item):
                problems.append(_want(f"{where}.{key}", "an integer", item))
            elif key == "capability" and not _capability(item):
                problems.append(_want(f"{where}.capability", 'a [major, minor] pair or "8.6"', item))
    return problems


def _capability(item: Any) -> bool:
    if isinstance(item, str):
        major, dot, minor = item.partition(".")
        return bool(dot) and major.isdigit() and minor.isdigit()
    return isinstance(item, list) and len(item) == 2 and all(_is_int(c) for c in item)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _want(key: str, expected: str, value: Any) -> str:
    return f"{key!r} must be {expected}, not {_kind(value)} ({_short(value)})"


def _kind(value: Any) -> str:
    names = {str: "a string", bool: "a boolean", int: "an integer", float: "a number", list: "a list",
             dict: "an object", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _short(value: Any) -> str:
    import json

    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
