"""torchdoctor: makes sure a PyTorch program gets GPU training right.

Importing the package imports no torch: the names that need torch are loaded
on first use, so that ``torchdoctor check`` starts fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "Finding",
    "Severity",
    "TorchDoctorError",
    "watch",
    "pick_device",
    "to_device",
    "DeviceLoader",
    "fit",
    "checkpoint",
]

_LAZY = {
    "Finding": ("torchdoctor.findings", "Finding"),
    "Severity": ("torchdoctor.findings", "Severity"),
    "TorchDoctorError": ("torchdoctor.errors", "TorchDoctorError"),
    "watch": ("torchdoctor.runtime", "watch"),
    "pick_device": ("torchdoctor.env.device", "pick_device"),
    "to_device": ("torchdoctor.train", "to_device"),
    "DeviceLoader": ("torchdoctor.train", "DeviceLoader"),
    "fit": ("torchdoctor.train", "fit"),
    "checkpoint": ("torchdoctor.train", "checkpoint"),
    # `%load_ext torchdoctor` in IPython/Jupyter: found by IPython, not part of the public namespace
    "load_ipython_extension": ("torchdoctor.runtime.magic", "load_ipython_extension"),
    "unload_ipython_extension": ("torchdoctor.runtime.magic", "unload_ipython_extension"),
}

if TYPE_CHECKING:
    from torchdoctor.env.device import pick_device
    from torchdoctor.errors import TorchDoctorError
    from torchdoctor.findings import Finding, Severity
    from torchdoctor.train import DeviceLoader, checkpoint, fit, to_device
    from torchdoctor.runtime import watch


def __getattr__(name: str) -> Any:
    try:
        module_name, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'torchdoctor' has no attribute {name!r}") from None
    import importlib

    value = getattr(importlib.import_module(module_name), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:  # the IPython hooks stay out of it
    return sorted(__all__)
