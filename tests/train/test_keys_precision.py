"""Wrapper prefixes (module., _orig_mod.) and the precision choice: pure functions."""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch import nn

from torchdoctor.errors import UsageError
from torchdoctor.train.keys import reconcile_keys, unwrap_model
from torchdoctor.train.precision import autocast_context, make_scaler, resolve_precision


def test_identical_keys_need_no_renaming() -> None:
    report = reconcile_keys(["a.weight", "a.bias"], ["a.weight", "a.bias"])
    assert report.renames == {} and report.note == ""


def test_module_prefix_in_the_file_is_stripped() -> None:
    report = reconcile_keys(["module.a.weight", "module.a.bias"], ["a.weight", "a.bias"])
    assert report.renames == {"module.a.weight": "a.weight", "module.a.bias": "a.bias"}
    assert "stripped the prefix 'module.'" in report.note and "TD205" in report.note


def test_compiled_and_wrapped_prefixes_are_stripped_together() -> None:
    report = reconcile_keys(["_orig_mod.module.w"], ["w"])
    assert report.rename("_orig_mod.module.w") == "w"
    # Both wrappers are named as such (TD205), not taken for a LightningModule's attribute.
    assert report.note.startswith("stripped the prefix '_orig_mod.module.' on 1 key(s)") and "TD205" in report.note


def test_prefix_the_model_has_is_added() -> None:
    report = reconcile_keys(["w", "b"], ["module.w", "module.b"])
    assert report.rename("w") == "module.w" and "added the prefix 'module.'" in report.note


def test_the_note_says_what_changed_and_why() -> None:
    stripped = reconcile_keys(["module.a.weight", "module.a.bias"], ["a.weight", "a.bias"]).note
    assert stripped == ("stripped the prefix 'module.' on 2 key(s) to match the model "
                        "(the file was saved from a DataParallel/DDP/compiled wrapper, TD205)")
    assert reconcile_keys(["w"], ["module.w"]).note == "added the prefix 'module.' on 1 key(s) to match the model"
    replaced = reconcile_keys(["module.w"], ["_orig_mod.w"])
    assert replaced.rename("module.w") == "_orig_mod.w"
    assert replaced.note.startswith("replaced the prefix 'module.' with '_orig_mod.' on 1 key(s)")


def test_a_file_with_some_keys_already_right_renames_the_others() -> None:
    report = reconcile_keys(["a.bias", "module.a.weight", "b"], ["a.weight", "a.bias", "b"])
    assert report.renames == {"module.a.weight": "a.weight"}


def test_a_rename_never_lands_on_a_key_the_file_already_has() -> None:
    # "module.w" would become "w", which the file holds already: that is two weights, not a prefix.
    assert reconcile_keys(["module.w", "w"], ["w"]).renames == {}


def test_unrelated_keys_are_left_for_the_mismatch_report() -> None:
    report = reconcile_keys(["encoder.w"], ["decoder.w"])
    assert report.renames == {}


def test_the_name_of_an_owning_module_is_stripped() -> None:
    # A LightningModule saved with its net as self.model: "model.w"; its loss's buffers stay as they are.
    report = reconcile_keys(["model.w", "model.b", "loss.weight"], ["w", "b"])
    assert report.renames == {"model.w": "w", "model.b": "b"}
    assert report.note.startswith("stripped the prefix 'model.' on 2 key(s)")
    # A file that already holds one of the model's keys as it is gets no owner stripped (that would be a guess).
    assert reconcile_keys(["w", "model.w", "model.b"], ["w", "b"]).renames == {}


def test_ambiguous_model_keys_are_not_guessed() -> None:
    # "module.w" and "w" canonicalise to the same key: renaming would be a guess.
    assert reconcile_keys(["_orig_mod.w"], ["module.w", "w"]).renames == {}


def test_unwrap_model_sees_through_data_parallel() -> None:
    inner = nn.Linear(2, 2)
    assert unwrap_model(nn.DataParallel(inner)) is inner  # noqa: TD204
    assert unwrap_model(inner) is inner


def test_unwrap_model_sees_through_torch_compile_and_data_parallel_together() -> None:
    inner = nn.Linear(2, 2)
    compiled = torch.compile(inner)  # compiles lazily, on the first call: never called here
    assert unwrap_model(compiled) is inner
    assert unwrap_model(nn.DataParallel(compiled)) is inner  # noqa: TD204


@pytest.mark.parametrize(
    ("requested", "device", "bf16", "expected"),
    [
        ("auto", "cpu", None, "fp32"),
        ("auto", "mps", None, "fp32"),
        ("auto", "cuda", True, "bf16"),
        ("auto", "cuda", False, "fp16"),
        (None, "cuda", True, "bf16"),
        ("bf16-mixed", "cpu", None, "bf16"),
        ("16", "cuda", True, "fp16"),
        ("float32", "cuda", True, "fp32"),
    ],
)
def test_precision_choice(requested: str, device: str, bf16: bool, expected: str) -> None:
    assert resolve_precision(requested, device, bf16_supported=bf16) == expected


def test_unknown_precision_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown precision 'fp8'"):
        resolve_precision("fp8", "cpu")
    with pytest.raises(UsageError, match="meta"):
        resolve_precision("bf16", "meta")


def test_grad_scaler_only_for_fp16_and_autocast_off_for_fp32() -> None:
    cpu = torch.device("cpu")
    assert make_scaler(cpu, "fp32") is None and make_scaler(cpu, "bf16") is None
    assert isinstance(make_scaler(cpu, "fp16"), torch.amp.GradScaler)
    assert isinstance(autocast_context(cpu, "fp32"), contextlib.nullcontext)
    with autocast_context(cpu, "bf16"):
        out = nn.Linear(4, 4)(torch.ones(1, 4))
    assert out.dtype == torch.bfloat16
