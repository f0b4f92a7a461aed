"""The probe: the honest answer here, and probe failures that degrade to 'unknown' without a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest

from torchdoctor.env import diagnose
from torchdoctor.env.probe import Timeouts, probe
from torchdoctor.env.system import CommandResult, System, read_text, run_command
from torchdoctor.findings import Severity

FAST = Timeouts(torch=60, driver=20, command=2)


class Recorder:
    """A command runner that answers from a table and records what was asked."""

    def __init__(self, answers: dict[str, CommandResult] | None = None, passthrough: bool = True) -> None:
        self.answers = answers or {}
        self.calls: list[list[str]] = []
        self.passthrough = passthrough

    def __call__(self, argv: list[str], timeout: float) -> CommandResult:
        self.calls.append(argv)
        for key, result in self.answers.items():
            if key in " ".join(argv[:2]) or (len(argv) > 2 and key in argv[2][:400]):
                return result
        return run_command(argv, timeout) if self.passthrough else CommandResult(None, missing=True)


@pytest.mark.slow
def test_real_probe_gives_the_honest_answer_here():
    """This machine has no GPU and a CPU build of torch: TD009, and nothing in error."""
    script = textwrap.dedent("""
        import json, sys
        from torchdoctor.env import examine
        facts, findings = examine()
        print(json.dumps({"facts": facts, "codes": [[f.code, f.severity.value] for f in findings],
                          "torch_in_doctor": "torch" in sys.modules}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    data = json.loads(out.stdout)
    assert data["torch_in_doctor"] is False  # torch (and CUDA) only ever ran in the child
    facts = data["facts"]
    assert facts["torch_version"].startswith("2.") and facts["cuda_available"] is False
    assert facts["pci_nvidia_devices"] == 0 and facts["proc_driver_present"] is False
    assert ["TD009", "info"] in data["codes"]
    assert not [c for c, sev in data["codes"] if sev == "error"]


def test_missing_nvidia_smi_and_driver_libraries_are_unknown():
    runner = Recorder({"import ctypes": CommandResult(1, "", "Traceback (most recent call last): boom")}, passthrough=False)
    sysm = System(run=runner, which=lambda name: None)
    facts = probe(system=sysm, timeouts=FAST)
    assert facts["nvidia_smi_present"] is False
    assert "driver_version" not in facts and "gpus" not in facts
    assert "torch_version" not in facts  # the fake runner had no torch child to offer
    assert "libcuda_loadable" not in facts  # the driver child died: unknown, not False


def test_hung_nvidia_smi_is_stopped_at_its_time_limit():
    sleeper = [sys.executable, "-c", "import time; time.sleep(30)"]

    def runner(argv: list[str], timeout: float) -> CommandResult:
        if argv[0].endswith("nvidia-smi"):
            return run_command(sleeper, timeout)
        return CommandResult(None, missing=True)

    sysm = System(run=runner, which=lambda name: "/usr/bin/nvidia-smi" if name == "nvidia-smi" else None)
    start = time.monotonic()
    facts = probe(system=sysm, timeouts=Timeouts(torch=5, driver=5, command=0.5))
    assert time.monotonic() - start < 15
    assert facts["nvidia_smi_error"].startswith("timed out")
    assert any("nvidia-smi did not answer" in e for e in facts["probe_errors"])
    assert [f.code for f in diagnose(facts) if f.severity is Severity.ERROR] == []


def test_run_command_kills_the_whole_hung_process_group():
    start = time.monotonic()
    res = run_command(["sh", "-c", "sleep 30 & sleep 30"], 0.3)
    assert res.timed_out and not res.ok
    assert time.monotonic() - start < 10


def test_run_command_missing_program():
    res = run_command(["/nonexistent/nvidia-smi"], 1)
    assert res.missing and not res.ok


def test_unreadable_proc_files_read_as_unknown(tmp_path):
    assert read_text(str(tmp_path)) is None  # a directory: IsADirectoryError
    assert read_text(str(tmp_path / "missing")) is None

    def explode(path: str) -> str:
        raise PermissionError(13, "Permission denied", path)

    sysm = System(read=explode, listdir=lambda p: (_ for _ in ()).throw(PermissionError(13, "denied")),
                  run=Recorder(passthrough=False), which=lambda n: None)
    facts = probe(system=sysm, timeouts=FAST)
    assert "proc_driver_version" not in facts and "kernel_modules" not in facts
    assert facts["platform"] == sys.platform  # the rest still came back


def test_nvidia_smi_output_is_parsed_when_nvml_is_missing():
    smi = CommandResult(0, "0, NVIDIA GeForce RTX 3090, 00000000:01:00.0, 24576, Default, [N/A], GPU-8f3c, 535.183.01, 8.6\n")

    def runner(argv: list[str], timeout: float) -> CommandResult:
        return smi if argv[0].endswith("nvidia-smi") else CommandResult(None, missing=True)

    facts = probe(system=System(run=runner, which=lambda n: "/usr/bin/nvidia-smi"), timeouts=FAST)
    assert facts["driver_version"] == "535.183.01"
    assert facts["gpus"][0]["capability"] == [8, 6] and facts["gpus"][0]["memory_mb"] == 24576


def test_nvidia_smi_failure_message_is_kept():
    fail = CommandResult(18, "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 560.35\n")

    def runner(argv: list[str], timeout: float) -> CommandResult:
        return fail if argv[0].endswith("nvidia-smi") else CommandResult(None, missing=True)

    facts = probe(system=System(run=runner, which=lambda n: "/usr/bin/nvidia-smi"), timeouts=FAST)
    assert facts["nvidia_smi_error"] == "Failed to initialize NVML: Driver/library version mismatch"
    assert "TD012" in [f.code for f in diagnose({**facts, "proc_driver_version": "560.35.03"})]


@pytest.mark.slow
def test_broken_torch_install_is_td001_not_a_traceback(tmp_path, monkeypatch):
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('libtorch_cuda.so: cannot open shared object file')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    runner = Recorder()
    facts = probe(system=System(run=runner), timeouts=FAST)
    assert "libtorch_cuda.so" in facts["torch_import_error"]
    assert "torch_version" not in facts
    found = diagnose(facts)
    assert found[0].code == "TD001" and "libtorch_cuda.so" in found[0].message


@pytest.mark.slow
def test_hung_torch_import_degrades_to_unknown(tmp_path, monkeypatch):
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("import time\ntime.sleep(60)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    facts = probe(system=System(), timeouts=Timeouts(torch=1.5, driver=20, command=2))
    assert "torch_version" not in facts and "torch_import_error" not in facts
    assert any("import torch did not finish" in e for e in facts["probe_errors"])


def test_init_cuda_false_never_runs_cuda_initialisation():
    runner = Recorder(passthrough=False)
    probe(init_cuda=False, system=System(run=runner, which=lambda n: None), timeouts=FAST)
    torch_calls = [c for c in runner.calls if len(c) > 2 and "import torch" in c[2]]
    if "torch" in sys.modules:
        assert torch_calls == []  # read in-process from the already imported module
    else:
        assert torch_calls and torch_calls[0][-1] == "0"


def test_init_cuda_false_reads_an_imported_torch_in_process():
    pytest.importorskip("torch")
    facts = probe(init_cuda=False, system=System(run=Recorder(passthrough=False), which=lambda n: None), timeouts=FAST)
    import torch

    assert facts["torch_version"] == str(torch.__version__) and facts["cuda_initialized"] is False
    assert "cuda_available" not in facts
