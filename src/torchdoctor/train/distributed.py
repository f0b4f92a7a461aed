"""Scale-out under torchrun: process group, device per LOCAL_RANK, DDP, sharded loaders, rank-0 duty."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from torchdoctor.env.device import pick_device
from torchdoctor.errors import InputError, UsageError

STRATEGIES = ("auto", "ddp", "fsdp")

__all__ = ["World", "world_from_env", "setup", "prepare_model", "wrap_model", "shard_loader", "loader_options", "all_sum",
           "gather_objects", "teardown", "STRATEGIES"]


@dataclass(frozen=True)
class World:
    """This process's place among the ranks; a single process is a world of one."""

    size: int = 1
    rank: int = 0
    local_rank: int = 0
    owns_group: bool = False

    @property
    def distributed(self) -> bool:
        return self.size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def world_from_env(env: Mapping[str, str] | None = None) -> World:
    """The world torchrun describes in WORLD_SIZE / RANK / LOCAL_RANK (a world of one without them)."""
    env = os.environ if env is None else env
    try:
        size = int(env.get("WORLD_SIZE", "1"))
        rank = int(env.get("RANK", "0"))
        local_rank = int(env.get("LOCAL_RANK", str(rank)))
    except ValueError as exc:
        raise UsageError(f"torchrun's WORLD_SIZE/RANK/LOCAL_RANK are not integers: {exc}") from None
    if size < 1 or not 0 <= rank < size:
        raise UsageError(f"inconsistent torchrun environment: RANK={rank}, WORLD_SIZE={size}")
    return World(size=size, rank=rank, local_rank=local_rank)


def setup(preferred: Any = "auto") -> tuple[World, torch.device]:
    """Pick the device and, under torchrun, join the process group (nccl on CUDA, gloo otherwise)."""
    world = world_from_env()
    device = pick_device(preferred)
    if not world.distributed:
        return world, device
    import torch.distributed as dist

    if device.type == "cuda":  # pragma: no cover - needs CUDA
        if device.index is None:  # every rank on GPU 0 is TD705
            device = torch.device(device.type, world.local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    owns = False
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
        owns = True
    return World(world.size, world.rank, world.local_rank, owns), device


def prepare_model(model: nn.Module, raw: nn.Module, optimizer: Any, world: World, device: torch.device,
                  strategy: str, spread: bool = False) -> tuple[nn.Module, bool]:  # fmt: skip
    """The module fit() calls for ``strategy``, and whether its parameters are sharded (FSDP2).

    "auto" and "ddp": DistributedDataParallel under torchrun. "fsdp": ``raw``
    sharded in place with fully_shard (``optimizer`` re-pointed at the shards);
    one process has nothing to shard and trains the model as it is.
    """
    if strategy not in STRATEGIES:
        raise UsageError(f"fit(): strategy must be one of {', '.join(map(repr, STRATEGIES))}, got {strategy!r}")
    if strategy != "fsdp":
        return wrap_model(model, world, device, spread), False
    if spread:
        raise UsageError(
            "strategy='fsdp' shards a model that sits on one device per rank; this model's parameters "
            "already span several devices (model parallel): use strategy='ddp' or 'auto'"
        )
    if not world.distributed:
        return model, False
    from torchdoctor.train import fsdp

    fsdp.shard(raw, optimizer, world.size, device)
    return model, True


def wrap_model(model: nn.Module, world: World, device: torch.device, spread: bool = False) -> nn.Module:
    """The model wrapped in DistributedDataParallel when there are several ranks; else itself."""
    from torch.nn.parallel import DistributedDataParallel

    if not world.distributed or isinstance(model, DistributedDataParallel):
        return model  # wrapped by the user already: wrapping twice would all-reduce twice
    # A model spread over several GPUs takes no device_ids: DDP then leaves its placement alone.
    ids = [device.index] if device.type == "cuda" and not spread else None
    return DistributedDataParallel(model, device_ids=ids)


def shard_loader(loader: Any, world: World, shuffle: bool | None = None) -> Any:
    """``loader`` rebuilt around a DistributedSampler (same batch size, workers, pinning, collate)."""
    from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, IterableDataset, RandomSampler

    if not world.distributed or loader is None:
        return loader
    if not isinstance(loader, DataLoader):
        raise InputError(
            f"under torchrun, fit() shards a torch DataLoader across ranks; got {type(loader).__name__}. "
            "Pass a DataLoader (DeviceLoader.preload serves all data to every rank)"
        )
    if isinstance(loader.sampler, DistributedSampler):
        return loader
    if isinstance(loader.dataset, IterableDataset) or type(loader.batch_sampler) not in (BatchSampler, type(None)):
        raise InputError(
            "under torchrun, give fit() a DataLoader with a DistributedSampler: an iterable dataset "
            "or a custom batch_sampler cannot be sharded automatically"
        )
    if shuffle is None:
        shuffle = isinstance(loader.sampler, RandomSampler)
    sampler = DistributedSampler(loader.dataset, num_replicas=world.size, rank=world.rank, shuffle=shuffle)
    options = loader_options(loader)
    return DataLoader(loader.dataset, batch_size=loader.batch_size, sampler=sampler, drop_last=loader.drop_last, **options)


def loader_options(loader: Any) -> dict[str, Any]:
    """A DataLoader's settings other than what it draws (workers, pinning, collate, seeds), to rebuild it."""
    options: dict[str, Any] = {
        "num_workers": loader.num_workers, "collate_fn": loader.collate_fn, "pin_memory": loader.pin_memory,
        "timeout": loader.timeout, "worker_init_fn": loader.worker_init_fn, "generator": loader.generator,
        "multiprocessing_context": loader.multiprocessing_context,
        "persistent_workers": loader.persistent_workers,
    }  # fmt: skip
    if loader.num_workers > 0:
        options["prefetch_factor"] = loader.prefetch_factor
    return options


def all_sum(world: World, tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` summed over all ranks (itself in a world of one)."""
    if world.distributed:
        import torch.distributed as dist

        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def gather_objects(world: World, obj: Any) -> list[Any]:
    """``obj`` from every rank, in rank order."""
    if not world.distributed:
        return [obj]
    import torch.distributed as dist

    gathered: list[Any] = [None] * world.size
    dist.all_gather_object(gathered, obj)
    return gathered


def barrier(world: World) -> None:
    if world.distributed:
        import torch.distributed as dist

        dist.barrier()


def teardown(world: World) -> None:
    """Leave the process group fit() joined when the process exits, not when fit() returns.

    A group the user made is the user's. Leaving at the end of fit() hung a rank
    for good now and then: the DDP wrapper's Reducer, freed with the GIL held as
    fit() returned, was then the group's last holder, so ~ProcessGroupGloo joined
    its worker threads while one of them waited for the GIL to free a tensor of
    the last all_gather_object. Its peer had left, so nothing ever timed out.
    Joining again in a later fit() would also meet the previous group's addresses
    in the store (torch restarts its group names at 0 after a destroy). So the
    group stays joined, a later fit() reuses it, and it is left at exit.
    """
    if world.owns_group:
        import atexit

        atexit.unregister(_leave)  # once, however many fit() calls
        atexit.register(_leave)


def _leave() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        group = dist.group.WORLD  # its last holder is this handle, whose destructor lets go of the GIL
        dist.destroy_process_group()
        del group
