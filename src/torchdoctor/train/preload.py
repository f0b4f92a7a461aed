"""A small dataset held wholly on the device, served in (shuffled) batches by index there."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, Union

import torch

from torchdoctor.errors import InputError
from torchdoctor.train.move import map_tensors, to_device

__all__ = ["PreloadedLoader"]


class PreloadedLoader:
    """Iterates batches of a dataset that was copied to ``device`` once.

    Each epoch draws one permutation (from ``generator``, else the global torch
    RNG, so a resumed run sees the same order) and gathers each batch with one
    index per tensor on the device: no host work and no copies per batch.
    """

    def __init__(
        self,
        dataset: Any,
        device: Union[str, torch.device],
        batch_size: int,
        *,
        shuffle: bool = True,
        drop_last: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise InputError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.device = torch.device(device)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.generator = generator
        self.data = to_device(_collate_all(dataset), self.device)
        self.num_samples = _length(dataset)

    def __len__(self) -> int:
        if self.drop_last:
            return self.num_samples // self.batch_size
        return math.ceil(self.num_samples / self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        n, size = self.num_samples, self.batch_size
        stop = n - n % size if self.drop_last else n
        if not self.shuffle:
            for start in range(0, stop, size):
                yield map_tensors(self.data, lambda t, s=start: t[s : s + size])
            return
        # Drawn on the CPU: the same generator state gives the same order on every device.
        order = torch.randperm(n, generator=self.generator).to(self.device)
        for start in range(0, stop, size):
            index = order[start : start + size]
            yield map_tensors(self.data, lambda t: t.index_select(0, index))


def _length(dataset: Any) -> int:
    try:
        n = len(dataset)
    except TypeError:
        raise InputError(f"DeviceLoader.preload needs a dataset with a length; {type(dataset).__name__} has none") from None
    if n == 0:
        raise InputError("DeviceLoader.preload was given an empty dataset (0 samples)")
    return n


def _collate_all(dataset: Any) -> Any:
    tensors = getattr(dataset, "tensors", None)
    if isinstance(tensors, tuple) and all(isinstance(t, torch.Tensor) for t in tensors):
        return tensors  # a TensorDataset: already stacked
    from torch.utils.data import default_collate

    n = _length(dataset)
    try:
        return default_collate([dataset[i] for i in range(n)])
    except (TypeError, RuntimeError) as exc:
        raise InputError(f"DeviceLoader.preload cannot stack the samples of {type(dataset).__name__}: {exc}") from None
