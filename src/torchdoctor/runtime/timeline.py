"""Per-step timing (data wait, forward, backward, optimizer), device memory and host memory (RSS).

A step ends at each step of the first optimizer seen; what happens between
two step ends (waiting for data, forward passes, backward passes) is charged
to the step. Long runs keep every step up to a cap, then every n-th. Host
memory is read at most every ``RSS_EVERY_S`` seconds (a read costs a system
call, a step may cost less), so a step without a reading has ``rss=None``.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

MAX_STEPS = 5000
RSS_EVERY_S = 0.05
PHASES = ("data", "forward", "backward", "optimizer", "other")


@dataclass
class Step:
    index: int
    total: float
    data: float
    forward: float
    backward: float
    optimizer: float
    memory: int | None = None
    rss: int | None = None

    @property
    def other(self) -> float:
        return max(0.0, self.total - self.data - self.forward - self.backward - self.optimizer)


class Timeline:
    # slots: the phase sums are read and written several times every step
    __slots__ = ("_rows", "count", "batches", "forwards", "backwards", "_stride", "_start", "data", "forward",
                 "backward", "optimizer")

    def __init__(self) -> None:
        self._rows: list[tuple[Any, ...]] = []  # Step fields as plain tuples: built every step, so kept cheap
        self.count = 0
        self.batches = 0
        self.forwards = 0
        self.backwards = 0
        self._stride = 1
        self._reset(time.perf_counter())

    @property
    def steps(self) -> list[Step]:
        return [Step(*row) for row in self._rows]

    def _reset(self, now: float) -> None:
        self._start = now
        self.data = self.forward = self.backward = self.optimizer = 0.0

    def end_step(self, memory: int | None, now: float, rss: int | None = None) -> None:
        self.count += 1
        if self._stride == 1 or self.count % self._stride == 0:
            self._rows.append((self.count, now - self._start, self.data, self.forward, self.backward, self.optimizer, memory, rss))
            if len(self._rows) >= MAX_STEPS:  # thin out: keep every other step from now on
                self._rows = self._rows[1::2]  # the kept counts stay multiples of the stride
                self._stride *= 2
        self._start = now
        self.data = self.forward = self.backward = self.optimizer = 0.0

    def stats(self) -> dict[str, Any]:
        steps = self.steps
        total = sum(s.total for s in steps) or 0.0
        sums = {k: sum(getattr(s, k) for s in steps) for k in PHASES}
        return {
            "steps": self.count,
            "batches": self.batches,
            "forward_calls": self.forwards,
            "backward_calls": self.backwards,
            "time_s": round(total, 6),
            "share": {k: (round(v / total, 4) if total else 0.0) for k, v in sums.items()},
            "timeline": [{**asdict(s), "other": s.other} for s in steps],
        }
