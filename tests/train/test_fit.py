"""fit(): trains, follows the checklist (modes, no_grad, zero_grad, syncs), logs and writes history."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from torchdoctor.train import FitState, History, fit, loop
from tests.train.conftest import Net, make_data, make_run

CE = nn.CrossEntropyLoss()


def _accuracy(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return (out.argmax(1) == target).float().mean()


def test_fit_trains_and_returns_a_cpu_history(tmp_path: Path, run: Any) -> None:
    model, opt, train, val = run
    history = fit(model, train, loss_fn=CE, optimizer=opt, epochs=4, val_loader=val, metrics={"acc": _accuracy},
                  checkpoint_dir=tmp_path, progress=False)  # fmt: skip
    assert isinstance(history, History) and len(history) == 4
    assert history["epoch"] == [1, 2, 3, 4] and history["step"] == [6, 12, 18, 24]
    assert history["train_loss"][-1] < history["train_loss"][0]
    assert history["val_acc"][-1] > 0.7
    assert all(type(v) in (int, float) for row in history for v in row.values())  # no tensors leak out
    csv = (tmp_path / "metrics.csv").read_text().splitlines()
    assert csv[0].startswith("epoch,step,train_loss,train_acc") and len(csv) == 5
    assert sorted(p.name for p in tmp_path.glob("epoch-*.pt")) == ["epoch-0002.pt", "epoch-0003.pt", "epoch-0004.pt"]
    assert all(p.grad is None for p in model.parameters())  # zero_grad(set_to_none=True) after the last step


class _Probe(nn.Module):
    """Records the mode and grad state of every forward call."""

    def __init__(self) -> None:
        super().__init__()
        self.net = Net()
        self.seen: list[tuple[bool, bool, bool]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append((self.training, torch.is_grad_enabled(), torch.is_inference_mode_enabled()))
        return self.net(x)


def test_train_mode_every_epoch_and_eval_under_inference_mode(run: Any) -> None:
    _, _, train, val = run
    probe = _Probe()
    fit(probe, train, loss_fn=CE, optimizer=torch.optim.SGD(probe.parameters(), lr=0.1), epochs=2,
        val_loader=val, progress=False)  # fmt: skip
    # Per epoch: 6 training batches, then 3 validation batches.
    expected = ([(True, True, False)] * 6 + [(False, False, True)] * 3) * 2
    assert probe.seen == expected


def test_losses_are_read_back_only_every_log_every_steps(monkeypatch: pytest.MonkeyPatch, run: Any) -> None:
    model, opt, train, _ = run
    reads: list[int] = []
    original = loop.read_window
    monkeypatch.setattr(loop, "read_window", lambda window, *a: reads.append(len(window)) or original(window, *a))
    fit(model, train, loss_fn=CE, optimizer=opt, epochs=2, log_every=4, progress=False)
    # 12 steps: reads at steps 4, 8, 12 plus the end of each epoch (what remains of the window).
    assert reads == [4, 2, 2, 4, 0]


def test_progress_bar_shows_loss_and_throughput(run: Any) -> None:
    model, opt, train, val = run
    stream = io.StringIO()
    fit(model, train, loss_fn=CE, optimizer=opt, epochs=2, val_loader=val, log_every=2, progress=stream)
    text = stream.getvalue()
    assert "epoch 1/2" in text and "epoch 2/2" in text and "6/6" in text
    assert "loss=" in text and "samples_s=" in text and "val_loss=" in text


def test_grad_accumulation_matches_one_big_batch() -> None:
    data = make_data(32)
    torch.manual_seed(3)
    model = nn.Linear(8, 3)
    reference = nn.Linear(8, 3)
    reference.load_state_dict(model.state_dict())
    fit(model, DataLoader(data, batch_size=8), loss_fn=CE, optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
        epochs=1, grad_accum_steps=2, progress=False)  # fmt: skip
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.5)
    for start in (0, 16):  # two optimizer steps over 16 samples each
        ref_opt.zero_grad()
        CE(reference(data.tensors[0][start : start + 16]), data.tensors[1][start : start + 16]).backward()
        ref_opt.step()
    for a, b in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(a, b)


def test_clip_grad_norm_limits_the_update() -> None:
    data = TensorDataset(torch.full((4, 8), 100.0), torch.zeros(4, dtype=torch.long))
    torch.manual_seed(0)
    model = nn.Linear(8, 3)
    start = [p.detach().clone() for p in model.parameters()]
    fit(model, DataLoader(data, batch_size=4), loss_fn=CE, optimizer=torch.optim.SGD(model.parameters(), lr=1.0),
        epochs=1, clip_grad_norm=0.5, progress=False)  # fmt: skip
    moved = torch.cat([(p.detach() - s).flatten() for p, s in zip(model.parameters(), start)])
    assert moved.norm().item() == pytest.approx(0.5, rel=1e-4)


def test_schedulers_step_per_epoch_per_step_and_on_plateau(run: Any) -> None:
    model, opt, train, val = run
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    history = fit(model, train, loss_fn=CE, optimizer=opt, epochs=2, scheduler=sched, progress=False)
    assert history["lr"] == [0.05, 0.025]
    model, opt, train, val = make_run()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1 / (1 + step))
    history = fit(model, train, loss_fn=CE, optimizer=opt, epochs=1, scheduler=sched, scheduler_interval="step", progress=False)
    assert history["lr"] == [pytest.approx(0.1 / 7)]
    model, opt, train, val = make_run()
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, threshold=10.0)
    history = fit(model, train, loss_fn=CE, optimizer=opt, epochs=2, val_loader=val, scheduler=plateau, progress=False)
    assert history["lr"][-1] < 0.1


def test_bf16_autocast_on_the_cpu_when_asked(run: Any) -> None:
    model, opt, train, _ = run
    dtypes: list[torch.dtype] = []
    model.body[0].register_forward_hook(lambda m, i, out: dtypes.append(out.dtype))
    fit(model, train, loss_fn=CE, optimizer=opt, epochs=1, precision="bf16", progress=False)
    assert set(dtypes) == {torch.bfloat16}
    model, opt, train, _ = make_run()
    dtypes.clear()
    model.body[0].register_forward_hook(lambda m, i, out: dtypes.append(out.dtype))
    fit(model, train, loss_fn=CE, optimizer=opt, epochs=1, progress=False)  # auto on the CPU: fp32
    assert set(dtypes) == {torch.float32}


def test_fp16_uses_a_grad_scaler_and_checkpoints_it(tmp_path: Path, run: Any) -> None:
    model, opt, train, _ = run
    fit(model, train, loss_fn=CE, optimizer=opt, epochs=1, precision="fp16", checkpoint_dir=tmp_path, progress=False)
    saved = torch.load(tmp_path / "epoch-0001.pt", map_location="cpu", weights_only=True)
    assert saved["scaler"]["scale"] > 0


def test_batches_of_dicts_and_tuples_reach_the_model_as_arguments() -> None:
    class TwoInputs(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(8, 3), nn.Linear(8, 3)

        def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
            seen.append((x.clone(), z.clone()))
            return self.a(x) + self.b(z)

    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    model = TwoInputs()
    x, z = torch.randn(8, 8), torch.randn(8, 8) + 10  # different inputs: a swap or a duplicate shows
    y = torch.zeros(8, dtype=torch.long)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    fit(model, [({"z": z, "x": x}, y)], loss_fn=CE, optimizer=opt, epochs=1, progress=False)  # keywords, any order
    fit(model, [((x, z), y)], loss_fn=CE, optimizer=opt, epochs=1, progress=False)  # positions
    assert len(seen) == 2
    for got_x, got_z in seen:
        assert torch.equal(got_x, x) and torch.equal(got_z, z)


def test_loss_module_with_weights_is_moved_and_callbacks_run(run: Any) -> None:
    model, opt, train, _ = run
    events: list[str] = []

    class Recorder:
        def on_epoch_start(self, state: FitState) -> None:
            events.append(f"start{state.epoch}")

        def on_epoch_end(self, state: FitState) -> None:
            events.append(f"end{state.epoch}")
            state.stop = state.epoch == 1

    weighted = nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0, 3.0]))
    history = fit(model, train, loss_fn=weighted, optimizer=opt, epochs=5, callbacks=[Recorder()], progress=False)
    assert events == ["start0", "end0", "start1", "end1"] and len(history) == 2


def test_sampler_set_epoch_is_called_every_epoch_including_after_resume(tmp_path: Path) -> None:
    class RecordingSampler(torch.utils.data.SequentialSampler):  # type: ignore[type-arg]
        epochs: list[int] = []

        def set_epoch(self, epoch: int) -> None:
            self.epochs.append(epoch)

    data = make_data(32)
    loader = DataLoader(data, batch_size=16, sampler=RecordingSampler(data))
    model, opt, _, _ = make_run()
    fit(model, loader, loss_fn=CE, optimizer=opt, epochs=2, checkpoint_dir=tmp_path, progress=False)
    fit(model, loader, loss_fn=CE, optimizer=opt, epochs=4, checkpoint_dir=tmp_path, progress=False)  # resumes
    assert RecordingSampler.epochs == [0, 1, 2, 3]  # TD701: a new order each epoch, continued after resume


def test_epoch_lines_never_print_a_rate_in_exponent_form() -> None:
    # A fast machine made ``samples_per_s=1.007e+04``: the README's line and a reader's eye both expect digits.
    from torchdoctor.train.loop import _format_row

    line = _format_row({"epoch": 1, "samples_per_s": 11260.4, "lr": 0.00225, "val_loss": 1.2599, "tiny": 1e-07,
                        "huge": 1.5e20, "step": 32})
    assert line == "samples_per_s=11260, lr=0.00225, val_loss=1.26, tiny=1e-07, huge=1.5e+20, step=32"
