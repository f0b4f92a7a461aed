"""Finding: the one result type that every detector emits and every reporter renders."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum

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


@dataclass(frozen=True)
class Location:
    """A place in the user's code. Lines and columns are 1-based, in characters.

    ``cell`` is the 1-based code-cell number when ``path`` is a notebook; the
    line is then relative to that cell, and ``file_line`` is the line of the
    notebook file (its JSON text) that holds it, when known.
    """

    path: str
    line: int
    column: int = 1
    end_line: int | None = None
    end_column: int | None = None
    cell: int | None = None
    file_line: int | None = None

    @property
    def display_path(self) -> str:
        return f"{self.path}:cell {self.cell}" if self.cell is not None else self.path


@dataclass(frozen=True)
class Edit:
    """Replace the text between two positions (1-based line, 0-based character column)."""

    line: int
    column: int
    end_line: int
    end_column: int
    replacement: str


@dataclass(frozen=True)
class Finding:
    """One pitfall found at one place.

    ``severity`` defaults to the catalog's severity for ``code`` (a few codes,
    such as TD306, carry a different one per case). ``edits`` is non-empty only
    when the fix is mechanical; ``unsafe_fix`` marks edits that may change what
    the program does (ruff's "unsafe" fixes: applied only when asked). ``related``
    names the other codes found on the same construct, folded into this finding.
    ``rank`` tags runtime findings made by one process of a distributed run.
    """

    code: str
    message: str
    location: Location | None = None
    fix: str | None = None
    edits: tuple[Edit, ...] = ()
    severity: Severity = field(default=None)  # type: ignore[assignment]
    rank: int | None = None
    unsafe_fix: bool = False
    related: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.severity is None:
            from torchdoctor.catalog import get_rule

            object.__setattr__(self, "severity", get_rule(self.code).severity)
        elif not isinstance(self.severity, Severity):
            object.__setattr__(self, "severity", Severity(self.severity))

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
