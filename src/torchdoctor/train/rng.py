"""Random-number states (torch, CUDA, numpy, Python) as checkpoint-safe values, and back."""

from __future__ import annotations

import random
from typing import Any

import torch

__all__ = ["capture_rng", "restore_rng", "loader_generators"]


def capture_rng(loaders: tuple[Any, ...] = ()) -> dict[str, Any]:
    """Every RNG state a training run draws from, as tensors/lists/ints (loadable with weights_only)."""
    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # pragma: no cover - needs CUDA
        state["cuda"] = torch.cuda.get_rng_state_all()
    version, internal, gauss = random.getstate()
    state["python"] = [version, list(internal), gauss]
    numpy_state = _numpy_state()
    if numpy_state is not None:
        state["numpy"] = numpy_state
    state["generators"] = [gen.get_state() for gen in loader_generators(loaders)]
    return state


def restore_rng(state: dict[str, Any], loaders: tuple[Any, ...] = ()) -> None:
    """Put back what :func:`capture_rng` took."""
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():  # pragma: no cover - needs CUDA
        saved = [s.cpu() for s in state["cuda"]]
        if len(saved) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(saved)
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "numpy" in state:
        _set_numpy_state(state["numpy"])
    generators = loader_generators(loaders)
    for gen, saved_state in zip(generators, state.get("generators", [])):
        gen.set_state(saved_state.cpu())


def loader_generators(loaders: tuple[Any, ...]) -> list[torch.Generator]:
    """Generators a DataLoader or its sampler own (shuffling draws from them, not the global RNG)."""
    found: list[torch.Generator] = []
    for loader in loaders:
        for owner in (loader, getattr(loader, "sampler", None), getattr(loader, "batch_sampler", None)):
            gen = getattr(owner, "generator", None)
            if isinstance(gen, torch.Generator) and all(gen is not other for other in found):
                found.append(gen)
    return found


def _numpy_state() -> dict[str, Any] | None:
    try:
        import numpy as np
    except ImportError:
        return None
    name, keys, pos, has_gauss, cached = np.random.get_state()
    # A tensor of int64, not an ndarray: weights_only loading refuses numpy arrays.
    return {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
            "has_gauss": int(has_gauss), "cached": float(cached)}  # fmt: skip


def _set_numpy_state(state: dict[str, Any]) -> None:
    try:
        import numpy as np
    except ImportError:
        return
    keys = state["keys"].cpu().numpy().astype(np.uint32)
    np.random.set_state((state["name"], keys, state["pos"], state["has_gauss"], state["cached"]))
