"""Stage 7 rules, distributed: samplers, rank-0 duties, backends, per-rank devices, SyncBatchNorm."""

from __future__ import annotations

import ast
import os
import re
from typing import TYPE_CHECKING

from torchdoctor.check.astutil import call_argument, dotted, is_true, keyword, method_name, param_default, string_value
from torchdoctor.check.patterns import lazy
from torchdoctor.check.registry import rule
from torchdoctor.check.semantic import program

if TYPE_CHECKING:
    from torchdoctor.check.context import Context

_DDP = ("torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel")
# torchvision/timm architectures built with BatchNorm layers.
_BN_ARCH = lazy(
    r"^(resnet|resnext|wide_resnet|densenet|mobilenet|efficientnet|regnet|inception|googlenet|shufflenet|"
    r"mnasnet|vgg\d+_bn|convnext_?nano_?bn|resnetv2|seresnet|seresnext|cspdarknet|cspresnet|darknet|dla|"
    r"dpn|hrnet|res2net|resnest|rexnet|selecsls|tresnet|xception|nfnet|ghostnet|fbnet|mixnet|tf_efficientnet|"
    r"tf_mobilenet|lcnet|hardcorenas|spnasnet|semnasnet|fcn_resnet|deeplabv3|lraspp|fasterrcnn|maskrcnn|"
    r"retinanet|keypointrcnn|ssd|r2plus1d|r3d|mc3|s3d|x3d|slowfast)"
)


def _is_dataloader(ctx: Context, call: ast.Call) -> bool:
    name = ctx.call_name(call) or ""
    return name.startswith("torch.utils.data") and name.endswith(".DataLoader")


# ---- TD702 ---------------------------------------------------------------------


def _arg(call: ast.Call, name: str, position: int) -> ast.AST | None:
    kw = keyword(call, name)
    if kw is not None:
        return kw.value
    if len(call.args) > position and not any(isinstance(a, ast.Starred) for a in call.args[:position + 1]):
        return call.args[position]
    return None


@rule("TD702", calls=("DataLoader",))
def sampler_and_shuffle(node: ast.Call, ctx: Context) -> None:
    """DataLoader given both a sampler and `shuffle=True`.

    What it does: finds `DataLoader(..., sampler=..., shuffle=True)` (or `batch_sampler=`).
    Why is this bad? DataLoader raises `ValueError: sampler option is mutually
    exclusive with shuffle` at start-up; with a sampler that is sometimes None it
    fails only in the distributed run.
    Use instead: `shuffle=(sampler is None)`; a DistributedSampler shuffles by itself.
    """
    if not _is_dataloader(ctx, node) or not is_true(_arg(node, "shuffle", 2)):
        return
    for name, position in (("sampler", 3), ("batch_sampler", 4)):
        value = _arg(node, name, position)
        if value is not None and not (isinstance(value, ast.Constant) and value.value is None):
            ctx.report(
                "TD702",
                node,
                f"DataLoader gets `{name}={ctx.name(value)}` and `shuffle=True`: "
                "DataLoader raises ValueError (they are mutually exclusive)",
                fix=f"pass `shuffle=({ctx.name(value)} is None)` or drop `shuffle=True`; the sampler decides the order",
            )
            return


# ---- TD704 ---------------------------------------------------------------------


_CUDA_PRESENT = ("torch.cuda.is_available", "torch.cuda.device_count")


@rule("TD704", calls=("init_process_group",))
def nccl_hard_coded(node: ast.Call, ctx: Context) -> None:
    """`init_process_group("nccl")` hard-coded.

    What it does: finds a literal `"nccl"` backend.
    Why is this bad? NCCL needs GPUs: the same program cannot run (or be tested)
    on CPUs, where the backend is gloo. A configurable backend is fine.
    Use instead: `dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")`.
    """
    if (ctx.call_name(node) or "") not in ("torch.distributed.init_process_group",
                                           "torch.distributed.distributed_c10d.init_process_group"):
        return
    backend = _arg(node, "backend", 0)
    if ctx.semantic.chooses_device(node):
        return  # ``if torch.cuda.is_available(): init_process_group("nccl") else: ...``: the CPU has its path
    if any(_states_cuda_need(ctx, stmt) for stmt in ctx.semantic.index.earlier_statements(node)):
        return  # ``assert torch.cuda.is_available(), "DDP needs CUDA"`` before it: the author states the need
    set_at = _set_to_nccl(ctx, backend, node)
    if (string_value(backend) or "").strip().lower() == "nccl" or set_at is not None:
        where = f' (`{ctx.name(backend)} = "nccl"` at line {set_at.lineno})' if set_at is not None else ""  # type: ignore[arg-type]
        ctx.report(
            "TD704",
            node,
            f'`{ctx.name(node.func)}(..., {ctx.name(backend)})` hard-codes NCCL{where}: '  # type: ignore[arg-type]
            "the program cannot run on CPUs (gloo)",
            fix='choose the backend: `"nccl" if torch.cuda.is_available() else "gloo"`',
        )


def _states_cuda_need(ctx: Context, stmt: ast.AST) -> bool:
    """``assert torch.cuda.is_available(), ...`` or ``if not torch.cuda.is_available(): raise ...``: a program that
    says it needs GPUs and stops without them."""
    sem = ctx.semantic
    if isinstance(stmt, ast.Assert):
        test = stmt.test
    elif isinstance(stmt, ast.If) and any(isinstance(s, ast.Raise) or isinstance(s, ast.Expr) and isinstance(
            s.value, ast.Call) and (ctx.call_name(s.value) or "") in ("sys.exit", "exit", "quit") for s in stmt.body):
        test = stmt.test
    else:
        return False
    return any(isinstance(n, ast.Call) and (ctx.call_name(n) or "") in _CUDA_PRESENT for n in sem.subtree(test))


def _set_to_nccl(ctx: Context, backend: ast.AST | None, call: ast.Call) -> ast.Assign | None:
    """``args.dist_backend = "nccl"`` just before ``init_process_group(backend=args.dist_backend)``, in the same
    function: a literal all the same (an argparse default or a config value is the user's to change)."""
    key = dotted(backend) if isinstance(backend, (ast.Name, ast.Attribute)) else None
    sem = ctx.semantic
    func = sem.function_of(call)
    if not key or func is None:
        return None
    here = (call.lineno, call.col_offset)
    last = None
    for n in sem.body(func):
        if isinstance(n, ast.Assign) and (n.lineno, n.col_offset) < here and any(dotted(t) == key for t in n.targets):
            last = n
    if last is None or (string_value(last.value) or "").strip().lower() != "nccl":
        return None
    for a in sem.ancestors(last):  # ``if device == "xpu": backend = "xccl" ... else: backend = "nccl"``: a choice
        if a is func:
            break
        if isinstance(a, ast.If) and sum(isinstance(n, ast.Assign) and any(dotted(t) == key for t in n.targets)
                                         for n in sem.subtree(a)) > 1:
            return None
    return last


# ---- TD705 ---------------------------------------------------------------------


def _sets_rank_device(ctx: Context) -> bool:
    """Each process picks its own GPU: `set_device`, CUDA_VISIBLE_DEVICES set in the program, or a device mesh
    (``init_device_mesh("cuda", ...)`` sets the current device from LOCAL_RANK when none was set)."""

    def compute() -> bool:
        sem = ctx.semantic
        if any((ctx.call_name(n) or "").endswith(("set_device", "set_device_index", "init_device_mesh"))
               for n in sem.calls_named("set_device", "set_device_index", "init_device_mesh")):
            return True
        # os.environ["CUDA_VISIBLE_DEVICES"] = str(local_rank): "cuda" is then this rank's GPU
        return any(string_value(n) == "CUDA_VISIBLE_DEVICES" and any(
            isinstance(a, ast.Assign) for a in list(sem.ancestors(n))[:3]) for n in sem.of_type(ast.Constant))

    return ctx.semantic.cached("sets_rank_device", compute)  # type: ignore[no-any-return]


def _starts_processes(ctx: Context) -> bool:
    """This file sets the ranks up itself: ``init_process_group``, ``mp.spawn`` or torchrun's variables. A file
    that only wraps in DDP got its process group from a helper (``setup(args)``), which binds the GPU too."""
    sem = ctx.semantic
    if any((ctx.call_name(c) or "").endswith(("init_process_group", "multiprocessing.spawn"))
           for c in sem.calls_named("init_process_group", "spawn")):
        return True
    return any(string_value(n) in ("LOCAL_RANK", "RANK", "WORLD_SIZE") for n in sem.of_type(ast.Constant))


def _has_indexed_device(ctx: Context) -> bool:
    """The program places work on a per-rank GPU somewhere (`torch.device("cuda", rank)`, `.to(local_rank)`)."""

    def compute() -> bool:
        if any(site.indexed for site in program.cuda_sites(ctx.semantic)):
            return True
        aliases = _rank_aliases(ctx)
        for call in ctx.semantic.calls_named("to"):
            arg = call.args[0] if call.args else None
            name = dotted(arg) or ""
            if name and (name in aliases or re.search(r"(?i)rank|gpu_id|local_gpu", name)):
                return True
        return False

    return ctx.semantic.cached("indexed_device", compute)  # type: ignore[no-any-return]


@rule("TD705", ast.Module)
def every_rank_on_gpu0(node: ast.AST, ctx: Context) -> None:
    """Every rank on GPU 0: an un-indexed CUDA device in a DDP program.

    What it does: in a program that starts a process group or wraps a model in DDP,
    finds `.cuda()`, `.to("cuda")`, `torch.device("cuda")` without a device index,
    when the file never calls `torch.cuda.set_device(local_rank)`.
    Why is this bad? Every process then puts its model and data on GPU 0: the
    other GPUs idle and GPU 0 runs out of memory (or NCCL hangs).
    Use instead: `torch.cuda.set_device(local_rank)` at start-up, or `torch.device("cuda", local_rank)`.
    """
    sem = ctx.semantic
    if not program.is_ddp_program(sem) or _sets_rank_device(ctx) or _has_indexed_device(ctx) \
            or program.accelerator_api(sem) or program.sets_device_through_helper(sem) or not _starts_processes(ctx):
        return  # (Accelerate/Fabric and device helpers bind each rank to its GPU; so does the code that starts them)
    for site in program.cuda_sites(sem):
        if site.indexed or _single_process_branch(ctx, site.node):
            continue
        ctx.report(
            "TD705",
            site.node,
            f"`{site.text}` names no GPU index in a DDP program that never calls `torch.cuda.set_device`: "
            "every rank runs on GPU 0",
            fix='call `torch.cuda.set_device(local_rank)` first, or use `torch.device("cuda", local_rank)`',
        )


def _single_process_branch(ctx: Context, node: ast.AST) -> bool:
    """``node`` runs only where the program's own distributed flag is off: the ``else`` of ``if args.distributed:``,
    or ``if not args.distributed:``, where that flag is the test that starts the process group or wraps in DDP
    (one process then: GPU 0 is its GPU)."""
    sem = ctx.semantic

    def flags() -> frozenset[str]:
        out = set()
        for call in sem.calls_named("init_process_group", "DistributedDataParallel"):
            for a in sem.ancestors(call):
                if isinstance(a, ast.If) and (key := dotted(a.test)) and any(s is call or sem.contains(s, call)
                                                                             for s in a.body):
                    out.add(key)
        return frozenset(out)

    known: frozenset[str] = sem.cached("ddp_flags", flags)  # type: ignore[assignment]
    if not known:
        return False
    child = node
    for a in sem.ancestors(node):
        if isinstance(a, ast.If):
            test = a.test
            negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
            key = dotted(test.operand if negated else test)  # type: ignore[attr-defined]
            in_body = any(s is child for s in a.body)
            if key in known and (negated == in_body):
                return True
        child = a
    return False


# ---- TD706 ---------------------------------------------------------------------
_BATCHNORM = lazy(r"torch\.nn\.(modules\.batchnorm\.)?BatchNorm[123]?d$")


def _uses_batchnorm(ctx: Context) -> bool:
    """A BatchNorm layer in the file's model definitions, or a library model built with them."""

    def compute() -> bool:
        sem = ctx.semantic
        if "BatchNorm" in ctx.source and any(_BATCHNORM.search(ctx.qualname(n) or "")
                                             for n in sem.of_type(ast.Attribute, ast.Name)):
            return True
        for n in sem.calls:
            name = ctx.call_name(n) or ""
            arch = None
            if name.startswith("torchvision.models"):
                arch = name.rsplit(".", 1)[-1]
            elif name in ("timm.create_model", "torchvision.models.get_model") and n.args:
                arch = string_value(n.args[0])
            if arch and _BN_ARCH.match(arch.lower()):
                return True
        return False

    return ctx.semantic.cached("uses_bn", compute)  # type: ignore[no-any-return]


def _converts_sync_bn(ctx: Context) -> bool:
    """The code (not a comment or a string) names ``SyncBatchNorm`` or ``convert_sync_batchnorm``."""
    if "convert_sync_batchnorm" not in ctx.source and "SyncBatchNorm" not in ctx.source:
        return False
    sem = ctx.semantic
    return any((n.attr if isinstance(n, ast.Attribute) else n.id) in ("SyncBatchNorm", "convert_sync_batchnorm")  # type: ignore[attr-defined]
               for n in sem.of_type(ast.Attribute, ast.Name)) or any(
        a.name.rsplit(".", 1)[-1] in ("SyncBatchNorm", "convert_sync_batchnorm")
        for n in sem.of_type(ast.ImportFrom) for a in n.names)  # type: ignore[attr-defined]


def _frozen_before_the_wrap(ctx: Context, wrap: ast.Call) -> bool:
    """``for p in net.parameters(): p.requires_grad = False`` (or ``net.requires_grad_(False)``) before
    ``DDP(net, ...)`` in the same function: a frozen network wrapped to be scored, not trained."""
    sem = ctx.semantic
    name = dotted(wrap.args[0]) if wrap.args else None
    scope = sem.scope_of(wrap)
    if name is None:
        return False
    for n in sem.local_nodes(scope) if not isinstance(scope, ast.Module) else sem.body(scope):
        if getattr(n, "lineno", 0) >= wrap.lineno:
            continue
        if isinstance(n, ast.Call) and method_name(n) == "requires_grad_" and dotted(n.func.value) == name \
                and n.args and isinstance(n.args[0], ast.Constant) and n.args[0].value is False:  # type: ignore[attr-defined]
            return True
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and n.value.value is False and any(
                isinstance(t, ast.Attribute) and t.attr == "requires_grad" for t in n.targets):
            for up in sem.ancestors(n):
                if isinstance(up, ast.If):
                    break  # ``if 'classifier' not in name:``: some parts stay trainable (FixRes' fine-tuning)
                if isinstance(up, ast.For) and isinstance(up.iter, ast.Call) and method_name(up.iter) in _PARTS \
                        and dotted(up.iter.func.value) == name:  # type: ignore[attr-defined]
                    return True  # ``for p in net.parameters(): p.requires_grad = False`` (or through named_children())
    return False


_PARTS = frozenset({"parameters", "named_parameters", "children", "named_children", "modules", "named_modules"})


def _on_gpus(ctx: Context) -> bool:
    """SyncBatchNorm needs GPUs: the hint is only for programs that use CUDA or NCCL."""

    def compute() -> bool:
        sem = ctx.semantic
        return bool(program.cuda_sites(sem)) or any(
            (string_value(n) or "").lower().startswith(("nccl", "cuda")) for n in sem.of_type(ast.Constant))

    return ctx.semantic.cached("on_gpus", compute)  # type: ignore[no-any-return]


@rule("TD706", calls=("DistributedDataParallel", "DDP"))
def batchnorm_without_sync(node: ast.Call, ctx: Context) -> None:
    """BatchNorm in a DDP model without `SyncBatchNorm.convert_sync_batchnorm`: reported on the `DDP(` wrap."""
    if ctx.call_name(node) not in _DDP or not _uses_batchnorm(ctx) or _converts_sync_bn(ctx) or not _on_gpus(ctx) \
            or _frozen_before_the_wrap(ctx, node):
        return
    model = ctx.name(node.args[0]) if node.args else "model"
    ctx.report(
        "TD706",
        node,
        f"`{model}` has BatchNorm layers and is wrapped in DDP without SyncBatchNorm: "
        "each GPU normalises with its own batch statistics",
        fix=f"`{model} = nn.SyncBatchNorm.convert_sync_batchnorm({model})` before `DDP(...)`",
    )


# ---- TD701 ---------------------------------------------------------------------


def _shuffling_samplers(ctx: Context) -> list[ast.Call]:
    """DistributedSampler constructions that shuffle (the default), and mmengine's DefaultSampler (it shuffles
    by seed + epoch, distributed, and learns the epoch from ``set_epoch`` too)."""
    out = []
    for n in ctx.semantic.calls_named("DistributedSampler", "DefaultSampler"):
        name = ctx.call_name(n) or ""
        if name.startswith("torch.utils.data") and name.endswith(".DistributedSampler"):
            shuffle = _arg(n, "shuffle", 3)
        elif name.startswith("mmengine.") and name.endswith(".DefaultSampler"):
            shuffle = _arg(n, "shuffle", 1)
        else:
            continue
        if not (isinstance(shuffle, ast.Constant) and shuffle.value is False):
            out.append(n)
    return out


@rule("TD701", ast.For, ast.AsyncFor)
def sampler_without_set_epoch(node: ast.For, ctx: Context) -> None:
    """`DistributedSampler` without `sampler.set_epoch(epoch)`: reported on the outermost epoch loop of a file
    that builds a shuffling DistributedSampler and never calls `set_epoch`, here or in a function the loop
    runs (of this file or of the project)."""
    sem = ctx.semantic
    if sem.loop_kind(node) != "epoch" or sem.enclosing_loop(node, "epoch") is not None:
        return
    samplers = _shuffling_samplers(ctx)
    if not samplers:
        return
    sampler = ctx.name(samplers[0], 50)
    if len(sampler) > 50:
        sampler = "DistributedSampler(...)"
    set_epochs = sem.calls_named("set_epoch")
    if set_epochs:
        flag = _flag_only_set_epoch(ctx, set_epochs, samplers)
        if flag is not None:
            ctx.report("TD701", node, f"`{sampler}` is built (and shuffles) whatever `{flag}` is, but `set_epoch(epoch)` "
                       f"is only called `if {flag}`: when it is false, every epoch sees the same order",
                       fix=f"call `set_epoch(epoch)` whenever the sampler is a DistributedSampler, not only `if {flag}`")
        return
    if "set_epoch" in sem.region_effects(sem.body(node), deep=True):
        return
    ctx.report(
        "TD701",
        node,
        f"`{sampler}` shuffles, but this epoch loop never calls `set_epoch(epoch)`: "
        "every epoch sees the same order",
        fix="call `sampler.set_epoch(epoch)` at the start of each epoch",
    )


def _flag_guards(ctx: Context, node: ast.AST) -> set[str]:
    """The flags (``args.distributed``) an ``if`` around ``node`` requires true (``if not x: ... else:`` too)."""
    out = set()
    sem = ctx.semantic
    child = node
    for parent in sem.ancestors(node):
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            break
        if isinstance(parent, (ast.If, ast.IfExp)) and child is not parent.test:
            in_body = child in parent.body if isinstance(parent, ast.If) else child is parent.body
            test = parent.test
            if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                test, in_body = test.operand, not in_body
            if in_body and isinstance(test, (ast.Name, ast.Attribute)) and dotted(test):
                out.add(dotted(test))  # type: ignore[arg-type]
        child = parent
    return out


def _flag_only_set_epoch(ctx: Context, set_epochs: list[ast.Call], samplers: list[ast.Call]) -> str | None:
    """Every ``set_epoch`` of the file waits on a flag (``if args.distributed:``) that does not guard the
    shuffling sampler's construction (built ``if True:`` or always): the flag that leaves it out."""
    flags = None
    for call in set_epochs:
        found = _flag_guards(ctx, call)
        flags = found if flags is None else flags & found
        if not flags:
            return None
    held = {dotted(t) for s in samplers if isinstance(p := ctx.semantic.parent(s), ast.Assign) for t in p.targets}
    unguarded = [f for f in sorted(flags or ()) if f not in held and all(f not in _flag_guards(ctx, s) for s in samplers)]
    return unguarded[0] if unguarded else None  # (``if data_sampler:`` tests that the sampler exists: no flag)


# ---- TD703 ---------------------------------------------------------------------

_WRITE_MODE = lazy(r"[wax+]")
_MODE = lazy(r"[rwxabt+U]{1,4}")  # a mode string, not a path (``gzip.open("./data/enwik8.gz")`` reads)
_SAVERS = ("torch.save", "numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.savetxt",
           "safetensors.torch.save_file")


def _write_site(ctx: Context, call: ast.Call) -> str | None:
    """What the call writes (for the message), if it writes a file."""
    name = ctx.call_name(call) or ""
    if name in _SAVERS:
        return f"`{name}`"
    meth = call.func.attr if isinstance(call.func, ast.Attribute) else None
    if name == "open" or meth == "open":
        # ``open(path, mode)``, ``gzip.open(path, mode)``; ``Path.open(mode)`` has no path argument
        modes = [m for m in (_arg(call, "mode", 1), None if name == "open" else _arg(call, "mode", 0)) if m is not None]
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
    return any(_per_rank_value(ctx, arg, call, 0) for arg in args)


def _per_rank_value(ctx: Context, arg: ast.AST, at: ast.AST, depth: int) -> bool:
    sem = ctx.semantic
    if re.search(r"(?i)rank", ctx.segment(arg)) or any(dotted(n) in sem.guards.rank_aliases() for n in sem.subtree(arg)):
        return True
    if not isinstance(arg, ast.Name):
        return False
    if any(b.value is not None and not b.is_param and re.search(r"(?i)rank", ctx.segment(b.value))
           for b in sem.bindings_of(arg.id)):
        return True
    b = sem.binding_at(arg.id, at)
    func = sem.function_of(at)
    if depth > 2 or b is None or not b.is_param or func is None or b.node is not func:
        return False
    sites = sem.call_sites(func)
    given = [call_argument(site, func, arg.id) for site in sites]  # type: ignore[arg-type]
    return bool(sites) and all(g is not None and _per_rank_value(ctx, g, site, depth + 1)
                               for g, site in zip(given, sites))


def _write_target(ctx: Context, call: ast.Call) -> ast.AST | None:
    """The file a write names: ``np.save(path, ...)``, ``torch.save(obj, path)``, ``open(path, "w")``,
    ``path.write_text(...)``."""
    name = ctx.call_name(call) or ""
    if name == "torch.save":
        return _arg(call, "f", 1)
    if name == "safetensors.torch.save_file":
        return _arg(call, "filename", 1)
    if name in _SAVERS or name == "open":
        return call.args[0] if call.args else None
    return call.func.value if isinstance(call.func, ast.Attribute) else None


def _per_sample_file(ctx: Context, call: ast.Call) -> bool:
    """A dataset's cache of sample ``i``, written in ``__getitem__(self, i)`` to a file named after ``i``
    (``np.save(self.npy_files[i], im)``), in a module that shards the indices with a DistributedSampler:
    each rank reads, and writes, the files of its own samples."""
    sem = ctx.semantic
    func = sem.function_of(call)
    if func is None or func.name != "__getitem__" or sem.class_of(func) is None or len(func.args.args) < 2:
        return False
    target = _write_target(ctx, call)
    if target is None or not sem.calls_named("DistributedSampler"):
        return False
    index = func.args.args[1].arg

    def from_index(expr: ast.AST, depth: int) -> bool:
        for n in sem.subtree(expr):
            if not isinstance(n, ast.Name):
                continue
            b = sem.binding_at(n.id, n)
            if b is None:
                continue
            if b.is_param:
                if n.id == index and b.node is func:
                    return True
            elif b.value is not None and depth < 3 and sem.function_of(b.node) is func and from_index(b.value, depth + 1):
                return True
        return False

    return from_index(target, 0)


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


def _rank_aliases(ctx: Context) -> set[str]:
    return ctx.semantic.guards.rank_aliases()


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
    calls = sem.call_sites(func)
    if calls:
        return all(_rank_guarded(ctx, c, depth + 1) for c in calls)
    refs = [*sem.reads_of(func.name), *(sem.reads_of(f"self.{func.name}") if sem.class_of(func) is not None else [])]
    refs = [r for r in refs if not (isinstance(sem.parent(r), ast.Call) and sem.parent(r).func is r)]  # type: ignore[union-attr]
    entries = [sem.parent(r) for r in refs if _entry_point(ctx, r)]
    if entries and len(entries) == len(refs):  # ``fire.Fire(train)``: the command line calls it, on every rank
        return all(_rank_guarded(ctx, c, depth + 1) for c in entries)  # type: ignore[arg-type]
    if refs:
        return True  # a callback (``register_save_state_pre_hook(save_hook)``, ``fcn = self.cache_to_disk``)
    if sem.project is None or cls is not None:
        return False
    if sem.project.callers_rank_guarded(sem, func):  # type: ignore[attr-defined]
        return True
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
    target = _arg(call, "f", 1) if (ctx.call_name(call) or "") == "torch.save" else None
    if isinstance(target, ast.Name):
        b = ctx.semantic.binding_at(target.id, call)
        target = b.value if b is not None and not b.is_param else None
    return isinstance(target, ast.Call) and (ctx.call_name(target) or dotted(target.func) or "").endswith("BytesIO")


def _multi_process(ctx: Context, node: ast.AST) -> bool:
    """A DDP program, or an Accelerate training script whose ``Accelerator()`` is made in the function that
    writes (``accelerate launch`` runs it once per GPU; its evaluation scripts, and programs that only try
    Accelerate in one of their functions, mostly run as one process)."""
    sem = ctx.semantic
    if program.is_ddp_program(sem):
        inits = sem.calls_named("init_process_group")
        return not inits or not all(_one_process_group(c) for c in inits)
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
    return sem.project.unguarded_ddp_caller(sem, func)  # type: ignore[attr-defined]


def _short_path(path: str) -> str:
    return os.path.relpath(path) if os.path.isabs(path) and not os.path.relpath(path).startswith("..") else path


def _one_process_group(call: ast.Call) -> bool:
    """``init_process_group("gloo", world_size=1, rank=0, store=HashStore())``: a group of one process."""
    size = keyword(call, "world_size")
    return size is not None and isinstance(size.value, ast.Constant) and size.value.value == 1


def _other_format_of(ctx: Context, call: ast.Call) -> bool:
    """``if safe_serialization: safetensors.torch.save_file(...) else: torch.save(...)``: the else branch writes
    the same file in another format; one finding, at the first branch's write (one construct, one finding)."""
    sem = ctx.semantic
    stmt = sem.statement_of(call)
    branch = sem.parent(stmt) if stmt is not None else None
    return isinstance(branch, ast.If) and stmt in branch.orelse and any(
        isinstance(n, ast.Call) and _write_site(ctx, n) is not None for s in branch.body for n in sem.subtree(s))


def _writes_on_main_only(call: ast.Call) -> bool:
    """``save_pretrained(..., is_main_process=accelerator.is_main_process, save_function=accelerator.save)``."""
    return any(k.arg in ("is_main_process", "save_function") for k in call.keywords)


@rule("TD703", calls=_WRITERS)
def write_without_rank_guard(node: ast.Call, ctx: Context) -> None:
    """Checkpoint saving or file writing in a DDP program with no rank-0 guard (prints are not reported):
    not behind a rank test (`if rank == 0:`, `is_main_process()`, an early `if rank != 0: return`) here
    or at every call of the enclosing function."""
    what = _write_site(ctx, node)
    if what is None or _writes_on_main_only(node) or _mentions_rank(ctx, node) or _in_memory(ctx, node) \
            or _per_sample_file(ctx, node) or _no_caller_takes(ctx, node) or _other_format_of(ctx, node):
        return
    caller = None if _multi_process(ctx, node) else _ddp_caller(ctx, node)
    if (caller is None and not _multi_process(ctx, node)) or _rank_guarded(ctx, node):
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
