"""to_device on every kind of nesting, the non_blocking rule, DeviceLoader and its preload mode."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict, defaultdict, namedtuple
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from torchdoctor.errors import InputError
from torchdoctor.train import DeviceLoader, PreloadedLoader, to_device
from torchdoctor.train.move import use_non_blocking

Pair = namedtuple("Pair", ["x", "y"])


@dataclasses.dataclass
class Sample:
    image: torch.Tensor
    label: torch.Tensor
    name: str = "a"


@dataclasses.dataclass(frozen=True)
class Frozen:
    value: torch.Tensor


class Movable:
    """Like transformers' BatchEncoding: has its own .to(device)."""

    def __init__(self) -> None:
        self.moved_to: Any = None

    def to(self, device: Any) -> Movable:
        self.moved_to = device
        return self


def _devices(obj: Any) -> list[str]:
    found: list[str] = []
    if isinstance(obj, torch.Tensor):
        return [obj.device.type]
    if isinstance(obj, dict):
        obj = list(obj.values())
    if dataclasses.is_dataclass(obj):
        obj = [getattr(obj, f.name) for f in dataclasses.fields(obj)]
    if isinstance(obj, (list, tuple)):
        for item in obj:
            found += _devices(item)
    return found


def test_moves_every_tensor_in_a_deep_nesting_and_keeps_types() -> None:
    t = torch.ones(2)
    batch = {
        "pair": Pair(t, [t, (t, "keep")]),
        "sample": Sample(t, t),
        "frozen": Frozen(t),
        "ordered": OrderedDict(a=t),
        "default": defaultdict(list, b=t),
        "meta": {"id": 7, "name": "x", "none": None},
    }
    moved = to_device(batch, "meta")
    assert set(_devices(moved)) == {"meta"}
    assert isinstance(moved["pair"], Pair) and isinstance(moved["pair"].y[1], tuple)
    assert moved["pair"].y[1][1] == "keep"
    assert isinstance(moved["sample"], Sample) and moved["sample"].name == "a"
    assert isinstance(moved["frozen"], Frozen) and moved["frozen"].value.device.type == "meta"
    assert isinstance(moved["ordered"], OrderedDict)
    assert isinstance(moved["default"], defaultdict) and moved["default"]["new"] == []
    assert moved["meta"] == {"id": 7, "name": "x", "none": None}
    # The input is left alone: nothing is moved in place.
    assert batch["sample"].image.device.type == "cpu"


def test_objects_with_their_own_to_are_moved_through_it() -> None:
    obj = Movable()
    assert to_device([obj], "cpu")[0] is obj
    assert obj.moved_to == torch.device("cpu")


def test_tensors_already_there_are_returned_unchanged() -> None:
    t = torch.ones(3)
    assert to_device((t,), "cpu")[0] is t


@pytest.mark.parametrize(
    ("source", "pinned", "destination", "requested", "expected"),
    [
        ("cpu", True, "cuda", None, True),  # the one valid case
        ("cpu", True, "cuda", True, True),
        ("cpu", True, "cuda", False, False),  # refused by the caller
        ("cpu", False, "cuda", None, False),  # pageable source: no overlap (TD306)
        ("cpu", False, "cuda", True, False),  # even when asked for
        ("cuda", False, "cpu", True, False),  # device-to-host: a race if read early
        ("cpu", False, "meta", True, False),
        ("cpu", False, "mps", None, False),
    ],
)
def test_non_blocking_only_where_valid(source: str, pinned: bool, destination: str, requested: Any, expected: bool) -> None:
    assert use_non_blocking(source, pinned, destination, requested) is expected


def test_to_device_passes_non_blocking_false_for_pageable_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    original = torch.Tensor.to

    def spy(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        calls.append(kwargs.get("non_blocking"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", spy)
    to_device({"x": torch.ones(1)}, "meta", non_blocking=True)
    assert calls == [False]


def test_device_loader_on_cpu_is_a_pass_through() -> None:
    loader = DataLoader(TensorDataset(torch.arange(10.0)), batch_size=4)  # noqa: TD304 - a CPU test
    wrapped = DeviceLoader(loader, "cpu")
    assert len(wrapped) == 3
    assert wrapped.batch_size == 4 and wrapped.dataset is loader.dataset  # attributes reach the loader
    assert type(iter(wrapped)) is type(iter(loader))  # the loader's own iterator: nothing added per batch
    assert [b[0].tolist() for b in wrapped] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_device_loader_moves_batches_to_another_device() -> None:
    loader = DataLoader(TensorDataset(torch.arange(6.0), torch.arange(6)), batch_size=2)  # noqa: TD304 - a CPU test
    batches = list(DeviceLoader(loader, "meta"))
    assert len(batches) == 3 and all(set(_devices(b)) == {"meta"} for b in batches)


def test_preload_serves_every_sample_once_per_epoch_in_shuffled_batches() -> None:
    data = TensorDataset(torch.arange(10), torch.arange(10) * 2)
    loader = DeviceLoader.preload(data, "cpu", batch_size=4, generator=torch.Generator().manual_seed(1))
    assert isinstance(loader, PreloadedLoader) and len(loader) == 3
    first = [x for xb, _ in loader for x in xb.tolist()]
    second = [x for xb, _ in loader for x in xb.tolist()]
    assert sorted(first) == list(range(10)) and sorted(second) == list(range(10))
    assert first != list(range(10)) and first != second  # shuffled, differently each epoch
    for xb, yb in loader:
        assert torch.equal(yb, xb * 2)  # inputs and targets stay paired


def test_preload_without_shuffle_and_with_drop_last() -> None:
    loader = DeviceLoader.preload(TensorDataset(torch.arange(10)), "cpu", batch_size=4, shuffle=False, drop_last=True)
    assert len(loader) == 2
    assert [b[0].tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7]]


class _DictDataset(Dataset):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 5

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": torch.full((2,), float(i)), "y": torch.tensor(i)}


def test_preload_stacks_a_map_style_dataset_and_moves_it() -> None:
    loader = DeviceLoader.preload(_DictDataset(), "meta", batch_size=2, shuffle=False)
    batch = next(iter(loader))
    assert batch["x"].shape == (2, 2) and batch["x"].device.type == "meta"


def test_preload_rejects_an_empty_dataset_and_a_bad_batch_size() -> None:
    with pytest.raises(InputError, match="empty dataset"):
        DeviceLoader.preload(TensorDataset(torch.zeros(0)), "cpu", batch_size=2)
    with pytest.raises(InputError, match="batch_size"):
        DeviceLoader.preload(TensorDataset(torch.zeros(3)), "cpu", batch_size=0)


@pytest.mark.gpu
def test_cuda_prefetch_yields_the_same_batches_on_the_gpu() -> None:  # pragma: no cover - needs CUDA
    loader = DataLoader(TensorDataset(torch.arange(64.0).reshape(16, 4)), batch_size=4, pin_memory=True)
    got = [b[0] for b in DeviceLoader(loader, "cuda")]
    assert all(b.is_cuda for b in got)
    assert torch.equal(torch.cat(got).cpu(), torch.arange(64.0).reshape(16, 4))
