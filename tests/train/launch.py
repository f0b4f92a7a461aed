"""Launching torchrun from tests: free ports, a session per launcher, every process group killed on the way out."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def env() -> dict[str, str]:
    paths = [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p), "OMP_NUM_THREADS": "1"}


def torchrun(launcher_args: list[str], program: list[str] | Callable[[int], list[str]], *, nodes: int = 1,
             timeout: float = 420, cwd: Path | None = None) -> list[subprocess.CompletedProcess[str]]:  # fmt: skip
    """Run ``program`` (or ``program(node)``) under ``nodes`` torchrun launchers meeting at a free local c10d endpoint.

    Each launcher leads a session of its own; on a timeout or any error every
    session is SIGKILLed, so no rank outlives the test.
    """
    endpoint = f"127.0.0.1:{free_port()}"
    procs = []
    try:
        for node in range(nodes):
            cmd = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nodes}", f"--node-rank={node}",
                   "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", f"--rdzv-id=td{os.getpid()}",
                   *launcher_args, *(program(node) if callable(program) else program)]  # fmt: skip
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
                                          cwd=cwd, start_new_session=True))  # fmt: skip
        return [_finish(cmd_proc, timeout) for cmd_proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                _kill(proc)


def _finish(proc: subprocess.Popen[str], timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def _kill(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)
