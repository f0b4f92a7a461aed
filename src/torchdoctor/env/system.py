"""The probe's window on the machine: guarded file reads and time-limited commands, injectable for tests."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class CommandResult:
    """What a command did. ``missing``: it does not exist; ``timed_out``: killed at its time limit."""

    rc: int | None
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    missing: bool = False

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out and not self.missing


def run_command(argv: list[str], timeout: float, env: Mapping[str, str] | None = None) -> CommandResult:
    """Run ``argv`` for at most ``timeout`` seconds; never raises.

    The child gets its own session so that a timeout kills everything it
    started (a hung nvidia-smi, a torch import stuck on a network disk).
    """
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            env=dict(env) if env is not None else None,
            start_new_session=os.name == "posix",
        )
    except FileNotFoundError:
        return CommandResult(None, missing=True)
    except OSError as exc:
        return CommandResult(None, stderr=str(exc), missing=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        try:
            out, err = proc.communicate(timeout=2)
        except (subprocess.TimeoutExpired, OSError, ValueError):
            out, err = "", ""
        return CommandResult(None, out or "", err or "", timed_out=True)
    return CommandResult(proc.returncode, out or "", err or "")


def _kill(proc: subprocess.Popen[str]) -> None:
    try:
        if os.name == "posix":
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    except (ProcessLookupError, PermissionError, OSError):
        pass


def read_text(path: str, limit: int = 1 << 20) -> str | None:
    """The file's text, or None when it is missing or unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(limit)
    except (OSError, ValueError):
        return None


def list_dir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def path_exists(path: str) -> bool:
    try:
        return os.path.exists(path)
    except (OSError, ValueError):
        return False


@dataclass
class System:
    """Every way the probe touches the machine; tests replace the parts they need."""

    run: Callable[[list[str], float], CommandResult] = run_command
    read: Callable[[str], str | None] = read_text
    listdir: Callable[[str], list[str]] = list_dir
    exists: Callable[[str], bool] = path_exists
    which: Callable[[str], str | None] = shutil.which
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
