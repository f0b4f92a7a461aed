"""Long runs time the phases of sampled steps only (timeline.py): every step is still counted with its total time,
the shares come from the timed steps, a slow input pipeline is followed step by step, and the reports say so."""

from __future__ import annotations

import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import torchdoctor
from torchdoctor.runtime.timeline import AUDIT_GAPS, AUDITS_PER_PHASE, TIMED_FIRST, Timeline, audit_gap


def _train(steps: int, loader=None):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = loader if loader is not None else [(torch.randn(8, 4), torch.randint(0, 2, (8,))) for _ in range(steps)]
    with torchdoctor.watch(environment=False) as s:
        for x, y in batches:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    return s


def test_every_step_counted_phases_timed_on_sampled_steps():
    s = _train(500)
    rows = s.stats["timeline"]
    assert s.stats["steps"] == len(rows) == 500
    assert all(r["total"] > 0 for r in rows)  # every step keeps its total time
    timed = [r["index"] for r in rows if r["timed"]]
    audits, step = [], TIMED_FIRST
    while (step := step + audit_gap(len(audits))) <= 500:
        audits.append(step)
    (first, second), later = AUDIT_GAPS[0], AUDIT_GAPS[1]
    assert all(sum(gaps) % d for gaps in AUDIT_GAPS for d in range(2, sum(gaps)))  # prime cycles
    assert audits[:3] == [TIMED_FIRST + first, TIMED_FIRST + first + second, TIMED_FIRST + 2 * first + second]
    dense = audits[AUDITS_PER_PHASE - 1]  # then sparser: the gaps in turn again
    assert audits[AUDITS_PER_PHASE:AUDITS_PER_PHASE + 2] == [dense + later[0], dense + sum(later)]
    assert timed == list(range(1, TIMED_FIRST + 1)) + audits
    assert all(r["data"] is None and r["forward"] is None and r["other"] is None for r in rows if not r["timed"])
    assert all(r["forward"] > 0 and r["backward"] > 0 and r["optimizer"] > 0 for r in rows if r["timed"])
    assert s.stats["sampled"] is True and s.stats["timed_steps"] == len(timed)
    assert abs(sum(s.stats["share"].values()) - 1) < 1e-3  # shares of the timed steps' time
    assert "steps sampled: phases timed on" in s.report("text")
    page = s.report("html")
    assert "steps sampled" in page and 'class="bar untimed"' in page


def test_short_run_is_not_sampled():
    s = _train(TIMED_FIRST)
    assert s.stats["sampled"] is False and all(r["timed"] for r in s.stats["timeline"])
    assert "sampled" not in s.report("text")


def test_timeline_follows_a_step_that_waited_for_data():
    tl = Timeline()
    now = 0.0
    for _ in range(TIMED_FIRST):
        now += 1.0
        tl.end_step(None, now)
    assert not tl.timed  # step TIMED_FIRST + 1 is not an audit step
    while not tl.timed:
        now += 1.0
        tl.end_step(None, now)
    tl.enter(0, now)  # a timed step that waits for data half of its time
    tl.enter(1, now + 0.5)
    now += 1.0
    tl.end_step(None, now)
    assert tl.timed  # followed: the next step is timed too
    now += 1.0
    tl.end_step(None, now)  # no wait: back to sampling
    assert not tl.timed
    assert tl.count == len(tl.steps) == TIMED_FIRST + audit_gap(0) - 1 + 2


class _SlowLate(Dataset):
    """Fast for the first 100 batches, then 6 ms a batch: the pipeline starts to starve after the every-step start."""

    def __len__(self) -> int:
        return 260

    def __getitem__(self, i: int):
        if i >= 100:
            time.sleep(0.006)
        return torch.randn(4), i % 2


def test_input_pipeline_that_starves_late_is_td606():
    # without following each step after one that waited, the sampled steps would be mostly fast ones (median: no TD606)
    s = _train(0, DataLoader(_SlowLate(), batch_size=1))
    assert [f.code for f in s.findings] == ["TD606"]
    assert s.stats["steps"] == 260 and s.stats["sampled"] is True


def test_the_step_pre_hook_runs_only_on_steps_that_need_it_and_is_removed_on_exit():
    """hot.step_post keeps the pre-hook in torch's dict for timed steps and for those an armed gradient check looks at
    (on a clean run, the step after each followed one: checks/grads.py), not for the others; gone after the watch."""
    from torch.optim import optimizer as optim_mod

    before = dict(optim_mod._global_optimizer_pre_hooks)
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    present = []
    with torchdoctor.watch(environment=False) as s:
        hooks = len(optim_mod._global_optimizer_pre_hooks)
        for _ in range(TIMED_FIRST + 6 * audit_gap(0) + 3):  # ends on a step with the hook out of the dict
            present.append(len(optim_mod._global_optimizer_pre_hooks) == hooks)
            opt.zero_grad()
            model(torch.randn(8, 4)).sum().backward()
            opt.step()
        assert len(optim_mod._global_optimizer_pre_hooks) == hooks - 1
    assert dict(optim_mod._global_optimizer_pre_hooks) == before
    timed = {r["index"] for r in s.stats["timeline"] if r["timed"]}
    assert all(present[i - 1] for i in timed)  # every timed step ran it: its optimizer phase was marked
    assert all(r["optimizer"] > 0 for r in s.stats["timeline"] if r["timed"])
    late = present[TIMED_FIRST:]
    assert 0 < sum(late) <= len(late) // 3  # a few of the sampled steps, not all


def test_steps_passed_through_share_their_stretchs_time_and_every_step_has_one():
    """A stretch of steps passed through reads no clock (hot.step_post): each gets the stretch's mean when it ends,
    at the next step read or when the watch ends. The totals still add up to the time the steps took."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = [(torch.randn(8, 4), torch.randint(0, 2, (8,))) for _ in range(300)]
    before = time.perf_counter()
    with torchdoctor.watch(environment=False) as s:
        started = time.perf_counter()  # the timeline started before it
        for x, y in batches:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        looped = time.perf_counter()
    after = time.perf_counter()
    rows = s.stats["timeline"]
    assert [r["index"] for r in rows] == list(range(1, 301)) and all(r["total"] > 0 for r in rows)
    # each stretch's steps share one total: far fewer distinct totals past the first steps than steps
    late = [r["total"] for r in rows[TIMED_FIRST:] if not r["timed"]]
    assert len(set(late)) < len(late) // 5
    total = sum(r["total"] for r in rows)  # from the timeline's start to the watch's end: no time lost or counted twice
    assert looped - started <= total <= after - before


def test_a_run_past_the_cap_keeps_every_other_step_and_stretches_stay_one_row_each(monkeypatch):
    """Past ``MAX_STEPS`` steps kept, one in two is kept, then one in four: a stretch of steps passed through is one
    row whatever its length (``Timeline.close_stretch``), expanded into the multiples of the stride when read."""
    from torchdoctor.runtime import timeline

    monkeypatch.setattr(timeline, "MAX_STEPS", 300)
    s = _train(2000)
    tl = s.timeline
    stretches = [row for row in tl._rows if len(row) == 3]
    assert stretches and all(last - first >= 20 for first, _, last in stretches)  # one row for many steps
    assert len(tl._rows) < 300
    rows = s.stats["timeline"]
    indices = [r["index"] for r in rows]
    assert s.stats["steps"] == 2000 and indices == sorted(set(indices))
    assert tl._stride >= 4 and 300 // 4 <= len(rows) <= 300 + tl._stride * 8  # thinned, twice at least
    passed = {i for first, _, last in stretches for i in range(first, last + 1)}
    assert all(i % tl._stride == 0 for i in indices if i in passed)  # a stretch's steps kept: multiples of the stride
    assert sum(1 for r in rows if r["timed"]) >= 10  # the audited steps' phases are still there for the shares
