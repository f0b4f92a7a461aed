"""`torchdoctor check` on this repository finds exactly the pitfalls planted in examples/."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PITFALLS = ROOT / "examples" / "pitfalls"
STATIC = {"TD401", "TD402", "TD403", "TD404", "TD405", "TD302", "TD701"}  # the ones a reader of the source can see


def _check(*paths: str) -> tuple[int, list[dict]]:
    out = subprocess.run([sys.executable, "-m", "torchdoctor", "check", "--output-format", "json", *paths],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    return out.returncode, json.loads(out.stdout)


def test_the_repository_is_clean_outside_the_planted_examples():
    rc, findings = _check(".")
    assert rc == 1
    places = {f["path"] for f in findings}
    outside = sorted(p for p in places if not (p == "examples/buggy_train.py" or p.startswith("examples/pitfalls/")))
    assert outside == []


def test_the_package_tests_and_clean_examples_have_no_findings():
    rc, findings = _check("src", "benchmarks", "examples/fixed_train.py", "examples/clean_train.py", "examples/train_fit.py")
    assert (rc, findings) == (0, [])


def test_each_pitfall_example_is_found_statically_when_the_source_shows_it():
    for script in sorted(PITFALLS.glob("*.py")):
        named = re.match(r'"""(TD\d{3})', script.read_text()).group(1)
        if named not in STATIC:
            continue  # TD606 (a slow pipeline) shows only while running
        _, findings = _check(str(script.relative_to(ROOT)))
        assert named in {f["code"] for f in findings}, script.name
