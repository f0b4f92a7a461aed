"""Stage 7 rules, distributed: files written on every rank (TD703), unless a rank guard, a per-rank name, a
single-process program or the object's own write flag keeps them to one process."""

from __future__ import annotations

import ast
import os
import re
from typing import TYPE_CHECKING

from torchdoctor.check.astutil import argument, call_argument, dotted, is_none, keyword, param_default, param_slot, \
    string_value
from torchdoctor.check.patterns import lazy
from torchdoctor.check.registry import rule
from torchdoctor.check.semantic import program
from torchdoctor.check.semantic.kinds import unwrap_iter
from torchdoctor.check.semantic.call_records import per_rank_value
from torchdoctor.check.semantic.processes import unwraps_ddp_only

if TYPE_CHECKING:
    from torchdoctor.check.context import Context


# ---- TD703 ---------------------------------------------------------------------

_WRITE_MODE = lazy(r"[wax+]")
_MODE = lazy(r"[rwxabt+U]{1,4}")  # a mode string, not a path (``gzip.open("./data/enwik8.gz")`` reads)
_OPENS = ("open", "io.open", "builtins.open")
_SAVERS = ("torch.save", "numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.savetxt",
           "safetensors.torch.save_file")


def _write_site(ctx: Context, call: ast.Call) -> str | None:
    """What the call writes (for the message), if it writes a file."""
    name = ctx.call_name(call) or ""
    if name in _SAVERS:
        return f"`{name}`"
    meth = call.func.attr if isinstance(call.func, ast.Attribute) else None
    if name in _OPENS or meth == "open":
        # ``open(path, mode)`` (also after ``from io import open``), ``gzip.open(path, mode)``; ``Path.open(mode)`` has no
        # path argument
        modes = [m for m in (argument(call, "mode", 1), None if name in _OPENS else argument(call, "mode", 0)) if m is not None]
        text = next((t for m in modes if (t := string_value(m)) and _MODE.fullmatch(t)), None)
        return f"`open(..., {text!r})`" if text and _WRITE_MODE.search(text) else None
    if meth in ("write_text", "write_bytes", "save_pretrained"):
        return f"`.{meth}(...)`"
    return None


def _mentions_rank(ctx: Context, call: ast.Call) -> bool:
    """A per-rank file name (`f"ckpt_rank{rank}.pt"`, or a name assigned one, or a parameter that every
    caller in the file gives one): each rank writes its own file. What ``torch.save``/``np.save`` writes does not
    name the file: ``torch.save(model, path)`` with ``model = DDP(net, device_ids=[rank])`` is one shared path."""
    args = [*call.args, *(k.value for k in call.keywords)]
    if (ctx.call_name(call) or "") in _SAVERS:
        target = _write_target(ctx, call)
        args = [target] if target is not None else args  # (``torch.save(obj, *where)``: any argument may)
    return any(per_rank_value(ctx.semantic, arg, call) for arg in args)




def _write_target(ctx: Context, call: ast.Call) -> ast.AST | None:
    """The file a write names: ``np.save(path, ...)``, ``torch.save(obj, path)``, ``open(path, "w")``,
    ``path.write_text(...)``."""
    name = ctx.call_name(call) or ""
    if name == "torch.save":
        return argument(call, "f", 1)
    if name == "safetensors.torch.save_file":
        return argument(call, "filename", 1)
    if name in _SAVERS or name in _OPENS:
        return call.args[0] if call.args else None
    return call.func.value if isinstance(call.func, ast.Attribute) else None


def _per_sample_file(ctx: Context, call: ast.Call) -> bool:
    """A dataset's cache of one sample, written in ``__getitem__(self, i)`` (or in a method it calls,
    ``self.load(self.paths[i])``) to a file named after its argument (``np.save(self.npy_files[i], im)``,
    ``torch.save(spec, path + ".spec.pt")``): a DDP program shards the indices (a DistributedSampler), so each
    rank reads, and writes, the files of its own samples."""
    sem = ctx.semantic
    func = sem.function_of(call)
    cls = sem.class_of(func) if func is not None else None
    if cls is None or len(func.args.args) < 2:  # type: ignore[union-attr]
        return False
    if not _run_by_getitem(sem, func, cls):  # type: ignore[arg-type]
        return False
    target = _write_target(ctx, call)
    if target is None or not _sharded(ctx, cls):  # type: ignore[arg-type]
        return False
    params = {a.arg for a in func.args.args[1:]}  # type: ignore[union-attr]

    def from_param(expr: ast.AST, depth: int) -> bool:
        for n in sem.subtree(expr):
            if not isinstance(n, ast.Name):
                continue
            b = sem.binding_at(n.id, n)
            if b is None:
                continue
            if b.is_param:
                if n.id in params and b.node is func:
                    return True
            elif b.value is not None and depth < 3 and sem.function_of(b.node) is func and from_param(b.value, depth + 1):
                return True
        return False

    return from_param(target, 0)


def _run_by_getitem(sem, func: ast.AST, cls: ast.AST, depth: int = 0) -> bool:  # type: ignore[no-untyped-def]
    """``func`` is the class's ``__getitem__``, or a method it runs through ``self`` (two calls down at most: vits'
    ``__getitem__`` -> ``get_audio_text_pair`` -> ``get_audio``, which caches the spectrogram)."""
    if func.name == "__getitem__":  # type: ignore[attr-defined]
        return True
    return depth < 2 and any(
        isinstance(n, ast.Attribute) and n.attr == func.name and isinstance(n.value, ast.Name)  # type: ignore[attr-defined]
        and n.value.id == "self" and (caller := sem.function_of(n)) is not None and caller is not func
        and sem.class_of(caller) is cls and _run_by_getitem(sem, caller, cls, depth + 1) for n in sem.of_type(ast.Attribute))


_DISTRIBUTED_SAMPLER = lazy(r"\bDistributedSampler\b")


def _sharded(ctx: Context, cls: ast.ClassDef) -> bool:
    """The dataset's module shares its indices out among the ranks: it calls a DistributedSampler, or subclasses
    one (``class BucketSampler(DistributedSampler)``, handed to the loader as its ``batch_sampler``)."""
    sem = ctx.semantic
    return bool(_DISTRIBUTED_SAMPLER.search(sem.text.source)) and (bool(sem.calls_named("DistributedSampler")) or any(
        (dotted(b) or "").endswith("DistributedSampler") for c in sem.of_type(ast.ClassDef) for b in c.bases))  # type: ignore[attr-defined]


def _rank_strided_file(ctx: Context, call: ast.Call) -> bool:
    """``for part in range(rank, n_parts, world_size): np.save(f"part_{part}.npy", ...)``: each rank takes its own
    indices, and writes files named after them: no two ranks write the same file."""
    sem = ctx.semantic
    target = _write_target(ctx, call)
    if target is None:
        return False
    named = {n.id for n in sem.subtree(target) if isinstance(n, ast.Name)}
    for b in list(named)[:8]:  # a name bound from the index first: ``out = os.path.join(dst, f"{part}.npz")``
        binding = sem.binding_at(b, call)
        if binding is not None and binding.value is not None and not binding.is_param:
            named |= {n.id for n in sem.subtree(binding.value) if isinstance(n, ast.Name)}
    for loop in sem.ancestors(call):
        if isinstance(loop, ast.For) and isinstance(loop.iter, ast.Call) and dotted(loop.iter.func) == "range" \
                and len(loop.iter.args) == 3 and isinstance(loop.target, ast.Name) and loop.target.id in named:
            start = loop.iter.args[0]
            if re.search(r"(?i)rank", ctx.segment(start)) or any(dotted(n) in sem.guards.rank_aliases()
                                                                 for n in sem.subtree(start)):
                return True
        if isinstance(loop, ast.For) and _sharded_loader(ctx, loop.iter, call) and any(
                isinstance(n, ast.Name) and n.id in named for n in sem.subtree(loop.target)):
            return True  # ``for img, key in loader: np.save(f"{key.item()}.npy", ...)`` of a DistributedSampler's
            # loader: each rank writes the files of the samples it was dealt
    return False


def _sharded_loader(ctx: Context, it: ast.AST, at: ast.AST) -> bool:
    """``it`` is (a wrapper of) a DataLoader made here with ``sampler=DistributedSampler(...)``, or a sampler name
    bound to one."""
    sem = ctx.semantic
    for i in unwrap_iter(it)[0]:
        b = sem.binding_at(i.id, at) if isinstance(i, ast.Name) else None
        made = b.value if b is not None and not b.is_param and isinstance(b.value, ast.Call) else i
        if not isinstance(made, ast.Call) or not (ctx.call_name(made) or "").endswith("DataLoader"):
            continue
        sampler = keyword(made, "sampler")
        value = sampler.value if sampler is not None else None
        if isinstance(value, ast.Name) and (sb := sem.binding_at(value.id, made)) is not None and sb.value is not None:
            value = sb.value
        if isinstance(value, ast.Call) and (ctx.call_name(value) or "").endswith("DistributedSampler"):
            return True
    return False


def _falsy(expr: ast.AST | None) -> bool:
    return isinstance(expr, ast.Constant) and not expr.value


def _no_caller_takes(ctx: Context, call: ast.Call) -> bool:
    """The write runs only when a flag parameter with a false default is set (inside ``if probe:``, or after
    ``if not probe: return ...``), and every call of its function in the file leaves the flag false; no other
    module calls the function, and it is not handed around by name."""
    sem = ctx.semantic
    func = sem.function_of(call)
    if func is None or sem.class_of(func) is not None:
        return False
    flags = set()
    frame = sem.frame(call)
    while frame is not None and frame.node is not func:
        test = getattr(frame.node, "test", None)
        if frame.kind == "if" and frame.branch == "body" and isinstance(test, ast.Name):
            flags.add(test.id)
        frame = frame.parent
    for stmt in sem.index.earlier_statements(call, func):
        test = getattr(stmt, "test", None)
        if isinstance(stmt, ast.If) and isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and \
                isinstance(test.operand, ast.Name) and stmt.body and isinstance(stmt.body[-1], ast.Return):
            flags.add(test.operand.id)
    flags = {f for f in flags if _falsy(param_default(func, f)) and
             (b := sem.binding_at(f, call)) is not None and b.is_param and b.node is func}
    sites = sem.call_sites(func)
    if not flags or not sites or len(sem.reads_of(func.name)) != len(sites):
        return False
    if any(isinstance(a, ast.Starred) for s in sites for a in s.args) or \
            any(k.arg is None for s in sites for k in s.keywords):
        return False  # (``f(*args)``, ``f(**opts)``: the flag may be given)
    if not all(any(_falsy(g) if (g := call_argument(s, func, f)) is not None else True for f in flags)  # type: ignore[arg-type]
               for s in sites):
        return False
    return sem.project is None or not sem.project.has_callers(sem, func)  # type: ignore[attr-defined]


_WRITER_FLAG = lazy(r"(?i)save|writ|disk|main|master|rank|primary")


def _writer_flag_guard(ctx: Context, node: ast.AST, func: ast.AST) -> bool:
    """``if not self.save_to_disk: return`` before the write, in a method: a flag the object's creator sets for
    the one process that writes (the checkpointer of maskrcnn-benchmark and its descendants, made with
    ``save_to_disk = get_rank() == 0``)."""
    for stmt in ctx.semantic.index.earlier_statements(node, upto=func):
        if isinstance(stmt, ast.If) and not stmt.orelse and stmt.body and isinstance(stmt.body[-1], ast.Return):
            test = stmt.test.operand if isinstance(stmt.test, ast.UnaryOp) and isinstance(stmt.test.op, ast.Not) \
                else None
            key = dotted(test) if test is not None else None
            if key and key.startswith("self.") and _WRITER_FLAG.search(key[5:]):
                return True
    return False


def _gating_params(ctx: Context, node: ast.AST, func: ast.AST) -> tuple[str, ...]:
    """The parameters of ``func`` that default to None and that ``node`` needs: it sits in ``if model is not None:``
    (or ``if model:``), or in the ``else`` of ``if model is None:`` (a helper that saves when given a model and
    loads otherwise)."""
    out = []
    frame = ctx.semantic.frame(node)
    while frame is not None and frame.node is not func:
        test = getattr(frame.node, "test", None) if frame.kind == "if" else None
        name = None
        if isinstance(test, ast.Name) and frame.branch == "body":
            name = test.id
        elif isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name) \
                and is_none(test.comparators[0]) and (isinstance(test.ops[0], ast.IsNot) and frame.branch == "body"
                                                      or isinstance(test.ops[0], ast.Is) and frame.branch == "orelse"):
            name = test.left.id
        if name is not None and is_none(param_default(func, name)):  # type: ignore[arg-type]
            out.append(name)
        frame = frame.parent
    return tuple(out)


def _rank_guarded(ctx: Context, node: ast.AST, depth: int = 0) -> bool:
    """Guarded here, or every call of the enclosing function is guarded (and there is one), in this file
    or, through the project index, in the files that call it."""
    sem = ctx.semantic
    if sem.under_rank_guard(node):
        return True
    func = sem.function_of(node)
    if func is None or depth > 4:
        return False
    cls = sem.class_of(func)
    if cls is not None and (_made_on_one_rank(ctx, cls) or _writer_flag_guard(ctx, node, func)):
        return True
    calls = [c for c in sem.call_sites(func) if not sem.contains(func, c)]  # (its own recursive calls: guarded
    gates = _gating_params(ctx, node, func)
    if calls and gates:  # ``ckpt = checkpoint(path)`` of ``def checkpoint(path, model=None)``, which saves only
        calls = [c for c in calls if any(call_argument(c, func, p) is not None or  # type: ignore[arg-type]
                                          any(k.arg is None for k in c.keywords) for p in gates)]  # ``if model is
        if not calls:  # not None``: a call that passes no model only loads
            return True
    if calls:  # as it is)
        return all(_rank_guarded(ctx, c, depth + 1) for c in calls)
    refs = [*sem.reads_of(func.name), *(sem.reads_of(f"self.{func.name}") if sem.class_of(func) is not None else [])]
    refs = [r for r in refs if not (isinstance(sem.parent(r), ast.Call) and sem.parent(r).func is r)]  # type: ignore[union-attr]
    entries = [sem.parent(r) for r in refs if _entry_point(ctx, r)]
    if entries and len(entries) == len(refs):  # ``fire.Fire(train)``: the command line calls it, on every rank
        return all(_rank_guarded(ctx, c, depth + 1) for c in entries)  # type: ignore[arg-type]
    if any(_spawned(ctx, r) for r in refs):
        return False  # ``mp.spawn(self.worker, nprocs=world)``: the target runs on every rank
    if refs:
        return True  # a callback (``register_save_state_pre_hook(save_hook)``, ``fcn = self.cache_to_disk``)
    if sem.project is None:
        return False
    if sem.project.callers_rank_guarded(sem, func, gates):  # type: ignore[attr-defined]
        return True
    if cls is not None:
        return sem.project.uncalled_method(sem, func)  # type: ignore[attr-defined]
    # A helper module's function that nothing calls (``autosplit(path)`` beside the dataset classes of a module
    # the training script imports) runs on no rank; the script's own functions do (torchrun runs its file).
    return sem.frame(func).kind == "module" and sem.project.uncalled_helper(sem, func)  # type: ignore[attr-defined]


def _made_on_one_rank(ctx: Context, cls: ast.ClassDef) -> bool:
    """Every object of ``cls`` is made on the main process only (``Logger(...) if rank == 0 else None``), here
    and in the modules that import it, and the class is not handed around otherwise: its methods run on one rank."""
    sem = ctx.semantic
    refs = sem.reads_of(cls.name)
    made = [p for r in refs if isinstance(p := sem.parent(r), ast.Call) and p.func is r]
    if len(made) != len(refs) or not all(sem.guards.only_on_rank_zero(c) for c in made):
        return False
    if sem.project is None:
        return bool(made)
    init = next((f for f in sem.functions.get("__init__", []) if sem.class_of(f) is cls), None)
    if init is None:
        return False  # (the modules that make one are found through its ``__init__``)
    elsewhere = sem.project.made_on_rank_zero(sem, init)  # type: ignore[attr-defined]
    return bool(made) if elsewhere is None else elsewhere


_WRITERS = ("save", "savez", "savez_compressed", "savetxt", "open", "write_text", "write_bytes", "save_pretrained",
            "save_file")
_CLI_DISPATCHERS = ("fire.Fire", "typer.run", "jsonargparse.CLI", "jsonargparse.auto_cli", "CLI", "tyro.cli")


def _entry_point(ctx: Context, ref: ast.AST) -> bool:
    """``ref`` (a function) is handed to a command-line dispatcher, which calls it once per process."""
    parent = ctx.semantic.parent(ref)
    return isinstance(parent, ast.Call) and bool(parent.args) and parent.args[0] is ref and \
        (ctx.call_name(parent) or dotted(parent.func) or "") in _CLI_DISPATCHERS


def _in_memory(ctx: Context, call: ast.Call) -> bool:
    """``torch.save(obj, buf)`` into an ``io.BytesIO()``: nothing reaches the disk."""
    target = argument(call, "f", 1) if (ctx.call_name(call) or "") == "torch.save" else None
    if isinstance(target, ast.Name):
        b = ctx.semantic.binding_at(target.id, call)
        target = b.value if b is not None and not b.is_param else None
    return isinstance(target, ast.Call) and (ctx.call_name(target) or dotted(target.func) or "").endswith("BytesIO")


_LAUNCHERS = ("spawn", "start_processes", "notebook_launcher", "Process", "run", "Popen", "call", "check_call", "system")


def _launches(ctx: Context, call: ast.Call) -> bool:
    """``mp.spawn(...)``, ``notebook_launcher(...)``, ``subprocess.run(["torchrun", ...])``: processes started."""
    name = ctx.call_name(call) or ""
    return name.startswith(("torch.multiprocessing.", "multiprocessing.", "subprocess.", "accelerate.")) \
        or name in ("os.system", "torch.distributed.run")


_GROUP_STARTERS = ("init_process_group", "init_device_mesh", "init_distributed")  # (a mesh starts the default group)


def _outside_the_process_group(ctx: Context, node: ast.AST) -> bool:
    """``if args.mode == "single": single_run(args)`` / ``elif args.mode == "dist": dist_run(args)``: the file starts
    its process group in a function (``dist_run`` calls ``init_process_group`` or ``init_device_mesh``), and the write's function runs
    neither after it nor from it: called only from this file, from functions that start no group and that no
    group-starting code calls, or from module-level code in another branch than every call that starts one (the
    single-process mode of a dual-mode script, run as one plain process)."""
    sem = ctx.semantic
    func = sem.function_of(node)
    inits = sem.calls_named(*_GROUP_STARTERS)
    if func is None or not inits or sem.class_of(func) is not None or sem.project is not None and sem.project.has_callers(sem, func):
        return False
    starters = {sem.function_of(c) for c in inits}
    if None in starters:
        return False  # (a module-level ``init_process_group``: all that follows runs in the group)
    functions = [f for fs in sem.functions.values() for f in fs]
    group = [f for f in functions if any(s in starters for s in sem.reachable(f))]  # (``main`` calling ``setup()``)
    inside = {f for g in group for f in sem.reachable(g)}
    todo, seen = [func], set()
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        sites = sem.call_sites(f)
        if f in inside or not sites or len(sem.reads_of(f.name)) != len(sites):  # type: ignore[attr-defined]
            return False  # (handed around by name: ``mp.spawn(worker, ...)``, ``fire.Fire(main)``)
        for site in sites:
            caller = sem.function_of(site)
            if caller is not None:
                todo.append(caller)
            elif any(sem.function_of(c) is None and not sem.in_other_branch(c, site)
                     for g in group for c in sem.call_sites(g)):
                return False
    return True


def _multi_process(ctx: Context, node: ast.AST) -> bool:
    """A DDP program, or an Accelerate training script whose ``Accelerator()`` is made in the function that
    writes (``accelerate launch`` runs it once per GPU; its evaluation scripts, and programs that only try
    Accelerate in one of their functions, mostly run as one process)."""
    sem = ctx.semantic
    if sem.path.endswith(".ipynb") and not any(_launches(ctx, c) for c in sem.calls_named(*_LAUNCHERS)):
        return False  # a notebook's kernel is one process: only one it launches runs more (mp.spawn, notebook_launcher)
    if program.is_ddp_program(sem):
        if unwraps_ddp_only(sem) and not sem.trains and sem.function_of(node) is not None:
            return False  # (a checkpoint helper that takes ``model.module``'s state of a DDP model: its callers decide)
        return not program.single_process_world(sem)
    here = sem.function_of(node)
    return sem.trains and any((ctx.call_name(c) or "").startswith("accelerate.") and sem.function_of(c) is here
                              for c in sem.calls_named("Accelerator"))


def _ddp_caller(ctx: Context, node: ast.AST):  # type: ignore[no-untyped-def]
    """A helper of another module (``save_peft_checkpoint(model, path)``) that a DDP program calls on every
    rank: the call record, else None."""
    sem = ctx.semantic
    func = sem.function_of(node)
    if func is None or sem.project is None or sem.class_of(node) is not None or sem.call_sites(func) \
            or sem.under_rank_guard(node):
        return None
    target = _write_target(ctx, node)  # type: ignore[arg-type]
    b = sem.binding_at(target.id, node) if isinstance(target, ast.Name) else None
    named_by = frozenset({target.id, param_slot(func, target.id) or target.id}) \
        if b is not None and b.is_param and b.node is func else frozenset()  # type: ignore[union-attr]
    # (``open(write_path, "w")`` where the caller hands ``write_path`` a per-rank file name: each rank writes its own)
    return sem.project.unguarded_ddp_caller(sem, func, anywhere=unwraps_ddp_only(sem),  # type: ignore[attr-defined]
                                            named_by=named_by)


def _is_spawn(ctx: Context, call: ast.Call) -> bool:
    return (ctx.call_name(call) or "").endswith(("multiprocessing.spawn", "multiprocessing.start_processes"))


def _spawned(ctx: Context, ref: ast.AST) -> bool:
    """``ref`` is the function ``mp.spawn(ref, ...)`` starts on every rank."""
    call = ctx.semantic.parent(ref)
    if isinstance(call, ast.keyword) and call.arg == "fn":
        call = ctx.semantic.parent(call)
    elif not (isinstance(call, ast.Call) and call.args and call.args[0] is ref):
        return False
    return isinstance(call, ast.Call) and _is_spawn(ctx, call)


def _in_spawning_parent(ctx: Context, node: ast.AST) -> bool:
    """``mp.spawn(self._worker, nprocs=world)`` starts the ranks: a write no spawned target reaches (the parent's
    cache before it, its summary after) runs in the one parent process. (A program torchrun starts is no parent.)"""
    sem = ctx.semantic
    spawns = [c for c in sem.calls_named("spawn", "start_processes") if _is_spawn(ctx, c)]
    if not spawns or any(string_value(n) in ("LOCAL_RANK", "RANK") for n in sem.of_type(ast.Constant)):
        return False
    targets = []
    for call in spawns:
        fn = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "fn"), None)
        key = dotted(fn) if fn is not None else None
        found = [f for f in sem.functions.get(key.rsplit(".", 1)[-1], [])] if key else []
        if not found:
            return False  # (a target this file does not define: it may run anything)
        targets += found
    reached = {id(g) for f in targets for g in [f, *sem.reachable(f)]}
    if not sem.path.endswith(".ipynb"):  # a child started by "spawn" imports the script again: its top-level code
        top = [s for s in sem.tree.body if not _main_guard(s)]  # outside ``if __name__ == "__main__":`` runs there too
        if sem.function_of(node) is None and any(sem.contains(s, node) for s in top):
            return False
        for call in (n for s in top for n in sem.subtree(s) if isinstance(n, ast.Call) and sem.function_of(n) is None):
            reached |= {id(g) for f in sem.resolve(call) for g in [f, *sem.reachable(f)]}
    here = sem.function_of(node)
    while here is not None and id(here) not in reached:
        here = sem.function_of(here)  # (a nested function runs where the one around it does)
    return here is None


def _main_guard(stmt: ast.AST) -> bool:
    test = stmt.test if isinstance(stmt, ast.If) else None
    return isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__" \
        and any(string_value(c) == "__main__" for c in test.comparators)


def _short_path(path: str) -> str:
    return os.path.relpath(path) if os.path.isabs(path) and not os.path.relpath(path).startswith("..") else path


def _other_format_of(ctx: Context, call: ast.Call) -> bool:
    """``if safe_serialization: safetensors.torch.save_file(...) else: torch.save(...)``: the else branch writes
    the same file in another format; one finding, at the first branch's write (one construct, one finding)."""
    sem = ctx.semantic
    stmt = sem.statement_of(call)
    branch = sem.parent(stmt) if stmt is not None else None
    if not (isinstance(branch, ast.If) and stmt in branch.orelse):
        return False
    mine, target = ctx.call_name(call) or "", _write_target(ctx, call)
    for n in (n for s in branch.body for n in sem.subtree(s)):
        if not isinstance(n, ast.Call) or _write_site(ctx, n) is None:
            continue
        other, where = ctx.call_name(n) or "", _write_target(ctx, n)
        if other != mine and other in _SAVERS and mine in _SAVERS or target is not None and where is not None \
                and ctx.segment(target) == ctx.segment(where):
            return True  # (two writers, or one path: the same file; ``open("a.txt")`` / ``open("b.txt")`` are two)
    return False


def _writes_on_main_only(call: ast.Call) -> bool:
    """``save_pretrained(..., is_main_process=accelerator.is_main_process, save_function=accelerator.save)``."""
    return any(k.arg in ("is_main_process", "save_function") for k in call.keywords)


def _disabled_unless_given(ctx: Context, call: ast.Call) -> bool:
    """The method returns early when ``self.save_path is None`` (``if self.save_path is None: return``), and
    ``__init__`` takes that path as a parameter that defaults to None: the code that builds the object decides which
    processes save (a trainer given a path and a logger on rank 0 only)."""
    sem = ctx.semantic
    func, cls = sem.function_of(call), sem.class_of(call)
    if func is None or cls is None:
        return False
    init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)  # type: ignore[attr-defined]
    if init is None:
        return False
    for stmt in func.body:  # type: ignore[attr-defined]
        if sem.contains(stmt, call):
            return False
        if not (isinstance(stmt, ast.If) and stmt.body and isinstance(stmt.body[-1], ast.Return)):
            continue
        test = stmt.test
        attr = test.left if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Is) \
            and is_none(test.comparators[0]) else test.operand if isinstance(test, ast.UnaryOp) \
            and isinstance(test.op, ast.Not) else None
        key = dotted(attr) if attr is not None else None
        if not key or not key.startswith("self."):
            continue
        for n in ast.walk(init):
            if isinstance(n, ast.Assign) and any(dotted(t) == key for t in n.targets) and isinstance(n.value, ast.Name) \
                    and is_none(param_default(init, n.value.id)):
                return True
    return False


_TEMP_DIRS = ("tempfile.TemporaryDirectory", "tempfile.mkdtemp")


def _in_own_temp_dir(ctx: Context, node: ast.Call) -> bool:
    """The file is written under a directory this process made for itself (``with tempfile.TemporaryDirectory() as
    scratch:`` ... ``open(os.path.join(scratch, name), "w")``): each rank has its own."""
    sem = ctx.semantic
    target = node.args[0] if node.args else None
    for n in sem.subtree(target) if target is not None else ():
        if not isinstance(n, ast.Name):
            continue
        b = sem.binding_at(n.id, node)
        if b is None:
            continue
        if isinstance(b.value, ast.Call) and sem.call_name(b.value) in _TEMP_DIRS:
            return True
        holder = sem.parent(b.node)  # ``with tempfile.TemporaryDirectory() as scratch:``
        if isinstance(holder, ast.withitem) and isinstance(holder.context_expr, ast.Call) \
                and sem.call_name(holder.context_expr) in _TEMP_DIRS:
            return True
    return False


@rule("TD703", calls=_WRITERS)
def write_without_rank_guard(node: ast.Call, ctx: Context) -> None:
    """Checkpoint saving or file writing in a DDP program with no rank-0 guard (prints are not reported):
    not behind a rank test (`if rank == 0:`, `is_main_process()`, an early `if rank != 0: return`) here
    or at every call of the enclosing function."""
    what = _write_site(ctx, node)
    if what is None or _writes_on_main_only(node) or _mentions_rank(ctx, node) or _in_memory(ctx, node) \
            or _per_sample_file(ctx, node) or _rank_strided_file(ctx, node) or _no_caller_takes(ctx, node) \
            or _other_format_of(ctx, node) or _disabled_unless_given(ctx, node) or _in_own_temp_dir(ctx, node) \
            or _outside_the_process_group(ctx, node):
        return
    caller = None if _multi_process(ctx, node) else _ddp_caller(ctx, node)
    if (caller is None and not _multi_process(ctx, node)) or _rank_guarded(ctx, node) or _in_spawning_parent(ctx, node):
        return
    kind = "DDP" if caller is not None or program.is_ddp_program(ctx.semantic) else "multi-process (Accelerate)"
    where = f"of this {kind} program" if caller is None else \
        f"of the DDP program that calls `{caller.written}` at {_short_path(caller.path)}:{caller.line}"
    ctx.report(
        "TD703",
        node,
        f"{what} runs on every rank {where}: all processes write the same file",
        fix="guard it with `if dist.get_rank() == 0:` (or your is_main_process())" if kind == "DDP" else
        "guard it with `if accelerator.is_main_process:` (or save with `accelerator.save(...)`)",
    )
