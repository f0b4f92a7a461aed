"""The HTML run report, read back with a real HTML parser: axes, one bar per step, legend, summary, memory, sources."""

from __future__ import annotations

import re
from pathlib import Path

import html5lib
import pytest

from torchdoctor.findings import Finding, Location
from torchdoctor.report import charts, html


def step(i: int, total: float, data: float = 0.0, memory=None, rss=None) -> dict:
    forward, backward, optimizer = 0.2 * total, 0.3 * total, 0.05 * total
    other = max(0.0, total - data - forward - backward - optimizer)
    return {"index": i, "total": total, "data": data, "forward": forward, "backward": backward,
            "optimizer": optimizer, "other": other, "memory": memory, "rss": rss}


def stats(steps: list[dict]) -> dict:
    return {"steps": len(steps), "forward_calls_audited": len(steps), "batches": len(steps), "timeline": steps, "devices": ["cpu"]}


SVG = "{http://www.w3.org/2000/svg}"


def parse(page: str):
    return html5lib.parse(page, namespaceHTMLElements=False)


def svg_charts(doc) -> dict:
    """The page's SVG charts by id (html5lib puts SVG elements in the SVG namespace)."""
    return {e.get("id"): e for e in doc.iter(f"{SVG}svg")}


def svg_all(root, tag: str) -> list:
    return list(root.iter(f"{SVG}{tag}"))


def classes(el) -> set[str]:
    return set((el.get("class") or "").split())


def find_all(root, tag: str, cls: str | None = None) -> list:
    return [e for e in root.iter(tag) if cls is None or cls in classes(e)]


def text(el) -> str:
    return "".join(el.itertext())


@pytest.fixture
def source_file(tmp_path: Path) -> Path:
    p = tmp_path / "train.py"
    p.write_text("import torch\nfor x, y in loader:\n    step(x, y)\n")
    return p


def run_page(source_file: Path, n: int = 12, rss=True) -> tuple[str, list[dict]]:
    steps = [step(1, 1.2, rss=300 << 20)] + [step(i, 0.010, data=0.004, rss=(300 << 20) + i * (1 << 20) if rss else None)
                                             for i in range(2, n + 1)]
    found = [Finding("TD606", "waiting for the next batch takes 40% of a training step", Location(str(source_file), 2, 1),
                     "raise num_workers"),
             Finding("TD404", "gradients of SGD are never zeroed", Location(str(source_file), 3, 5), "zero them")]
    return html.render(found, stats(steps)), steps


def test_page_is_self_contained_and_follows_the_readers_theme(source_file):
    page, _ = run_page(source_file)
    doc = parse(page)
    assert not find_all(doc, "script") and not find_all(doc, "link") and not find_all(doc, "img")
    assert not re.search(r"https?://", page)  # not even an xmlns: inline SVG in HTML needs none
    style = text(find_all(doc, "style")[0])
    assert "prefers-color-scheme:dark" in style.replace(" ", "") and "--bg" in style


def test_step_chart_has_one_bar_per_step_axes_with_units_and_step_numbers(source_file):
    page, steps = run_page(source_file)
    chart = svg_charts(parse(page))["step-chart"]
    bars = [g for g in svg_all(chart, "g") if "bar" in classes(g)]
    assert [int(g.get("data-step")) for g in bars] == [s["index"] for s in steps]
    assert {"ph-data", "ph-forward", "ph-backward", "ph-optimizer", "ph-other"} <= {c for g in bars for r in svg_all(g, "rect") for c in classes(r)}
    y_axis = next(g for g in svg_all(chart, "g") if classes(g) >= {"axis", "y"})
    x_axis = next(g for g in svg_all(chart, "g") if classes(g) >= {"axis", "x"})
    assert "time per step (ms)" in text(y_axis)
    assert "optimizer step" in text(x_axis)
    x_labels = [int(text(t)) for t in svg_all(x_axis, "text") if "tick" in classes(t)]
    assert x_labels[0] == 1 and x_labels[-1] == 12 and x_labels == sorted(x_labels)


def test_warm_up_is_marked_and_left_out_of_the_scale(source_file):
    page, _ = run_page(source_file)
    chart = svg_charts(parse(page))["step-chart"]
    bars = [g for g in svg_all(chart, "g") if "bar" in classes(g)]
    assert "warmup" in classes(bars[0]) and not any("warmup" in classes(g) for g in bars[1:])
    y_axis = next(g for g in svg_all(chart, "g") if classes(g) >= {"axis", "y"})
    top_tick = max(float(text(t)) for t in svg_all(y_axis, "text") if "tick" in classes(t))
    assert 10 <= top_tick < 20  # the steady steps' 10 ms fill the chart, not the 1.2 s first step
    assert any("1.2 s" in text(t) for t in svg_all(chart, "text") if "clipped" in classes(t))
    assert any("warm-up" in text(g) for g in svg_all(chart, "g") if "warmup-band" in classes(g))


def test_legend_names_every_phase_and_the_warm_up(source_file):
    page, _ = run_page(source_file)
    legend = find_all(parse(page), "ul", "legend")[0]
    assert [text(li) for li in legend.iter("li")] == ["waiting for data", "forward", "backward", "optimizer", "other",
                                                     "warm-up (not in the scale)"]


def test_summary_table_and_share_bar_with_td606_next_to_the_data_share(source_file):
    page, _ = run_page(source_file)
    doc = parse(page)
    table = find_all(doc, "table", "summary")[0]
    rows = {next(iter(classes(tr))): tr for tr in table.find("tbody").iter("tr")}
    assert list(rows) == ["row-data", "row-forward", "row-backward", "row-optimizer", "row-other"]
    cells = [text(td) for td in rows["row-data"].iter("td")]
    assert cells[2] == "40.0%" and "TD606" in cells[4]  # 4 ms of each 10 ms steady step
    assert all("TD606" not in text(tr) for key, tr in rows.items() if key != "row-data")
    link = next(a for a in rows["row-data"].iter("a"))
    assert link.get("href") == "#finding-1" and any(e.get("id") == "finding-1" for e in doc.iter("article"))
    spans = list(find_all(doc, "div", "sharebar")[0].iter("span"))
    widths = [float(re.search(r"width:([\d.]+)%", s.get("style")).group(1)) for s in spans]
    assert abs(sum(widths) - 100) < 0.1 and widths[0] == pytest.approx(40.0, abs=0.1)


def test_each_finding_shows_its_source_line(source_file):
    page, _ = run_page(source_file)
    cards = find_all(parse(page), "article", "finding")
    assert [[text(e) for e in c.find("header")][:2] for c in cards] == [["warning", "TD606"], ["error", "TD404"]]
    sources = [text(c.find("pre")) for c in cards]
    assert sources == ["2for x, y in loader:", "3    step(x, y)"]


def test_host_rss_on_the_cpu_and_device_memory_on_cuda(source_file):
    page, _ = run_page(source_file)
    svgs = svg_charts(parse(page))
    assert "rss-chart" in svgs and "memory-chart" not in svgs
    assert "host memory (resident set) (MiB)" in text(svgs["rss-chart"])
    assert len(svg_all(svgs["rss-chart"], "circle")) == 12
    cuda = [step(i, 0.01, memory=(100 + i) << 20, rss=300 << 20) for i in range(1, 9)]
    svgs = svg_charts(parse(html.render([], stats(cuda))))
    assert "memory-chart" in svgs and "device memory allocated (MiB)" in text(svgs["memory-chart"])


def test_no_steps_and_no_findings_still_make_a_page():
    doc = parse(html.render([], {"steps": 0, "timeline": []}))
    assert "No problems found." in text(doc.find("body")) and not svg_charts(doc)


def test_a_long_run_is_drawn_in_a_bounded_number_of_bars():
    steps = [step(i, 0.01) for i in range(1, 2001)]
    chart = charts.step_time_chart(steps, 0)
    bars = re.findall(r'<g class="bar[" ]', chart)
    assert len(bars) <= charts.MAX_BARS and "steps 1-7 (mean)" in chart


@pytest.mark.parametrize("totals, warm", [
    ([5.0] + [1.0] * 9, 1), ([5.0, 4.0] + [1.0] * 20, 2), ([1.0] * 10, 0), ([9.0, 1.0, 1.0], 0), ([1.5] + [1.0] * 9, 0),
])
def test_warmup_steps(totals, warm):
    assert charts.warmup_steps(totals) == warm


def test_ticks_are_round_numbers():
    assert charts.nice_ticks(0, 7.3) == [0, 2, 4, 6, 8]
    assert charts.nice_ticks(0, 0.42) == [0, 0.1, 0.2, 0.3, 0.4, 0.5]
    assert charts.step_ticks(1, 16) == [1, 2, 4, 6, 8, 10, 12, 14, 16]
    assert charts.step_ticks(1, 500)[:3] == [1, 50, 100]


def x_tick_labels(chart) -> list[int]:
    x_axis = next(g for g in svg_all(chart, "g") if classes(g) >= {"axis", "x"})
    return [int(text(t)) for t in svg_all(x_axis, "text") if "tick" in classes(t)]


def test_a_lone_stall_is_clipped_instead_of_flattening_the_other_steps():
    steps = [step(1, 4.0)] + [step(i, 0.135 if i == 5 else 0.001) for i in range(2, 21)]
    chart = svg_charts(parse(html.render([], stats(steps))))["step-chart"]
    y_axis = next(g for g in svg_all(chart, "g") if classes(g) >= {"axis", "y"})
    assert "time per step (ms)" in text(y_axis)
    top_tick = max(float(text(t)) for t in svg_all(y_axis, "text") if "tick" in classes(t))
    assert 1 <= top_tick <= 2  # the 1 ms steps fill the chart, not the 135 ms stall
    labels = [text(t) for t in svg_all(chart, "text") if "clipped" in classes(t)]
    assert any("4 s" in t for t in labels) and any("135 ms" in t for t in labels)
    assert "1 slower bar drawn clipped" in chart.get("aria-label")


def test_a_steadily_varying_run_keeps_its_tallest_step_in_the_scale():
    steps = [step(i, 0.010 + 0.001 * (i % 5)) for i in range(1, 21)]
    chart = svg_charts(parse(html.render([], stats(steps))))["step-chart"]
    assert not [t for t in svg_all(chart, "text") if "clipped" in classes(t)]


def test_memory_points_sit_under_their_steps_bars(source_file):
    page, _ = run_page(source_file)
    svgs = svg_charts(parse(page))
    bar_x = {}
    for g in svg_all(svgs["step-chart"], "g"):
        if "bar" in classes(g):
            r = svg_all(g, "rect")[0]
            bar_x[int(g.get("data-step"))] = float(r.get("x")) + float(r.get("width")) / 2
    points = {int(re.search(r"step (\d+)", text(c)).group(1)): float(c.get("cx")) for c in svg_all(svgs["rss-chart"], "circle")}
    assert points.keys() == bar_x.keys()
    assert all(abs(points[k] - bar_x[k]) < 0.2 for k in points)


def test_a_single_step_is_one_narrow_bar_not_a_slab():
    page = html.render([], stats([step(1, 0.8, data=0.1, rss=300 << 20)]))
    chart = svg_charts(parse(page))["step-chart"]
    bars = [g for g in svg_all(chart, "g") if "bar" in classes(g)]
    assert len(bars) == 1 and x_tick_labels(chart) == [1]
    assert all(float(r.get("width")) <= 48 for r in svg_all(bars[0], "rect"))
    assert "whole step" in text(find_all(parse(page), "table", "summary")[0])


def test_a_long_run_stays_small_with_round_step_numbers():
    steps = [step(1, 2.0, rss=300 << 20)] + [step(i, 0.01, data=0.005, rss=(300 << 20) + i * 4096 if i % 7 == 0 else None)
                                            for i in range(2, 2501)]
    page = html.render([], stats(steps))
    assert len(page.encode()) < 250_000
    svgs = svg_charts(parse(page))
    assert x_tick_labels(svgs["step-chart"]) == [1, 500, 1000, 1500, 2000, 2500]
    assert x_tick_labels(svgs["rss-chart"]) == [1, 500, 1000, 1500, 2000, 2500]
    assert len([g for g in svg_all(svgs["step-chart"], "g") if "bar" in classes(g)]) <= charts.MAX_BARS + 5
    assert not svg_all(svgs["rss-chart"], "circle")  # 357 readings: a line, no dots
