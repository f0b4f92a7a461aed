"""Running torchdoctor as an unprivileged user (``nobody``) through ``setpriv``, for the file-safety tests.

Users run torchdoctor as root in containers and as themselves elsewhere; what
the kernel lets each do differs, so the tests run both ways. The unprivileged
run needs root (to switch users) and ``setpriv``; without them the tests skip
with that reason. The package is copied into a folder ``nobody`` can read
(the checkout may sit under /root), and the interpreter is the first one
``nobody`` can execute (sys.executable may sit under /root too); the
static checker needs nothing beyond the standard library.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "src" / "torchdoctor"
TIMEOUT_S = 120


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


@lru_cache(maxsize=None)
def nobody() -> tuple[int, int] | None:
    try:
        entry = pwd.getpwnam("nobody")
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid


def _setpriv(uid: int, gid: int) -> list[str]:
    return [shutil.which("setpriv") or "setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]


@lru_cache(maxsize=None)
def _interpreter() -> str | None:
    ids = nobody()
    if ids is None:
        return None
    for candidate in (sys.executable, shutil.which("python3"), "/usr/bin/python3"):
        if not candidate:
            continue
        try:
            ok = subprocess.run([*_setpriv(*ids), candidate, "-c", "import sys; assert sys.version_info >= (3, 10)"],
                                capture_output=True, timeout=TIMEOUT_S).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return candidate
    return None


def skip_reason() -> str | None:
    """Why the unprivileged tests cannot run here, or None."""
    if not is_root():
        return "switching to an unprivileged user needs root"
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed"
    if nobody() is None:
        return "no 'nobody' user on this system"
    if _interpreter() is None:
        return "no Python >= 3.10 that the user 'nobody' may execute"
    return None


needs_root = pytest.mark.skipif(not is_root(), reason="needs root (mknod, chown, writing as another user)")


def require_unprivileged() -> None:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)


@lru_cache(maxsize=None)
def _package_copy() -> str:
    import atexit

    folder = tempfile.mkdtemp(prefix="torchdoctor-pkg-")
    atexit.register(shutil.rmtree, folder, True)
    shutil.copytree(PACKAGE, os.path.join(folder, "torchdoctor"), ignore=shutil.ignore_patterns("__pycache__"))
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            os.chmod(os.path.join(root, name), 0o755 if name in dirs else 0o644)
    os.chmod(folder, 0o755)
    return folder


@pytest.fixture
def nobody_dir() -> Iterator[Path]:
    """A fresh folder owned by ``nobody`` (in the system temp folder, which everyone can reach)."""
    require_unprivileged()
    ids = nobody()
    assert ids is not None
    folder = Path(tempfile.mkdtemp(prefix="torchdoctor-nobody-"))
    os.chown(folder, *ids)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run_as_nobody(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m torchdoctor ARGS`` as ``nobody``, bounded by a timeout."""
    require_unprivileged()
    ids, exe = nobody(), _interpreter()
    assert ids is not None and exe is not None
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": _package_copy(), "HOME": str(cwd),
           "PYTHONDONTWRITEBYTECODE": "1", "NO_COLOR": "1", "LANG": "C.UTF-8"}
    return subprocess.run([*_setpriv(*ids), exe, "-m", "torchdoctor", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S)


def chown_nobody(path: Path) -> None:
    ids = nobody()
    assert ids is not None
    os.chown(path, *ids, follow_symlinks=False)
