"""Runs an unmodified script or module under a watch session, as ``python script.py`` would."""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from collections.abc import Callable
from typing import Any

from torchdoctor.errors import InputError
from torchdoctor.runtime.session import WatchSession


def run_program(target: str, argv: list[str], *, as_module: bool, session: WatchSession,
                on_report: Callable[[WatchSession, BaseException | None], None]) -> int:
    """Run ``target`` with ``sys.argv = [target, *argv]``; report, then return its exit code.

    The report comes before the traceback, so that a device error is explained
    first; Ctrl-C still reports what was seen.
    """
    if not as_module and not os.path.isfile(target):
        raise InputError(f"no such script: {target}")
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(target)) if not as_module else os.getcwd())
    try:
        sys.argv = [target if not as_module else _module_file(target), *argv]
    except InputError:
        sys.path[:] = saved_path
        raise
    error: BaseException | None = None
    code = 0
    namespace: Any = None  # the script's globals, held until the session has judged (nothing freed before)
    started = False
    try:
        with session:
            started = True
            try:
                if as_module:
                    namespace = runpy.run_module(target, run_name="__main__", alter_sys=True)
                else:
                    namespace = runpy.run_path(target, run_name="__main__")
            except SystemExit as exc:
                code, namespace = _exit_code(exc), exc  # its traceback holds the script's frames
    except KeyboardInterrupt as exc:
        error, code = exc, 130
    except BaseException as exc:  # the program's own error: report, then show it as Python would
        error, code = exc, 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    if not started:  # the watch could not start (torch failed to import): nothing was run, nothing to report
        print(f"torchdoctor run: the watch could not start: {type(error).__name__}: {error}", file=sys.stderr)
        hint = _shadowing_module(error, os.path.dirname(os.path.abspath(target)) if not as_module else os.getcwd())
        if hint:
            print(f"  {hint}", file=sys.stderr)
        if error is not None:
            traceback.print_exception(type(error), error, error.__traceback__)
        return 1
    on_report(session, error)
    del namespace
    if error is not None and not isinstance(error, KeyboardInterrupt):
        print_user_traceback(error)
    elif isinstance(error, KeyboardInterrupt):
        print("KeyboardInterrupt", file=sys.stderr)
    return code


def _shadowing_module(error: BaseException | None, folder: str) -> str | None:
    """A file of the script's folder that an import took for a module of Python's own library (``timeit.py``,
    ``code.py``): the folder comes first on the path, as it does for ``python script.py``."""
    tb = error.__traceback__ if error is not None else None
    names = getattr(sys, "stdlib_module_names", frozenset())
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename
        stem = os.path.splitext(os.path.basename(path))[0]
        if os.path.dirname(os.path.abspath(path)) == folder and stem in names:
            return (f"{path} shadows Python's own `{stem}` module, which torch imports: rename it (`python` on the "
                    "script fails the same way)")
        tb = tb.tb_next
    return None


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _module_file(name: str) -> str:
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:
        raise InputError(f"cannot find module {name}: {exc}") from None
    if spec is None:
        raise InputError(f"no module named {name}")
    return spec.origin or name


def print_user_traceback(error: BaseException, file: Any = None) -> None:
    """Print ``error`` as Python would have without the auditor: its own frames left out, as pytest hides its own."""
    hide_own_frames(error)
    traceback.print_exception(type(error), error, error.__traceback__, file=file)


def hide_own_frames(error: BaseException) -> None:
    """Drop torchdoctor's frames (patches, session, launcher, runpy) from ``error``'s traceback and its causes'."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [error]
    while todo:
        exc = todo.pop()
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        exc.__traceback__ = _without_own_frames(exc.__traceback__)
        todo += [exc.__cause__, exc.__context__]


def _without_own_frames(tb: Any) -> Any:
    from types import TracebackType

    from torchdoctor.runtime.locate import is_own

    kept = []
    while tb is not None:
        if not is_own(tb.tb_frame.f_code.co_filename):
            kept.append(tb)
        tb = tb.tb_next
    out = None
    for entry in reversed(kept):
        out = TracebackType(out, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return out
