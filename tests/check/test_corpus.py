"""The checker against an independent corpus of realistic training scripts.

corpus/ holds scripts of the kinds people write (CIFAR ResNet, BERT fine-tuning,
packed LSTM, DDP right and wrong, AMP, a GAN, a Trainer class, inference and
export, a Kaggle notebook, a CPU-only MNIST), annotated by hand from
CATALOG.md alone with ``# expect: TDxxx`` on the line where each finding must
be reported. Unlike the fixtures, they were written without reading the rules,
so precision and recall over (file, line, code) measure the checker on code it
was not tuned for. ``# corpus-unscored: TDxxx (why)`` leaves a code out of one
file's score where the catalog does not decide the answer.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from tests.check.expectations import expected, fixture_files, reported
from torchdoctor.check import check_source

CORPUS = Path(__file__).parent / "corpus"
MIN_PRECISION, MIN_RECALL = 0.95, 0.85
_UNSCORED = re.compile(r"^#\s*corpus-unscored:\s*(TD\d{3}(?:\s*,\s*TD\d{3})*)", re.M)

Site = tuple[str, int, str]  # (file, line, code)


def unscored(source: str) -> set[str]:
    return {c.strip() for m in _UNSCORED.finditer(source) for c in m.group(1).split(",")}


def score(files: list[Path]) -> tuple[set[Site], set[Site]]:
    """(wanted, found) sites over all files, leaving out each file's unscored codes."""
    want: set[Site] = set()
    got: set[Site] = set()
    for path in files:
        source = path.read_text("utf-8")
        skip = unscored(source)
        want |= {(path.name, line, code) for line, code in expected(source) if code not in skip}
        got |= {(path.name, line, code) for line, code in reported(check_source(source, str(path))) if code not in skip}
    return want, got


def table(want: set[Site], got: set[Site]) -> str:
    tp = Counter(c for _, _, c in want & got)
    fp = Counter(c for _, _, c in got - want)
    fn = Counter(c for _, _, c in want - got)
    lines = [f"{'code':<6} {'TP':>3} {'FP':>3} {'FN':>3}"]
    for code in sorted(set(tp) | set(fp) | set(fn)):
        lines.append(f"{code:<6} {tp[code]:>3} {fp[code]:>3} {fn[code]:>3}")
    lines += [f"false positive: {s}" for s in sorted(got - want)]
    lines += [f"missed:         {s}" for s in sorted(want - got)]
    return "\n".join(lines)


def test_corpus_is_substantial() -> None:
    files = fixture_files(CORPUS)
    assert 8 <= len(files) <= 16
    sites = {(p.name, line, code) for p in files for line, code in expected(p.read_text("utf-8"))}
    assert len(sites) >= 60 and len({c for _, _, c in sites}) >= 25
    # Correct code matters as much as bugs: some files must expect nothing at all.
    assert any(not expected(p.read_text("utf-8")) for p in files)


def test_precision_and_recall_on_the_corpus(capsys: pytest.CaptureFixture[str]) -> None:
    want, got = score(fixture_files(CORPUS))
    tp = len(want & got)
    precision = tp / len(got) if got else 0.0
    recall = tp / len(want)
    report = table(want, got)
    with capsys.disabled():
        print(f"\ncorpus: {len(want)} expected sites, {len(got)} found; "
              f"precision {precision:.3f}, recall {recall:.3f}\n{report}")
    assert precision >= MIN_PRECISION and recall >= MIN_RECALL, report


def test_score_counts_sites_not_findings() -> None:
    # Two findings of one code on one line are one site; an unscored code counts for nothing.
    src = "x.cuda(); y.cuda()  # expect: TD102\n# corpus-unscored: TD605\n"
    assert unscored(src) == {"TD605"}
    assert expected(src) == {(1, "TD102")}
