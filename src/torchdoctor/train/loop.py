"""fit(): the training loop that gets every item of the checklist right, on one device or many."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import IO, Any, Callable, Union

import torch
from torch import nn

from torchdoctor.errors import InputError, UsageError
from torchdoctor.train import distributed
from torchdoctor.train.history import History
from torchdoctor.train.keys import unwrap_model
from torchdoctor.train.move import DeviceLoader, to_device
from torchdoctor.train.precision import autocast_context, make_scaler, resolve_precision
from torchdoctor.train.preload import PreloadedLoader
from torchdoctor.train.run_state import FitState, RunFiles
from torchdoctor.train.steps import check_finite, count_samples, forward, metric_values, read_window, split_batch

__all__ = ["fit", "FitState"]

_NO_SYNC = contextlib.nullcontext()


def fit(
    model: nn.Module,
    train_loader: Iterable[Any],
    *,
    loss_fn: Callable[..., torch.Tensor],
    optimizer: torch.optim.Optimizer,
    epochs: int,
    val_loader: Iterable[Any] | None = None,
    device: Any = "auto",
    precision: str = "auto",
    grad_accum_steps: int = 1,
    clip_grad_norm: float | None = None,
    scheduler: Any = None,
    scheduler_interval: str = "epoch",
    checkpoint_dir: Any = None,
    resume: bool = True,
    keep_last: int = 3,
    log_every: int = 50,
    metrics: Mapping[str, Callable[..., Any]] | None = None,
    callbacks: Sequence[Any] | None = None,
    progress: Union[bool, IO[str]] = True,
) -> History:
    """Train ``model`` for ``epochs`` and return the per-epoch metrics history.

    Each batch is ``(inputs, targets)``; ``loss_fn(model(inputs), targets)`` is
    minimised. The device comes from ``pick_device(device)``; ``precision`` is
    ``"auto"`` (bf16, or fp16 with a GradScaler, on CUDA; fp32 elsewhere),
    ``"fp32"``, ``"bf16"`` or ``"fp16"``. With ``checkpoint_dir`` every epoch is
    checkpointed (the last ``keep_last`` kept, ``metrics.csv`` beside them) and
    ``resume=True`` continues from the newest one there. Under torchrun the
    model is wrapped in DDP and the loaders sharded; only rank 0 writes.
    ``progress`` is False, True (stderr) or a stream for the tqdm bar.
    """
    _check_options(epochs, grad_accum_steps, log_every, keep_last, scheduler_interval)
    world, dev = distributed.setup(device)
    try:
        runner = _Runner(model, optimizer, loss_fn, world, dev, resolve_precision(precision, dev.type))
        runner.configure(train_loader, val_loader, epochs, grad_accum_steps, clip_grad_norm, scheduler,
                         scheduler_interval, log_every, metrics, callbacks, progress)  # fmt: skip
        runner.files = RunFiles.prepare(checkpoint_dir, keep_last, world, resume) if checkpoint_dir is not None else None
        if runner.files is not None and resume:
            runner.resume()
        return runner.run()
    finally:
        distributed.teardown(world)


def _check_options(epochs: int, accum: int, log_every: int, keep_last: int, interval: str) -> None:
    for name, value in (("epochs", epochs), ("grad_accum_steps", accum), ("log_every", log_every), ("keep_last", keep_last)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise UsageError(f"fit(): {name} must be a positive integer, got {value!r}")
    if interval not in ("epoch", "step"):
        raise UsageError(f"fit(): scheduler_interval must be 'epoch' or 'step', got {interval!r}")


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

    def __init__(self, model: nn.Module, optimizer: Any, loss_fn: Any, world: Any, device: torch.device, precision: str) -> None:
        _check_model(model, optimizer)
        self.world, self.device, self.precision = world, device, precision
        model.to(device)  # TD201: parameters move in place, so the optimizer's stay valid
        self.model = model  # what is called: may be compiled or already wrapped by the user
        self.raw_model = unwrap_model(model)  # what is saved and switched between train and eval
        self.optimizer = optimizer
        self.loss_fn = loss_fn.to(device) if isinstance(loss_fn, nn.Module) else loss_fn  # TD406
        self.scaler = make_scaler(device, precision)
        self.history = History()
        self.start_epoch = 0
        self.step = 0
        self.files: RunFiles | None = None

    def configure(self, train_loader: Any, val_loader: Any, epochs: int, accum: int, clip: float | None,
                  scheduler: Any, interval: str, log_every: int, metrics: Any, callbacks: Any,
                  progress: Any) -> None:  # fmt: skip
        self.train_loader = self._on_device(distributed.shard_loader(train_loader, self.world))
        self.val_loader = self._on_device(distributed.shard_loader(val_loader, self.world, shuffle=False))
        self.epochs, self.accum, self.clip, self.log_every = epochs, accum, clip, log_every
        self.scheduler, self.interval = scheduler, interval
        self.metrics = dict(metrics or {})
        self.callbacks = list(callbacks or [])
        self.bar_file = None if progress is False or not self.world.is_main else sys.stderr if progress is True else progress
        self.state = FitState(model=self.raw_model, optimizer=self.optimizer, epochs=epochs, history=self.history)
        if _known_length(self.train_loader) == 0:
            raise InputError("train_loader is empty: it yields no batches (check the dataset size, batch_size and drop_last)")

    def _on_device(self, loader: Any) -> Any:
        if loader is None or isinstance(loader, (DeviceLoader, PreloadedLoader)):
            return loader
        return DeviceLoader(loader, self.device)  # prefetches on CUDA, a pass-through on the CPU

    def resume(self) -> None:
        assert self.files is not None
        found = self.files.restore(self.raw_model, self.optimizer, self.scaler, self.scheduler, self.device,
                                   (self.train_loader, self.val_loader))  # fmt: skip
        if found is not None:
            self.start_epoch, self.step, rows = found
            self.history.rows[:] = rows

    def run(self) -> History:
        self.model = distributed.wrap_model(self.model, self.world, self.device)
        self._call("on_fit_start")
        for epoch in range(self.start_epoch, self.epochs):
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

    def _train_epoch(self, epoch: int) -> dict[str, Any]:
        self.raw_model.train()  # every epoch: validation left it in eval mode (TD403)
        sampler = getattr(self.train_loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)  # a DistributedSampler reshuffles only when told (TD701)
        self.optimizer.zero_grad(set_to_none=True)
        total = _known_length(self.train_loader)
        bar = self._bar(epoch, total)
        window: list[torch.Tensor] = []  # detached losses not yet read back
        tally = _Tally(self.metrics, self.device, time.perf_counter())
        batches, pending = 0, False
        try:
            for batches, batch in enumerate(self.train_loader, start=1):
                update = batches % self.accum == 0 or batches == total
                window.append(self._train_step(batch, update, tally))
                pending = not update
                self.step += 1
                if self.step % self.log_every == 0:  # the only sync: once per log_every steps
                    tally.log(bar, read_window(window, self.step - len(window) + 1, epoch))
            if pending:  # an unknown-length loader ended mid-accumulation: use those gradients too
                self._optimizer_step()
            tally.log(bar, read_window(window, self.step - len(window) + 1, epoch))
        finally:
            if bar is not None:
                bar.close()
        if batches == 0:
            raise InputError(f"train_loader yielded no batches in epoch {epoch + 1}")
        return tally.summary(self.world)

    def _train_step(self, batch: Any, update: bool, tally: _Tally) -> torch.Tensor:
        inputs, target = split_batch(to_device(batch, self.device))
        # Between optimizer steps DDP need not all-reduce: gradients only accumulate.
        no_sync = self.world.distributed and not update
        with self.model.no_sync() if no_sync else _NO_SYNC:  # type: ignore[operator]
            with autocast_context(self.device, self.precision):
                output = forward(self.model, inputs)
                loss = self.loss_fn(output, target)
            scaled = loss / self.accum if self.accum > 1 else loss
            (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
        if update:
            self._optimizer_step()
        detached = loss.detach()  # keeps no graph alive (TD405)
        tally.add(count_samples(target), output, target)
        if self.callbacks:
            self.state.step, self.state.loss = self.step + 1, detached
            self._call("on_step_end")
        return detached

    def _optimizer_step(self) -> None:
        if self.clip is not None:
            if self.scaler is not None:
                self.scaler.unscale_(self.optimizer)  # clip the true gradients, not the scaled ones
            torch.nn.utils.clip_grad_norm_(self.raw_model.parameters(), self.clip)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.scheduler is not None and self.interval == "step":
            self.scheduler.step()

    def _validate(self, epoch: int) -> dict[str, Any]:
        self.raw_model.eval()  # dropout off, batch-norm statistics frozen (TD402)
        with torch.inference_mode():  # no autograd graph during evaluation (TD401)
            sums = _Sums(self.metrics, self.device)
            for batch in self.val_loader:  # type: ignore[union-attr]
                inputs, target = split_batch(to_device(batch, self.device))
                with autocast_context(self.device, self.precision):
                    output = forward(self.model, inputs)
                    loss = self.loss_fn(output, target)
                sums.add(loss, count_samples(target), output, target)
            means = sums.means(self.world, "val_")
        if "val_loss" in means:
            check_finite(means["val_loss"], f"validation loss at epoch {epoch + 1}")
        return means

    def _end_epoch(self, epoch: int, row: dict[str, Any]) -> None:
        if self.scheduler is not None and self.interval == "epoch":
            if isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
                self.scheduler.step(row.get("val_loss", row.get("train_loss")))
            else:
                self.scheduler.step()
        row = {"epoch": epoch + 1, "step": self.step, **row, "lr": self.optimizer.param_groups[0]["lr"]}
        self.history.append(row)
        if self.bar_file is not None and "val_loss" in row:
            print(f"epoch {epoch + 1}/{self.epochs}: " + _format_row(row), file=self.bar_file)
        if self.files is not None:
            self.files.save(epoch + 1, self.step, self.raw_model, self.optimizer, self.scaler, self.scheduler,
                            self.history, (self.train_loader, self.val_loader))  # fmt: skip
        self.state.logs = row
        self._call("on_epoch_end")

    def _bar(self, epoch: int, total: int | None) -> Any:
        if self.bar_file is None:
            return None
        from tqdm import tqdm

        return tqdm(total=total, desc=f"epoch {epoch + 1}/{self.epochs}", unit="batch", file=self.bar_file,
                    dynamic_ncols=True, mininterval=0.25, leave=True)  # fmt: skip

    def _call(self, hook: str) -> None:
        for callback in self.callbacks:
            method = getattr(callback, hook, None)
            if method is not None:
                method(self.state)


class _Tally:
    """One training epoch's bookkeeping: losses read back per window, metrics summed on the device."""

    def __init__(self, metrics: dict[str, Callable[..., Any]], device: torch.device, started: float) -> None:
        self.sums = _Sums(metrics, device) if metrics else None
        self.device = device
        self.started, self.samples, self.loss_sum, self.loss_count = started, 0, 0.0, 0

    def add(self, n: int, output: Any, target: Any) -> None:
        self.samples += n
        if self.sums is not None:
            self.sums.add(None, n, output, target)

    def log(self, bar: Any, losses: list[float]) -> None:
        self.loss_sum += sum(losses)
        self.loss_count += len(losses)
        if bar is None or not losses:
            return
        bar.update(len(losses))
        rate = self.samples / max(time.perf_counter() - self.started, 1e-9)
        bar.set_postfix(loss=f"{sum(losses) / len(losses):.4f}", samples_s=f"{rate:,.0f}", refresh=False)

    def summary(self, world: Any) -> dict[str, Any]:
        seconds = time.perf_counter() - self.started
        local = torch.tensor([self.loss_sum, float(self.loss_count), float(self.samples)], dtype=torch.float64)
        if world.distributed:  # collectives need the device's tensor type (nccl: CUDA)
            local = distributed.all_sum(world, local.to(self.device)).cpu()
        loss_sum, count, samples = local.tolist()
        row = {"train_loss": loss_sum / max(count, 1)}
        if self.sums is not None:
            row.update({k: v for k, v in self.sums.means(world, "train_").items() if k != "train_loss"})
        return {**row, "seconds": seconds, "samples_per_s": samples / max(seconds, 1e-9)}


class _Sums:
    """Running sums of the loss and metrics, kept on the device; read back once per epoch."""

    def __init__(self, metrics: dict[str, Callable[..., Any]], device: torch.device) -> None:
        self.metrics = metrics
        # Weighted by samples, so a short last batch counts for what it holds.
        self.totals = torch.zeros(2 + len(metrics), dtype=torch.float64, device=device)

    def add(self, loss: torch.Tensor | None, n: int, output: Any, target: Any) -> None:
        with torch.no_grad():
            extra = metric_values(self.metrics, _detach(output), target) if self.metrics else []
            head = [loss.detach().float().reshape(())] if loss is not None else [self.totals.new_zeros((), dtype=torch.float32)]
            values = torch.stack([v.to(self.totals.device) for v in (*head, *extra)]) * n
            self.totals[:-1] += values.double()
            self.totals[-1] += n

    def means(self, world: Any, prefix: str) -> dict[str, float]:
        totals = distributed.all_sum(world, self.totals.clone()).tolist()  # one sync per epoch
        count = totals[-1]
        if count == 0:
            return {}
        names = ["loss", *self.metrics]
        return {prefix + name: value / count for name, value in zip(names, totals[:-1])}


def _detach(output: Any) -> Any:
    return output.detach() if isinstance(output, torch.Tensor) else output


def _known_length(loader: Any) -> int | None:
    try:
        return len(loader)
    except TypeError:
        return None


def _format_row(row: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items() if k != "epoch")
