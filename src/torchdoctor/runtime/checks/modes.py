"""Train/eval modes around forward passes: TD401, TD402, TD403.

Forward calls of each root model are grouped into segments of one state
(data-loader pass, training flag, grad mode). A segment followed by a
``backward()`` is training; one that closes with no backward is evaluation.
Forwards under ``no_grad`` that feed a backward (teacher, EMA, key encoder)
are therefore training, never evaluation; so is a ``no_grad`` forward on the
current loader batch followed by training on the same pass (pseudo-labels
from the model being trained): it is judged only once its follower is known.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

from torchdoctor.findings import Finding, Location


_NOT_READY = object()


@dataclass
class _Segment:
    key: tuple[Any, bool, bool]
    location: Location | None
    trained: bool = False
    batch: bool = False  # its first forward took the current loader batch
    settled: bool = False  # trained: a backward can teach nothing more, its forwards need no look (the steady state)
    ready: Any = field(init=False, default=None)  # once settled, its pass: what hot.module_call compares at every call
    # the key's parts, which ``hot.module_call`` compares one by one at every root call (no tuple built)
    pass_id: Any = field(init=False)
    training: bool = field(init=False)
    grad: bool = field(init=False)

    def __post_init__(self) -> None:
        self.pass_id, self.training, self.grad = self.key
        self.ready = _NOT_READY  # equal to no pass, None included (batches from no loader)

    def settle(self) -> None:
        self.settled = True
        self.ready = self.pass_id


@dataclass
class _Root:
    ref: weakref.ReferenceType
    name: str
    has_norm: bool
    trainable: bool
    segment: _Segment | None = None
    deferred: _Segment | None = None  # a no_grad segment on the batch, judged once its follower is known
    trained_in_train_mode: bool = False
    evaluated: bool = False  # ran in eval mode without autograd (an evaluation before any training, say)
    reported: set[str] = field(default_factory=set)
    judged: bool = True  # False for modules without parameters (losses, activations): no mode to judge


class ModeCheck:
    def __init__(self) -> None:
        import torch

        self._norm_types = (torch.nn.modules.dropout._DropoutNd, torch.nn.modules.batchnorm._NormBase)
        # modules whose own dropout argument makes train mode differ (nn.LSTM(dropout=0.2, num_layers=2))
        self._dropout_arg_types = (torch.nn.RNNBase, torch.nn.MultiheadAttention)
        self._roots: dict[int, _Root] = {}
        self.since_backward: dict[int, _Root] = {}
        self.eval_locations: dict[int, Location] = {}  # where model.eval() was last called, by module id
        self.findings: list[Finding] = []

    def root(self, module: Any) -> _Root | None:
        st = self._roots.get(id(module))
        if st is None or st.ref() is not module:
            params = list(module.parameters())
            has_norm = bool(params) and any(self._mode_dependent(m) for m in module.modules())
            st = _Root(weakref.ref(module), type(module).__name__, has_norm, any(p.requires_grad for p in params), judged=bool(params))
            self._roots[id(module)] = st
        return st if st.judged else None

    def _mode_dependent(self, m: Any) -> bool:
        if isinstance(m, self._norm_types):
            return True
        # an RNN applies its dropout only between stacked layers
        return isinstance(m, self._dropout_arg_types) and getattr(m, "dropout", 0) > 0 and getattr(m, "num_layers", 2) > 1

    def on_forward(self, st: _Root, key: tuple[Any, bool, bool], where: Any, batch: bool = False) -> None:
        """A forward pass of the root ``st`` (from ``root(module)``) in a new state: (pass, training, grad).

        The caller records a forward in the same state itself (``since_backward``): that is every step.
        """
        seg = st.segment
        if seg is not None:
            self._close(st, seg)
        st.segment = _Segment(key, where(), batch=batch)
        self.since_backward[id(st)] = st
        if not key[1] and not key[2]:
            st.evaluated = True

    def on_backward(self, grad_only: bool = False) -> None:
        """A backward (or, ``grad_only``, a torch.autograd.grad: an attack or a penalty, not a training step)."""
        for st in self.since_backward.values():
            seg = st.segment
            if seg is None:
                continue
            seg.trained = True  # its graph was used: not an evaluation
            _, training, grad = seg.key
            if grad_only:
                continue
            if training:
                st.trained_in_train_mode = True
            elif grad and st.has_norm and self._left_in_eval(st) and "TD403" not in st.reported and _trainable(st):
                st.reported.add("TD403")
                where = self.eval_locations.get(id(st.ref())) or seg.location
                self.findings.append(Finding(
                    "TD403", f"model `{st.name}` trains in eval mode after model.eval(): dropout/batch-norm stay frozen "
                    "for the rest of training", where, "call model.train() at the start of every training epoch"))
            seg.settle()  # what decides TD403 cannot change inside a segment: its later backward passes teach nothing
        self.since_backward.clear()

    def _left_in_eval(self, st: _Root) -> bool:
        """Trained in train mode before, or evaluated after a model.eval() (a check before the first epoch)."""
        return st.trained_in_train_mode or (st.evaluated and id(st.ref()) in self.eval_locations)

    def _close(self, st: _Root, seg: _Segment) -> None:
        before, st.deferred = st.deferred, None
        if before is not None and not (seg.trained and seg.key[0] == before.key[0]):
            self._judge(st, before)  # not followed by training on its pass: an evaluation after all
        pass_id, _, grad = seg.key
        if not seg.trained and not grad and seg.batch and pass_id is not None:
            st.deferred = seg
        else:
            self._judge(st, seg)

    def _judge(self, st: _Root, seg: _Segment) -> None:
        if seg.trained or seg.location is None:
            return  # a forward called from inside torch (e.g. swa_utils.update_bn) has no user location
        _, training, grad = seg.key
        if grad and "TD401" not in st.reported and _trainable(st):
            st.reported.add("TD401")
            self.findings.append(Finding(
                "TD401", f"evaluation forward pass of `{st.name}` runs with autograd on: it builds graphs it never uses",
                seg.location, "wrap evaluation in `with torch.no_grad():` (or torch.inference_mode())"))
        if training and st.has_norm and "TD402" not in st.reported:
            st.reported.add("TD402")
            self.findings.append(Finding(
                "TD402", f"evaluation forward pass of `{st.name}` runs in training mode: dropout/batch-norm are active",
                seg.location, "call model.eval() before evaluating (and model.train() before training again)"))

    def finish(self, interrupted: bool = False) -> list[Finding]:
        """Judge the open segments, unless an exception cut the run short inside one."""
        for st in self._roots.values():
            if st.segment is not None and not interrupted:
                self._close(st, st.segment)
            if st.deferred is not None and not interrupted:
                self._judge(st, st.deferred)
            st.segment = st.deferred = None
        return self.findings


def _trainable(st: _Root) -> bool:
    """Whether the root has a parameter that requires grad now (frozen feature extractors do not train)."""
    module = st.ref()
    if module is None:
        return st.trainable  # as first seen
    return any(p.requires_grad for p in module.parameters())
