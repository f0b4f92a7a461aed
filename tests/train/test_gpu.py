"""fit() and its helpers on a real GPU (skipped where there is none; benchmarks/gpu_check.sh runs them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from torchdoctor.train import DeviceLoader, FitState, checkpoint, fit
from tests.train.conftest import Net, make_data

pytestmark = pytest.mark.gpu
CE = nn.CrossEntropyLoss()


class _Devices(nn.Module):
    """Net, recording where its inputs arrive and which dtype its first layer computes in."""

    def __init__(self) -> None:
        super().__init__()
        self.net = Net()
        self.seen: set[tuple[str, torch.dtype]] = set()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.net.body[0](x)
        self.seen.add((x.device.type, out.dtype))
        return self.net.body[1:](out)


@pytest.mark.parametrize("precision", ["auto", "fp16"])
def test_fit_trains_on_the_gpu_with_autocast_and_prefetching(tmp_path: Path, precision: str) -> None:
    torch.manual_seed(0)
    model = _Devices()
    loader = DataLoader(make_data(512), batch_size=32, shuffle=True, pin_memory=True)
    history = fit(model, loader, loss_fn=CE, optimizer=torch.optim.AdamW(model.parameters(), lr=3e-3), epochs=4,
                  val_loader=DataLoader(make_data(128), batch_size=64, pin_memory=True), precision=precision,
                  checkpoint_dir=tmp_path, progress=False)  # fmt: skip
    low = torch.bfloat16 if precision == "auto" and torch.cuda.is_bf16_supported() else torch.float16
    assert model.seen == {("cuda", low)}  # every batch on the GPU, every step under autocast
    assert next(model.parameters()).is_cuda and history["val_loss"][-1] < history["val_loss"][0]
    saved = torch.load(checkpoint.latest(tmp_path), map_location="cpu", weights_only=True)
    assert ("scaler" in saved) == (low is torch.float16)  # fp16 needs its GradScaler saved (TD604)
    cpu_model = Net()
    checkpoint.load(checkpoint.latest(tmp_path), _wrap(cpu_model))  # a GPU checkpoint loads on the CPU
    assert not next(cpu_model.parameters()).is_cuda


def _wrap(net: Net) -> nn.Module:
    holder = _Devices()
    holder.net = net
    return holder


def test_a_mid_epoch_resume_on_the_gpu_matches_the_straight_run(tmp_path: Path) -> None:
    class Stop:
        def on_step_end(self, state: FitState) -> None:
            if state.step == 11:
                raise KeyboardInterrupt

    def train(ckpt: Path, callbacks: list[Any]) -> nn.Module:
        torch.manual_seed(0)
        model = Net()
        fit(model, DataLoader(make_data(), batch_size=8, shuffle=True, pin_memory=True), loss_fn=CE, precision="fp32",
            optimizer=torch.optim.SGD(model.parameters(), lr=0.05), epochs=2, checkpoint_dir=ckpt,
            checkpoint_every=5, callbacks=callbacks, progress=False)  # fmt: skip
        return model

    torch.backends.cudnn.deterministic = True
    straight = train(tmp_path / "a", [])
    with pytest.raises(KeyboardInterrupt):
        train(tmp_path / "b", [Stop()])
    resumed = train(tmp_path / "b", [])
    for a, b in zip(straight.parameters(), resumed.parameters()):
        torch.testing.assert_close(a, b)  # on the GPU the order is the same; kernels need not be bitwise


def test_device_loader_prefetches_nested_batches_to_the_gpu() -> None:
    data = [{"x": torch.randn(4, 3), "meta": {"ids": torch.arange(4)}, "name": "b"} for _ in range(6)]
    got = list(DeviceLoader(data, "cuda"))
    assert all(b["x"].is_cuda and b["meta"]["ids"].is_cuda and b["name"] == "b" for b in got)
    assert all(torch.equal(b["x"].cpu(), d["x"]) for b, d in zip(got, data))


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_a_two_stage_model_on_two_gpus_is_left_in_place() -> None:
    class TwoStage(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stage1 = nn.Sequential(nn.Linear(8, 16), nn.ReLU()).to("cuda:0")
            self.stage2 = nn.Linear(16, 3).to("cuda:1")

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.stage2(self.stage1(x).to("cuda:1"))

    model = TwoStage()
    weighted = nn.CrossEntropyLoss(weight=torch.tensor([1.0, 1.0, 2.0]))  # noqa: TD406 - fit() places it: the point
    fit(model, DataLoader(make_data(), batch_size=16, pin_memory=True), loss_fn=weighted,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1), epochs=1, progress=False)  # fmt: skip
    assert model.stage1[0].weight.device.index == 0 and model.stage2.weight.device.index == 1
    assert weighted.weight.device.index == 1  # the loss went where the output is
