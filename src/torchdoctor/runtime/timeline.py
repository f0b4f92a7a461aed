"""Per-step timing (data wait, forward, backward, optimizer, other), device memory and host memory (RSS).

Time is charged by phase: the watch's hooks mark where a phase begins
(``enter``: one clock read at each change, none when a call stays in its
phase), and the time since the last mark goes to the phase that was
running. Forward runs from the first module call after another phase to the
next mark (the loss and what is computed before ``backward()`` belong to
it); what runs outside any watched call is "other". A step ends at each
step of the first optimizer seen (``hot.step_post`` does ``end_step`` in place). Long runs keep every step up to a cap,
then every n-th. Host memory is read at each of the first
``RSS_FIRST_STEPS`` steps, then at most every ``RSS_EVERY_S`` seconds (a
read costs a system call, a step may cost less), so a step without a
reading has ``rss=None``.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

MAX_STEPS = 5000
RSS_EVERY_S = 0.05
RSS_FIRST_STEPS = 16  # host memory is read at each of these, so that a short run has readings too
PHASES = ("data", "forward", "backward", "optimizer", "other")
DATA, FORWARD, BACKWARD, OPTIMIZER, OTHER = range(5)


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
    __slots__ = ("_rows", "count", "batches", "forwards", "backwards", "_stride", "_start", "_mark", "sums", "phase")

    def __init__(self) -> None:
        self._rows: list[tuple[Any, ...]] = []  # Step fields as plain tuples: built every step, so kept cheap
        self.count = 0
        self.batches = 0
        self.forwards = 0
        self.backwards = 0
        self._stride = 1
        self._start = self._mark = time.perf_counter()
        self.sums = [0.0, 0.0, 0.0, 0.0, 0.0]  # seconds of this step, by phase
        self.phase = OTHER

    @property
    def steps(self) -> list[Step]:
        return [Step(*row) for row in self._rows]

    def enter(self, phase: int, now: float) -> None:
        """``phase`` begins at ``now``: the time since the last mark goes to the phase that ran until now."""
        self.sums[self.phase] += now - self._mark
        self._mark = now
        self.phase = phase

    def end_step(self, memory: int | None, now: float, rss: int | None = None) -> None:
        sums = self.sums
        sums[self.phase] += now - self._mark
        self._mark = now
        self.phase = OTHER
        self.count += 1
        if self._stride == 1 or self.count % self._stride == 0:
            self._rows.append((self.count, now - self._start, sums[0], sums[1], sums[2], sums[3], memory, rss))
            if len(self._rows) >= MAX_STEPS:
                self.thin()
        self._start = now
        self.sums = [0.0, 0.0, 0.0, 0.0, 0.0]

    def thin(self) -> None:
        """Keep every other step from now on (``MAX_STEPS`` kept): the kept counts stay multiples of the stride."""
        self._rows = self._rows[1::2]
        self._stride *= 2

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
