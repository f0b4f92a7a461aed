"""Loss tensors kept alive across steps: TD405.

At each ``backward()`` a small sentinel object is put in the metadata of the
loss's graph node; the node (and the sentinel) lives exactly as long as
something still references the graph: the loss in a list, or a running
``total += loss``. Several losses from earlier steps still alive means the
graphs accumulate. Only weak references are kept; no GPU is needed.
"""

from __future__ import annotations

import weakref
from collections import deque
from typing import Any

from torchdoctor.findings import Finding, Location

_KEY = "torchdoctor.loss"
_AGE = 2  # steps before a surviving loss counts as kept
_ALIVE = 3  # kept losses before reporting
_EVERY = 8  # backward passes between two looks at the kept losses (and one at the end)


class _Sentinel:
    __slots__ = ("__weakref__",)


class LossCheck:
    def __init__(self) -> None:
        self._recent: deque[tuple[int, weakref.ReferenceType]] = deque(maxlen=12)
        # losses still alive when they left the window: kept for good (logged every N steps, say)
        self._survivors: deque[tuple[int, weakref.ReferenceType]] = deque(maxlen=12)
        self._count = 0
        self._where: Location | None = None
        self.findings: list[Finding] = []

    def on_backward(self, tensors: Any, where: Any) -> None:
        node = getattr(tensors, "grad_fn", None)
        if node is None:
            return
        sentinel = _Sentinel()
        try:
            node.metadata[_KEY] = sentinel
            # scaled losses (GradScaler) and sums: the user may hold the node below
            below = node.next_functions
            if below and below[0][0] is not None:
                below[0][0].metadata[_KEY] = sentinel
        except (AttributeError, RuntimeError, TypeError):
            return
        self._count += 1
        if self._where is None:  # the backward line is the same every step; walking the stack each time is not free
            self._where = where()
        recent = self._recent
        if len(recent) == recent.maxlen and recent[0][1]() is not None:
            self._survivors.append(recent[0])
        recent.append((self._count, weakref.ref(sentinel)))
        if self._count % _EVERY == 0:
            self.judge()

    def judge(self) -> list[Finding]:
        """Report losses of earlier steps still alive (also called once at the end of the session)."""
        if self.findings:
            return self.findings
        kept = [step for step, ref in (*self._survivors, *self._recent) if ref() is not None and self._count - step >= _AGE]
        if len(kept) >= _ALIVE:
            self.findings.append(Finding(
                "TD405", f"loss tensors of {len(kept)} earlier steps are still alive at step {self._count} (the oldest from "
                f"step {kept[0]}): each keeps its autograd graph, so memory grows",
                self._where, "accumulate loss.item() (or loss.detach()) instead of the loss tensor"))
        return self.findings
