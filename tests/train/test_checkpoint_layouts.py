"""checkpoint.load reads the layouts people already have, each with module./_orig_mod. prefixes, always weights_only."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from torch import nn

from torchdoctor.train import checkpoint
from torchdoctor.train.checkpoint import CheckpointError, CheckpointWarning


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def _trained(seed: int = 0) -> tuple[Classifier, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = Classifier()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    return model, opt


def _prefixed(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {prefix + key: value for key, value in state.items()}


def _plain(sd: dict[str, Any], osd: dict[str, Any]) -> dict[str, Any]:
    return {"model": sd, "optimizer": osd, "epoch": 7}


def _lightning(sd: dict[str, Any], osd: dict[str, Any]) -> dict[str, Any]:
    # What Trainer.save_checkpoint writes: the LightningModule's state (its net under `self.model`).
    return {"epoch": 7, "global_step": 140, "pytorch-lightning_version": "2.6.6", "state_dict": _prefixed(sd, "model."),
            "loops": {"fit_loop": {"state_dict": {}}}, "callbacks": {}, "optimizer_states": [osd],
            "lr_schedulers": [], "hparams_name": "kwargs", "hyper_parameters": {"lr": 0.01}}  # fmt: skip


def _tutorial(sd: dict[str, Any], osd: dict[str, Any]) -> dict[str, Any]:
    # pytorch.org's "Saving and loading a general checkpoint".
    return {"epoch": 7, "model_state_dict": sd, "optimizer_state_dict": osd, "loss": torch.tensor(0.25)}


LAYOUTS: dict[str, Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]] = {
    "model": _plain, "lightning": _lightning, "tutorial": _tutorial,
}  # fmt: skip


@pytest.mark.parametrize("prefix", ["", "module.", "_orig_mod."], ids=["bare", "module", "orig_mod"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_foreign_layouts_load_weights_optimizer_and_epoch(tmp_path: Path, layout: str, prefix: str) -> None:
    source, source_opt = _trained(0)
    path = tmp_path / f"{layout}.ckpt"
    torch.save(LAYOUTS[layout](_prefixed(source.state_dict(), prefix), source_opt.state_dict()), path)
    target, target_opt = _trained(1)
    renamed = bool(prefix) or layout == "lightning"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = checkpoint.load(path, target, target_opt)
    assert [w.category for w in caught] == ([CheckpointWarning] if renamed else [])
    for key, value in source.state_dict().items():
        assert torch.equal(target.state_dict()[key], value), key
    state = target_opt.state_dict()["state"][0]["exp_avg"]
    assert torch.equal(state, source_opt.state_dict()["state"][0]["exp_avg"])
    assert result.epoch == 7 and result.step == (140 if layout == "lightning" else None)
    assert ("stripped the prefix" in result.notes[0]) if renamed else result.notes == []


def test_lightning_state_with_a_loss_buffer_loads_non_strictly_only(tmp_path: Path) -> None:
    source, _ = _trained(0)
    state = {**_prefixed(source.state_dict(), "model."), "criterion.weight": torch.ones(2)}
    torch.save({"state_dict": state, "epoch": 1}, tmp_path / "l.ckpt")
    with pytest.raises(CheckpointError, match=r"in the file but not in the model: 1 \(criterion.weight\)"):
        checkpoint.load(tmp_path / "l.ckpt", Classifier())
    target = Classifier()
    with pytest.warns(match="non-strictly"):
        checkpoint.load(tmp_path / "l.ckpt", target, strict=False)
    assert torch.equal(target.body[0].weight, source.body[0].weight)


def test_every_layout_is_read_with_weights_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    real = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: calls.append(k.get("weights_only")) or real(*a, **k))
    source, opt = _trained(0)
    for name, layout in LAYOUTS.items():
        torch.save(layout(source.state_dict(), opt.state_dict()), tmp_path / f"{name}.pt")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CheckpointWarning)
            checkpoint.load(tmp_path / f"{name}.pt", Classifier())
    assert calls == [True, True, True]


class HParams(dict):  # a dict subclass, as Lightning's AttributeDict: not allowed by a safe load
    pass


def test_a_layout_with_pickled_objects_is_refused_not_run(tmp_path: Path) -> None:
    source, opt = _trained(0)
    payload = _lightning(source.state_dict(), opt.state_dict())
    payload["hyper_parameters"] = HParams(lr=0.01)
    torch.save(payload, tmp_path / "l.ckpt")
    with pytest.raises(CheckpointError, match="weights_only=True"):
        checkpoint.load(tmp_path / "l.ckpt", Classifier())


def test_an_unknown_mapping_names_its_keys(tmp_path: Path) -> None:
    torch.save({"net": {"w": 1}, "step": 3}, tmp_path / "odd.pt")
    with pytest.raises(CheckpointError, match=r"holds a dict with keys 2 \(net, step\).*'model', 'state_dict', 'model_state_dict'"):
        checkpoint.load(tmp_path / "odd.pt", Classifier())
