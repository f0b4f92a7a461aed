"""Checkpoints that survive crashes: atomic save, safe load (weights_only, map_location, prefixes)."""

from __future__ import annotations

import os
import re
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Union

import torch
from torch import nn

from torchdoctor import _files
from torchdoctor.errors import InputError
from torchdoctor.train.keys import KeyReport, reconcile_keys, unwrap_model

__all__ = ["save", "load", "latest", "LoadResult", "CheckpointError", "CheckpointWarning", "unwrap_model"]

FORMAT = "torchdoctor-checkpoint"
VERSION = 1
PathLike = Union[str, "os.PathLike[str]"]
_NUMBERED = re.compile(r"^(?P<stem>.*?)(?P<num>\d+)(?P<suffix>\.[^.]*)?$")


class CheckpointError(InputError):
    """A checkpoint cannot be written, read, or does not fit the model."""


class CheckpointWarning(UserWarning):
    """A checkpoint was loaded with an adjustment the user should know about."""


@dataclass
class LoadResult:
    """What :func:`load` found in the file and what it had to adjust."""

    path: Path
    epoch: int | None = None
    step: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def save(
    path: PathLike,
    *,
    model: nn.Module,
    optimizer: Any = None,
    scaler: Any = None,
    scheduler: Any = None,
    epoch: int | None = None,
    step: int | None = None,
    extra: Mapping[str, Any] | None = None,
    keep_last: int | None = None,
) -> Path:
    """Write a checkpoint atomically; on any failure the previous file at ``path`` is untouched.

    The model is unwrapped first (DataParallel, DDP, ``torch.compile``), so keys
    never carry ``module.`` or ``_orig_mod.``. ``keep_last=K`` then deletes older
    numbered siblings (``epoch-0001.pt`` ...) so that K remain.
    """
    target = Path(path)
    payload: dict[str, Any] = {"format": FORMAT, "version": VERSION, "model": unwrap_model(model).state_dict()}
    for name, obj in (("optimizer", optimizer), ("scaler", scaler), ("scheduler", scheduler)):
        if obj is not None:
            payload[name] = obj.state_dict()
    payload.update(epoch=epoch, step=step, extra=dict(extra or {}))
    write_atomic(target, lambda handle: torch.save(payload, handle))
    if keep_last is not None:
        prune(target, keep_last)
    return target


def write_atomic(target: Path, write: Callable[[IO[bytes]], Any]) -> None:
    """Write durably beside ``target`` and rename over it (torchdoctor._files.write_file).

    First, the temporary files that killed saves left in the folder are removed
    (only this writer's, only those whose process is gone): a run that is
    killed now and then must not fill the disk with half checkpoints.
    """
    directory = target.parent if str(target.parent) else Path(".")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CheckpointError(f"cannot write a checkpoint in {str(directory)!r}: {exc.strerror or exc}") from None
    remove_stale_temps(directory)
    try:
        _files.write_file(target, write)
    except OSError as exc:
        raise CheckpointError(f"saving {str(target)!r} failed ({exc.strerror or exc}); the previous file is intact") from exc


def remove_stale_temps(directory: Path) -> list[Path]:
    """Delete the temporary files of saves in ``directory`` whose writing process is gone; return them."""
    removed = []
    for path in _files.stale_temp_files(directory):
        _files.remove_quietly(path)
        removed.append(path)
    return removed



def numbered_siblings(target: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints next to ``target`` named like it with another number, oldest first.

    Temporary files of saves and files that are not whole zip archives (torch.save's
    format; a copy cut short) are not checkpoints: they neither count towards
    ``keep_last`` nor get deleted by it.
    """
    match = _NUMBERED.match(target.name)
    if match is None:
        return []
    stem, suffix = match["stem"], match["suffix"] or ""
    found = []
    for candidate in target.parent.iterdir():
        other = _NUMBERED.match(candidate.name)
        if (other and other["stem"] == stem and (other["suffix"] or "") == suffix and candidate.is_file()
                and not _files.is_temp_name(candidate.name) and _complete(candidate)):
            found.append((int(other["num"]), candidate))
    return sorted(found)


def _complete(path: Path) -> bool:
    import zipfile

    try:
        return zipfile.is_zipfile(path)  # its end record is written last
    except OSError:
        return False


def prune(target: Path, keep_last: int) -> list[Path]:
    """Delete all but the ``keep_last`` highest-numbered siblings of ``target``; return the deleted."""
    if keep_last < 1:
        raise CheckpointError(f"keep_last must be at least 1, got {keep_last}")
    siblings = numbered_siblings(target)
    doomed = [path for _, path in siblings[:-keep_last]]
    for path in doomed:
        _files.remove_quietly(path)
    return doomed


def latest(directory: PathLike, prefix: str = "epoch-", suffix: str = ".pt") -> Path | None:
    """The newest complete checkpoint in ``directory``, or None.

    Either kind counts: a file ``<prefix>NNNN<suffix>`` or a sharded folder
    ``<prefix>NNNN/`` (torch.distributed.checkpoint, complete once its
    ``.metadata`` exists), at an epoch's end or at a step inside it
    (``<prefix>NNNN-step-SSSSSSSS``). Temporary files are ignored.
    """
    from torchdoctor.train import listing

    return listing.newest(directory, prefix, suffix)


def load(
    path: PathLike,
    model: nn.Module | None = None,
    optimizer: Any = None,
    scaler: Any = None,
    scheduler: Any = None,
    *,
    map_location: Any = "cpu",
    strict: bool = True,
) -> LoadResult:
    """Load a checkpoint into the given objects, safely (``weights_only=True``, always).

    A ``module.``/``_orig_mod.`` prefix that the file and the model disagree on is
    stripped or added, with a :class:`CheckpointWarning` and a note in the result.
    Missing, truncated and foreign files, and weights of another model, raise
    :class:`CheckpointError` naming the problem.
    """
    source = Path(path)
    if source.is_dir():  # a sharded checkpoint: loaded shard by shard, or gathered into a plain model
        from torchdoctor.train import sharded

        return sharded.load(source, model, optimizer, scaler, scheduler, strict=strict)
    payload = read(source, map_location)
    result = LoadResult(path=source, epoch=payload.get("epoch"), step=payload.get("step"), extra=payload.get("extra") or {})
    if model is not None:
        _load_model(source, unwrap_model(model), payload["model"], strict, result)
    for name, obj in (("optimizer", optimizer), ("scaler", scaler), ("scheduler", scheduler)):
        if obj is None:
            continue
        if payload.get(name) is None:
            _note(result, f"{source}: holds no {name} state; the {name} starts fresh")
            continue
        try:
            obj.load_state_dict(payload[name])
        except (ValueError, KeyError, RuntimeError) as exc:
            raise CheckpointError(f"{source}: the saved {name} state does not fit this {name}: {exc}") from None
    return result


def read(source: Path, map_location: Any = "cpu") -> dict[str, Any]:
    """The checkpoint's contents as a dict; a bare state_dict is taken as the model's weights."""
    if not source.exists():
        raise CheckpointError(f"no checkpoint at {str(source)!r}")
    if source.is_dir():
        raise CheckpointError(f"{str(source)!r} is a directory, not a checkpoint file")  # sharded ones: load()
    try:
        payload = torch.load(source, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises RuntimeError, EOFError, UnpicklingError, ... for bad files
        raise CheckpointError(_describe_unreadable(source, exc)) from None
    if isinstance(payload, Mapping) and payload.get("format") == FORMAT:
        return dict(payload)
    from torchdoctor.train.layouts import MODEL_KEYS, normalize

    found = normalize(payload)  # a state_dict, {"model": sd}, Lightning's, the PyTorch tutorial's
    if found is not None:
        return found
    keys = f" with keys {_few(sorted(map(str, payload)))}" if isinstance(payload, Mapping) else ""
    raise CheckpointError(
        f"{str(source)!r} is not a checkpoint: it holds a {type(payload).__name__}{keys}, "
        f"not a torchdoctor checkpoint, a state_dict or one under {', '.join(map(repr, MODEL_KEYS))}"
    )


def _describe_unreadable(source: Path, exc: Exception) -> str:
    size = source.stat().st_size
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if size == 0:
        return f"{str(source)!r} is empty (0 bytes): a write was interrupted; use an earlier checkpoint"
    if "weights only" in str(exc).lower() or "weights_only" in str(exc):
        return (
            f"{str(source)!r} holds pickled Python objects that a safe load refuses (weights_only=True): {text}. "
            "Save state_dicts, not whole objects"
        )
    return f"{str(source)!r} is truncated, corrupt or not a PyTorch file ({size} bytes): {text}"


def _load_model(source: Path, model: nn.Module, weights: Mapping[str, Any], strict: bool, result: LoadResult) -> None:
    own = model.state_dict()
    report: KeyReport = reconcile_keys(list(weights), list(own))
    if report.note:
        _note(result, f"{source}: {report.note}")
    renamed = {report.rename(key): value for key, value in weights.items()}
    shapes = [
        f"{key}: file {tuple(value.shape)} vs model {tuple(own[key].shape)}"
        for key, value in renamed.items()
        if key in own and isinstance(value, torch.Tensor) and value.shape != own[key].shape
    ]
    missing = [key for key in own if key not in renamed]
    unexpected = [key for key in renamed if key not in own]
    if shapes or (strict and (missing or unexpected)):
        raise CheckpointError(_mismatch_message(source, model, missing, unexpected, shapes))
    if missing or unexpected:
        _note(result, f"{source}: loaded non-strictly; missing {_few(missing)}, unexpected {_few(unexpected)}")
    model.load_state_dict(renamed, strict=strict)


def _mismatch_message(source: Path, model: nn.Module, missing: list[str], unexpected: list[str], shapes: list[str]) -> str:
    parts = [f"{str(source)!r} does not hold weights for this {type(model).__name__}"]
    if missing:
        parts.append(f"missing from the file: {_few(missing)}")
    if unexpected:
        parts.append(f"in the file but not in the model: {_few(unexpected)}")
    if shapes:
        parts.append(f"shape differs: {_few(shapes)}")
    return "; ".join(parts) + ". Was it saved from another model?"


def _few(items: list[str], limit: int = 5) -> str:
    if not items:
        return "none"
    shown = ", ".join(items[:limit])
    return f"{len(items)} ({shown}{', ...' if len(items) > limit else ''})"


def _note(result: LoadResult, message: str) -> None:
    result.notes.append(message)
    warnings.warn(message, CheckpointWarning, stacklevel=_outside_level())


def _outside_level() -> int:
    """The stacklevel of the first frame outside torchdoctor: the user's load() or fit() call.

    A fixed level pointed into this file for notes made one call deeper (_load_model).
    """
    package = os.path.dirname(os.path.dirname(__file__))
    frame, level = sys._getframe(1), 1  # _note itself: stacklevel 1 is the line that warns
    while frame is not None and frame.f_code.co_filename.startswith(package + os.sep):
        frame, level = frame.f_back, level + 1
    return level
