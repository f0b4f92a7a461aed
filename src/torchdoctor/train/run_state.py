"""What fit() keeps between epochs and runs: the callback state and the checkpoint directory."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from torchdoctor.errors import UsageError
from torchdoctor.train import checkpoint, distributed, listing
from torchdoctor.train.checkpoint import CheckpointError, CheckpointWarning
from torchdoctor.train.history import History
from torchdoctor.train.rng import capture_rng, restore_rng

__all__ = ["FitState", "RunFiles", "Resumed", "CHECKPOINT_PREFIX", "METRICS_CSV"]

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


@dataclass
class Resumed:
    """Where a resumed run starts: after ``epoch`` whole epochs and ``position`` batches of the next one."""

    epoch: int
    step: int
    updates: int
    history: list[dict[str, Any]]
    position: int = 0
    rng: dict[str, Any] | None = None  # this rank's random states when the checkpoint was taken
    epoch_rng: dict[str, Any] | None = None  # ... and when its epoch began (to replay the shuffle)
    tally: dict[str, Any] | None = None  # the interrupted epoch's running totals on this rank


class RunFiles:
    """The checkpoint directory of one run: epoch-NNNN(.pt) checkpoints, steps between them, and metrics.csv.

    Rank 0 writes the files; a sharded model (FSDP) has every rank write its
    part of a folder instead. ``keep_last`` counts both kinds together.
    """

    def __init__(self, directory: Path, keep_last: int, world: distributed.World, sharded: bool = False) -> None:
        self.directory, self.keep_last, self.world, self.sharded = directory, keep_last, world, sharded

    @classmethod
    def prepare(cls, directory: Any, keep_last: int, world: distributed.World, resume: bool = True,
                sharded: bool = False) -> RunFiles:  # fmt: skip
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
        return cls(path, keep_last, world, sharded)

    def save(self, *, epoch: int, step: int, updates: int, model: nn.Module, optimizer: Any, scaler: Any,
             scheduler: Any, history: History, loaders: tuple[Any, ...], position: int | None = None,
             tally: dict[str, Any] | None = None, epoch_rng: dict[str, Any] | None = None) -> None:  # fmt: skip
        """Checkpoint after ``epoch`` whole epochs and, with ``position``, that many batches of the next."""
        # Every rank's RNG: a resumed rank continues its own random stream.
        mine: dict[str, Any] = {"rng": capture_rng(loaders)}
        if position is not None:
            mine.update(tally=tally, epoch_rng=epoch_rng)
        ranks = distributed.gather_objects(self.world, mine)
        extra: dict[str, Any] = {"rng": [r["rng"] for r in ranks], "history": history.rows,
                                 "world_size": self.world.size, "updates": updates}  # fmt: skip
        if position is not None:
            extra.update(position=position, tally=[r["tally"] for r in ranks], epoch_rng=[r["epoch_rng"] for r in ranks])
        name = listing.checkpoint_name(epoch + 1 if position is not None else epoch, step if position is not None else None,
                                       CHECKPOINT_PREFIX)  # fmt: skip
        if self.sharded:
            from torchdoctor.train import sharded

            sharded.save(self.directory / name, model=model, optimizer=optimizer, scaler=scaler, scheduler=scheduler,
                         epoch=epoch, step=step, extra=extra, world=self.world)  # fmt: skip
        elif self.world.is_main:
            checkpoint.save(self.directory / f"{name}.pt", model=model, optimizer=optimizer, scaler=scaler,
                            scheduler=scheduler, epoch=epoch, step=step, extra=extra)  # fmt: skip
        if self.world.is_main:
            history.write_csv(self.directory / METRICS_CSV)
            self.prune()

    def prune(self) -> list[Path]:
        """Delete all but the newest ``keep_last`` complete checkpoints (files or folders) and stale partial folders."""
        found = listing.find(self.directory, prefix=CHECKPOINT_PREFIX)
        doomed = [path for _, path in found[: -self.keep_last]]
        doomed += [p for p in self.directory.glob(f".{CHECKPOINT_PREFIX}*.partial") if p.is_dir()]
        for path in doomed:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    path.unlink()
                except OSError:
                    pass
        return doomed

    def restore(self, model: nn.Module, optimizer: Any, scaler: Any, scheduler: Any, device: torch.device,
                loaders: tuple[Any, ...]) -> Resumed | None:  # fmt: skip
        """Load the newest checkpoint into the objects; None if there is none.

        After an epoch's end the random states are restored at once; inside an
        epoch fit() restores them itself, in two stages (see train/resume.py).
        """
        path = checkpoint.latest(self.directory, prefix=CHECKPOINT_PREFIX)
        if path is None:
            return None
        if self.sharded and not listing.is_sharded(path):  # the other way round, each rank gathers the shards
            raise CheckpointError(
                f"{str(path)!r} is a single-file checkpoint, but this run shards the model (strategy='fsdp'): "
                "resume it with the strategy that wrote it, or load it into the model before fit()"
            )
        result = checkpoint.load(path, model, optimizer, scaler, scheduler, map_location=device)
        if result.epoch is None or result.step is None:
            raise CheckpointError(f"{str(path)!r} has no epoch/step: it was not written by fit(); move it out of checkpoint_dir")
        extra = result.extra
        position = int(extra.get("position") or 0)
        resumed = Resumed(int(result.epoch), int(result.step), int(extra.get("updates", result.step)),
                          list(extra.get("history") or []), position)  # fmt: skip
        states = extra.get("rng") or []
        if len(states) == self.world.size:
            resumed.rng = states[self.world.rank]
            if position:
                resumed.epoch_rng = extra["epoch_rng"][self.world.rank]
                resumed.tally = extra["tally"][self.world.rank]
            else:
                restore_rng(resumed.rng, loaders)
        else:
            warnings.warn(
                f"{path} was written by {len(states)} rank(s), this run has {self.world.size}: "
                "random states not restored, so data order and dropout differ from an uninterrupted run",
                CheckpointWarning,
                stacklevel=2,
            )
        if self.world.is_main:
            where = f"epoch {result.epoch}" + (f" + {position} batches" if position else "")
            print(f"torchdoctor: resuming from {path} ({where}, step {result.step})", file=sys.stderr)
        return resumed

