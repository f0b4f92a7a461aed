"""`torchdoctor explain` end to end: TEXT, -, --file, --facts, --no-probe, JSON, exit codes, bad input."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

import torchdoctor.explain
from tests.env.snapshots import gpu, h100, laptop
from torchdoctor.cli import main

SAMPLER = "ValueError: sampler option is mutually exclusive with shuffle"
NO_KERNEL = "RuntimeError: CUDA error: no kernel image is available for execution on the device"


@pytest.fixture
def no_probe_allowed(monkeypatch):
    """Fail loudly if a command probes this machine: tests never depend on its GPU state."""
    def refuse():
        raise AssertionError("this machine was probed")

    monkeypatch.setattr(torchdoctor.explain, "this_machine", refuse)


def _facts_file(tmp_path, facts) -> str:
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(facts))
    return str(path)


def test_text_argument_is_explained_and_exits_1(capsys, no_probe_allowed):
    assert main(["explain", SAMPLER]) == 1
    out = capsys.readouterr().out
    assert out.startswith("torchdoctor explain: 1 line read, explained from the text alone\n")
    assert "TD702 [error]" in out and "fix: drop shuffle=True" in out


def test_unquoted_words_are_joined(capsys, no_probe_allowed):
    assert main(["explain", "ValueError:", "sampler", "option", "is", "mutually", "exclusive", "with", "shuffle"]) == 1
    assert "TD702" in capsys.readouterr().out


def test_unknown_message_is_no_known_cause_with_exit_0(capsys):
    assert main(["explain", "--no-probe", "KeyError: 'learning_rate'"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("No known cause:") and "TD" not in out


def test_stdin_log_with_several_errors(monkeypatch, capsys, no_probe_allowed):
    log = "step 1\n" + SAMPLER + "\nstep 2\nRuntimeError: element 0 of tensors does not require grad and does not have a grad_fn\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(log))
    assert main(["explain", "-", "--output-format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert list(data) == ["findings"]
    assert [f["code"] for f in data["findings"]] == ["TD702", "TD407"]
    assert set(data["findings"][0]) == {"code", "severity", "message", "path", "cell", "line", "column", "end_line", "end_column",
                                         "fix", "fixable", "unsafe_fix", "related"}


def test_file_input_with_a_traceback_gives_the_users_line(tmp_path, capsys, no_probe_allowed):
    log = tmp_path / "run.log"
    log.write_bytes(b'Traceback (most recent call last):\n  File "/srv/job/train.py", line 88, in <module>\n    preds = out.numpy()\n'
                    b"TypeError: can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first.\n\xff\xfe")
    assert main(["explain", "--file", str(log)]) == 1
    out = capsys.readouterr().out
    assert "/srv/job/train.py:88:1: TD501 [error] `.numpy()` on `out`, which is on cuda:0" in out


def test_facts_snapshot_refines_the_message(tmp_path, capsys, no_probe_allowed):
    facts = h100(gpus=[gpu(0, "NVIDIA GeForce RTX 5090", (12, 0), 32607)], driver_version="570.133.07", proc_driver_version="570.133.07")
    path = _facts_file(tmp_path, {"facts": facts, "findings": []})  # a `torchdoctor env --output-format json` report works too
    assert main(["explain", "--facts", path, NO_KERNEL]) == 1
    out = capsys.readouterr().out
    assert f"refined with the facts in {path}" in out and "RTX 5090" in out and "whl/cu128" in out


def test_by_default_the_machine_is_probed_only_when_the_message_is_about_it(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(torchdoctor.explain, "this_machine", lambda: calls.append(1) or laptop())
    assert main(["explain", SAMPLER]) == 1
    assert calls == []
    assert main(["explain", "AssertionError: Torch not compiled with CUDA enabled"]) == 1
    assert calls == [1]
    out = capsys.readouterr().out
    assert "refined with this machine's facts" in out and "TD101" in out


def test_no_probe_keeps_to_the_text(capsys, no_probe_allowed):
    assert main(["explain", "--no-probe", "AssertionError: Torch not compiled with CUDA enabled"]) == 1
    assert "TD002" in capsys.readouterr().out


@pytest.mark.parametrize("argv,needle", [
    (["explain"], "nothing to explain"),
    (["explain", "--file", "/no/such/log"], "does not exist"),
    (["explain", "--file", "."], "is a directory"),
    (["explain", "--no-probe", "--file", "x.log", "some text"], "not several at once"),
    (["explain", "--facts", "f.json", "--no-probe", "text"], "contradict"),
    (["explain", "-", "more"], "cannot be combined"),
])
def test_bad_input_is_a_clear_error_with_exit_2(argv, needle, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert needle in captured.err and captured.out == ""


def test_a_bad_snapshot_is_an_input_error(tmp_path, capsys):
    bad = tmp_path / "facts.json"
    bad.write_text("[1, 2]")
    assert main(["explain", "--facts", str(bad), NO_KERNEL]) == 2
    assert "is malformed: it must be a JSON object of facts, not a list" in capsys.readouterr().err


def test_output_file_is_written(tmp_path, capsys, no_probe_allowed):
    target = tmp_path / "explained.json"
    assert main(["explain", SAMPLER, "--output-format", "json", "--output-file", str(target)]) == 1
    assert capsys.readouterr().out == ""
    assert json.loads(target.read_text())["findings"][0]["code"] == "TD702"


def test_explain_text_only_imports_no_torch():
    code = ("import sys; from torchdoctor.cli import main; rc = main(['explain', '--no-probe', %r]);"
            "print(rc, 'torch' in sys.modules)") % NO_KERNEL
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "1 False", out.stderr
