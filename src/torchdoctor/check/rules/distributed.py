"""Stage 7 rules, distributed: samplers, backends, per-rank devices, SyncBatchNorm (files written on every rank: ``writes.py``)."""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from torchdoctor.check.astutil import argument, call_argument, dotted, is_true, keyword, method_name, string_value
from torchdoctor.check.patterns import lazy
from torchdoctor.check.registry import rule
from torchdoctor.check.semantic import cuda_sites, program
from torchdoctor.check.semantic.processes import shuffling_samplers
from torchdoctor.check.semantic.device_choice import option_dest
from torchdoctor.check.semantic.models import construction

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


@rule("TD702", calls=("DataLoader",))
def sampler_and_shuffle(node: ast.Call, ctx: Context) -> None:
    """DataLoader given both a sampler and `shuffle=True`.

    What it does: finds `DataLoader(..., sampler=..., shuffle=True)` (or `batch_sampler=`).
    Why is this bad? DataLoader raises `ValueError: sampler option is mutually
    exclusive with shuffle` at start-up; with a sampler that is sometimes None it
    fails only in the distributed run.
    Use instead: `shuffle=(sampler is None)`; a DistributedSampler shuffles by itself.
    """
    shuffle = argument(node, "shuffle", 2)
    if not _is_dataloader(ctx, node) or shuffle is None:
        return
    literal = is_true(shuffle)
    if not literal and not _may_be_true(ctx, shuffle, node):
        return
    for name, position in (("sampler", 3), ("batch_sampler", 4)):
        value = argument(node, name, position)
        if value is not None and not literal and not _may_meet(ctx, shuffle, value, node):
            continue  # (``shuffle=self.shuffle`` beside ``sampler=sampler`` of unknown make, or chosen in the other
            # branch of the same test: ``if ddp: sampler = DistributedSampler(ds); shuffle = False else: ...``)
        if value is not None and not (isinstance(value, ast.Constant) and value.value is None):
            ctx.report(
                "TD702",
                node,
                f"DataLoader gets `{name}={ctx.name(value)}` and `shuffle=True`: "
                "DataLoader raises ValueError (they are mutually exclusive)" if literal else
                f"DataLoader gets `{name}={ctx.name(value)}`, which can be a sampler, and `shuffle={ctx.name(shuffle)}`, "
                "which can be True: when both are, DataLoader raises ValueError (they are mutually exclusive)",
                fix=f"pass `shuffle=({ctx.name(value)} is None)` or drop `shuffle=True`; the sampler decides the order"
                if literal else f"pass `shuffle={ctx.name(shuffle)} and {ctx.name(value)} is None`; the sampler decides the order",
            )
            return


def _bindings(ctx: Context, expr: ast.AST, at: ast.AST) -> list:
    """The bindings of the name or ``self.`` attribute ``expr`` in its function, or in its class's methods."""
    sem = ctx.semantic
    key = dotted(expr) if isinstance(expr, (ast.Name, ast.Attribute)) else None
    if not key:
        return []
    cls, func = sem.class_of(at), sem.function_of(at)
    return [b for b in sem.bindings_of(key) if b.value is not None and not b.is_param
            and (sem.class_of(b.node) is cls if key.startswith("self.") else sem.function_of(b.node) is func)]


def _bound_values(ctx: Context, expr: ast.AST, at: ast.AST) -> list[ast.AST]:
    return [b.value for b in _bindings(ctx, expr, at)]


def _truthy(value: ast.AST) -> bool:
    return is_true(value) or isinstance(value, ast.IfExp) and (is_true(value.body) or is_true(value.orelse))


def _samples(value: ast.AST) -> bool:
    values = (value.body, value.orelse) if isinstance(value, ast.IfExp) else (value,)
    return any(isinstance(v, ast.Call) and (dotted(v.func) or "").endswith("Sampler") for v in values)


def _may_meet(ctx: Context, shuffle: ast.AST, sampler: ast.AST, at: ast.AST) -> bool:
    """Some binding makes ``sampler`` a sampler and some makes ``shuffle`` True, and they are not exclusive: in the two
    branches of one test (``if ddp: sampler = DistributedSampler(ds); shuffle = False`` / ``else: ... = True``), or a
    True chosen by a conditional expression on the test that makes the sampler (``shuffle = False if args.distributed
    else True``), or the sampler made where the same block turns shuffle off (``train_sampler, shuffle =
    DistributedSampler(trainset), False``)."""
    sem = ctx.semantic
    shuffles = _bindings(ctx, shuffle, at)
    on = [b for b in shuffles if _truthy(b.value)]
    off_blocks = {id(sem.parent(sem.statement_of(b.node))) for b in shuffles
                  if isinstance(b.value, ast.Constant) and b.value.value is False}
    made = [b for b in _bindings(ctx, sampler, at) if _samples(b.value)
            and id(sem.parent(sem.statement_of(b.node))) not in off_blocks]
    return any(not sem.in_other_branch(a.node, m.node) and not _chosen_apart(ctx, a.value, m.node)
               for a in on for m in made)


def _chosen_apart(ctx: Context, value: ast.AST, made: ast.AST) -> bool:
    """``shuffle = False if args.distributed else True`` beside a sampler made under ``if args.distributed:``."""
    if not isinstance(value, ast.IfExp):
        return False
    true_if_test = is_true(value.body)  # (True where the test holds, else in the ``else``: where it fails)
    return any(ctx.segment(test) == ctx.segment(value.test) and holds != true_if_test
               for test, holds in ctx.semantic.guards.branch_tests(made))


def _may_be_true(ctx: Context, expr: ast.AST, at: ast.AST) -> bool:
    """``shuffle=self.shuffle`` of ``self.shuffle = False if is_eval else True``: some binding is True, and none is
    derived from the sampler (``shuffle = sampler is None``)."""
    values = _bound_values(ctx, expr, at)
    if any("sampler" in ctx.segment(v).lower() for v in values):
        return False
    return any(_truthy(v) for v in values)


# ---- TD704 ---------------------------------------------------------------------


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
    backend = argument(node, "backend", 0)
    literal = (string_value(backend) or "").strip().lower() == "nccl" \
        or backend is not None and (ctx.semantic.qualname(backend) or "") in _NCCL_CONSTANTS
    if not literal and not isinstance(backend, (ast.Name, ast.Attribute)):
        return  # (first: ``backend=args.dist_backend`` names no NCCL here, and the tests below read modules)
    if ctx.semantic.chooses_device(node):
        return  # ``if torch.cuda.is_available(): init_process_group("nccl") else: ...``: the CPU has its path
    if program.refuses_cpu(ctx.semantic, at=node):
        return  # ``assert torch.cuda.is_available(), "DDP needs CUDA"`` (here, in the process that spawns this
        # worker, or in a project helper it calls): the author states the need
    if _under_a_gpu_count_test(ctx, node) or _flag_cleared_without_gpus(ctx, node) or _started_only_with_gpus(ctx, node):
        return  # ``world_size = torch.cuda.device_count()``, ``if world_size > 1:``: it runs only with GPUs
    func = ctx.semantic.function_of(node)
    if func is not None and ctx.semantic.project is not None and ctx.semantic.project.callers_refuse_cpu(ctx.semantic, func):
        return  # (a helper of ``utils/distributed.py`` whose every caller raises first without CUDA)
    set_at = _set_to_nccl(ctx, backend, node) if not literal else None
    handed = _handed_nccl(ctx, backend, node) if not literal and set_at is None else None
    if (literal or set_at is not None or handed is not None) \
            and not program.requires_gpu_only_library(ctx.semantic):  # (asked last: it may read the imported modules)
        # (``from apex.parallel import DistributedDataParallel``: the program needs NVIDIA GPUs, gloo or not)
        where = f' (`{ctx.name(backend)} = "nccl"` at line {set_at.lineno})' if set_at is not None else \
            f' (`{ctx.name(handed.func)}(...)` hands it `"nccl"` at line {handed.lineno})' if handed is not None else ""  # type: ignore[arg-type]
        ctx.report(
            "TD704",
            node,
            f'`{ctx.name(node.func)}(..., {ctx.name(backend)})` hard-codes NCCL{where}: '  # type: ignore[arg-type]
            "the program cannot run on CPUs (gloo)",
            fix='choose the backend: `"nccl" if torch.cuda.is_available() else "gloo"`',
        )


_NCCL_CONSTANTS = frozenset({"torch.distributed.Backend.NCCL", "torch.distributed.distributed_c10d.Backend.NCCL"})


def _flag_cleared_without_gpus(ctx: Context, node: ast.AST) -> bool:
    """``node`` runs under ``if args.distributed:`` where the CPU branch of a CUDA test clears that flag (``if
    torch.cuda.is_available(): args.device = "cuda"`` / ``else: args.distributed = False``): NCCL is reached with
    GPUs only."""
    sem = ctx.semantic
    flags = {dotted(up.test) for up in sem.ancestors(node) if isinstance(up, ast.If) and dotted(up.test)
             and any(sem.contains(s, node) for s in up.body)}
    return bool(flags) and any(
        isinstance(n.value, ast.Constant) and n.value.value is False and any(dotted(t) in flags for t in n.targets)  # type: ignore[attr-defined]
        and sem.guards.on_cpu_branch(n) for n in sem.of_type(ast.Assign))


def _started_only_with_gpus(ctx: Context, node: ast.AST) -> bool:
    """``node`` is in a module-level worker every use of which (``mp.spawn(worker, ...)``, a call) sits under a test that
    GPUs exist (``if torch.cuda.is_available() and torch.cuda.device_count() >= 4:``, else the demo says it skips)."""
    sem = ctx.semantic
    func = sem.function_of(node)
    if func is None or sem.function_of(func) is not None or sem.class_of(func) is not None:
        return False
    uses = sem.reads_of(func.name)  # type: ignore[attr-defined]
    return bool(uses) and all(sem.chooses_device(u) or _under_a_gpu_count_test(ctx, u) for u in uses)


def _under_a_gpu_count_test(ctx: Context, node: ast.AST) -> bool:
    """``node`` runs only in the ``if`` branch of ``torch.cuda.device_count() > 1`` (or of a name bound to that
    count): only where GPUs exist."""
    sem = ctx.semantic
    child = node
    for up in sem.ancestors(node):
        if isinstance(up, ast.If) and any(s is child for s in up.body):
            test = up.test
            if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Gt, ast.GtE)) \
                    and isinstance(bound := test.comparators[0], ast.Constant) and isinstance(bound.value, int) \
                    and bound.value >= (0 if isinstance(test.ops[0], ast.Gt) else 1):
                left = test.left
                if isinstance(left, ast.Name) and (b := sem.binding_at(left.id, up)) is not None and not b.is_param:
                    left = b.value
                if isinstance(left, ast.Call) and (ctx.call_name(left) or "") == "torch.cuda.device_count":
                    return True
        if isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return False
        child = up
    return False


def _handed_nccl(ctx: Context, backend: ast.AST | None, call: ast.Call) -> ast.Call | None:
    """``def setup_ddp(rank, world, backend): dist.init_process_group(backend=backend, ...)`` whose every call in this
    file hands ``backend`` the literal ``"nccl"`` (``setup_ddp(rank, world, "nccl")``): hard-coded one call up."""
    sem = ctx.semantic
    func = sem.function_of(call)
    if not isinstance(backend, ast.Name) or func is None:
        return None
    b = sem.binding_at(backend.id, call)
    if b is None or not b.is_param or b.node is not func:
        return None
    sites = sem.call_sites(func)
    given = [call_argument(site, func, backend.id) for site in sites]  # type: ignore[arg-type]
    if not sites or not all((string_value(g) or "").strip().lower() == "nccl" for g in given):
        return None
    return sites[0]


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


def _helper_sets_device(ctx: Context) -> bool:
    """``start_group(rank, world)``, a function of another module of the project, calls ``torch.cuda.set_device``."""
    sem = ctx.semantic
    return sem.project is not None and any(
        "set_device" in getattr(sem.external(c), "effects", ()) for c in sem.calls
        if isinstance(c.func, (ast.Name, ast.Attribute)) and (dotted(c.func) or "").split(".")[0]
        in sem.names.from_imports or isinstance(c.func, ast.Attribute)
        and (dotted(c.func) or "").split(".")[0] in sem.names.imports)


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
        if any(site.indexed for site in cuda_sites.cuda_sites(ctx.semantic)):
            return True
        aliases = ctx.semantic.guards.rank_aliases()
        for call in ctx.semantic.calls_named("to"):
            arg = call.args[0] if call.args else None
            name = dotted(arg) or ""
            if name and (name in aliases or re.search(r"(?i)rank|gpu_id|local_gpu", name)):
                return True
        return False

    return ctx.semantic.cached("indexed_device", compute)  # type: ignore[no-any-return]


_HF_TRAINERS = ("Trainer", "Seq2SeqTrainer", "SFTTrainer", "DPOTrainer", "RewardTrainer", "GRPOTrainer")


def _hf_trainer(ctx: Context) -> bool:
    """A Hugging Face ``Trainer`` (or a TRL one) runs the program: under torchrun it binds each process to
    ``cuda:LOCAL_RANK`` itself (``TrainingArguments`` sets the device)."""
    sem = ctx.semantic
    return any((q := sem.call_name(c) or "").startswith(("transformers.", "trl.")) and q.rsplit(".", 1)[-1] in _HF_TRAINERS
               for c in sem.calls_named(*_HF_TRAINERS))


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
    if not program.is_ddp_program(sem) or _sets_rank_device(ctx) \
            or program.accelerator_api(sem) or program.sets_device_through_helper(sem) or not _starts_processes(ctx) \
            or program.single_process_world(sem) or _hf_trainer(ctx):
        return  # (Accelerate/Fabric and device helpers bind each rank to its GPU; so does the code that starts them)
    sites = [site for site in cuda_sites.cuda_sites(sem) if not site.indexed and not _single_process_branch(ctx, site.node)
             and not _moved_again_to_an_index(ctx, site.node) and not _outside_the_spawned_workers(ctx, site.node)
             and not _after_fully_shard(ctx, site.node)]
    if sites and _rank_per_node(ctx):
        return
    if sites and (_helper_sets_device(ctx) or sem.project is not None and (
            sem.project.importer_sets_device(sem) or sem.project.importer_wraps_data_parallel(sem))):
        return  # (asked last: it reads the modules the file calls into, or those that import it)
    where = "it lands on GPU 0 in every rank, while the rank's other work goes to its own GPU" \
        if sites and _has_indexed_device(ctx) else "every rank runs on GPU 0"
    for site in sites:
        ctx.report(
            "TD705",
            site.node,
            f"`{site.text}` names no GPU index in a DDP program that never calls `torch.cuda.set_device`: {where}",
            fix='call `torch.cuda.set_device(local_rank)` first, or use `torch.device("cuda", local_rank)`',
        )


def _after_fully_shard(ctx: Context, node: ast.AST) -> bool:
    """``torch.device("cuda")`` after FSDP2's ``fully_shard(model)`` in the same function: sharding made a device mesh
    (its default one when given none), and making a mesh sets each process's current GPU from ``LOCAL_RANK`` while
    CUDA is untouched (a model built on the meta device, then ``model.to_empty(device=torch.device("cuda"))``)."""
    sem = ctx.semantic
    pos = sem.index.pos.get(node)
    scope = sem.scope_of(node)
    return pos is not None and any(
        (ctx.call_name(c) or "").startswith("torch.distributed.") and sem.scope_of(c) is scope
        and sem.index.pos[c] < pos for c in sem.calls_named("fully_shard"))


def _moved_again_to_an_index(ctx: Context, node: ast.AST) -> bool:
    """``model = model.cuda()``, then ``model = model.to(opt.local_rank)`` before DDP wraps it: on its rank's GPU in the
    end (a move to a rank index of the same name, later in the same scope)."""
    sem = ctx.semantic
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    stmt = sem.parent(node)
    key = dotted(stmt.targets[0]) if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else dotted(node.func.value)
    return bool(key) and any(
        dotted(c.func.value) == key and (c.args or c.keywords) and sem.scope_of(c) is sem.scope_of(node)  # type: ignore[attr-defined]
        and (c.lineno, c.col_offset) > (node.lineno, node.col_offset) for c in sem.calls_named("to", "cuda")
        if isinstance(c.func, ast.Attribute) and _has_indexed_device(ctx))


def _rank_per_node(ctx: Context) -> bool:
    """Every rank wraps a model in ``nn.DataParallel`` over the GPUs it sees (``self.decoder =
    nn.DataParallel(self.decoder).cuda()`` outside the program's single-process branch): one process per machine,
    launched with ``--nproc_per_node=1``, whose GPU 0 is its own machine's."""
    sem = ctx.semantic
    return any((ctx.call_name(call) or "") in ("torch.nn.DataParallel", "torch.nn.parallel.DataParallel")
               and not _single_process_branch(ctx, call) for call in sem.calls_named("DataParallel"))


def _outside_the_spawned_workers(ctx: Context, node: ast.AST) -> bool:
    """The file starts its ranks with ``mp.spawn(run, ...)`` and ``node`` is in a function that neither ``run`` nor the
    functions of the file it calls reach (an ``evaluation(args)`` the ``-e`` flag runs in the launching process alone):
    one process, whose GPU 0 is its GPU."""
    sem = ctx.semantic

    def reached() -> frozenset[ast.AST] | None:
        targets = [c.args[0] for c in sem.calls_named("spawn", "start_processes")
                   if (sem.call_name(c) or "").startswith("torch.multiprocessing") and c.args]
        funcs = [f for t in targets if isinstance(t, ast.Name) for f in sem.functions.get(t.id, ())]
        if not targets or len(funcs) != len(targets):
            return None  # (a target of another module, or none: every function may run in a rank)
        return frozenset(g for f in funcs for g in sem.reachable(f))

    workers = sem.cached("spawned_workers", reached)
    func = sem.function_of(node)
    if workers is None or func is None:
        return False
    outer = func
    while (up := sem.function_of(outer)) is not None:
        outer = up
    return func not in workers and outer not in workers


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
    return bool(known) and any(not holds for test, holds in sem.guards.branch_tests(node) if dotted(test) in known)


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
            elif name.startswith("segmentation_models_pytorch.") and name.rsplit(".", 1)[-1][:1].isupper():
                encoder = keyword(n, "encoder_name")  # (``smp.Unet(...)``: a ResNet-34 encoder unless told otherwise)
                arch = string_value(encoder.value) if encoder else "resnet34"
            elif isinstance(n.func, ast.Subscript) and isinstance(n.func.value, ast.Attribute) \
                    and n.func.value.attr == "__dict__" and ctx.qualname(n.func.value.value) == "torchvision.models":
                arch = _option_default(sem, n.func.slice)  # ``models.__dict__[args.arch]()``, ``default="resnet18"``
            if arch and _BN_ARCH.match(arch.lower()):
                return True
        return False

    return ctx.semantic.cached("uses_bn", compute)  # type: ignore[no-any-return]


def _option_default(sem, key: ast.AST) -> str | None:  # type: ignore[no-untyped-def]
    """The string default of the command-line option ``key`` reads (``args.arch`` of ``parser.add_argument("-a",
    "--arch", default="resnet18")``)."""
    if not isinstance(key, ast.Attribute):
        return None
    for call in sem.calls_named("add_argument"):
        if option_dest(call) == key.attr:
            default = next((k.value for k in call.keywords if k.arg == "default"), None)
            return default.value if isinstance(default, ast.Constant) and isinstance(default.value, str) else None
    return None


def _converts_sync_bn(ctx: Context) -> bool:
    """The code (not a comment or a string) names ``SyncBatchNorm`` or ``convert_sync_batchnorm``."""
    if "convert_sync_batchnorm" not in ctx.source and "SyncBatchNorm" not in ctx.source \
            and "convert_syncbn_model" not in ctx.source:
        return False
    sem = ctx.semantic
    return any((n.attr if isinstance(n, ast.Attribute) else n.id) in _SYNC_NAMES  # type: ignore[attr-defined]
               for n in sem.of_type(ast.Attribute, ast.Name)) or any(
        a.name.rsplit(".", 1)[-1] in _SYNC_NAMES for n in sem.of_type(ast.ImportFrom) for a in n.names)  # type: ignore[attr-defined]


_SYNC_NAMES = ("SyncBatchNorm", "convert_sync_batchnorm", "convert_syncbn_model")  # (apex's: ``convert_syncbn_model``)
_APEX_DDP = "apex.parallel.DistributedDataParallel"


def _trains_in_eval_mode(ctx: Context) -> bool:
    """A function of the file backpropagates after ``model.eval()`` and never calls ``.train()``: a linear probe on
    frozen features (moco's and simsiam's ``main_lincls.py``), whose BatchNorm layers keep their running statistics;
    syncing them would change nothing."""
    sem = ctx.semantic
    for func in {sem.function_of(n) for n in sem.calls_named("eval", "train") if sem.mode_call(n)}:
        if func is None:
            continue
        nodes = sem.local_nodes(func)
        modes = {sem.mode_call(n) for n in nodes if isinstance(n, ast.Call) and sem.mode_call(n)}
        if modes == {"eval"} and "backward" in sem.region_effects(nodes):
            return True
    return False


def _evaluates_only(ctx: Context) -> bool:
    """The file puts its model in eval mode and never trains (no backward, no optimizer): a distributed evaluation,
    whose BatchNorm layers use their running statistics."""
    source = ctx.semantic.text.source
    return "backward" not in source and "optim" not in source and any(
        ctx.semantic.mode_call(n) == "eval" for n in ctx.semantic.calls_named("eval"))


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
        return bool(cuda_sites.cuda_sites(sem)) or any(
            (string_value(n) or "").lower().startswith(("nccl", "cuda")) for n in sem.of_type(ast.Constant)) \
            or program.runs_on_accelerator(sem)  # (``model.to(args.local_rank)``: a GPU index, set up by the launcher)

    return ctx.semantic.cached("on_gpus", compute)  # type: ignore[no-any-return]


def _wraps_a_project_bn_model(ctx: Context, node: ast.Call) -> bool:
    """``DDP(model, ...)`` of ``model = BtsModel(args)``, a class of another module of the project with BatchNorm layers
    (in it, its parts or its bases)."""
    sem = ctx.semantic
    if not node.args or sem.project is None:
        return False
    made = [construction(sem, node.args[0], node)]
    key = dotted(node.args[0])
    current = sem.binding_at(key, node) if key else None
    for b in sem.bindings_of(key) if current is not None else ():  # (``if args.model == "unet": model =
        if b.scope is current.scope and b.value is not None and not b.is_param and b.index is None \
                and sem.in_other_branch(b.node, current.node):  # SNGPUnet(...)``, ``elif ...: model = ...``: each model
            made.append(construction(sem, b.value, b.node))  # a branch builds is what DDP wraps, on that path)
    imported = sem.names.from_imports.keys() | sem.names.imports.keys()
    return any(isinstance(m, ast.Call) and (written := dotted(m.func)) and written.split(".")[0] in imported
               and sem.project.class_batchnorm(sem, written) for m in made)  # type: ignore[union-attr]


@rule("TD706", calls=("DistributedDataParallel", "DDP"))
def batchnorm_without_sync(node: ast.Call, ctx: Context) -> None:
    """BatchNorm in a DDP model without `SyncBatchNorm.convert_sync_batchnorm`: reported on the `DDP(` wrap."""
    apex = ctx.call_name(node) == _APEX_DDP
    if ctx.call_name(node) not in _DDP and not apex or not (_uses_batchnorm(ctx) or _wraps_a_project_bn_model(ctx, node)) \
            or _converts_sync_bn(ctx) \
            or not _on_gpus(ctx) or _frozen_before_the_wrap(ctx, node) or _trains_in_eval_mode(ctx) \
            or _evaluates_only(ctx):
        return
    model = ctx.name(node.args[0]) if node.args else "model"
    convert = f"apex.parallel.convert_syncbn_model({model})" if apex else f"nn.SyncBatchNorm.convert_sync_batchnorm({model})"
    ctx.report(
        "TD706",
        node,
        f"`{model}` has BatchNorm layers and is wrapped in DDP without SyncBatchNorm: "
        "each GPU normalises with its own batch statistics",
        fix=f"`{model} = {convert}` before `DDP(...)`",
    )


# ---- TD701 ---------------------------------------------------------------------


_EVAL_SAMPLER = lazy(r"(?i)(val|test|eval|dev)")


def _sampler_never_told(ctx: Context, loop: ast.AST, samplers: list[ast.Call], set_epochs: list[ast.Call]) -> str | None:
    """The name of a shuffling sampler kept under a name (``self.sampler_a = DistributedSampler(...)``) that no
    ``set_epoch`` call names, while every ``set_epoch`` names another such sampler (``self.sampler_b.set_epoch(...)``
    in a helper that restarts an auxiliary loader), and whose loader this epoch loop iterates."""
    sem = ctx.semantic
    names = {}
    for s in samplers:
        up = sem.parent(s)
        if isinstance(up, ast.Assign) and len(up.targets) == 1 and (name := dotted(up.targets[0])):
            names[name] = s
    told = [dotted(c.func.value) if isinstance(c.func, ast.Attribute) else None for c in set_epochs]
    if not names or not told or any(t not in names for t in told):
        return None  # (``train_loader.sampler.set_epoch(e)``, a parameter's: which sampler it tells is not seen)
    read = {dotted(n) for n in sem.subtree(loop) if isinstance(n, (ast.Name, ast.Attribute))}
    for name in names:
        if name in told or _EVAL_SAMPLER.search(name.rsplit(".", 1)[-1]):
            continue  # (a validation sampler's order does not matter: each epoch evaluates the same set)
        loaders = [dotted(up.targets[0]) for c in sem.of_type(ast.Call) if any(
            k.arg == "sampler" and dotted(k.value) == name for k in c.keywords)  # type: ignore[attr-defined]
            and isinstance(up := sem.parent(c), ast.Assign) and len(up.targets) == 1]
        if any(l and l in read for l in loaders):
            return name
    return None


@rule("TD701", ast.For, ast.AsyncFor)
def sampler_without_set_epoch(node: ast.For, ctx: Context) -> None:
    """`DistributedSampler` without `sampler.set_epoch(epoch)`: reported on the outermost epoch loop of a file
    that builds a shuffling DistributedSampler and never calls `set_epoch`, here or in a function the loop
    runs (of this file or of the project)."""
    sem = ctx.semantic
    if sem.loop_kind(node) != "epoch" or sem.enclosing_loop(node, "epoch") is not None:
        return
    samplers = [s for s in shuffling_samplers(sem) if not _evaluation_sampler(sem, s)]
    helper = None if samplers else _sampler_from_a_helper(ctx, node)
    if not samplers and helper is None:
        return
    sampler = ctx.name(samplers[0], 50) if samplers else ""
    if len(sampler) > 50:
        sampler = "DistributedSampler(...)"
    sampler = f"`{sampler}`" if samplers else f"the DistributedSampler that `{ctx.name(helper.func)}(...)` builds"
    set_epochs = sem.calls_named("set_epoch")
    if set_epochs and not samplers:
        return  # (a helper's sampler, and a ``set_epoch`` here: told the epoch)
    if set_epochs:
        flag = _flag_only_set_epoch(ctx, set_epochs, samplers)
        if flag is not None:
            ctx.report("TD701", node, f"{sampler} is built (and shuffles) whatever `{flag}` is, but `set_epoch(epoch)` "
                       f"is only called `if {flag}`: when it is false, every epoch sees the same order",
                       fix=f"call `set_epoch(epoch)` whenever the sampler is a DistributedSampler, not only `if {flag}`")
            return
        untold = _sampler_never_told(ctx, node, samplers, set_epochs)
        if untold is not None:
            ctx.report("TD701", node, f"`{untold}` shuffles the loader this epoch loop runs, but `set_epoch` is only "
                       "called on the other samplers: every epoch sees the same order",
                       fix=f"call `{untold}.set_epoch(epoch)` at the start of each epoch")
        return
    effects = sem.region_effects(sem.body(node), deep=True)
    if "set_epoch" in effects or not {"backward", "step"} & set(effects) and not _counts_epochs(node):
        return  # (``for checkpoint in checkpoints: evaluate(model)``: no training pass to reshuffle)
    ctx.report(
        "TD701",
        node,
        f"{sampler} shuffles, but this epoch loop never calls `set_epoch(epoch)`: "
        "every epoch sees the same order",
        fix="call `sampler.set_epoch(epoch)` at the start of each epoch",
    )


_HELD_OUT = lazy(r"(?i)(^|_)(eval|evaluation|val|valid|validation|test|dev)(_|$|set|data)")


def _evaluation_sampler(sem, call: ast.Call) -> bool:  # type: ignore[no-untyped-def]
    """``eval_sampler = SequentialSampler(eval_dataset) if ... else DistributedSampler(eval_dataset)`` in an
    ``evaluate()`` the epoch loop calls: a sampler of held-out data (by its dataset's or its own name) splits the
    evaluation between the ranks, where the order of the examples changes no metric."""
    data = call.args[0] if call.args else (keyword(call, "dataset").value if keyword(call, "dataset") else None)  # type: ignore[union-attr]
    names = [dotted(data) or ""]
    stmt = next((a for a in sem.ancestors(call) if isinstance(a, ast.stmt)), None)
    if isinstance(stmt, ast.Assign):
        names += [dotted(t) or "" for t in stmt.targets]
    return any(_HELD_OUT.search(n.rsplit(".", 1)[-1]) for n in names if n)


def _sampler_from_a_helper(ctx: Context, loop: ast.AST) -> ast.Call | None:
    """``loader = loaders.load_data(ds, bs)``, a function of another module that builds the loader with a shuffling
    DistributedSampler and calls no ``set_epoch``, iterated by a batch loop of this epoch loop: the call."""
    sem = ctx.semantic
    for inner in [n for n in sem.body(loop) if isinstance(n, (ast.For, ast.AsyncFor))]:
        source = sem.loader_of(inner) if sem.is_batch_loop(inner) else None
        b = sem.binding_at(source.id, inner) if isinstance(source, ast.Name) else None
        made = b.value if b is not None and not b.is_param and b.index is None else source
        ext = sem.external(made) if isinstance(made, ast.Call) else None
        effects = getattr(ext, "effects", ())
        if "dsampler" in effects and "set_epoch" not in effects:
            return made  # type: ignore[return-value]
    return None


def _counts_epochs(loop: ast.For) -> bool:
    """``for epoch in range(n)``, ``for epoch in trange(...)``: a loop over epochs by its own look."""
    target = dotted(loop.target) or ""
    it = loop.iter
    name = (dotted(it.func) or "").rsplit(".", 1)[-1] if isinstance(it, ast.Call) else ""
    return "epoch" in target.lower() or name in ("range", "trange", "tqdm", "tnrange")


def _flag_guards(ctx: Context, node: ast.AST) -> set[str]:
    """The flags (``args.distributed``) an ``if`` around ``node`` requires true (``if not x: ... else:`` too, and each
    flag of an ``and``)."""
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
            elif in_body and isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
                out.update(d for v in test.values if isinstance(v, (ast.Name, ast.Attribute)) and (d := dotted(v)))
                # (``if args.distributed and args.num_gpu > 1:``: each operand holds in the body)
        child = parent
    return out


def _flag_only_set_epoch(ctx: Context, set_epochs: list[ast.Call], samplers: list[ast.Call]) -> str | None:
    """Every ``set_epoch`` of the file waits on a flag (``if args.distributed:``) that does not guard the
    shuffling sampler's construction (built ``if True:`` or always): the flag that leaves it out."""
    flags = None
    for call in set_epochs:
        func = ctx.semantic.function_of(call)  # (``def _run_epoch(self, epoch, loader, train=True): if train:
        params = {a.arg for a in func.args.args + func.args.kwonlyargs} if func is not None else set()  # type: ignore[attr-defined]
        found = _flag_guards(ctx, call) - params  # set_epoch``: each caller says, the training one passes True)
        flags = found if flags is None else flags & found
        if not flags:
            return None
    held = {dotted(t) for s in samplers if isinstance(p := ctx.semantic.parent(s), ast.Assign) for t in p.targets}
    unguarded = [f for f in sorted(flags or ()) if f not in held and all(f not in _flag_guards(ctx, s) for s in samplers)]
    return unguarded[0] if unguarded else None  # (``if data_sampler:`` tests that the sampler exists: no flag)
