"""Device mismatches explained before PyTorch's error, with the meta device standing in for a GPU."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

import torchdoctor
from torchdoctor.runtime.checks.devices import Mismatch, classify
from tests.runtime.loops import data


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = Encoder()
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.encoder(x))


def _fail(model, loader, criterion=None, move=("x",)):
    criterion = criterion or nn.CrossEntropyLoss()
    with pytest.raises(RuntimeError) as info:
        with torchdoctor.watch(environment=False) as s:
            for x, y in loader:
                if "x" in move:
                    x = x.to("meta")
                if "y" in move:
                    y = y.to("meta")
                loss = criterion(model(x), y)
                loss.backward()
    return s, info.value


def test_batch_not_moved_is_td302_naming_module_argument_and_line():
    model = Model().to("meta")
    s, error = _fail(model, DataLoader(data(), batch_size=8), move=())
    [f] = s.findings
    assert f.code == "TD302" and "`encoder.layers.0` (Linear)" in f.message and "`input`" in f.message
    assert "cpu" in f.message and "meta" in f.message and f.fix
    assert f.location.path.endswith("test_devices.py")
    assert "model(x)" in open(__file__).read().splitlines()[f.location.line - 1]
    assert "not on the expected device" in str(error)  # PyTorch's own error still propagates
    assert any("TD302" in n for n in error.__notes__)


def test_model_never_moved_is_td201():
    s, _ = _fail(Model(), DataLoader(data(), batch_size=8))
    assert [f.code for f in s.findings] == ["TD201"]


def test_target_not_moved_is_td302_on_the_loss():
    s, _ = _fail(Model().to("meta"), DataLoader(data(), batch_size=8), move=("x",))
    [f] = s.findings
    assert f.code == "TD302" and "`target`" in f.message and "CrossEntropyLoss" in f.message


def test_loss_weight_left_behind_is_td406():
    criterion = nn.CrossEntropyLoss(weight=torch.ones(2))
    s, _ = _fail(Model().to("meta"), DataLoader(data(), batch_size=8), criterion, move=("x", "y"))
    assert [f.code for f in s.findings] == ["TD406"]


class Tagger(nn.Module):
    """Called with keyword inputs, as HuggingFace models are."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 2)

    def forward(self, input_ids=None, attention_mask=None):
        if attention_mask is None:
            return self.fc(input_ids)
        return self.fc(input_ids * attention_mask)


def test_keyword_input_not_moved_is_td302_at_the_model_call():
    model = Tagger().to("meta")
    for mask in (None, torch.ones(4, 8, device="meta")):  # fails in the child, then in the model's own line
        with pytest.raises(RuntimeError):
            with torchdoctor.watch(environment=False) as s:
                model(input_ids=torch.randn(4, 8), attention_mask=mask)
        [f] = s.findings
        assert f.code == "TD302" and ("`input_ids`" in f.message or "`input`" in f.message), f.message
        assert "model(input_ids=" in open(__file__).read().splitlines()[f.location.line - 1]


class Masked(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 2)
        self.mask = torch.ones(8)

    def forward(self, x):
        return self.fc(x * self.mask)


def test_plain_tensor_attribute_is_td203_at_its_assignment():
    s, _ = _fail(Masked().to("meta"), DataLoader(data(), batch_size=8), move=("x", "y"))
    [f] = s.findings
    assert f.code == "TD203" and "`mask`" in f.message
    assert "self.mask = torch.ones(8)" in open(__file__).read().splitlines()[f.location.line - 1]


class Leftover(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(8, 8)

    def forward(self, x):
        return self.extra(self.body(x))


def test_submodule_left_behind_is_td202():
    model = Leftover().to("meta")
    model.extra = nn.Linear(8, 2)  # added after .to(): stays on the CPU
    s, _ = _fail(model, DataLoader(data(), batch_size=8), move=("x", "y"))
    assert [f.code for f in s.findings] == ["TD202"] and "`extra`" in s.findings[0].message


class Pipeline(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stage1 = nn.Linear(8, 8)
        self.stage2 = nn.Linear(8, 2).to("meta")

    def forward(self, x):
        return self.stage2(self.stage1(x))  # activation not moved between stages


def test_model_parallel_stage_input_is_td707():
    s, _ = _fail(Pipeline(), DataLoader(data(), batch_size=8), move=())
    assert [f.code for f in s.findings] == ["TD707"] and "stage2" in s.findings[0].message


class Fresh(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        return self.fc(x) + torch.zeros(2)


def test_tensor_created_without_device_is_td303_at_its_line():
    s, _ = _fail(Fresh().to("meta"), DataLoader(data(), batch_size=8), move=("x", "y"))
    [f] = s.findings
    assert f.code == "TD303" and "torch.zeros" in f.message
    assert "torch.zeros(2)" in open(__file__).read().splitlines()[f.location.line - 1]


class SelfMoving(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        return self.fc.weight.sum() + x.to(self.fc.weight.device).sum()


def test_module_that_moves_its_inputs_itself_is_not_blamed():
    model = SelfMoving().to("meta")
    with torchdoctor.watch(environment=False) as s:
        for _ in range(3):
            with torch.no_grad():
                model(torch.randn(4, 8))
    assert s.findings == []


@pytest.mark.parametrize(("param", "inp", "model_devs", "code"), [
    ("cuda:0", "cpu", ("cuda:0",), "TD302"),
    ("cpu", "cuda:0", ("cpu",), "TD201"),
    ("cpu", "cuda:0", ("cpu", "cuda:0"), "TD202"),
    ("cuda:1", "cuda:0", ("cuda:0", "cuda:1"), "TD707"),
])
def test_classify(param, inp, model_devs, code):
    m = Mismatch("encoder.layers.3.attn", "Linear", "x", inp, param, model_devs, is_root_input=True)
    got, message, fix = classify(m)
    assert got == code and "encoder.layers.3.attn" in message and fix
