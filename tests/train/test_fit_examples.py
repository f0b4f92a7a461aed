"""The model-parallel example runs as written on the CPU (both stages on one device there)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.train.launch import env

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen([sys.executable, *args], cwd=cwd, env={**env(), "CUDA_VISIBLE_DEVICES": ""},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        raise
    assert proc.returncode == 0, err[-3000:]
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


@pytest.mark.slow
def test_model_parallel_example_trains(tmp_path: Path) -> None:
    done = _run(str(EXAMPLES / "train_model_parallel.py"), "--epochs", "2", cwd=tmp_path)
    assert done.stdout.startswith("stages on cpu and cpu: val_loss=")
    assert float(done.stdout.split("val_acc=")[1].rstrip("%\n")) > 60
