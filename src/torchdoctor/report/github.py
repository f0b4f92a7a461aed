"""GitHub Actions workflow annotations, one ``::error file=...::message`` line a finding."""

from __future__ import annotations

from collections.abc import Sequence

from torchdoctor.findings import Finding, Severity

_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def _escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def render(findings: Sequence[Finding]) -> str:
    lines = []
    for f in findings:
        props = []
        loc = f.location
        if loc is not None and loc.cell is not None:  # a notebook: its JSON line; the cell is named in the message
            props.append(f"file={_escape_property(loc.path)}")
            if loc.file_line is not None:
                props.append(f"line={loc.file_line}")
        elif loc is not None:
            props.append(f"file={_escape_property(loc.path)}")
            props.append(f"line={loc.line}")
            props.append(f"col={loc.column}")
            if loc.end_line is not None:
                props.append(f"endLine={loc.end_line}")
            if loc.end_column is not None and loc.end_line == loc.line:
                props.append(f"endColumn={loc.end_column}")
        props.append(f"title={_escape_property(f.code)}")
        msg = f.message if not f.fix else f"{f.message}\nfix: {f.fix}"
        if loc is not None and loc.cell is not None:
            msg = f"cell {loc.cell}, line {loc.line}, column {loc.column}: {msg}"
        lines.append(f"::{_LEVEL[f.severity]} {','.join(props)}::{_escape_data(msg)}")
    return "\n".join(lines) + ("\n" if lines else "")
