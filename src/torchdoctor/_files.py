"""Atomic file replacement, shared by reports, source fixes and checkpoints."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

__all__ = ["write_atomic"]


def write_atomic(path: str | os.PathLike[str], write: Callable[[IO[bytes]], Any], *,
                 mode: int | None = None, durable: bool = True) -> None:
    """Run ``write`` on a temporary file beside ``path``, then rename it over ``path``.

    A reader sees the old file or the new one, never half of one; a failure
    (or a kill) leaves the old file as it was. ``mode`` keeps a given mode
    (a fixed source file keeps its own); by default the file is as readable
    as the umask allows (unlike mkstemp's 0600). ``durable`` fsyncs the data
    before the rename and the directory after it, so the rename survives a
    power cut. Raises OSError; callers turn it into their own error.
    """
    target = Path(path)
    directory = target.parent
    tmp = directory / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        if mode is not None and hasattr(os, "fchmod"):
            os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        _fsync_dir(directory)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # Windows cannot open a directory; its rename is atomic anyway
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
