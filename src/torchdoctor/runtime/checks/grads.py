"""Gradients never zeroed between optimizer steps: TD404.

For each optimizer one parameter's gradient is watched: after a step, it
must be reset before the next backward adds to it: set to None, replaced,
or zeroed in place (its version counter moves). Backward passes of other
losses (GAN generator steps) do not count as a reset. ``step(closure)``
(LBFGS) zeroes inside the step: each backward of the closure must see a reset.
The watch follows the audited steps only (timeline.py: each of the first ones,
then one in 30 or 31, later fewer), and every step once a gradient was not reset (``every``),
so that a loop that never zeroes is confirmed on the next step.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from torchdoctor.findings import Finding, Location

_CONFIRM = 2  # un-zeroed intervals before reporting


@dataclass(slots=True, eq=False)
class _Opt:
    ref: weakref.ReferenceType
    param: Any = None  # weakref to the sampled parameter
    grad: Any = None  # weakref to its gradient after the step
    version: int = -1
    zeroed: bool = True
    misses: int = 0
    location: Location | None = None


class GradCheck:
    """Called at the steps and backward passes the watch follows: ``on_step_post`` before a followed step (the
    gradient it must see reset), ``before_backward``/``after_backward``/``on_step_pre`` in it while ``waiting``;
    ``pause`` before steps it does not follow."""

    def __init__(self) -> None:
        self._opts: dict[int, _Opt] = {}
        self.waiting: list[_Opt] = []  # stepped, gradient not reset since: what a backward must look at
        self.findings: list[Finding] = []
        self._reported: set[int] = set()
        self._closure_step: _Opt | None = None  # the optimizer whose step(closure) is running
        self.every = False  # a gradient was not reset, not reported yet: every step is followed until it is confirmed

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
        self.every = id(opt) not in self._reported
        if st.misses >= _CONFIRM and id(opt) not in self._reported:
            self._reported.add(id(opt))
            self.every = False
            self.findings.append(Finding(
                "TD404", f"gradients of {type(opt).__name__} are never zeroed: each step adds to the gradients of all previous steps",
                st.location, "call optimizer.zero_grad() once per step (before backward, or after step)"))

    def on_step_post(self, opt: Any, where: Any = None) -> None:
        """After a step of ``opt``, before a step the watch follows: its gradient must be reset before the next
        backward adds to it."""
        st = self._opts.get(id(opt))
        if st is None or st.ref() is not opt:
            st = self._state(opt)
            st.location = where() if where is not None else None  # the optimizer.step() line, for TD404
        p = st.param() if st.param is not None else None
        if p is None or p.grad is None:
            p = self._sample(st, opt)
        if p is None:  # no gradient at all: nothing to judge until the next step
            st.grad, st.zeroed, self._closure_step = None, True, None
            if st in self.waiting:
                self.waiting.remove(st)
            return
        self._closure_step = None
        grad = p.grad
        st.grad, st.version, st.zeroed = weakref.ref(grad), grad._version, False
        if st not in self.waiting:
            self.waiting.append(st)

    def pause(self) -> None:
        """The next step is not followed: nothing is waiting for a reset."""
        for st in self.waiting:
            st.grad, st.zeroed = None, True
        self.waiting = []
        self._closure_step = None

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
