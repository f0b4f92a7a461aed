"""fit(): the training loop that gets every item of the checklist right, on one device or many."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Union

import torch
from torch import nn

from torchdoctor.errors import InputError, UsageError
from torchdoctor.train import distributed, placement
from torchdoctor.train.batches import Objective, count_samples
from torchdoctor.train.history import History
from torchdoctor.train.keys import unwrap_model
from torchdoctor.train.move import DeviceLoader, to_device
from torchdoctor.train.precision import autocast_context, make_scaler, resolve_precision
from torchdoctor.train.preload import PreloadedLoader
from torchdoctor.train.progress import open_bar
from torchdoctor.train.resume import iterate_from
from torchdoctor.train.rng import capture_rng, restore_rng
from torchdoctor.train.run_state import FitState, Resumed, RunFiles
from torchdoctor.train.steps import check_finite, read_window
from torchdoctor.train.tally import Sums, Tally

__all__ = ["fit", "FitState"]

_NO_SYNC = contextlib.nullcontext()


def fit(
    model: nn.Module,
    train_loader: Iterable[Any],
    *,
    loss_fn: Callable[..., torch.Tensor] | None = None,
    step_fn: Callable[[nn.Module, Any], Any] | None = None,
    optimizer: torch.optim.Optimizer,
    epochs: int,
    val_loader: Iterable[Any] | None = None,
    device: Any = "auto",
    precision: str = "auto",
    strategy: str = "auto",
    grad_accum_steps: int = 1,
    clip_grad_norm: float | None = None,
    scheduler: Any = None,
    scheduler_interval: str = "epoch",
    checkpoint_dir: Any = None,
    checkpoint_every: int | None = None,
    resume: bool = True,
    keep_last: int = 3,
    log_every: int = 50,
    metrics: Mapping[str, Callable[..., Any]] | None = None,
    callbacks: Sequence[Any] | None = None,
    progress: Union[bool, IO[str]] = True,
) -> History:
    """Train ``model`` for ``epochs`` and return the per-epoch metrics history.

    A batch ``(inputs, targets, *rest)`` gives ``loss_fn(model(inputs), targets)``;
    a mapping batch is called as ``model(**batch)`` and its loss is
    ``loss_fn(output, batch)`` or, without ``loss_fn``, the output's ``.loss``
    (HuggingFace); ``step_fn(model, batch)`` returning the loss (or ``(loss,
    output)``) replaces both. Metrics get ``(output, targets)``, or ``(output,
    batch)`` for the other two. The device comes from ``pick_device(device)``
    (a model already spread over several devices stays where it is);
    ``precision`` is ``"auto"`` (bf16, or fp16 with a GradScaler, on CUDA; fp32
    elsewhere), ``"fp32"``, ``"bf16"`` or ``"fp16"``. With ``checkpoint_dir``
    every epoch (and every ``checkpoint_every`` optimizer steps) is
    checkpointed, the last ``keep_last`` kept, ``metrics.csv`` beside them, and
    ``resume=True`` continues from the newest one there, mid-epoch included.
    Under torchrun ``strategy`` "auto"/"ddp" wraps the model in DDP, "fsdp"
    shards it with FSDP2 (sharded checkpoints); the loaders are sharded and only
    rank 0 writes files. ``progress`` is False, True (stderr) or a stream.
    """
    config = _Config(loss_fn, step_fn, epochs, precision, strategy, grad_accum_steps, clip_grad_norm, scheduler,
                     scheduler_interval, checkpoint_every, log_every, dict(metrics or {}), list(callbacks or []),
                     progress)  # fmt: skip
    config.check(keep_last)
    world, dev = distributed.setup(device)
    try:
        runner = _Runner(model, optimizer, config, world, dev)
        runner.configure(train_loader, val_loader)
        if checkpoint_dir is not None:
            runner.files = RunFiles.prepare(checkpoint_dir, keep_last, world, resume, sharded=runner.sharded)
            if resume:
                runner.resume()
        return runner.run()
    finally:
        distributed.teardown(world)


@dataclass
class _Config:
    """fit()'s options, checked once before anything runs."""

    loss_fn: Any
    step_fn: Any
    epochs: int
    precision: str
    strategy: str
    accum: int
    clip: float | None
    scheduler: Any
    interval: str
    checkpoint_every: int | None
    log_every: int
    metrics: dict[str, Callable[..., Any]] = field(default_factory=dict)
    callbacks: list[Any] = field(default_factory=list)
    progress: Any = True

    def check(self, keep_last: int) -> None:
        counts = [("epochs", self.epochs), ("grad_accum_steps", self.accum), ("log_every", self.log_every), ("keep_last", keep_last)]
        if self.checkpoint_every is not None:
            counts.append(("checkpoint_every", self.checkpoint_every))
        for name, value in counts:
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UsageError(f"fit(): {name} must be a positive integer, got {value!r}")
        if self.interval not in ("epoch", "step"):
            raise UsageError(f"fit(): scheduler_interval must be 'epoch' or 'step', got {self.interval!r}")
        if self.strategy not in distributed.STRATEGIES:
            raise UsageError(f"fit(): strategy must be one of {', '.join(map(repr, distributed.STRATEGIES))}, got {self.strategy!r}")


def _check_model(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    if not isinstance(model, nn.Module):
        raise InputError(f"fit() needs an nn.Module to train, got {type(model).__name__}")
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise InputError(f"the model ({type(model).__name__}) has no trainable parameters: there is nothing to fit")
    owned = {id(p) for p in model.parameters()}
    foreign = [p for group in optimizer.param_groups for p in group["params"] if id(p) not in owned]
    if foreign:
        raise InputError(
            f"the optimizer holds {len(foreign)} parameter(s) that are not the model's: "
            "build the optimizer from this model's parameters"
        )


class _Runner:
    """The state of one fit() call; each method is one stage of the loop."""

    def __init__(self, model: nn.Module, optimizer: Any, config: _Config, world: Any, device: torch.device) -> None:
        _check_model(model, optimizer)
        self.cfg, self.world = config, world
        where = placement.plan(placement.parameter_devices(model), device)
        if where.move:
            model.to(device)  # TD201: parameters move in place, so the optimizer's stay valid
        elif world.is_main:
            print(where.note(), file=sys.stderr)
        self.device = where.device
        self.precision = resolve_precision(config.precision, self.device.type)
        self.raw_model = unwrap_model(model)  # what is saved and switched between train and eval
        self.optimizer = optimizer
        # What is called: may be compiled or wrapped by the user, then by DDP; FSDP shards raw_model in place.
        self.model, self.sharded = distributed.prepare_model(model, self.raw_model, optimizer, world, self.device,
                                                             config.strategy, where.model_parallel)  # fmt: skip
        self.objective = Objective(config.loss_fn, config.step_fn, self.device, follow_output=where.model_parallel)
        self.scaler = make_scaler(self.device, self.precision)
        self.plain_steps = self.precision == "fp32" and not world.distributed and self.scaler is None
        self.history = History()
        self.start_epoch = self.step = self.updates = 0
        self.files: RunFiles | None = None
        self.resumed: Resumed | None = None  # set while the interrupted epoch is still to be continued
        self.epoch_rng: dict[str, Any] | None = None

    def configure(self, train_loader: Any, val_loader: Any) -> None:
        self.train_loader = self._on_device(distributed.shard_loader(train_loader, self.world))
        self.val_loader = self._on_device(distributed.shard_loader(val_loader, self.world, shuffle=False))
        self.move_batches = not self._batches_arrive_placed()
        cfg = self.cfg
        self.bar_file = None if cfg.progress is False or not self.world.is_main else sys.stderr if cfg.progress is True else cfg.progress
        self.state = FitState(model=self.raw_model, optimizer=self.optimizer, epochs=cfg.epochs, history=self.history)
        if _known_length(self.train_loader) == 0:
            raise InputError("train_loader is empty: it yields no batches (check the dataset size, batch_size and drop_last)")

    def _on_device(self, loader: Any) -> Any:
        if loader is None or isinstance(loader, (DeviceLoader, PreloadedLoader)):
            return loader
        return DeviceLoader(loader, self.device)  # prefetches on CUDA, a pass-through on the CPU

    def _batches_arrive_placed(self) -> bool:
        """Whether every training batch is already on the device, so the step need not walk it.

        A DataLoader collates on the CPU; on CUDA (and other devices) DeviceLoader
        moves each batch, and a PreloadedLoader holds its data on its device.
        """
        loader = self.train_loader
        if isinstance(loader, PreloadedLoader):
            return loader.device == self.device
        if not isinstance(loader, DeviceLoader) or loader.device != self.device:
            return False
        from torch.utils.data import DataLoader

        return self.device.type != "cpu" or isinstance(loader.loader, DataLoader)

    def resume(self) -> None:
        assert self.files is not None
        found = self.files.restore(self.raw_model, self.optimizer, self.scaler, self.cfg.scheduler, self.device,
                                   self._loaders())  # fmt: skip
        if found is not None:
            self.start_epoch, self.step, self.updates = found.epoch, found.step, found.updates
            self.history.rows[:] = found.history
            self.resumed = found if found.position else None

    def run(self) -> History:
        self.step_checkpoints = self.files is not None and self.cfg.checkpoint_every is not None
        self._call("on_fit_start")
        for epoch in range(self.start_epoch, self.cfg.epochs):
            self.state.epoch = epoch
            self._call("on_epoch_start")
            row = self._train_epoch(epoch)
            if self.val_loader is not None:
                row.update(self._validate(epoch))
            self._end_epoch(epoch, row)
            if self.state.stop:
                break
        self._call("on_fit_end")
        distributed.barrier(self.world)  # no rank leaves the group while rank 0 still writes
        return self.history

    def _begin_epoch(self, epoch: int) -> None:
        self.raw_model.train()  # every epoch: validation left it in eval mode (TD403)
        sampler = getattr(self.train_loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)  # a DistributedSampler reshuffles only when told (TD701)
        self.optimizer.zero_grad(set_to_none=True)

    def _train_epoch(self, epoch: int) -> dict[str, Any]:
        self._begin_epoch(epoch)
        total = _known_length(self.train_loader)
        tally = Tally(self.cfg.metrics, self.device)
        start = self.resumed.position if self.resumed is not None else 0
        batches = self._epoch_batches(tally)
        bar = open_bar(self.bar_file, f"epoch {epoch + 1}/{self.cfg.epochs}", total) if self.bar_file is not None else None
        if bar is not None and start:
            bar.update(start)
        window: list[torch.Tensor] = []  # detached losses not yet read back
        done, pending = start, False
        try:
            for done, batch in enumerate(batches, start=start + 1):
                update = done % self.cfg.accum == 0 or done == total
                window.append(self._train_step(batch, update, tally))
                pending = not update
                self.step += 1
                if self.step % self.cfg.log_every == 0:  # the only sync: once per log_every steps
                    tally.log(bar, read_window(window, self.step - len(window) + 1, epoch))
                if update and self.step_checkpoints and self._step_checkpoint_due(done, total):
                    tally.log(bar, read_window(window, self.step - len(window) + 1, epoch))
                    self._save(epoch, position=done, tally=tally)
            if pending:  # an unknown-length loader ended mid-accumulation: use those gradients too
                self._optimizer_step()
            tally.log(bar, read_window(window, self.step - len(window) + 1, epoch))
        finally:
            if bar is not None:
                bar.close()
        if done == 0:
            raise InputError(f"train_loader yielded no batches in epoch {epoch + 1}")
        return tally.summary(self.world)

    def _epoch_batches(self, tally: Tally) -> Iterator[Any]:
        """This epoch's batches: all of them, or the rest of an interrupted epoch (train/resume.py)."""
        loaders = self._loaders()
        resumed, self.resumed = self.resumed, None
        if resumed is None:
            if self.files is not None and self.cfg.checkpoint_every is not None:
                self.epoch_rng = capture_rng(loaders)  # what the shuffle draws from: kept for step checkpoints
            return iter(self.train_loader)
        self.epoch_rng = resumed.epoch_rng
        if resumed.tally is not None:
            tally.load(resumed.tally)
        if resumed.epoch_rng is not None:
            restore_rng(resumed.epoch_rng, loaders)
        later = resumed.rng

        def restore() -> None:
            if later is not None:
                restore_rng(later, loaders)

        return iterate_from(self.train_loader, resumed.position, restore)

    def _step_checkpoint_due(self, done: int, total: int | None) -> bool:
        # Not on an epoch's last batch: the epoch's own checkpoint follows, after validation.
        return self.updates % self.cfg.checkpoint_every == 0 and done != total  # type: ignore[operator]

    def _train_step(self, batch: Any, update: bool, tally: Tally) -> torch.Tensor:
        if self.move_batches:
            batch = to_device(batch, self.device)
        if self.plain_steps:  # fp32 on one process: no autocast and no gradient-sync choice (fewer calls per step)
            loss, output, target = self.objective(self.model, batch)
            (loss / self.cfg.accum if self.cfg.accum > 1 else loss).backward()
        else:
            with self._gradient_sync(update):
                with autocast_context(self.device, self.precision):
                    loss, output, target = self.objective(self.model, batch)
                scaled = loss / self.cfg.accum if self.cfg.accum > 1 else loss
                (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
        if update:
            self._optimizer_step()
        detached = loss.detach()  # keeps no graph alive (TD405)
        tally.add(target.shape[0] if type(target) is torch.Tensor and target.ndim else count_samples(target), output, target)
        if self.cfg.callbacks:
            self.state.step, self.state.loss = self.step + 1, detached
            self._call("on_step_end")
        return detached

    def _gradient_sync(self, update: bool) -> Any:
        # Between optimizer steps the ranks need not reduce gradients: they only accumulate.
        if update or not self.world.distributed:
            return _NO_SYNC
        if self.sharded:
            from torchdoctor.train.fsdp import no_gradient_sync

            return no_gradient_sync(self.raw_model)
        return self.model.no_sync()  # type: ignore[operator]

    def _optimizer_step(self) -> None:
        if self.cfg.clip is not None:
            if self.scaler is not None:
                self.scaler.unscale_(self.optimizer)  # clip the true gradients, not the scaled ones
            torch.nn.utils.clip_grad_norm_(self.raw_model.parameters(), self.cfg.clip)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.updates += 1
        if self.cfg.scheduler is not None and self.cfg.interval == "step":
            self.cfg.scheduler.step()

    def _validate(self, epoch: int) -> dict[str, Any]:
        self.raw_model.eval()  # dropout off, batch-norm statistics frozen (TD402)
        with torch.inference_mode():  # no autograd graph during evaluation (TD401)
            sums = Sums(self.cfg.metrics, self.device)
            for batch in self.val_loader:  # type: ignore[union-attr]
                with autocast_context(self.device, self.precision):
                    loss, output, target = self.objective(self.model, to_device(batch, self.device))
                sums.add(loss, count_samples(target), output, target)
            means = sums.means(self.world, "val_")
        if "val_loss" in means:
            check_finite(means["val_loss"], f"validation loss at epoch {epoch + 1}")
        return means

    def _end_epoch(self, epoch: int, row: dict[str, Any]) -> None:
        scheduler = self.cfg.scheduler
        if scheduler is not None and self.cfg.interval == "epoch":
            if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
                scheduler.step(row.get("val_loss", row.get("train_loss")))
            else:
                scheduler.step()
        row = {"epoch": epoch + 1, "step": self.step, **row, "lr": self.optimizer.param_groups[0]["lr"]}
        self.history.append(row)
        if self.bar_file is not None and "val_loss" in row:
            print(f"epoch {epoch + 1}/{self.cfg.epochs}: " + _format_row(row), file=self.bar_file)
        if self.files is not None:
            self._save(epoch + 1)
        self.state.logs = row
        self._call("on_epoch_end")

    def _save(self, epoch: int, position: int | None = None, tally: Tally | None = None) -> None:
        assert self.files is not None
        self.files.save(epoch=epoch, step=self.step, updates=self.updates, model=self.raw_model, optimizer=self.optimizer,
                        scaler=self.scaler, scheduler=self.cfg.scheduler, history=self.history, loaders=self._loaders(),
                        position=position, tally=tally.state() if tally is not None else None,
                        epoch_rng=self.epoch_rng)  # fmt: skip

    def _loaders(self) -> tuple[Any, ...]:
        return (self.train_loader, self.val_loader)

    def _call(self, hook: str) -> None:
        for callback in self.cfg.callbacks:
            method = getattr(callback, hook, None)
            if method is not None:
                method(self.state)


def _known_length(loader: Any) -> int | None:
    try:
        return len(loader)
    except TypeError:
        return None


def _format_row(row: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_number(v)}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items() if k != "epoch")


def _number(v: float) -> str:
    """Four significant digits, never an exponent for a figure of 1e4 and more (``samples_per_s=11260``,
    not ``1.126e+04``: a fast machine printed the latter)."""
    return f"{v:.0f}" if 1e4 <= abs(v) < 1e15 else f"{v:.4g}"
