"""The static checker: finds catalog pitfalls in Python sources without running them.

Nothing in this package may import torch (a test and the before-stop hook check it).
"""

from __future__ import annotations

from torchdoctor.check.engine import check_source

__all__ = ["check_source"]
