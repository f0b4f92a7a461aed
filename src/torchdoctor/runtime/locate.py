"""Where the user's code is: the first stack frame outside torch, torchdoctor, installed packages and Python's own."""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Callable
from types import FrameType

from torchdoctor.findings import Location

_torch_dir: str | None = None
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_RUNNERS = ("runpy.py", "<frozen runpy>", "contextlib.py", "functools.py", "warnings.py", "<frozen importlib._bootstrap>")
_cache: dict[str, bool] = {}
_library_dirs: tuple[str, ...] | None = None
_locations: dict[tuple[object, int], Location] = {}


def _torch_root() -> str:
    global _torch_dir
    if _torch_dir is None:
        import torch

        _torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    return _torch_dir


def _libraries() -> tuple[str, ...]:
    """Folders of installed packages and of Python's standard library (with a trailing separator).

    A framework (Lightning, Accelerate, transformers' Trainer) calls backward and
    the optimizer from its own files; the user's line is further out.
    """
    global _library_dirs
    if _library_dirs is None:
        import site
        import sysconfig

        found = {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
        try:
            found.update(site.getsitepackages())
            found.add(site.getusersitepackages())
        except AttributeError:  # a virtualenv's old site.py
            pass
        _library_dirs = tuple(sorted(os.path.abspath(d) + os.sep for d in found if d))
    return _library_dirs


def is_internal(filename: str) -> bool:
    """True for files that are not the user's: torch, torchdoctor, installed packages, the standard library."""
    hit = _cache.get(filename)
    if hit is None:
        path = os.path.abspath(filename) if not filename.startswith("<") else filename
        hit = (
            path.startswith(_torch_root() + os.sep)
            or path.startswith(_OWN_DIR + os.sep)
            or os.path.basename(path) in _RUNNERS
            or path in _RUNNERS
            or path.startswith(_libraries())
        )
        _cache[filename] = hit
    return hit


_OWN_RUNNERS = ("runpy.py", "<frozen runpy>")


def is_own(filename: str) -> bool:
    """torchdoctor's own files and the runner that starts a script: frames a traceback need not show."""
    return filename.startswith(_OWN_DIR + os.sep) or os.path.basename(filename) in _OWN_RUNNERS or filename in _OWN_RUNNERS


def user_frame(start: FrameType | None = None) -> FrameType | None:
    frame = start if start is not None else sys._getframe(1)
    while frame is not None and is_internal(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def frame_location(frame: FrameType | None) -> Location | None:
    """The frame's line and column; cached by instruction, since a sync site recurs every step."""
    if frame is None:
        return None
    code = frame.f_code
    key = (code, frame.f_lasti)
    loc = _locations.get(key)
    if loc is None:
        line, column = frame.f_lineno, 1
        try:
            pos = next(itertools.islice(code.co_positions(), frame.f_lasti // 2, None))
            if pos[0] == line and pos[2] is not None:
                column = pos[2] + 1
        except (AttributeError, StopIteration):
            pass
        loc = Location(path=display_path(code.co_filename), line=line, column=column)
        if len(_locations) < 10_000:
            _locations[key] = loc
    return loc


_PLUMBING = ("__call__", "_call_impl", "_wrapped_call_impl")  # how a module call is made, not who made it


def called_by_library(frame: FrameType | None) -> bool:
    """Whether torch itself made the module call that ``frame`` is inside (swa_utils.update_bn, jit.trace).

    torchdoctor's frames and the plumbing of a module call (``__call__``, also
    torch.compile's and a user's override) are looked through.
    """
    while frame is not None:
        code = frame.f_code
        if not (code.co_name in _PLUMBING or code.co_filename.startswith(_OWN_DIR + os.sep)):
            return os.path.abspath(code.co_filename).startswith(_torch_root() + os.sep)
        frame = frame.f_back
    return False


def user_location() -> Location | None:
    """The user's source line that led to the current call."""
    return frame_location(user_frame(sys._getframe(1)))


_cell_names: Callable[[str], str | None] | None = None  # set by the IPython magic: a cell's code name -> "In[5]"
_shown_as: dict[str, str] = {}  # "In[5]" -> the cell's code name, where linecache holds its source


def set_cell_names(names: Callable[[str], str | None] | None) -> None:
    global _cell_names
    _cell_names = names
    _locations.clear()  # locations made before name the cells differently


def source_file(path: str) -> str:
    """The file (or linecache name) behind a displayed path: a cell's code name for ``In[5]``."""
    return _shown_as.get(path, path)


def display_path(filename: str) -> str:
    if _cell_names is not None:
        name = _cell_names(filename)
        if name is not None:
            _shown_as[name] = filename
            return name
    if filename.startswith("<"):
        return filename
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel


def traceback_user_frames(tb) -> list[FrameType]:  # type: ignore[no-untyped-def]
    """The user's frames in a traceback, outermost first."""
    frames = []
    while tb is not None:
        if not is_internal(tb.tb_frame.f_code.co_filename):
            frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames


def tb_location(tb, frame: FrameType) -> Location | None:  # type: ignore[no-untyped-def]
    """The line a traceback records for ``frame`` (f_lineno of a finished frame may move)."""
    while tb is not None:
        if tb.tb_frame is frame:
            return Location(path=display_path(frame.f_code.co_filename), line=tb.tb_lineno)
        tb = tb.tb_next
    return frame_location(frame)
