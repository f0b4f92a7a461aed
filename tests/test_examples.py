"""The README's examples: both train for real on the CPU, and `check` tells them apart exactly."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.check.expectations import expected, reported
from torchdoctor.check import check_source

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
BUGGY, FIXED = EXAMPLES / "buggy_train.py", EXAMPLES / "fixed_train.py"
_EPOCH = re.compile(r"^epoch (\d+): train loss ([0-9.]+|nan|inf), val acc ([0-9.]+)$", re.M)


def _run(script: Path, tmp_path: Path) -> str:
    env = dict(os.environ, CHECKPOINT_DIR=str(tmp_path), CUDA_VISIBLE_DEVICES="")  # the CPU path
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_fixed_example_trains_and_its_loss_falls(tmp_path: Path) -> None:
    out = _run(FIXED, tmp_path)
    epochs = _EPOCH.findall(out)
    assert [int(e) for e, _, _ in epochs] == [1, 2, 3]
    losses = [float(loss) for _, loss, _ in epochs]
    assert losses[-1] < losses[0], out
    assert float(epochs[-1][2]) > 0.3, "well above the 0.1 of guessing among 10 classes"
    assert "predicted classes:" in out
    assert (tmp_path / "checkpoint.pt").is_file()


@pytest.mark.slow
def test_buggy_example_still_runs_on_the_cpu(tmp_path: Path) -> None:
    out = _run(BUGGY, tmp_path)
    assert len(_EPOCH.findall(out)) == 3
    assert "predicted classes:" in out


def _found(path: Path) -> set[tuple[int, str]]:
    return reported(check_source(path.read_text("utf-8"), str(path)))


def test_check_finds_exactly_the_annotated_pitfalls_in_the_buggy_example() -> None:
    want = expected(BUGGY.read_text("utf-8"))
    assert len({code for _, code in want}) >= 20, "the example shows many kinds of pitfall"
    got = _found(BUGGY)
    assert sorted(want - got) == [] and sorted(got - want) == []


def test_check_finds_nothing_in_the_fixed_example() -> None:
    assert not expected(FIXED.read_text("utf-8"))
    assert sorted(_found(FIXED)) == []


def test_cli_check_exit_codes_tell_the_examples_apart() -> None:
    from torchdoctor.cli import main

    assert main(["check", str(FIXED)]) == 0
    assert main(["check", str(BUGGY)]) == 1


@pytest.mark.slow
def test_fixes_applied_to_the_buggy_example_keep_it_running(tmp_path: Path) -> None:
    # `--fix` edits are promised safe: the rewritten program must still run end to end.
    from torchdoctor.cli import main

    copy = tmp_path / "buggy_train.py"
    copy.write_text(BUGGY.read_text("utf-8"), "utf-8")
    main(["check", "--fix", str(copy)])
    fixed_sites = _found(BUGGY) - _found(copy)
    assert {code for _, code in fixed_sites} >= {"TD301", "TD501", "TD601"}
    assert "predicted classes:" in _run(copy, tmp_path)
