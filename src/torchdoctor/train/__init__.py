"""The cure: moving batches, a prefetching loader, safe checkpoints and a correct fit() loop."""

from __future__ import annotations

from torchdoctor.train import checkpoint
from torchdoctor.train.checkpoint import CheckpointError, CheckpointWarning
from torchdoctor.train.history import History
from torchdoctor.train.loop import FitState, fit
from torchdoctor.train.move import DeviceLoader, to_device
from torchdoctor.train.preload import PreloadedLoader
from torchdoctor.train.steps import TrainingError

__all__ = [
    "to_device",
    "DeviceLoader",
    "PreloadedLoader",
    "checkpoint",
    "fit",
    "FitState",
    "History",
    "CheckpointError",
    "CheckpointWarning",
    "TrainingError",
]
