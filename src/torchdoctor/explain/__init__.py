"""Error text -> findings: the messages PyTorch, CUDA, NVML, NCCL and the DataLoader print, explained.

One table (``table.FAMILIES``) serves three places: ``torchdoctor explain``
(a pasted message or a whole log), ``torchdoctor env`` (the init warnings and
errors of a facts snapshot) and ``torchdoctor run`` / ``watch()`` (the error a
watched script dies with). Matching is pure; this machine's facts, when given,
turn "no kernel image" into the GPU, the wheel's kernels and the build to
install. A message nobody knows gives no finding, never a guess.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable, Iterable
from typing import Any, Union

from torchdoctor.findings import Finding

__all__ = ["explain_text", "explain_exception", "explain_facts", "this_machine"]

FactsSource = Union[dict[str, Any], Callable[[], Union[dict[str, Any], None]], None]
_SNAPSHOT_TEXTS = ("init_warning", "init_error", "nvidia_smi_error", "last_error")


def explain_text(text: str, facts: FactsSource = None, *, skip: Iterable[str] = ()) -> list[Finding]:
    """One finding per known error in ``text``, in order; repeats of one error are one finding.

    ``facts`` is a snapshot (``torchdoctor.env.probe`` format) or a callable that
    returns one, called only when a recognised message is about the machine.
    Errors whose family may give a code in ``skip`` are left to whoever found it.
    """
    from torchdoctor.explain.match import clean, scan
    from torchdoctor.explain.table import FAMILIES

    skipped = set(skip)
    hits = [h for h in scan(clean(text), FAMILIES) if not skipped & set(h.family.codes)]
    snapshot = facts
    if callable(facts):
        snapshot = facts() if any(h.family.machine for h in hits) else None
    found: list[Finding] = []
    seen: set[tuple[str, str]] = set()
    for hit in hits:
        for code, message, fix in _build(hit, snapshot):
            if (code, message) not in seen:
                seen.add((code, message))
                found.append(Finding(code, message, hit.location, fix or None))
    return found


def _build(hit: Any, facts: Any) -> list[tuple[str, str, str]]:
    try:
        return hit.family.build(hit, facts if isinstance(facts, dict) else None)
    except Exception:  # one odd message must not cost the others their explanation
        if os.environ.get("TORCHDOCTOR_DEBUG"):
            raise
        return []


def explain_exception(exc: BaseException, already: Iterable[Finding] = (), *, probe: bool = True) -> list[Finding]:
    """The findings for the exception a watched program died with (its traceback gives the user's line).

    Errors ``already`` explained (by the runtime's own device checks, or the
    start-up environment check) are not explained twice. With ``probe`` this
    machine is probed, without initialising CUDA, only if the error is about it.
    """
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return explain_text(text, this_machine if probe else None, skip={f.code for f in already})


def explain_facts(facts: dict[str, Any], already: Iterable[Finding] = ()) -> list[Finding]:
    """The findings for a snapshot's error texts (init warnings and errors, a ``last_error`` traceback)."""
    texts = [facts.get(key) for key in _SNAPSHOT_TEXTS] if isinstance(facts, dict) else []
    text = "\n".join(t for t in texts if isinstance(t, str) and t.strip())
    return explain_text(text, facts, skip={f.code for f in already}) if text else []


def this_machine() -> dict[str, Any] | None:
    """This machine's facts, as `torchdoctor env --no-cuda-init` collects them; None if the probe fails."""
    try:
        from torchdoctor.env.probe import probe

        return probe(init_cuda=False)
    except Exception:
        return None
