"""The watch's per-call wrappers and hooks: Module.__call__, autograd.backward, optimizer steps, batches.

They run at every module call, backward, optimizer step and batch, so each
does its work inline, in as few Python operations as it can. Past a
session's first steps, the watch audits one step in 30 or 31, later one in 63
or 64, then one in 125 or 126 (timeline.py); the others are passed through (``session._through``):
``session._busy`` stays set, so every module call, a root one too, goes
straight to torch's ``_call_impl`` after that one flag read, torch's own
``autograd.backward`` is back in place, the step pre-hook is out of torch's
dict, and the step post-hook only counts the step (its time is its stretch's
mean: ``Timeline.close_stretch``). What may change how a root is called next
(a loader pass, ``train()``/``eval()``, a move, a grad context entered outside
any module call) ends passing through (``session.stop_through``); from then on
(``session._armed`` False) the wrapper lets a root model in the state last
seen (pass, training flag, grad mode) through with a few reads, and a root in
another state, a new root or a moved one arms the watch at once
(``session.arm``), to the end of that step; the post-hook decides about the
next one. Audited, the wrappers read the clock only when
the phase changes (``Timeline.enter`` written out in place) and call into the
session or a check only when something is new: a model not seen since its
last ``Module._apply``, a forward pass in another mode, a followed gradient,
a tagged loss, a device error (explained on any step). Module calls made
inside another module's forward, or inside backward (checkpoint
recomputation), pass straight through, doing what
``Module._wrapped_call_impl`` does in its place (so that the wrapper costs no
extra frame); this is decided first, on one flag, so that a model's inner
calls cost one attribute read more than without the watch. Calls dynamo
traces outside a root call pass through too (it inlines the wrapper and
reads only flags, never a module); dynamo is asked whether it traces only
once ``torch._dynamo`` is imported (``patches._watch_dynamo_import``). Their frames say ``__tracebackhide__`` so
that pytest and IPython leave them out. (Swapping ``Module.__call__`` itself
between steps would cost more than it saves: setting a dunder on nn.Module
updates the call slot of every subclass, ~30 us.)
"""

from __future__ import annotations

import functools
from time import perf_counter
from typing import Any

from torchdoctor.runtime.checks.keepers import frame_hint
from torchdoctor.runtime.timeline import BACKWARD, DATA, FOLLOW_WAIT, FORWARD, OPTIMIZER, OTHER

_NEW = type("_New", (), {"segment": None})()  # what an unseen root's mode record reads as: no segment, so not passed


def in_module_call(code: Any, frame: Any) -> bool:
    """Whether ``frame`` or one that called it runs ``code`` (the module-call wrapper's): inside a module call."""
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def module_call(session: Any, orig: Any) -> Any:
    # Module.__call__ rather than global module hooks: a global hook sends every
    # module call (children too) down torch's slow path, and makes torch.compile'd
    # modules warn on each call.
    import torch

    compiling = torch.compiler.is_dynamo_compiling  # False in eager (one trivial call), True while dynamo traces
    grad_enabled = torch.is_grad_enabled
    timeline, roots, since, watch_autocast = session.timeline, session._root_info, session._since_backward, session._watch_autocast
    modes_of = session._root_modes  # by id(module): _read_root's mode record, kept beside _root_info
    # nothing traces before torch._dynamo is imported: until then the call to compiling() is saved
    dynamo = session._dynamo_seen

    @functools.wraps(orig)
    def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
        # ``__tracebackhide__`` is set where an exception passes (IPython reads a frame's locals when it prints the
        # traceback): a try costs nothing in CPython 3.11 until something is raised, an assignment costs every call
        if session._busy:  # inside a root call, or a step passed through whole: what Module._wrapped_call_impl does,
            impl = module._compiled_call_impl  # without its extra frame
            try:
                return module._call_impl(*args, **kwargs) if impl is None else impl(*args, **kwargs)
            except BaseException as error:
                __tracebackhide__ = True
                if session._through and isinstance(error, Exception):  # the outermost call explains it
                    session.on_through_error(error, module, args, kwargs)
                raise
        if dynamo[0] and compiling():
            return orig(module, *args, **kwargs)
        if not session._armed:  # a step the watch does not audit (timeline.py): a root in the state last seen passes
            # its mode record (None: a module without parameters, or not watched) in one lookup; ``ready`` is the pass
            # a settled segment belongs to (``checks.modes``), a marker equal to nothing before it settles
            st = modes_of.get(id(module), _NEW)
            if st is None or ((seg := st.segment) is not None and seg.ready == session._pass_id
                              and seg.training is module.training and seg.grad is grad_enabled()):
                timeline.forwards += 1
                session._busy = True
                try:
                    impl = module._compiled_call_impl
                    return module._call_impl(*args, **kwargs) if impl is None else impl(*args, **kwargs)
                except BaseException as error:
                    __tracebackhide__ = True
                    if isinstance(error, Exception):
                        session.on_root_error(error, module, args, kwargs)
                    raise
                finally:
                    session._busy = False
            # (written out apart from the audited path below: sharing its tail costs ~27 bytecodes a step here)
            session.arm()  # a new root, a move, or another mode: audited from here to the end of the step
        tl = timeline
        if tl.timed and tl.phase != FORWARD:  # Timeline.enter, in place (on a timed step: timeline.py)
            now = perf_counter()
            tl.sums[tl.phase] += now - tl._mark
            tl._mark = now
            tl.phase = FORWARD
        tl.forwards += 1
        session._busy = True
        try:
            info = roots.get(id(module))
            if info is None:  # an entry lives as long as its module (and until the next Module._apply)
                info = roots[id(module)] = session._read_root(module)
                modes_of[id(module)] = info[4]
            st = info[4]
            if st is not None:  # a model with parameters, and the one watched if narrowed
                seg = st.segment  # its state (pass, training, grad mode) compared piece by piece: no tuple per call
                if seg is None or seg.training != module.training or seg.grad is not grad_enabled() \
                        or seg.pass_id != session._pass_id:
                    key = (session._pass_id, module.training, grad_enabled())
                    session._modes.on_forward(st, key, session._segment_location, session._takes_batch(args, kwargs))
                elif not seg.settled:
                    since[id(st)] = st
                session._facts = info
                if watch_autocast:
                    session._autocast_now = torch.is_autocast_enabled("cuda")
            impl = module._compiled_call_impl
            return module._call_impl(*args, **kwargs) if impl is None else impl(*args, **kwargs)
        except BaseException as error:
            __tracebackhide__ = True
            if isinstance(error, Exception):
                session.on_root_error(error, module, args, kwargs)
            raise
        finally:
            session._busy = False

    return __call__


def backward(session: Any, orig: Any) -> Any:
    """In torch.autograd while the watch audits a step, or the loss check looks at the passes after a tag
    (``session.arm``, ``session.disarm``); torch's own otherwise."""
    timeline, grads, losses, since = session.timeline, session._grads, session._losses, session._since_backward
    where = session.call_location

    # torch.autograd.backward's own parameters (a test compares them): with *args/**kwargs each call would pack
    # Tensor.backward's arguments into a tuple and a dict and unpack them again for torch
    @functools.wraps(orig)
    def backward(tensors: Any, grad_tensors: Any = None, retain_graph: Any = None, create_graph: bool = False,
                 grad_variables: Any = None, inputs: Any = None) -> Any:
        __tracebackhide__ = True
        if session._in_backward:  # reentrant checkpointing calls backward inside backward
            return orig(tensors, grad_tensors, retain_graph, create_graph, grad_variables, inputs)
        if grads.waiting:
            grads.before_backward()
        tl = timeline
        passes = tl.backwards = tl.backwards + 1
        if not losses.done:
            losses.on_backward(tensors, where, frame_hint, passes, tl.count + 1 if tl.count else passes, session._armed)
        if since:
            session._modes.on_backward()
        facts = session._facts
        if facts is not session._facts_trained and facts is not None:  # a new model (or a move) trains: its device
            session._facts_trained = facts
            session._train_devices.add(facts[2])
        busy, through = session._busy, session._through
        session._in_backward = session._busy = True
        if tl.timed:  # Timeline.enter, in place (twice), on a timed step
            now = perf_counter()
            tl.sums[tl.phase] += now - tl._mark
            tl._mark = now
            tl.phase = BACKWARD
        try:
            return orig(tensors, grad_tensors, retain_graph, create_graph, grad_variables, inputs)
        finally:
            if tl.timed:
                now = perf_counter()
                tl.sums[tl.phase] += now - tl._mark  # an optimizer may step inside backward (hooks): its phase is charged
                tl._mark = now
                tl.phase = OTHER
            session._in_backward = False
            session._busy = busy if session._through is through else session._through  # (a step hook in backward)
            if grads.waiting:
                grads.after_backward()
            if not session._armed:
                session.settle_backward()  # the loss check's look may be over: torch's own backward until the next audit

    return backward


def step_pre(session: Any) -> Any:
    """The global optimizer step pre-hook: the optimizer phase begins. In torch's dict only while the watch audits a
    step (``session.arm``): a timed step, or one that the gradient check follows."""
    timeline, grads, narrowed, where = session.timeline, session._grads, session._optimizer, session.call_location

    def on_step_pre(opt: Any, args: Any = None, kwargs: Any = None) -> None:
        if narrowed is not None and narrowed() is not opt:
            return
        tl = timeline
        if tl.timed:  # Timeline.enter, in place, on a timed step
            now = perf_counter()
            tl.sums[tl.phase] += now - tl._mark
            tl._mark = now
            tl.phase = OPTIMIZER
        if grads.waiting:  # only a followed step has something to look at before the step
            grads.on_step_pre(opt, where, args, kwargs)
        if session._step_location is None:
            session._step_location = where()

    return on_step_pre


def step_post(session: Any) -> Any:
    """The global optimizer step post-hook: the first optimizer seen (the primary) ends a step.

    On a step the watch does not audit, and before one it does not audit either, that is all it does: the step's
    total time. At the end of the others it decides whether the next step is audited (``session.arm``, or
    ``session.disarm``): each of the first steps, the timeline's audit steps, a step after one that waited for data,
    and every step while the gradient check confirms a miss or the loss check has found a kept loss."""
    timeline, grads, narrowed, where = session.timeline, session._grads, session._optimizer, session._where
    reads_memory = session._reads_memory  # device memory is read at every step: no step is passed through

    def on_step_post(opt: Any, args: Any = None, kwargs: Any = None) -> None:
        tl = timeline
        # neither this step nor the next is audited (``fast_until``: session.disarm), the primary optimizer stepped
        # (its id: a step passed through reads no clock and no weak reference): counted, no more. Its time is its
        # stretch's mean, written when the stretch ends (Timeline.close_stretch)
        if tl.count < tl.fast_until and id(opt) == tl.primary:
            tl.count += 1
            return
        now = perf_counter()
        if narrowed is not None and narrowed() is not opt:
            return
        primary = session._primary
        if primary is None or primary() is not opt:
            if not session._new_primary(opt, now):
                if session._armed:
                    grads.on_step_post(opt, where)
                return  # another optimizer's step (GAN) is part of this step
        if tl.stretch >= 0:
            session.close_stretch(now, ends_step=True)
        if session._autocast_now:
            session._autocast_steps += 1
        if reads_memory or now >= session._rss_next:
            memory, rss = session._step_readings(now)
        else:
            memory = rss = None
        count = tl.count = tl.count + 1
        if tl.timed:
            sums = tl.sums
            sums[tl.phase] += now - tl._mark
            tl._rows.append((count, now - tl._start, sums[0], sums[1], sums[2], sums[3], memory, rss))
            tl.sums = [0.0, 0.0, 0.0, 0.0, 0.0]  # a new list costs less than zeroing this one in place
            tl.timed = tl.next_timed(count, sums[0] > FOLLOW_WAIT * (now - tl._start))
            if tl.full():  # looked at on timed steps only: a few rows more at most
                tl.thin()
        else:  # a step not timed (sampling): its total only; its phase stayed OTHER
            if tl._stride == 1 or count % tl._stride == 0:
                tl._rows.append((count, now - tl._start, None, None, None, None, memory, rss))
            tl.timed = count + 1 == tl.audit
        tl._mark = tl._start = now
        tl.phase = OTHER
        # (with several optimizers (a GAN), every step: the others' steps straddle the primary's, whose gradients
        # the gradient check follows from one step of each to the next)
        if tl.timed or grads.every or session._losses.every or session._several_optimizers:
            grads.on_step_post(opt, where)  # the next step is followed: its gradient must be reset before backward
            if not session._armed:
                session.arm()
        else:
            if grads.waiting:
                grads.pause()
            session.disarm()

    return on_step_post


def loader_next(session: Any, orig: Any) -> Any:
    timeline = session.timeline

    @functools.wraps(orig)
    def __next__(self: Any) -> Any:
        __tracebackhide__ = True
        if not timeline.timed:  # a step whose phases are not timed (sampling: timeline.py)
            try:
                batch = orig(self)
            except StopIteration:
                session.on_pass_end(self)
                raise
            session.on_batch(self, batch)
            return batch
        back = timeline.phase  # an evaluation loop's wait sits inside its forward phase: go back to it after
        timeline.enter(DATA, perf_counter())
        try:
            batch = orig(self)
        except StopIteration:
            timeline.enter(back, perf_counter())
            session.on_pass_end(self)
            raise
        timeline.enter(back, perf_counter())
        session.on_batch(self, batch)
        return batch

    return __next__
