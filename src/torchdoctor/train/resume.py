"""Continuing an epoch in its middle: the same shuffled order, from the batch after the last one trained.

The random states are put back in two stages. Before the loader's iterator is
made, those of the epoch's start: the shuffle (RandomSampler, DataLoader's
worker seed) draws exactly what it drew the first time. Then, once the trained
batches are skipped and before the next one is loaded, those of the moment of
the checkpoint: augmentation, dropout and the rest continue where they were.
A DataLoader skips by index (nothing is loaded for the skipped batches); any
other iterable is advanced by taking and dropping them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Callable

from torchdoctor.train import distributed
from torchdoctor.train.move import DeviceLoader

__all__ = ["iterate_from", "SkipBatches"]


def iterate_from(loader: Any, skip: int, restore: Callable[[], None]) -> Iterator[Any]:
    """An iterator over ``loader`` without its first ``skip`` batches.

    ``restore`` runs once, after the skipped batches' random draws and before
    the first remaining batch is loaded.
    """
    if skip <= 0:
        restore()
        return iter(loader)
    inner = loader.loader if isinstance(loader, DeviceLoader) else loader
    if _skips_by_index(inner):
        rebuilt = _rebuild(inner, SkipBatches(inner.batch_sampler, skip, restore))
        return iter(DeviceLoader(rebuilt, loader.device) if inner is not loader else rebuilt)
    iterator = iter(loader)
    for _ in range(skip):
        if next(iterator, _END) is _END:
            break
    restore()
    return iterator


_END = object()


class SkipBatches:
    """A batch sampler without the first ``skip`` batches of ``batches`` (their indices are drawn, then dropped)."""

    def __init__(self, batches: Any, skip: int, on_skipped: Callable[[], None]) -> None:
        self.batches, self.skip, self.on_skipped = batches, skip, on_skipped

    def __len__(self) -> int:
        return max(len(self.batches) - self.skip, 0)

    def __iter__(self) -> Iterator[Any]:
        # A generator, like BatchSampler.__iter__: nothing is drawn before the DataLoader asks,
        # so its worker seed is drawn first, as in the uninterrupted run.
        indices = iter(self.batches)
        for _ in range(self.skip):
            if next(indices, _END) is _END:
                break
        self.on_skipped()
        yield from indices


def _skips_by_index(loader: Any) -> bool:
    from torch.utils.data import DataLoader, IterableDataset

    return (
        isinstance(loader, DataLoader)
        and loader.batch_sampler is not None
        and not isinstance(loader.dataset, IterableDataset)
    )


def _rebuild(loader: Any, batch_sampler: SkipBatches) -> Any:
    from torch.utils.data import DataLoader

    options = distributed.loader_options(loader)
    options["persistent_workers"] = False  # a loader for the rest of one epoch: its workers end with it
    return DataLoader(loader.dataset, batch_sampler=batch_sampler, **options)
