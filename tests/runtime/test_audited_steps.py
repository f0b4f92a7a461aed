"""Past its first steps the watch audits one step in 30 or 31 (timeline.py); on the others its wrappers pass calls
through (hot.py). What happens on such a step is still seen: a root model in another mode (no_grad, eval, a new
loader pass), a move, a device error. Each test puts the pitfall on a step that is not audited and asserts so."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchdoctor
from torchdoctor.runtime.timeline import TIMED_FIRST

LATE = TIMED_FIRST + 6  # step 70: neither it nor the next one (71) is audited, the first audit is step 96


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 2))


def train(model: nn.Module, opt: torch.optim.Optimizer, steps: int) -> None:
    for _ in range(steps):
        x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def codes(session) -> list[str]:
    return sorted({f.code for f in session.findings})


def test_an_evaluation_under_no_grad_without_eval_mode_on_an_unaudited_step_is_td402():
    model = net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with torchdoctor.watch(environment=False) as s:
        train(model, opt, LATE)
        assert not s._armed and torch.autograd.backward.__module__ == "torch.autograd"  # torch's own, not audited
        with torch.no_grad():
            model(torch.randn(8, 4))
        train(model, opt, 30)
    assert codes(s) == ["TD402"]


def test_an_evaluation_with_autograd_on_an_unaudited_step_is_td401():
    model = net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with torchdoctor.watch(environment=False) as s:
        train(model, opt, LATE)
        assert not s._armed
        model.eval()
        model(torch.randn(8, 4))
        model.train()
        train(model, opt, 30)
    assert codes(s) == ["TD401"]


def test_training_left_in_eval_mode_from_an_unaudited_step_on_is_td403():
    model = net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with torchdoctor.watch(environment=False) as s:
        train(model, opt, LATE)
        assert not s._armed
        model.eval()
        with torch.no_grad():
            model(torch.randn(8, 4))
        train(model, opt, 30)  # model.train() forgotten
    assert codes(s) == ["TD403"]


def test_a_device_error_on_an_unaudited_step_is_explained():
    model = net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with pytest.raises(RuntimeError) as info:
        with torchdoctor.watch(environment=False) as s:
            train(model, opt, LATE)
            assert not s._armed
            model(torch.randn(8, 4, device="meta"))  # a batch on another device than the model
    found = [f for f in s.findings if f.code.startswith(("TD2", "TD3"))]
    assert found and "meta" in found[0].message and "cpu" in found[0].message
    assert any(found[0].code in note for note in info.value.__notes__)


def test_a_model_moved_on_an_unaudited_step_is_read_again():
    model = net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with pytest.raises(RuntimeError):
        with torchdoctor.watch(environment=False) as s:
            train(model, opt, LATE)
            assert not s._armed
            model.to("meta")  # the batch below stays on the CPU
            model(torch.randn(8, 4))
    assert "TD302" in codes(s)


def test_a_clean_loop_that_evaluates_every_few_steps_is_quiet_and_audits_few_steps():
    model = net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with torchdoctor.watch(environment=False) as s:
        for epoch in range(12):
            model.train()  # every epoch, as it should: no flip when it is already in train mode
            train(model, opt, 25)
            model.eval()
            with torch.no_grad():
                model(torch.randn(8, 4))
    assert codes(s) == [] and s.stats["steps"] == 300
    # the first steps, the audits, the two passes after each, and the first step after each evaluation
    assert s.stats["backward_calls_audited"] < TIMED_FIRST + (300 - TIMED_FIRST) // 2
    # the first steps' forwards and every evaluation's (model.eval() ends passing through) are read, not the rest
    assert TIMED_FIRST + 12 <= s.stats["forward_calls_audited"] < 300


def gan(steps: int, zero_generator=lambda step: True) -> list[str]:
    torch.manual_seed(0)
    gen, disc = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4)), nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 1))
    opt_g, opt_d = torch.optim.Adam(gen.parameters()), torch.optim.Adam(disc.parameters())
    bce = nn.BCEWithLogitsLoss()
    with torchdoctor.watch(environment=False) as s:
        for step in range(steps):
            fake = gen(torch.randn(16, 4))
            opt_d.zero_grad()
            (bce(disc(torch.randn(16, 4)), torch.ones(16, 1)) + bce(disc(fake.detach()), torch.zeros(16, 1))).backward()
            opt_d.step()  # the first optimizer to step: its steps are the watch's
            if zero_generator(step):
                opt_g.zero_grad()
            bce(disc(fake), torch.ones(16, 1)).backward()
            opt_g.step()  # between two of the discriminator's steps
    return codes(s)


def test_a_gan_whose_generator_stops_zeroing_late_is_td404_and_a_clean_one_is_quiet():
    # the generator's steps straddle the discriminator's, which end the watch's steps: both are followed every step
    assert gan(3 * LATE, zero_generator=lambda step: step < 2 * LATE) == ["TD404"]
    assert gan(3 * LATE) == []


class WithEma(nn.Module):
    """Updates a moving average of its layer under no_grad inside forward, as EMA and momentum encoders do, and runs
    a frozen layer under no_grad: inner calls, not roots, whatever the grad context around them."""

    def __init__(self) -> None:
        super().__init__()
        self.layer, self.frozen, self.ema = nn.Linear(4, 8), nn.Linear(8, 8), nn.Linear(4, 8)
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            for avg, p in zip(self.ema.parameters(), self.layer.parameters()):
                avg.mul_(0.9).add_(p, alpha=0.1)
            self.frozen.eval()
            hint = self.frozen(self.ema(x))
        return self.head(self.layer(x) + hint)


def test_steps_past_the_first_pass_module_calls_through_and_grad_contexts_inside_forward_keep_it_so():
    torch.manual_seed(0)
    model = WithEma()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    through = []
    with torchdoctor.watch(environment=False) as s:
        for step in range(200):
            x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # torch's own no_grad, outside any call
            opt.step()
            through.append(s._through)
        roots = {type(info[1]()).__name__ for info in s._root_info.values()}
    assert codes(s) == [] and roots <= {"WithEma", "CrossEntropyLoss"}  # the inner layers were never taken for roots
    assert not any(through[:TIMED_FIRST - 1]) and sum(through[TIMED_FIRST:]) > 0.8 * (200 - TIMED_FIRST)
    assert s.stats["forward_calls_audited"] < 200 - 100  # the steps passed through are not read
    # torch's own no_grad (clip_grad_norm_) does not break the stretches: their steps share one time each
    late = [r["total"] for r in s.stats["timeline"][TIMED_FIRST:] if not r["timed"]]
    assert len(set(late)) < len(late) // 5


def test_an_evaluation_under_inference_mode_on_a_step_passed_through_is_read_and_passing_through_resumes_after():
    model = net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with torchdoctor.watch(environment=False) as s:
        train(model, opt, LATE)
        assert s._through
        with torch.inference_mode():
            assert not s._through  # a grad context ends it: the call below is read
            model(torch.randn(8, 4))  # training mode, dropout on: TD402
        assert not s._through  # that call was in another state: the step is audited
        train(model, opt, 2 * 61)
        assert s._through
        with torch.enable_grad():
            model(torch.randn(8, 4)).sum()
        assert s._through  # nothing new inside: passing through again
    assert codes(s) == ["TD402"]


def test_a_checkpointed_model_recomputed_inside_backward_on_steps_passed_through_is_quiet():
    class Checkpointed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block, self.head = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.1), nn.ReLU()), nn.Linear(8, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:  # the recomputation enters enable_grad inside backward
            return self.head(torch.utils.checkpoint.checkpoint(self.block, x.detach().requires_grad_(), use_reentrant=True))

    torch.manual_seed(0)
    model = Checkpointed()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with torchdoctor.watch(environment=False) as s:
        train(model, opt, 150)
        assert s._through
        roots = {type(info[1]()).__name__ for info in s._root_info.values()}
    assert codes(s) == [] and "Sequential" not in roots


@torch.no_grad()
def _evaluate(model: nn.Module) -> torch.Tensor:
    return model(torch.randn(8, 4))


def test_an_evaluation_decorated_with_no_grad_on_a_step_passed_through_is_read():
    model = net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with torchdoctor.watch(environment=False) as s:
        train(model, opt, LATE)
        assert s._through
        _evaluate(model)  # training mode, dropout on: TD402 (torch's decorate_context enters the no_grad)
        train(model, opt, 30)
    assert codes(s) == ["TD402"]
