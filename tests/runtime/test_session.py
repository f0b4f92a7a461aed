"""The watch changes nothing: same losses bit for bit, every hook removed, no user object kept."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from torch import nn
from torch.nn.modules import module as module_mod
from torch.optim import optimizer as optim_mod
from torch.utils.data import dataloader as dl

import torchdoctor
from torchdoctor.errors import TorchDoctorError
from tests.runtime.loops import setup, train_epoch


def _globals():
    return {
        "pre": dict(module_mod._global_forward_pre_hooks),
        "fwd": dict(module_mod._global_forward_hooks),
        "always": dict(module_mod._global_forward_hooks_always_called),
        "opt_pre": dict(optim_mod._global_optimizer_pre_hooks),
        "opt_post": dict(optim_mod._global_optimizer_post_hooks),
        "call": nn.Module.__dict__["__call__"],
        "backward": torch.autograd.backward,
        "grad": torch.autograd.grad,
        "save": torch.save,
        "iter_init": dl._BaseDataLoaderIter.__dict__["__init__"],
        "iter_next": dl._BaseDataLoaderIter.__dict__["__next__"],
        "apply": nn.Module.__dict__["_apply"],
        "train": nn.Module.__dict__["train"],
        "load": nn.Module.__dict__["load_state_dict"],
    }


def _run(watched: bool) -> list[float]:
    model, opt, train, _ = setup()
    if not watched:
        return train_epoch(model, opt, train) + train_epoch(model, opt, train)
    with torchdoctor.watch(environment=False):
        return train_epoch(model, opt, train) + train_epoch(model, opt, train)


def test_losses_are_bitwise_identical_with_and_without_watch():
    plain, watched = _run(False), _run(True)
    assert len(plain) == 16
    assert [torch.tensor(v).double().item() for v in plain] == [torch.tensor(v).double().item() for v in watched]
    assert plain == watched


def test_everything_is_removed_on_exit_also_after_an_exception():
    before = _globals()
    model, opt, train, _ = setup()
    with pytest.raises(ValueError):
        with torchdoctor.watch(environment=False):
            assert _globals() != before  # installed
            train_epoch(model, opt, train)
            raise ValueError("user error")
    assert _globals() == before


def test_no_reference_to_user_objects_outlives_the_session():
    model, opt, train, _ = setup()
    with torchdoctor.watch(environment=False) as s:
        train_epoch(model, opt, train)
        x = next(iter(train))[0]
        model(x)
    refs = [weakref.ref(model), weakref.ref(opt), weakref.ref(x)]
    del model, opt, train, x
    gc.collect()
    assert [r() for r in refs] == [None, None, None]
    assert {f.code for f in s.findings} == {"TD401", "TD402"}  # the last forward was an evaluation in train mode


def test_a_second_watch_is_refused_with_a_clear_error():
    with torchdoctor.watch(environment=False):
        with pytest.raises(TorchDoctorError, match="already active"):
            with torchdoctor.watch(environment=False):
                pass
    with torchdoctor.watch(environment=False):  # and the first one released the slot
        pass


def test_watch_narrowed_to_one_model_ignores_others():
    model, opt, train, val = setup()
    other = nn.Sequential(nn.Linear(8, 2), nn.Dropout(0.5))
    with torchdoctor.watch(model=model, optimizer=opt, environment=False) as s:
        train_epoch(model, opt, train)
        for x, _y in val:
            other(x)  # would be TD401/TD402 if it were watched
    assert s.findings == []


def test_report_formats():
    model, opt, train, _ = setup()
    with torchdoctor.watch(environment=False) as s:
        train_epoch(model, opt, train, zero=False)
    import json

    doc = json.loads(s.report("json"))
    assert [f["code"] for f in doc["findings"]] == ["TD404"] and doc["stats"]["steps"] == 8
    assert len(doc["stats"]["timeline"]) == 8
    assert "TD404" in s.report("text")
    page = s.report("html")
    assert "<svg" in page and "TD404" in page and "<script" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")


PROGRAM = """
import sys, torch
from torch import nn
import torchdoctor
real = nn.Module.__call__
assert "torch._dynamo" not in sys.modules
with torchdoctor.watch(environment=False):
    torch.compile(nn.Linear(2, 2), backend="eager")(torch.randn(1, 2))  # dynamo first imported here
import torch._dynamo.utils as utils, torch._dynamo.variables.nn_module as nn_module
print(utils.unpatched_nn_module_call is real, nn_module.unpatched_nn_module_call is real, nn.Module.__call__ is real)
"""


@pytest.mark.slow
def test_dynamo_imported_during_the_watch_keeps_the_real_module_call():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True", "True"]


def test_the_backward_wrapper_has_the_parameters_of_torch_autograd_backward():
    """hot.backward spells out torch's parameters (a call with *args/**kwargs packs and unpacks them at every step):
    they must stay those of the installed torch, defaults included."""
    import inspect

    real = inspect.signature(torch.autograd.backward)
    with torchdoctor.watch(environment=False):
        wrapper = inspect.signature(torch.autograd.backward, follow_wrapped=False)
        x = torch.ones(2, requires_grad=True)
        (x * 3).sum().backward(inputs=[x], retain_graph=True)
        assert x.grad.tolist() == [3.0, 3.0]
    assert [(p.name, p.default, p.kind) for p in wrapper.parameters.values()] == \
        [(p.name, p.default, p.kind) for p in real.parameters.values()]
