"""Sharding with FSDP2 (fully_shard): per block when the model has blocks, else whole; the optimizer follows."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from torchdoctor.errors import UsageError

__all__ = ["find_blocks", "shard", "no_gradient_sync"]


def find_blocks(model: nn.Module) -> list[nn.Module]:
    """The elements of the model's outermost ``nn.ModuleList``s: transformer layers, stages.

    Each becomes its own FSDP unit, so only one block's full parameters exist
    at a time; a model without a ModuleList is sharded as one unit.
    """
    blocks: list[nn.Module] = []

    def visit(module: nn.Module) -> None:
        for child in module.children():
            if isinstance(child, nn.ModuleList):
                blocks.extend(m for m in child if next(m.parameters(), None) is not None)
            else:
                visit(child)

    visit(model)
    return blocks


def shard(model: nn.Module, optimizer: Any, world_size: int, device: torch.device) -> int:
    """Apply ``fully_shard`` to each block and then the root, in place; point ``optimizer`` at the new parameters.

    Returns the number of blocks sharded on their own. fully_shard replaces each
    parameter by a DTensor parameter of the same name, so an optimizer built
    before (as fit() is given it) would update the old tensors: its groups are
    re-pointed by name, as long as it has taken no step yet.
    """
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # pragma: no cover - torch < 2.6
        raise UsageError(f"strategy='fsdp' needs FSDP2 (torch >= 2.6); this is torch {torch.__version__}") from None
    if optimizer.state:
        raise UsageError(
            "strategy='fsdp': the optimizer has already taken steps; give fit() a fresh optimizer "
            "(its state cannot follow the parameters into their shards)"
        )
    names = {id(param): name for name, param in model.named_parameters()}
    mesh = init_device_mesh(device.type, (world_size,))
    blocks = find_blocks(model)
    for block in blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    sharded = dict(model.named_parameters())
    for group in optimizer.param_groups:
        group["params"] = [sharded[names[id(param)]] for param in group["params"]]
    return len(blocks)


@contextlib.contextmanager
def no_gradient_sync(model: Any) -> Iterator[None]:
    """Accumulate gradients locally (FSDP2's counterpart of DDP's ``no_sync``)."""
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)
