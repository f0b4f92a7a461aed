"""What the README shows is what the tool prints: its run outputs are real runs, its option list is complete."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def shown_output(command: str) -> str:
    """The block of output the README shows after ``$ command``."""
    start = README.index(f"$ {command}\n") + len(command) + 3
    return README[start:README.index("```", start)]


def run_cli(*args: str) -> tuple[int, str]:
    from torchdoctor.cli import main

    err = io.StringIO()
    saved = os.getcwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main(list(args))
    finally:
        os.chdir(saved)
    return code, err.getvalue()


@pytest.mark.slow
def test_run_on_an_eval_mode_pitfall_prints_what_the_readme_shows():
    code, err = run_cli("run", "examples/pitfalls/resumes_in_eval_mode.py")
    assert code == 0 and err == shown_output("torchdoctor run examples/pitfalls/resumes_in_eval_mode.py")


@pytest.mark.slow
def test_run_on_a_device_error_prints_what_the_readme_shows():
    code, err = run_cli("run", "examples/pitfalls/target_not_moved.py")
    head, tail = shown_output("torchdoctor run examples/pitfalls/target_not_moved.py").split("  ...\n")
    assert code == 1
    assert err.startswith(head), err
    assert err.endswith(tail), err


_TIMES = [(re.compile(r"seconds=[\d.]+"), "seconds=T"), (re.compile(r"samples_per_s=[\d.]+"), "samples_per_s=R"),
          (re.compile(r"\[\d\d:\d\d<\d\d:\d\d, +[\d.]+(?:batch/s|s/batch)"), "[ELAPSED"), (re.compile(r"samples_s=[\d,]+"), "samples_s=R")]


def _masked(text: str) -> list[str]:
    for pattern, mask in _TIMES:
        text = pattern.sub(mask, text)
    return [line for line in text.splitlines() if line and line != "..."]


@pytest.mark.slow
def test_train_fit_prints_what_the_readme_shows(tmp_path):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "train_fit.py")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = [chunk.strip() for chunk in re.split(r"[\r\n]", done.stderr + "\n" + done.stdout) if chunk.strip()]
    actual = set(_masked("\n".join(printed)))  # the progress bar's states and the printed lines, whichever stream
    shown = _masked(shown_output("python examples/train_fit.py"))
    missing = [line for line in shown if not any(_same_but_for_rounding(line, a) for a in actual)]
    assert shown and not missing, (missing, sorted(a for a in actual if a.startswith(("epoch", "done"))))


_NUMBER = re.compile(r"\d+\.\d+")


def _same_but_for_rounding(shown: str, printed: str) -> bool:
    """The same line, its metrics equal within 2 %: the CPU's vector instructions (AVX2, AVX-512) round
    convolutions differently, which turns an example or two of the first epoch's validation (val_acc 0.541 on
    one machine, 0.5469 on another)."""
    if _NUMBER.sub("#", shown) != _NUMBER.sub("#", printed):
        return False
    pairs = zip(map(float, _NUMBER.findall(shown)), map(float, _NUMBER.findall(printed)))
    return all(abs(a - b) <= 0.02 * max(abs(a), abs(b), 0.5) for a, b in pairs)


def test_metrics_shown_in_the_readme_may_differ_only_by_rounding():
    line = "epoch 1/3: step=32, train_loss=1.326, val_acc=0.541, lr=0.00225"
    assert _same_but_for_rounding(line, line.replace("0.541", "0.5469"))
    assert not _same_but_for_rounding(line, line.replace("0.541", "0.641"))
    assert not _same_but_for_rounding(line, line.replace("step=32", "step=33"))
    assert not _same_but_for_rounding(line, line.replace("val_acc", "val_loss"))


def _options(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {"torchdoctor": []}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[name] = [o for a in sub._actions if a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)
                             for o in a.option_strings]
        elif action.option_strings and not isinstance(action, argparse._HelpAction):
            out["torchdoctor"] += action.option_strings
    return out


def test_the_command_line_reference_lists_every_option():
    from torchdoctor.cli import build_parser

    section = README[README.index("## Command-line reference"):]
    section = section[:section.index("\n## ")]
    rows = {re.match(r"\| `torchdoctor ?(\w*)", line).group(1) or "torchdoctor": line
            for line in section.splitlines() if line.startswith("| `torchdoctor")}
    for command, options in _options(build_parser()).items():
        assert command in rows, f"no row for {command}"
        missing = [o for o in options if not re.search(rf"`{re.escape(o)}[ `]", rows[command])]
        assert not missing, f"{command}: {missing} missing from the README's command-line reference"


def test_the_readme_and_pyproject_declare_the_same_oldest_torch():
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    floor = re.search(r'"torch>=([\d.]+)"', pyproject).group(1)
    prose = " ".join(README.split())
    assert f"`torch>={floor}`" in prose and f"{floor} is the oldest PyTorch" in prose
