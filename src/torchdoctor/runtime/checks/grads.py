"""Gradients never zeroed between optimizer steps: TD404.

For each optimizer one parameter's gradient is watched: after a step, it
must be reset before the next backward adds to it: set to None, replaced,
or zeroed in place (its version counter moves). Backward passes of other
losses (GAN generator steps) do not count as a reset.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from torchdoctor.findings import Finding, Location

_CONFIRM = 2  # un-zeroed intervals before reporting


@dataclass
class _Opt:
    ref: weakref.ReferenceType
    param: Any = None  # weakref to the sampled parameter
    grad: Any = None  # weakref to its gradient after the step
    version: int = -1
    zeroed: bool = True
    misses: int = 0
    location: Location | None = None


class GradCheck:
    def __init__(self) -> None:
        self._opts: dict[int, _Opt] = {}
        self.findings: list[Finding] = []
        self._reported: set[int] = set()

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

    def on_step_pre(self, opt: Any, where: Any) -> None:
        st = self._state(opt)
        p = self._sample(st, opt)
        if p is None or st.grad is None:
            return
        if not st.zeroed and p.grad is st.grad() and p.grad is not None:
            st.misses += 1
            if st.misses >= _CONFIRM and id(opt) not in self._reported:
                self._reported.add(id(opt))
                self.findings.append(Finding(
                    "TD404", f"gradients of {type(opt).__name__} are never zeroed: each step adds to the gradients of all previous steps",
                    st.location or where(), "call optimizer.zero_grad() once per step (before backward, or after step)"))
        if st.location is None:
            st.location = where()

    def on_step_post(self, opt: Any) -> None:
        st = self._state(opt)
        p = self._sample(st, opt)
        if p is None:
            st.grad = None
            return
        st.grad, st.version, st.zeroed = weakref.ref(p.grad), p.grad._version, False

    def _changed(self, st: _Opt) -> bool:
        p = st.param() if st.param is not None else None
        if p is None:
            return True
        g = p.grad
        return g is None or g is not st.grad() or g._version != st.version

    def before_backward(self) -> None:
        for st in self._opts.values():
            if not st.zeroed and st.grad is not None and self._changed(st):
                st.zeroed = True

    def after_backward(self) -> None:
        # what this backward accumulated is not a reset: take a new baseline
        for st in self._opts.values():
            p = st.param() if st.param is not None else None
            if not st.zeroed and p is not None and p.grad is not None:
                st.grad, st.version = weakref.ref(p.grad), p.grad._version
