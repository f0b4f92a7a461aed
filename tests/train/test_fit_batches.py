"""fit() on any batch: (inputs, targets, *rest), mappings called as model(**batch) with HF-style outputs, step_fn."""

from __future__ import annotations

import io
import sys
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch import nn

from torchdoctor.errors import InputError, UsageError
from torchdoctor.train import fit
from torchdoctor.train.batches import Objective
from tests.train.conftest import Net, make_data, make_run

CE = nn.CrossEntropyLoss()


@dataclass
class CausalOutput:
    """The shape of a HuggingFace ModelOutput: attributes, loss None without labels."""

    logits: torch.Tensor
    loss: torch.Tensor | None = None


class TinyLM(nn.Module):
    """Called as model(input_ids=..., labels=...), like a HuggingFace model; returns .loss when given labels."""

    def __init__(self, as_dict: bool = False) -> None:
        super().__init__()
        self.net, self.as_dict = Net(), as_dict
        self.calls: list[set[str]] = []

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None, mask: Any = None) -> Any:
        self.calls.append({"input_ids", *(["labels"] if labels is not None else []), *(["mask"] if mask is not None else [])})
        logits = self.net(input_ids)
        loss = CE(logits, labels) if labels is not None else None
        if self.as_dict:
            return {"logits": logits, "loss": loss}
        return CausalOutput(logits, loss)


def _dict_batches(n: int = 96, size: int = 16) -> list[dict[str, Any]]:
    data = make_data(n)
    x, y = data.tensors
    return [{"input_ids": x[i : i + size], "labels": y[i : i + size], "mask": "all"} for i in range(0, n, size)]


def _accuracy(output: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    logits = output["logits"] if isinstance(output, dict) else output.logits
    return (logits.argmax(1) == batch["labels"]).float().mean()


@pytest.mark.parametrize("as_dict", [False, True], ids=["attribute-loss", "key-loss"])
def test_mapping_batches_call_the_model_with_keywords_and_use_its_loss(as_dict: bool) -> None:
    torch.manual_seed(0)
    model = TinyLM(as_dict)
    batches = _dict_batches()
    history = fit(model, batches, optimizer=torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9), epochs=4,
                  val_loader=batches, metrics={"acc": _accuracy}, progress=False)  # fmt: skip
    assert model.calls[0] == {"input_ids", "labels", "mask"}  # every key became a keyword argument
    assert history["train_loss"][-1] < history["train_loss"][0]
    assert history["val_acc"][-1] > 0.7 and "val_loss" in history.columns


def test_mapping_batches_with_a_loss_fn_get_output_and_batch() -> None:
    torch.manual_seed(0)
    model = TinyLM()
    seen: list[tuple[type, set[str]]] = []

    def loss_fn(output: CausalOutput, batch: dict[str, Any]) -> torch.Tensor:
        seen.append((type(output), set(batch)))
        return CE(output.logits, batch["labels"]) * 2
    history = fit(model, _dict_batches(), loss_fn=loss_fn, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                  epochs=1, progress=False)  # fmt: skip
    assert seen[0] == (CausalOutput, {"input_ids", "labels", "mask"}) and len(seen) == 6
    assert history["train_loss"][0] > 1.5  # twice the cross-entropy of 3 classes: loss_fn's value was used


def test_an_output_without_a_loss_is_a_clear_error() -> None:
    model = TinyLM()
    batches = [{"input_ids": b["input_ids"]} for b in _dict_batches()]
    with pytest.raises(InputError, match=r"returned CausalOutput with loss=None \(the batch has no 'labels' key\)"):
        fit(model, batches, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), epochs=1, progress=False)
    plain, opt, train, _ = make_run()
    with pytest.raises(InputError, match=r"no loss_fn and the model's output \(Tensor\) has no \.loss"):
        fit(plain, train, optimizer=opt, epochs=1, progress=False)


def test_step_fn_replaces_forward_and_loss_bit_for_bit() -> None:
    model_a, opt_a, train, val = make_run(seed=1)
    fit(model_a, train, loss_fn=CE, optimizer=opt_a, epochs=2, val_loader=val, progress=False)
    model_b, opt_b, train, val = make_run(seed=1)
    calls: list[bool] = []

    def step(model: nn.Module, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        calls.append(torch.is_grad_enabled())
        x, y = batch
        out = model(x)
        return CE(out, y), out
    fit(model_b, train, step_fn=step, optimizer=opt_b, epochs=2, val_loader=val,
        metrics={"acc": lambda out, batch: (out.argmax(1) == batch[1]).float().mean()}, progress=False)  # fmt: skip
    for a, b in zip(model_a.parameters(), model_b.parameters()):
        assert torch.equal(a, b)
    assert calls == ([True] * 6 + [False] * 3) * 2  # training steps with autograd, validation without


def test_step_fn_mistakes_are_clear_errors(run: Any) -> None:
    model, opt, train, _ = run
    with pytest.raises(UsageError, match="loss_fn or step_fn, not both"):
        fit(model, train, loss_fn=CE, step_fn=lambda m, b: CE(m(b[0]), b[1]), optimizer=opt, epochs=1, progress=False)
    with pytest.raises(InputError, match="step_fn must give the loss as a tensor; it gave a float"):
        fit(model, train, step_fn=lambda m, b: 0.5, optimizer=opt, epochs=1, progress=False)
    with pytest.raises(InputError, match=r"metrics need the model's output: return \(loss, output\) from step_fn"):
        fit(model, train, step_fn=lambda m, b: CE(m(b[0]), b[1]), optimizer=opt, epochs=1,
            metrics={"acc": lambda o, b: 1.0}, progress=False)  # fmt: skip
    none_reduced = nn.CrossEntropyLoss(reduction="none")
    with pytest.raises(InputError, match=r"loss_fn gave a loss of shape \(16,\), not one number"):
        fit(model, train, loss_fn=none_reduced, optimizer=opt, epochs=1, progress=False)


def test_extra_items_after_inputs_and_targets_are_left_alone() -> None:
    data = make_data(32)
    x, y = data.tensors
    batches = [(x[i : i + 8], y[i : i + 8], torch.arange(i, i + 8), ["id"] * 8) for i in range(0, 32, 8)]
    model_a, opt_a, _, _ = make_run(seed=2)
    fit(model_a, batches, loss_fn=CE, optimizer=opt_a, epochs=1, progress=False)
    model_b, opt_b, _, _ = make_run(seed=2)
    fit(model_b, [b[:2] for b in batches], loss_fn=CE, optimizer=opt_b, epochs=1, progress=False)
    for a, b in zip(model_a.parameters(), model_b.parameters()):
        assert torch.equal(a, b)


def test_objective_sends_targets_to_the_output_device_of_a_spread_model() -> None:
    weighted = nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0, 3.0]))
    objective = Objective(weighted, None, torch.device("cpu"), follow_output=True)
    assert weighted.weight.device.type == "cpu"  # not moved up front: the output's device is not known yet

    def last_stage_on_meta(x: torch.Tensor) -> torch.Tensor:
        return torch.zeros(x.shape[0], 3, device="meta", requires_grad=True)
    loss, output, target = objective(last_stage_on_meta, (torch.zeros(4, 8), torch.zeros(4, dtype=torch.long)))
    assert target.device.type == output.device.type == loss.device.type == "meta"
    assert weighted.weight.device.type == "meta"  # the loss's weights followed the output (TD406)


def test_without_tqdm_fit_prints_plain_lines(monkeypatch: pytest.MonkeyPatch, run: Any) -> None:
    monkeypatch.setitem(sys.modules, "tqdm", None)  # `import tqdm` now raises ImportError, as if not installed
    model, opt, train, val = run
    stream = io.StringIO()
    fit(model, train, loss_fn=CE, optimizer=opt, epochs=2, val_loader=val, log_every=2, progress=stream)
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("epoch 1/2: 6/6 batches, loss=") and "samples_s=" in lines[0]
    assert lines[1].startswith("epoch 1/2: step=6, train_loss=") and "val_loss=" in lines[1]
    assert lines[2].startswith("epoch 2/2: 6/6 batches") and len(lines) == 4
