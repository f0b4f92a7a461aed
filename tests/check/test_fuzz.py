"""Fuzzing the checker: generated programs never crash a rule; every safe fix re-parses and touches only its lines.

Two sources of programs: ``hypothesmith`` (any valid Python, from the grammar)
and PyTorch-shaped templates (models, loaders, loops, devices, checkpoints,
DDP) put together at random, with the awkward parts real files have: CRLF,
tabs, form feeds, non-ASCII text, ``# noqa`` comments, nesting in functions,
classes and context managers. CI runs a bounded number of examples; set
TORCHDOCTOR_FUZZ_EXAMPLES for a longer run.
"""

from __future__ import annotations

import ast
import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchdoctor.check.engine import RuleError, analyse
from torchdoctor.check.fix import apply_fixes
from torchdoctor.check.runner import Mode, check_file
from torchdoctor.check.source import split_lines
from torchdoctor.config import Settings

EXAMPLES = int(os.environ.get("TORCHDOCTOR_FUZZ_EXAMPLES", "0"))
FUZZ = settings(deadline=None, database=None, suppress_health_check=list(HealthCheck))

# ---- PyTorch-shaped templates --------------------------------------------------------------------------

NAMES = st.sampled_from(["model", "net", "encoder", "m", "modèle", "net_2"])
LOADERS = st.sampled_from(["loader", "train_loader", "dl", "batches"])
DEVICES = st.sampled_from(['"cuda"', '"cuda:0"', "device", 'torch.device("cuda")', '"cpu"', "f'cuda:{rank}'"])

SETUP = [
    "import torch",
    "import torch.nn as nn",
    "from torch import nn, optim",
    "from torch.utils.data import DataLoader",
    "import torch.distributed as dist",
    "from torch.nn.parallel import DistributedDataParallel as DDP",
    "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')",
    "{m} = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.1), nn.BatchNorm1d(8))",
    "{m} = {m}.cuda()",
    "{m}.to({d})",
    "{m} = DDP({m}, device_ids=[rank])",
    "{m} = torch.compile({m})",
    "opt = optim.Adam({m}.parameters(), lr=1e-3)",
    "opt = torch.optim.SGD({m}.parameters(), lr=0.1)",
    "{l} = DataLoader(train_set, batch_size=32, shuffle=True, num_workers=4)",
    "{l} = DataLoader(ds, batch_size=8, pin_memory=True)",
    "state = torch.load('ckpt.pt')",
    "state = torch.load(path, map_location='cpu')",
    "{m}.load_state_dict(torch.load(  # é\n    'w.pt'))",
    "scaler = torch.cuda.amp.GradScaler()",
    "dist.init_process_group('nccl')",
    "torch.backends.cudnn.benchmark = True",
    "x = torch.randn(4, 8).cuda()",
    "name = 'modèle ünïcode'  # noqa: TD999",
    "# a form feed\x0c in a comment",
]
BODY = [
    "x, y = x.to({d}), y.to({d})",
    "x = x.cuda(non_blocking=True)",
    "out = {m}(x)",
    "loss = nn.functional.cross_entropy(out, y)",
    "loss = criterion({m}(x), y)",
    "loss.backward()",
    "opt.step()",
    "opt.zero_grad()",
    "total += loss",
    "total += loss.item()",
    "print(loss.item())",
    "losses.append(loss)",
    "pred = out.argmax(1).numpy()",
    "acc = (out.argmax(1) == y).float().mean().item()",
    "scaler.scale(loss).backward()",
    "torch.save({m}, 'model.pt')",
    "torch.save({m}.state_dict(), f'ckpt_{{epoch}}.pt')",
    "with torch.autocast('cuda'):\n{i}out = {m}(x)",
    "if step % 10 == 0:\n{i}print(f'{{step}} {{loss.item():.3f}}')",
    "{m}.eval()",
    "{m}.train()",
    "torch.cuda.synchronize()",
    "x.to({d})",
    "del out  # noqa",
]
LOOP_HEADS = [
    "for x, y in {l}:",
    "for step, (x, y) in enumerate({l}):",
    "for batch in {l}:\n{i}x, y = batch['x'], batch['y']",
    "while True:",
]
WRAPPERS = [
    "def train({m}, {l}, opt):",
    "def main():",
    "if __name__ == '__main__':",
    "with torch.no_grad():",
    "for epoch in range(3):",
    "try:",
    "class Trainer:\n{i}def fit(self):",
]


@st.composite
def torch_program(draw) -> str:
    names = {"m": draw(NAMES), "l": draw(LOADERS), "d": draw(DEVICES)}
    unit = draw(st.sampled_from(["    ", "  ", "\t"]))
    lines: list[str] = []

    def add(template: str, depth: int) -> None:
        lines.extend(unit * depth + line for line in template.format(i=unit, **names).split("\n"))

    for snippet in draw(st.lists(st.sampled_from(SETUP), min_size=1, max_size=8)):
        add(snippet, 0)
    opened: list[tuple[str, int]] = []
    depth = 0
    for wrapper in draw(st.lists(st.sampled_from(WRAPPERS), max_size=3)):
        add(wrapper, depth)
        opened.append((wrapper, depth))
        depth += wrapper.count(":\n") + 1
    add(draw(st.sampled_from(LOOP_HEADS)), depth)
    for snippet in draw(st.lists(st.sampled_from(BODY), min_size=1, max_size=10)):
        add(snippet, depth + 1)
    if draw(st.booleans()):
        add(draw(st.sampled_from(BODY)), depth)  # after the loop: per-epoch code
    for wrapper, at in reversed(opened):
        if wrapper == "try:":
            add("except Exception:\n{i}raise", at)
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    return newline.join(lines) + (newline if draw(st.booleans()) else "")


# ---- the properties ----------------------------------------------------------------------------------


def _analyse(source: str) -> list:
    tree = ast.parse(source)
    errors: list[RuleError] = []
    findings = analyse(source, "fuzz.py", tree=tree, settings=Settings(), errors=errors)
    assert errors == [], (errors, source)
    lines = len(split_lines(source))
    for f in findings:
        assert f.location is not None and 1 <= f.location.line <= lines, (f, source)
    return findings


def _lines(text: str) -> list[str]:
    """The lines as ast counts them, each with its own line break (so CRLF must survive too)."""
    return re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z", text)


def _check_fixes(source: str, findings: list) -> None:
    """Each finding's fix alone, and all together: valid Python, and lines outside the edits unchanged."""
    old = _lines(source)
    for f in (f for f in findings if f.edits):
        new_text, fixed = apply_fixes(source, [f])
        if not fixed:
            continue
        ast.parse(new_text)
        new = _lines(new_text)
        first = min(e.line for e in f.edits)
        last = max(e.end_line for e in f.edits)
        assert new[:first - 1] == old[:first - 1], (f, source)
        tail = len(old) - last
        assert new[len(new) - tail:] == old[last:] if tail else True, (f, source)
    together, _ = apply_fixes(source, findings)
    ast.parse(together)
    result = check_file("fuzz.py", Settings(), Mode(gate=False, fix=True), data=source.encode(), stdin=True)
    assert not result.errors, (result.errors, source)
    if result.fixed_source is not None:
        ast.parse(result.fixed_source)


def test_the_templates_make_valid_programs_that_rules_do_flag() -> None:
    """The template property means something only if templates parse and give fixable findings."""
    seen_fixable = []

    @settings(FUZZ, max_examples=50, derandomize=True)  # the same 50 programs every run: no flaky count
    @given(torch_program())
    def collect(source: str) -> None:
        ast.parse(source)
        seen_fixable.append(any(f.edits for f in _analyse(source)))

    collect()
    assert len(seen_fixable) == 50 and sum(seen_fixable) >= 10


@settings(FUZZ, max_examples=EXAMPLES or 200)
@given(torch_program())
def test_torch_shaped_programs_never_crash_and_fixes_stay_local(source: str) -> None:
    _check_fixes(source, _analyse(source))


@pytest.mark.slow
@settings(FUZZ, max_examples=EXAMPLES or 5)
@given(st.data())
def test_grammar_generated_programs_never_crash_a_rule(data) -> None:
    hypothesmith = pytest.importorskip("hypothesmith")
    source = data.draw(hypothesmith.from_grammar())
    try:
        ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return  # the grammar is a superset of what the compiler accepts; the parser's refusal is covered elsewhere
    findings = _analyse(source)
    _check_fixes(source, findings)
    prefixed = "import torch\n" + source  # the rules look harder at a file that imports torch
    try:
        ast.parse(prefixed)
    except SyntaxError:  # a __future__ import must stay first
        return
    _check_fixes(prefixed, _analyse(prefixed))
