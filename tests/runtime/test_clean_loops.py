"""Correct training loops produce no findings at all (each also checks that the watch saw its steps)."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

import torchdoctor
from tests.runtime.loops import data, setup, train_epoch


def quiet(session, steps: int | None = None) -> bool:
    """No findings, from a watch that did see the loop (a switched-off watch also finds nothing)."""
    if steps is not None:
        assert session.stats["steps"] == steps
    assert session.stats["forward_calls_audited"] > 0
    return session.findings == []


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
    assert quiet(s, 24)


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
    assert quiet(s, 2)


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
    assert quiet(s, 16)


def test_siamese_two_forwards_per_step_and_manual_grad_reset():
    model, opt, train, _ = setup()
    with torchdoctor.watch(environment=False) as s:
        for x, y in train:
            for p in model.parameters():
                p.grad = None
            a, b = model(x), model(x.flip(0))
            (nn.functional.cross_entropy(a, y) + nn.functional.cross_entropy(b, y.flip(0))).backward()
            opt.step()
    assert quiet(s, 8)


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
    assert quiet(s, 6)  # one step per iteration, not one per optimizer


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
    assert quiet(s, 36)


def test_dcgan_generator_under_no_grad_for_the_discriminator_step():
    torch.manual_seed(0)
    gen = nn.Sequential(nn.Linear(4, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 8))
    disc = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.LeakyReLU(0.2), nn.Dropout(0.3), nn.Linear(16, 1))
    opt_g, opt_d = torch.optim.Adam(gen.parameters(), lr=2e-4), torch.optim.Adam(disc.parameters(), lr=2e-4)
    bce = nn.BCEWithLogitsLoss()
    with torchdoctor.watch(environment=False) as s:
        for real in DataLoader(torch.randn(96, 8), batch_size=8, shuffle=True):
            z = torch.randn(8, 4)
            with torch.no_grad():
                fake = gen(z)
            opt_d.zero_grad()
            d_loss = bce(disc(real), torch.ones(8, 1)) + bce(disc(fake), torch.zeros(8, 1))
            d_loss.backward()
            opt_d.step()
            opt_g.zero_grad()
            g_loss = bce(disc(gen(z)), torch.ones(8, 1))
            g_loss.backward()
            opt_g.step()
        gen.eval()
        with torch.no_grad():
            samples = gen(torch.randn(16, 4))
    assert samples.shape == (16, 8) and quiet(s, 12)


def test_gradient_accumulation_with_zero_grad_at_the_start_of_each_cycle():
    model, opt, train, _ = setup()
    with torchdoctor.watch(environment=False) as s:
        for _ in range(2):
            for i, (x, y) in enumerate(train):
                if i % 2 == 0:
                    opt.zero_grad()
                (nn.functional.cross_entropy(model(x), y) / 2).backward()
                if i % 2 == 1:
                    opt.step()
    assert quiet(s, 8)


def test_batchnorm_model_evaluated_every_n_steps_inside_the_epoch():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 2))
    opt, val = torch.optim.SGD(model.parameters(), lr=0.1), DataLoader(data(32), batch_size=16)
    with torchdoctor.watch(environment=False) as s:
        for _ in range(2):
            model.train()
            for i, (x, y) in enumerate(DataLoader(data(), batch_size=8, shuffle=True)):
                opt.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
                if i % 3 == 2:
                    model.eval()
                    with torch.no_grad():
                        correct = sum((model(vx).argmax(1) == vy).sum().item() for vx, vy in val)
                    model.train()
    assert correct >= 0 and quiet(s, 16)


def test_validation_loss_through_a_generator_expression():
    model, opt, train, val = setup()
    criterion = nn.CrossEntropyLoss()
    with torchdoctor.watch(environment=False) as s:
        for _ in range(2):
            model.train()
            train_epoch(model, opt, train)
            model.eval()
            with torch.no_grad():
                total = sum(criterion(model(x), y).item() for x, y in val)
    assert total > 0 and quiet(s, 16)


def test_torch_compiled_model():
    model, opt, train, val = setup()
    compiled = torch.compile(model, backend="eager")  # dynamo traces through the watch's Module.__call__
    with torchdoctor.watch(environment=False) as s:
        for _ in range(2):
            compiled.train()
            train_epoch(compiled, opt, train)
            evaluate(compiled, val)
    assert quiet(s, 16) and s.stats["forward_calls_audited"] == 24


@dataclass
class Output:
    loss: torch.Tensor | None
    logits: torch.Tensor


class TinyLM(nn.Module):
    """Called with keyword arguments and returning a dataclass or a dict, as HuggingFace models are."""

    def __init__(self) -> None:
        super().__init__()
        self.embed, self.drop, self.classifier = nn.Embedding(10, 8), nn.Dropout(0.1), nn.Linear(8, 2)

    def forward(self, input_ids=None, attention_mask=None, labels=None, return_dict=True):
        hidden = self.drop(self.embed(input_ids)) * attention_mask.unsqueeze(-1)
        logits = self.classifier(hidden.mean(1))
        loss = nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return Output(loss, logits) if return_dict else {"loss": loss, "logits": logits}


def test_huggingface_style_model_with_keyword_inputs_and_dict_outputs():
    torch.manual_seed(0)
    model = TinyLM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids, mask, labels = torch.randint(0, 10, (32, 5)), torch.ones(32, 5), torch.randint(0, 2, (32,))
    with torchdoctor.watch(environment=False) as s:
        for _ in range(2):
            model.train()
            for i in range(0, 32, 8):
                out = model(input_ids=ids[i:i + 8], attention_mask=mask[i:i + 8], labels=labels[i:i + 8])
                out.loss.backward()
                opt.step()
                opt.zero_grad()
            model.eval()
            with torch.no_grad():
                logits = [model(input_ids=ids[i:i + 16], attention_mask=mask[i:i + 16], return_dict=False)["logits"] for i in (0, 16)]
    assert len(logits) == 2 and quiet(s, 8)


def test_test_set_evaluated_once_at_the_end_under_inference_mode():
    model, opt, train, val = setup()
    with torchdoctor.watch(environment=False) as s:
        model.train()
        for _ in range(2):
            train_epoch(model, opt, train)  # loss.item() every step: fine on the CPU (TD603 is for CUDA)
        model.eval()
        with torch.inference_mode():
            accuracy = sum((model(x).argmax(1) == y).float().mean().item() for x, y in val)
    assert accuracy >= 0 and quiet(s, 16)


def test_lr_finder_then_training_with_a_fresh_optimizer():
    model, _, train, _ = setup()
    initial = copy.deepcopy(model.state_dict())
    with torchdoctor.watch(environment=False) as s:
        finder = torch.optim.SGD(model.parameters(), lr=1e-4)
        for x, y in train:  # LR range test: raise the rate each step
            for group in finder.param_groups:
                group["lr"] *= 3
            finder.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            finder.step()
        model.load_state_dict(initial)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            train_epoch(model, opt, train)
    assert quiet(s) and s.stats["steps"] == 8 + 15  # the new optimizer takes over at its second step


def test_detached_losses_kept_for_logging():
    model, opt, train, _ = setup()
    with torchdoctor.watch(environment=False) as s:
        for _ in range(2):
            losses = []
            for x, y in train:
                opt.zero_grad()
                loss = nn.functional.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                losses.append(loss.detach())
            mean = torch.stack(losses).mean().item()
    assert mean > 0 and quiet(s, 16)


class Checkpointed(nn.Module):
    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.1), nn.ReLU())
        self.head, self.reentrant = nn.Linear(16, 2), reentrant

    def forward(self, x):
        return self.head(torch.utils.checkpoint.checkpoint(self.block, x, use_reentrant=self.reentrant))


@pytest.mark.filterwarnings("ignore:None of the inputs have requires_grad")  # reentrant checkpoint under no_grad
def test_activation_checkpointing_recomputes_inside_backward():
    for reentrant in (False, True):
        torch.manual_seed(0)
        model = Checkpointed(reentrant)
        opt, train, val = torch.optim.SGD(model.parameters(), lr=0.1), DataLoader(data(), batch_size=8), DataLoader(data(32), batch_size=16)
        with torchdoctor.watch(environment=False) as s:
            for _ in range(2):
                model.train()
                for x, y in train:
                    opt.zero_grad()
                    nn.functional.cross_entropy(model(x.requires_grad_(reentrant)), y).backward()
                    opt.step()
                evaluate(model, val)
        assert quiet(s, 16) and s.stats["forward_calls_audited"] == 16 + 4  # recomputations are not forward passes


def test_lbfgs_zeroes_inside_its_closure():
    model, _, train, _ = setup(dropout=False)
    opt = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=3)
    with torchdoctor.watch(environment=False) as s:
        for x, y in train:
            def closure():
                opt.zero_grad()
                loss = nn.functional.cross_entropy(model(x), y)
                loss.backward()
                return loss
            opt.step(closure)
    assert quiet(s, 8)


def test_adversarial_training_with_an_attack_in_eval_mode():
    model, opt, train, _ = setup()
    with torchdoctor.watch(environment=False) as s:
        for x, y in train:
            model.eval()  # attack with dropout off, through torch.autograd.grad: not an evaluation
            x_adv = x.clone().requires_grad_(True)
            (grad,) = torch.autograd.grad(nn.functional.cross_entropy(model(x_adv), y), x_adv)
            model.train()
            opt.zero_grad()
            nn.functional.cross_entropy(model((x + 0.01 * grad.sign()).detach()), y).backward()
            opt.step()
    assert quiet(s, 8)


def test_linear_probe_on_a_frozen_pretrained_encoder():
    torch.manual_seed(0)
    encoder, head = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU()), nn.Linear(16, 2)
    train = DataLoader(data(), batch_size=8, shuffle=True)
    with torchdoctor.watch(environment=False) as s:
        opt = torch.optim.SGD([*encoder.parameters(), *head.parameters()], lr=0.1)
        for x, y in train:  # phase 1: train both
            opt.zero_grad()
            nn.functional.cross_entropy(head(encoder(x)), y).backward()
            opt.step()
        encoder.eval().requires_grad_(False)  # phase 2: frozen features, on purpose
        probe = torch.optim.SGD(head.parameters(), lr=0.1)
        for x, y in train:
            probe.zero_grad()
            nn.functional.cross_entropy(head(encoder(x)), y).backward()
            probe.step()
    assert quiet(s, 8 + 7)  # the probe's optimizer takes over step counting at its second step


def test_distributed_sampler_peeked_before_training_with_set_epoch():
    model, opt, _, _ = setup()
    ds = data()
    sampler = DistributedSampler(ds, num_replicas=2, rank=0, shuffle=True)
    loader = DataLoader(ds, batch_size=8, sampler=sampler)
    with torchdoctor.watch(environment=False) as s:
        x, _y = next(iter(loader))  # inspect one batch: not an epoch
        for epoch in range(2):
            sampler.set_epoch(epoch)
            train_epoch(model, opt, loader)
    assert x.shape == (8, 8) and quiet(s, 8)


def test_swa_with_batchnorm_statistics_recomputed_by_update_bn():
    from torch.optim.swa_utils import AveragedModel, update_bn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 2))
    opt, swa = torch.optim.SGD(model.parameters(), lr=0.1), AveragedModel(model)
    train = DataLoader(data(), batch_size=8, shuffle=True)
    with torchdoctor.watch(environment=False) as s:
        for _ in range(2):
            model.train()
            train_epoch(model, opt, train)
            swa.update_parameters(model)
        update_bn(train, swa)  # forwards in train mode under no_grad, made by torch on purpose
        evaluate(swa, DataLoader(data(32), batch_size=16))
    assert quiet(s, 16)


def test_pseudo_labels_from_the_model_being_trained_under_no_grad():
    model, opt, train, val = setup()
    unlabeled = DataLoader(data(), batch_size=8, shuffle=True)
    with torchdoctor.watch(environment=False) as s:
        for _ in range(2):
            model.train()
            for (u, _), (x, y) in zip(unlabeled, train):
                with torch.no_grad():
                    pseudo = model(u).argmax(1)  # train mode on purpose: part of the training step
                opt.zero_grad()
                (nn.functional.cross_entropy(model(x), y) + nn.functional.cross_entropy(model(u), pseudo)).backward()
                opt.step()
            evaluate(model, val)
    assert quiet(s, 16)
