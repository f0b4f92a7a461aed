"""The README's examples for torchdoctor.train, run as written (paths under a temporary directory)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def test_readme_to_device() -> None:
    from torchdoctor import pick_device, to_device

    device = pick_device()  # CUDA, then MPS, then CPU
    batch = {"image": torch.rand(8, 3, 32, 32), "label": torch.arange(8), "ids": ["a"] * 8}
    batch = to_device(batch, device)  # every tensor at any depth; strings untouched
    assert batch["image"].device.type == device.type and batch["ids"] == ["a"] * 8


def test_readme_device_loader() -> None:
    from torchdoctor import DeviceLoader, pick_device

    device = pick_device()
    data = TensorDataset(torch.randn(1000, 20), torch.randint(0, 2, (1000,)))
    loader = DeviceLoader(DataLoader(data, batch_size=64, shuffle=True, pin_memory=device.type == "cuda"), device)
    for x, y in loader:  # already on the device; on CUDA the next batch is copying meanwhile
        assert x.device.type == y.device.type == device.type
    small = DeviceLoader.preload(data, device, batch_size=64)  # all 1000 samples live on the device
    assert sum(len(y) for _, y in small) == 1000


def test_readme_checkpoint() -> None:
    from torchdoctor import checkpoint, pick_device

    device = pick_device()
    model = nn.Linear(20, 2).to(device)
    optimizer = torch.optim.AdamW(model.parameters())
    checkpoint.save("runs/epoch-0003.pt", model=model, optimizer=optimizer, epoch=3, step=1200, keep_last=3)
    info = checkpoint.load("runs/epoch-0003.pt", model, optimizer, map_location=device)
    print(info.epoch, info.step, info.notes)  # 3 1200 [] (notes say if a module. prefix was fixed)
    assert (info.epoch, info.step, info.notes) == (3, 1200, [])


def test_readme_fit() -> None:
    from torchdoctor import fit

    data = TensorDataset(torch.randn(1000, 20), torch.randint(0, 2, (1000,)))
    pin = torch.cuda.is_available()  # fit() trains on the GPU when there is one
    train_loader = DataLoader(data, batch_size=64, shuffle=True, pin_memory=pin)
    val_loader = DataLoader(data, batch_size=256, pin_memory=pin)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 2))
    history = fit(
        model, train_loader,
        loss_fn=nn.CrossEntropyLoss(), optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3), epochs=3,
        val_loader=val_loader, metrics={"acc": lambda out, y: (out.argmax(1) == y).float().mean()},
        checkpoint_dir="runs/demo",  # epoch-000N.pt + metrics.csv; run again to resume
    )  # fmt: skip
    print(history[-1]["val_loss"], history["val_acc"])
    assert len(history) == 3 and Path("runs/demo/metrics.csv").exists()


def test_readme_fit_any_batch_step_checkpoints_and_foreign_layouts() -> None:
    from torch.nn import functional as F

    from torchdoctor import checkpoint, fit

    data = TensorDataset(torch.randn(1000, 20), torch.randint(0, 2, (1000,)))
    pin = torch.cuda.is_available()
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 2))

    class TinyLM(nn.Module):  # stands in for a transformers model
        def __init__(self) -> None:
            super().__init__()
            self.head = nn.Linear(20, 2)

        def forward(self, features: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor | None]:
            logits = self.head(features)
            return {"logits": logits, "loss": F.cross_entropy(logits, labels) if labels is not None else None}

    lm = TinyLM()
    lm_history = fit(lm, [{"features": x, "labels": y} for x, y in DataLoader(data, batch_size=64, pin_memory=pin)],
                     optimizer=torch.optim.AdamW(lm.parameters()), epochs=1)  # fmt: skip
    stepped = fit(model, DataLoader(data, batch_size=64, pin_memory=pin), optimizer=torch.optim.AdamW(model.parameters()), epochs=1,
                  step_fn=lambda model, batch: F.cross_entropy(model(batch[0]), batch[1]))  # fmt: skip
    assert lm_history["step"] == stepped["step"] == [16]

    fit(model, DataLoader(data, batch_size=64, shuffle=True, pin_memory=pin), loss_fn=nn.CrossEntropyLoss(),
        optimizer=torch.optim.AdamW(model.parameters()), epochs=2, checkpoint_dir="runs/steps", checkpoint_every=5)  # fmt: skip
    assert checkpoint.latest("runs/steps") == Path("runs/steps/epoch-0002.pt")
    assert Path("runs/steps/epoch-0002-step-00000030.pt").exists()  # keep_last=3: steps 25, 30 and the end

    torch.save({"model_state_dict": model.state_dict(), "epoch": 2}, "runs/tutorial.pt")
    print(checkpoint.load("runs/tutorial.pt", model).epoch)  # 2
    assert checkpoint.load("runs/tutorial.pt", model).epoch == 2
