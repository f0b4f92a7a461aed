"""Renders a session's findings and stats: text, JSON (``findings`` + ``stats``), HTML."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from torchdoctor.findings import Finding


_COUNTED = (("optimizer step", "optimizer steps"), ("forward pass", "forward passes"), ("batch", "batches"))


def _plural(n: int, word: tuple[str, str]) -> str:
    return f"{n} {word[0] if n == 1 else word[1]}"


def render(findings: Sequence[Finding], stats: dict[str, Any], fmt: str, *, color: bool = False,
           title: str = "torchdoctor run") -> str:
    if fmt == "text":
        from torchdoctor.report import text

        head = f"{title}: "
        steps = stats.get("steps")
        if steps is not None:
            # forward passes are counted on the audited steps only: said when that is every step
            counts = (steps, None if stats.get("sampled") else stats.get("forward_calls_audited", 0), stats.get("batches", 0))
            head += "watched " + ", ".join(_plural(n, word) for n, word in zip(counts, _COUNTED) if n is not None)
            if stats.get("sampled"):  # long runs time the phases of some steps only (timeline.py)
                head += f" (steps sampled: phases timed on {stats.get('timed_steps', 0)} of them)"
            head += "\n"
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
        import linecache

        from torchdoctor.report import html
        from torchdoctor.runtime.locate import source_file

        def source(path: str, line: int) -> str | None:  # notebook cells live in linecache under their code name
            text = linecache.getline(source_file(path), line)
            return text.rstrip("\n") if text else None

        return html.render(findings, stats, source=source)
    raise ValueError(f"unknown output format {fmt!r}")
