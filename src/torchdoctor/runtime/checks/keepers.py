"""Who keeps the loss tensors alive: the container, its name, and the user's line that fills it (TD405's location).

Asked once, when TD405 is reported, never per step: the garbage collector's
referrer lists lead from a kept loss to its list, from the list to the
object, frame or module namespace that names it, and a look at that owner's
source finds the line (``self.hist.append(loss)``). When the losses
themselves are gone but their graphs live on (``total += loss``), the
backward's own frame names the loss and its source shows what adds it up.
"""

from __future__ import annotations

import gc
import inspect
import linecache
import re
import sys
from collections import deque
from dataclasses import dataclass
from types import FrameType
from typing import Any

from torchdoctor.findings import Location

_CONTAINERS = (list, deque, dict)
_FILLS = r"\s*(?:\.\s*(?:append|extend|insert|appendleft|setdefault|update)\s*\(|\+=|\[[^\]\n]*\]\s*=(?!=))"


@dataclass(frozen=True)
class Keeper:
    name: str  # "`self.hist` of `LitModel`", "`losses`", "`running_loss`"
    location: Location | None


def find_keeper(sentinels: list[Any], key: str, frame_hint: tuple[Any, str] | None) -> Keeper | None:
    """``sentinels``: those of the kept losses (in their nodes' metadata under ``key``);
    ``frame_hint``: (code, name of the loss there)."""
    try:
        for tensor in _alive_tensors(sentinels, key):
            found = _container_keeper(tensor)
            if found is not None:
                return found
        if frame_hint is not None:
            return _accumulator(*frame_hint)
    except Exception:  # a best effort for a better location: never let it break the audit
        return None
    return None


def _alive_tensors(sentinels: list[Any], key: str) -> list[Any]:
    """The tensors whose graph node carries a kept sentinel: the loss itself, or the loss below a scaled one."""
    import torch

    wanted = {id(s) for s in sentinels if s is not None}
    tensor = torch.Tensor
    out = []
    for obj in gc.get_objects():  # type(), not isinstance(): some objects warn when asked for __class__
        if issubclass(type(obj), tensor) and obj.grad_fn is not None:
            mark = obj.grad_fn.metadata.get(key)
            if mark is not None and id(mark) in wanted:
                out.append(obj)
    return out


def _container_keeper(tensor: Any) -> Keeper | None:
    for holder in gc.get_referrers(tensor):
        if isinstance(holder, _CONTAINERS) and not _is_namespace(holder):
            found = _stack_owner(holder) or _owner(holder)
            if found is not None:
                return found
    return None


def _stack_owner(container: Any) -> Keeper | None:
    """A local of a function still running whose code fills it (a running frame is not listed by the collector)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if _users(frame.f_code.co_filename):
            name = next((k for k, v in frame.f_locals.items() if v is container), None)
            where = _search_code(frame.f_code, re.escape(name)) if name is not None else None
            if where is not None:
                return Keeper(f"`{name}`", where)
        frame = frame.f_back
    return None


def _is_namespace(d: Any) -> bool:
    return isinstance(d, dict) and "__builtins__" in d and "__name__" in d


def _owner(container: Any) -> Keeper | None:
    for ref in gc.get_referrers(container):
        if isinstance(ref, FrameType):
            name = next((k for k, v in ref.f_locals.items() if v is container), None)
            if name is not None and _users(ref.f_code.co_filename):
                return Keeper(f"`{name}`", _search_code(ref.f_code, re.escape(name)))
        elif _is_namespace(ref):
            name = next((k for k, v in ref.items() if v is container), None)
            path = ref.get("__file__")
            if name is not None and isinstance(path, str) and _users(path):
                return Keeper(f"`{name}`", _search_file(path, 1, None, re.escape(name)))
        elif isinstance(ref, dict):
            found = _attribute_owner(ref, container)
            if found is not None:
                return found
    return None


def _attribute_owner(attrs: dict, container: Any) -> Keeper | None:
    name = next((k for k, v in attrs.items() if v is container), None)
    if name is None:
        return None
    for obj in gc.get_referrers(attrs):
        if getattr(obj, "__dict__", None) is attrs:
            cls = type(obj)
            for klass in cls.__mro__:
                where = _search_class(klass, rf"self\.{re.escape(name)}")
                if where is not None:
                    return Keeper(f"`self.{name}` of `{cls.__name__}`", where)
            return Keeper(f"`{name}` of `{cls.__name__}`", None)
    return None


def _users(path: str) -> bool:
    from torchdoctor.runtime.locate import is_internal

    return not is_internal(path)


def _search_class(klass: type, target: str) -> Location | None:
    try:
        path = inspect.getsourcefile(klass)
        lines, start = inspect.getsourcelines(klass)
    except (OSError, TypeError):
        return None
    if path is None or not _users(path):
        return None
    return _search_lines(path, lines, start, target)


def _search_code(code: Any, target: str) -> Location | None:
    if code.co_name == "<module>":
        return _search_file(code.co_filename, 1, None, target)
    try:
        lines, start = inspect.getsourcelines(code)
    except (OSError, TypeError):
        return None
    return _search_lines(code.co_filename, lines, start, target)


def _search_file(path: str, start: int, end: int | None, target: str) -> Location | None:
    lines = linecache.getlines(path)
    return _search_lines(path, lines[start - 1:end], start, target)


def _search_lines(path: str, lines: list[str], start: int, target: str, pattern: str = _FILLS) -> Location | None:
    from torchdoctor.runtime.locate import display_path

    regex = re.compile(rf"(?<![\w.]){target}{pattern}")
    for offset, text in enumerate(_code_only(lines)):
        m = regex.search(text)
        if m:
            return Location(display_path(path), start + offset, m.start() + 1)
    return None


def _code_only(lines: list[str]) -> list[str]:
    """The lines with strings and comments blanked (columns kept), so a docstring never matches."""
    import io
    import tokenize

    out = [list(line) for line in lines]
    try:
        for tok in tokenize.generate_tokens(io.StringIO("".join(lines)).readline):
            if tok.type in (tokenize.STRING, tokenize.COMMENT):
                (r0, c0), (r1, c1) = tok.start, tok.end
                for r in range(r0, r1 + 1):
                    row = out[r - 1]
                    for c in range(c0 if r == r0 else 0, c1 if r == r1 else len(row)):
                        if row[c] != "\n":
                            row[c] = " "
    except (tokenize.TokenError, IndentationError, SyntaxError, IndexError):
        return [line.split("#", 1)[0] for line in lines]
    return ["".join(row) for row in out]


def _accumulator(code: Any, loss: str) -> Keeper | None:
    """``total += loss``, ``total = total + loss`` or ``kept.append(loss)`` in the function that called backward on ``loss``."""
    name = re.escape(loss)
    sums = re.compile(rf"(?<![\w.])([A-Za-z_][\w.]*)\s*(?:\+=\s*{name}\b|=\s*\1\s*\+\s*{name}\b|\.\s*(?:append|extend|insert)\s*\(\s*{name}\s*\))"
                      r"(?!\s*\.\s*(?:item|detach|cpu)\b)")
    if code.co_name == "<module>":
        lines, start = linecache.getlines(code.co_filename), 1
    else:
        try:
            lines, start = inspect.getsourcelines(code)
        except (OSError, TypeError):
            return None
    from torchdoctor.runtime.locate import display_path

    for offset, text in enumerate(_code_only(lines)):
        m = sums.search(text)
        if m:
            return Keeper(f"`{m.group(1)}`", Location(display_path(code.co_filename), start + offset, m.start() + 1))
    return None


_CO_OPTIMIZED = 0x1  # inspect.CO_OPTIMIZED: a function's frame, whose locals live outside f_locals


def frame_hint(tensor: Any) -> tuple[Any, str] | None:
    """(code, name) of the user's frame that called backward on ``tensor``, when a local names it."""
    from torchdoctor.runtime.locate import user_frame

    frame = user_frame(sys._getframe(1))
    if frame is None:
        return None
    names = frame.f_locals
    name = next((k for k, v in names.items() if v is tensor), None)
    if name is None:
        return None
    if frame.f_code.co_flags & _CO_OPTIMIZED and type(names) is dict:
        # a function's f_locals (before Python 3.13) is a snapshot the frame keeps until it is next read: it would
        # keep this loss, and its graph, alive while the loop runs. The variable itself is untouched (a snapshot
        # is only read back by a tracer, which refreshes it first); module and exec namespaces are not snapshots
        names[name] = None
    return frame.f_code, name
