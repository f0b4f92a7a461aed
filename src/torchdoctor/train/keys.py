"""Wrapper prefixes in state_dict keys: unwrap models, reconcile keys of a file with a model's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import nn

__all__ = ["unwrap_model", "reconcile_keys", "KeyReport", "WRAPPER_PREFIXES"]

# DataParallel/DDP add "module.", torch.compile adds "_orig_mod." (TD205).
WRAPPER_PREFIXES = ("module.", "_orig_mod.")


def unwrap_model(model: nn.Module) -> nn.Module:
    """The module under any DataParallel, DistributedDataParallel or torch.compile wrappers."""
    from torch.nn.parallel import DataParallel, DistributedDataParallel

    while True:
        if isinstance(model, (DataParallel, DistributedDataParallel)):
            model = model.module
            continue
        inner: Any = getattr(model, "_orig_mod", None)
        if isinstance(inner, nn.Module):
            model = inner
            continue
        return model


def _canonical(key: str) -> str:
    changed = True
    while changed:
        changed = False
        for prefix in WRAPPER_PREFIXES:
            if key.startswith(prefix):
                key, changed = key[len(prefix) :], True
    return key


@dataclass
class KeyReport:
    """How the keys of a file map onto a model's, and a sentence saying so (empty when nothing changed)."""

    renames: dict[str, str] = field(default_factory=dict)
    note: str = ""

    def rename(self, key: str) -> str:
        return self.renames.get(key, key)


def reconcile_keys(file_keys: list[str], model_keys: list[str]) -> KeyReport:
    """Rename file keys that differ from the model's only by wrapper prefixes (stripped or added)."""
    own = set(model_keys)
    by_canonical: dict[str, str] = {}
    for key in model_keys:
        # Two model keys with one canonical form: renaming would be a guess, so do none.
        if by_canonical.setdefault(_canonical(key), key) != key:
            return KeyReport()
    renames = {}
    for key in file_keys:
        if key in own:
            continue
        match = by_canonical.get(_canonical(key))
        if match is not None and match not in file_keys:
            renames[key] = match
    if not renames:
        return _strip_owner(file_keys, by_canonical) if not own.intersection(file_keys) else KeyReport()
    first_file, first_model = next(iter(renames.items()))
    return KeyReport(renames, _describe(first_file, first_model, len(renames)))


def _strip_owner(file_keys: list[str], by_canonical: dict[str, str]) -> KeyReport:
    """Keys saved from a module that held the model as an attribute (a LightningModule's ``self.model``).

    The first name is stripped when, for one such name, the stripped keys cover
    every key of the model; the file's other keys (a loss's buffers) stay as they are.
    """
    heads: dict[str, dict[str, str]] = {}
    for key in file_keys:
        head, dot, rest = _canonical(key).partition(".")
        match = by_canonical.get(_canonical(rest)) if dot else None
        if match is not None:
            heads.setdefault(head, {})[key] = match
    for head, renames in heads.items():
        if set(renames.values()) == set(by_canonical.values()) and len(renames) == len(by_canonical):
            note = (f"stripped the prefix {head + '.'!r} on {len(renames)} key(s) to match the model "
                    "(the file holds the state of a module that owned this one, e.g. a LightningModule)")  # fmt: skip
            return KeyReport(renames, note)
    return KeyReport()


def _describe(file_key: str, model_key: str, count: int) -> str:
    file_prefix = file_key[: len(file_key) - len(_canonical(file_key))]
    model_prefix = model_key[: len(model_key) - len(_canonical(model_key))]
    if file_prefix and not model_prefix:
        change = f"stripped the prefix {file_prefix!r}"
    elif model_prefix and not file_prefix:
        change = f"added the prefix {model_prefix!r}"
    else:
        change = f"replaced the prefix {file_prefix!r} with {model_prefix!r}"
    why = " (the file was saved from a DataParallel/DDP/compiled wrapper, TD205)" if file_prefix else ""
    return f"{change} on {count} key(s) to match the model{why}"
