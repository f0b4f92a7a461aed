"""Stage 3 rules, the input pipeline: a DataLoader feeding a GPU without pinned memory (TD304) or without
workers (TD305). Which loaders are judged (those whose batches reach a model or a device) is asked of
``semantic.loaders``; what their datasets and collate functions already put on the device is decided here."""

from __future__ import annotations

import ast
import os

from torchdoctor.check.astutil import argument, call_argument, dotted, has_kwargs, is_false, keyword, method_name, \
    param_default, string_value, strip_methods, target_names
from torchdoctor.check.context import Context
from torchdoctor.check.patterns import lazy
from torchdoctor.check.registry import rule
from torchdoctor.check.rules.kept import bound_name
from torchdoctor.check.semantic import flow, loaders, program
from torchdoctor.check.semantic.kinds import unwrap_iter

__all__ = ["dataset_on_device", "is_torch_dataloader"]


# ---- TD304 / TD305 -----------------------------------------------------------------------
def _judged_loader(ctx: Context, node: ast.AST) -> bool:
    """A DataLoader of a program that runs on an accelerator, whose batches reach a model or a device (once a loader:
    TD304 and TD305 both ask, and the answer may read other modules)."""
    return ctx.semantic.cached(("judged_loader", id(node)), lambda: _judges_loader(ctx, node))  # type: ignore[no-any-return]


def _judges_loader(ctx: Context, node: ast.AST) -> bool:
    sem = ctx.semantic
    if not (isinstance(node, ast.Call) and is_torch_dataloader(ctx, node)) \
            or has_kwargs(node) and loaders.spread_keys(sem, node) is None:
        return False  # (``**kwargs`` may carry any keyword; ``**loader_kwargs()`` of known keys does not)
    accelerated = program.runs_on_accelerator(sem) or _factory_for_accelerated_module(ctx, node)
    feeds = accelerated and loaders.feeds_device(sem, node) or _exported_to_an_accelerated_module(ctx, node)
    handed = not feeds and (_handed_to_accelerated_trainer(ctx, node)  # (``Trainer(device, loader).train(10)``, also
                            or _batches_handed_to_an_accelerated_object(ctx, node) is not None)  # in a CUDA script)
    return (feeds or handed) and not dataset_on_device(ctx, node) and not _dataset_of_text(ctx, node) \
        and not collates_onto_device(ctx, node) and not _index_loader(ctx, node) and not _in_an_uncalled_factory(ctx, node)


def _exported_to_an_accelerated_module(ctx: Context, node: ast.AST) -> bool:
    """``train_loader = DataLoader(...)`` at the top of a data module that never reads it, imported by name (``from
    data_loader import train_loader``) by a module of the project that runs on an accelerator."""
    sem = ctx.semantic
    if sem.project is None or sem.function_of(node) is not None or program.in_test(sem, node):
        return False
    name = bound_name(sem.parent(node))
    if name is None or sem.reads_of(name):
        return False  # (read here: the loops of this module say where its batches go)
    return sem.project.accelerated_importer(sem, name) is not None  # type: ignore[attr-defined]


def _in_an_uncalled_factory(ctx: Context, node: ast.AST) -> bool:
    """The loader is made in a module-level function that nothing calls: not its own module, and none of the modules
    of the project that import it (NRI's ``load_kuramoto_data`` beside the ``load_data`` every script calls). Asked
    last: it reads the importers."""
    return program.uncalled_module_function(ctx.semantic, ctx.semantic.function_of(node))


def _batches_handed_to_an_accelerated_object(ctx: Context, node: ast.Call) -> ast.Call | None:
    """``for data in loader: model.set_input(data); model.optimize_parameters()``, where ``model = get_model(opt)`` (or
    ``Pix2PixTrainer(opt)``) makes an object of a class of another module of the project that runs on a GPU itself
    (pix2pix-style wrappers move each batch in ``set_input``): the batches feed that GPU."""
    sem = ctx.semantic
    up = sem.parent(node)
    if sem.project is None or not (isinstance(up, ast.Assign) and len(up.targets) == 1 and isinstance(up.targets[0], ast.Name)):
        return None
    name = up.targets[0].id
    for loop in sem.of_type(ast.For):
        iters, _ = unwrap_iter(loop.iter)  # type: ignore[attr-defined]
        if not any(isinstance(it, ast.Name) and it.id == name for it in iters):
            continue
        items = set(target_names(loop.target))  # type: ignore[attr-defined]
        for call in sem.body(loop):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)
                    and any(isinstance(a, ast.Name) and a.id in items for a in call.args)):
                continue
            b = sem.binding_at(call.func.value.id, call)
            made = b.value if b is not None and not b.is_param and b.index is None else None
            written = dotted(made.func) if isinstance(made, ast.Call) else None
            if written and sem.project.defined_on_accelerator(sem, written):  # type: ignore[attr-defined]
                return call
    return None


def _handed_to_accelerated_trainer(ctx: Context, node: ast.Call) -> bool:
    """``loader = DataLoader(...)`` handed to ``Coach(net, loader, args)``, a class of another module of the project
    that runs on the GPU itself (it moves the model and every batch there): the batches it iterates feed the GPU."""
    sem = ctx.semantic
    value, up = node, sem.parent(node)
    if isinstance(up, ast.IfExp) and up.test is not node:  # ``DataLoader(test_ds, ...) if test_ds is not None else None``
        value, up = up, sem.parent(up)
    if sem.project is None or not (isinstance(up, ast.Assign) and len(up.targets) == 1
                                   and isinstance(up.targets[0], ast.Name)):
        return False
    key = up.targets[0].id
    reads = [r for r in sem.reads_of(key) if (b := sem.binding_at(key, r)) is not None and b.value is value]
    # (only this binding's reads: a notebook cell may make the loader again, pinned, before it is handed on)
    for r in list(reads):  # ``val_loaders.append(loader)``, then ``Trainer(..., val_dataloaders=val_loaders)``
        holder = sem.parent(r)
        if isinstance(holder, ast.Call) and isinstance(holder.func, ast.Attribute) and holder.func.attr == "append" \
                and holder.args == [r] and isinstance(holder.func.value, ast.Name):
            reads += sem.reads_of(holder.func.value.id)
    for r in reads:
        call = sem.parent(r)
        if isinstance(call, ast.keyword):
            call = sem.parent(call)
        written = dotted(call.func) if isinstance(call, ast.Call) and r is not call.func else None
        if written and isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name):
            b = sem.binding_at(call.func.value.id, call)  # ``trainer.pretrain(epoch, loader)``: the object's class
            if b is not None and not b.is_param and isinstance(b.value, ast.Call) and dotted(b.value.func):
                written = dotted(b.value.func)
                if _told_not_to_use_cuda(b.value):
                    continue  # ``model = DeepFM(sizes, use_cuda=False)``, then ``model.fit(loader_train, ...)``
        if written and not sem.resolve(call) and sem.project.defined_on_accelerator(sem, written):  # type: ignore[attr-defined]
            return True
        if written and isinstance(call, ast.Call) and not sem.resolve(call) and written.rsplit(".", 1)[-1][:1].isupper() \
                and any(program.chosen_cuda(sem, a, call) for a in (*call.args, *(k.value for k in call.keywords))) \
                and sem.project.class_of_project(sem, written):  # type: ignore[attr-defined]
            return True  # ``Trainer(device, loader)`` handed a CUDA choice: the trainer runs where it is told
    return False


_CUDA_FLAG = lazy(r"(?i)^(use_?)?(cuda|gpu|gpus)$")


def _told_not_to_use_cuda(made: ast.Call) -> bool:
    """The object is made with a CUDA switch turned off: ``DeepFM(feature_sizes, use_cuda=False)`` (its class picks
    CUDA only ``if use_cuda and torch.cuda.is_available()``)."""
    return any(k.arg and _CUDA_FLAG.match(k.arg) and isinstance(k.value, ast.Constant) and not k.value.value
               for k in made.keywords)


def _index_loader(ctx: Context, call: ast.Call) -> bool:
    """``for perm in DataLoader(range(n), batch_size, shuffle=True)``: batches of indices into tensors already on
    the device (full-graph GNN training); a few bytes a step, nothing to pin or to load in workers."""
    data = argument(call, "dataset", 0)
    for _ in range(4):  # ``order = torch.LongTensor(list(range(n)))``, ``DataLoader(dataset=order, ...)``
        if isinstance(data, ast.Name) and (b := ctx.semantic.binding_at(data.id, call)) is not None \
                and not b.is_param and b.index is None and b.value is not None:
            data = b.value
        elif isinstance(data, ast.Call) and len(data.args) == 1 and (dotted(data.func) in ("list", "tuple") or ctx.call_name(
                data) in ("torch.LongTensor", "torch.tensor", "torch.as_tensor", "torch.IntTensor")):
            data = data.args[0]
        else:
            break
    return isinstance(data, ast.Call) and (dotted(data.func) == "range" or ctx.call_name(data) == "torch.arange")


def _collates_raw_items(ctx: Context, call: ast.Call) -> bool:
    """``collate_fn=collate_fn`` with ``def collate_fn(batch): data, label = zip(*batch); return data, label``: the
    batches are the dataset's own items regrouped, not tensors torch made, and the items of a dataset whose class
    this file does not show making tensors are taken for plain rows (NumPy arrays, lists): nothing to pin."""
    sem = ctx.semantic
    fn = keyword(call, "collate_fn")
    funcs = sem.bindings.functions.get(fn.value.id, []) if fn is not None and isinstance(fn.value, ast.Name) else []
    if fn is not None and isinstance(fn.value, ast.Name) and fn.value.id in ("list", "tuple") \
            and sem.binding_at(fn.value.id, call) is None:
        pass  # ``collate_fn=list``: the batch is the list of the dataset's items, regrouped by Python alone
    elif not funcs and fn is not None and isinstance(fn.value, ast.Name) and fn.value.id in sem.names.from_imports \
            and sem.project is not None:  # ``from data.batcher import coll_fn``: regroups with Python alone, there
        found = sem.project.function_for(sem, ast.Call(func=fn.value, args=[], keywords=[]))  # type: ignore[attr-defined]
        if getattr(found, "returns", None) != "python":
            return False
    elif not funcs or not all(_only_regroups(sem, f) or loaders.only_python(sem, f) for f in funcs):
        return False
    made = _bound_call(sem, argument(call, "dataset", 0), call)
    if made is not None and (sem.call_name(made) or "").startswith("torch."):
        return False  # (``TensorDataset(x, y)``: its items are tensors, whatever regroups them)
    cls = sem.calls_index.classes.get(sem.call_name(made) or "") if made is not None else None
    return cls is None or not any(isinstance(n, ast.Call) and (sem.call_name(n) or "").startswith("torch.")
                                  for n in sem.subtree(cls))


def _collates_arrays(ctx: Context, call: ast.Call) -> bool:
    """``collate_fn=dataset.collate_fn`` of a Dataset class (this file's or another module's) whose collate method
    makes no torch tensor: the batches are NumPy arrays, made into tensors after the loader; nothing to pin."""
    sem = ctx.semantic
    fn = keyword(call, "collate_fn")
    value = fn.value if fn is not None else None
    if not (isinstance(value, ast.Attribute) and value.attr == "collate_fn"):
        return False
    made = _bound_call(sem, value.value, call)
    written = dotted(made.func) if made is not None else None
    if not written:
        return False
    cls = sem.calls_index.classes.get(written)
    if cls is not None:
        return loaders.class_collates_arrays(sem, cls)
    return sem.project is not None and bool(sem.project.class_collates_arrays(sem, written))  # type: ignore[attr-defined]


def _bound_call(sem, expr: ast.AST | None, at: ast.AST) -> ast.Call | None:  # type: ignore[no-untyped-def]
    """The call a plain name was last bound to before ``at`` (``dataset = MelDataset(rows)``), if any."""
    b = sem.binding_at(expr.id, at) if isinstance(expr, ast.Name) else None
    return b.value if b is not None and not b.is_param and isinstance(b.value, ast.Call) else None


def _methods(sem, made: ast.Call | None, name: str) -> list[ast.FunctionDef]:  # type: ignore[no-untyped-def]
    """The methods called ``name`` of the class of this file that ``made`` constructs."""
    cls = sem.calls_index.classes.get(sem.call_name(made) or "") if made is not None else None
    return [f for f in getattr(cls, "body", []) if isinstance(f, ast.FunctionDef) and f.name == name]


def _only_regroups(sem, func: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """The collate function's every statement is ``a, b = zip(*batch)`` (or a docstring) and its return hands back
    those names or the batch itself: no call but ``zip`` (``tokenizer.pad(..., return_tensors="pt")`` makes tensors)."""
    params = {a.arg for a in func.args.args}  # type: ignore[attr-defined]
    names = set(params)
    for stmt in func.body:  # type: ignore[attr-defined]
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) and dotted(stmt.value.func) == "zip" \
                and all(isinstance(a, ast.Starred) and isinstance(a.value, ast.Name) and a.value.id in params
                        for a in stmt.value.args):
            names |= {n.id for t in stmt.targets for n in sem.subtree(t) if isinstance(n, ast.Name)}
            continue
        if isinstance(stmt, ast.Return) and stmt.value is not None and all(
                isinstance(v, ast.Name) and v.id in names
                for v in (stmt.value.elts if isinstance(stmt.value, ast.Tuple) else [stmt.value])):
            continue
        return False
    return True


def collates_onto_device(ctx: Context, call: ast.Call) -> bool:
    """``collate_fn=partial(collate, device=device)`` or a collate function that moves its batch: the loader
    yields device tensors (pinning them raises; workers cannot make them)."""
    sem = ctx.semantic
    fn = keyword(call, "collate_fn")
    value = fn.value if fn is not None else None
    if isinstance(value, ast.Name):
        b = sem.binding_at(value.id, call)
        value = b.value if b is not None and b.value is not None and not b.is_param else value
    if isinstance(value, ast.Call) and (sem.call_name(value) or "").endswith("partial") and value.args:
        if any(k.arg == "device" and string_value(k.value) != "cpu" for k in value.keywords):
            return True
        value = value.args[0]
    if isinstance(value, ast.Lambda):  # ``lambda b: build_batch(b, 0.5)`` whose helper returns ``xs.to(device)``
        calls = [n for n in sem.subtree(value.body) if isinstance(n, ast.Call)]
        return any(_moves_off_cpu(ctx, n) or _device_handed_elsewhere(ctx, n) for n in calls) or any(
            isinstance(n, ast.Call) and (_moves_off_cpu(ctx, n) or _builds_on_device(ctx, n))
            for c in calls for f in sem.resolve(c) for n in sem.local_nodes(f))
    funcs = sem.bindings.functions.get(value.id, []) if isinstance(value, ast.Name) else []
    if isinstance(value, ast.Attribute):  # ``collate_fn=ds.collate_fn``
        funcs = _methods(sem, _bound_call(sem, value.value, call), value.attr)
    if isinstance(value, ast.Call):  # ``collate_fn=ToDevice(device)``: an object of this file whose ``__call__`` moves
        funcs = _methods(sem, value, "__call__")
    return any(isinstance(n, ast.Call) and (_moves_off_cpu(ctx, n) or _builds_on_device(ctx, n))
               for f in funcs for n in sem.local_nodes(f))


def _device_handed_elsewhere(ctx: Context, call: ast.Call) -> bool:
    """``variable_time_collate_fn(batch, args, device, ...)``, a collate helper of another module (not torch's) handed
    the device: it builds the batch there, as the ones of this file that are handed it do."""
    sem = ctx.semantic
    head = (dotted(call.func) or "").split(".")[0]
    return bool(head) and head in (*sem.names.from_imports, *sem.names.imports) and not sem.resolve(call) \
        and not (sem.call_name(call) or "").startswith("torch.") and any(
            "device" in (dotted(a) or "").lower() and string_value(a) != "cpu" or sem.expr_kind(a, call) == "device"
            for a in [*call.args, *(k.value for k in call.keywords)])


def _builds_on_device(ctx: Context, call: ast.Call) -> bool:
    """``collate_batch(batch, ..., device, max_padding=128)``: a helper of this file handed the device, whose tensors
    it makes there (``torch.tensor(ids, device=device)``)."""
    sem = ctx.semantic
    funcs = sem.resolve(call)
    handed = [a for a in [*call.args, *(k.value for k in call.keywords)]
              if "device" in (dotted(a) or "").lower() or sem.expr_kind(a, call) == "device"]
    return bool(funcs and handed) and any(
        isinstance(n, ast.Call) and (keyword(n, "device") is not None and string_value(keyword(n, "device").value) != "cpu"
                                     or _moves_off_cpu(ctx, n))
        for f in funcs for n in sem.local_nodes(f))


def _moves_off_cpu(ctx: Context, call: ast.Call) -> bool:
    return ctx.semantic.is_device_move(call) and (ctx.semantic.move_device(call) or "").strip("'\"") != "cpu"


def _dataset_of_text(ctx: Context, call: ast.Call) -> bool:
    """The dataset's items are strings (``NameDataset()`` indexing names read from a CSV file): the loader
    yields lists of strings, and the tensors are made after it."""
    sem = ctx.semantic
    arg = call.args[0] if call.args else (keyword(call, "dataset").value if keyword(call, "dataset") else None)  # type: ignore[union-attr]
    if isinstance(arg, ast.Name):
        b = sem.binding_at(arg.id, call)
        arg = b.value if b is not None and not b.is_param else None
    if isinstance(arg, ast.ListComp) and (isinstance(arg.elt, ast.JoinedStr) or isinstance(arg.elt, ast.Call)
                                          and isinstance(arg.elt.func, ast.Name) and arg.elt.func.id == "str"):
        return True  # ``datasets = [str(sample) for sample in contexts]``: batches of strings, tokenized in the loop
    if not isinstance(arg, ast.Call):
        return False
    written = dotted(arg.func) or ""
    cls = sem.calls_index.classes.get(written)
    if cls is not None:
        return loaders.class_yields_text(sem, cls)
    return sem.project is not None and bool(written) and sem.project.class_yields_text(sem, written)  # type: ignore[attr-defined]


def _factory_for_accelerated_module(ctx: Context, node: ast.Call) -> bool:
    """A data module that builds and returns loaders (``def train_dataloader(self): return DataLoader(...)``,
    ``def get_loader(...)``), or keeps one on the object it makes (``self.data = DataLoader(...)``), imported by a
    module of the project that runs on an accelerator."""
    sem = ctx.semantic
    if sem.project is None or sem.function_of(node) is None or program.in_test(sem, node):
        return False
    top = node
    while isinstance(up := sem.parent(top), (ast.DictComp, ast.ListComp, ast.Dict, ast.List, ast.Tuple)):
        top = up  # ``return {split: DataLoader(ds, ...) for split, ds in sets.items()}``: loaders in a container
    parent = sem.parent(top)
    names = {dotted(t) for t in parent.targets} if isinstance(parent, ast.Assign) else set()
    func = sem.function_of(node)
    yields = any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in sem.local_nodes(func))
    returned = isinstance(parent, ast.Return) or any(_hands_out(r, names) and (yields or not isinstance(r, ast.For))
                                                     for r in sem.local_nodes(func))
    cls = sem.class_of(func)
    held = cls is not None and any((n or "").startswith("self.") for n in names)  # ``self.data = DataLoader(...)``
    maker = cls.name if cls is not None else func.name  # what an importer must take to reach this loader
    return (returned or held) and sem.project.accelerated_importer(sem, maker) is not None  # type: ignore[attr-defined]


def _hands_out(node: ast.AST, names: set[str | None]) -> bool:
    """``return loader`` (or ``return dataset, loader``), ``yield from loader``, ``yield batch`` in a loop over it."""
    if isinstance(node, (ast.Return, ast.YieldFrom)):  # (``return data_set, data_loader`` too)
        values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
        return any(isinstance(v, ast.Name) and v.id in names for v in values)
    return isinstance(node, (ast.For, ast.AsyncFor)) and dotted(node.iter) in names


_LAZY_WRAPPERS = frozenset({"iter", "enumerate", "zip", "map", "itertools.cycle", "itertools.chain", "itertools.islice"})


def _never_loads(ctx: Context, value: ast.AST, depth: int = 0) -> bool:
    """The loader a function makes is bound to a name that nothing reads before it is bound again, or that only a lazy
    wrapper takes whose own result nothing reads (``train_iter = DataLoader(...)``, ``looper = infiniteloop(
    train_iter)`` of a generator, both made again before the training loop; a sampling script's copy of them): it
    never loads a batch. Judged in straight-line code only: the statement is in no loop, and a read that sees another
    binding sees one made after it in the same block."""
    sem = ctx.semantic
    stmt = sem.parent(value)
    func = sem.function_of(value)
    if func is None or not (isinstance(stmt, ast.Assign) and stmt.value is value and len(stmt.targets) == 1
                            and isinstance(stmt.targets[0], ast.Name)):
        return False
    block = sem.index.block_of(stmt)
    if block is None or sem.loops_around(stmt):
        return False
    name = stmt.targets[0].id
    if any(isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names for n in sem.local_nodes(func)):
        return False
    later = block[next(k for k, x in enumerate(block) if x is stmt) + 1:]
    for read in sem.reads_of(name):
        if not sem.contains(func, read):
            continue
        b = sem.binding_at(name, read)
        if b is None:
            return False
        if b.value is value:
            up = sem.parent(read)
            if depth < 2 and isinstance(up, ast.Call) and read in up.args and _never_loads(ctx, up, depth + 1) \
                    and _lazy(ctx, up):  # (last: what a call runs may be in a module not read yet)
                continue
            return False
        if (read.lineno, read.col_offset) < (stmt.lineno, stmt.col_offset):  # type: ignore[attr-defined]
            continue  # (an earlier binding's read, before this one is made: no loop brings it back)
        if not any(x is b.node for x in later):
            return False  # (the read may see this loader: ``if ...: loader = A else: loader = B``, ``return loader``;
            # ``if cond: loader = B``: when not ``cond``, it does)
    return True


def _lazy(ctx: Context, call: ast.Call) -> bool:
    """Calling ``call`` runs nothing of its arguments until its result is iterated: a generator function (of this file
    or of another module of the project) or a lazy builtin."""
    sem = ctx.semantic
    if (ctx.call_name(call) or "") in _LAZY_WRAPPERS:
        return True
    funcs = sem.resolve(call)
    if funcs:
        return all(any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in sem.local_nodes(f)) for f in funcs)
    found = sem.project.function_for(sem, call) if sem.project is not None else None  # type: ignore[attr-defined]
    return found is not None and found.returns == "generator"


@rule("TD304", calls=loaders.LOADER_NAMES)
def loader_not_pinned(node: ast.AST, ctx: Context) -> None:
    """A DataLoader in a CUDA program without pin_memory=True."""
    if not node.args and not node.keywords:  # type: ignore[attr-defined]
        return  # ``dataloader = DataLoader()`` in a slide's pseudo-code: no dataset, nothing to load
    pin = keyword(node, "pin_memory")  # type: ignore[arg-type]
    if pin is not None and not is_false(pin.value) and not left_at_its_falsy_default(ctx, pin.value, node):
        return  # (first: whether the loader is judged may read the modules that import this one)
    if not _judged_loader(ctx, node) or pin is None and "pin_memory" in _passes(ctx, node) \
            or _collates_raw_items(ctx, node) or _collates_arrays(ctx, node):
        return
    if program.is_rpc_program(ctx.semantic) or _never_loads(ctx, node):
        return  # RPC serialises every batch it sends: pinned memory buys nothing there
    if _moves_only_rebuilt_batches(ctx, node):
        return  # (``x = torch.cat([support, query], dim=1); x = x.to(device)``: the tensor copied is a fresh one)
    if _function_moves_off_cuda_only(ctx, node):
        return  # (``device = torch.device("mps") if ... else torch.device("cpu")`` in the function: pinning is CUDA's)
    where = ""
    if not program.runs_on_accelerator(ctx.semantic):  # a loader factory: say whose GPU it feeds
        func = ctx.semantic.function_of(node)
        cls = ctx.semantic.class_of(node)
        maker = cls.name if cls is not None else func.name if func is not None else None
        user = ctx.semantic.project.accelerated_importer(ctx.semantic, maker) \
            if maker is not None or not _handed_to_accelerated_trainer(ctx, node) else None  # type: ignore[union-attr]
        taker = _batches_handed_to_an_accelerated_object(ctx, node) if not user else None
        where = f" (`{os.path.relpath(user, os.path.dirname(os.path.abspath(ctx.path)))}` imports it and runs on a GPU)" \
            if user else f" (its batches go to `{ctx.name(taker.func)}(...)`, of an object that runs on a GPU)" if taker \
            else " (the trainer of another module it is handed runs on a GPU)"
    ctx.report("TD304", node, f"{_loader_said(node)} without `pin_memory=True` feeds a CUDA model from pageable memory{where}",
               fix="pass `pin_memory=True` (or `pin_memory=torch.cuda.is_available()`)")


_NO_CUDA_DEVICE = lazy(r"""(?i)["'](mps|cpu|xpu)["']""")


def _function_moves_off_cuda_only(ctx: Context, call: ast.AST) -> bool:
    """The loader's function moves everything to a device it picks itself, and never a CUDA one (``device =
    torch.device("mps") if torch.backends.mps.is_available() else torch.device("cpu")``, then ``x.to(device)``), in a
    notebook whose other cells do pick CUDA: pinned memory speeds up copies to CUDA devices only."""
    sem = ctx.semantic
    func = sem.function_of(call)
    moves = [m for m in sem.device_moves() if sem.contains(func, m)] if func is not None else []
    if not moves:
        return False
    for move in moves:
        target = keyword(move, "device")
        arg = target.value if target is not None else move.args[0] if move.args else None  # type: ignore[attr-defined]
        b = sem.binding_at(arg.id, move) if isinstance(arg, ast.Name) else None
        if b is None or b.is_param or b.value is None or sem.function_of(b.node) is not func \
                or len([x for x in sem.bindings_of(arg.id) if sem.function_of(x.node) is func]) != 1:
            return False
        text = sem.segment(b.value)
        if "cuda" in text.lower() or not _NO_CUDA_DEVICE.search(text):
            return False
    return True


_REBUILDS = frozenset({"torch.cat", "torch.stack", "torch.concat", "torch.concatenate", "torch.vstack", "torch.hstack",
                       "torch.tensor"})  # (``torch.tensor(list(labels))``: a copy, too)


def _moves_only_rebuilt_batches(ctx: Context, call: ast.AST) -> bool:
    """Every loop of the file over this loader moves to the device only tensors it first joins on the host
    (``x = torch.cat([support_set, query_set], dim=1)``, then ``x.to(device)``): what crosses the bus is a fresh,
    pageable tensor whatever the loader pins, so pinning saves nothing."""
    sem = ctx.semantic
    stmt = sem.parent(call)
    if (name := bound_name(stmt)) is None or stmt.value is not call:  # type: ignore[union-attr]
        return False
    def reads(key: str, bound_by: ast.AST) -> list[ast.AST]:  # (not ``len(loaders[phase].dataset)``: a size asked)
        return [r for r in sem.reads_of(key) if (b := sem.binding_at(key, r)) is not None and b.node is bound_by
                and not _size_asked(sem, r)]

    holders, uses = {name: stmt}, 0
    for read in reads(name, stmt):  # (``dataloaders = {"train": train_loader, ...}``: the loops over ``dataloaders[p]``)
        held, up = sem.parent(read), sem.parent(sem.parent(read))
        alias = bound_name(up) if isinstance(held, ast.Dict) and isinstance(up, ast.Assign) and up.value is held else None
        if alias is None:
            uses += 1
        elif alias not in holders:
            holders[alias] = up
            uses += len(reads(alias, up))
    loops = [lp for lp in sem.of_type(ast.For) if (info := sem.loop_info(lp)).is_batch and info.loader is not None
             and any(isinstance(n, ast.Name) and n.id in holders and (b := sem.binding_at(n.id, n)) is not None
                     and b.node is holders[n.id] for n in sem.subtree(info.loader))]
    if not loops or len(loops) != uses:
        return False  # (the loader is also used elsewhere: handed on, peeked, iterated by a helper)
    for loop in loops:
        batch = set(sem.loop_info(loop).batch_vars)
        moves = [m for m in sem.device_moves() if sem.contains(loop, m)]
        if not moves:
            return False
        for move in moves:
            recv = move.func.value if isinstance(move.func, ast.Attribute) else None  # type: ignore[attr-defined]
            b = sem.binding_at(recv.id, move) if isinstance(recv, ast.Name) else None
            made = recv if isinstance(recv, ast.Call) else b.value if b is not None and not b.is_param \
                and b.index is None else None
            if not (isinstance(made, ast.Call) and ctx.call_name(made) in _REBUILDS and made.args
                    and any(isinstance(n, ast.Name) and n.id in batch for n in sem.subtree(made.args[0]))):
                return False
    return True


def _size_asked(sem, read: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``len(loader)``, ``len(loaders[phase].dataset)``, ``loader.batch_size``: a loader's size, no batch drawn."""
    node, up = read, sem.parent(read)
    while isinstance(up, ast.Subscript) and up.value is node:
        node, up = up, sem.parent(up)
    if isinstance(up, ast.Attribute) and up.attr in ("dataset", "batch_size", "sampler"):
        node, up = up, sem.parent(up)
        if not isinstance(up, ast.Call) or up.func is not node:
            return True
    return isinstance(up, ast.Call) and isinstance(up.func, ast.Name) and up.func.id == "len" and node in up.args


def left_at_its_falsy_default(ctx: Context, value: ast.AST, at: ast.AST) -> bool:
    """``pin_memory=pin_memory`` (or ``num_workers=num_workers``) of a parameter of the enclosing function that
    defaults to False (or 0) and that no call passes but as that default (``get_loaders(num_workers=0)``), here or in
    the other modules of the project: the loader gets the default."""
    sem = ctx.semantic
    func = sem.function_of(at)
    if not isinstance(value, ast.Name) or func is None or (b := sem.binding_at(value.id, at)) is None \
            or not b.is_param or b.node is not func:
        return False
    default = param_default(func, value.id)  # type: ignore[arg-type]
    if not (isinstance(default, ast.Constant) and default.value in (False, 0) and default.value is not None):
        return False
    for site in sem.call_sites(func):
        if any(k.arg is None for k in site.keywords) or any(isinstance(a, ast.Starred) for a in site.args):
            return False
        given = call_argument(site, func, value.id)  # type: ignore[arg-type]
        if given is not None and not (isinstance(given, ast.Constant) and given.value in (False, 0)):
            return False
    return not (sem.project is not None and sem.project.callers_pass(sem, func, value.id))  # type: ignore[attr-defined]


@rule("TD305", calls=loaders.LOADER_NAMES)
def loader_without_workers(node: ast.AST, ctx: Context) -> None:
    """A DataLoader with num_workers=0 in a CUDA training script."""
    if not node.args and not node.keywords:  # type: ignore[attr-defined]
        return  # (no dataset: pseudo-code)
    workers = keyword(node, "num_workers")  # type: ignore[arg-type]
    value = workers.value if workers is not None else loaders.spread_value(ctx.semantic, node, "num_workers")  # type: ignore[arg-type]
    key = dotted(value) if isinstance(value, (ast.Name, ast.Attribute)) else None
    if key is not None and (key.count(".") == 0 or key.startswith("self.") and key.count(".") == 1) \
            and len(bound := ctx.semantic.bindings_of(key)) == 1 and not bound[0].is_param \
            and isinstance(bound[0].value, ast.Constant) and bound[0].value.value == 0 and bound[0].value.value is not False:
        value = bound[0].value  # ``NUM_WORKERS = 0`` (or ``self.num_workers = 0`` in ``__init__``) set once, then
        # ``num_workers=NUM_WORKERS``: told 0
    if value is not None and not (isinstance(value, ast.Constant) and value.value == 0) \
            and not left_at_its_falsy_default(ctx, value, node):
        return  # (``**params`` of ``params = {"num_workers": 0, ...}``: told 0, as a keyword would)
    if not _judged_loader(ctx, node) or not (_trains(ctx) or _importer_trains(ctx, node)) \
            or value is None and "num_workers" in _passes(ctx, node) or _only_peeked_afresh(ctx, node) \
            or _never_loads(ctx, node):
        return
    what = "`num_workers=0`" if value is not None else "no `num_workers` (0)"
    ctx.report("TD305", node, f"{_loader_said(node)} with {what} loads every batch in the training process",
               fix="pass `num_workers=4` (tune to the CPU count) and `persistent_workers=True`")


def _only_peeked_afresh(ctx: Context, node: ast.AST) -> bool:
    """Every read of the loader's name is ``next(iter(loader))``: one batch from a fresh iterator each time (a test
    batch drawn every epoch), where workers would be started again on every read; more of them would only cost."""
    sem = ctx.semantic
    if (name := bound_name(sem.parent(node))) is None:
        return False
    reads = [r for r in sem.reads_of(name) if (b := sem.binding_at(name, r)) is not None and b.value is node]
    return bool(reads) and all(isinstance(it := sem.parent(r), ast.Call) and dotted(it.func) == "iter" and it.args == [r]
                               and isinstance(nx := sem.parent(it), ast.Call) and dotted(nx.func) == "next"
                               and nx.args == [it] for r in reads)


def _importer_trains(ctx: Context, node: ast.AST) -> bool:
    """A loader factory (``def make_loaders(root, bs): ... return train_loader, test_loader``) whose accelerated
    importer backpropagates (``from data import make_loaders`` in train.py, then ``loss.backward()``), itself or in a
    module it imports (``model.run_epoch(loader, opt)`` of a model class whose method trains)."""
    sem = ctx.semantic
    func = sem.function_of(node)
    if sem.project is None or func is None:
        return False  # (a factory module on the GPU itself, through its callers' ``device``, trains nothing either)
    cls = sem.class_of(func)
    maker, project = cls.name if cls is not None else func.name, sem.project
    user = project.accelerated_importer(sem, maker)  # type: ignore[attr-defined]
    return bool(user) and (project.trains_here_or_through(user)  # type: ignore[attr-defined]
                           or project.accelerated_importer(sem, maker, training=True) is not None)  # type: ignore[attr-defined]
    # (the first importer found may not train: ``evaluate.py`` found first, ``train.py`` beside it)


def _trains(ctx: Context) -> bool:
    """The program backpropagates: here, or in a function of another module of the project that this file calls
    (``train_epoch(model, optimizer, device, train_loader)`` from ``train/train_molecules.py``)."""
    sem = ctx.semantic

    def compute() -> bool:
        if sem.trains:
            return True
        if sem.project is None:
            return False
        for call in sem.calls:
            head = (dotted(call.func) or "").split(".")[0]
            if head and (head in sem.names.from_imports or head in sem.names.imports) and any(
                    _holds_loader(ctx, a, call) for a in (*call.args, *(k.value for k in call.keywords))):
                # (handed a loader, maybe by keyword: ``train(model, train_dataloader=loader)``)
                found = sem.project.function_for(sem, call)  # type: ignore[attr-defined]
                if found is not None and "backward" in found.effects:
                    return True
            # ``coach = Coach(net, loader, args)`` then ``coach.fit()``: a method of the object handed the loader
            if isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name):
                b = sem.binding_at(call.func.value.id, call)
                made = b.value if b is not None and not b.is_param and isinstance(b.value, ast.Call) else None
                handed = made is not None and any(_holds_loader(ctx, a, made)
                                                  for a in (*made.args, *(k.value for k in made.keywords)))
                # (``Solver(data, model, opt, args)`` of ``data = {"tr_loader": tr_loader, "cv_loader": cv_loader}``)
                # (``for x, y in train_loader: model.update(x, y)``: a method of a project object run on every batch)
                if handed or made is not None and any(sem.kinds.is_loader_expr(i) for loop in sem.loops_around(call)
                                                       if isinstance(loop, ast.For) for i in unwrap_iter(loop.iter)[0]):
                    found = sem.project.function_for(sem, call)  # type: ignore[attr-defined]
                    if found is not None and "backward" in found.effects:
                        return True
        return False

    return sem.cached("trains_through_project", compute)  # type: ignore[no-any-return]


def _holds_loader(ctx: Context, arg: ast.AST, at: ast.AST) -> bool:
    """``arg`` is a loader, or a dict that holds one (``params_train = {"train_dl": train_dl, "val_dl": val_dl,
    ...}`` handed to ``train_val(model, params_train)``)."""
    sem = ctx.semantic
    if not isinstance(arg, ast.Name):
        return False
    if sem.expr_kind(arg, at) == "loader":
        return True
    b = sem.binding_at(arg.id, at)
    value = b.value if b is not None and not b.is_param and b.index is None else None
    values = value.values if isinstance(value, ast.Dict) else [k.value for k in value.keywords] \
        if isinstance(value, ast.Call) and dotted(value.func) == "dict" else []
    return any(isinstance(v, ast.Name) and sem.expr_kind(v, b.node) == "loader" for v in values)  # type: ignore[union-attr]


def is_torch_dataloader(ctx: Context, call: ast.Call) -> bool:
    """torch's DataLoader, or torchdata's StatefulDataLoader (a drop-in with the same pipeline arguments); not a
    project's own class of that name brought in by ``from captioning.data.dataloader import *``."""
    q = ctx.call_name(call) or ""
    if q == "DataLoader" and ctx.semantic.project is not None and ctx.semantic.names.star \
            and ctx.semantic.project.defines_class(ctx.semantic, "DataLoader"):  # type: ignore[attr-defined]
        return False
    return q in _TORCH_LOADERS or q.startswith("torchdata.") and q.endswith(".StatefulDataLoader") \
        or q in _PYG_LOADERS or _loader_subclass(ctx, call, q) or _reexported_loader(ctx, call, q) \
        or isinstance(call.func, ast.Name) and "loader" in call.func.id and _loader_alias(ctx, call)


def _reexported_loader(ctx: Context, call: ast.Call, q: str) -> bool:
    """``from dataset import BufferDataset, DataLoader`` where dataset.py imports torch's (FastSpeech)."""
    sem = ctx.semantic
    written = dotted(call.func)
    if sem.project is None or not q.endswith(".DataLoader") or not written or written.split(".")[0] not in \
            sem.names.from_imports and written.split(".")[0] not in sem.names.imports:
        return False
    origin = sem.project.external_origin(sem, written)  # type: ignore[attr-defined]
    return origin in _TORCH_LOADERS[:2] or origin in _PYG_LOADERS


def _passes(ctx: Context, call: ast.Call) -> frozenset[str]:
    """What a loader call turns on besides its own keywords: through its ``**`` arguments or its subclass."""
    return (loaders.spread_keys(ctx.semantic, call) or frozenset()) | _subclass_passes(ctx, call)


def _subclass_passes(ctx: Context, call: ast.Call) -> frozenset[str]:
    """``ClipLoader(ds, batch_size=16)`` of a DataLoader subclass (of this file or another module of the project)
    whose ``__init__`` passes ``num_workers=workers`` on to torch's: what it turns on when not given."""
    sem = ctx.semantic
    written = dotted(call.func) or ""
    cls = sem.calls_index.classes.get(written)
    if cls is not None:
        return loaders.loader_init_passes(sem, cls) if loaders.builds_a_loader(sem, cls) else frozenset()
    if sem.project is None or not written[:1].isupper() and "." not in written:
        return frozenset()
    return sem.project.loader_passes(sem, written)  # type: ignore[attr-defined, no-any-return]


_TORCH_LOADERS = ("torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader", "DataLoader",
                  "StatefulDataLoader")
# PyTorch Geometric's loaders subclass torch's and take its pipeline arguments (pin_memory, num_workers)
_PYG_LOADERS = ("torch_geometric.loader.DataLoader", "torch_geometric.data.DataLoader", "torch_geometric.loader.DataListLoader",
                "torch_geometric.data.DataListLoader", "torch_geometric.loader.DenseDataLoader",
                "torch_geometric.data.DenseDataLoader", "torch_geometric.loader.NeighborLoader",
                "torch_geometric.loader.LinkNeighborLoader")


def _loader_subclass(ctx: Context, call: ast.Call, q: str) -> bool:
    """``PairLoader(items, batch_size=64)`` of ``class PairLoader(torch.utils.data.DataLoader)`` in this file or
    another module of the project, passing what it is given on to torch's (``**kwargs``)."""
    sem = ctx.semantic
    cls = sem.calls_index.classes.get(q)
    if cls is not None:
        bases = [sem.qualname(b) or "" for b in cls.bases]  # type: ignore[attr-defined]
        return any(b in _TORCH_LOADERS[:2] or b in _PYG_LOADERS for b in bases) and loaders.builds_a_loader(sem, cls)
    written = dotted(call.func)
    if not any(k.arg in ("batch_size", "num_workers", "shuffle", "sampler") for k in call.keywords):
        return False  # (how a loader is built: asked before the other module is read)
    last = written.rsplit(".", 1)[-1] if written else ""
    if sem.project is None or not written or not (last[:1].isupper() or "Loader" in last) \
            or written.split(".")[0] not in sem.names.imports and written.split(".")[0] not in sem.names.from_imports:
        return False
    return bool(sem.project.class_builds_loader(sem, written))  # type: ignore[attr-defined]


@rule("TD304", ast.Module)
def renamed_loaders_not_pinned(node: ast.AST, ctx: Context) -> None:
    """The loaders ``calls=`` does not see by name: an alias (``from torch_geometric.loader import DataLoader as
    GeoLoader``), a subclass of torch's (``class PairLoader(torch.utils.data.DataLoader)``)."""
    for call in _renamed_loaders(ctx):
        loader_not_pinned(call, ctx)


@rule("TD305", ast.Module)
def renamed_loaders_without_workers(node: ast.AST, ctx: Context) -> None:
    for call in _renamed_loaders(ctx):
        loader_without_workers(call, ctx)


def _renamed_loaders(ctx: Context) -> list[ast.Call]:
    sem = ctx.semantic

    def compute() -> list[ast.Call]:
        out: list[ast.Call] = []
        for call in sem.calls:
            name = call.func.id if isinstance(call.func, ast.Name) else call.func.attr \
                if isinstance(call.func, ast.Attribute) else ""
            imported = sem.names.from_imports.get(name)
            if isinstance(call.func, ast.Name) and "loader" in name and _loader_alias(ctx, call):
                out.append(call)  # (``loader = DataListLoader if parallel else DataLoader``, then ``loader(ds, 32)``)
                continue
            if not (name[:1].isupper() or "Loader" in name) or name in loaders.LOADER_NAMES or "Loader" not in name and \
                    name not in sem.calls_index.classes and not (imported and imported[2].endswith("Loader")):
                continue  # (a class call whose name is a loader's, or an alias of one: ``DataLoader as GeoLoader``; a
                # subclass named in lower case, ``myCNNDataLoader``)
            if is_torch_dataloader(ctx, call):
                out.append(call)
        if out and not program.runs_on_accelerator(sem):
            return []  # (a factory of renamed loaders for another module's GPU: not followed; asked last, it is dear)
        return out
    return sem.cached("renamed_loaders", compute)  # type: ignore[no-any-return]


def _loader_said(call: ast.AST) -> str:
    """How a message names the loader: "DataLoader", or the name it is called through (```loader(...)` (a
    DataLoader)`` for ``loader = DataLoader``), so the user finds the call."""
    func = getattr(call, "func", None)
    if isinstance(func, ast.Name) and "loader" in func.id:  # (``_loader_alias``: lower case, named for a loader)
        return f"`{func.id}(...)` (a DataLoader)"
    return "DataLoader"


def _loader_alias(ctx: Context, call: ast.Call) -> bool:
    """``loader(ds, 32)`` where ``loader`` is bound only to torch's (or PyG's) loader classes (``loader = DataListLoader``
    in one branch, ``loader = DataLoader`` in the other), here or in the one name every caller hands the parameter."""
    sem = ctx.semantic
    name, at = call.func.id, call  # type: ignore[attr-defined]
    for _ in range(2):
        b = sem.binding_at(name, at)
        if b is None:
            return False
        if not b.is_param:
            bound = [x for x in sem.bindings_of(name) if sem.scope_of(x.node) is sem.scope_of(b.node)]
            return bool(bound) and all(not x.is_param and isinstance(x.value, ast.Name) and x.index is None
                                       and (sem.qualname(x.value) or "") in (*_TORCH_LOADERS[:2], *_PYG_LOADERS)
                                       for x in bound)
        func = b.node
        sites = sem.call_sites(func) if isinstance(func, ast.FunctionDef) else []
        given = [call_argument(s, func, name) for s in sites]  # type: ignore[arg-type]
        if not sites or not all(isinstance(g, ast.Name) for g in given) or len({g.id for g in given}) != 1 \
                or len({id(sem.scope_of(s)) for s in sites}) != 1:  # type: ignore[union-attr]
            return False
        name, at = given[0].id, sites[0]  # type: ignore[union-attr]
    return False


def _formatted_onto_a_device(ctx: Context, arg: ast.AST | None, at: ast.AST) -> bool:
    """A Hugging Face ``datasets`` dataset whose format puts its items on a device: ``ds.set_format(type="torch",
    device="cuda")`` before the loader, or ``ds = raw.with_format("torch", device="cuda")``."""
    key = dotted(arg) if arg is not None else None
    if not key:
        return False
    sem = ctx.semantic

    def on_device(c: ast.Call) -> bool:
        dev = keyword(c, "device")
        return dev is not None and string_value(dev.value) != "cpu" and not (
            isinstance(dev.value, ast.Constant) and dev.value.value is None)

    b = sem.binding_at(key, at)
    if b is not None and isinstance(b.value, ast.Call) and method_name(b.value) == "with_format" and on_device(b.value):
        return True
    return any(dotted(c.func.value) == key and on_device(c) and c.lineno <= at.lineno  # type: ignore[attr-defined]
               for c in sem.calls_named("set_format"))


def dataset_on_device(ctx: Context, call: ast.Call) -> bool:
    """The dataset already holds device tensors (pinning would fail; workers cannot share them)."""
    arg = call.args[0] if call.args else (keyword(call, "dataset").value if keyword(call, "dataset") else None)  # type: ignore[union-attr]
    if _cut_from_model_input(ctx, arg, call) or _formatted_onto_a_device(ctx, arg, call):
        return True
    for _ in range(5):
        if arg is None:
            return False
        if any(isinstance(n, ast.Call) and ctx.semantic.is_device_move(n) for n in ctx.semantic.subtree(arg)):
            return True
        if loaders.dataset_yields_device_tensors(ctx.semantic, arg):
            return True
        if isinstance(arg, ast.Subscript) and _built_by_a_function_handed_the_device(ctx, arg, call):
            return True  # (``DataLoader(collate(rows, device)[0])``)
        if isinstance(arg, ast.Call) and (ctx.call_name(arg) or "").rsplit(".", 1)[-1] in ("random_split", "Subset") \
                and arg.args:
            arg = arg.args[0]  # ``part_a, part_b = random_split(cache, [48, 16])``: parts of that dataset
            continue
        if isinstance(arg, ast.Call):  # TensorDataset(X, Y) of moved tensors, or of a model's outputs
            if _built_by_a_function_handed_the_device(ctx, arg, arg):
                return True  # (``DataLoader(collate(rows, device))``: the tensors themselves, batched on their dimension 0)
            return any(isinstance(a, ast.Name) and (ctx.semantic.is_moved(a.id, call) or _model_outputs(ctx, a, call)
                                                    or _returned_moved(ctx, a, call) or _made_on_device(ctx, a, call))
                       or _built_by_a_function_handed_the_device(ctx, a, arg) for a in arg.args) \
                or _parts_of_a_device_helper_s_result(ctx, arg)
        key = dotted(arg)
        b = ctx.semantic.binding_at(key, call) if key else None
        if b is not None and b.is_param and isinstance(b.node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                and isinstance(arg, ast.Name):
            return _handed_device_datasets(ctx, b.node, arg.id, 0)  # ``train_epoch(model, training_set, ...)``
        if b is None or b.value is None:
            return False
        arg = b.value
    return False


_SAME_DATA = frozenset({"long", "float", "int", "double", "squeeze", "unsqueeze", "view", "reshape", "contiguous"})


def _built_by_a_function_handed_the_device(ctx: Context, expr: ast.AST, at: ast.AST) -> bool:
    """``data = collate(rows, device, ...)``, then ``TensorDataset(data[0], data[1].long().squeeze())`` (or the
    collated tensor itself as the dataset): a function of this file handed the device builds what it returns there (``torch.zeros(n, d).to(device)``), so the dataset holds
    device tensors (Raindrop's mTAND baselines)."""
    sem = ctx.semantic
    expr = strip_methods(expr, _SAME_DATA, subscripts=True, depth=8)
    b = sem.binding_at(expr.id, at) if isinstance(expr, ast.Name) else None
    value = b.value if b is not None and not b.is_param else expr
    if not isinstance(value, ast.Call):
        return False
    for func in sem.resolve(value):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for param in (a.arg for a in func.args.posonlyargs + func.args.args):
            given = call_argument(value, func, param)
            if given is None or not (sem.expr_kind(given, value) == "device" or (dotted(given) or "").endswith("device")):
                continue
            if any(isinstance(n, ast.Call) and method_name(n) == "to" and n.args[:1]
                   and isinstance(n.args[0], ast.Name) and n.args[0].id == param for n in sem.local_nodes(func)):
                return True
    return False


def _parts_of_a_device_helper_s_result(ctx: Context, made: ast.Call) -> bool:
    """``TensorDataset(*(d["train"] for d in data_list))`` with ``data_list = [X_num, ys]`` and ``X_num, X_cat, ys =
    prepare_tensors(dataset, device=device)``, a function of another module of the project told the device by keyword
    (rtdl's data preparation, which moves each split there): the dataset holds device tensors."""
    sem = ctx.semantic
    names: list[ast.Name] = []
    for a in made.args:
        if isinstance(a, ast.Starred) and isinstance(gen := a.value, (ast.GeneratorExp, ast.ListComp)) \
                and len(gen.generators) == 1 and isinstance(it := gen.generators[0].iter, ast.Name):
            b = sem.binding_at(it.id, made)
            listed = b.value if b is not None and not b.is_param else None
            for part in (listed.body, listed.orelse) if isinstance(listed, ast.IfExp) else (listed,):
                names += [e for e in getattr(part, "elts", ()) if isinstance(e, ast.Name)]
        elif isinstance(a, ast.Subscript) and isinstance(a.value, ast.Name):
            names.append(a.value)  # ``TensorDataset(X_num["train"], ys["train"])``
    for name in names:
        b = sem.binding_at(name.id, made)
        value = b.value if b is not None and not b.is_param else None
        if isinstance(value, ast.Call) and sem.project is not None and (any(
                k.arg == "device" and sem.expr_kind(k.value, value) == "device" and string_value(k.value) != "cpu"
                for k in value.keywords) or any(  # (or by position: ``chars_to_labelled_samples(text, idx, n, device)``)
                isinstance(a, ast.Name) and sem.expr_kind(a, value) == "device" for a in value.args)) \
                and sem.project.function_for(sem, value) is not None:  # type: ignore[attr-defined]
            return True
    return False


def _handed_device_datasets(ctx: Context, func: ast.AST, param: str, depth: int) -> bool:
    """Every call of ``func`` hands ``param`` a dataset that yields device tensors (``training_set = MyDataset(x, y)``,
    whose ``__init__`` builds them on the GPU), or its own parameter that every call of its function hands one (two
    calls up at most)."""
    sem = ctx.semantic
    sites = sem.call_sites(func)
    if not sites or depth > 2:
        return False
    for site in sites:
        given = call_argument(site, func, param)  # type: ignore[arg-type]
        if given is None:
            return False
        if isinstance(given, ast.Name) and (b := sem.binding_at(given.id, site)) is not None and b.is_param \
                and isinstance(b.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if not _handed_device_datasets(ctx, b.node, given.id, depth + 1):
                return False
            continue
        if not loaders.dataset_yields_device_tensors(sem, _bound_call(sem, given, site) or given):
            return False
    return True


def _cut_from_model_input(ctx: Context, arg: ast.AST | None, call: ast.Call) -> bool:
    """``triplets = torch.cat([graph.edge_index, graph.edge_type[None]]).t()`` over a parameter ``graph`` that the
    loop over this loader hands to the model as it is (``model(graph, batch)``), moving nothing: the caller put the
    graph on the device, so the batches cut from it are device tensors (ULTRA's knowledge-graph training)."""
    sem = ctx.semantic
    b = sem.binding_at(arg.id, call) if isinstance(arg, ast.Name) else None
    value = b.value if b is not None and not b.is_param and b.index is None else None
    if not isinstance(value, ast.Call) or not any(isinstance(n, ast.Call) and (ctx.call_name(n) or "") in (
            "torch.cat", "torch.stack") for n in sem.subtree(value)):
        return False
    func = sem.function_of(call)
    sources = {n.value.id for n in sem.subtree(value) if isinstance(n, (ast.Attribute, ast.Subscript))
               and isinstance(n.value, ast.Name) and (p := sem.binding_at(n.value.id, n)) is not None
               and p.is_param and p.node is func}
    if not sources:
        return False
    up = sem.parent(call)
    loader = up.targets[0].id if isinstance(up, ast.Assign) and len(up.targets) == 1 \
        and isinstance(up.targets[0], ast.Name) else None
    loops = []
    for r in sem.reads_of(loader) if loader else []:
        if (bound := sem.binding_at(loader, r)) is None or bound.value is not call:
            continue  # (another function's ``loader``)
        up = sem.parent(r)
        while isinstance(up, ast.Call) and r in up.args:  # ``islice(train_loader, n)``, ``tqdm(loader)``
            r, up = up, sem.parent(up)
        if isinstance(up, (ast.For, ast.AsyncFor)) and up.iter is r:
            loops.append(up)
    if not loops:
        return False
    for loop in loops:
        body = sem.body(loop)
        if any(isinstance(n, ast.Call) and sem.is_device_move(n) for n in body):
            return False  # (the loop moves something: its batches may be host tensors)
        if not any(isinstance(n, ast.Call) and (flow.consumer_kind(sem, n) == "model" or sem.is_model_call(n)) and any(
                isinstance(a, ast.Name) and a.id in sources for a in n.args) for n in body):
            return False
    return True


def _made_on_device(ctx: Context, expr: ast.AST, at: ast.AST, depth: int = 0) -> bool:
    """``feats = torch.tensor(rows, device=dev)``: a tensor made on a device other than the CPU, or a slice or a
    reshape of one (``x_train, x_test = x[train_idx], x[test_idx]``)."""
    sem = ctx.semantic
    if depth > 4:
        return False
    if isinstance(expr, ast.Name):
        b = sem.binding_at(expr.id, at)
        value = b.value if b is not None and not b.is_param else None
        if value is not None and b.index is not None:  # type: ignore[union-attr]
            value = value.elts[b.index] if isinstance(value, ast.Tuple) and b.index < len(value.elts) else None  # type: ignore[union-attr]
        return value is not None and _made_on_device(ctx, value, b.node, depth + 1)  # type: ignore[union-attr]
    if isinstance(expr, ast.Subscript):
        return _made_on_device(ctx, expr.value, at, depth + 1)
    if not isinstance(expr, ast.Call):
        return False
    if isinstance(expr.func, ast.Attribute) and expr.func.attr in ("view", "reshape", "float", "long", "unsqueeze"):
        return _made_on_device(ctx, expr.func.value, at, depth + 1)
    if ctx.semantic.cuda_tensor_type(expr.func, at):
        return True  # ``torch.cuda.FloatTensor(x)``, or ``Float(x)`` with ``Float = torch.cuda.FloatTensor if cuda else ...``
    dev = keyword(expr, "device")
    return dev is not None and (string_value(dev.value) or "cuda") != "cpu" and \
        (ctx.call_name(expr) or "").startswith("torch.")


def _returned_moved(ctx: Context, name: ast.Name, at: ast.AST) -> bool:
    """``u, i, r = to_tensors(users, items, ratings, device)`` whose every return moves what it hands back, or makes
    it on the device (element by element, for a tuple unpacked); ``x, y = map(lambda t: t.to(device), (x, y))``."""
    sem = ctx.semantic
    b = sem.binding_at(name.id, at)
    value = b.value if b is not None and not b.is_param else None
    funcs = sem.resolve(value) if isinstance(value, ast.Call) else []
    if isinstance(value, ast.Call) and dotted(value.func) == "map" and value.args \
            and isinstance(value.args[0], ast.Lambda):  # ``x, y = map(lambda t: t.to(device), (x, y))``
        return sem.value_is_moved(value.args[0].body)
    if not funcs and isinstance(value, ast.Call) and getattr(sem.external(value), "returns", None) == "moved":
        return True  # (``x, y = data_util.make_xy(series, device)`` of another module, returning ``x.to(device), ...``)
    values = [sem.kinds.returned_values(f, b.index) for f in funcs]  # type: ignore[union-attr]
    return bool(funcs) and all(v is not None and all(sem.value_is_moved(x) or _made_on_device(ctx, x, x) for x in v)
                               for v in values)


def _model_outputs(ctx: Context, name: ast.Name, at: ast.AST) -> bool:
    """``feats, labels = extract_features(model, dataset)``: tensors a model computed (features gathered
    for a probe), which may already live on the device its forward ran on."""
    sem = ctx.semantic
    b = sem.binding_at(name.id, at)
    value = b.value if b is not None and not b.is_param else None
    if not isinstance(value, ast.Call):
        return False
    return any(sem.expr_kind(a, value) in ("model", "wrapper") for a in [*value.args, *(k.value for k in value.keywords)]
               if isinstance(a, (ast.Name, ast.Attribute)))
