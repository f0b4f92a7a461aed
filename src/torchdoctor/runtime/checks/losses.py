"""Loss tensors kept alive across steps: TD405.

At each ``backward()`` a small sentinel object is put in the metadata of the
loss's graph node; the node (and the sentinel) lives exactly as long as
something still references the graph: the loss in a list, or a running
``total += loss``. The judgement is made as the run goes, never afterwards: a
loss whose sentinel is still alive ``_AGE`` backward passes later counts as
kept until its sentinel dies (a weak-reference callback says when), and
``_ALIVE`` losses kept at once is the finding. Nothing is decided by when the
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


class _Sentinel:
    __slots__ = ("__weakref__",)


class _Ref(weakref.ref):
    """A sentinel's weak reference, with the step that made it."""

    __slots__ = ("step", "kept")


class LossCheck:
    def __init__(self) -> None:
        self._young: deque[_Ref] = deque()  # the last _AGE losses, oldest first
        self._kept: set[_Ref] = set()  # losses older than _AGE steps still alive (held until they die)
        self._count = 0
        self._where: Location | None = None
        self._frame_hint: tuple[Any, str] | None = None  # (code of the backward's frame, the loss's name there)
        self.findings: list[Finding] = []
        self._died = self._on_death  # one bound method for every reference (made once, not per step)

    def _on_death(self, ref: _Ref) -> None:
        if ref.kept:  # a dead reference hashes only if it was hashed while alive: ask the flag, not the set
            self._kept.discard(ref)

    def on_backward(self, tensors: Any, where: Any, frame_hint: Any = None) -> None:
        node = getattr(tensors, "grad_fn", None)
        if node is None or self.findings:  # reported once: nothing more to learn
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
            self._frame_hint = frame_hint(tensors) if frame_hint is not None else None
        ref = _Ref(sentinel, self._died)
        ref.step, ref.kept = self._count, False
        young = self._young
        young.append(ref)
        if len(young) > _AGE:
            old = young.popleft()
            if old() is not None:  # outlived _AGE more backward passes: something keeps it
                old.kept = True
                self._kept.add(old)
                if len(self._kept) >= _ALIVE:
                    self._report()

    def _report(self) -> None:
        from torchdoctor.runtime.checks.keepers import find_keeper

        alive = sorted((r for r in self._kept if r() is not None), key=lambda r: r.step)
        oldest = alive[0].step if alive else self._count
        keeper = find_keeper([r() for r in alive], _KEY, self._frame_hint)
        kept_by = f", kept by {keeper.name}" if keeper is not None else ""
        where = keeper.location if keeper is not None and keeper.location is not None else self._where
        self.findings.append(Finding(
            "TD405", f"loss tensors of {len(alive)} earlier steps are still alive at step {self._count} (the oldest from "
            f"step {oldest}){kept_by}: each keeps its autograd graph, so memory grows",
            where, "accumulate loss.item() (or loss.detach()) instead of the loss tensor"))
        self._kept.clear()
        self._young.clear()

    def judge(self) -> list[Finding]:
        """The findings so far: the judgement itself is made at every backward pass."""
        return self.findings
