"""How fit() turns one batch into a loss: (inputs, targets) pairs, mapping batches (HuggingFace), or step_fn."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

import torch
from torch import nn

from torchdoctor.errors import InputError, UsageError
from torchdoctor.train.move import to_device
from torchdoctor.train.steps import forward

__all__ = ["Objective", "count_samples"]

StepFn = Callable[[nn.Module, Any], Any]


class Objective:
    """The rules of fit() for one batch; calling it gives ``(loss, output, target)``.

    * a list/tuple ``(inputs, targets, *rest)``: ``loss_fn(model(inputs), targets)``;
      the rest (sample ids, weights) is not used; ``target`` is ``targets``;
    * a mapping: ``model(**batch)``; the loss is ``loss_fn(output, batch)``, or with
      ``loss_fn=None`` the output's ``.loss`` / ``["loss"]`` (HuggingFace); ``target``
      is the whole batch;
    * ``step_fn(model, batch)`` returns the loss or ``(loss, output)``, for anything else.

    ``target`` is what metrics receive beside the output. With ``follow_output``
    (a model spread over several devices) the targets go to the output's device.
    """

    def __init__(self, loss_fn: Callable[..., Any] | None, step_fn: StepFn | None, device: torch.device,
                 follow_output: bool = False) -> None:  # fmt: skip
        if loss_fn is not None and step_fn is not None:
            raise UsageError("fit(): give loss_fn or step_fn, not both (step_fn computes the loss itself)")
        for name, fn in (("loss_fn", loss_fn), ("step_fn", step_fn)):
            if fn is not None and not callable(fn):
                raise UsageError(f"fit(): {name} must be callable, got {type(fn).__name__}")
        self.step_fn = step_fn
        self.follow_output = follow_output
        # TD406: a loss with weights (CrossEntropyLoss(weight=...)) lives where the outputs are.
        self.loss_fn = loss_fn.to(device) if isinstance(loss_fn, nn.Module) and not follow_output else loss_fn
        self._loss_placed = not follow_output
        self._plain = loss_fn is not None and not follow_output

    def __call__(self, model: Callable[..., Any], batch: Any) -> tuple[torch.Tensor, Any, Any]:
        if self.step_fn is not None:
            return self._custom(model, batch)
        kind = type(batch)
        if (kind is tuple or kind is list) and len(batch) >= 2:  # the common case first: no ABC checks
            inputs, target = batch[0], batch[1]
            output = model(inputs) if type(inputs) is torch.Tensor else forward(model, inputs)
            if self.follow_output:
                target = self._to_output(output, target)
            if self._plain:  # a placed loss_fn: called directly, its result checked inline
                loss = self.loss_fn(output, target)  # type: ignore[misc]
                if type(loss) is torch.Tensor and loss.ndim == 0:
                    return loss, output, target
                return _check_loss(loss, "loss_fn"), output, target
            return self._loss(output, target, batch), output, target
        if isinstance(batch, Mapping):
            output = model(**batch)
            return self._loss(output, batch, batch), output, batch
        raise InputError(_unusable(batch))

    def _loss(self, output: Any, target: Any, batch: Any) -> torch.Tensor:
        if self.loss_fn is None:
            return _check_loss(_output_loss(output, batch), "the model output's loss")
        if not self._loss_placed:
            self._place_loss(output)
        return _check_loss(self.loss_fn(output, target), "loss_fn")

    def _custom(self, model: Callable[..., Any], batch: Any) -> tuple[torch.Tensor, Any, Any]:
        result = self.step_fn(model, batch)  # type: ignore[misc]
        if isinstance(result, (tuple, list)) and len(result) == 2:
            loss, output = result
        else:
            loss, output = result, None
        return _check_loss(loss, "step_fn"), output, batch

    def _to_output(self, output: Any, target: Any) -> Any:
        device = output.device if isinstance(output, torch.Tensor) else None
        return target if device is None else to_device(target, device)

    def _place_loss(self, output: Any) -> None:
        # A model spread over devices: its output (and so the loss) is on the last stage's device.
        if isinstance(output, torch.Tensor) and isinstance(self.loss_fn, nn.Module):
            self.loss_fn.to(output.device)
        self._loss_placed = True


def _output_loss(output: Any, batch: Any) -> Any:
    loss = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", None)
    if loss is not None:
        return loss
    what = type(output).__name__
    if isinstance(output, Mapping) and "loss" in output or hasattr(output, "loss"):
        labels = " (the batch has no 'labels' key)" if isinstance(batch, Mapping) and "labels" not in batch else ""
        raise InputError(f"the model returned {what} with loss=None{labels}: give the batch its labels, or pass loss_fn=")
    raise InputError(
        f"fit() was given no loss_fn and the model's output ({what}) has no .loss or ['loss']: "
        "pass loss_fn=..., or step_fn=... to compute the loss yourself"
    )


def _check_loss(loss: Any, source: str) -> torch.Tensor:
    if not isinstance(loss, torch.Tensor):
        raise InputError(f"{source} must give the loss as a tensor; it gave a {type(loss).__name__}")
    if loss.ndim != 0 and loss.numel() != 1:
        raise InputError(
            f"{source} gave a loss of shape {tuple(loss.shape)}, not one number: reduce it (.mean()) "
            "or use the loss's default reduction"
        )
    return loss


def _unusable(batch: Any) -> str:
    if isinstance(batch, (list, tuple)):
        kind = f"a {type(batch).__name__} of {len(batch)}"
    else:
        kind = f"a {type(batch).__module__}.{type(batch).__qualname__}" if not isinstance(batch, torch.Tensor) else "a Tensor"
    return (
        f"fit() cannot use a batch that is {kind}: each batch must be (inputs, targets, ...), a dict of the "
        "model's keyword arguments, or pass step_fn=lambda model, batch: loss"
    )


def count_samples(batch: Any) -> int:
    """The batch size, from host-side metadata only (no device sync): the first tensor's length."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    if isinstance(batch, Mapping):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for item in batch:
            if isinstance(item, (torch.Tensor, Mapping, list, tuple)):
                return count_samples(item)
    return 1
