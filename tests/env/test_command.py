"""`torchdoctor env` end to end: the report, JSON, snapshots from elsewhere, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from torchdoctor.cli import main
from tests.env.snapshots import gpu, h100, laptop


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "torchdoctor", "env", *args], capture_output=True, text=True, timeout=180)


@pytest.mark.slow
def test_env_runs_here_end_to_end_and_exits_0():
    out = run_cli()
    assert out.returncode == 0, out.stderr
    assert "torch:" in out.stdout and "TD009 [info]" in out.stdout and "Traceback" not in out.stderr


@pytest.mark.slow
def test_env_json_report_here(tmp_path):
    target = tmp_path / "report.json"
    out = run_cli("--output-format", "json", "--output-file", str(target), "--no-cuda-init")
    assert out.returncode == 0 and out.stdout == ""
    data = json.loads(target.read_text())
    assert set(data) == {"facts", "findings"}
    assert data["findings"][0]["code"] == "TD009" and data["findings"][0]["path"] is None


def _write(tmp_path, facts) -> str:
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(facts))
    return str(path)


def test_facts_from_another_machine_error_exits_1(tmp_path, capsys):
    facts = h100(gpus=[gpu(0, "NVIDIA GeForce RTX 5090", (12, 0), 32607)])
    assert main(["env", "--facts", _write(tmp_path, facts)]) == 1
    text = capsys.readouterr().out
    assert "GPU 0: NVIDIA GeForce RTX 5090, compute capability 12.0" in text
    assert "TD005 [error]" in text and "whl/cu12" in text and "R570 or newer driver" in text


def test_facts_accepts_a_json_report_and_clean_machine_exits_0(tmp_path, capsys):
    path = _write(tmp_path, {"facts": h100(), "findings": []})
    assert main(["env", "--facts", path, "--output-format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["findings"] == [] and data["facts"]["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"


def test_errors_are_listed_before_infos(tmp_path, capsys):
    facts = laptop(shm_bytes=2**20, cvd="", pci_nvidia_devices=1, kernel_modules=["nvidia"], proc_driver_present=True)
    main(["env", "--facts", _write(tmp_path, facts)])
    text = capsys.readouterr().out
    assert text.index("TD010 [error]") < text.index("TD022 [warning]")


@pytest.mark.parametrize("content, message", [(None, "does not exist"), ("{not json", "is not JSON"), ("[1, 2]", "JSON object")])
def test_bad_facts_file_is_a_clear_error(tmp_path, capsys, content, message):
    path = tmp_path / "facts.json"
    if content is not None:
        path.write_text(content)
    assert main(["env", "--facts", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize("facts, key, message", [
    ({"gpus": "lots"}, "'gpus'", "must be a list of objects, not a string"),
    ({}, None, "empty object"),
    ({"hostname": "a", "uptime": 3}, None, "is a facts key"),
    ({"facts": [1]}, "'facts'", "must be a JSON object"),
    ({"platform": "linux", "cuda_available": "yes"}, "'cuda_available'", "must be true or false"),
    ({"platform": "linux", "device_count": 1.5}, "'device_count'", "must be an integer"),
    ({"platform": "linux", "gpus": [{"name": "A100", "capability": "eight"}]}, "'gpus[0].capability'", "must be"),
    ({"platform": "linux", "env": ["CUDA_VISIBLE_DEVICES=0"]}, "'env'", "must be an object"),
])
def test_malformed_snapshot_exits_2_naming_the_key_and_writes_nothing(tmp_path, capsys, facts, key, message):
    out = tmp_path / "report.txt"
    assert main(["env", "--facts", _write(tmp_path, facts), "-o", str(out), "--save-facts", str(tmp_path / "s.json")]) == 2
    err = capsys.readouterr().err
    assert "is malformed" in err and message in err and (key is None or key in err), err
    assert "no GPU found" not in err and not out.exists() and not (tmp_path / "s.json").exists()


def test_a_snapshots_findings_speak_of_that_machine(tmp_path, capsys):
    assert main(["env", "--facts", _write(tmp_path, laptop())]) == 0
    text = capsys.readouterr().out
    assert "TD009" in text and "no GPU found on that machine" in text and "this machine" not in text
    assert text.startswith("torchdoctor env: the machine of snapshot ")
    facts = h100(torch_version="2.7.1+cpu", torch_cuda=None)  # a CPU-only build on a GPU machine
    assert main(["env", "--facts", _write(tmp_path, facts)]) == 1
    text = capsys.readouterr().out
    assert "but that machine has GPU 0 NVIDIA H100" in text and "this machine" not in text


def test_save_facts_writes_the_snapshot(tmp_path, capsys):
    src = _write(tmp_path, laptop())
    saved = tmp_path / "saved.json"
    assert main(["env", "--facts", src, "--save-facts", str(saved)]) == 0
    assert json.loads(saved.read_text())["torch_version"] == "2.9.0+cpu"
