"""Checkpoint layouts written by other code, read as torchdoctor's own: {"model": sd}, Lightning, the PyTorch tutorial."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["normalize", "MODEL_KEYS"]

# Where the weights sit: many scripts and torchdoctor; Lightning; the PyTorch tutorial ("Saving a General Checkpoint").
MODEL_KEYS = ("model", "state_dict", "model_state_dict")
_STATES = {
    "optimizer": ("optimizer", "optimizer_state_dict", "optim", "optimizer_states"),
    "scheduler": ("scheduler", "lr_scheduler", "scheduler_state_dict", "lr_schedulers"),
    "scaler": ("scaler", "grad_scaler", "scaler_state_dict"),
}


def normalize(payload: Any) -> dict[str, Any] | None:
    """``payload`` as torchdoctor's layout (``model``, ``optimizer``, ``epoch``, ``step``, ...), or None if unknown."""
    if not isinstance(payload, Mapping) or not payload:
        return None
    if all(isinstance(v, torch.Tensor) for v in payload.values()):
        return {"model": dict(payload)}  # a bare state_dict
    for key in MODEL_KEYS:
        weights = payload.get(key)
        if _is_state_dict(weights):
            found: dict[str, Any] = {"model": dict(weights), "layout": key}
            for name, keys in _STATES.items():
                found[name] = _first_state(payload, keys)
            found["epoch"] = _integer(payload.get("epoch"))
            found["step"] = _integer(payload.get("step", payload.get("global_step")))
            return found
    return None


def _is_state_dict(value: Any) -> bool:
    # Mostly tensors: a module's extra state (get_extra_state) may hold other values beside them.
    return (
        isinstance(value, Mapping)
        and bool(value)
        and all(isinstance(k, str) for k in value)
        and any(isinstance(v, torch.Tensor) for v in value.values())
    )


def _first_state(payload: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        value = payload.get(key)
        if isinstance(value, list):  # Lightning keeps one entry per optimizer / scheduler
            value = value[0] if len(value) == 1 else None
        if isinstance(value, Mapping):
            return value
    return None


def _integer(value: Any) -> int | None:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None
