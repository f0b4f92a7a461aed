"""The watch session: installs global hooks and patches, routes events to the checks, removes them all.

Per step only root module calls (the model, the loss), backward and the
optimizer's step hooks do work (``hot.py``), and little, and past the first
steps only on the audited ones (``arm``/``disarm``): what a module is gets read once
per ``Module._apply``, stack walks happen when a location is first needed, and
device comparisons only once a call has failed. Only weak references to the
user's modules, optimizers and tensors are kept once a call returns; one
session at a time per process.
"""

from __future__ import annotations

import sys
import threading
import weakref
from time import perf_counter
from typing import Any

from torchdoctor.errors import TorchDoctorError
from torchdoctor.findings import Finding, Location, sort_findings
from torchdoctor.runtime import patches
from torchdoctor.runtime.checks import attributes, data, devices, grads, losses, modes
from torchdoctor.runtime.checks.env import startup_findings
from torchdoctor.runtime.hot import in_module_call
from torchdoctor.runtime.locate import user_location
from torchdoctor.runtime.probe import DeviceProbe, default_probe
from torchdoctor.runtime.timeline import OTHER, RSS_EVERY_S, RSS_FIRST_STEPS, Timeline

_lock = threading.Lock()
_active: WatchSession | None = None


class WatchSession:
    """``with torchdoctor.watch() as session:`` ... ``session.findings``, ``session.report()``."""

    def __init__(self, model: Any = None, optimizer: Any = None, *, probe: DeviceProbe | None = None,
                 environment: bool = True) -> None:
        self._model_ids: set[int] | None = {id(m) for m in model.modules()} if model is not None else None
        self._optimizer = weakref.ref(optimizer) if optimizer is not None else None
        self._probe = probe
        self._environment = environment
        self._findings: list[Finding] = []
        self._closed = False
        self.stats: dict[str, Any] = {}

    # -- public ------------------------------------------------------------
    @property
    def findings(self) -> list[Finding]:
        """Findings so far (final once the ``with`` block has exited)."""
        if self._closed:
            return list(self._findings)
        from torchdoctor.runtime.verdict import dedup

        return sort_findings(dedup(self._findings + self._live_findings()))

    def report(self, fmt: str = "text", *, color: bool = False, title: str = "torchdoctor run") -> str:
        from torchdoctor.runtime.reporting import render

        return render(self.findings, self.stats, fmt, color=color, title=title)

    def __enter__(self) -> WatchSession:
        global _active
        with _lock:
            if _active is not None:
                raise TorchDoctorError("a torchdoctor watch session is already active in this process; "
                                       "nested or concurrent sessions are not supported (end the first one)")
            _active = self
        try:
            self._start()
        except BaseException:
            with _lock:
                _active = None
            raise
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        global _active
        try:
            self._finish(exc)
        finally:
            self._patches.remove()
            self._probe_obj.stop_sync_watch()
            with _lock:
                _active = None

    # -- set-up ------------------------------------------------------------
    def _start(self) -> None:
        import torch

        self._torch = torch
        self._probe_obj = self._probe if self._probe is not None else default_probe()
        if self._environment:
            self._findings += startup_findings()
        self.timeline = Timeline()
        self._modes = modes.ModeCheck()
        self._grads = grads.GradCheck()
        self._losses = losses.LossCheck()
        self._samplers = data.SamplerCheck()
        self._root: Any = None
        self._root_args: tuple[Any, ...] = ()
        self._root_info: dict[int, tuple[Any, ...]] = {}  # by id(module), as long as it lives: see _read_root
        self._root_modes: dict[int, Any] = {}  # the same entries' mode records alone (hot.module_call's one lookup)
        self._generation = 0  # bumped by every Module._apply (.to, .cuda, .cpu, .half): root facts are re-read
        self._watch_autocast = self._probe_obj.accelerator == "cuda"
        self._reads_memory = self._probe_obj.accelerator is not None  # the plain probe has no readings
        self._in_backward = False
        self._busy = False  # a root call or a backward is running: module calls pass straight through
        self._grad_enabled = torch.is_grad_enabled
        self._since_backward = self._modes.since_backward
        self._pass_id: int | None = None
        self._passes = 0
        self._batches: tuple[dict[int, weakref.ReferenceType], ...] = ({}, {})
        self._primary: Any = None
        self._several_optimizers = False  # another optimizer steps within the primary's steps (a GAN)
        self._other_step: tuple[int, int] | None = None
        self._train_devices: set[str] = set()
        self._autocast_steps = 0
        self._step_location: Location | None = None
        self._loader_location: Location | None = None
        self._sync_steps: dict[Location, set[int]] = {}
        self._peak = 0
        self._rss_next = 0.0  # host memory is read when this time has come (at each of the first steps: 0)
        self._memory: list[int] = []
        self._explained: set[int] = set()
        self._attrs_read: set[int] = set()
        self._facts: tuple[Any, ...] | None = None  # _read_root of the last model called (device type, float32)
        self._facts_trained: tuple[Any, ...] | None = None  # the facts whose device is in _train_devices already
        self._autocast_now = False
        self._where = self.call_location  # one bound method, handed to the checks at every step
        self._dynamo_seen = [False]  # torch._dynamo imported (before or during the session): see patches.install
        self._armed = True  # this step is audited: the wrappers do their work (``arm``; each of the first steps)
        self._through = False  # module calls pass straight through, roots too: ``disarm``, ``stop_through``
        self._through_ends = 0  # how many times ``stop_through`` ended it (a grad context resumes only its own)
        self._call_code: Any = None  # the module-call wrapper's code (set by patches.install): ``hot.in_module_call``
        # set by patches.install: torch's hook dict and the step pre-hook's key in it, the pre-hook, both backwards
        self._pre_hooks: Any = None
        self._pre_key: Any = None
        self._on_step_pre: Any = None
        self._backward_watched: Any = None
        self._backward_torch: Any = None
        self._patches = patches.install(self)
        self._probe_obj.start_sync_watch(self._on_sync)

    # -- audited steps (timeline.py) ----------------------------------------
    def arm(self) -> None:
        """From now to the end of the step (``hot.step_post`` decides about the next one), the wrappers do their
        work: module calls are read, the watch's backward and step pre-hook are in."""
        self._armed = True
        self._through = self._busy = False
        self.end_stretch()
        self._pre_hooks[self._pre_key] = self._on_step_pre
        self._torch.autograd.backward = self._backward_watched

    def disarm(self) -> None:
        """A step that is not audited comes: no step pre-hook, module calls pass, torch's own backward once the
        loss check no longer looks (``settle_backward``)."""
        self._armed = False
        self._through = self._busy = True
        if not self._reads_memory:  # up to the step before the next audit, the step hook counts steps only
            self.timeline.open_stretch(self.timeline.audit - 2)
        self._pre_hooks.pop(self._pre_key, None)
        self.settle_backward()

    def stop_through(self) -> bool:
        """Something may change how a root model is called next (a mode, a move, a loader pass, a grad context): from
        here on, module calls are read again (``hot.module_call``). Not when it happens inside a module call or a
        backward pass: what counts is the state a root is called in, and these calls are inside one (or recompute
        one). Whether it ended passing through."""
        if not self._through or self._in_backward or self._torch._C._current_graph_task_id() != -1 \
                or in_module_call(self._call_code, sys._getframe(1)):
            return False
        self._through = self._busy = False
        self._through_ends += 1
        self.end_stretch()
        return True

    def end_stretch(self) -> None:
        """Something new in the middle of a step, or the watch's end: the open stretch of steps passed through, if
        any, ends now (``close_stretch``)."""
        if self.timeline.stretch >= 0:
            self.close_stretch(perf_counter(), ends_step=False)

    def close_stretch(self, now: float, ends_step: bool) -> None:
        """The steps passed through are over (``Timeline.close_stretch``)."""
        passed = self.timeline.close_stretch(now, ends_step)
        if self._autocast_now:
            self._autocast_steps += passed

    def resume_through(self, ended: int) -> None:
        """The grad context whose start ended passing through (the ``ended``-th end) is over: pass through again, unless
        something else changed since or the step got audited."""
        if ended == self._through_ends and not (self._armed or self._through):
            self._through = self._busy = True

    def settle_backward(self) -> None:
        """Not audited: torch's own backward, unless the loss check still looks at the passes after a tag or tags
        every one (``hot.backward`` asks again after each pass it sees)."""
        if not (self._armed or self._losses.looking or self._losses.every):
            self._torch.autograd.backward = self._backward_torch

    # -- events (called from hooks; keep them cheap) ------------------------
    def on_root_error(self, error: BaseException, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """A root module call (``hot.module_call``) failed: a device error is explained before it propagates."""
        if devices.is_device_error(error):
            # the explanation reads the root and its inputs (keyword inputs are the batch too: HF-style calls)
            self._root, self._root_args = module, (*args, *kwargs.values())
            try:
                self._explain(error)
            finally:
                self._root, self._root_args = None, ()

    def on_through_error(self, error: BaseException, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """A module call failed on a step passed through: the outermost one explains it as a root's."""
        if not in_module_call(self._call_code, sys._getframe(2)):
            self.on_root_error(error, module, args, kwargs)

    def _read_root(self, module: Any) -> tuple[Any, ...]:
        """(generation, ref, device type of the first parameter, float32?, mode record or None).

        The module's entry in ``_root_info`` is removed when it dies (so an id there is always its module's: no
        check per call) or moves (``on_module_apply``)."""
        roots, modes, key = self._root_info, self._root_modes, id(module)
        ref = weakref.ref(module, lambda _: (roots.pop(key, None), modes.pop(key, None)))
        if (self._model_ids is not None and id(module) not in self._model_ids) or not (module._parameters or module._modules):
            return self._generation, ref, None, False, None  # not watched, or a loss/activation built on the fly
        mode = self._modes.root(module)
        if id(module) not in self._attrs_read:  # once per model: what a move would leave behind (TD203)
            self._attrs_read.add(id(module))
            self._findings += attributes.plain_tensor_findings(module)
        for p in module.parameters():
            return self._generation, ref, p.device.type, p.dtype == self._torch.float32, mode
        return self._generation, ref, None, False, mode

    def _explain(self, error: BaseException) -> None:
        found = devices.explain_failure(error, self)
        if found:
            self._explained.add(id(error))
            early = {f.location for f in self._findings if f.code == "TD203"}  # already told at the first forward
            self._findings += [f for f in found if not (f.code == "TD203" and f.location in early)]

    def on_grad(self) -> None:
        """torch.autograd.grad: the graph is used (adversarial attacks, penalties), no gradient is accumulated."""
        self._modes.on_backward(grad_only=True)

    def _new_primary(self, opt: Any, now: float) -> bool:
        """An optimizer other than the primary (the first seen) stepped (``hot.step_post``): whether it ends the step.

        Another optimizer stepping twice with no step of the primary in between takes over (an LR finder's
        optimizer replaced by the real one); GAN optimizers alternate and do not."""
        primary = self._primary() if self._primary is not None else None
        if primary is not None:
            mark = (id(opt), self.timeline.count)
            if self._other_step != mark:
                self._other_step = mark
                self._several_optimizers = True  # (GAN): every step is audited, see hot.step_post
                if self.timeline.timed:
                    self.timeline.enter(OTHER, now)  # a second optimizer's step (GAN) is part of this step
                return False
        self._primary = weakref.ref(opt)
        self.timeline.primary = id(opt)
        return True

    def _step_readings(self, now: float) -> tuple[int | None, int | None]:
        """(device memory, host RSS) at the end of a step, each None when not read at this one."""
        memory = rss = None
        if self._reads_memory:
            probe = self._probe_obj
            memory, peak = probe.memory_allocated(), probe.peak_and_reset()
            if memory is not None:
                self._memory.append(memory)
            if peak is not None:
                self._peak = max(self._peak, peak)
        if now >= self._rss_next:  # for the report's chart: a system call, so not at every step after the first ones
            rss = self._probe_obj.host_rss()
            self._rss_next = now + RSS_EVERY_S if self.timeline.count + 1 >= RSS_FIRST_STEPS else 0.0
        return memory, rss

    def on_pass_start(self, it: Any, loader: Any) -> None:
        self.stop_through()
        self._passes += 1
        it._torchdoctor_pass = self._passes
        self._samplers.on_pass(loader, it, self.call_location)
        if self._loader_location is None:  # where the loop waits for batches: TD606's place (once, not per pass)
            self._loader_location = self.call_location()

    def on_batch(self, it: Any, batch: Any) -> None:
        pass_id = getattr(it, "_torchdoctor_pass", None)
        if pass_id != self._pass_id:  # loops that zip two loaders alternate
            self.stop_through()
            self._pass_id = pass_id
        self.timeline.batches += 1
        current: dict[int, weakref.ReferenceType] = {}
        data.collect_tensors(batch, current, self._torch.Tensor, 2)
        self._batches = (current, self._batches[0])  # the previous batch too: loops that zip two loaders use both

    def on_pass_end(self, it: Any) -> None:
        self.stop_through()
        self._pass_id = None
        self._samplers.on_pass_done(it)

    def on_module_apply(self) -> None:
        self.stop_through()
        self._generation += 1
        self._root_info.clear()  # what the roots are (device, dtype) is read again at their next call
        self._root_modes.clear()

    def on_train_call(self, module: Any, mode: bool) -> None:
        """``module.train(mode)`` or ``module.eval()``, not from inside another one's."""
        self.stop_through()
        if not mode:
            self._modes.eval_locations[id(module)] = self.call_location()

    def add(self, finding: Finding | None) -> None:
        if finding is not None:
            self._findings.append(finding)

    def _on_sync(self, frame: Any = None) -> None:
        from torchdoctor.runtime.locate import frame_location, user_frame

        loc = frame_location(user_frame(frame)) if frame is not None else user_location()
        if loc is not None:
            self._sync_steps.setdefault(loc, set()).add(self.timeline.count)

    # -- helpers for the checks ---------------------------------------------
    def call_location(self) -> Location | None:
        return user_location()

    def _segment_location(self) -> Location | None:
        """Where a root's forward passes in a new mode start; None when torch makes them (update_bn): not judged."""
        from torchdoctor.runtime.locate import called_by_library

        return None if called_by_library(sys._getframe(1)) else user_location()

    def root_call_location(self) -> Location | None:
        """The user's line that called the root module now running (its call is the outermost module call)."""
        return user_location()

    def _takes_batch(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        return any(self.from_loader(a) for a in (*args, *kwargs.values()))

    def from_loader(self, tensor: Any) -> bool:
        for batch in self._batches:
            ref = batch.get(id(tensor))
            if ref is not None and ref() is tensor:
                return True
        return False

    def is_root_input(self, tensor: Any) -> bool:
        return any(a is tensor for a in self._root_args)

    def module_path(self, module: Any) -> str:
        root = self._root
        if root is None or module is root:
            return type(module).__name__
        for name, m in root.named_modules():
            if m is module:
                return name
        return type(module).__name__

    def last_model_device_type(self) -> str | None:
        """The device type of the last model called (read once per Module._apply), None before any."""
        return self._facts[2] if self._facts else None

    def root_devices(self) -> tuple[str, ...]:
        root = self._root
        if root is None:
            return ()
        return tuple(sorted({str(t.device) for t in root.parameters()} | {str(t.device) for t in root.buffers()}))

    # -- the end -------------------------------------------------------------
    def _live_findings(self) -> list[Finding]:
        return self._modes.findings + self._grads.findings + self._losses.judge() + self._samplers.findings

    def _finish(self, exc: BaseException | None) -> None:
        from torchdoctor.runtime.verdict import finish

        finish(self, exc)

    def _release_refs(self) -> None:
        self._root, self._root_args, self._batches = None, (), ({}, {})
        self._primary = None


def watch(model: Any = None, optimizer: Any = None, *, probe: DeviceProbe | None = None, environment: bool = True) -> WatchSession:
    """Audit the training code run inside ``with torchdoctor.watch() as session:``.

    ``model``/``optimizer`` narrow attention to them; without them modules,
    optimizers and data loaders are discovered as they are used. ``probe``
    replaces the accelerator readings (tests); ``environment=False`` skips the
    start-up environment check.
    """
    return WatchSession(model, optimizer, probe=probe, environment=environment)
