"""Gradients never zeroed between optimizer steps: TD404.

For each optimizer one parameter's gradient is watched: after a step, it
must be reset before the next backward adds to it: set to None, replaced,
or zeroed in place (its version counter moves). Backward passes of other
losses (GAN generator steps) do not count as a reset. ``step(closure)``
(LBFGS) zeroes inside the step: each backward of the closure must see a reset.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from torchdoctor.findings import Finding, Location

_CONFIRM = 2  # un-zeroed intervals before reporting
_FOLLOW = 8  # steps between two followed ones until a miss is seen (then every step is followed)


@dataclass(slots=True, eq=False)
class _Opt:
    ref: weakref.ReferenceType
    param: Any = None  # weakref to the sampled parameter
    grad: Any = None  # weakref to its gradient after the step
    version: int = -1
    zeroed: bool = True
    misses: int = 0
    location: Location | None = None
    steps: int = 0


class GradCheck:
    """Called at every step and backward: kept to a few attribute reads each."""

    def __init__(self) -> None:
        self._opts: dict[int, _Opt] = {}
        self.waiting: list[_Opt] = []  # stepped, gradient not reset since: what a backward must look at
        self.findings: list[Finding] = []
        self._reported: set[int] = set()
        self._closure_step: _Opt | None = None  # the optimizer whose step(closure) is running
        self.skip = 0  # steps of the primary optimizer to come that need no call (hot.step_post counts them down)
        self._skipped: tuple[_Opt, int] | None = None  # whose steps are skipped, and how many were to be

    def _state(self, opt: Any) -> _Opt:
        st = self._opts.get(id(opt))
        if st is None or st.ref() is not opt:
            st = self._opts[id(opt)] = _Opt(weakref.ref(opt))
        return st

    def _sample(self, st: _Opt, opt: Any) -> Any:
        p = st.param() if st.param is not None else None
        if p is None or p.grad is None:
            p = next((q for g in opt.param_groups for q in g["params"] if q.grad is not None), None)
            st.param = weakref.ref(p) if p is not None else None
        return p

    def on_step_pre(self, opt: Any, where: Any, args: Any = None, kwargs: Any = None) -> None:
        """``args``/``kwargs``: those of ``step()`` (args starts with the optimizer). Called only while one is armed
        (``waiting``): otherwise a step has nothing to compare."""
        st = self._opts.get(id(opt))
        if st is None or st.ref() is not opt:
            st = self._state(opt)
            st.location = where()
        if st.zeroed or st.grad is None:
            return
        if (args is not None and len(args) > 1) or (kwargs and kwargs.get("closure") is not None):
            self._closure_step = st  # LBFGS-style: the closure zeroes and recomputes inside step(); its backward judges
            return
        p = self._sample(st, opt)
        if p is not None and p.grad is not None and p.grad is st.grad():
            self._miss(st, opt)

    def _miss(self, st: _Opt, opt: Any) -> None:
        st.misses += 1
        if st.misses >= _CONFIRM and id(opt) not in self._reported:
            self._reported.add(id(opt))
            self.findings.append(Finding(
                "TD404", f"gradients of {type(opt).__name__} are never zeroed: each step adds to the gradients of all previous steps",
                st.location, "call optimizer.zero_grad() once per step (before backward, or after step)"))

    def on_step_post(self, opt: Any, where: Any = None, primary: bool = False) -> None:
        """After a step of ``opt``. For the ``primary`` optimizer (the one that ends steps) the caller skips the
        calls of the ``skip`` steps that follow, which this sets to the steps that need no look."""
        st = self._opts.get(id(opt))
        if st is None or st.ref() is not opt:
            st = self._state(opt)
            st.location = where() if where is not None else None  # the optimizer.step() line, for TD404
        skipped = self._skipped
        if skipped is not None:  # the calls of skipped steps, counted now
            self._skipped = None
            skipped[0].steps += skipped[1] - self.skip
            self.skip = 0
        st.steps += 1
        p = None
        # the first _FOLLOW steps are all followed (a short run, or zeroing that stops after a warm-up, is judged
        # on each), then every _FOLLOW-th: a loop that never zeroes shows on the next one (and then every step
        # is followed, so it is confirmed on the one after); the others cost nothing (skipped) or a counter
        if st.steps <= _FOLLOW or st.steps % _FOLLOW == 1 or st.misses:
            p = st.param() if st.param is not None else None
            if p is None or p.grad is None:
                p = self._sample(st, opt)
        if p is None:  # not followed, or no gradient at all: nothing to judge until the next step
            st.grad, st.zeroed, self._closure_step = None, True, None
            if st in self.waiting:
                self.waiting.remove(st)
            elif primary and st.steps > _FOLLOW and not st.misses:  # clean until the next followed step
                self.skip = -st.steps % _FOLLOW  # the steps before the next one with steps % _FOLLOW == 1
                self._skipped = (st, self.skip) if self.skip else None
            return
        self._closure_step = None
        grad = p.grad
        st.grad, st.version, st.zeroed = weakref.ref(grad), grad._version, False
        if st not in self.waiting:
            self.waiting.append(st)

    def before_backward(self) -> None:
        reset = False
        for st in self.waiting:
            p = st.param() if st.param is not None else None
            g = p.grad if p is not None else None
            if g is None or g is not st.grad() or g._version != st.version:
                st.zeroed = reset = True
            elif st is self._closure_step and (opt := st.ref()) is not None:
                self._miss(st, opt)  # a closure's backward adds to what the previous evaluation left
        if reset:
            self.waiting = [st for st in self.waiting if not st.zeroed] if len(self.waiting) > 1 else []

    def after_backward(self) -> None:
        # what this backward accumulated is not a reset: take a new baseline
        for st in self.waiting:
            p = st.param() if st.param is not None else None
            if p is not None and p.grad is not None:
                st.grad, st.version = weakref.ref(p.grad), p.grad._version
