"""Loss tensors kept alive across steps: TD405.

At each ``backward()`` a small sentinel object is put in the metadata of the
loss's graph node; the node (and the sentinel) lives exactly as long as
something still references the graph: the loss in a list, or a running
``total += loss``. The judgement is made as the run goes, never afterwards: a
loss whose sentinel is still alive ``_AGE`` backward passes later counts as
kept for as long as its sentinel lives, and ``_ALIVE`` losses kept at once is
the finding. Nothing is decided by when the
session happens to look, nor by when the garbage collector frees the
script's namespace: a loss summed over an epoch and reset is seen at the end
of each epoch, while it is alive. Only weak references are kept; no GPU is
needed.
"""

from __future__ import annotations

import weakref
from collections import deque
from typing import Any

from torchdoctor.findings import Finding, Location

_KEY = "torchdoctor.loss"
_AGE = 2  # backward passes a loss must outlive to count as kept
_ALIVE = 3  # losses kept at the same time before reporting
# nodes a framework or the user puts over the loss they hold: GradScaler's and accumulation's scaling, sums
_SCALED = frozenset({"MulBackward0", "DivBackward0", "AddBackward0"})


class _Sentinel:
    __slots__ = ("__weakref__",)


class LossCheck:
    """Per backward: one small object tagged into the loss's graph node and one weak reference to it.

    The reference of the loss ``_AGE`` backward passes ago is looked at as it
    leaves a short window: alive then, it joins the kept ones (rare in a
    correct loop, so the kept set is pruned only when one joins).
    """

    def __init__(self) -> None:
        self._young: deque[weakref.ReferenceType] = deque(maxlen=_AGE)  # the last _AGE losses, oldest first
        self._kept: list[tuple[int, weakref.ReferenceType]] = []  # (step, reference) of losses older than _AGE
        self._count = 0
        self._where: Location | None = None
        self._frame_hint: tuple[Any, str] | None = None  # (code of the backward's frame, the loss's name there)
        self.findings: list[Finding] = []

    def on_backward(self, tensors: Any, where: Any, frame_hint: Any = None) -> None:
        node = getattr(tensors, "grad_fn", None)
        if node is None or self.findings:  # reported once: nothing more to learn
            return
        sentinel = _Sentinel()
        try:
            node.metadata[_KEY] = sentinel
            if type(node).__name__ in _SCALED:  # the user may hold the loss below (scaler.scale(loss), loss / n)
                below = node.next_functions
                if below and below[0][0] is not None:
                    below[0][0].metadata[_KEY] = sentinel
        except (AttributeError, RuntimeError, TypeError):
            return
        self._count += 1
        if self._where is None:  # the backward line is the same every step; walking the stack each time is not free
            self._where = where()
            self._frame_hint = frame_hint(tensors) if frame_hint is not None else None
        young = self._young
        if len(young) == _AGE:
            old = young[0]  # outlived _AGE more backward passes once this one is counted
            if old() is not None:
                self._keep(old)
        young.append(weakref.ref(sentinel))

    def _keep(self, ref: weakref.ReferenceType) -> None:
        """Something holds the loss of ``_AGE`` steps ago: count the kept losses still alive now."""
        self._kept = [(step, r) for step, r in self._kept if r() is not None]
        self._kept.append((self._count - _AGE, ref))
        if len(self._kept) >= _ALIVE:
            self._report()

    def _report(self) -> None:
        from torchdoctor.runtime.checks.keepers import find_keeper

        alive = [(step, r()) for step, r in self._kept]
        keeper = find_keeper([s for _, s in alive], _KEY, self._frame_hint)
        kept_by = f", kept by {keeper.name}" if keeper is not None else ""
        where = keeper.location if keeper is not None and keeper.location is not None else self._where
        self.findings.append(Finding(
            "TD405", f"loss tensors of {len(alive)} earlier steps are still alive at step {self._count} (the oldest from "
            f"step {alive[0][0]}){kept_by}: each keeps its autograd graph, so memory grows",
            where, "accumulate loss.item() (or loss.detach()) instead of the loss tensor"))
        self._kept.clear()
        self._young.clear()

    def judge(self) -> list[Finding]:
        """The findings so far: the judgement itself is made at every backward pass."""
        return self.findings
