"""The watch's per-call wrappers and hooks: Module.__call__, autograd.backward, optimizer steps, batches.

They run at every module call, backward, optimizer step and batch, so each
does the session's steady-state work inline, in as few Python operations as
it can (a few attribute reads, a clock read only when the phase changes:
``Timeline.enter`` written out in place), and calls into the session or a
check only when something is new: a model not seen since its last
``Module._apply``, a forward pass in another mode, an armed gradient check,
a step that a sampled check follows, a device error. Module calls made
inside another module's forward, or inside backward (checkpoint
recomputation), pass straight through, doing what
``Module._wrapped_call_impl`` does in its place (so that the wrapper costs no
extra frame); this is decided first, on one flag, so that a model's inner
calls cost one attribute read more than without the watch. Calls dynamo
traces outside a root call pass through too (it inlines the wrapper and
reads only flags, never a module); dynamo is asked whether it traces only
once ``torch._dynamo`` is imported (``patches._watch_dynamo_import``). Their frames say ``__tracebackhide__`` so
that pytest and IPython leave them out.
"""

from __future__ import annotations

import functools
import weakref
from time import perf_counter
from typing import Any

from torchdoctor.runtime.checks.keepers import frame_hint
from torchdoctor.runtime.timeline import BACKWARD, DATA, FOLLOW_WAIT, FORWARD, MAX_STEPS, OPTIMIZER, OTHER, TIMED_EVERY, \
    TIMED_FIRST


def module_call(session: Any, orig: Any) -> Any:
    # Module.__call__ rather than global module hooks: a global hook sends every
    # module call (children too) down torch's slow path, and makes torch.compile'd
    # modules warn on each call.
    import torch

    compiling = torch.compiler.is_dynamo_compiling  # False in eager (one trivial call), True while dynamo traces
    grad_enabled = torch.is_grad_enabled
    timeline, roots, since, watch_autocast = session.timeline, session._root_info, session._since_backward, session._watch_autocast
    # nothing traces before torch._dynamo is imported: until then the call to compiling() is saved
    dynamo = session._dynamo_seen

    @functools.wraps(orig)
    def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        if session._busy:  # inside a root call: what Module._wrapped_call_impl does, without its extra frame
            impl = module._compiled_call_impl
            return module._call_impl(*args, **kwargs) if impl is None else impl(*args, **kwargs)
        if dynamo[0] and compiling():
            return orig(module, *args, **kwargs)
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
        except Exception as error:
            session.on_root_error(error, module, args, kwargs)
            raise
        finally:
            session._busy = False

    return __call__


def backward(session: Any, orig: Any) -> Any:
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
        if passes >= losses.due:  # else a backward the loss check does not look at (it samples: checks/losses.py)
            losses.on_backward(tensors, where, frame_hint, passes)
        if since:
            session._modes.on_backward()
        facts = session._facts
        if facts is not session._facts_trained and facts is not None:  # a new model (or a move) trains: its device
            session._facts_trained = facts
            session._train_devices.add(facts[2])
        busy = session._busy
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
            session._busy = busy
            if grads.waiting:
                grads.after_backward()

    return backward


def step_pre(session: Any) -> Any:
    """The global optimizer step pre-hook: the optimizer phase begins. In torch's dict only for the steps that need
    it (``step_post`` puts it there): a timed step, or one that the gradient check is armed for."""
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
        if grads.waiting:  # only an armed gradient check has something to look at before a step
            grads.on_step_pre(opt, where, args, kwargs)
        if session._step_location is None:
            session._step_location = where()

    return on_step_pre


def step_post(session: Any, pre: Any, on_step_pre: Any) -> Any:
    """The global optimizer step post-hook: the first optimizer seen (the primary) ends a step.

    It also keeps the pre-hook ``on_step_pre`` (registered as ``pre``, the handle that removes it on exit) in
    torch's dict of global pre-hooks only while steps need it: a step whose phases are timed, or one that an armed
    gradient check (``grads.waiting``) looks at; the others, most steps of a long run, skip its call. Both change
    only here, so it asks after each step that may change them, and takes the hook out or puts it back under the
    same key."""
    timeline, grads, narrowed, where = session.timeline, session._grads, session._optimizer, session._where
    reads_memory = session._reads_memory
    pre_hooks, key = pre.hooks_dict_ref(), pre.id

    def on_step_post(opt: Any, args: Any = None, kwargs: Any = None) -> None:
        if narrowed is not None and narrowed() is not opt:
            return
        now = perf_counter()
        primary = session._primary
        tl = timeline
        if primary is None or primary() is not opt:
            if not session._new_primary(opt, now):
                grads.on_step_post(opt, where)
                if tl.timed or grads.waiting:
                    pre_hooks[key] = on_step_pre
                else:
                    pre_hooks.pop(key, None)
                return  # another optimizer's step (GAN) is part of this step
            grads.on_step_post(opt, where, primary=True)  # a new primary: the countdown was the former one's
            ask = True
        elif grads.skip:  # a step the gradient check does not follow (it samples: checks/grads.py)
            grads.skip -= 1
            ask = False
        else:
            grads.on_step_post(opt, where, primary=True)
            ask = True
        if session._autocast_now:
            session._autocast_steps += 1
        if reads_memory or now >= session._rss_next:
            memory, rss = session._step_readings(now)
        else:
            memory = rss = None
        count = tl.count = tl.count + 1  # Timeline.end_step, in place
        if tl.timed:
            sums = tl.sums
            sums[tl.phase] += now - tl._mark
            row = (count, now - tl._start, sums[0], sums[1], sums[2], sums[3], memory, rss)
            tl.sums = [0.0, 0.0, 0.0, 0.0, 0.0]  # a new list costs less than zeroing this one in place
            tl.timed = count < TIMED_FIRST or (count + 1) % TIMED_EVERY == 0 or sums[0] > FOLLOW_WAIT * (now - tl._start)
            tl._mark = now
            tl.phase = OTHER
            ask = True
            if len(tl._rows) >= MAX_STEPS:  # looked at on timed steps only: a few rows more at most
                tl.thin()
        else:  # a step not timed (sampling): its total only; its phase stayed OTHER, and no mark is needed
            row = (count, now - tl._start, None, None, None, None, memory, rss)
            if (count + 1) % TIMED_EVERY == 0:
                tl.timed = ask = True
                tl._mark = now
        if tl._stride == 1 or count % tl._stride == 0:
            tl._rows.append(row)
        tl._start = now
        if ask:
            if tl.timed or grads.waiting:
                pre_hooks[key] = on_step_pre
            else:
                pre_hooks.pop(key, None)

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
