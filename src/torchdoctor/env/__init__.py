"""The environment doctor: why CUDA is (not) usable here, and how to fix it."""

from __future__ import annotations

from typing import Any

from torchdoctor.env.device import pick_device
from torchdoctor.env.diagnose import diagnose
from torchdoctor.findings import Finding

__all__ = ["examine", "diagnose", "pick_device"]


def examine(*, init_cuda: bool = True) -> tuple[dict[str, Any], list[Finding]]:
    """Probe this machine and diagnose it: ``(facts, findings)``, errors first.

    With ``init_cuda=False`` nothing initialises CUDA (the runtime auditor uses
    this at start-up, before the user's program has touched the GPU); with
    ``True`` CUDA is initialised in a child process only, never in this one.
    """
    from torchdoctor.env.probe import probe

    facts = probe(init_cuda=init_cuda)
    return facts, diagnose(facts)
