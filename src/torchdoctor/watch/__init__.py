"""The runtime auditor: ``torchdoctor.watch()`` and ``torchdoctor run`` (imports torch lazily)."""

from __future__ import annotations

import sys
import types
from typing import Any

from torchdoctor.watch.session import WatchSession, watch

__all__ = ["watch", "WatchSession"]


class _CallableModule(types.ModuleType):
    """Importing a submodule (``torchdoctor.watch.session``) binds ``torchdoctor.watch`` to this
    package, shadowing the function of the same name: calling the package calls the function."""

    def __call__(self, *args: Any, **kwargs: Any) -> WatchSession:
        return watch(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
