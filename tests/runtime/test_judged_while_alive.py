"""Every detector's outcome under `torchdoctor run` is the same whatever the garbage collector and the load do.

The scripts run in this process through the command line (a subprocess would
import torch each time), once undisturbed, once with the collector switched
off, and once with a thread collecting garbage every few milliseconds while the
script runs and straight after it ends: the old end-of-run judgement missed a
loss summed per epoch whenever the script's namespace happened to be freed
first.
"""

from __future__ import annotations

import contextlib
import gc
import io
import os
import threading
from pathlib import Path

import pytest

from torchdoctor.check.runner import _collector_paused as _no_collector  # the collector off, and back after
from torchdoctor.cli import main

ROOT = Path(__file__).parents[2]
SCRIPTS = Path(__file__).parent / "scripts"
pytestmark = pytest.mark.slow


@contextlib.contextmanager
def _undisturbed():
    yield


@contextlib.contextmanager
def _collector_storm():
    stop = threading.Event()

    def storm() -> None:
        n = 0
        while not stop.wait(0.002):
            n += 1
            gc.collect(2 if n % 10 == 0 else 0)  # young objects often, everything now and then

    thread = threading.Thread(target=storm, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)


CONDITIONS = (_undisturbed, _no_collector, _collector_storm)


def run_json(script: Path, condition, tmp_path: Path) -> list[tuple[str, int | None]]:
    import json

    err, report = io.StringIO(), tmp_path / "report.json"
    saved = os.getcwd()
    os.chdir(ROOT)
    try:
        with condition(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main(["run", "--no-env", "--output-format", "json", "--output-file", str(report), str(script)])
    finally:
        os.chdir(saved)
    assert code in (0, 1), err.getvalue()
    return [(f["code"], f["line"]) for f in json.loads(report.read_text())["findings"]]


def _line_of(path: Path, marker: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if marker in line)


@pytest.mark.parametrize("name", ["epoch_loss_summed.py", "losses_in_a_function.py"])
def test_losses_kept_are_td405_at_the_keepers_line_in_every_condition(name, tmp_path):
    script = SCRIPTS / name
    expected = [("TD405", _line_of(script, "# the keeper"))]
    for condition in CONDITIONS:
        assert run_json(script, condition, tmp_path) == expected, condition.__name__


PITFALLS = sorted((ROOT / "examples" / "pitfalls").glob("*.py"))


@pytest.mark.parametrize("script", PITFALLS, ids=[p.stem for p in PITFALLS])
def test_each_pitfall_example_gives_the_same_findings_undisturbed_and_under_a_collector_storm(script, tmp_path):
    first = run_json(script, _undisturbed, tmp_path)
    assert len(first) == 1  # each example shows exactly one pitfall
    assert run_json(script, _collector_storm, tmp_path) == first
