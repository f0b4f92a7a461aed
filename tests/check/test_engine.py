"""The engine: dispatch to rules, enabled codes, per-file ignores, the torch gate, rule crashes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.check.fake_rules import fake_rules  # noqa: F401 - a fixture
from torchdoctor.check.engine import RuleError, analyse, check_source, may_be_torch
from torchdoctor.check.runner import Mode, check_file, check_files
from torchdoctor.config import Settings

SRC = 'import torch\nm = net.cuda()\nx = torch.load("w.pt")\n'


def codes(findings) -> list[tuple[int, str]]:
    return [(f.location.line, f.code) for f in findings]


def test_rules_see_nodes_and_report(fake_rules) -> None:
    assert codes(check_source(SRC, "a.py")) == [(2, "TD102"), (3, "TD502")]


def test_enabled_limits_codes(fake_rules) -> None:
    assert codes(check_source(SRC, "a.py", enabled={"TD502"})) == [(3, "TD502")]
    assert check_source(SRC, "a.py", enabled=set()) == []


def test_settings_selection_applies_when_enabled_is_not_given(fake_rules) -> None:
    settings = Settings(ignore=("TD1",))
    assert codes(check_source(SRC, "a.py", settings=settings)) == [(3, "TD502")]


def test_multi_code_rule_runs_when_only_its_second_code_is_selected(fake_rules) -> None:
    src = "import torch\nFLAG_MODULE = 1\n"
    assert codes(check_source(src, "a.py", enabled={"TD203"})) == [(1, "TD203")]


def test_per_file_ignores_match_relative_to_root(fake_rules, tmp_path: Path) -> None:
    settings = Settings(per_file_ignores=(("tests/**", ("TD102",)), ("*_old.py", ("TD5",))), root=str(tmp_path))
    assert codes(check_source(SRC, str(tmp_path / "tests" / "t.py"), settings=settings)) == [(3, "TD502")]
    assert codes(check_source(SRC, str(tmp_path / "src" / "x_old.py"), settings=settings)) == [(2, "TD102")]
    assert len(check_source(SRC, str(tmp_path / "src" / "x.py"), settings=settings)) == 2


def test_rule_crash_propagates_from_check_source(fake_rules) -> None:
    with pytest.raises(ZeroDivisionError):
        check_source("import torch\nboom()\n", "a.py")


def test_rule_crash_is_recorded_and_other_rules_go_on(fake_rules) -> None:
    errors: list[RuleError] = []
    found = analyse("import torch\nboom()\nboom()\nnet.cuda()\n", "a.py", errors=errors)
    assert codes(found) == [(4, "TD102")]
    assert len(errors) == 1  # the failing rule is switched off for the rest of the file
    assert "internal error in rule TD704 at line 2: ZeroDivisionError: boom" in str(errors[0])


def test_file_with_rule_crash_reports_path_and_rule(fake_rules, tmp_path: Path) -> None:
    f = tmp_path / "a.py"
    f.write_text("import torch\nboom()\nnet.cuda()\n")
    result = check_file(str(f))
    assert codes(result.findings) == [(3, "TD102")]
    assert result.errors == [f"{f}: internal error in rule TD704 at line 2: ZeroDivisionError: boom"]


def test_torch_gate() -> None:
    assert may_be_torch("import torch\n")
    assert may_be_torch("from torchvision import models\n")
    assert may_be_torch("model.cuda()\n")
    assert not may_be_torch("import numpy as np\nx = np.zeros(3)\n")


def test_gate_skips_rules_on_non_torch_files_but_still_parses(fake_rules, tmp_path: Path) -> None:
    plain = tmp_path / "plain.py"
    plain.write_text("import jax\nx = something.load()\nboom()\n")
    assert check_file(str(plain)).errors == []
    ungated = check_file(str(plain), mode=Mode(gate=False))
    assert any("TD704" in e for e in ungated.errors)
    broken = tmp_path / "broken.py"
    broken.write_text("x = (\n")
    assert "syntax error" in check_file(str(broken)).errors[0]


def test_findings_sorted_and_deterministic(fake_rules) -> None:
    src = "import torch\nb.cuda(); a.cuda()\nx = torch.load('f')\n"
    first = check_source(src, "a.py")
    assert [(f.location.line, f.location.column) for f in first] == [(2, 1), (2, 11), (3, 5)]
    assert first == check_source(src, "a.py")


def test_parallel_results_equal_serial(fake_rules, tmp_path: Path) -> None:
    paths = []
    for i in range(60):
        p = tmp_path / f"m{i:02d}.py"
        p.write_text("import torch\n" + "net.cuda()\n" * (i % 3) + ("boom()\n" if i == 7 else ""))
        paths.append(str(p))
    serial = check_files(paths, jobs=1)
    parallel = check_files(paths, jobs=2)
    assert [(r.path, r.findings, r.errors) for r in parallel] == [(r.path, r.findings, r.errors) for r in serial]
    assert sum(len(r.findings) for r in serial) == 60
    assert [len(r.errors) for r in serial].count(1) == 1


def test_syntax_warnings_are_not_printed(fake_rules, tmp_path: Path, capfd) -> None:
    p = tmp_path / "w.py"
    p.write_text('import torch\nre = "\\d"\n')
    assert check_file(str(p)).errors == []
    assert "SyntaxWarning" not in capfd.readouterr().err


DDP_CUDA = '''\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
model = DDP(torch.nn.Linear(2, 2).cuda())
ckpt = torch.load("ckpt.pt")
'''


def test_one_construct_one_finding_most_specific_first() -> None:
    found = check_source(DDP_CUDA, "train.py")
    cuda = [f for f in found if f.location.line == 6]
    load = [f for f in found if f.location.line == 7]
    assert [(f.code, f.related) for f in cuda] == [("TD705", ("TD101", "TD102"))]
    assert "also TD101" in cuda[0].message and "TD102" in cuda[0].message and "\n" not in cuda[0].message
    assert [(f.code, f.related) for f in load] == [("TD503", ("TD502",))]
    # the fixes of every folded code come along, combined where they insert at one point
    assert [e.replacement for e in load[0].edits] == [', weights_only=True, map_location="cpu"']


def test_the_next_code_leads_when_the_first_is_ignored_or_silenced() -> None:
    ignored = check_source(DDP_CUDA, "train.py", enabled={"TD101", "TD102", "TD502"})
    assert [(f.location.line, f.code, f.related) for f in ignored] == [(6, "TD101", ("TD102",)), (7, "TD502", ())]
    silenced = check_source(DDP_CUDA.replace(".cuda())", ".cuda())  # noqa: TD705, TD101"), "train.py")
    assert [(f.code, f.related) for f in silenced if f.location.line == 6] == [("TD102", ())]


CHAINED_CUDA = '''import torch
from losses import ContrastLoss

loss_fn = ContrastLoss(
    out_dim=256,
    temperature=0.1,
).cuda()
'''


def test_a_method_chained_after_a_multi_line_call_is_reported_where_it_is_written() -> None:
    """``Loss(\\n...\\n).cuda()``: the finding is at ``.cuda()`` (line 7, where a noqa goes) and names it,
    not at the receiver's first line as ``Loss(...)``."""
    found = check_source(CHAINED_CUDA, "train.py")
    cuda = [f for f in found if f.code == "TD101"]
    assert [(f.location.line, f.location.column) for f in cuda] == [(7, 3)]
    assert "`ContrastLoss(...).cuda()`" in cuda[0].message
    silenced = check_source(CHAINED_CUDA.replace(").cuda()", ").cuda()  # noqa: TD101, TD102"), "train.py")
    assert not [f for f in silenced if f.code in ("TD101", "TD102")]


def test_a_long_call_is_named_with_the_methods_chained_after_it() -> None:
    """A message names ``torch.eq(...).sum().data[0]`` and ``torch.FloatTensor(...).zero_().cuda()``: the call's
    arguments collapse, the chain after it stays (it says what is read or moved); a multi-line tail does not."""
    from torchdoctor.check.semantic.text import short

    assert short("torch.eq(predictions, targets).sum().data[0]") == "torch.eq(...).sum().data[0]"
    assert short("torch.FloatTensor(batch_size, hidden_size).zero_()") == "torch.FloatTensor(...).zero_()"
    assert short("build_criterion(dict(name=args.kd_method, margin=m)).cuda(non_blocking=True, device=dev)") \
        == "build_criterion(...)"  # (the tail alone is too long)
    assert short("model(\n    x,\n)") == "model(...)"
    assert short("model(x)") == "model(x)"


def test_an_element_tested_per_step_is_told_to_copy_its_tensor_once() -> None:
    """``if same[i]:`` and ``if not same[i]:`` in a per-step helper: the fix names the tensor to copy once, not a
    legacy ``.data[0]`` read (which once crashed the rule on such a test)."""
    path = Path(__file__).parent / "fixtures" / "TD603" / "element_of_a_device_tensor_tested_bare_in_a_helper.py"
    found = [f for f in check_source(path.read_text(), str(path)) if f.code == "TD603"]
    assert [f.location.line for f in found] == [14, 16, 18]
    assert all("to the host once (`.tolist()`)" in (f.fix or "") for f in found), [f.fix for f in found]


VOLATILE = '''import torch
from torch.autograd import Variable

G = torch.nn.Linear(4, 4).cuda()
G.eval()
z = Variable(torch.randn(8, 4).cuda(), volatile=True)
samples = G(z)
for x, y in torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4), torch.randn(8, 4))):
    out = G(Variable(x.cuda(), volatile=True))
    plain = G(x.cuda())
'''


def test_a_forward_of_a_volatile_input_says_volatile_no_longer_turns_autograd_off() -> None:
    """PyTorch 0.3 code that meant to run without autograd (``Variable(z, volatile=True)``): TD401 holds on PyTorch
    0.4 and later, and its message says why the author may think otherwise; a forward of a plain input says nothing
    of it."""
    found = {f.location.line: f.message for f in check_source(VOLATILE, "sample.py") if f.code == "TD401"}
    assert sorted(found) == [7, 9, 10]
    assert "volatile=True" in found[7] and "before PyTorch 0.4" in found[7]
    assert "volatile=True" in found[9]
    assert "volatile" not in found[10]


def test_a_loader_called_through_an_alias_is_named_by_it() -> None:
    """``loader(ds, 32)`` of ``loader = DataLoader``: the message names the call the user wrote, not "DataLoader"."""
    path = Path(__file__).parent / "fixtures" / "TD304" / "loader_class_chosen_into_a_name_and_handed_on.py"
    found = [f for f in check_source(path.read_text(), str(path)) if f.code == "TD304"]
    assert [f.location.line for f in found] == [19]
    assert found[0].message.startswith("`loader(...)` (a DataLoader) without `pin_memory=True`"), found[0].message


GLUON_EVAL = '''import mxnet as mx
from mxnet import gluon
from torchvision import transforms

transform_test = transforms.Compose([transforms.ToTensor()])


def evaluate(net, val_data, ctx):
    metric = mx.metric.Accuracy()
    for batch in val_data:
        data = gluon.utils.split_and_load(batch.data[0], ctx_list=ctx)
        outputs = [net(x) for x in data]
        metric.update(batch.label, outputs)
    net.save_parameters("net.params")
    return metric.get()
'''


def test_another_frameworks_code_borrowing_a_torchvision_transform_is_not_judged(tmp_path: Path) -> None:
    """An MXNet (Gluon) script that imports torchvision for its transforms only: its models build no autograd
    graph outside ``autograd.record()``, and PyTorch's pitfalls are not its own (the gate leaves it out). The same
    loop with torch imported is judged, and so is the Gluon file with the gate off."""
    torch_eval = GLUON_EVAL.replace("import mxnet as mx", "import mxnet as mx\nimport torch").replace(
        "outputs = [net(x) for x in data]", "outputs = net(batch.data[0].cuda())")
    gluon, mixed = tmp_path / "gluon.py", tmp_path / "mixed.py"
    gluon.write_text(GLUON_EVAL.replace("outputs = [net(x) for x in data]", "outputs = net(batch.data[0].cuda())"))
    mixed.write_text(torch_eval)
    assert check_file(str(gluon)).findings == []
    assert "TD401" in {f.code for f in check_file(str(mixed)).findings}
    assert "TD401" in {f.code for f in check_file(str(gluon), mode=Mode(gate=False)).findings}


def test_a_long_receiver_is_named_by_its_head_never_by_a_placeholder() -> None:
    """tdmpc's ``self.last_frames[idxs[mask] // self.cfg.episode_length].cuda()``: the message and its fix name
    ``self.last_frames[...]``, a name on the line, not an ``x`` the user would look for in vain."""
    source = (Path(__file__).parent / "fixtures" / "TD102" / "long_receiver_named_by_its_head.py").read_text()
    found = [f for f in check_source(source, "buffer.py") if f.code == "TD102"]
    assert len(found) == 1
    assert "`self.last_frames[...].cuda()`" in found[0].message
    assert "`self.last_frames[...].to(device)`" in (found[0].fix or "")
    assert "`x." not in found[0].message + (found[0].fix or "")


def test_a_print_of_a_tensor_beside_its_grad_names_the_tensor() -> None:
    """``print(h.grad, h.grad_fn, h)`` of ``h = x.matmul(w)``: the message names ``h``, the tensor whose printing
    reads it back, not ``h.grad`` (None for a non-leaf)."""
    source = (Path(__file__).parent / "fixtures" / "TD603" / "print_of_a_product_names_the_tensor_not_its_grad.py").read_text()
    found = [f for f in check_source(source, "train.py") if f.code == "TD603"]
    assert [f.message.split(" synchronises")[0] for f in found] == ["`print` of tensor `h`"]
