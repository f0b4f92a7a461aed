"""Small helpers the builders share: device names as the messages spell them, the user's line."""

from __future__ import annotations

import re
from typing import Any

Draft = tuple[str, str, str]  # (code, message, fix)


def device(name: str | None) -> str | None:
    """A device as a finding writes it: ``cuda:0``, ``cpu``; messages also say ``CPU``, ``GPU 1``, ``CUDA``."""
    if not name:
        return None
    text = name.strip()
    m = re.fullmatch(r"GPU(?: (\d+))?", text)
    if m:
        return f"cuda:{m.group(1)}" if m.group(1) else "cuda"
    return text.lower()


def is_accelerator(dev: str) -> bool:
    return not dev.startswith("cpu")


_TYPE_DEVICE = (
    (re.compile(r"torch\.(cuda|xpu|mps)\.\w+Tensor"), None),
    (re.compile(r"torch\.\w+Tensor"), "cpu"),
    (re.compile(r"(CUDA|CPU|MPS|XPU|HIP)\w*Type"), None),
)


def type_device(type_name: str) -> str | None:
    """The device of a legacy tensor type name: ``torch.cuda.FloatTensor`` -> cuda, ``MPSFloatType`` -> mps.

    A bare dtype (``Float``, ``double``) names no device: None.
    """
    for pattern, fixed in _TYPE_DEVICE:
        m = pattern.fullmatch(type_name)
        if m:
            found = fixed or m.group(1).lower()
            return "cuda" if found == "hip" else found
    return None


def at(hit: Any) -> str:
    """`` (at `loss = criterion(out, y)`)`` when the traceback shows the user's line."""
    return f" (at `{hit.source}`)" if hit.source else ""


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"
