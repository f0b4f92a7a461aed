"""Renders a session's findings and stats: text, JSON (``findings`` + ``stats``), HTML."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from torchdoctor.findings import Finding


def render(findings: Sequence[Finding], stats: dict[str, Any], fmt: str, *, color: bool = False) -> str:
    if fmt == "text":
        from torchdoctor.report import text

        head = "torchdoctor run: "
        steps = stats.get("steps")
        if steps is not None:
            head += f"watched {steps} optimizer steps, {stats.get('forward_calls', 0)} forward passes, {stats.get('batches', 0)} batches\n"
        return head + text.render(findings, color=color)
    if fmt == "json":
        from torchdoctor.report.json import finding_to_dict

        rows = []
        for f in findings:
            row = finding_to_dict(f)
            row["rank"] = f.rank
            rows.append(row)
        return json.dumps({"findings": rows, "stats": stats}, indent=2) + "\n"
    if fmt == "html":
        from torchdoctor.report import html

        return html.render(findings, stats)
    raise ValueError(f"unknown output format {fmt!r}")
