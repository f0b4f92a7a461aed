"""A fit() process killed with SIGKILL at a random step resumes and ends bit-identical to an uninterrupted run."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

CHILD = Path(__file__).with_name("fit_child.py")
ROOT = Path(__file__).resolve().parents[2]
STEPS = 24  # 3 epochs of 8 batches


def _env() -> dict[str, str]:
    paths = [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p), "OMP_NUM_THREADS": "1"}


def _run(out: Path, ckpt: Path, kill_after: int | None = None) -> list[str]:
    """Run the child to its end, or SIGKILL it as soon as it announces step ``kill_after``; all the lines it printed.

    The kill lands a little after the announcement: the child may have trained (and checkpointed) a step or two
    more by then, and the lines it printed meanwhile are read too. It cannot finish first: it waits for its
    stdin to close before it writes its results, and a run that is to be killed keeps that open.
    """
    out.mkdir(exist_ok=True)
    proc = subprocess.Popen([sys.executable, str(CHILD), str(out), str(ckpt)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                            start_new_session=True)  # fmt: skip
    lines: list[str] = []
    try:
        assert proc.stdin is not None and proc.stdout is not None
        if kill_after is None:
            proc.stdin.close()
        for line in proc.stdout:  # the child ends itself by alarm if this loop is left hanging
            lines.append(line.strip())
            if kill_after is not None and line.split() == ["step", str(kill_after)]:
                os.killpg(proc.pid, signal.SIGKILL)  # wherever it is now: training, or inside a save
                lines += [rest.strip() for rest in proc.stdout]  # what it printed before the kill landed
                break
        proc.wait(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        if proc.stdin is not None and not proc.stdin.closed:
            proc.stdin.close()
    if kill_after is None:
        assert proc.returncode == 0, proc.stderr.read()[-3000:] if proc.stderr else ""
    return lines


def _straight(out: Path) -> None:
    """The uninterrupted run, in this process (one thread, as the child)."""
    from tests.train.fit_child import train

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out.mkdir()
        train(out, out / "ckpt", announce=False)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="SIGKILL is POSIX")
def test_sigkill_at_a_random_step_then_resume_is_bit_identical(tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    kill_at = random.Random(seed).randrange(1, STEPS)
    _straight(tmp_path / "straight")
    seen = _run(tmp_path / "killed", tmp_path / "ckpt", kill_after=kill_at)
    assert f"step {kill_at}" in seen and "finished" not in seen, f"seed {seed}: {seen}"
    assert not (tmp_path / "killed" / "weights.pt").exists(), f"seed {seed}"
    last = int(seen[-1].split()[1])  # the child may have run on a step or two before the kill landed
    resumed = _run(tmp_path / "killed", tmp_path / "ckpt")
    first = int(resumed[0].split()[1]) if resumed[0] != "finished" else STEPS + 1  # it had saved the last epoch
    # A checkpoint every 2 steps, each written after its step's announcement: at most 2 steps redone, none skipped.
    assert last - 1 <= first <= last + 1 and resumed[-1] == "finished", f"seed {seed}: resumed at {first}, {seen}"

    expected = json.loads((tmp_path / "straight" / "history.json").read_text())
    assert json.loads((tmp_path / "killed" / "history.json").read_text()) == expected, f"seed {seed}, killed at {kill_at}"
    a = torch.load(tmp_path / "straight" / "weights.pt", map_location="cpu", weights_only=True)
    b = torch.load(tmp_path / "killed" / "weights.pt", map_location="cpu", weights_only=True)
    assert all(torch.equal(a[k], b[k]) for k in a), f"seed {seed}, killed at step {kill_at}"
