"""Model parallel: a model spread over several devices is left where it is; batches go to its first parameter's device."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from torchdoctor.errors import UsageError
from torchdoctor.train import distributed, fit, placement
from tests.train.conftest import make_run

CE = nn.CrossEntropyLoss()
cuda = torch.device


def test_a_model_on_one_device_moves_and_a_spread_one_stays() -> None:
    assert placement.plan([], cuda("cuda", 0)) == placement.Placement(True, cuda("cuda", 0))
    assert placement.plan([cuda("cpu")], cuda("cuda", 1)).move
    spread = placement.plan([cuda("cuda", 1), cuda("cuda", 0), cuda("cuda", 2)], cuda("cuda", 0))
    assert not spread.move and spread.device == cuda("cuda", 1) and spread.model_parallel
    assert "span cuda:1, cuda:0, cuda:2" in spread.note() and "batches go to cuda:1" in spread.note()


def test_parameter_devices_in_registration_order() -> None:
    stages = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2, device="meta"), nn.Linear(2, 2))
    assert placement.parameter_devices(stages) == [cuda("cpu"), cuda("meta")]


class TwoStage(nn.Module):
    """The README's two-stage example, shaped for one CPU: stage1 on 'dev0', stage2 on 'dev1'."""

    def __init__(self, dev0: str = "cpu", dev1: str = "cpu") -> None:
        super().__init__()
        self.dev0, self.dev1 = dev0, dev1
        self.stage1 = nn.Sequential(nn.Linear(8, 16), nn.ReLU()).to(dev0)
        self.stage2 = nn.Linear(16, 3).to(dev1)
        self.inputs: list[torch.device] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.inputs.append(x.device)
        return self.stage2(self.stage1(x).to(self.dev1))


def test_fit_leaves_a_spread_model_in_place(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # Injected: fit() is told the parameters span cpu and cuda:1; they all really live on the CPU.
    monkeypatch.setattr(placement, "parameter_devices", lambda model: [cuda("cpu"), cuda("cuda", 1)])
    torch.manual_seed(0)
    model = TwoStage()
    moves: list[Any] = []
    monkeypatch.setattr(model, "to", lambda *a, **k: moves.append(a) or model)
    _, _, train, val = make_run()
    weighted = nn.CrossEntropyLoss(weight=torch.tensor([1.0, 1.0, 2.0]))  # noqa: TD406 - fit() places it: the point
    history = fit(model, train, loss_fn=weighted, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), epochs=2,
                  val_loader=val, device="cpu", progress=False)  # fmt: skip
    assert moves == []  # never moved to one device
    assert set(model.inputs) == {cuda("cpu")}  # batches went to the first parameter's device
    assert history["train_loss"][-1] < history["train_loss"][0]
    assert "span cpu, cuda:1: left where they are (model parallel)" in capsys.readouterr().err


def test_fsdp_refuses_a_spread_model() -> None:
    model = nn.Linear(2, 2)
    with pytest.raises(UsageError, match="already span several devices"):
        distributed.prepare_model(model, model, None, distributed.World(2, 0, 0), cuda("cpu"), "fsdp", spread=True)
    with pytest.raises(UsageError, match="strategy must be one of 'auto', 'ddp', 'fsdp', got 'deepspeed'"):
        fit(model, [(torch.zeros(1, 2), torch.zeros(1, 2))], loss_fn=nn.MSELoss(),
            optimizer=torch.optim.SGD(model.parameters(), lr=0.1), epochs=1, strategy="deepspeed", progress=False)  # fmt: skip


def test_fsdp_on_one_process_trains_the_model_unsharded(run: Any) -> None:
    model, opt, train, _ = run
    history = fit(model, train, loss_fn=CE, optimizer=opt, epochs=1, strategy="fsdp", progress=False)
    assert len(history) == 1 and type(model.body[0].weight) is nn.Parameter
