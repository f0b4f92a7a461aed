"""Readings from the accelerator: memory, capability, host-device syncs.

The decisions built on these readings live in pure functions
(``checks/gpu.py``); this thin layer is what touches CUDA, and tests replace
it with a scripted probe.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

SyncSink = Callable[..., None]  # sink(frame=None): the frame that synchronised, when known


class DeviceProbe:
    """No accelerator: every reading is absent. The base of the real and the scripted probes."""

    accelerator: str | None = None  # the device type training should happen on, if any

    def cuda_available(self) -> bool:
        return False

    def capability(self) -> tuple[int, int] | None:
        return None

    def memory_allocated(self) -> int | None:
        return None

    def memory_capacity(self) -> int | None:
        return None

    def peak_and_reset(self) -> int | None:
        return None

    def host_rss(self) -> int | None:
        """This process's resident memory in bytes (Linux), None where it cannot be read cheaply."""
        return _host_rss()

    def start_sync_watch(self, sink: SyncSink) -> None:
        """Call ``sink()`` at every host-device synchronisation, from the syncing thread."""

    def stop_sync_watch(self) -> None:
        pass


class CudaProbe(DeviceProbe):
    """CUDA readings; sync detection uses ``torch.cuda.set_sync_debug_mode('warn')``."""

    accelerator = "cuda"

    def __init__(self) -> None:
        import torch

        self._torch = torch
        self._saved_mode: Any = None
        self._saved_show: Any = None
        self._saved_filters: Any = None

    def cuda_available(self) -> bool:
        return True

    def capability(self) -> tuple[int, int] | None:
        try:
            return tuple(self._torch.cuda.get_device_capability())  # type: ignore[return-value]
        except Exception:
            return None

    def memory_allocated(self) -> int | None:
        return int(self._torch.cuda.memory_allocated()) if self._torch.cuda.is_initialized() else None

    def memory_capacity(self) -> int | None:
        try:
            return int(self._torch.cuda.get_device_properties(self._torch.cuda.current_device()).total_memory)
        except Exception:
            return None

    def peak_and_reset(self) -> int | None:
        cuda = self._torch.cuda
        if not cuda.is_initialized():
            return None
        peak = int(cuda.max_memory_allocated())
        cuda.reset_peak_memory_stats()
        return peak

    def start_sync_watch(self, sink: SyncSink) -> None:
        cuda = self._torch.cuda
        self._saved_mode = cuda.get_sync_debug_mode()
        self._saved_filters = list(warnings.filters)
        self._saved_show = warnings.showwarning
        previous = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
            if "synchronizing CUDA operation" in str(message):
                sink()
                return
            previous(message, category, filename, lineno, file, line)

        warnings.filterwarnings("always", message=".*synchronizing CUDA operation.*")
        warnings.showwarning = show
        cuda.set_sync_debug_mode("warn")

    def stop_sync_watch(self) -> None:
        if self._saved_show is None:
            return
        self._torch.cuda.set_sync_debug_mode(self._saved_mode)
        warnings.showwarning = self._saved_show
        warnings.filters[:] = self._saved_filters
        self._saved_show = None


_PAGE: int | None = None


def _host_rss() -> int | None:
    global _PAGE
    try:
        with open("/proc/self/statm", "rb") as fh:
            resident = int(fh.read().split()[1])
        if _PAGE is None:
            import os

            _PAGE = os.sysconf("SC_PAGE_SIZE")
        return resident * _PAGE
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def default_probe() -> DeviceProbe:
    import torch

    if torch.cuda.is_available():
        return CudaProbe()
    return DeviceProbe()
