"""The pieces of one step that fit() repeats: call the model, read losses back rarely, compute metrics."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Callable

import torch

from torchdoctor.errors import InputError, TorchDoctorError

__all__ = ["TrainingError", "forward", "read_window", "check_finite", "metric_values"]


class TrainingError(TorchDoctorError):
    """Training cannot go on (a loss that is not finite); nothing broken was saved."""


def forward(model: Callable[..., Any], inputs: Any) -> Any:
    """``model(inputs)``; a dict of inputs becomes keyword arguments, a list positional ones."""
    if isinstance(inputs, torch.Tensor):  # the common case first: no ABC checks per step
        return model(inputs)
    if isinstance(inputs, Mapping):
        return model(**inputs)
    if isinstance(inputs, list) or (type(inputs) is tuple):
        return model(*inputs)
    return model(inputs)


def read_window(window: list[torch.Tensor], first_step: int, epoch: int) -> list[float]:
    """The losses of the last steps as floats: one device-to-host sync for the whole window."""
    if not window:
        return []
    values = torch.stack(window).float().tolist()
    window.clear()
    if not all(map(math.isfinite, values)):  # the common case in one C-level pass; the message only when needed
        for offset, value in enumerate(values):
            check_finite(value, f"training loss at epoch {epoch + 1}, step {first_step + offset}")
    return values


def check_finite(value: float, where: str) -> None:
    if not math.isfinite(value):
        raise TrainingError(
            f"{where} is {value}: training stopped and nothing was saved after it. "
            "Lower the learning rate, set clip_grad_norm=1.0, or look for NaN/inf in the data"
        )


def metric_values(metrics: Mapping[str, Callable[..., Any]], output: Any, target: Any) -> list[torch.Tensor]:
    """Each metric for one batch, as a float tensor left where it was computed."""
    values = []
    for name, metric in metrics.items():
        value = metric(output, target)
        if not isinstance(value, torch.Tensor):
            value = torch.tensor(float(value))
        if value.numel() != 1:
            raise InputError(f"metric {name!r} must return one number per batch; it returned shape {tuple(value.shape)}")
        values.append(value.detach().float().reshape(()))
    return values
