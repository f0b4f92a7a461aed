"""The edits of the stage 1/5/6/7 rules: what they rewrite, that the result parses, and that they are idempotent."""

from __future__ import annotations

import ast
from types import SimpleNamespace

import pytest

from torchdoctor.check import check_source
from torchdoctor.check.fix import apply_fixes


def fix(source: str, code: str, settings: object | None = None) -> str:
    """Apply ``code``'s edits until none is left (overlapping edits take more than one pass)."""
    for _ in range(5):
        findings = [f for f in check_source(source, settings=settings) if f.code == code and f.edits]
        if not findings:
            return source
        source, fixed = apply_fixes(source, findings)
        assert fixed, "edits offered but none applied"
        ast.parse(source)
    raise AssertionError("fixes did not converge")


def codes(source: str, settings: object | None = None) -> list[tuple[int, str]]:
    return [(f.location.line, f.code) for f in check_source(source, settings=settings)]


# ---- TD601 --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("torch.cuda.amp.autocast()", 'torch.amp.autocast("cuda")'),
        ("torch.cuda.amp.autocast(enabled=use_amp)", 'torch.amp.autocast("cuda", enabled=use_amp)'),
        ("torch.cuda.amp.GradScaler(init_scale=1024)", 'torch.amp.GradScaler("cuda", init_scale=1024)'),
        ("torch.cpu.amp.autocast(dtype=torch.bfloat16)", 'torch.amp.autocast("cpu", dtype=torch.bfloat16)'),
        ("torch.cpu.amp.GradScaler()", 'torch.amp.GradScaler("cpu")'),
    ],
)
def test_td601_rewrites_to_torch_amp(before: str, after: str) -> None:
    src = f"import torch\nuse_amp = True\nx = {before}\n"
    fixed = fix(src, "TD601")
    assert fixed == f"import torch\nuse_amp = True\nx = {after}\n"
    assert "TD601" not in {c for _, c in codes(fixed)}


def test_td601_follows_import_aliases() -> None:
    src = ("import torch as th\nfrom torch.cuda.amp import autocast, GradScaler\n"
           "scaler = GradScaler()\nwith autocast(dtype=th.float16):\n    pass\n")
    fixed = fix(src, "TD601")
    assert 'scaler = th.amp.GradScaler("cuda")' in fixed
    assert 'with th.amp.autocast("cuda", dtype=th.float16):' in fixed


def test_td601_no_edit_when_positions_differ_or_torch_unbound() -> None:
    # positional `enabled` would become `dtype` in torch.amp.autocast: reported, not rewritten
    src = "import torch\nwith torch.cuda.amp.autocast(True):\n    pass\n"
    assert [f.edits for f in check_source(src) if f.code == "TD601"] == [()]
    # no name bound to the torch module: nothing to write the new call with
    src = "from torch.cuda.amp import autocast\nwith autocast():\n    pass\n"
    findings = [f for f in check_source(src) if f.code == "TD601"]
    assert len(findings) == 1 and findings[0].edits == ()


def test_td601_multiline_call() -> None:
    src = "import torch\nscaler = torch.cuda.amp.GradScaler(\n    enabled=True,\n)\n"
    assert fix(src, "TD601") == 'import torch\nscaler = torch.amp.GradScaler("cuda",\n    enabled=True,\n)\n'


# ---- TD502 / TD503 ----------------------------------------------------------------------


def test_td502_adds_cpu_map_location() -> None:
    src = "import torch\nstate = torch.load('ckpt.pt', weights_only=True)\n"
    assert fix(src, "TD502") == "import torch\nstate = torch.load('ckpt.pt', weights_only=True, map_location=\"cpu\")\n"


def test_td502_uses_the_device_variable_when_one_clearly_exists() -> None:
    src = ("import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
           "state = torch.load('ckpt.pt', weights_only=True)\n"
           "def restore(path, device):\n    return torch.load(path, weights_only=True)\n")
    fixed = fix(src, "TD502")
    assert "torch.load('ckpt.pt', weights_only=True, map_location=device)" in fixed
    assert "torch.load(path, weights_only=True, map_location=device)" in fixed


def test_td502_falls_back_to_cpu_when_device_is_not_yet_bound() -> None:
    src = ("import torch\nstate = torch.load('ckpt.pt', weights_only=True)\n"
           "device = torch.device('cpu')\n"
           "def f(path):\n    x = torch.load(path, weights_only=True)\n    device = 'cuda:0'\n    return x, device\n")
    fixed = fix(src, "TD502")
    assert "torch.load('ckpt.pt', weights_only=True, map_location=\"cpu\")" in fixed
    assert "torch.load(path, weights_only=True, map_location=\"cpu\")" in fixed


def test_td503_adds_weights_only_and_both_fixes_compose() -> None:
    src = "import torch\nsd = torch.load(\n    'ckpt.pt',\n)\n"
    once = fix(fix(src, "TD503"), "TD502")
    tree = ast.parse(once)
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call))
    assert sorted(k.arg for k in call.keywords) == ["map_location", "weights_only"]
    assert not [c for _, c in codes(once) if c in ("TD502", "TD503")]
    assert fix(once, "TD503") == once


def test_td503_weights_only_false_and_pickle_module_get_no_edit() -> None:
    src = "import torch, pickle\na = torch.load('a', map_location='cpu', weights_only=False)\n" \
          "b = torch.load('b', map_location='cpu', pickle_module=pickle)\n"
    findings = [f for f in check_source(src) if f.code == "TD503"]
    assert [f.location.line for f in findings] == [2, 3]
    assert all(f.edits == () for f in findings)


def test_td503_target_torch_26_reports_only_explicit_false() -> None:
    src = "import torch\na = torch.load('a', map_location='cpu')\nb = torch.load('b', map_location='cpu', weights_only=False)\n"
    assert [line for line, c in codes(src) if c == "TD503"] == [2, 3]
    new = SimpleNamespace(target_torch=(2, 6))
    assert [line for line, c in codes(src, new) if c == "TD503"] == [3]
    old = SimpleNamespace(target_torch=(2, 5))
    assert [line for line, c in codes(src, old) if c == "TD503"] == [2, 3]


def test_load_with_kwargs_is_never_given_a_keyword() -> None:
    src = "import torch\ndef f(path, **kw):\n    return torch.load(path, **kw)\n"
    assert not [c for _, c in codes(src) if c in ("TD502", "TD503")]


# ---- TD501 ------------------------------------------------------------------------------


_TD501 = """import torch
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = torch.nn.Linear(4, 2).to(device)
out = model(torch.randn(3, 4, device=device))
a = out.numpy()
b = out.detach().numpy()
c = out.cpu().numpy()
d = (out + 1).numpy()
"""


def test_td501_inserts_detach_cpu_before_numpy() -> None:
    fixed = fix(_TD501, "TD501")
    assert "a = out.detach().cpu().numpy()" in fixed
    assert "b = out.detach().cpu().numpy()" in fixed
    assert "c = out.cpu().detach().numpy()" in fixed
    assert "d = (out + 1).detach().cpu().numpy()" in fixed
    assert "TD501" not in {c for _, c in codes(fixed)}


def test_td501_quiet_after_detach_cpu_and_for_host_tensors() -> None:
    src = _TD501.split("a = ")[0] + "a = out.detach().cpu().numpy()\nh = torch.ones(3).numpy()\n"
    assert "TD501" not in {c for _, c in codes(src)}


# ---- determinism ---------------------------------------------------------------------------


def test_same_findings_every_run() -> None:
    from pathlib import Path

    root = Path(__file__).parent / "fixtures"
    for path in sorted(root.glob("TD[1567]*/*.py")):
        src = path.read_text("utf-8")
        first = check_source(src, str(path))
        assert first == check_source(src, str(path)), path
