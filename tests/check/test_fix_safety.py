"""Safe fixes are proven by running the fixed code; unsafe ones are applied only when asked.

Each script below is fixed by ``torchdoctor check --fix`` (the safe fixes only), then run with torch
on the CPU in a subprocess: it must run and print what the fixed program should print.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

from torchdoctor.check.runner import Mode, check_file  # noqa: E402
from torchdoctor.config import Settings  # noqa: E402

FIXABLE = {
    "TD601": """\
        import torch
        scaler = torch.cuda.amp.GradScaler(enabled=False)
        with torch.cuda.amp.autocast(enabled=False):
            y = torch.ones(2) * 2
        print(type(scaler).__module__, float(y.sum()))
        """,
    "TD501": """\
        import torch
        model = torch.nn.Linear(3, 1)
        out = model(torch.ones(1, 3))
        print(out.numpy().shape)
        """,
    "TD301": """\
        import torch
        device = torch.device("cpu")
        x = torch.ones(2, dtype=torch.float64)
        x.to(device)
        print(x.device.type, x.dtype)
        """,
    "TD203": """\
        import torch
        import torch.nn as nn

        class Normalize(nn.Module):
            def __init__(self):
                super().__init__()
                self.mean = torch.tensor([0.5, 0.5])

            def forward(self, x):
                return x - self.mean

        m = Normalize()
        print(m(torch.ones(2)).tolist(), m.to("meta").mean.device.type, sorted(m.state_dict()))
        """,
    "TD502+TD503": """\
        import os, tempfile
        import torch
        model = torch.nn.Linear(2, 2)
        path = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
        torch.save({"model": model.state_dict(), "epoch": 3}, path)
        ckpt = torch.load(path)
        model.load_state_dict(ckpt["model"])
        print(ckpt["epoch"])
        """,
}
EXPECTED = {
    "TD601": "torch.amp.grad_scaler 4.0",
    "TD501": "(1, 1)",
    "TD301": "cpu torch.float64",
    "TD203": "[0.5, 0.5] meta []",
    "TD502+TD503": "3",
}


def _fix(tmp_path: Path, name: str, source: str, *, unsafe: bool = False) -> tuple[str, list]:
    path = tmp_path / f"{name.replace('+', '_')}.py"
    path.write_text(textwrap.dedent(source))
    result = check_file(str(path), Settings(root=str(tmp_path)), Mode(fix=True, unsafe_fixes=unsafe))
    assert not result.errors, result.errors
    return path.read_text(), result.findings


def _run(tmp_path: Path, text: str, env: dict | None = None) -> subprocess.CompletedProcess:
    import os

    script = tmp_path / "run_me.py"
    script.write_text(text)
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, **(env or {})})


@pytest.mark.slow
@pytest.mark.parametrize("codes", sorted(FIXABLE))
def test_every_safe_fix_leaves_code_that_runs(tmp_path: Path, codes: str) -> None:
    before = textwrap.dedent(FIXABLE[codes])
    fixed, remaining = _fix(tmp_path, codes, before)
    assert fixed != before, "the fix changed nothing"
    assert not [f for f in remaining if f.code in codes.split("+") and f.fixable], "a fixable finding remains"
    proc = _run(tmp_path, fixed)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == EXPECTED[codes]


WHOLE_MODEL = """\
    import os, tempfile
    import torch
    path = os.path.join(tempfile.mkdtemp(), "model.pt")
    torch.save(torch.nn.Linear(2, 2), path)
    model = torch.load(path, map_location="cpu", weights_only=False)
    print(type(model).__name__)
    again = torch.load(path, map_location="cpu")
    print(again.weight.shape)
    """


@pytest.mark.slow
def test_weights_only_is_an_unsafe_fix_where_a_whole_model_is_loaded(tmp_path: Path) -> None:
    source = textwrap.dedent(WHOLE_MODEL)
    fixed, findings = _fix(tmp_path, "whole", source)
    load = [f for f in findings if f.code == "TD503" and f.location.line == 7]
    assert load and load[0].unsafe_fixable and not load[0].fixable
    assert fixed == source  # --fix alone leaves it
    old_default = {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}  # torch < 2.6 behaviour: a bare load unpickles
    assert _run(tmp_path, fixed, old_default).returncode == 0
    forced, _ = _fix(tmp_path, "whole", source, unsafe=True)
    assert "weights_only=True" in forced.splitlines()[6]
    proc = _run(tmp_path, forced, old_default)  # this is why it is unsafe: the safe loader refuses a module
    assert proc.returncode != 0 and "Weights only load failed" in proc.stderr


def test_load_fixes_are_unsafe_unless_a_state_dict_is_loaded() -> None:
    from torchdoctor.check import check_source

    src = textwrap.dedent("""\
        import torch
        sd = torch.load("a.pt")
        net.load_state_dict(sd)
        t = torch.load("b.pt")
        y = t + 1
        """)
    found = {(f.location.line, f.code): f for f in check_source(src, "x.py")}
    assert found[(2, "TD503")].fixable and found[(4, "TD503")].unsafe_fixable
    saves_args = src + 'torch.save({"args": args, "model": net.state_dict()}, "c.pt")\n'
    found = {(f.location.line, f.code): f for f in check_source(saves_args, "x.py")}
    assert found[(2, "TD503")].unsafe_fixable  # the file pickles a Namespace: the safe loader would refuse it


def test_weights_only_is_unsafe_where_an_item_of_the_load_is_used_as_an_object() -> None:
    """``model = torch.load("waveglow.pt")["model"]``, then ``model.remove_weightnorm(model)``: the checkpoint holds a
    pickled module under a key, which the safe loader refuses. An item handed to ``load_state_dict`` is a state dict."""
    from torchdoctor.check import check_source

    src = textwrap.dedent("""\
        import torch
        model = torch.load("waveglow.pt", map_location="cpu")["model"]
        net = model.remove_weightnorm(model)
        state = torch.load("ckpt.pt", map_location="cpu")["state_dict"]
        net.load_state_dict(state)
        """)
    found = {(f.location.line, f.code): f for f in check_source(src, "x.py")}
    assert found[(2, "TD503")].unsafe_fixable and not found[(2, "TD503")].fixable
    assert found[(4, "TD503")].fixable
