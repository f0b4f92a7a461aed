"""Pitfalls in loop shapes met in real scripts: an evaluation before the first epoch, losses logged every N steps."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchdoctor
from tests.runtime.loops import setup


def codes(session) -> list[str]:
    return sorted(f.code for f in session.findings)


def _evaluate(model, val) -> None:
    model.eval()
    with torch.no_grad():
        for x, _y in val:
            model(x)


def _train(model, opt, train, *, call_train: bool) -> None:
    if call_train:
        model.train()
    for x, y in train:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def test_evaluation_before_the_first_epoch_left_in_eval_mode_is_td403_at_model_eval():
    model, opt, train, val = setup()
    with torchdoctor.watch(environment=False) as s:
        _evaluate(model, val)  # a baseline score before training
        for _ in range(2):
            _train(model, opt, train, call_train=False)
            _evaluate(model, val)
    assert codes(s) == ["TD403"]
    assert "model.eval()" in open(__file__).read().splitlines()[s.findings[0].location.line - 1]


def test_evaluation_before_the_first_epoch_then_model_train_is_quiet():
    model, opt, train, val = setup()
    with torchdoctor.watch(environment=False) as s:
        _evaluate(model, val)
        for _ in range(2):
            _train(model, opt, train, call_train=True)
            _evaluate(model, val)
    assert codes(s) == []


def test_a_model_never_evaluated_but_trained_in_eval_mode_is_not_td403():
    # no model.eval()-then-evaluation story: eval-mode training may be meant (frozen batch-norm statistics)
    model, opt, train, _ = setup()
    with torchdoctor.watch(environment=False) as s:
        model.eval()
        for _ in range(2):
            _train(model, opt, train, call_train=False)
    assert codes(s) == []


def _logged_every(model, opt, train, *, epochs: int, keep_tensor: bool) -> list:
    log = []
    for _ in range(epochs):
        for i, (x, y) in enumerate(train):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            if i % 5 == 0:
                log.append(loss if keep_tensor else loss.item())
    return log


def test_loss_tensors_logged_every_n_steps_are_td405():
    model, opt, train, _ = setup()
    with torchdoctor.watch(environment=False) as s:
        _logged_every(model, opt, train, epochs=4, keep_tensor=True)
    assert codes(s) == ["TD405"]
    with torchdoctor.watch(environment=False) as s:
        _logged_every(model, opt, train, epochs=4, keep_tensor=False)
    assert codes(s) == []


def _functional_loss(weight_device: str, target_device: str):
    model = nn.Linear(4, 3).to("meta")
    w = torch.tensor([1.0, 2.0, 0.5], device=weight_device)
    with pytest.raises(RuntimeError):
        with torchdoctor.watch(environment=False) as s:
            x = torch.randn(8, 4, device="meta")
            y = torch.randint(0, 3, (8,), device=target_device)
            nn.functional.cross_entropy(model(x), y, weight=w)
    return s.findings


def test_functional_loss_weight_left_on_the_cpu_is_td406_naming_it_at_the_loss_line():
    found = _functional_loss("cpu", "meta")
    assert [f.code for f in found] == ["TD406"] and "`w`" in found[0].message and "weight=" in found[0].message
    assert "cross_entropy" in open(__file__).read().splitlines()[found[0].location.line - 1]


def test_functional_loss_weight_on_the_models_device_is_not_blamed():
    found = _functional_loss("meta", "cpu")
    assert [f.code for f in found] == ["TD303"] and "`w`" not in found[0].message
