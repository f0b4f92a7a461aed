"""Data-loader passes: samplers that never reshuffle (TD701), batches the device waits for (TD606)."""

from __future__ import annotations

import statistics
import weakref
from dataclasses import dataclass
from typing import Any

from torchdoctor.findings import Finding, Location

WAIT_FRACTION = 0.20  # the catalog's threshold
MIN_WAIT_S = 0.005  # below this a pipeline is not what slows training, whatever the ratio
MIN_STEPS = 8


def input_bottleneck(data_wait: list[float], step_time: list[float]) -> tuple[float, float] | None:
    """(median share of the step spent waiting, median wait) when the input pipeline is the bottleneck."""
    pairs = [(w, t) for w, t in zip(data_wait, step_time) if t > 0][2:]  # the first steps start workers
    if len(pairs) < MIN_STEPS:
        return None
    share = statistics.median(w / t for w, t in pairs)
    wait = statistics.median(w for w, _ in pairs)
    if share > WAIT_FRACTION and wait >= MIN_WAIT_S:
        return share, wait
    return None


def bottleneck_findings(steps: list[Any], where: Location | None) -> list[Finding]:
    """TD606 from the timeline's steps whose phases were timed (all of a short run: sampling, timeline.py)."""
    steps = [s for s in steps if s.data is not None]
    hit = input_bottleneck([s.data for s in steps], [s.total for s in steps])
    if hit is None:
        return []
    share, wait = hit
    return [Finding("TD606", f"waiting for the next batch takes {share:.0%} of a training step ({wait * 1000:.1f} ms a batch)",
                    where, "raise DataLoader num_workers (with persistent_workers=True), pin_memory=True on CUDA, "
                    "and move per-sample work out of __getitem__")]


def collect_tensors(obj: Any, out: dict[int, weakref.ReferenceType], tensor_type: type, depth: int) -> None:
    """Weak references to the tensors of a batch (tuples, lists, dicts; two levels, 16 items each)."""
    if type(obj) in (tuple, list) and all(isinstance(item, tensor_type) for item in obj[:16]):
        for item in obj[:16]:  # the usual (inputs, targets): no recursion
            out[id(item)] = weakref.ref(item)
        return
    if isinstance(obj, tensor_type):
        out[id(obj)] = weakref.ref(obj)
    elif depth > 0 and isinstance(obj, (list, tuple)):
        for item in obj[:16]:
            collect_tensors(item, out, tensor_type, depth - 1)
    elif depth > 0 and isinstance(obj, dict):
        for item in list(obj.values())[:16]:
            collect_tensors(item, out, tensor_type, depth - 1)


@dataclass
class _Sampler:
    ref: weakref.ReferenceType
    passes: int = 0
    done_epoch: int | None = None  # the epoch of the last pass iterated to its end


class SamplerCheck:
    """A pass counts once it is iterated to its end: a peek (``next(iter(loader))``) is not an epoch."""

    def __init__(self) -> None:
        self._samplers: dict[int, _Sampler] = {}
        self.findings: list[Finding] = []

    def on_pass(self, loader: Any, it: Any, where: Any) -> None:
        from torch.utils.data.distributed import DistributedSampler

        sampler = getattr(loader, "sampler", None)
        if not isinstance(sampler, DistributedSampler):
            sampler = getattr(getattr(loader, "batch_sampler", None), "sampler", None)
        if not isinstance(sampler, DistributedSampler) or not getattr(sampler, "shuffle", False):
            return
        st = self._samplers.get(id(sampler))
        if st is None or st.ref() is not sampler:
            st = self._samplers[id(sampler)] = _Sampler(weakref.ref(sampler))
        st.passes += 1
        it._torchdoctor_sampler = st
        if st.done_epoch is not None and sampler.epoch == st.done_epoch and not self.findings:
            loc: Location | None = where()
            self.findings.append(Finding(
                "TD701", f"DistributedSampler is iterated again (pass {st.passes}) with the same epoch {st.done_epoch}: "
                "every epoch sees the same order", loc, "call sampler.set_epoch(epoch) at the start of every epoch"))

    def on_pass_done(self, it: Any) -> None:
        st = getattr(it, "_torchdoctor_sampler", None)
        sampler = st.ref() if st is not None else None
        if sampler is not None:
            st.done_epoch = sampler.epoch
