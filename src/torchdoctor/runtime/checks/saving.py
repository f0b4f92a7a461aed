"""State dicts saved from DataParallel/DDP/compiled wrappers: TD205."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torchdoctor.findings import Finding

PREFIXES = ("module.", "_orig_mod.")


def wrapper_prefix(state: Any) -> str | None:
    """The wrapper prefix every key of a state dict carries, if any."""
    if not isinstance(state, Mapping) or not state:
        return None
    keys = list(state.keys())
    if not all(isinstance(k, str) for k in keys):
        return None
    for prefix in PREFIXES:
        if all(k.startswith(prefix) for k in keys):
            return prefix
    return None


def saved_prefix(obj: Any) -> str | None:
    """A wrapped state dict saved directly or one level down (``{"model": ddp.state_dict()}``)."""
    prefix = wrapper_prefix(obj)
    if prefix is None and isinstance(obj, Mapping):
        prefix = next((p for v in obj.values() if (p := wrapper_prefix(v))), None)
    return prefix


def on_save(obj: Any, where: Any) -> Finding | None:
    prefix = saved_prefix(obj)
    if prefix is None:
        return None
    inner = "module" if prefix == "module." else "_orig_mod"
    return Finding("TD205", f"state_dict saved from a wrapper: every key starts with `{prefix}`, so a plain model cannot load it",
                   where(), f"save the unwrapped model: model.{inner}.state_dict()")


def on_load_error(state: Any, module: Any, where: Any) -> Finding | None:
    prefix = wrapper_prefix(state)
    if prefix is None or wrapper_prefix(module.state_dict()) == prefix:
        return None
    return Finding("TD205", f"the checkpoint's keys start with `{prefix}` (saved from a wrapper) but `{type(module).__name__}` has none",
                   where(), f"strip the prefix: {{k.removeprefix({prefix!r}): v for k, v in state.items()}}, and save the unwrapped model")
