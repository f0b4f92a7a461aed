"""Choosing the numeric precision: bf16 where supported, fp16 only with a GradScaler, fp32 on the CPU."""

from __future__ import annotations

import contextlib
from typing import Any, ContextManager

import torch

from torchdoctor.errors import UsageError

__all__ = ["resolve_precision", "autocast_context", "make_scaler", "PRECISIONS"]

PRECISIONS = ("fp32", "bf16", "fp16")
_ALIASES = {
    "auto": "auto",
    "fp32": "fp32", "32": "fp32", "float32": "fp32", "32-true": "fp32",
    "bf16": "bf16", "bfloat16": "bf16", "bf16-mixed": "bf16",
    "fp16": "fp16", "16": "fp16", "float16": "fp16", "16-mixed": "fp16",
}  # fmt: skip
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
_NO_AUTOCAST = contextlib.nullcontext()  # reusable and re-entrant: one object for every step


def resolve_precision(requested: Any, device_type: str, bf16_supported: bool | None = None) -> str:
    """``"fp32"``, ``"bf16"`` or ``"fp16"`` for ``requested`` on a device of ``device_type``.

    ``"auto"``: on CUDA bf16 where the GPU supports it, else fp16 (with a
    GradScaler); fp32 everywhere else, since CPU and MPS autocast rarely pay off.
    ``bf16_supported`` is injected by tests; None asks torch.
    """
    key = str(requested).strip().lower() if requested is not None else "auto"
    name = _ALIASES.get(key)
    if name is None:
        raise UsageError(f"unknown precision {requested!r}; use 'auto', 'fp32', 'bf16' or 'fp16'")
    if name != "auto":
        if name != "fp32" and device_type not in ("cuda", "cpu", "mps", "xpu"):
            raise UsageError(f"precision {name!r} needs autocast, which the {device_type!r} device does not have")
        return name
    if device_type != "cuda":
        return "fp32"
    if bf16_supported is None:
        bf16_supported = _cuda_bf16_supported()
    return "bf16" if bf16_supported else "fp16"


def _cuda_bf16_supported() -> bool:  # pragma: no cover - needs CUDA
    try:
        return bool(torch.cuda.is_bf16_supported())
    except (RuntimeError, AssertionError):
        return False


def autocast_context(device: torch.device, precision: str) -> ContextManager[Any]:
    """The autocast context for one forward pass; a no-op for fp32."""
    if precision == "fp32":
        return _NO_AUTOCAST
    return torch.autocast(device_type=device.type, dtype=_DTYPES[precision])


def make_scaler(device: torch.device, precision: str) -> Any:
    """A GradScaler for fp16 (gradients would underflow without it, TD604); None otherwise."""
    if precision != "fp16":
        return None
    return torch.amp.GradScaler(device.type)
