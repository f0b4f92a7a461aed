"""Stage 7 rules, distributed: samplers, rank-0 duties, backends, per-rank devices, SyncBatchNorm."""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from torchdoctor.check.astutil import FUNC_TYPES, dotted, is_true, keyword, string_value
from torchdoctor.check.registry import rule
from torchdoctor.check.rules.device import all_nodes, ancestors, cuda_site, iter_cuda_sites, memo, method_calls

if TYPE_CHECKING:
    from torchdoctor.check.context import Context

_DDP = ("torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel")
# torchvision/timm architectures built with BatchNorm layers.
_BN_ARCH = re.compile(
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


@rule("TD702", ast.Call)
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
                f"DataLoader gets `{name}={ctx.segment(value)}` and `shuffle=True`: "
                "DataLoader raises ValueError (they are mutually exclusive)",
                fix=f"pass `shuffle=({ctx.segment(value)} is None)` or drop `shuffle=True`; the sampler decides the order",
            )
            return


# ---- TD704 ---------------------------------------------------------------------


@rule("TD704", ast.Call)
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
    if (string_value(backend) or "").strip().lower() == "nccl":
        ctx.report(
            "TD704",
            node,
            f'`{ctx.segment(node.func)}(..., {ctx.segment(backend)})` hard-codes NCCL: '  # type: ignore[arg-type]
            "the program cannot run on CPUs (gloo)",
            fix='choose the backend: `"nccl" if torch.cuda.is_available() else "gloo"`',
        )


# ---- TD705 ---------------------------------------------------------------------


def _sets_rank_device(ctx: Context) -> bool:
    """Each process picks its own GPU: `set_device`, or CUDA_VISIBLE_DEVICES set in the program."""

    def compute() -> bool:
        for n in all_nodes(ctx):
            if isinstance(n, ast.Call):
                name = ctx.call_name(n) or ""
                if name.endswith(("set_device", "set_device_index")):
                    return True
            # os.environ["CUDA_VISIBLE_DEVICES"] = str(local_rank): "cuda" is then this rank's GPU
            if string_value(n) == "CUDA_VISIBLE_DEVICES" and any(
                    isinstance(a, ast.Assign) for a in list(ancestors(ctx, n))[:3]):
                return True
        return False

    return memo(ctx, "sets_rank_device", compute)


def _has_indexed_device(ctx: Context) -> bool:
    """The program places work on a per-rank GPU somewhere (`torch.device("cuda", rank)`, `.to(local_rank)`)."""

    def compute() -> bool:
        if any(site.indexed for site in iter_cuda_sites(ctx)):
            return True
        aliases = _rank_aliases(ctx)
        for call in method_calls(ctx, "to"):
            arg = call.args[0] if call.args else None
            name = dotted(arg) or ""
            if name and (name in aliases or re.search(r"(?i)rank|gpu_id|local_gpu", name)):
                return True
        return False

    return memo(ctx, "indexed_device", compute)


@rule("TD705", ast.Call, ast.Assign, ast.AnnAssign)
def every_rank_on_gpu0(node: ast.AST, ctx: Context) -> None:
    """Every rank on GPU 0: an un-indexed CUDA device in a DDP program.

    What it does: in a program that starts a process group or wraps a model in DDP,
    finds `.cuda()`, `.to("cuda")`, `torch.device("cuda")` without a device index,
    when the file never calls `torch.cuda.set_device(local_rank)`.
    Why is this bad? Every process then puts its model and data on GPU 0: the
    other GPUs idle and GPU 0 runs out of memory (or NCCL hangs).
    Use instead: `torch.cuda.set_device(local_rank)` at start-up, or `torch.device("cuda", local_rank)`.
    """
    site = cuda_site(node, ctx)
    if site is None or site.indexed or not ctx.facts.is_ddp_program or _sets_rank_device(ctx) \
            or _has_indexed_device(ctx):
        return
    ctx.report(
        "TD705",
        site.node,
        f"`{site.text}` names no GPU index in a DDP program that never calls `torch.cuda.set_device`: "
        "every rank runs on GPU 0",
        fix='call `torch.cuda.set_device(local_rank)` first, or use `torch.device("cuda", local_rank)`',
    )


# ---- TD706 ---------------------------------------------------------------------


def _uses_batchnorm(ctx: Context) -> bool:
    """A BatchNorm layer in the file's model definitions, or a library model built with them."""

    def compute() -> bool:
        for n in all_nodes(ctx):
            if isinstance(n, (ast.Attribute, ast.Name)):
                name = ctx.qualname(n) or ""
                if re.search(r"torch\.nn\.(modules\.batchnorm\.)?BatchNorm[123]?d$", name):
                    return True
            if isinstance(n, ast.Call):
                name = ctx.call_name(n) or ""
                arch = None
                if name.startswith("torchvision.models.") or name.startswith("torchvision.models"):
                    arch = name.rsplit(".", 1)[-1]
                elif name in ("timm.create_model", "torchvision.models.get_model") and n.args:
                    arch = string_value(n.args[0])
                if arch and _BN_ARCH.match(arch.lower()):
                    return True
        return False

    return memo(ctx, "uses_bn", compute)


def _converts_sync_bn(ctx: Context) -> bool:
    def compute() -> bool:
        return any(isinstance(n, ast.Attribute) and n.attr in ("convert_sync_batchnorm", "SyncBatchNorm")
                   or isinstance(n, ast.Name) and n.id in ("convert_sync_batchnorm", "SyncBatchNorm")
                   for n in all_nodes(ctx))

    return memo(ctx, "sync_bn", compute)


def _on_gpus(ctx: Context) -> bool:
    """SyncBatchNorm needs GPUs: the hint is only for programs that use CUDA or NCCL."""

    def compute() -> bool:
        return any(True for _ in iter_cuda_sites(ctx)) or any(
            (string_value(n) or "").lower().startswith(("nccl", "cuda")) for n in all_nodes(ctx))

    return memo(ctx, "on_gpus", compute)


@rule("TD706", ast.Call)
def batchnorm_without_sync(node: ast.Call, ctx: Context) -> None:
    """BatchNorm in a DDP model without `SyncBatchNorm.convert_sync_batchnorm`.

    What it does: reports the `DDP(` wrap when the file's models use BatchNorm and
    the file never converts them.
    Why is this bad? Each rank normalises with its own small batch's statistics;
    with small per-GPU batches that hurts accuracy (a hint, not an error).
    Use instead: `model = nn.SyncBatchNorm.convert_sync_batchnorm(model)` before wrapping.
    """
    if ctx.call_name(node) not in _DDP or not _uses_batchnorm(ctx) or _converts_sync_bn(ctx) or not _on_gpus(ctx):
        return
    model = ctx.segment(node.args[0]) if node.args else "model"
    ctx.report(
        "TD706",
        node,
        f"`{model}` has BatchNorm layers and is wrapped in DDP without SyncBatchNorm: "
        "each GPU normalises with its own batch statistics",
        fix=f"`{model} = nn.SyncBatchNorm.convert_sync_batchnorm({model})` before `DDP(...)`",
    )


# ---- TD701 ---------------------------------------------------------------------


def _shuffling_samplers(ctx: Context) -> list[ast.Call]:
    """DistributedSampler constructions that shuffle (the default)."""
    out = []
    for n in all_nodes(ctx):
        if isinstance(n, ast.Call):
            name = ctx.call_name(n) or ""
            if name.startswith("torch.utils.data") and name.endswith(".DistributedSampler"):
                shuffle = _arg(n, "shuffle", 3)
                if not (isinstance(shuffle, ast.Constant) and shuffle.value is False):
                    out.append(n)
    return out


@rule("TD701", ast.For, ast.AsyncFor)
def sampler_without_set_epoch(node: ast.For, ctx: Context) -> None:
    """`DistributedSampler` without `sampler.set_epoch(epoch)` in the epoch loop.

    What it does: reports the outermost epoch loop of a file that builds a shuffling
    DistributedSampler and never calls `set_epoch`.
    Why is this bad? The sampler seeds its shuffle with the epoch number: without
    `set_epoch`, every epoch visits the data in the same order.
    Use instead: `train_sampler.set_epoch(epoch)` at the top of each epoch.
    """
    facts = ctx.facts
    if facts.loop_kind(node) != "epoch" or facts.enclosing_loop(node, "epoch") is not None:
        return
    samplers = _shuffling_samplers(ctx)
    if not samplers or method_calls(ctx, "set_epoch"):
        return
    sampler = ctx.segment(samplers[0])
    if len(sampler) > 50 or "\n" in sampler:
        sampler = "DistributedSampler(...)"
    ctx.report(
        "TD701",
        node,
        f"`{sampler}` shuffles, but this epoch loop never calls `set_epoch(epoch)`: "
        "every epoch sees the same order",
        fix="call `sampler.set_epoch(epoch)` at the start of each epoch",
    )


# ---- TD703 ---------------------------------------------------------------------

_WRITE_MODE = re.compile(r"[wax+]")
_SAVERS = ("torch.save", "numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.savetxt")


def _write_site(ctx: Context, call: ast.Call) -> str | None:
    """What the call writes (for the message), if it writes a file."""
    name = ctx.call_name(call) or ""
    if name in _SAVERS:
        return f"`{name}`"
    meth = call.func.attr if isinstance(call.func, ast.Attribute) else None
    if name == "open" or meth == "open":
        mode = _arg(call, "mode", 1 if name == "open" else 0)
        text = string_value(mode)
        return f"`open(..., {text!r})`" if text and _WRITE_MODE.search(text) else None
    if meth in ("write_text", "write_bytes", "save_pretrained"):
        return f"`.{meth}(...)`"
    return None


def _mentions_rank(ctx: Context, call: ast.Call) -> bool:
    """A per-rank file name (`f"ckpt_rank{rank}.pt"`, or a name assigned one): each rank writes its own file."""
    aliases = _rank_aliases(ctx)
    for arg in [*call.args, *(k.value for k in call.keywords)]:
        if re.search(r"(?i)rank", ctx.segment(arg)) or any(dotted(n) in aliases for n in ast.walk(arg)):
            return True
        if isinstance(arg, ast.Name) and any(
                isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == arg.id for t in n.targets)
                and re.search(r"(?i)rank", ctx.segment(n.value)) for n in all_nodes(ctx)):
            return True
    return False


def _rank_aliases(ctx: Context) -> set[str]:
    """Names that hold a rank under another name: `self.gpu_id = int(os.environ["LOCAL_RANK"])`,
    or the first parameter of a function started by `mp.spawn` (its process index)."""

    def compute() -> set[str]:
        out: set[str] = set()
        for n in all_nodes(ctx):
            if isinstance(n, ast.Assign) and _is_rank_value(ctx, n.value):
                out.update(d for t in n.targets if (d := dotted(t)))
            elif isinstance(n, ast.Call) and (ctx.call_name(n) or "").endswith("multiprocessing.spawn") and n.args:
                target = dotted(n.args[0])
                for f in all_nodes(ctx):
                    if isinstance(f, FUNC_TYPES) and f.name == target and (f.args.posonlyargs + f.args.args):
                        out.add((f.args.posonlyargs + f.args.args)[0].arg)
        return out

    return memo(ctx, "rank_aliases", compute)


_RANK_CALLS = {"int", "str", "get_rank", "get_local_rank", "getenv", "get", "get_node_local_rank", "local_rank"}


def _is_rank_value(ctx: Context, value: ast.AST) -> bool:
    """``value`` is a rank itself (``int(os.environ["LOCAL_RANK"])``, ``dist.get_rank()``, ``args.local_rank``),
    not merely an expression that mentions one (``DDP(model, device_ids=[rank])`` is a model)."""
    if isinstance(value, ast.IfExp):
        return _is_rank_value(ctx, value.body) or _is_rank_value(ctx, value.orelse)
    if isinstance(value, ast.BinOp):
        return _is_rank_value(ctx, value.left) or _is_rank_value(ctx, value.right)
    if isinstance(value, ast.Call):
        last = (dotted(value.func) or "").rsplit(".", 1)[-1]
        if last not in _RANK_CALLS and "rank" not in last.lower():
            return False
    elif not isinstance(value, (ast.Name, ast.Attribute, ast.Subscript)):
        return False
    return bool(re.search(r"(?i)rank", ctx.segment(value)))


def _alias_guard(ctx: Context, node: ast.AST) -> bool:
    """Inside an `if` (or after an early return) whose test reads a rank alias."""
    aliases = _rank_aliases(ctx)
    if not aliases:
        return False

    def reads_alias(test: ast.AST) -> bool:
        return any(dotted(n) in aliases for n in ast.walk(test) if isinstance(n, (ast.Name, ast.Attribute)))

    child = node
    for anc in ctx.facts.ancestors(node):
        if isinstance(anc, (ast.If, ast.IfExp)) and child is not anc.test and reads_alias(anc.test):
            return True
        if isinstance(anc, FUNC_TYPES):
            return any(isinstance(s, ast.If) and reads_alias(s.test) and s.body
                       and isinstance(s.body[-1], (ast.Return, ast.Continue, ast.Raise)) and s.lineno < node.lineno
                       for s in anc.body)
        child = anc
    return False


def _rank_guarded(ctx: Context, node: ast.AST, depth: int = 0) -> bool:
    """Guarded here, or every call of the enclosing function is guarded (and there is one)."""
    facts = ctx.facts
    if facts.under_rank_guard(node) or _alias_guard(ctx, node):
        return True
    func = facts.function_of(node)
    if func is None or depth > 4:
        return False
    calls = ctx.facts.call_sites(func)
    return bool(calls) and all(_rank_guarded(ctx, c, depth + 1) for c in calls)


@rule("TD703", ast.Call)
def write_without_rank_guard(node: ast.Call, ctx: Context) -> None:
    """Checkpoint saving or file writing in a DDP program with no rank-0 guard.

    What it does: in a DDP program, finds `torch.save`, `open(..., "w")` and similar
    writes that are not behind a rank test (`if rank == 0:`, `is_main_process()`,
    an early `if rank != 0: return`) here or at every call of the enclosing function.
    Why is this bad? Every rank writes the same file at once: wasted I/O and
    truncated or corrupt checkpoints. Prints are not reported.
    Use instead: `if dist.get_rank() == 0: torch.save(...)`.
    """
    what = _write_site(ctx, node)
    if what is None or not ctx.facts.is_ddp_program or _mentions_rank(ctx, node) or _rank_guarded(ctx, node):
        return
    ctx.report(
        "TD703",
        node,
        f"{what} runs on every rank of this DDP program: all processes write the same file",
        fix="guard it with `if dist.get_rank() == 0:` (or your is_main_process())",
    )
