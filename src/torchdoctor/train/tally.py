"""One epoch's bookkeeping in fit(): losses read back per window, metrics summed on the device."""

from __future__ import annotations

import time
from typing import Any, Callable

import torch

from torchdoctor.errors import InputError
from torchdoctor.train import distributed
from torchdoctor.train.steps import metric_values

__all__ = ["Tally", "Sums"]


class Tally:
    """A training epoch's running totals; :meth:`state` / :meth:`load` carry them across a mid-epoch resume."""

    def __init__(self, metrics: dict[str, Callable[..., Any]], device: torch.device) -> None:
        self.sums = Sums(metrics, device) if metrics else None
        self.device = device
        self.started, self.samples, self.loss_sum, self.loss_count = time.perf_counter(), 0, 0.0, 0

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

    def state(self) -> dict[str, Any]:
        """This rank's totals so far, as checkpoint-safe values (the loss window read back first)."""
        sums = self.sums.totals.detach().cpu().clone() if self.sums is not None else None
        return {"samples": self.samples, "loss_sum": self.loss_sum, "loss_count": self.loss_count, "sums": sums}

    def load(self, state: dict[str, Any]) -> None:
        self.samples, self.loss_sum, self.loss_count = int(state["samples"]), float(state["loss_sum"]), int(state["loss_count"])
        if self.sums is not None and state.get("sums") is not None:
            saved = state["sums"]
            if saved.shape == self.sums.totals.shape:
                self.sums.totals.copy_(saved.to(self.sums.totals.device))

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


class Sums:
    """Running sums of the loss and metrics, kept on the device; read back once per epoch."""

    def __init__(self, metrics: dict[str, Callable[..., Any]], device: torch.device) -> None:
        self.metrics = metrics
        # Weighted by samples, so a short last batch counts for what it holds.
        self.totals = torch.zeros(2 + len(metrics), dtype=torch.float64, device=device)

    def add(self, loss: torch.Tensor | None, n: int, output: Any, target: Any) -> None:
        if self.metrics and output is None:
            raise InputError("metrics need the model's output: return (loss, output) from step_fn")
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
