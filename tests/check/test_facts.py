"""The checker's shared facts: loop classification, name kinds, guards and device moves."""

from __future__ import annotations

import ast
import textwrap

from torchdoctor.check.context import Context
from torchdoctor.check.engine import _collect_imports
from torchdoctor.check.facts import Facts


def facts_of(source: str) -> Facts:
    source = textwrap.dedent(source)
    tree = ast.parse(source)
    ctx = Context("t.py", source, tree)
    _collect_imports(tree, ctx)
    return ctx.facts


def loops_by_line(f: Facts) -> dict[int, str | None]:
    return {loop.lineno: f.loop_kind(loop) for loop in f.loops}


def find(f: Facts, pred) -> ast.AST:
    return next(n for n in ast.walk(f.ctx.tree) if pred(n))


def name_at(f: Facts, name: str, line: int) -> ast.Name:
    return find(f, lambda n: isinstance(n, ast.Name) and n.id == name and n.lineno == line)


SCRIPT = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader
from tqdm import tqdm

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Sequential(nn.Linear(8, 2), nn.Dropout(0.1)).to(device)
train_loader = DataLoader(train_ds, batch_size=32, shuffle=True)
val_loader = DataLoader(val_ds, batch_size=64)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.AdamW(model.parameters())
scaler = torch.amp.GradScaler("cuda")

for epoch in range(10):
    model.train()
    for step, (images, labels) in enumerate(tqdm(train_loader)):
        images = images.to(device)
        optimizer.zero_grad()
        loss = criterion(model(images), labels)
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(loss.item())
    model.eval()
    with torch.no_grad():
        for batch in val_loader:
            x, y = batch
            out = model(x)
"""


def test_program_flags() -> None:
    f = facts_of(SCRIPT)
    assert f.is_cuda_program and f.has_cuda_check and f.trains
    assert not f.is_ddp_program
    cpu = facts_of("import torch\nx = torch.zeros(3)\n")
    assert not cpu.is_cuda_program and not cpu.has_cuda_check and not cpu.trains
    ddp = facts_of("import os\nrank = int(os.environ['LOCAL_RANK'])\n")
    assert ddp.is_ddp_program


def test_loop_kinds_and_batch_vars() -> None:
    f = facts_of(SCRIPT)
    assert loops_by_line(f) == {14: "epoch", 16: "train", 26: "eval"}
    train = next(l for l in f.loops if l.lineno == 16)
    assert f.batch_vars(train) == ["images", "labels"]
    assert f.loop_info(train).index_var == "step"
    assert f.ctx.segment(f.loader_of(train)) == "train_loader"
    val = next(l for l in f.loops if l.lineno == 26)
    assert f.batch_vars(val) == ["batch", "x", "y"]


def test_name_kinds() -> None:
    f = facts_of(SCRIPT)
    at = f.ctx.tree.body[-1]
    kinds = {n: f.kind_of(n, at) for n in ("device", "model", "train_loader", "criterion", "optimizer", "scaler")}
    assert kinds == {"device": "device", "model": "model", "train_loader": "loader", "criterion": "loss_fn",
                     "optimizer": "optimizer", "scaler": "scaler"}
    assert f.kind_of("labels", name_at(f, "labels", 19)) == "tensor"
    assert f.kind_of("step", name_at(f, "step", 22)) is None


def test_wrapper_kind_follows_rebinding() -> None:
    f = facts_of("""\
        import torch, torch.nn as nn
        model = nn.Linear(2, 2)
        a = model
        model = nn.DataParallel(model)
        b = model
        model = model.module
        c = model
        """)
    assert f.kind_of("model", name_at(f, "model", 3)) == "model"
    assert f.kind_of("model", name_at(f, "model", 5)) == "wrapper"
    assert f.kind_of("model", name_at(f, "model", 7)) == "model"


def test_guards_and_moves() -> None:
    f = facts_of(SCRIPT)
    item = find(f, lambda n: isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "item")
    assert f.under_step_guard(item) and not f.under_no_grad(item)
    fwd = find(f, lambda n: isinstance(n, ast.Assign) and n.lineno == 28)
    assert f.under_no_grad(fwd)
    assert f.is_moved("images", name_at(f, "images", 19))
    assert not f.is_moved("labels", name_at(f, "labels", 19))
    assert f.enclosing_loop(fwd).lineno == 26
    assert f.enclosing_loop(fwd, "epoch").lineno == 14
