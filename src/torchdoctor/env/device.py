"""pick_device(): the one place the product chooses a device (CUDA, then MPS, then CPU)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Union

from torchdoctor.errors import UsageError

if TYPE_CHECKING:
    import torch

DeviceLike = Union[str, "torch.device", None]


def pick_device(preferred: DeviceLike = "auto") -> torch.device:
    """The device to train on.

    ``"auto"`` (or None) takes CUDA when it is usable, then Apple's MPS, then the
    CPU; under torchrun the CUDA device is this process's ``LOCAL_RANK``. An
    explicit choice (``"cpu"``, ``"cuda:1"``, a ``torch.device``) is honoured,
    and one that cannot work here is a clear error rather than a crash later.
    """
    import torch

    if preferred is None or (isinstance(preferred, str) and preferred.strip().lower() == "auto"):
        if torch.cuda.is_available():
            return torch.device("cuda", _local_rank() % torch.cuda.device_count())
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(preferred)
    except (RuntimeError, TypeError) as exc:
        raise UsageError(f"not a device: {preferred!r} ({exc})") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(
                f"device {str(device)!r} was asked for, but CUDA is not usable here; "
                "run `torchdoctor env` to see why, or use device='auto'"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UsageError(f"device {str(device)!r} does not exist: {torch.cuda.device_count()} CUDA device(s) visible")
    if device.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise UsageError("device 'mps' was asked for, but MPS is not available here")
    return device


def _local_rank() -> int:
    try:
        return int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError:
        return 0
