"""The runtime auditor: ``torchdoctor.watch()`` and ``torchdoctor run`` (imports torch lazily).

The package is named ``runtime`` rather than ``watch`` so that importing one of
its modules never rebinds ``torchdoctor.watch`` (the function) to a package.
"""

from __future__ import annotations

from torchdoctor.runtime.session import WatchSession, watch

__all__ = ["watch", "WatchSession"]
