"""JSON report: an array of objects with exactly the keys of ``finding_to_dict``.

``path`` is always a file. For a notebook, ``cell`` is the 1-based code cell
and ``line``/``column`` are inside that cell, as ruff reports them; ``cell`` is
``null`` elsewhere.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from torchdoctor.findings import Finding


def finding_to_dict(f: Finding) -> dict[str, Any]:
    loc = f.location
    message = f.message if f.rank is None else f"[rank {f.rank}] {f.message}"
    return {
        "code": f.code,
        "severity": f.severity.value,
        "message": message,
        "path": loc.path if loc else None,
        "cell": loc.cell if loc else None,
        "line": loc.line if loc else None,
        "column": loc.column if loc else None,
        "end_line": loc.end_line if loc else None,
        "end_column": loc.end_column if loc else None,
        "fix": f.fix,
        "fixable": f.fixable,
        "unsafe_fix": f.unsafe_fixable,
        "related": list(f.related),
    }


def render(findings: Sequence[Finding]) -> str:
    return json.dumps([finding_to_dict(f) for f in findings], indent=2) + "\n"
