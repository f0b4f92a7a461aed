"""The checks that sample long runs (TD404, TD405) still find a pitfall that starts late, and stay quiet on clean loops."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

import torchdoctor
from torchdoctor.runtime.checks import losses
from torchdoctor.runtime.timeline import TIMED_FIRST, audit_gap

LATE = 150  # past every check's every-step beginning


def codes(session) -> list[str]:
    return sorted({f.code for f in session.findings})


def tiny() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(8, 4), torch.randint(0, 2, (8,))


def test_losses_kept_from_a_late_step_on_are_td405():
    model, opt = tiny()
    with torchdoctor.watch(environment=False) as s:
        kept = []
        for step in range(LATE + 60):
            x, y = batch()
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            if step >= LATE:
                kept.append(loss)
    assert codes(s) == ["TD405"]
    found = re.search(r"alive at step (\d+) \(the oldest from step (\d+)\), kept by `kept`", s.findings[0].message)
    assert found and LATE < int(found[2]) < int(found[1]) <= LATE + 30  # found within a few steps of the start


@pytest.mark.parametrize("offset", range(6))
def test_a_loss_summed_over_short_epochs_from_a_late_step_on_is_td405_at_any_phase(offset):
    # an epoch of 6 steps whose loss is summed (and the sum reset), starting late at each phase of the
    # sampling: the passes tagged must fall on early positions of some epoch
    model, opt = tiny()
    with torchdoctor.watch(environment=False) as s:
        for _ in range(LATE + offset):
            x, y = batch()
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        for _epoch in range(20):
            epoch_loss = 0
            for _ in range(6):
                x, y = batch()
                opt.zero_grad()
                loss = nn.functional.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                epoch_loss = epoch_loss + loss
            assert epoch_loss.item() > 0  # read once per epoch
    assert codes(s) == ["TD405"]


def test_zeroing_that_stops_at_a_late_step_is_td404():
    model, opt = tiny()
    with torchdoctor.watch(environment=False) as s:
        for step in range(LATE + 40):
            x, y = batch()
            if step < LATE:
                opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    assert codes(s) == ["TD404"]


def test_a_long_clean_loop_that_holds_the_last_loss_is_quiet():
    model, opt = tiny()
    with torchdoctor.watch(environment=False) as s:
        total, last = 0.0, None
        for _ in range(3 * LATE):
            x, y = batch()
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            total += loss.item()
            last = loss  # one graph held for a step is not an accumulation
    assert codes(s) == [] and last is not None and total > 0
    # every step counted; past the first steps, forwards are read on the audited ones only (the others pass through)
    assert s.stats["steps"] == 3 * LATE and TIMED_FIRST <= s.stats["forward_calls_audited"] < 3 * LATE
    # the watch saw the first steps' backward passes, then those of one step in 30 or 31 and the two after it
    assert 64 < s.stats["backward_calls_audited"] < 64 + 3 * (3 * LATE - 64) // 8 + 3


class _Node:
    def __init__(self) -> None:
        self.metadata: dict = {}
        self.next_functions = ()


class _Loss:
    def __init__(self) -> None:
        self.grad_fn = _Node()


def audited(n: int) -> bool:
    """Whether step ``n`` is audited (timeline.py): each of the first, then steps ``audit_gap`` apart."""
    step, gaps = TIMED_FIRST, 0
    while step < n:
        step += audit_gap(gaps)
        gaps += 1
    return n <= TIMED_FIRST or step == n


def drive(check: losses.LossCheck, passes: range, keep: bool = False) -> tuple[int, list]:
    """Backward passes (numbered, one a step) as the watch makes them: seen on audited steps, and while the check
    looks at the passes after a tag or tags every one (hot.backward). (calls, losses kept)."""
    calls, kept = 0, []
    for n in passes:
        loss = _Loss()
        if keep:
            kept.append(loss)
        if not check.done and (audited(n) or check.looking or check.every):
            calls += 1
            check.on_backward(loss, lambda: None, None, None, n, audited(n))  # it counts the passes it sees
    return calls, kept


def test_the_loss_check_looks_at_few_passes_of_a_clean_run_and_at_every_one_once_a_loss_is_kept():
    check = losses.LossCheck()
    calls, _ = drive(check, range(1, 1001))
    assert losses._FIRST < calls < losses._FIRST + 3 * 1000 // 8 and not check.findings
    # a late pitfall: seen at the next audit (one step in 125 or 126 by now), then every pass is looked at
    calls, kept = drive(check, range(1001, 1201), keep=True)
    assert check.findings and check.findings[0].code == "TD405" and len(kept) == 200
    found = re.search(r"alive at step (\d+) \(the oldest from step (\d+)\)", check.findings[0].message)
    assert found and 1000 < int(found[2]) < int(found[1]) <= 1200
