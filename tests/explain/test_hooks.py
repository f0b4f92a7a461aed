"""The one table serves `run`/`watch()` (the error a script dies with) and `env` (a snapshot's error texts)."""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

import pytest

from tests.env.snapshots import gpu, h100
from torchdoctor.cli import main
from torchdoctor.explain import explain_exception, explain_facts
from torchdoctor.findings import Finding

HERE = os.path.relpath(__file__)


def _sampler_and_shuffle():
    from torch.utils.data import DataLoader

    return DataLoader(list(range(8)), sampler=list(range(8)), shuffle=True)  # noqa: TD702 (the error under test)


def _line_of(text: str) -> int:
    return next(i for i, line in enumerate(Path(__file__).read_text().splitlines(), 1) if text in line and "def " not in line)


def test_explain_exception_points_at_the_users_line_not_torchs():
    with pytest.raises(ValueError) as info:
        _sampler_and_shuffle()
    [f] = explain_exception(info.value, probe=False)
    assert f.code == "TD702"
    assert (f.location.path, f.location.line) == (HERE, _line_of("sampler=list(range(8)), shuffle=True"))


def test_an_error_already_explained_is_not_explained_twice():
    err = RuntimeError("Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!")
    assert [f.code for f in explain_exception(err, probe=False)] == ["TD303"]
    assert explain_exception(err, [Finding("TD302", "batch element `x` is on cpu")], probe=False) == []


def test_watch_reports_the_error_the_code_dies_with():
    import torchdoctor

    with pytest.raises(ValueError):
        with torchdoctor.watch(environment=False) as session:
            _sampler_and_shuffle()
    assert [f.code for f in session.findings] == ["TD702"]


@pytest.mark.slow
def test_torchdoctor_run_explains_the_death_of_the_script(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("import torch\nfrom torch.utils.data import DataLoader\n\n"
                      "loader = DataLoader(list(range(8)), sampler=list(range(8)), shuffle=True)\n")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["run", "--no-env", str(script)])
    assert code == 1
    report = err.getvalue()
    assert f"{script}:4:1: TD702 [error] DataLoader was given both sampler= and shuffle=True" in report
    assert report.index("TD702") < report.index("Traceback")  # explained before Python's own traceback


def _env(tmp_path, facts, capsys) -> tuple[int, dict]:
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(facts))
    code = main(["env", "--facts", str(path), "--output-format", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_env_reads_a_snapshots_init_error_through_the_table(tmp_path, capsys):
    facts = h100(init_error="RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling NumCudaDevices() "
                            "that might have already set an error? Error 804: forward compatibility was attempted on non supported HW")
    code, data = _env(tmp_path, facts, capsys)
    assert code == 1 and [f["code"] for f in data["findings"]] == ["TD003"] and "error 804" in data["findings"][0]["message"]


def test_env_reads_a_last_error_traceback(tmp_path, capsys):
    facts = h100(last_error="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which "
                            "1.06 GiB is free.")
    code, data = _env(tmp_path, facts, capsys)
    assert [f["code"] for f in data["findings"]] == ["TD610"] and "NVIDIA H100 80GB HBM3" in data["findings"][0]["message"]


def test_env_does_not_repeat_what_the_doctor_already_read_in_the_init_warning(tmp_path, capsys):
    facts = h100(gpus=[gpu(0, "NVIDIA GeForce RTX 5090", (12, 0), 32607)],
                 init_warning="NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch installation.")
    _, data = _env(tmp_path, facts, capsys)
    assert [f["code"] for f in data["findings"]].count("TD005") == 1


def test_explain_facts_without_error_texts_is_empty():
    assert explain_facts(h100()) == [] and explain_facts({}) == []
