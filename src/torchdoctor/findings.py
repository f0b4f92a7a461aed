"""Finding: the one result type that every detector emits and every reporter renders."""

from __future__ import annotations

from enum import Enum

from torchdoctor.record import FrozenRecord, replace

__all__ = ["Severity", "Location", "Edit", "Finding", "sort_findings"]


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        """0 for the most severe, so that sorting by rank puts errors first."""
        return _RANK[self]


_RANK = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


class Location(FrozenRecord):
    """A place in the user's code. Lines and columns are 1-based, in characters.

    ``cell`` is the 1-based code-cell number when ``path`` is a notebook; the
    line is then relative to that cell, and ``file_line`` is the line of the
    notebook file (its JSON text) that holds it, when known.
    """

    __slots__ = ("path", "line", "column", "end_line", "end_column", "cell", "file_line")
    path: str
    line: int
    column: int
    end_line: int | None
    end_column: int | None
    cell: int | None
    file_line: int | None

    def __init__(self, path: str, line: int, column: int = 1, end_line: int | None = None,
                 end_column: int | None = None, cell: int | None = None, file_line: int | None = None) -> None:
        self._fill(path, line, column, end_line, end_column, cell, file_line)

    @property
    def display_path(self) -> str:
        return f"{self.path}:cell {self.cell}" if self.cell is not None else self.path


class Edit(FrozenRecord):
    """Replace the text between two positions (1-based line, 0-based character column)."""

    __slots__ = ("line", "column", "end_line", "end_column", "replacement")
    line: int
    column: int
    end_line: int
    end_column: int
    replacement: str

    def __init__(self, line: int, column: int, end_line: int, end_column: int, replacement: str) -> None:
        self._fill(line, column, end_line, end_column, replacement)


class Finding(FrozenRecord):
    """One pitfall found at one place.

    ``severity`` defaults to the catalog's severity for ``code`` (a few codes,
    such as TD306, carry a different one per case). ``edits`` is non-empty only
    when the fix is mechanical; ``unsafe_fix`` marks edits that may change what
    the program does (ruff's "unsafe" fixes: applied only when asked). ``related``
    names the other codes found on the same construct, folded into this finding.
    ``rank`` tags runtime findings made by one process of a distributed run.
    """

    __slots__ = ("code", "message", "location", "fix", "edits", "severity", "rank", "unsafe_fix", "related")
    code: str
    message: str
    location: Location | None
    fix: str | None
    edits: tuple[Edit, ...]
    severity: Severity
    rank: int | None
    unsafe_fix: bool
    related: tuple[str, ...]

    def __init__(self, code: str, message: str, location: Location | None = None, fix: str | None = None,
                 edits: tuple[Edit, ...] = (), severity: Severity | str | None = None, rank: int | None = None,
                 unsafe_fix: bool = False, related: tuple[str, ...] = ()) -> None:
        if severity is None:
            from torchdoctor.catalog import get_rule

            severity = get_rule(code).severity
        elif not isinstance(severity, Severity):
            severity = Severity(severity)
        self._fill(code, message, location, fix, edits, severity, rank, unsafe_fix, related)

    @property
    def fixable(self) -> bool:
        """A safe fix exists (``--fix`` applies it)."""
        return bool(self.edits) and not self.unsafe_fix

    @property
    def unsafe_fixable(self) -> bool:
        """Only an unsafe fix exists (``--fix --unsafe-fixes`` applies it)."""
        return bool(self.edits) and self.unsafe_fix

    def with_rank(self, rank: int) -> Finding:
        return replace(self, rank=rank)


def _key(f: Finding) -> tuple:
    loc = f.location
    if loc is None:
        return ("", 0, 0, 0, f.severity.rank, f.code, f.message)
    return (loc.path, loc.cell or 0, loc.line, loc.column, f.severity.rank, f.code, f.message)


def sort_findings(findings: list[Finding] | tuple[Finding, ...]) -> list[Finding]:
    """A stable, deterministic order: by file, position, then severity and code."""
    return sorted(findings, key=_key)
