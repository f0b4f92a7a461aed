"""The pure matcher: every known message in a text, in order, one hit per error, with the user's line.

A log repeats itself: every rank prints the same error, a device-side assert
prints one line per GPU thread, a warning announces the error that follows.
Consecutive matches of one family whose extracted details agree are one hit;
a later hit equal to an earlier one is dropped by the caller.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from torchdoctor.findings import Location

if TYPE_CHECKING:
    from torchdoctor.explain.table import Family

__all__ = ["Hit", "scan", "clean"]

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_FRAME = re.compile(r'^[ \t]*(?:\[rank\d+\]:\s*)?File "(?P<path>[^"\n]+)", line (?P<line>\d+)', re.M)
_WARNING_AT = re.compile(r"(?P<path>(?:[A-Za-z]:)?[^\s:][^:\n]*\.py):(?P<line>\d+): \w*(?:Warning|Error)\b")
_TRACEBACK = "Traceback (most recent call last):"
# Frames that are not the user's: installed packages, the standard library, frozen and generated code.
_LIBRARY = re.compile(r"[\\/](?:site|dist)-packages[\\/]|[\\/]lib[\\/]python\d[\d.]*[\\/]|^<|[\\/]runpy\.py$")
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CONTEXT_LINES = 3  # lines after a match that still belong to it (wrapped messages, "NVML library version: ...")


@dataclass
class Hit:
    """One recognised error: its family, where it sits in the text, and the concrete things it names."""

    family: Family
    start: int
    end: int
    groups: dict[str, str]  # the first value of each named group
    texts: list[str] = field(default_factory=list)  # the lines of every merged match, for builders and env rules
    location: Location | None = None
    source: str | None = None  # the user's source line the traceback shows under that frame

    values: dict[str, list[str]] = field(default_factory=dict)  # every distinct value, in order (ranks of an NCCL error)

    @property
    def text(self) -> str:
        return "\n".join(self.texts)

    def get(self, name: str) -> str | None:
        return self.groups.get(name)


def clean(text: str) -> str:
    """Colour codes out, one kind of line end: logs come from terminals and Windows."""
    return _ANSI.sub("", text).replace("\r\n", "\n").replace("\r", "\n")


def scan(text: str, families: Sequence[Family]) -> list[Hit]:
    """Every match of every family, in the order they appear, repeats merged."""
    hits: list[Hit] = []
    for start, end, fam, groups, context in _candidates(text, families):
        last = hits[-1] if hits else None
        if last is not None and start < last.end:  # overlapping matches: one error, several variants
            if last.family is fam:
                _absorb(last, end, groups, context)
            continue
        if last is not None and last.family is fam and _agree(fam.merge_on, last.groups, groups):
            _absorb(last, end, groups, context)
            continue
        hits.append(Hit(fam, start, end, dict(groups), [context], values={k: [v] for k, v in groups.items()}))
    previous_end = 0
    for hit in hits:
        hit.location, hit.source = _user_frame(text, previous_end, hit.start)
        previous_end = hit.end
    return hits


def _candidates(text: str, families: Sequence[Family]) -> list[tuple[int, int, Family, dict[str, str], str]]:
    out = []
    for order, fam in enumerate(families):
        for pattern in fam.compiled:
            for m in pattern.finditer(text):
                line_start = text.rfind("\n", 0, m.start()) + 1
                own = _lines(text, line_start, m.end(), 0)
                if _is_source_line(text, line_start) or any(x.search(own) for x in fam.compiled_excludes):
                    continue
                context = _lines(text, line_start, m.end(), _CONTEXT_LINES)
                groups = {k: v for k, v in m.groupdict().items() if v is not None}
                out.append((m.start(), -m.end(), order, fam, groups, context))
    out.sort(key=lambda c: c[:3])
    return [(s, -e, fam, g, ctx) for s, e, _, fam, g, ctx in out]


def _lines(text: str, line_start: int, end: int, extra: int) -> str:
    """The lines a match sits on, and ``extra`` lines after them."""
    stop = end
    for _ in range(extra + 1):
        nxt = text.find("\n", stop)
        if nxt == -1:
            return text[line_start:].rstrip("\n")
        stop = nxt + 1
    return text[line_start:stop - 1]


def _is_source_line(text: str, line_start: int) -> bool:
    """A line printed under a traceback frame is code (torch's `raise RuntimeError("...")`), not output."""
    if line_start == 0:
        return False
    prev_start = text.rfind("\n", 0, line_start - 1) + 1
    return bool(_FRAME.match(text, prev_start, line_start))


def _agree(keys: tuple[str, ...] | None, a: dict[str, str], b: dict[str, str]) -> bool:
    return all(a[k] == v for k, v in b.items() if k in a and (keys is None or k in keys))


def _absorb(hit: Hit, end: int, groups: dict[str, str], context: str) -> None:
    hit.end = max(hit.end, end)
    for k, v in groups.items():
        hit.groups.setdefault(k, v)
        seen = hit.values.setdefault(k, [])
        if v not in seen:
            seen.append(v)
    if context not in hit.texts:
        hit.texts.append(context)


def is_library(path: str) -> bool:
    if _LIBRARY.search(path):
        return True
    absolute = os.path.abspath(path) if os.path.isabs(path) else path
    return absolute.startswith(_OWN_DIR + os.sep)


def display_path(path: str) -> str:
    """Relative to the current folder when the file is under it (as `check` prints paths)."""
    if os.path.isabs(path):
        try:
            rel = os.path.relpath(path)
        except ValueError:
            return path
        return path if rel.startswith("..") else rel
    return path


def _user_frame(text: str, floor: int, start: int) -> tuple[Location | None, str | None]:
    """The innermost frame of the user's code in the traceback (or warning) this error ends."""
    line_start = text.rfind("\n", 0, start) + 1
    warning = _WARNING_AT.match(text, line_start)
    if warning and not is_library(warning.group("path")):
        return Location(display_path(warning.group("path")), int(warning.group("line"))), None
    window_start = max(floor, text.rfind(_TRACEBACK, floor, start), start - 200_000, 0)
    found: tuple[Location | None, str | None] = (None, None)
    for frame in _FRAME.finditer(text, window_start, line_start):
        path = frame.group("path")
        if is_library(path):
            continue
        found = (Location(display_path(path), int(frame.group("line"))), _source_after(text, frame.end()))
    return found


def _source_after(text: str, pos: int) -> str | None:
    """The code line Python prints under a frame, if the log kept it."""
    nl = text.find("\n", pos)
    if nl == -1:
        return None
    end = text.find("\n", nl + 1)
    line = text[nl + 1: end if end != -1 else len(text)]
    stripped = line.strip()
    if not stripped or not line[:1].isspace() or stripped.startswith(("File ", "^", "~")) or _FRAME.match(line):
        return None
    return stripped
