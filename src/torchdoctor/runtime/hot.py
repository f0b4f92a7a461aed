"""The watch's per-call wrappers: Module.__call__, autograd.backward and the data loader's __next__.

They run at every module call, every backward and every batch, so each does
the session's steady-state work inline (a few attribute reads, a clock read
only when the phase changes) and calls into the session or a check only when
something is new: a model not seen since its last ``Module._apply``, a
forward pass in another mode, an armed gradient check, a device error.
Module calls made inside another module's forward, or inside backward
(checkpoint recomputation), pass straight through, doing what
``Module._wrapped_call_impl`` does in its place (so that the wrapper costs no
extra frame), as do calls dynamo traces (it inlines the wrapper: it reads
only a flag, never a module). Their frames
say ``__tracebackhide__`` so that pytest and IPython leave them out.
"""

from __future__ import annotations

import functools
from time import perf_counter
from typing import Any

from torchdoctor.runtime.checks.keepers import frame_hint
from torchdoctor.runtime.timeline import BACKWARD, DATA, FORWARD, OTHER


def module_call(session: Any, orig: Any) -> Any:
    # Module.__call__ rather than global module hooks: a global hook sends every
    # module call (children too) down torch's slow path, and makes torch.compile'd
    # modules warn on each call.
    import torch

    compiling = torch.compiler.is_dynamo_compiling  # False in eager (one trivial call), True while dynamo traces
    grad_enabled = torch.is_grad_enabled
    timeline, roots, since = session.timeline, session._root_info, session._since_backward

    @functools.wraps(orig)
    def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        if compiling():
            return orig(module, *args, **kwargs)
        if session._busy:  # inside a root call: what Module._wrapped_call_impl does, without its extra frame
            impl = module._compiled_call_impl
            return module._call_impl(*args, **kwargs) if impl is None else impl(*args, **kwargs)
        if timeline.phase != FORWARD:
            timeline.enter(FORWARD, perf_counter())
        timeline.forwards += 1
        session._busy = True
        try:
            info = roots.get(id(module))
            if info is None or info[0] != session._generation or info[1]() is not module:
                info = roots[id(module)] = session._read_root(module)
            st = info[4]
            if st is not None:  # a model with parameters, and the one watched if narrowed
                key = (session._pass_id, module.training, grad_enabled())
                seg = st.segment
                if seg is None or seg.key != key:
                    session._modes.on_forward(st, key, session._segment_location, session._takes_batch(args, kwargs))
                elif not seg.settled:
                    since[id(st)] = st
                session._facts = info
                if session._watch_autocast:
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

    @functools.wraps(orig)
    def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        if session._in_backward:  # reentrant checkpointing calls backward inside backward
            return orig(tensors, *args, **kwargs)
        if grads.waiting:
            grads.before_backward()
        losses.on_backward(tensors, where, frame_hint)
        if since:
            session._modes.on_backward()
        timeline.backwards += 1
        facts = session._facts
        if facts is not session._facts_trained and facts is not None:  # a new model (or a move) trains: its device
            session._facts_trained = facts
            session._train_devices.add(facts[2])
        busy = session._busy
        session._in_backward = session._busy = True
        timeline.enter(BACKWARD, perf_counter())
        try:
            return orig(tensors, *args, **kwargs)
        finally:
            timeline.enter(OTHER, perf_counter())
            session._in_backward, session._busy = False, busy
            if grads.waiting:
                grads.after_backward()

    return backward


def loader_next(session: Any, orig: Any) -> Any:
    timeline = session.timeline

    @functools.wraps(orig)
    def __next__(self: Any) -> Any:
        __tracebackhide__ = True
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
