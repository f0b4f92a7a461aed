"""Which files a run checks: the paths given, folders walked, excludes and virtual environments skipped."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable

from torchdoctor.record import Record
from torchdoctor.config import Settings, patterns, relative_to

__all__ = ["Discovery", "discover", "is_excluded", "SOURCE_SUFFIXES"]

SOURCE_SUFFIXES = (".py", ".ipynb")
# A folder holding one of these is an environment (venv, virtualenv, conda), not the user's code.
_ENV_MARKERS = ("pyvenv.cfg", "conda-meta")


class Discovery(Record):
    __slots__ = ("files", "errors")

    def __init__(self, files: list[str] | None = None, errors: list[tuple[str, str]] | None = None) -> None:
        self.files: list[str] = [] if files is None else files
        self.errors: list[tuple[str, str]] = [] if errors is None else errors  # (path, message)


def describe_os_error(exc: OSError) -> str:
    """A short, plain reason for an OSError (no errno numbers, no Python class names)."""
    if exc.errno == errno.ELOOP:
        return "symbolic link loop"
    if exc.errno == errno.ENOENT:
        return "no such file or directory"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return exc.strerror or str(exc)


def is_excluded(path: str, settings: Settings) -> bool:
    """Whether a path (a file or folder, as given) matches an exclude pattern."""
    return patterns(settings.all_excludes).match(relative_to(path, settings.root), os.path.isdir(path))


def discover(paths: Iterable[str], settings: Settings, *, force_exclude: bool = False) -> Discovery:
    """Files to check, sorted, each once; unusable paths become (path, message) errors.

    A path given explicitly is checked whatever its suffix, and excludes apply
    to it only with ``force_exclude`` (as pre-commit passes every staged file).
    A folder with no Python file to check is an error naming it: "All checks
    passed" on a folder holding nothing to check would be a false reassurance.
    """
    out = Discovery()
    seen: set[str] = set()
    for given in paths:
        path = os.path.normpath(given)
        if force_exclude and is_excluded(path, settings):
            continue
        try:
            st = os.stat(path)
        except OSError as exc:
            out.errors.append((path, describe_os_error(exc)))
            continue
        if stat.S_ISDIR(st.st_mode):
            skipped: list[str] = []
            if _walk(path, settings, out, seen, skipped) == 0:
                out.errors.append((path, _nothing_found(skipped)))
        elif _add_once(path, seen):
            out.files.append(path)
    out.files.sort()
    out.errors.sort()
    return out


def _add_once(path: str, seen: set[str]) -> bool:
    key = os.path.abspath(path)
    if key in seen:
        return False
    seen.add(key)
    return True


def _nothing_found(skipped: list[str]) -> str:
    message = "no Python files (.py, .ipynb) to check in this folder"
    if skipped:
        shown = ", ".join(skipped[:3]) + (", ..." if len(skipped) > 3 else "")
        message += f" (excluded: {shown})"
    return message


def _walk(top: str, settings: Settings, out: Discovery, seen: set[str], skipped: list[str]) -> int:
    """Depth-first, names sorted; folder symlinks followed once (a link loop is visited once).

    Returns how many source files it met (each counted even if another path found it
    first); what the excludes skipped is appended to ``skipped``.
    """
    excludes = patterns(settings.all_excludes)
    visited: set[str] = set()
    found = 0
    stack = [top]
    while stack:
        folder = stack.pop()
        real = os.path.realpath(folder)
        if real in visited:
            continue
        visited.add(real)
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            out.errors.append((folder, f"cannot read folder: {describe_os_error(exc)}"))
            continue
        subfolders = []
        for entry in entries:
            name = entry.name
            path = os.path.normpath(os.path.join(folder, name))
            try:
                is_dir = entry.is_dir()  # follows symlinks
                is_file = not is_dir and entry.is_file()
            except OSError as exc:
                is_dir = is_file = False
                if name.endswith(SOURCE_SUFFIXES):
                    out.errors.append((path, describe_os_error(exc)))
                continue
            # Plain names (the built-in list) by the entry's name; the folders above were checked on the way down.
            if name in excludes.names or (
                    excludes.has_rest and excludes.match_rest(relative_to(path, settings.root), is_dir)):
                skipped.append(path)
                continue
            if is_dir:
                if not any(os.path.exists(os.path.join(path, m)) for m in _ENV_MARKERS):
                    subfolders.append(path)
                else:
                    skipped.append(path)  # a virtual environment
            elif name.endswith(SOURCE_SUFFIXES):
                found += is_file
                if is_file and _add_once(path, seen):
                    out.files.append(path)
                elif not is_file and entry.is_symlink() and not os.path.exists(path):
                    out.errors.append((path, _broken_link_reason(path)))
        stack.extend(reversed(subfolders))
    return found


def _broken_link_reason(path: str) -> str:
    try:
        os.stat(path)
    except OSError as exc:
        return describe_os_error(exc) if exc.errno == errno.ELOOP else "broken symbolic link"
    return "not a regular file"
