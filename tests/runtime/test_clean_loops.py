"""Correct training loops produce no findings at all."""

from __future__ import annotations

import copy

import torch
from torch import nn

import torchdoctor
from tests.runtime.loops import setup, train_epoch


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    return sum((model(x).argmax(1) == y).sum().item() for x, y in loader)


def test_train_then_no_grad_evaluate_each_epoch():
    model, opt, train, val = setup()
    with torchdoctor.watch(environment=False) as s:
        for _ in range(3):
            model.train()
            train_epoch(model, opt, train)
            evaluate(model, val)
    assert s.findings == []


def test_gradient_accumulation():
    model, opt, train, _ = setup()
    with torchdoctor.watch(environment=False) as s:
        model.train()
        opt.zero_grad()
        for i, (x, y) in enumerate(train):
            (nn.functional.cross_entropy(model(x), y) / 4).backward()
            if (i + 1) % 4 == 0:
                opt.step()
                opt.zero_grad(set_to_none=False)
    assert s.findings == []


def test_inference_mode_evaluation_and_teacher_under_no_grad():
    model, opt, train, val = setup()
    teacher = copy.deepcopy(model).eval()
    with torchdoctor.watch(environment=False) as s:
        for _ in range(2):
            model.train()
            for x, y in train:
                with torch.no_grad():
                    soft = teacher(x).softmax(1)
                opt.zero_grad()
                out = model(x)
                loss = nn.functional.cross_entropy(out, y) + nn.functional.kl_div(out.log_softmax(1), soft, reduction="batchmean")
                loss.backward()
                opt.step()
            model.eval()
            with torch.inference_mode():
                for x, _y in val:
                    model(x)
    assert s.findings == []


def test_siamese_two_forwards_per_step_and_manual_grad_reset():
    model, opt, train, _ = setup()
    with torchdoctor.watch(environment=False) as s:
        for x, y in train:
            for p in model.parameters():
                p.grad = None
            a, b = model(x), model(x.flip(0))
            (nn.functional.cross_entropy(a, y) + nn.functional.cross_entropy(b, y.flip(0))).backward()
            opt.step()
    assert s.findings == []


def test_gan_style_two_optimizers():
    torch.manual_seed(0)
    gen, disc = nn.Linear(4, 8), nn.Sequential(nn.Linear(8, 1))
    opt_g, opt_d = torch.optim.SGD(gen.parameters(), lr=0.01), torch.optim.SGD(disc.parameters(), lr=0.01)
    with torchdoctor.watch(environment=False) as s:
        for _ in range(6):
            real, z = torch.randn(8, 8), torch.randn(8, 4)
            opt_d.zero_grad()
            d_loss = disc(real).mean() - disc(gen(z).detach()).mean()
            d_loss.backward()
            opt_d.step()
            opt_g.zero_grad()
            g_loss = disc(gen(z)).mean()
            g_loss.backward()  # also fills disc's grads: zeroed at its next step
            opt_g.step()
    assert s.findings == []


def test_clean_example_script_is_clean():
    import runpy
    import sys
    from pathlib import Path

    path = Path(__file__).parents[2] / "examples" / "clean_train.py"
    saved = sys.argv
    sys.argv = [str(path)]
    try:
        with torchdoctor.watch(environment=False) as s:
            runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv = saved
    assert s.findings == []
