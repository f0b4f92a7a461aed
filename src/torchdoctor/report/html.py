"""Self-contained HTML report of a watch session: findings and two inline SVG charts.

No script and nothing fetched from the network: the page is plain HTML and
SVG, readable offline and safe to attach to a bug report.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from torchdoctor.findings import Finding

PHASES = (("data", "#d62728", "waiting for data"), ("forward", "#1f77b4", "forward"),
          ("backward", "#ff7f0e", "backward"), ("optimizer", "#2ca02c", "optimizer"))
W, H, PAD = 760, 220, 40
MAX_BARS = 400


def render(findings: Sequence[Finding], stats: dict[str, Any]) -> str:
    steps = list(stats.get("timeline") or [])
    if len(steps) > MAX_BARS:  # keep the page light: sample evenly
        stride = -(-len(steps) // MAX_BARS)
        steps = steps[::stride]
    rows = "\n".join(_finding_row(f) for f in findings) or '<tr><td colspan="4">No problems found.</td></tr>'
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>torchdoctor run report</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;color:#222}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}}.error{{color:#b00}}.warning{{color:#a60}}
.info{{color:#06a}}code{{background:#f4f4f4}}figure{{margin:1.5em 0}}</style></head><body>
<h1>torchdoctor run report</h1>
<p>{stats.get('steps', 0)} optimizer steps, {stats.get('forward_calls', 0)} forward passes, {stats.get('batches', 0)} batches,
{len(findings)} finding{'' if len(findings) == 1 else 's'}.</p>
<h2>Findings</h2>
<table><tr><th>code</th><th>where</th><th>what</th><th>fix</th></tr>
{rows}
</table>
<h2>Time per step</h2>
<figure>{step_time_chart(steps)}<figcaption>{_legend()}</figcaption></figure>
<h2>Device memory per step</h2>
<figure>{memory_chart(steps)}</figure>
</body></html>
"""


def _finding_row(f: Finding) -> str:
    loc = f.location
    where = f"{loc.display_path}:{loc.line}" if loc else ""
    rank = f"[rank {f.rank}] " if f.rank is not None else ""
    return (f'<tr><td class="{f.severity.value}">{escape(f.code)}</td><td><code>{escape(where)}</code></td>'
            f"<td>{escape(rank + f.message)}</td><td>{escape(f.fix or '')}</td></tr>")


def _legend() -> str:
    return " ".join(f'<span style="color:{c}">&#9632;</span> {escape(label)}' for _, c, label in PHASES) + \
        ' <span style="color:#999">&#9632;</span> other'


def step_time_chart(steps: list[dict[str, Any]]) -> str:
    """Stacked bars: one per step, split into data wait, forward, backward, optimizer and the rest."""
    if not steps:
        return "<p>No optimizer steps were seen.</p>"
    top = max(s["total"] for s in steps) or 1.0
    bar = (W - 2 * PAD) / len(steps)
    parts = [_axes(f"{top * 1000:.1f} ms", "step")]
    for i, s in enumerate(steps):
        x, y = PAD + i * bar, float(H - PAD)
        known = 0.0
        for key, color, _ in PHASES:
            known += s[key]
            y = _rect(parts, x, y, bar, s[key] / top, color, f"step {s['index']}: {key} {s[key] * 1000:.2f} ms")
        _rect(parts, x, y, bar, max(0.0, s["total"] - known) / top, "#999", f"step {s['index']}: other")
    return _svg(parts)


def memory_chart(steps: list[dict[str, Any]]) -> str:
    """A line of allocated device memory at the end of each step."""
    points = [(s["index"], s["memory"]) for s in steps if s.get("memory") is not None]
    if not points:
        return "<p>No device memory readings (the run did not use a CUDA device).</p>"
    top = max(m for _, m in points) or 1
    n = max(len(points) - 1, 1)
    coords = " ".join(f"{PAD + i * (W - 2 * PAD) / n:.1f},{H - PAD - m / top * (H - 2 * PAD):.1f}" for i, (_, m) in enumerate(points))
    parts = [_axes(f"{top / 2**20:.0f} MiB", "step"),
             f'<polyline fill="none" stroke="#9467bd" stroke-width="2" points="{coords}"/>']
    return _svg(parts)


def _rect(parts: list[str], x: float, y: float, w: float, share: float, color: str, title: str) -> float:
    h = share * (H - 2 * PAD)
    if h > 0:
        parts.append(f'<rect x="{x:.1f}" y="{y - h:.1f}" width="{max(w - 1, 0.5):.1f}" height="{h:.1f}" fill="{color}">'
                     f"<title>{escape(title)}</title></rect>")
    return y - h


def _axes(top_label: str, x_label: str) -> str:
    return (f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}" stroke="#333"/>'
            f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{H - PAD}" stroke="#333"/>'
            f'<text x="{PAD}" y="{PAD - 6}" font-size="11">{escape(top_label)}</text>'
            f'<text x="{W - PAD}" y="{H - PAD + 16}" font-size="11" text-anchor="end">{escape(x_label)}</text>')


def _svg(parts: list[str]) -> str:
    return f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}">' + "".join(parts) + "</svg>"
