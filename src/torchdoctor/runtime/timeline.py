"""Per-step timing (data wait, forward, backward, optimizer, other), device memory and host memory (RSS).

Time is charged by phase: the watch's hooks mark where a phase begins
(``enter``: one clock read at each change, none when a call stays in its
phase), and the time since the last mark goes to the phase that was
running. Forward runs from the first module call after another phase to the
next mark (the loss and what is computed before ``backward()`` belong to
it); what runs outside any watched call is "other". A step ends at each
step of the first optimizer seen (``hot.step_post`` does ``end_step`` in place). Long runs keep every step up to a cap,
then every n-th. A stretch of steps passed through is kept as one row (its first and last step and their mean time,
``close_stretch``), expanded into steps when they are read (``steps``).

Phases are timed (``timed``) at each of the first ``TIMED_FIRST`` steps, then at
the audit steps (``audit``: the next one), which come ``AUDIT_GAPS`` steps apart in
turn (32, then 29: a cycle of 61, a prime, so that they fall on every position of
an epoch of any shorter length; after 8 audits, from step 308, 64 and 63, a cycle of
127; from step 816 on, 128 and 123, a cycle of 251), and at every step after a timed one whose data
wait was over ``FOLLOW_WAIT`` of it (a starving input pipeline, TD606, is
followed step by step). A timed step is an audited one: the watch's wrappers
do their every-call work on it only (``hot.py``); the other steps cost them a
flag read and keep only their total time (phases None). Every step is counted
and has its total; the shares and TD606's wait come from the timed steps
(``stats()`` says how many: ``timed_steps``). Host memory is read at each of the first
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
TIMED_FIRST = 64  # every step's phases are timed up to here
# then steps these far apart, in turn, are audited (timed and checked): AUDITS_PER_PHASE audits with each pair of gaps
# but the last, which goes on; each pair's sum is a prime (61, 127, 251)
AUDIT_GAPS = ((32, 29), (64, 63), (128, 123))
AUDITS_PER_PHASE = 8
FOLLOW_WAIT = 0.2  # a timed step that waited this share of its time for data: the next one is timed too
PHASES = ("data", "forward", "backward", "optimizer", "other")
DATA, FORWARD, BACKWARD, OPTIMIZER, OTHER = range(5)


def audit_gap(audits: int) -> int:
    """The steps from the ``audits``-th audit step past the first ``TIMED_FIRST`` (counted from 0) to the next."""
    return AUDIT_GAPS[min(audits // AUDITS_PER_PHASE, len(AUDIT_GAPS) - 1)][audits % 2]


@dataclass
class Step:
    index: int
    total: float
    data: float | None = None  # the phases: None on a step that was not timed (sampling)
    forward: float | None = None
    backward: float | None = None
    optimizer: float | None = None
    memory: int | None = None
    rss: int | None = None

    @property
    def timed(self) -> bool:
        return self.data is not None

    @property
    def other(self) -> float | None:
        if self.data is None:
            return None
        return max(0.0, self.total - self.data - self.forward - self.backward - self.optimizer)  # type: ignore[operator]


class Timeline:
    __slots__ = ("_rows", "count", "batches", "forwards", "backwards", "_stride", "_start", "_mark", "sums", "phase",
                 "timed", "audit", "_gaps", "fast_until", "primary", "stretch", "_stretched")

    def __init__(self) -> None:
        # Step fields as plain tuples, built every step, so kept cheap; a stretch of steps passed through is one row
        # (first, mean, last) (``close_stretch``), which ``steps`` expands
        self._rows: list[tuple[Any, ...]] = []
        self._stretched = 0  # the steps kept in stretch rows beyond one a row (``full``)
        self.count = 0
        self.batches = 0
        self.forwards = 0
        self.backwards = 0
        self._stride = 1
        self._start = self._mark = time.perf_counter()
        self.sums = [0.0, 0.0, 0.0, 0.0, 0.0]  # seconds of this step, by phase
        self.phase = OTHER
        self.timed = True  # this step's phases are timed (the hooks read the clock at each phase change)
        self.audit = TIMED_FIRST + audit_gap(0)  # the next audited step after the first TIMED_FIRST
        self._gaps = 1  # audits scheduled so far (which gap comes next)
        self.fast_until = -1  # while count is below it, the steps are not audited: the step hook's fast path
        self.primary = 0  # id() of the optimizer whose steps are the steps (session._new_primary)
        self.stretch = -1  # the count where the steps passed through began (open_stretch), -1: none open

    @property
    def steps(self) -> list[Step]:
        stride, out = self._stride, []
        for row in self._rows:
            if len(row) == 3:  # a stretch: the steps kept of it (one in ``_stride``), each at their mean
                first, mean, last = row
                out.extend(Step(index, mean) for index in range(first, last + 1) if stride == 1 or index % stride == 0)
            else:
                out.append(Step(*row))
        return out

    def full(self) -> bool:
        """Whether the steps kept reached ``MAX_STEPS`` (looked at on timed steps: ``thin``)."""
        return len(self._rows) + self._stretched >= MAX_STEPS

    def enter(self, phase: int, now: float) -> None:
        """``phase`` begins at ``now``: the time since the last mark goes to the phase that ran until now."""
        self.sums[self.phase] += now - self._mark
        self._mark = now
        self.phase = phase

    def end_step(self, memory: int | None, now: float, rss: int | None = None) -> None:
        """What ``hot.step_post`` does in place."""
        count = self.count = self.count + 1
        if self.timed:
            sums = self.sums
            sums[self.phase] += now - self._mark
            row: tuple[Any, ...] = (count, now - self._start, sums[0], sums[1], sums[2], sums[3], memory, rss)
            self.sums = [0.0, 0.0, 0.0, 0.0, 0.0]
            self.timed = self.next_timed(count, sums[0] > FOLLOW_WAIT * (now - self._start))
            self._mark = now
            self.phase = OTHER
            if self.full():  # looked at on timed steps only: a few rows more at most
                self.thin()
            self._rows.append(row)
        else:  # no phase changes on a step not timed: it stays OTHER, and the mark is needed only before a timed one
            row = (count, now - self._start, None, None, None, None, memory, rss)
            if count + 1 == self.audit:
                self.timed = True
                self._mark = now
            if self._stride == 1 or count % self._stride == 0:
                self._rows.append(row)
        self._start = now

    def open_stretch(self, until: int) -> None:
        """The steps up to ``until`` are passed through: counted only (``hot.step_post``), no clock read."""
        self.fast_until = until
        self.stretch = self.count

    def close_stretch(self, now: float, ends_step: bool) -> int:
        """The stretch of steps passed through ends at ``now``: each of its steps gets their mean time, kept in one
        row (first, mean, last) whatever its length, so that ending it costs the same for 10 steps or 1000 (``steps``
        expands it: one in ``_stride``). ``ends_step``: ``now`` ends the step after them too (``hot.step_post``),
        which gets the mean as well; otherwise (a watch that ends, something new in the middle of a step) ``now``
        is a little after the last one's end and is where the step running now starts. How many were passed."""
        first, passed = self.stretch + 1, self.count - self.stretch
        self.stretch, self.fast_until = -1, -1
        if passed <= 0:
            return 0
        mean = (now - self._start) / (passed + ends_step)
        self._rows.append((first, mean, self.count))
        self._stretched += self.count // self._stride - (first - 1) // self._stride - 1  # its steps kept, one a row
        self._start = self._mark = now - mean if ends_step else now
        return passed

    def next_timed(self, count: int, waited: bool) -> bool:
        """At the end of step ``count``, a timed one (``waited``: for data, over FOLLOW_WAIT of it): whether the next
        step is timed. Past the audit step, the next audit is scheduled."""
        if count >= self.audit:
            self.audit += audit_gap(self._gaps)
            self._gaps += 1
        return count < TIMED_FIRST or count + 1 == self.audit or waited

    def thin(self) -> None:
        """Keep every other step from now on (``MAX_STEPS`` kept): every other row of a step, and of a stretch of
        steps passed through the multiples of the doubled stride (``steps``)."""
        stride = self._stride = self._stride * 2
        singles = [row for row in self._rows if len(row) != 3][1::2]
        kept = {id(row) for row in singles}
        self._rows = [row for row in self._rows if len(row) == 3 or id(row) in kept]
        self._stretched = sum(row[2] // stride - (row[0] - 1) // stride - 1 for row in self._rows if len(row) == 3)

    def stats(self) -> dict[str, Any]:
        steps = self.steps
        timed = [s for s in steps if s.timed]
        total = sum(s.total for s in timed) or 0.0  # the shares: of the timed steps' time
        sums = {k: sum(getattr(s, k) for s in timed) for k in PHASES}
        return {
            "steps": self.count,
            "timed_steps": len(timed),  # of the len(timeline) kept: the others have their total only
            "sampled": len(timed) < len(steps),
            "batches": self.batches,
            "forward_calls_audited": self.forwards,  # root calls read (hot.module_call): not on steps passed through
            "backward_calls_audited": self.backwards,  # the backward passes the watch saw: hot.backward
            "time_s": round(sum(s.total for s in steps), 6),
            "share": {k: (round(v / total, 4) if total else 0.0) for k, v in sums.items()},
            "timeline": [{**asdict(s), "other": s.other, "timed": s.timed} for s in steps],
        }
