"""The checker's semantic model: loop classification, name kinds, guards and device moves."""

from __future__ import annotations

import ast
import textwrap

from torchdoctor.check.semantic import SemanticModel, program


def facts_of(source: str) -> SemanticModel:
    source = textwrap.dedent(source)
    return SemanticModel(ast.parse(source), source, "t.py")


def loops_by_line(f: SemanticModel) -> dict[int, str | None]:
    return {loop.lineno: f.loop_kind(loop) for loop in f.loops}


def find(f: SemanticModel, pred) -> ast.AST:
    return next(n for n in ast.walk(f.tree) if pred(n))


def name_at(f: SemanticModel, name: str, line: int) -> ast.Name:
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
    assert program.runs_on_accelerator(f) and program.has_cuda_check(f) and f.trains
    assert not program.is_ddp_program(f)
    cpu = facts_of("import torch\nx = torch.zeros(3)\n")
    assert not program.runs_on_accelerator(cpu) and not program.has_cuda_check(cpu) and not cpu.trains
    ddp = facts_of("import os\nrank = int(os.environ['LOCAL_RANK'])\n")
    assert program.is_ddp_program(ddp)


def test_loop_kinds_and_batch_vars() -> None:
    f = facts_of(SCRIPT)
    assert loops_by_line(f) == {14: "epoch", 16: "train", 26: "eval"}
    train = next(l for l in f.loops if l.lineno == 16)
    assert f.batch_vars(train) == ["images", "labels"]
    assert f.loop_info(train).index_var == "step"
    assert f.segment(f.loader_of(train)) == "train_loader"
    val = next(l for l in f.loops if l.lineno == 26)
    assert f.batch_vars(val) == ["batch", "x", "y"]


def test_name_kinds() -> None:
    f = facts_of(SCRIPT)
    at = f.tree.body[-1]
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


FUNCTIONS = """\
import torch

def train_one_epoch(model, loader, opt):
    model.train()
    for x, y in loader:
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

def predict(model, loader):
    for x in loader:
        model(x)

def main(model, train_dl, val_dl, opt):
    for epoch in range(3):
        train_one_epoch(model, train_dl, opt)
        predict(model, val_dl)
    for name in ["a", "b"]:
        print(name)
"""


def test_function_structured_script() -> None:
    f = facts_of(FUNCTIONS)
    # the epoch loop trains through a called function; a plain loop over names is nothing
    assert loops_by_line(f) == {5: "train", 11: "eval", 15: "epoch", 18: None}
    main_call = find(f, lambda n: isinstance(n, ast.Call) and getattr(n.func, "id", "") == "train_one_epoch")
    assert [fn.name for fn in f.resolve(main_call)] == ["train_one_epoch"]
    assert f.kind_of("model", main_call) == "model"  # an unannotated parameter: known by its name


TRAINER = """\
import torch

class Trainer:
    def __init__(self, model, loader):
        self.model = torch.nn.DataParallel(model)
        self.loader = loader
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def fit(self):
        step = 0
        while True:
            batch = next(self.it)
            self.opt.zero_grad()
            self.model(batch).sum().backward()
            self.opt.step()
            if self.rank == 0:
                torch.save(self.model.module.state_dict(), "m.pt")
"""


def test_class_attributes_and_while_loops() -> None:
    f = facts_of(TRAINER)
    save = find(f, lambda n: isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "save")
    assert f.kind_of("self.model", save) == "wrapper"
    assert f.kind_of("self.opt", save) == "optimizer"
    assert f.expr_kind(save.args[0].func.value, save) == "model"  # self.model.module unwraps
    loop = f.loops[0]
    assert f.loop_kind(loop) == "train" and f.batch_vars(loop) == ["batch"]
    assert f.under_rank_guard(save) and not f.under_step_guard(save)


def test_no_grad_forms_and_teacher_forward() -> None:
    f = facts_of("""\
        import torch
        @torch.inference_mode()
        def infer(m, x):
            return m(x)
        def train(student, teacher, loader, opt):
            for x, y in loader:
                with torch.no_grad():
                    t = teacher(x)
                    with torch.enable_grad():
                        inner = student(x)
                with torch.set_grad_enabled(False):
                    off = student(x)
                opt.zero_grad()
                (student(x) - t).sum().backward()
                opt.step()
        """)
    calls = {n.lineno: n for n in ast.walk(f.tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") in ("m", "teacher", "student")}
    assert f.under_no_grad(calls[4], strict=True)
    assert f.under_no_grad(calls[8], strict=True) and not f.under_no_grad(calls[10])
    assert f.under_no_grad(calls[12], strict=True) and not f.under_no_grad(calls[14])
    assert loops_by_line(f) == {6: "train"}  # the teacher forward under no_grad is not evaluation


def test_device_moves() -> None:
    f = facts_of("""\
        import torch
        x = torch.ones(2)
        a = x.to("cuda")
        b = x.to(torch.float16)
        c = x.to(device=dev, non_blocking=True).float()
        d = x.cuda()
        e = to_device(x, dev)
        """)
    assign = {n.targets[0].id: n for n in f.tree.body if isinstance(n, ast.Assign)}
    moved = {k: f.value_is_moved(v.value) for k, v in assign.items()}
    assert moved == {"x": False, "a": True, "b": False, "c": True, "d": True, "e": True}
    assert f.move_device(assign["a"].value) == "cuda" and f.move_device(assign["c"].value.func.value) == "dev"


def test_one_walk_per_file_no_rule_walks_the_tree(monkeypatch) -> None:
    """Each file is walked once, by the semantic model; no rule walks the tree again (ast.walk and
    ast.iter_child_nodes are never called), and the walk lists each node's children once."""
    from collections import Counter
    from pathlib import Path

    import torchdoctor.check.semantic.walk as walk
    from torchdoctor.check import check_source
    from torchdoctor.check.engine import load_rules

    load_rules()
    walked: Counter = Counter()
    children_listed: Counter = Counter()
    iter_children, real_walk = ast.iter_child_nodes, walk.Index._walk
    getattr_fields = walk.child_fields

    def counting_iter(node):
        walked["iter_child_nodes"] += 1
        return iter_children(node)

    def counting_walk(self):
        walked["semantic walk"] += 1
        real_walk(self)
        for node in self.order:
            children_listed[id(node)] += 1

    monkeypatch.setattr(ast, "iter_child_nodes", counting_iter)
    monkeypatch.setattr(walk.Index, "_walk", counting_walk)
    sources = sorted((Path(__file__).parent / "corpus").glob("*.py"))
    assert len(sources) >= 8 and getattr_fields is walk.child_fields
    for path in sources:
        walked.clear()
        children_listed.clear()
        assert check_source(path.read_text("utf-8"), str(path)) is not None
        assert walked == Counter({"semantic walk": 1}), f"{path.name}: {dict(walked)}"
        assert set(children_listed.values()) == {1}


def test_the_walk_visits_every_node_once_in_source_order() -> None:
    from torchdoctor.check.semantic.walk import Index

    tree = ast.parse(SCRIPT)
    index = Index(tree)
    expected = [n for n in ast.walk(tree) if not isinstance(n, (ast.expr_context, ast.operator, ast.boolop,
                                                                 ast.unaryop, ast.cmpop))]
    assert len(index.order) == len(set(map(id, index.order))) == len(expected)
    assert {id(n) for n in index.order} == {id(n) for n in expected}
    positions = [(n.lineno, n.col_offset) for n in index.order if isinstance(n, ast.stmt)]
    assert positions == sorted(positions)  # statements come in source order
    for node in expected:  # a subtree is the contiguous slice the walk recorded
        assert {id(n) for n in index.subtree(node)} == {id(n) for n in ast.walk(node)
                                                        if not isinstance(n, (ast.expr_context, ast.operator,
                                                                              ast.boolop, ast.unaryop, ast.cmpop))}


def test_frames_say_where_a_node_runs() -> None:
    f = facts_of(SCRIPT)
    item = find(f, lambda n: isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "item")
    kinds = [fr.kind for fr in f.frame(item).chain()]
    assert kinds == ["if", "loop", "loop", "module"]  # if step % 100, the batch loop, the epoch loop
    header = find(f, lambda n: isinstance(n, ast.Call) and getattr(n.func, "id", "") == "enumerate")
    assert [fr.kind for fr in f.frame(header).chain()] == ["loop", "module"]  # a loop's iterable is outside it


def test_checking_files_leaves_no_reference_cycles_behind(tmp_path) -> None:
    # check pauses the cyclic collector (runner._collector_paused): that is only sound while the checker's own
    # objects form no cycles, so each file's tree is freed by reference counting as soon as it is done.
    import gc
    from pathlib import Path

    from torchdoctor.check.runner import check_files

    corpus = sorted(str(p) for p in (Path(__file__).parent / "corpus").rglob("*.py"))[:30]
    assert corpus
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        results = check_files(corpus, jobs=1)
        gc.collect()
        ours = [type(o).__qualname__ for o in gc.garbage
                if type(o).__module__.startswith("torchdoctor") or type(o).__module__ == "ast"]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert any(r.findings for r in results) and ours == []
