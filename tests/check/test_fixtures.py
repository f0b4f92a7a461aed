"""Every fixture under fixtures/ yields exactly the findings its ``# expect:`` comments name."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.check.expectations import config_lines, expected, fixture_files, reported
from torchdoctor.check import check_source

ROOT = Path(__file__).parent / "fixtures"


def _settings(source: str):
    lines = config_lines(source)
    if not lines:
        return None
    from torchdoctor.config import settings_from_toml  # the platform's config reader

    return settings_from_toml("\n".join(lines))


@pytest.mark.parametrize("path", fixture_files(ROOT), ids=lambda p: str(p.relative_to(ROOT)))
def test_fixture(path: Path) -> None:
    source = path.read_text("utf-8")
    findings = check_source(source, str(path), settings=_settings(source))
    got = reported(findings)
    want = expected(source)
    missing = sorted(want - got)
    extra = sorted((line, code, next(f.message for f in findings if f.location.line == line and code in (f.code, *f.related)))
                   for line, code in got - want)
    assert not missing and not extra, f"missing: {missing}\nunexpected: {extra}"


def test_td303_names_the_device_tensor_a_torch_call_holds_not_the_module() -> None:
    path = ROOT / "TD611" / "moved_after_a_reshape.py"
    [f] = [f for f in check_source(path.read_text("utf-8"), str(path)) if f.code == "TD303"]
    assert f.message.endswith("combined with device tensor `same`")  # in torch.ones_like(same), not `torch`


def test_td603_one_statement_with_several_reads_is_one_finding() -> None:
    source = (
        "import torch\n"
        "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
        "def train(model, loader, opt, crit):\n"
        "    for x, y in loader:\n"
        "        x, y = x.to(device), y.to(device)\n"
        "        opt.zero_grad()\n"
        "        out = model(x)\n"
        "        loss = crit(out, y)\n"
        "        loss.backward()\n"
        "        opt.step()\n"
        "        print(loss.item(), out.mean().item())\n"
        "        print(out.max().item())\n"
    )
    found = [f.location.line for f in check_source(source, "train.py") if f.code == "TD603"]
    assert found == [11, 12]  # two reads on line 11 wait once: one finding there


def test_td101_an_indexed_gpu_in_a_single_process_file_is_told_to_fall_back_not_to_use_local_rank() -> None:
    path = ROOT / "TD101" / "device_map_cuda.py"
    [f] = [f for f in check_source(path.read_text("utf-8"), str(path)) if f.location.line == 15]
    assert "local_rank" not in f.fix and "gloo" not in f.fix
    assert 'torch.device("cuda:1") if torch.cuda.is_available() else torch.device("cpu")' in f.fix


def test_td504_names_the_model_a_copy_in_the_checkpoint_was_made_of_not_a_cut_off_expression() -> None:
    path = ROOT / "TD504" / "model_copy_in_checkpoint.py"
    messages = [f.message for f in check_source(path.read_text("utf-8"), str(path)) if f.code == "TD504"]
    assert [m.split(" inside ")[0].rsplit(" ", 1)[-1] for m in messages] == ["`model`", "`ema.ema`", "`model`"]


def test_td101_names_the_device_the_class_already_chose_where_a_call_hard_codes_cuda() -> None:
    path = ROOT / "TD101" / "device_chosen_by_the_class.py"
    fixes = {f.location.line: f.fix for f in check_source(path.read_text("utf-8"), str(path)) if f.code == "TD101"}
    assert fixes[17] == "pass the device this code already chose: `device=self._device`"
    assert "self._device" not in fixes[21]  # a static method has no self to read it from


def test_td101_names_the_cuda_call_of_a_long_chain_not_its_head() -> None:
    source = ("import torch\n"
              "x = torch.randn((batch_size, height, width, channels), dtype=torch.float16, requires_grad=True).cuda()\n")
    [f] = [f for f in check_source(source, "kernel_check.py") if f.code == "TD101"]
    assert f.message.startswith("`torch.randn(...).cuda()` hard-codes CUDA")


def test_td205_a_program_that_resumes_into_the_wrapper_is_told_to_resume_into_the_unwrapped_model_too() -> None:
    path = ROOT / "TD205" / "resumed_into_the_wrapper.py"
    fixes = {f.location.line: f.fix for f in check_source(path.read_text("utf-8"), str(path)) if f.code == "TD205"}
    assert fixes[28].startswith("save `student.module.state_dict()`, and resume into `student.module` too: line 25")
    # the teacher is wrapped on one branch only: `teacher.module` may not exist, the program's alias does
    assert fixes[29].startswith("save `teacher_without_ddp.state_dict()`, and resume into `teacher_without_ddp` too")


def test_td306_a_host_tensor_filled_element_by_element_is_told_to_pin_not_to_be_made_on_the_device() -> None:
    source = ("import torch\n"
              "def neighborhood(h, w):\n"
              "    mask = torch.zeros(h, w, h, w)\n"
              "    for i in range(h):\n"
              "        for j in range(w):\n"
              "            mask[i, j, i, j] = 1\n"
              "    mask = mask.reshape(h * w, h * w)\n"
              "    return mask.cuda(non_blocking=True)\n"
              "def features(n, d, feats, index):\n"
              "    store = torch.zeros(n, d)\n"
              "    store = store.cuda(non_blocking=True)\n"
              "    store.index_copy_(0, index, feats)\n"
              "    return store\n")
    fixes = {f.location.line: f.fix for f in check_source(source, "seg.py") if f.code == "TD306"}
    assert fixes[8].startswith("make it in pinned memory (`pin_memory=True` in the `torch.zeros` call)")
    assert fixes[11].startswith("make it on the device")  # filled after the copy, on the device: made there
