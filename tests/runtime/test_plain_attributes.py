"""TD203 at run time: a plain tensor attribute forward uses is reported at the first forward, on the CPU too."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchdoctor


class Normalised(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mean = torch.tensor([0.5, 0.5])  # TD203 here
        self.fc = nn.Linear(2, 2)

    def forward(self, x):
        return self.fc(x - self.mean)


class ThroughAHelper(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.ones(2) * 2  # TD203 here
        self.fc = nn.Linear(2, 2)

    def _prepare(self, x):
        return x * self.scale

    def forward(self, x):
        return self.fc(self._prepare(x))


class Buffered(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor([0.5, 0.5]))
        self.fc = nn.Linear(2, 2)

    def forward(self, x):
        return self.fc(x - self.mean)


class MadeInForward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)

    def forward(self, x):
        self.noise = torch.zeros_like(x)
        return self.fc(x + self.noise)


class UnusedConstant(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.class_counts = torch.tensor([10, 20])  # read by the training script, never by forward
        self.fc = nn.Linear(2, 2)

    def forward(self, x):
        return self.fc(x)


class MovedInForward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mean = torch.tensor([0.5, 0.5])
        self.fc = nn.Linear(2, 2)

    def forward(self, x):
        return self.fc(x - self.mean.to(x.device))


def _run(model: nn.Module, steps: int = 3):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with torchdoctor.watch(environment=False) as s:
        for _ in range(steps):
            opt.zero_grad()
            model(torch.randn(4, 2)).sum().backward()
            opt.step()
    return s.findings


def _line(marker_cls: type) -> int:
    import inspect

    lines, start = inspect.getsourcelines(marker_cls)
    return start + next(i for i, text in enumerate(lines) if "# TD203 here" in text)


@pytest.mark.parametrize("cls, attr", [(Normalised, "mean"), (ThroughAHelper, "scale")])
def test_plain_tensor_used_by_forward_is_td203_at_its_assignment_on_the_cpu(cls, attr):
    [f] = _run(cls())
    assert f.code == "TD203" and f"`{attr}` of `{cls.__name__}`" in f.message and "cpu" in f.message
    assert f.location.path.endswith("test_plain_attributes.py") and f.location.line == _line(cls)
    assert f.location.column == 9  # the `self.` of the assignment


def test_reported_once_for_many_forwards_and_models_sharing_the_class():
    found = _run(Normalised(), steps=6)
    assert [f.code for f in found] == ["TD203"]


@pytest.mark.parametrize("cls", [Buffered, MadeInForward, UnusedConstant, MovedInForward])
def test_quiet_for_buffers_tensors_made_in_forward_unused_constants_and_tensors_moved_in_forward(cls):
    assert _run(cls()) == []


def test_a_model_moved_to_another_device_is_reported_once_not_again_when_the_forward_fails():
    model = Normalised().to("meta")
    with pytest.raises(RuntimeError):
        with torchdoctor.watch(environment=False) as s:
            model(torch.randn(4, 2, device="meta"))
    assert [f.code for f in s.findings] == ["TD203"] and s.findings[0].location.line == _line(Normalised)
