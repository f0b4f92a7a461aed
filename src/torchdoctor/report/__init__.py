"""Reporters: each module renders findings to one format as ``render(findings, ...) -> str``.

Reporters never import torch. ``emit`` is the one place a report is written,
to a stream or (``--output-file``) to a file by the one writer (``_files``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import IO

from torchdoctor.errors import InputError
from torchdoctor.findings import Finding

__all__ = ["FORMATS", "render", "emit", "write_text_atomic", "describe_write_error", "use_color"]

FORMATS = ("text", "json", "sarif", "github")


def render(findings: Sequence[Finding], fmt: str, *, color: bool = False, tool_command: str = "check") -> str:
    if fmt == "text":
        from torchdoctor.report import text

        return text.render(findings, color=color)
    if fmt == "json":
        from torchdoctor.report import json as json_report

        return json_report.render(findings)
    if fmt == "sarif":
        from torchdoctor.report import sarif

        return sarif.render(findings)
    if fmt == "github":
        from torchdoctor.report import github

        return github.render(findings)
    raise ValueError(f"unknown output format {fmt!r}")


def use_color(stream: IO[str]) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (no-color.org)."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return bool(getattr(stream, "isatty", lambda: False)())


def write_text_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` by torchdoctor's one writer (torchdoctor._files.write_file).

    A regular file is replaced atomically (a reader never sees half a report);
    a device, FIFO or socket is written in place and a symlink's target is
    written, so ``-o /dev/null`` or ``-o /dev/stdout`` stay what they are.
    """
    from torchdoctor._files import write_file

    try:
        write_file(path, text.encode("utf-8"), durable=False)
    except OSError as exc:
        raise InputError(f"cannot write {path}: {describe_write_error(path, exc)}") from None


def describe_write_error(path: str, exc: OSError) -> str:
    """The reason a report path cannot be written, in words (the folder named when it is missing)."""
    import errno

    if exc.errno == errno.ENOENT:
        folder = os.path.dirname(os.path.realpath(path))
        if not os.path.isdir(folder):
            return f"directory {folder} does not exist"
    if exc.errno == errno.EISDIR:
        return "it is a directory"
    return exc.strerror or str(exc)


def emit(text: str, output_file: str | None, stream: IO[str] | None = None) -> None:
    """Write a rendered report to ``output_file`` or to ``stream`` (stdout)."""
    if output_file:
        write_text_atomic(output_file, text if text.endswith("\n") or not text else text + "\n")
        return
    out = stream if stream is not None else sys.stdout
    out.write(text)
    if text and not text.endswith("\n"):
        out.write("\n")
