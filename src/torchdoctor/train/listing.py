"""Names of fit()'s checkpoints (epoch ends and steps inside an epoch, files or sharded folders) and their order.

``epoch-0003.pt`` is the end of epoch 3; ``epoch-0004-step-00000210.pt`` is inside
epoch 4, after 210 steps in all; either may be a folder (``epoch-0003/``) when
the model was sharded (torch.distributed.checkpoint). A folder counts only once
its ``.metadata`` exists: torch.distributed.checkpoint writes it last, and
fit() renames a finished folder into place. Temporary names start with a dot.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Union

__all__ = ["checkpoint_name", "find", "newest", "is_sharded", "SHARDED_MARK"]

SHARDED_MARK = ".metadata"
PathLike = Union[str, "os.PathLike[str]"]
Key = tuple[int, int, int]


def checkpoint_name(epoch: int, step: int | None = None, prefix: str = "epoch-") -> str:
    """``epoch-0003`` (the end of epoch 3) or ``epoch-0004-step-00000210`` (inside epoch 4); no suffix."""
    return f"{prefix}{epoch:04d}" + (f"-step-{step:08d}" if step is not None else "")


def is_sharded(path: Path) -> bool:
    """A complete sharded checkpoint: a folder holding torch.distributed.checkpoint's ``.metadata``."""
    return path.is_dir() and (path / SHARDED_MARK).is_file()


def find(directory: PathLike, prefix: str = "epoch-", suffix: str = ".pt") -> list[tuple[Key, Path]]:
    """Every complete checkpoint in ``directory``, oldest first (an epoch's steps come before its end)."""
    folder = Path(directory)
    if not folder.is_dir():
        return []
    pattern = re.compile(re.escape(prefix) + r"(\d+)(?:-step-(\d+))?(" + re.escape(suffix) + ")?$")
    found = []
    for path in folder.iterdir():
        match = pattern.match(path.name)
        if match is None or path.name.startswith("."):
            continue
        is_file = match.group(3) is not None
        if (is_file and path.is_file()) or (not is_file and is_sharded(path)):
            epoch, step = int(match.group(1)), match.group(2)
            # The end of epoch N sorts after every step inside it, and before epoch N+1's steps.
            found.append(((epoch, 0 if step is not None else 1, int(step or 0)), path))
    return sorted(found)


def newest(directory: PathLike, prefix: str = "epoch-", suffix: str = ".pt") -> Path | None:
    found = find(directory, prefix, suffix)
    return found[-1][1] if found else None
