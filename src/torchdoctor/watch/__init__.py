"""The runtime auditor: ``torchdoctor.watch()`` and ``torchdoctor run`` (imports torch lazily)."""

from __future__ import annotations

from torchdoctor.watch.session import WatchSession, watch

__all__ = ["watch", "WatchSession"]
