"""Self-contained HTML report of a watch session: findings with their source lines, where the time goes, charts.

No script and nothing fetched from the network: the page is plain HTML, CSS
and inline SVG, readable offline and safe to attach to a bug report. It
follows the reader's light or dark theme (``prefers-color-scheme``).
"""

from __future__ import annotations

import linecache
import statistics
from collections.abc import Callable, Sequence
from html import escape
from typing import Any

from torchdoctor.findings import Finding
from torchdoctor.report.charts import PHASES, fmt_time, memory_chart, step_time_chart, warmup_steps

SourceLookup = Callable[[str, int], "str | None"]

# Which findings explain a phase's share of the step (shown next to it in the summary).
EXPLAINS = {"data": ("TD606", "TD304", "TD305"), "forward": ("TD608",), "backward": (), "optimizer": (),
            "other": ("TD603", "TD602")}
MEMORY_CODES = ("TD607", "TD609", "TD405")

CSS = """
:root{color-scheme:light dark;--bg:#ffffff;--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--panel:#f6f8fa;
--grid:#e6eaef;--data:#d1242f;--forward:#0969da;--backward:#bc4c00;--optimizer:#1a7f37;--other:#8c959f;
--mem:#8250df;--warm:rgba(154,103,0,.10);--warm-fg:#9a6700;--error:#d1242f;--warning:#9a6700;--info:#0969da}
@media (prefers-color-scheme:dark){:root{--bg:#0d1117;--fg:#e6edf3;--muted:#9198a1;--line:#3d444d;--panel:#151b23;
--grid:#262c36;--data:#ff7b72;--forward:#58a6ff;--backward:#f0883e;--optimizer:#3fb950;--other:#8b949e;
--mem:#bc8cff;--warm:rgba(210,153,34,.16);--warm-fg:#d29922;--error:#ff7b72;--warning:#d29922;--info:#58a6ff}}
*{box-sizing:border-box}body{margin:0;padding:2rem;background:var(--bg);color:var(--fg);
font:15px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1040px;margin:0 auto}
a{color:var(--info)}
h1{font-size:1.6rem;margin:0 0 .3rem}h2{font-size:1.2rem;margin:2rem 0 .6rem;border-bottom:1px solid var(--line);padding-bottom:.3rem}
.muted,.note,figcaption{color:var(--muted)}code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.9em}
.finding{border:1px solid var(--line);border-left:4px solid var(--info);border-radius:6px;padding:.6rem .9rem;margin:.7rem 0;background:var(--panel)}
.finding.error{border-left-color:var(--error)}.finding.warning{border-left-color:var(--warning)}
.finding header{display:flex;gap:.6rem;align-items:baseline;flex-wrap:wrap}.finding p{margin:.35rem 0}
.badge{font-size:.75rem;font-weight:600;text-transform:uppercase;letter-spacing:.03em}
.badge.error{color:var(--error)}.badge.warning{color:var(--warning)}.badge.info{color:var(--info)}
.code{font-weight:700}.where{color:var(--muted)}
pre.source{margin:.4rem 0;padding:.4rem .6rem;background:var(--bg);border:1px solid var(--line);border-radius:4px;overflow-x:auto}
pre.source .ln{color:var(--muted);user-select:none;margin-right:1rem}.fix{color:var(--muted)}
table{border-collapse:collapse;width:100%}td:first-child{white-space:nowrap}th,td{text-align:left;padding:.35rem .6rem;border-bottom:1px solid var(--line);vertical-align:top}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.swatch{display:inline-block;width:.8rem;height:.8rem;border-radius:2px;margin-right:.45rem;vertical-align:-1px}
.sharebar{display:flex;height:1.6rem;border-radius:4px;overflow:hidden;margin:.8rem 0;border:1px solid var(--line)}
.sharebar span{display:block;height:100%}
.legend{list-style:none;display:flex;flex-wrap:wrap;gap:1.2rem;padding:0;margin:.4rem 0}
.legend .warm{background:var(--warm);border:1px dashed var(--warm-fg)}
figure{margin:0}svg.chart{width:100%;height:auto;display:block}
svg .grid{stroke:var(--grid)}svg .axis-line,svg .tick-mark{stroke:var(--muted)}
svg text{fill:var(--fg);font-size:12px}svg .tick{fill:var(--muted)}svg .axis-title{font-size:13px}
svg .warmup-band rect{fill:var(--warm)}svg .warmup-band line{stroke:var(--warm-fg)}svg .warmup-band text,svg text.clipped{fill:var(--warm-fg);font-size:12px}svg .clipped-mark{stroke:var(--fg);stroke-width:2;stroke-dasharray:3 2}
svg .bar.warmup rect{opacity:.55}svg .mem-line{fill:none;stroke:var(--mem);stroke-width:2}svg .mem-point{fill:var(--mem)}
""" + "".join(f".ph-{k}{{fill:var(--{k});background:var(--{k})}}" for k, _ in PHASES)


def render(findings: Sequence[Finding], stats: dict[str, Any], *, source: SourceLookup | None = None) -> str:
    """The page. ``source(path, line)`` gives a finding's source line (default: read from the file)."""
    lookup = source or _read_line
    steps = list(stats.get("timeline") or [])
    warm = warmup_steps([s["total"] for s in steps])
    ids = {id(f): f"finding-{i}" for i, f in enumerate(findings, 1)}
    memory_key = "memory" if any(s.get("memory") is not None for s in steps) else "rss"
    memory = memory_chart(steps, warm, memory_key)
    mem_title = "Device memory per step" if memory_key == "memory" else "Host memory (RSS) per step"
    mem_note = ("Allocated device memory at the end of each step." if memory_key == "memory" else
                "No device memory readings (the run did not use a CUDA device): the host process's resident memory instead, "
                "sampled rather than read at every step (each reading is a system call).")
    if not memory:
        mem_note = "No optimizer steps were seen, so there are no memory readings per step." if not steps else \
            "No memory readings were taken."
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<meta name="color-scheme" content="light dark"><title>torchdoctor run report</title><style>{CSS}</style></head><body>
<header><h1>torchdoctor run report</h1>{_headline(findings, stats, steps, warm)}</header>
<section id="findings"><h2>Findings ({len(findings)})</h2>
{"".join(_finding(f, ids[id(f)], lookup) for f in findings) or '<p class="note">No problems found.</p>'}
</section>
<section id="summary"><h2>Where the time goes</h2>
{_summary(findings, steps, warm, ids)}
</section>
<section id="steps"><h2>Time per step</h2>
{f"<figure>{step_time_chart(steps, warm)}<figcaption>{_legend(warm)}</figcaption></figure>" if steps else step_time_chart(steps, warm)}
</section>
<section id="memory"><h2>{mem_title}</h2>
<p class="note">{escape(mem_note)}{_memory_findings(findings, ids)}</p>
{f"<figure>{memory}</figure>" if memory else ""}
</section>
</body></html>
"""


def _read_line(path: str, line: int) -> str | None:
    text = linecache.getline(path, line)
    return text.rstrip("\n") if text else None


def _headline(findings: Sequence[Finding], stats: dict[str, Any], steps: list[dict[str, Any]], warm: int) -> str:
    shown = (("steps", "optimizer step", "optimizer steps"), ("forward_calls_audited", "forward pass", "forward passes"),
             ("batches", "batch", "batches"))
    if stats.get("sampled"):  # forward passes are counted on the audited steps only
        shown = shown[::2]
    counts = ", ".join(_plural(stats.get(key, 0), one, many) for key, one, many in shown)
    devices = stats.get("devices") or []
    on = f" on {', '.join(devices)}" if devices else ""
    steady = [s["total"] for s in steps[warm:]]
    typical = f"; a steady step takes {fmt_time(statistics.median(steady))} (median)" if steady else ""
    warmed = f", after {warm} warm-up step{'s' if warm != 1 else ''}" if warm else ""
    n = len(findings)
    return (f'<p class="muted">Watched {escape(counts)}{escape(on)}{escape(typical)}{escape(warmed)}. '
            f"{n} finding{'' if n == 1 else 's'}.</p>")


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _finding(f: Finding, ident: str, lookup: SourceLookup) -> str:
    loc = f.location
    where = f"{loc.display_path}:{loc.line}:{loc.column}" if loc else "(no source location)"
    rank = f"[rank {f.rank}] " if f.rank is not None else ""
    line = lookup(loc.path, loc.line) if loc and loc.cell is None else None
    source = (f'<pre class="source"><span class="ln">{loc.line}</span>{escape(line)}</pre>'
              if loc is not None and line is not None else "")
    fix = f'<p class="fix">fix: {escape(f.fix)}</p>' if f.fix else ""
    sev = f.severity.value
    return (f'<article class="finding {sev}" id="{ident}"><header><span class="badge {sev}">{sev}</span>'
            f'<code class="code">{escape(f.code)}</code><code class="where">{escape(where)}</code></header>'
            f'<p class="message">{escape(rank + f.message)}</p>{source}{fix}</article>\n')


def _summary(findings: Sequence[Finding], steps: list[dict[str, Any]], warm: int, ids: dict[int, str]) -> str:
    steady = steps[warm:] or steps
    if not steady:
        return '<p class="note">No optimizer steps were seen.</p>'
    timed = [s for s in steady if s.get("timed", True)]  # long runs time the phases of sampled steps only
    sampled = len(timed) < len(steady)
    steady = timed or steady
    total = sum(s["total"] for s in steady) or 1.0
    sums = {k: sum(s[k] or 0.0 for s in steady) for k, _ in PHASES}
    span = (f"steps {steady[0]['index']}-{steady[-1]['index']}" if len(steady) > 1 else f"step {steady[0]['index']}")
    scope = f"Over {span}" + (f" (the {warm} warm-up step{'s' if warm != 1 else ''} left out)" if warm else "")
    if sampled:
        scope += (f"; steps sampled: phases timed on {len(steady)} of these steps (each of the first 64, then one in "
                  "30 or 31, fewer later, and each step after one that waited for data), the figures are theirs")
    bar = "".join(f'<span class="ph-{k}" style="width:{sums[k] / total * 100:.2f}%" title="{escape(name)} {sums[k] / total:.0%}"></span>'
                  for k, name in PHASES if sums[k] > 0)
    rows = []
    for key, name in PHASES:
        explained = [f for f in findings if f.code in EXPLAINS[key]]
        why = "; ".join(f'<a href="#{ids[id(f)]}">{escape(f.code)}</a> {escape(f.message)}' for f in explained)
        rows.append(f'<tr class="row-{key}"><td><span class="swatch ph-{key}"></span>{escape(name)}</td>'
                    f'<td class="num">{escape(fmt_time(sums[key]))}</td><td class="num">{sums[key] / total:.1%}</td>'
                    f'<td class="num">{escape(fmt_time(sums[key] / len(steady)))}</td><td class="why">{why}</td></tr>')
    return (f'<p class="note">{escape(scope)}: {escape(fmt_time(total))} in all.</p>'
            f'<div class="sharebar" role="img" aria-label="share of the step per phase">{bar}</div>'
            '<table class="summary"><thead><tr><th>phase</th><th class="num">time</th><th class="num">share</th>'
            '<th class="num">per step (mean)</th><th>explained by</th></tr></thead><tbody>' + "".join(rows) +
            f'</tbody><tfoot><tr><th>whole step</th><td class="num">{escape(fmt_time(total))}</td><td class="num">100%</td>'
            f'<td class="num">{escape(fmt_time(total / len(steady)))}</td><td></td></tr></tfoot></table>')


def _legend(warm: int) -> str:
    items = [f'<li><span class="swatch ph-{k}"></span>{escape(name)}</li>' for k, name in PHASES]
    if warm:
        items.append('<li><span class="swatch warm"></span>warm-up (not in the scale)</li>')
    return f'<ul class="legend">{"".join(items)}</ul>'


def _memory_findings(findings: Sequence[Finding], ids: dict[int, str]) -> str:
    related = [f for f in findings if f.code in MEMORY_CODES]
    return "".join(f' <a href="#{ids[id(f)]}">{escape(f.code)}</a>: {escape(f.message)}.' for f in related)
