"""Inline SVG charts for the HTML report: stacked time per step and memory per step, with real axes.

Pure functions of the session's per-step rows (dicts with ``index``, ``total``,
the phases, ``memory`` and ``rss``). Colours come from CSS classes, so the page's
light and dark themes apply to the charts too. Warm-up steps are drawn, marked
and left out of the scale (one slow first step would flatten all the others).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from html import escape
from typing import Any

PHASES = (("data", "waiting for data"), ("forward", "forward"), ("backward", "backward"),
          ("optimizer", "optimizer"), ("other", "other"))
W, H = 960, 320
LEFT, RIGHT, TOP, BOTTOM = 72, 16, 44, 48  # the top margin holds the warm-up label and clipped bars' times
MAX_BARS = 300
MiB = 1 << 20


def warmup_steps(totals: Sequence[float]) -> int:
    """How many leading steps are start-up, not training: each over twice the steady median.

    At most 2 steps, or a tenth of a long run (5 at most); none in runs of
    under 6 steps, where there is no steady state to compare with.
    """
    n = len(totals)
    if n < 6:
        return 0
    limit = max(2, min(5, n // 10))
    steady = statistics.median(totals[limit:])
    w = 0
    while w < limit and totals[w] > 2 * steady:
        w += 1
    return w


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]: steps of 1, 2, 2.5 or 5 times a power of ten."""
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / target
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.floor(lo / step) * step
    count = int(math.ceil((hi - first) / step - 1e-9))
    return [round(first + i * step, 12) for i in range(count + 1)]


def step_ticks(first: int, last: int, target: int = 12) -> list[int]:
    """Step numbers to label: 1, then every 1, 2, 5, 10, 20, 50... so that about ``target`` fit."""
    span = max(last - first, 1)
    every = next(m * 10 ** e for e in range(0, 9) for m in (1, 2, 5) if span / (m * 10 ** e) <= target)
    ticks = [first] + [t for t in range(every, last + 1, every) if t > first]
    return ticks


def time_unit(seconds: float) -> tuple[str, float]:
    if seconds < 1e-3:
        return "µs", 1e6
    if seconds < 1.0:
        return "ms", 1e3
    return "s", 1.0


def fmt_time(seconds: float) -> str:
    unit, scale = time_unit(seconds)
    value = seconds * scale
    return f"{value:.3g} {unit}" if value < 100 else f"{value:.0f} {unit}"


def scale_top(totals: Sequence[float]) -> float:
    """The largest step time the scale shows: the slowest steady step, unless it towers over the others.

    A lone stall (a garbage collection, a busy machine) over 3 times the 90th
    percentile would flatten every other bar, as the warm-up step did: the scale
    then stops at 1.5 times that percentile and the taller bars are drawn clipped
    with their time written above them.
    """
    ordered = sorted(totals)
    p90 = ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]
    return ordered[-1] if ordered[-1] <= 3 * p90 or p90 <= 0 else 1.5 * p90


def _bars(steps: list[dict[str, Any]], warm: int) -> list[dict[str, Any]]:
    """Warm-up steps one by one; the rest one bar a step, or averaged in runs of consecutive steps when long."""
    rest = steps[warm:]
    if len(rest) <= MAX_BARS:
        return [dict(s, first=s["index"], last=s["index"], warmup=i < warm) for i, s in enumerate(steps)]
    size = -(-len(rest) // MAX_BARS)
    out = [dict(s, first=s["index"], last=s["index"], warmup=True) for s in steps[:warm]]
    for i in range(0, len(rest), size):
        group = rest[i:i + size]
        timed = [g for g in group if g.get("timed", True)]  # sampled runs: the phases are the timed steps' means
        mean = {k: sum(g[k] for g in timed) / len(timed) if timed else None for k, _ in PHASES}
        mean["total"] = sum(g["total"] for g in group) / len(group)
        out.append(dict(mean, index=group[0]["index"], first=group[0]["index"], last=group[-1]["index"], warmup=False,
                        timed=bool(timed)))
    return out


def step_time_chart(steps: list[dict[str, Any]], warm: int) -> str:
    """Stacked bars, one per step: data wait, forward, backward, optimizer, other."""
    if not steps:
        return '<p class="note">No optimizer steps were seen, so there is no time per step to show.</p>'
    bars = _bars(steps, warm)
    steady = [b["total"] for b in bars if not b["warmup"]] or [b["total"] for b in bars]
    highest = scale_top(steady)
    unit, scale = time_unit(highest)
    ticks = nice_ticks(0.0, highest * scale)
    top = ticks[-1] / scale or 1.0
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM
    band = plot_w / len(bars)
    parts = [_grid_and_y_axis(ticks, 0.0, ticks[-1], unit, f"time per step ({unit})")]
    if warm:
        parts.append(_warmup_band(0, warm * band, warm))
    parts.append('<g class="bars" clip-path="url(#plot-clip)">')
    for i, b in enumerate(bars):
        parts.append(_bar(b, LEFT + i * band, band, top, plot_h))
    parts.append("</g>")
    parts += _clipped_labels(bars, band, top)
    parts.append(_x_axis(_step_positions(bars, band), "optimizer step"))
    clipped = sum(1 for b in bars if b["total"] > top and not b["warmup"])
    sampled = sum(1 for s in steps if not s.get("timed", True))
    title = (f"Time per optimizer step in {unit}; {len(steps)} steps" + (f", the first {warm} marked as warm-up" if warm else "")
             + (f"; steps sampled: {sampled} steps' phases not timed (their total only, drawn pale)" if sampled else "")
             + (f"; {clipped} slower bar{'s' if clipped != 1 else ''} drawn clipped at the top" if clipped else ""))
    return _svg("step-chart", title, parts)


def _step_positions(bars: list[dict[str, Any]], band: float) -> list[tuple[int, float]]:
    """Round step numbers (1, 10, 20... or 1, 500, 1000...) and where they fall, inside averaged bars too."""
    out = []
    for t in step_ticks(bars[0]["first"], bars[-1]["last"]):
        i = max(i for i, b in enumerate(bars) if b["first"] <= t)  # a gap in the numbering falls in the bar before it
        b = bars[i]
        out.append((t, LEFT + (i + min((t - b["first"] + 0.5) / (b["last"] - b["first"] + 1), 1.0)) * band))
    return out


def _clipped_labels(bars: list[dict[str, Any]], band: float, top: float) -> list[str]:
    """What a clipped bar really took, above it (the warm-up's first, then the slowest, while they fit)."""
    clipped = [i for i, b in enumerate(bars) if b["total"] > top]
    room = max(1, int((W - LEFT - RIGHT) // 64))  # a label is about 60 px wide
    keep = sorted(sorted(clipped, key=lambda i: (not bars[i]["warmup"], -bars[i]["total"]))[:room])
    out, right_edge = [], -1e9
    for i in keep:
        x = min(max(LEFT + (i + 0.5) * band, LEFT + 30), W - RIGHT - 30)  # kept inside the plot's width
        if x - 30 < right_edge:
            continue  # would overlap the previous label; its bar's tooltip still says
        right_edge = x + 30
        out.append(f'<line class="clipped-mark" x1="{LEFT + i * band + band * 0.1:.1f}" x2="{LEFT + (i + 0.9) * band:.1f}" '
                   f'y1="{TOP + 1}" y2="{TOP + 1}"/>'
                   f'<text class="clipped" x="{x:.1f}" y="{TOP - 6}" text-anchor="middle">&#8593; {escape(fmt_time(bars[i]["total"]))}</text>')
    return out


def _bar(b: dict[str, Any], x: float, band: float, top: float, plot_h: float) -> str:
    width = min(max(band * 0.8, 1.0), 48.0)  # one or two steps would otherwise fill the chart with a slab
    x0 = x + (band - width) / 2
    y = float(TOP + plot_h)
    label = f"step {b['first']}" if b["first"] == b["last"] else f"steps {b['first']}-{b['last']} (mean)"
    if not b.get("timed", True):  # a step whose phases were not timed (sampling): its total, in one colour
        h = b["total"] / top * plot_h
        return (f'<g class="bar untimed" data-step="{b["first"]}"><title>{escape(label)}: {escape(fmt_time(b["total"]))} '
                f'(phases not timed: sampled steps)</title><rect class="ph-other" x="{x0:.2f}" y="{y - h:.2f}" '
                f'width="{width:.2f}" height="{h:.2f}" opacity="0.45"/></g>')
    detail = ", ".join(f"{name} {fmt_time(b[key])}" for key, name in PHASES)
    out = [f'<g class="bar{" warmup" if b["warmup"] else ""}" data-step="{b["first"]}">'
           f"<title>{escape(label)}: {escape(fmt_time(b['total']))} ({escape(detail)})"
           f"{' - warm-up, left out of the scale' if b['warmup'] else ''}</title>"]
    for key, _ in PHASES:
        h = b[key] / top * plot_h
        if h > 0:
            y -= h
            out.append(f'<rect class="ph-{key}" x="{x0:.2f}" y="{y:.2f}" width="{width:.2f}" height="{h:.2f}"/>')
    out.append("</g>")
    return "".join(out)


def memory_chart(steps: list[dict[str, Any]], warm: int, key: str) -> str:
    """A line of memory per step: ``key`` is ``memory`` (device, allocated) or ``rss`` (host, resident)."""
    points = [(s["index"], s[key]) for s in steps if s.get(key) is not None]
    if not points:
        return ""
    lo, hi = min(m for _, m in points) / MiB, max(m for _, m in points) / MiB
    pad = max((hi - lo) * 0.1, 1.0)
    ticks = nice_ticks(max(0.0, lo - pad), hi + pad)
    first, last = steps[0]["index"], steps[-1]["index"]
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM

    def x_of(step: float) -> float:  # the middle of step's bar in the chart above, so the two line up
        return LEFT + (step - first + 0.5) / (last - first + 1) * plot_w

    def y_of(mib: float) -> float:
        return TOP + plot_h - (mib - ticks[0]) / (ticks[-1] - ticks[0]) * plot_h

    what = "device memory allocated" if key == "memory" else "host memory (resident set)"
    parts = [_grid_and_y_axis(ticks, ticks[0], ticks[-1], "MiB", f"{what} (MiB)")]
    if warm:
        parts.append(_warmup_band(0, x_of(steps[warm - 1]["index"] + 0.5) - LEFT, warm))  # ends where the bars' band ends
    coords = " ".join(f"{x_of(i):.1f},{y_of(m / MiB):.1f}" for i, m in points)
    parts.append(f'<polyline class="mem-line" points="{coords}"/>')
    if len(points) <= 60:
        parts += [f'<circle class="mem-point" cx="{x_of(i):.1f}" cy="{y_of(m / MiB):.1f}" r="2.5">'
                  f"<title>step {i}: {m / MiB:.1f} MiB</title></circle>" for i, m in points]
    ticks_x = [(t, x_of(t)) for t in step_ticks(first, last)]
    parts.append(_x_axis(ticks_x, "optimizer step"))
    return _svg(f"{key}-chart", f"{what.capitalize()} in MiB at the end of each step ({len(points)} readings)", parts)


def _grid_and_y_axis(ticks: list[float], lo: float, hi: float, unit: str, title: str) -> str:
    plot_h = H - TOP - BOTTOM
    out = ['<g class="axis y">']
    for t in ticks:
        y = TOP + plot_h - (t - lo) / ((hi - lo) or 1.0) * plot_h
        label = f"{t:g}"
        out.append(f'<line class="grid" x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
                   f'<text class="tick" x="{LEFT - 8}" y="{y + 4:.1f}" text-anchor="end">{escape(label)}</text>')
    out.append(f'<line class="axis-line" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + plot_h}"/>')
    cy = TOP + plot_h / 2
    out.append(f'<text class="axis-title" transform="translate(16 {cy:.0f}) rotate(-90)" text-anchor="middle">{escape(title)}</text>')
    out.append("</g>")
    return "".join(out)


def _x_axis(positions: list[tuple[int, float]], title: str) -> str:
    """The step axis, labelled at the given step numbers."""
    plot_h = H - TOP - BOTTOM
    base = TOP + plot_h
    out = [f'<g class="axis x"><line class="axis-line" x1="{LEFT}" x2="{W - RIGHT}" y1="{base}" y2="{base}"/>']
    for step, x in positions:
        out.append(f'<line class="tick-mark" x1="{x:.1f}" x2="{x:.1f}" y1="{base}" y2="{base + 5}"/>'
                   f'<text class="tick" x="{x:.1f}" y="{base + 18}" text-anchor="middle">{step}</text>')
    out.append(f'<text class="axis-title" x="{LEFT + (W - LEFT - RIGHT) / 2:.0f}" y="{H - 8}" text-anchor="middle">{escape(title)}</text>')
    out.append("</g>")
    return "".join(out)


def _warmup_band(x: float, width: float, warm: int) -> str:
    plot_h = H - TOP - BOTTOM
    return (f'<g class="warmup-band"><rect x="{LEFT + x:.1f}" y="{TOP}" width="{width:.1f}" height="{plot_h}"/>'
            f'<line x1="{LEFT + x:.1f}" x2="{LEFT + x + width:.1f}" y1="{TOP - 20}" y2="{TOP - 20}"/>'
            f'<text x="{LEFT + x:.1f}" y="{TOP - 26}">warm-up: {warm} step{"s" if warm != 1 else ""}, not in the scale</text></g>')


def _svg(ident: str, title: str, parts: list[str]) -> str:
    plot_h = H - TOP - BOTTOM
    clip = (f'<defs><clipPath id="plot-clip"><rect x="{LEFT}" y="{TOP}" width="{W - LEFT - RIGHT}" height="{plot_h}"/>'
            "</clipPath></defs>") if ident == "step-chart" else ""
    return (f'<svg id="{ident}" class="chart" viewBox="0 0 {W} {H}" role="img" '
            f'aria-label="{escape(title)}"><title>{escape(title)}</title>{clip}' + "".join(parts) + "</svg>")
