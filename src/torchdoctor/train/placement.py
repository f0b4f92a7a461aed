"""Where fit() puts the model: on the chosen device, or left where it is when it spans several (model parallel)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["Placement", "plan", "parameter_devices"]


@dataclass(frozen=True)
class Placement:
    """``move``: whether fit() moves the model to ``device``; ``device``: where batches go."""

    move: bool
    device: torch.device
    spread: tuple[torch.device, ...] = ()

    @property
    def model_parallel(self) -> bool:
        return len(self.spread) > 1

    def note(self) -> str:
        names = ", ".join(str(d) for d in self.spread)
        return (f"torchdoctor: the model's parameters span {names}: left where they are (model parallel); "
                f"batches go to {self.device}, targets to the output's device")  # fmt: skip


def parameter_devices(model: nn.Module) -> list[torch.device]:
    """The distinct devices of the model's parameters, in the order the parameters are registered."""
    seen: dict[torch.device, None] = {}
    for param in model.parameters():
        seen.setdefault(param.device, None)
    return list(seen)


def plan(devices: Sequence[torch.device], wanted: torch.device) -> Placement:
    """Move a model that sits on one device (or none) to ``wanted``; leave a spread-out one alone.

    A model whose parameters already span several devices was placed by its
    author, stage by stage: moving it to one device would undo that (and may
    not fit). Its first parameter's device is where its forward starts, so
    batches go there.
    """
    if len(devices) > 1:
        return Placement(move=False, device=devices[0], spread=tuple(devices))
    return Placement(move=True, device=wanted)
