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
needed. Long runs are sampled on the watch's audited steps (``LossCheck``):
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
_FIRST = 64  # backward passes tagged each, before sampling starts (the watch audits every step until then)
# nodes a framework or the user puts over the loss they hold: GradScaler's and accumulation's scaling, sums
_SCALED = frozenset({"MulBackward0", "DivBackward0", "AddBackward0"})


class _Sentinel:
    __slots__ = ("__weakref__",)


class LossCheck:
    """One small object tagged into the loss's graph node and one weak reference to it, per backward looked at.

    Called at the backward passes the watch sees (``hot.backward``): each of the first ``_FIRST``; then those of
    the audited steps (``tag``: timeline.py schedules them), each tagged, and the ones after a tag until it is
    ``_AGE`` passes old (``looking``: the watch keeps calling while it is set), where whether it is kept is
    decided, as when every pass is tagged. Once a loss is kept after the first ``_FIRST`` passes, every pass is
    tagged again (``every``: the watch calls at each), so the losses kept at once are counted as without
    sampling. ``passes`` counts the passes seen: the ones the watch does not see come between two looks, never
    inside one. All of it counts passes and steps: no clock.
    """

    def __init__(self) -> None:
        self._young: deque[tuple[int, int, weakref.ReferenceType]] = deque()  # (pass, step, reference), < _AGE old
        self._kept: list[tuple[int, weakref.ReferenceType]] = []  # (step, reference) of losses older than _AGE
        self._count = 0  # backward passes seen so far
        self._step = 0  # the step of the last one, as the message names it
        self.every = False  # a loss was kept: every pass is tagged from now on
        self.looking = False  # a tagged loss is not _AGE passes old yet: the next passes must be seen
        self.done = False  # reported once: nothing more to learn
        self._where: Location | None = None
        self._frame_hint: tuple[Any, str] | None = None  # (code of the backward's frame, the loss's name there)
        self.findings: list[Finding] = []

    def on_backward(self, tensors: Any, where: Any, frame_hint: Any = None, passes: int | None = None,
                    step: int | None = None, tag: bool = True) -> None:
        """At a backward pass: ``passes`` counts the ones seen (None: this call counts one), ``step`` names it in
        the message (None: the pass), ``tag``: whether this pass may be tagged while sampling (an audited step)."""
        self._count = passes if passes is not None else self._count + 1
        self._step = step if step is not None else self._count
        young = self._young
        while young and young[0][0] <= self._count - _AGE:  # outlived _AGE more backward passes: kept if alive
            old = young.popleft()
            if old[2]() is not None:
                self._keep(old[1:])
        if self.findings:
            self.done = True
            self.looking = self.every = False
            return
        node = getattr(tensors, "grad_fn", None)
        if node is not None and (tag or self.every or self._count <= _FIRST):
            self._tag(node, tensors, where, frame_hint)
        self.looking = bool(young)

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
        self._young.append((self._count, self._step, weakref.ref(sentinel)))
        return True

    def _keep(self, old: tuple[int, weakref.ReferenceType]) -> None:
        """Something holds a loss of ``_AGE`` or more passes ago: count the kept losses still alive now."""
        # seen while sampling: tag every pass again. Not before: every pass is tagged then anyway, and the first
        # pass's loss stays alive while the frame_hint's f_locals snapshot of the training loop's frame holds it
        self.every = self.every or self._count > _FIRST
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
            "TD405", f"loss tensors of {len(alive)} earlier steps are still alive at step {self._step} (the oldest from "
            f"step {alive[0][0]}){kept_by}: each keeps its autograd graph, so memory grows",
            where, "accumulate loss.item() (or loss.detach()) instead of the loss tensor"))
        self._kept.clear()
        self._young.clear()

    def judge(self) -> list[Finding]:
        """The findings so far: the judgement itself is made at every backward pass."""
        return self.findings
