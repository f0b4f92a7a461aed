"""Moving batches to the device: to_device (any nesting) and DeviceLoader (prefetching)."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Callable, Union

import torch

if TYPE_CHECKING:
    from torchdoctor.train.preload import PreloadedLoader

__all__ = ["to_device", "DeviceLoader", "map_tensors", "use_non_blocking"]

DeviceLike = Union[str, torch.device, int]


def to_device(batch: Any, device: DeviceLike, non_blocking: bool | None = None) -> Any:
    """``batch`` with every tensor inside it moved to ``device``.

    Walks dicts, lists, tuples, namedtuples, dataclasses and objects with a
    ``.to`` method; anything else (strings, numbers, None) is returned as is.
    ``non_blocking`` is used only where it is valid: a CUDA destination and a
    pinned source. ``None`` means "wherever it is valid"; ``False`` never.
    A device-to-host copy is always blocking: reading it early would be a race.
    """
    target = device if isinstance(device, torch.device) else torch.device(device)

    def move(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.device == target:
            return tensor
        # is_pinned() is asked only when the answer matters: it needs a CUDA build.
        pinned = target.type == "cuda" and tensor.device.type == "cpu" and tensor.is_pinned()
        return tensor.to(target, non_blocking=use_non_blocking(tensor.device.type, pinned, target.type, non_blocking))

    def move_other(obj: Any) -> Any:
        # Objects such as transformers' BatchEncoding or nn.Module take only a device.
        return obj.to(target)

    return map_tensors(batch, move, move_other)


def use_non_blocking(source: str, pinned: bool, destination: str, requested: bool | None) -> bool:
    """Whether a copy may be asynchronous: only host-to-CUDA from pinned memory, and never if refused.

    From pageable memory the copy is synchronous anyway (TD306, no overlap); a
    device-to-host copy read before a sync would be a race, so it always blocks.
    """
    return requested is not False and destination == "cuda" and source == "cpu" and pinned


def map_tensors(batch: Any, fn: Callable[[torch.Tensor], Any], other: Callable[[Any], Any] | None = None) -> Any:
    """``batch`` rebuilt with ``fn`` applied to every tensor (and ``other`` to objects with ``.to``)."""
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    # Exact built-in types first: the common batch costs no ABC isinstance checks.
    kind = type(batch)
    if kind is list:
        return [map_tensors(value, fn, other) for value in batch]
    if kind is tuple:
        return tuple([map_tensors(value, fn, other) for value in batch])
    if kind is dict:
        return {key: map_tensors(value, fn, other) for key, value in batch.items()}
    if isinstance(batch, (str, bytes, int, float, bool)) or batch is None:
        return batch
    if isinstance(batch, Mapping):
        items = [(key, map_tensors(value, fn, other)) for key, value in batch.items()]
        return _rebuild_mapping(batch, items)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(map_tensors(value, fn, other) for value in batch))
    if isinstance(batch, (list, tuple)):
        values = [map_tensors(value, fn, other) for value in batch]
        return values if type(batch) is list else _rebuild_sequence(batch, values)
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        return _rebuild_dataclass(batch, fn, other)
    if other is not None and callable(getattr(batch, "to", None)):
        return other(batch)
    return batch


def _rebuild_mapping(original: Mapping[Any, Any], items: list[tuple[Any, Any]]) -> Any:
    if type(original) is dict:
        return dict(items)
    try:
        rebuilt = copy.copy(original)  # keeps defaultdict's factory, OrderedDict's order, subclasses
        for key, value in items:
            rebuilt[key] = value  # type: ignore[index]
        return rebuilt
    except TypeError:  # a read-only mapping (MappingProxyType): a plain dict is the best we can do
        return dict(items)


def _rebuild_sequence(original: tuple[Any, ...], values: list[Any]) -> Any:
    try:
        return type(original)(values)
    except TypeError:
        return tuple(values)


def _rebuild_dataclass(batch: Any, fn: Callable[[torch.Tensor], Any], other: Callable[[Any], Any] | None) -> Any:
    rebuilt = copy.copy(batch)
    for field in dataclasses.fields(batch):
        if hasattr(batch, field.name):
            # object.__setattr__ also works on frozen dataclasses, and skips __init__'s side effects.
            object.__setattr__(rebuilt, field.name, map_tensors(getattr(batch, field.name), fn, other))
    return rebuilt


def _pin(batch: Any) -> Any:
    return map_tensors(batch, lambda t: t if t.device.type != "cpu" or t.is_pinned() else t.pin_memory())


class DeviceLoader:
    """Wraps a DataLoader (or any iterable of batches) so that batches arrive on ``device``.

    On CUDA the next batch is already being copied on a side stream from pinned
    memory while the current one is computed on; on the CPU it is a plain
    pass-through that costs nothing.
    """

    def __init__(self, loader: Any, device: DeviceLike) -> None:
        self.loader = loader
        self.device = torch.device(device)

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        # sampler, dataset, batch_size, set_epoch ... stay reachable through the wrapper.
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __iter__(self) -> Iterator[Any]:
        if self.device.type == "cpu":
            return iter(self.loader)
        if self.device.type == "cuda":
            return _cuda_prefetch(self.loader, self.device)
        return (to_device(batch, self.device) for batch in self.loader)

    @staticmethod
    def preload(
        dataset: Any,
        device: DeviceLike,
        batch_size: int,
        shuffle: bool = True,
        drop_last: bool = False,
        generator: torch.Generator | None = None,
    ) -> PreloadedLoader:
        """A loader that holds the whole (small) ``dataset`` on ``device`` and serves batches by index there."""
        from torchdoctor.train.preload import PreloadedLoader

        return PreloadedLoader(dataset, device, batch_size, shuffle=shuffle, drop_last=drop_last, generator=generator)


def _cuda_prefetch(loader: Any, device: torch.device) -> Iterator[Any]:  # pragma: no cover - needs CUDA
    """Yield batches already on ``device``; the copy of batch i+1 runs while batch i is used."""
    side = torch.cuda.Stream(device=device)
    batches = iter(loader)

    def launch() -> tuple[bool, Any]:
        try:
            host = next(batches)
        except StopIteration:
            return False, None
        with torch.cuda.stream(side):
            return True, to_device(_pin(host), device, non_blocking=True)

    more, ready = launch()
    while more:
        main = torch.cuda.current_stream(device)
        main.wait_stream(side)  # this batch's copy is done before compute reads it
        # Its memory was allocated on the side stream: tell the caching allocator it is
        # used on the main stream, so it is not handed out again while compute runs.
        map_tensors(ready, lambda t: t.record_stream(main) if t.is_cuda else None)
        current = ready
        more, ready = launch()  # queued before we yield: the copy overlaps this batch's compute
        yield current
