"""Sharded checkpoints (torch.distributed.checkpoint): every rank writes its part; one process can gather them.

A folder ``epoch-0003/`` holds the shards (``__0_0.distcp`` ...), DCP's
``.metadata`` and ``torchdoctor.pt`` (epoch, step, RNG states, history, scaler
and scheduler; small, loaded with weights_only). It is written as
``.epoch-0003.partial/`` and renamed into place by rank 0 once complete, so a
crash mid-save never leaves a folder that looks finished.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from torchdoctor.train import checkpoint, distributed
from torchdoctor.train.checkpoint import CheckpointError, LoadResult
from torchdoctor.train.keys import unwrap_model
from torchdoctor.train.listing import SHARDED_MARK

__all__ = ["save", "load", "META"]

META = "torchdoctor.pt"


def save(target: Path, *, model: nn.Module, optimizer: Any, scaler: Any, scheduler: Any, epoch: int, step: int,
         extra: dict[str, Any], world: distributed.World) -> Path:  # fmt: skip
    """Write a sharded checkpoint at ``target``; every rank must call it (it is a collective)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    partial = target.parent / f".{target.name}.partial"
    if world.is_main:
        shutil.rmtree(partial, ignore_errors=True)  # left by a save that was killed
        partial.mkdir(parents=True)
    distributed.barrier(world)
    model_state, optim_state = get_state_dict(model, optimizer)
    try:
        with _quiet_single_process():
            dcp.save({"model": model_state, "optimizer": optim_state}, checkpoint_id=str(partial), no_dist=not world.distributed)
    except OSError as exc:
        raise CheckpointError(f"saving the sharded checkpoint {str(target)!r} failed: {exc.strerror or exc}") from exc
    if world.is_main:
        meta: dict[str, Any] = {"format": checkpoint.FORMAT, "version": checkpoint.VERSION, "sharded": True,
                                "epoch": epoch, "step": step, "extra": extra}  # fmt: skip
        for name, obj in (("scaler", scaler), ("scheduler", scheduler)):
            if obj is not None:
                meta[name] = obj.state_dict()
        checkpoint.write_atomic(partial / META, lambda handle: torch.save(meta, handle))
        _rename_into_place(partial, target)
    distributed.barrier(world)  # nobody reads or prunes before the folder is in place
    return target


def _rename_into_place(partial: Path, target: Path) -> None:
    old = None
    if target.exists():
        old = target.parent / f".{target.name}.old-{secrets.token_hex(4)}"
        os.replace(target, old)
    os.replace(partial, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def load(source: Path, model: nn.Module | None, optimizer: Any = None, scaler: Any = None, scheduler: Any = None,
         *, strict: bool = True) -> LoadResult:  # fmt: skip
    """Load a sharded checkpoint into a sharded model (every rank calls it) or gather it into a plain one."""
    if not (source / SHARDED_MARK).is_file():
        raise CheckpointError(
            f"{str(source)!r} is a directory, not a checkpoint file, and not a complete sharded checkpoint "
            f"(no {SHARDED_MARK}: a save that was interrupted?)"
        )
    meta = _read_meta(source)
    result = LoadResult(path=source, epoch=meta.get("epoch"), step=meta.get("step"), extra=meta.get("extra") or {})
    if optimizer is not None and model is None:
        raise CheckpointError(f"{source}: a sharded optimizer state is loaded together with its model; pass the model too")
    if model is not None:
        _load_states(source, unwrap_model(model), optimizer, strict, result)
    for name, obj in (("scaler", scaler), ("scheduler", scheduler)):
        if obj is None:
            continue
        if meta.get(name) is None:
            checkpoint._note(result, f"{source}: holds no {name} state; the {name} starts fresh")
        else:
            obj.load_state_dict(meta[name])
    return result


def _read_meta(source: Path) -> dict[str, Any]:
    path = source / META
    if not path.exists():
        return {}  # a sharded checkpoint from elsewhere: weights only
    try:
        meta = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many types for a bad file
        raise CheckpointError(f"{str(path)!r} cannot be read: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    if not isinstance(meta, dict) or meta.get("format") != checkpoint.FORMAT:
        raise CheckpointError(f"{str(path)!r} is not torchdoctor's record of a sharded checkpoint")
    return meta


def _load_states(source: Path, model: nn.Module, optimizer: Any, strict: bool, result: LoadResult) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions, get_model_state_dict, get_state_dict, set_model_state_dict, set_state_dict,
    )  # fmt: skip

    stored = dcp.FileSystemReader(str(source)).read_metadata().state_dict_metadata
    prefix = "model." if any(key.startswith("model.") for key in stored) else ""
    if optimizer is not None:
        model_state, optim_state = get_state_dict(model, optimizer)
    else:
        model_state, optim_state = get_model_state_dict(model), None
    _check_keys(source, model, model_state, stored, prefix, strict, result)
    request: dict[str, Any] = {"model": model_state} if prefix else dict(model_state)
    if optim_state is not None:
        if not any(key.startswith("optimizer.") for key in stored):
            raise CheckpointError(f"{source}: holds no optimizer state")
        request["optimizer"] = optim_state
    # A plain model gathers on this process alone; a sharded one loads its shard on every rank.
    alone = not any(_is_dtensor(t) for t in model_state.values())
    planner = dcp.DefaultLoadPlanner(allow_partial_load=not strict)
    with _quiet_single_process():
        dcp.load(request, checkpoint_id=str(source), planner=planner, no_dist=alone)
    loaded = request["model"] if prefix else {k: request[k] for k in model_state}
    options = StateDictOptions(strict=strict)
    if optimizer is None:
        set_model_state_dict(model, loaded, options=options)
    else:
        set_state_dict(model, optimizer, model_state_dict=loaded, optim_state_dict=request["optimizer"], options=options)


def _check_keys(source: Path, model: nn.Module, own: dict[str, Any], stored: dict[str, Any], prefix: str,
                strict: bool, result: LoadResult) -> None:  # fmt: skip
    file_keys = {key[len(prefix):]: meta for key, meta in stored.items() if key.startswith(prefix) and not key.startswith("optimizer.")}
    shapes = [
        f"{key}: file {tuple(meta.size)} vs model {tuple(own[key].shape)}"
        for key, meta in file_keys.items()
        if key in own and hasattr(meta, "size") and tuple(meta.size) != tuple(own[key].shape)
    ]
    missing = [key for key in own if key not in file_keys]
    unexpected = [key for key in file_keys if key not in own]
    if shapes or (strict and (missing or unexpected)):
        raise CheckpointError(checkpoint._mismatch_message(source, model, missing, unexpected, shapes))
    if missing or unexpected:
        checkpoint._note(result, f"{source}: loaded non-strictly; missing {checkpoint._few(missing)}, unexpected {checkpoint._few(unexpected)}")
        for key in missing:
            own.pop(key)


@contextlib.contextmanager
def _quiet_single_process() -> Iterator[None]:
    # DCP warns whenever no process group exists; on one process that is the intent, not a mistake.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*assuming the intent is to (load|save) in a single process")
        yield


def _is_dtensor(value: Any) -> bool:
    return type(value).__name__ == "DTensor"
