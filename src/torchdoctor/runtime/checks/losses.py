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
needed. Long runs are sampled by counting backward passes (``LossCheck``):
the outcome does not depend on timing or load.
"""

from __future__ import annotations

import weakref
from collections import deque
from typing import Any

from torchdoctor.findings import Finding, Location

_KEY = "torchdoctor.loss"
_AGE = 2  # backward passes a loss must outlive to count as kept
_ALIVE = 3  # losses kept at the same time before reporting
_FIRST = 64  # backward passes tagged each, before sampling starts
# then one tagged 8, then 9 passes after the last, in turn: 17 passes a cycle, a prime, so that the passes tagged
# fall on every position of an epoch of any shorter length (a loss summed per epoch is kept past its position)
_GAPS = (8, 9)
_DONE = 1 << 62  # ``due`` once reported: never called again
# nodes a framework or the user puts over the loss they hold: GradScaler's and accumulation's scaling, sums
_SCALED = frozenset({"MulBackward0", "DivBackward0", "AddBackward0"})


class _Sentinel:
    __slots__ = ("__weakref__",)


class LossCheck:
    """One small object tagged into the loss's graph node and one weak reference to it, per backward looked at.

    Each backward pass of the first ``_FIRST`` is looked at; then one in 8 or
    9 is tagged and looked at again ``_AGE`` passes later (whether it is
    kept is decided there, as when every pass is tagged); once a loss is
    kept after the first ``_FIRST`` passes, every pass is tagged again, so the
    losses kept at once are counted as without sampling. The caller skips
    the backward passes before ``due``. All of it counts backward passes: no
    clock.
    """

    def __init__(self) -> None:
        self._young: deque[tuple[int, weakref.ReferenceType]] = deque()  # (pass, reference) not yet _AGE passes old
        self._kept: list[tuple[int, weakref.ReferenceType]] = []  # (pass, reference) of losses older than _AGE
        self._count = 0  # backward passes so far
        self._every = False  # a loss was kept: every pass is tagged from now on
        self._tags = 0  # passes tagged while sampling (which gap comes next)
        self._looking = False  # sampling: the next call only looks at the loss tagged _AGE passes before
        self.due = 0  # the backward pass this needs to be called at next (hot.backward skips the ones before)
        self._where: Location | None = None
        self._frame_hint: tuple[Any, str] | None = None  # (code of the backward's frame, the loss's name there)
        self.findings: list[Finding] = []

    def on_backward(self, tensors: Any, where: Any, frame_hint: Any = None, passes: int | None = None) -> None:
        """At a backward pass: ``passes`` counts them (the caller's count, which skips the calls of the passes
        before ``due``); None counts this call."""
        self._count = passes if passes is not None else self._count + 1
        self.due = 0
        looking, self._looking = self._looking, False
        young = self._young
        while young and young[0][0] <= self._count - _AGE:  # outlived _AGE more backward passes: kept if alive
            old = young.popleft()
            if old[1]() is not None:
                self._keep(old)
        if self.findings:  # reported once: nothing more to learn
            self.due = _DONE
            return
        if looking and not self._every:  # sampling, and nothing kept: on to the next pass to tag
            self.due = self._count + _GAPS[self._tags % 2] - _AGE
            return
        node = getattr(tensors, "grad_fn", None)
        if node is not None and self._tag(node, tensors, where, frame_hint) and not self._every and self._count >= _FIRST:
            self._tags += 1
            self._looking = True
            self.due = self._count + _AGE  # look at it again _AGE passes later

    def _tag(self, node: Any, tensors: Any, where: Any, frame_hint: Any) -> bool:
        sentinel = _Sentinel()
        try:
            node.metadata[_KEY] = sentinel
            if type(node).__name__ in _SCALED:  # the user may hold the loss below (scaler.scale(loss), loss / n)
                below = node.next_functions
                if below and below[0][0] is not None:
                    below[0][0].metadata[_KEY] = sentinel
        except (AttributeError, RuntimeError, TypeError):
            return False
        if self._where is None:  # the backward line is the same every step; walking the stack each time is not free
            self._where = where()
            self._frame_hint = frame_hint(tensors) if frame_hint is not None else None
        self._young.append((self._count, weakref.ref(sentinel)))
        return True

    def _keep(self, old: tuple[int, weakref.ReferenceType]) -> None:
        """Something holds a loss of ``_AGE`` or more passes ago: count the kept losses still alive now."""
        # seen while sampling: tag every pass again. Not before: every pass is tagged then anyway, and the first
        # pass's loss stays alive while the frame_hint's f_locals snapshot of the training loop's frame holds it
        self._every = self._every or self._count > _FIRST
        self._kept = [(step, r) for step, r in self._kept if r() is not None]
        self._kept.append(old)
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
