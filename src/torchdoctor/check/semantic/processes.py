"""Whether a program runs as several processes: DDP, a process group, torchrun's variables, RPC; and the
group of one process a tutorial makes to show the API (``program`` re-exports these)."""

from __future__ import annotations

import ast

from torchdoctor.check.astutil import argument, dotted, int_literal, keyword, string_value
from torchdoctor.check.semantic.model import SemanticModel

__all__ = ["names_process_group", "is_ddp_program", "unwraps_ddp_only", "is_rpc_program", "single_process_world", "shuffling_samplers"]


_PROCESS_GROUP_WORDS = ("DistributedDataParallel", "init_process_group", "DistributedSampler", "DDP", "RANK", "WORLD_SIZE")


def names_process_group(source: str) -> bool:
    """A cheap text test that a file may be a DDP program (``is_ddp_program`` looks closer): substring tests
    (a regex alternation of the words scanned the text 6x slower)."""
    return any(word in source for word in _PROCESS_GROUP_WORDS)


def is_ddp_program(sem: SemanticModel) -> bool:
    """DDP, ``init_process_group``, ``DistributedSampler`` or torchrun's environment variables."""

    def compute() -> bool:
        words = ("DistributedDataParallel", "init_process_group", "DistributedSampler", "DDP")
        source = sem.text.source
        if not names_process_group(source):
            return False
        if is_rpc_program(sem) and "DistributedDataParallel" not in source and "DDP(" not in source:
            return False  # an RPC program (parameter server, pipeline) starts processes, but trains no DDP
        for node in sem.of_type(ast.Attribute):
            if node.attr in words:  # type: ignore[attr-defined]
                return True
        for node in sem.of_type(ast.Name):
            if (sem.qualname(node) or "").rsplit(".", 1)[-1] in words:
                return True
        return any(string_value(n) in ("LOCAL_RANK", "WORLD_SIZE", "RANK") for n in sem.of_type(ast.Constant))

    return sem.cached("is_ddp", compute)  # type: ignore[no-any-return]


def unwraps_ddp_only(sem: SemanticModel) -> bool:
    """The file names DDP only in type tests (``isinstance(model, torch.nn.parallel.DistributedDataParallel)`` to take
    ``model.module``'s state dict) and nothing else that starts processes: a helper for whatever its callers run, not a
    DDP program of its own (``is_ddp_program`` counts every mention)."""

    def compute() -> bool:
        words = ("DistributedDataParallel", "init_process_group", "DistributedSampler", "DDP")
        if any(string_value(n) in ("LOCAL_RANK", "WORLD_SIZE", "RANK") for n in sem.of_type(ast.Constant)):
            return False
        found = False
        for node in (*sem.of_type(ast.Attribute), *sem.of_type(ast.Name)):
            name = node.attr if isinstance(node, ast.Attribute) else (sem.qualname(node) or "").rsplit(".", 1)[-1]
            if name not in words:
                continue
            call = sem.parent(node)
            if isinstance(call, ast.Tuple):
                call = sem.parent(call)  # (``isinstance(model, (DataParallel, DDP))``)
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in ("isinstance", "issubclass")
                    and len(call.args) == 2 and sem.contains(call.args[1], node)):
                return False
            found = True
        return found

    return sem.cached("unwraps_ddp_only", compute)  # type: ignore[no-any-return]


def is_rpc_program(sem: SemanticModel) -> bool:
    """The program trains through ``torch.distributed.rpc`` / ``dist_autograd``: tensors cross processes
    by serialisation and each step's autograd context is fresh."""

    def compute() -> bool:
        return any(q.startswith(("torch.distributed.rpc", "torch.distributed.autograd")) for q in sem.imports.values())

    return sem.cached("is_rpc", compute)  # type: ignore[no-any-return]


def single_process_world(sem: SemanticModel) -> bool:
    """The file makes its process group a world of one (``os.environ["WORLD_SIZE"] = "1"``, or every
    ``init_process_group(..., world_size=1)``) and spawns nothing: one process, whose GPU is GPU 0 and whose
    writes race with nothing."""
    if sem.calls_named("spawn", "start_processes"):
        return False
    sizes = [keyword(c, "world_size") for c in sem.calls_named("init_process_group")]
    if sizes and all(k is not None and int_literal(k.value) == 1 for k in sizes):
        return True
    for n in sem.of_type(ast.Assign):
        target = n.targets[0] if len(n.targets) == 1 else None  # type: ignore[attr-defined]
        if isinstance(target, ast.Subscript) and (dotted(target.value) or "").endswith("environ") \
                and string_value(target.slice) == "WORLD_SIZE" and string_value(n.value) == "1":  # type: ignore[attr-defined]
            return True
    return False


def shuffling_samplers(sem: SemanticModel, nodes: list[ast.AST] | None = None) -> list[ast.Call]:
    """DistributedSampler constructions that shuffle (the default), and mmengine's DefaultSampler (it shuffles by seed
    + epoch, distributed, and learns the epoch from ``set_epoch`` too): of the file, or among ``nodes``."""
    if "Sampler" not in sem.text.source:
        return []
    calls = sem.calls_named("DistributedSampler", "DefaultSampler")
    if nodes is not None:
        inside = {id(n) for n in nodes}
        calls = [c for c in calls if id(c) in inside]
    out = []
    for n in calls:
        name = sem.call_name(n) or ""
        if name.startswith("torch.utils.data") and name.endswith(".DistributedSampler"):
            shuffle = argument(n, "shuffle", 3)
        elif name.startswith("mmengine.") and name.endswith(".DefaultSampler"):
            shuffle = argument(n, "shuffle", 1)
        else:
            continue
        if not (isinstance(shuffle, ast.Constant) and shuffle.value is False):
            out.append(n)
    return out
