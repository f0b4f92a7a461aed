"""Each silent pitfall is found by running a real loop under watch; the correct look-alikes stay quiet."""

from __future__ import annotations

import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

import torchdoctor
from tests.runtime.loops import data, setup, train_epoch


def codes(session) -> list[str]:
    return sorted(f.code for f in session.findings)


def test_eval_in_train_mode_is_td402():
    model, opt, train, val = setup()
    with torchdoctor.watch(environment=False) as s:
        for _ in range(2):
            train_epoch(model, opt, train)
            with torch.no_grad():
                for x, _y in val:
                    model(x)
    assert codes(s) == ["TD402"]
    f = s.findings[0]
    assert f.location is not None and f.location.path.endswith("test_silent_pitfalls.py") and "Sequential" in f.message


def test_eval_in_train_mode_of_a_compiled_model_is_td402():
    model, opt, train, val = setup()
    compiled = torch.compile(model, backend="eager")
    with torchdoctor.watch(environment=False) as s:
        for _ in range(2):
            train_epoch(compiled, opt, train)
            with torch.no_grad():
                for x, _y in val:
                    compiled(x)
    assert codes(s) == ["TD402"] and s.findings[0].location.path.endswith("test_silent_pitfalls.py")


def test_mid_epoch_evaluation_in_train_mode_is_td402_on_a_loader_or_a_held_out_tensor():
    model, opt, train, val = setup()
    held_out = torch.randn(16, 8)
    for evaluate in (lambda: [model(x) for x, _y in val], lambda: model(held_out)):
        with torchdoctor.watch(environment=False) as s:
            for i, (x, y) in enumerate(train):
                opt.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
                if i % 4 == 3:
                    with torch.no_grad():
                        evaluate()
        assert codes(s) == ["TD402"]


def test_td402_needs_dropout_or_batchnorm():
    model, opt, train, val = setup(dropout=False)
    with torchdoctor.watch(environment=False) as s:
        train_epoch(model, opt, train)
        with torch.no_grad():
            for x, _y in val:
                model(x)
    assert codes(s) == []


class _Seq(nn.Module):
    def __init__(self, dropout: float, layers: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(8, 8, num_layers=layers, dropout=dropout, batch_first=True)
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        return self.fc(self.lstm(x)[0][:, -1])


def test_td402_counts_the_dropout_argument_of_a_stacked_lstm():
    found = {}
    for dropout, layers in ((0.25, 2), (0.0, 2)):
        torch.manual_seed(0)
        model = _Seq(dropout, layers)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        xs, ys = torch.randn(32, 5, 8), torch.randint(0, 2, (32,))
        loader = DataLoader(torch.utils.data.TensorDataset(xs, ys), batch_size=8)
        with torchdoctor.watch(environment=False) as s:
            for _ in range(2):
                train_epoch(model, opt, loader)
                with torch.no_grad():
                    for x, _y in loader:
                        model(x)
        found[dropout] = codes(s)
    assert found == {0.25: ["TD402"], 0.0: []}


def test_eval_with_autograd_is_td401():
    model, opt, train, val = setup()
    with torchdoctor.watch(environment=False) as s:
        for _ in range(2):
            model.train()
            train_epoch(model, opt, train)
            model.eval()
            for x, _y in val:
                model(x)
    assert codes(s) == ["TD401"]


def test_training_resumes_in_eval_mode_is_td403_at_the_eval_call():
    model, opt, train, val = setup()
    with torchdoctor.watch(environment=False) as s:
        model.train()
        for _ in range(2):
            train_epoch(model, opt, train)
            model.eval()  # never undone
            with torch.no_grad():
                for x, _y in val:
                    model(x)
    assert codes(s) == ["TD403"]
    assert "model.eval()" in open(__file__).read().splitlines()[s.findings[0].location.line - 1]


def test_gradients_never_zeroed_is_td404():
    model, opt, train, _ = setup()
    with torchdoctor.watch(environment=False) as s:
        train_epoch(model, opt, train, zero=False)
    assert codes(s) == ["TD404"]


def test_zeroing_that_stops_after_two_steps_is_td404_in_a_short_run():
    # Gradients are followed on every step of a run's first steps, then on every 8th: a loop that zeroes
    # only while warming up, run for six steps, must still be judged (it was missed when only every 8th was).
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with torchdoctor.watch(environment=False) as s:
        for step in range(6):
            if step < 2:
                opt.zero_grad()
            nn.functional.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1)).backward()
            opt.step()
    assert codes(s) == ["TD404"]


def test_lbfgs_closure_without_zero_grad_is_td404():
    model, _, train, _ = setup(dropout=False)
    opt = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=3)
    with torchdoctor.watch(environment=False) as s:
        for x, y in train:
            def closure():
                loss = nn.functional.cross_entropy(model(x), y)
                loss.backward()  # adds to what the previous evaluation left
                return loss
            opt.step(closure)
    assert codes(s) == ["TD404"] and "LBFGS" in s.findings[0].message


def test_evaluation_with_autograd_in_a_generator_expression_is_td401_at_its_line():
    model, opt, train, val = setup()
    with torchdoctor.watch(environment=False) as s:
        for _ in range(2):
            model.train()
            train_epoch(model, opt, train)
            model.eval()
            accuracy = sum((model(x).argmax(1) == y).sum().item() for x, y in val)
    assert codes(s) == ["TD401"] and accuracy >= 0
    assert "sum((model(x)" in open(__file__).read().splitlines()[s.findings[0].location.line - 1]


def test_evaluation_in_train_mode_after_an_attack_is_still_td402():
    model, opt, train, val = setup()
    with torchdoctor.watch(environment=False) as s:
        for _ in range(2):
            for x, y in train:
                x_adv = x.clone().requires_grad_(True)
                (grad,) = torch.autograd.grad(nn.functional.cross_entropy(model(x_adv), y), x_adv)
                opt.zero_grad()
                nn.functional.cross_entropy(model((x + 0.01 * grad.sign()).detach()), y).backward()
                opt.step()
            with torch.no_grad():
                for x, _y in val:
                    model(x)
    assert codes(s) == ["TD402"]


def test_losses_kept_in_a_short_run_are_td405_at_the_end():
    model, opt, train, _ = setup()
    with torchdoctor.watch(environment=False) as s:
        kept = []
        for x, y in list(train)[:6]:  # fewer backward passes than the check's stride: judged when the watch ends
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            kept.append(loss)
    assert codes(s) == ["TD405"]


def test_loss_tensor_accumulated_is_td405():
    model, opt, train, _ = setup()
    with torchdoctor.watch(environment=False) as s:
        total = 0
        for x, y in train:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            total = total + loss
    assert codes(s) == ["TD405"]


def test_losses_appended_is_td405_but_items_are_fine():
    model, opt, train, _ = setup()
    with torchdoctor.watch(environment=False) as s:
        kept = []
        for x, y in train:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            kept.append(loss)
    assert codes(s) == ["TD405"]
    with torchdoctor.watch(environment=False) as s:
        kept = []
        best = None
        for x, y in train:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            kept.append(loss.detach())
            best = loss  # one graph kept is not an accumulation
    assert codes(s) == []


def test_sampler_without_set_epoch_is_td701():
    model, opt, _, _ = setup()
    ds = data()
    sampler = DistributedSampler(ds, num_replicas=2, rank=0, shuffle=True)
    loader = DataLoader(ds, batch_size=8, sampler=sampler)
    with torchdoctor.watch(environment=False) as s:
        for _ in range(2):
            train_epoch(model, opt, loader)
    assert codes(s) == ["TD701"]
    with torchdoctor.watch(environment=False) as s:
        for epoch in range(2):
            sampler.set_epoch(epoch + 1)
            train_epoch(model, opt, loader)
    assert codes(s) == []
    with torchdoctor.watch(environment=False) as s:
        next(iter(loader))  # a peek is not an epoch, but two full passes with one epoch are
        for _ in range(2):
            train_epoch(model, opt, loader)
    assert codes(s) == ["TD701"] and "pass 3" in s.findings[0].message


class _Slow(Dataset):
    def __len__(self) -> int:
        return 48

    def __getitem__(self, i: int):
        time.sleep(0.008)
        return torch.randn(8), i % 2


def test_slow_input_pipeline_is_td606():
    model, opt, _, _ = setup()
    with torchdoctor.watch(environment=False) as s:
        train_epoch(model, opt, DataLoader(_Slow(), batch_size=4))
    assert codes(s) == ["TD606"]


def test_state_dict_of_a_wrapper_is_td205(tmp_path):
    model, opt, train, _ = setup()
    wrapped = nn.DataParallel(model)  # on the CPU it simply calls the module
    with torchdoctor.watch(environment=False) as s:
        train_epoch(wrapped, opt, train)
        torch.save(wrapped.state_dict(), tmp_path / "ok-not.pt")
        torch.save(model.state_dict(), tmp_path / "fine.pt")
    assert codes(s) == ["TD205"]
    state = torch.load(tmp_path / "ok-not.pt", weights_only=True)
    with torchdoctor.watch(environment=False) as s:
        try:
            model.load_state_dict(state)
        except RuntimeError:
            pass
    assert codes(s) == ["TD205"] and "module." in s.findings[0].message
