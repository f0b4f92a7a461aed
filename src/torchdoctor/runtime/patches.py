"""Every hook and patch a session installs, and their removal (also after an exception).

The wrappers that run at every call (module calls, backward, batches) live in
``hot.py``; the ones here run rarely (``.to()``, ``.train()``, saving, loading).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


class Patches:
    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def handle(self, handle: Any) -> None:
        self._undo.append(handle.remove)

    def replace(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        setattr(owner, name, make(original))
        self._undo.append(lambda: setattr(owner, name, original))

    def undo(self, step: Callable[[], None]) -> None:
        self._undo.append(step)

    def remove(self) -> None:
        while self._undo:
            undo = self._undo.pop()
            try:
                undo()
            except Exception:  # keep removing the rest; a half-removed watch is worse
                pass


def install(session: Any) -> Patches:
    import torch
    from torch.optim import optimizer as optim_mod
    from torch.utils.data import dataloader as dl

    from torchdoctor.runtime import hot

    p = Patches()
    try:
        p.undo(_watch_dynamo_import(session._dynamo_seen))
        p.replace(torch.nn.Module, "__call__", lambda orig: hot.module_call(session, orig))
        p.undo(_forget_in_dynamo(torch.nn.Module.__call__, torch.nn.Module.__dict__["__call__"].__wrapped__))
        _unpatched_in_dynamo(torch.nn.Module.__call__)
        session._call_code = torch.nn.Module.__dict__["__call__"].__code__
        for context in (torch.no_grad, torch.enable_grad, torch.inference_mode):  # grad mode changes: session.stop_through
            p.replace(context, "__enter__", lambda orig: _context_enter(session, orig))
            p.replace(context, "__exit__", lambda orig: _context_exit(session, orig))
        on_step_pre = hot.step_pre(session)
        pre = optim_mod.register_optimizer_step_pre_hook(on_step_pre)
        p.handle(pre)
        p.handle(optim_mod.register_optimizer_step_post_hook(hot.step_post(session)))
        p.replace(torch.autograd, "backward", lambda orig: hot.backward(session, orig))
        # what session.arm and session.disarm put in and take out between audited steps (timeline.py)
        session._pre_hooks, session._pre_key, session._on_step_pre = pre.hooks_dict_ref(), pre.id, on_step_pre
        session._backward_watched = torch.autograd.backward
        session._backward_torch = torch.autograd.backward.__wrapped__
        p.replace(torch.autograd, "grad", lambda orig: _grad(session, orig))
        p.replace(dl._BaseDataLoaderIter, "__init__", lambda orig: _iter_init(session, orig))
        p.replace(dl._BaseDataLoaderIter, "__next__", lambda orig: hot.loader_next(session, orig))
        p.replace(torch.nn.Module, "_apply", lambda orig: _module_apply(session, orig))
        p.replace(torch.nn.Module, "train", lambda orig: _module_train(session, orig))
        p.replace(torch.nn.Module, "load_state_dict", lambda orig: _load_state_dict(session, orig))
        p.replace(torch, "save", lambda orig: _save(session, orig))
    except BaseException:
        p.remove()
        raise
    return p


class _DynamoImport:
    """An import finder that finds nothing: it marks when torch._dynamo is about to be imported (the
    module-call wrapper asks dynamo whether it traces only from then on)."""

    def __init__(self, seen: list[bool]) -> None:
        self.seen = seen

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "torch._dynamo":
            self.seen[0] = True


def _watch_dynamo_import(seen: list[bool]) -> Callable[[], None]:
    import sys

    seen[0] = "torch._dynamo" in sys.modules
    finder = _DynamoImport(seen)
    sys.meta_path.insert(0, finder)

    def remove() -> None:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)

    return remove


_DYNAMO_HOLDERS = ("torch._dynamo.utils", "torch._dynamo.variables.nn_module")  # where it keeps Module.__call__


def _unpatched_in_dynamo(wrapper: Any) -> None:
    """Dynamo takes the wrapper for the unpatched Module.__call__ while the watch runs (as it does when first imported
    during the session): a module call it traces goes straight to ``forward``, reading none of the watch's state, so
    that no guard of a compiled graph depends on it (steps audited and passed through alike: ``hot.module_call``)."""
    import sys

    for name in _DYNAMO_HOLDERS:
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "unpatched_nn_module_call"):
            module.unpatched_nn_module_call = wrapper


def _forget_in_dynamo(wrapper: Any, original: Any) -> Callable[[], None]:
    """Dynamo's unpatched Module.__call__ is torch's own again (see ``_unpatched_in_dynamo``)."""

    def forget() -> None:
        import sys

        for name in _DYNAMO_HOLDERS:
            module = sys.modules.get(name)
            if module is not None and getattr(module, "unpatched_nn_module_call", None) is wrapper:
                module.unpatched_nn_module_call = original

    return forget


def _context_enter(session: Any, orig: Any) -> Any:
    """A grad context (no_grad, enable_grad, inference_mode) starts: roots called in it are read again
    (``session.stop_through``), until it ends (``_context_exit``). Not torch's own (``clip_grad_norm_`` at every
    step, an optimizer's update): they call no model. A function decorated with ``@torch.no_grad()`` is entered
    through torch's ``decorate_context``: whoever called it decides (the user's ``evaluate()``, or torch's
    ``_clip_grads_with_norm_``)."""
    import sys

    @functools.wraps(orig)
    def __enter__(self: Any) -> Any:
        if session._through:
            frame = sys._getframe(1)
            if frame.f_globals.get("__name__") == "torch.utils._contextlib" and frame.f_back is not None:
                frame = frame.f_back
            if not frame.f_globals.get("__name__", "").startswith("torch.") and session.stop_through():
                self._torchdoctor_ended = session._through_ends
        return orig(self)

    return __enter__


def _context_exit(session: Any, orig: Any) -> Any:
    @functools.wraps(orig)
    def __exit__(self: Any, *exc: Any) -> Any:
        out = orig(self, *exc)
        ended = self.__dict__.pop("_torchdoctor_ended", None)
        if ended is not None:
            session.resume_through(ended)
        return out

    return __exit__


def _grad(session: Any, orig: Any) -> Any:
    @functools.wraps(orig)
    def grad(*args: Any, **kwargs: Any) -> Any:
        if session._in_backward:
            return orig(*args, **kwargs)
        session.on_grad()
        busy, through = session._busy, session._through
        session._in_backward = session._busy = True
        try:
            return orig(*args, **kwargs)
        finally:
            session._in_backward = False
            session._busy = busy if session._through is through else session._through

    return grad


def _iter_init(session: Any, orig: Any) -> Any:
    @functools.wraps(orig)
    def __init__(self: Any, loader: Any, *args: Any, **kwargs: Any) -> None:
        orig(self, loader, *args, **kwargs)
        session.on_pass_start(self, loader)

    return __init__


def _module_apply(session: Any, orig: Any) -> Any:
    @functools.wraps(orig)
    def _apply(self: Any, *args: Any, **kwargs: Any) -> Any:
        session.on_module_apply()
        return orig(self, *args, **kwargs)

    return _apply


def _module_train(session: Any, orig: Any) -> Any:
    depth = [0]

    @functools.wraps(orig)
    def train(self: Any, mode: bool = True) -> Any:
        if depth[0] == 0:
            session.on_train_call(self, mode)
        depth[0] += 1
        try:
            return orig(self, mode)
        finally:
            depth[0] -= 1

    return train


def _load_state_dict(session: Any, orig: Any) -> Any:
    from torchdoctor.runtime.checks import saving

    @functools.wraps(orig)
    def load_state_dict(self: Any, state_dict: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            result = orig(self, state_dict, *args, **kwargs)
        except RuntimeError:
            session.add(saving.on_load_error(state_dict, self, session.call_location))
            raise
        if getattr(result, "unexpected_keys", None):
            session.add(saving.on_load_error(state_dict, self, session.call_location))
        return result

    return load_state_dict


def _save(session: Any, orig: Any) -> Any:
    from torchdoctor.runtime.checks import saving

    @functools.wraps(orig)
    def save(obj: Any, *args: Any, **kwargs: Any) -> Any:
        session.add(saving.on_save(obj, session.call_location))
        return orig(obj, *args, **kwargs)

    return save
