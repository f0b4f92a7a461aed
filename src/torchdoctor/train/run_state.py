"""What fit() keeps between epochs and runs: the callback state and the checkpoint directory."""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from torchdoctor.errors import UsageError
from torchdoctor.train import checkpoint, distributed
from torchdoctor.train.checkpoint import CheckpointError, CheckpointWarning
from torchdoctor.train.history import History
from torchdoctor.train.rng import capture_rng, restore_rng

__all__ = ["FitState", "RunFiles", "CHECKPOINT_PREFIX", "METRICS_CSV"]

CHECKPOINT_PREFIX = "epoch-"
METRICS_CSV = "metrics.csv"


@dataclass
class FitState:
    """Handed to callbacks: ``on_fit_start``, ``on_epoch_start``, ``on_step_end``, ``on_epoch_end``, ``on_fit_end``.

    ``loss`` is the last step's loss as a device tensor (reading it syncs); set
    ``stop = True`` to end training after the current epoch.
    """

    model: nn.Module
    optimizer: Any
    epochs: int
    history: History
    epoch: int = 0
    step: int = 0
    loss: torch.Tensor | None = None
    logs: dict[str, Any] = field(default_factory=dict)
    stop: bool = False


class RunFiles:
    """The checkpoint directory of one run: epoch-NNNN.pt files and metrics.csv, written by rank 0."""

    def __init__(self, directory: Path, keep_last: int, world: distributed.World) -> None:
        self.directory, self.keep_last, self.world = directory, keep_last, world

    @classmethod
    def prepare(cls, directory: Any, keep_last: int, world: distributed.World, resume: bool = True) -> RunFiles:
        """Make sure checkpoints can be written before training starts, not after the first hour."""
        path = Path(directory)
        stale = checkpoint.latest(path, prefix=CHECKPOINT_PREFIX)
        if stale is not None and not resume:
            # A fresh run would interleave its epoch files with the old run's, and a later
            # resume would pick the old run's newest: refuse rather than delete anything.
            raise UsageError(
                f"checkpoint_dir {str(path)!r} already holds checkpoints ({stale.name}); "
                "pass resume=True to continue that run, or use an empty directory"
            )
        try:
            path.mkdir(parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix=".torchdoctor-probe-", dir=path)
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise CheckpointError(f"checkpoint_dir {str(path)!r} is not a writable directory ({reason}); nothing was trained") from None
        return cls(path, keep_last, world)

    def save(self, epoch: int, step: int, model: nn.Module, optimizer: Any, scaler: Any, scheduler: Any,
             history: History, loaders: tuple[Any, ...]) -> None:  # fmt: skip
        # Every rank's RNG: a resumed rank continues its own random stream.
        rng = distributed.gather_objects(self.world, capture_rng(loaders))
        if not self.world.is_main:
            return
        target = self.directory / f"{CHECKPOINT_PREFIX}{epoch:04d}.pt"
        extra = {"rng": rng, "history": history.rows, "world_size": self.world.size}
        checkpoint.save(target, model=model, optimizer=optimizer, scaler=scaler, scheduler=scheduler,
                        epoch=epoch, step=step, extra=extra, keep_last=self.keep_last)  # fmt: skip
        history.write_csv(self.directory / METRICS_CSV)

    def restore(self, model: nn.Module, optimizer: Any, scaler: Any, scheduler: Any, device: torch.device,
                loaders: tuple[Any, ...]) -> tuple[int, int, list[dict[str, Any]]] | None:  # fmt: skip
        """Load the newest checkpoint into the objects; (epoch, step, history rows), or None if there is none."""
        path = checkpoint.latest(self.directory, prefix=CHECKPOINT_PREFIX)
        if path is None:
            return None
        result = checkpoint.load(path, model, optimizer, scaler, scheduler, map_location=device)
        if result.epoch is None or result.step is None:
            raise CheckpointError(f"{str(path)!r} has no epoch/step: it was not written by fit(); move it out of checkpoint_dir")
        states = result.extra.get("rng") or []
        if len(states) == self.world.size:
            restore_rng(states[self.world.rank], loaders)
        else:
            warnings.warn(
                f"{path} was written by {len(states)} rank(s), this run has {self.world.size}: "
                "random states not restored, so data order and dropout differ from an uninterrupted run",
                CheckpointWarning,
                stacklevel=2,
            )
        if self.world.is_main:
            print(f"torchdoctor: resuming from {path} (epoch {result.epoch}, step {result.step})", file=sys.stderr)
        return int(result.epoch), int(result.step), list(result.extra.get("history") or [])
