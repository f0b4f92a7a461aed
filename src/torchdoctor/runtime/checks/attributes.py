"""Plain tensor attributes that ``forward`` uses but ``model.to(device)`` would leave behind: TD203 at the first forward.

The bug shows only once the model moves, so it is looked for before: at the
first call of each model, every module of a class written by the user is
read once for tensors kept in its ``__dict__`` (not a parameter, not a
buffer) that ``__init__`` assigned and that ``forward`` (or a method it calls)
reads. A tensor created in ``forward``, a constant ``forward`` never reads,
one ``forward`` moves itself (``self.mean.to(x.device)``) and a module whose
own ``_apply`` moves its tensors are left alone.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from torchdoctor.findings import Finding, Location

_MAX_METHODS = 32  # methods followed from forward, so that a huge class costs little


def plain_tensor_findings(root: Any) -> list[Finding]:
    import torch

    found = []
    for module in root.modules():
        cls = type(module)
        if not _users_class(cls) or cls._apply is not torch.nn.Module._apply:
            continue
        plain = [(k, v) for k, v in vars(module).items()
                 if isinstance(v, torch.Tensor) and not isinstance(v, torch.nn.Parameter)]
        if not plain:
            continue
        used = _names_forward_reads(cls)
        params = {p.device for p in module.parameters()} | {b.device for b in module.buffers()}
        for name, value in plain:
            if name not in used or _moved_in_forward(cls, name):
                continue
            if value.device.type != "cpu" and value.device in params:
                continue  # created on the model's accelerator on purpose (device=...): it works where it runs
            where = _assignment(cls, name)
            if where is not None:
                found.append(Finding(
                    "TD203", f"plain tensor attribute `{name}` of `{cls.__name__}` is used by forward but is not a buffer: "
                    f"model.to(device) moves parameters and buffers and leaves it on {value.device}",
                    where, f"register it: self.register_buffer({name!r}, ...) in __init__ (nn.Parameter if it is learned)"))
    return found


def _users_class(cls: type) -> bool:
    from torchdoctor.runtime.locate import is_internal

    try:
        path = inspect.getsourcefile(cls)
    except (OSError, TypeError):
        return False
    return path is not None and not is_internal(path)


def _names_forward_reads(cls: type) -> set[str]:
    """Attribute names read by forward and by the methods of ``cls`` it calls, transitively."""
    names: set[str] = set()
    todo, seen = ["forward"], set()
    while todo and len(seen) < _MAX_METHODS:
        method = todo.pop()
        if method in seen:
            continue
        seen.add(method)
        code = getattr(getattr(cls, method, None), "__code__", None)
        if code is None:
            continue
        for co in _codes(code):
            for n in co.co_names:
                names.add(n)
                if callable(getattr(cls, n, None)) and inspect.isfunction(getattr(cls, n)):
                    todo.append(n)
    return names


def _codes(code: Any) -> list[Any]:
    """A code object and those nested in it (comprehensions, lambdas, inner functions)."""
    out, todo = [], [code]
    while todo:
        c = todo.pop()
        out.append(c)
        todo.extend(k for k in c.co_consts if hasattr(k, "co_names"))
    return out


def _moved_in_forward(cls: type, name: str) -> bool:
    """Every read of ``self.<name>`` in forward moves it (``.to(``, ``.cuda(``, ``.type_as(``)."""
    try:
        source = inspect.getsource(cls.forward)
    except (OSError, TypeError):
        return False
    reads = re.findall(rf"self\.{re.escape(name)}\b(?!\s*=[^=])(\s*\.\s*(?:to|cuda|type_as)\s*\()?", source)
    return bool(reads) and all(reads)


def _assignment(cls: type, name: str) -> Location | None:
    """The ``self.<name> = ...`` line of the first ``__init__`` in the class's ancestry written by the user."""
    from torchdoctor.runtime.locate import display_path

    pattern = re.compile(rf"self\.{re.escape(name)}\s*(?::[^=]*)?=(?!=)")
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or not _users_class(klass):
            continue
        try:
            lines, start = inspect.getsourcelines(init)
            path = inspect.getsourcefile(init)
        except (OSError, TypeError):
            continue
        for offset, text in enumerate(lines):
            m = pattern.search(text.split("#", 1)[0])
            if m and path:
                return Location(display_path(path), start + offset, m.start() + 1)
    return None
