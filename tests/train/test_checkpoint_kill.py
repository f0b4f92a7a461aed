"""A process killed with SIGKILL in the middle of a save: the previous checkpoint still loads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from torchdoctor import _files
from torchdoctor.train import checkpoint

# Saves a 48 MB state over and over; announces each save before and after it.
_WRITER = textwrap.dedent(
    """
    import sys, torch
    from torch import nn
    from torchdoctor.train import checkpoint
    model = nn.Linear(3000, 4000)
    for n in range(1, 10_000):
        with torch.no_grad():
            model.weight.fill_(float(n))
        print("begin", n, flush=True)
        checkpoint.save(sys.argv[1], model=model, epoch=n)
        print("done", n, flush=True)
    """
)


def _kill_mid_save(target: Path) -> tuple[int, int]:
    """Start the writer, SIGKILL it while its temporary file exists; (last finished save, its pid)."""
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(target)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    done = 0
    try:
        for line in proc.stdout:
            word, n = line.split()
            if word == "done":
                done = int(n)
            elif word == "begin" and done >= 2:
                break
        deadline = time.monotonic() + 60
        while not any(p.name.endswith(".tmp") for p in target.parent.iterdir()):  # inside the 48 MB write
            assert time.monotonic() < deadline, "the writer never started its temporary file"
            time.sleep(0.001)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    return done, proc.pid


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="SIGKILL is POSIX")
def test_sigkill_during_save_leaves_a_loadable_previous_checkpoint(tmp_path: Path) -> None:
    target = tmp_path / "ckpt.pt"
    done, pid = _kill_mid_save(target)

    model = torch.nn.Linear(3000, 4000)
    result = checkpoint.load(target, model)
    # A complete checkpoint: the one that finished last (or the one being written, if it got renamed).
    assert result.epoch in (done, done + 1)
    assert torch.all(model.weight == float(result.epoch))
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "ckpt.pt"]
    assert leftovers and all(name.startswith(".ckpt.pt.") and f".{pid}." in name for name in leftovers)

    # The next save in that folder removes what the killed writer left (its process is gone).
    checkpoint.save(target, model=torch.nn.Linear(2, 2), epoch=result.epoch + 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]


def test_fit_in_a_folder_with_a_killed_save_removes_its_temp_file(tmp_path: Path) -> None:
    from tests.train.conftest import make_run
    from torchdoctor.train import fit

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          timeout=60)
    stale = tmp_path / f".epoch-0001.pt.{_files._HOST}.{int(done.stdout)}.0123abcd.tmp"  # its writer is gone
    stale.write_bytes(b"half a checkpoint")
    model, optimizer, train, val = make_run()
    fit(model, train, loss_fn=torch.nn.CrossEntropyLoss(), optimizer=optimizer, epochs=1, checkpoint_dir=tmp_path,
        progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch-0001.pt", "metrics.csv"]
