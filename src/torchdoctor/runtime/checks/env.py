"""Environment errors at start-up (TD0xx), from the environment doctor when it is installed."""

from __future__ import annotations

from torchdoctor.findings import Finding, Severity

_cache: list[Finding] | None = None


def startup_findings() -> list[Finding]:
    """The error-severity findings of ``torchdoctor.env.examine``; none if it is not there or fails."""
    global _cache
    if _cache is None:
        try:
            from torchdoctor.env import examine  # type: ignore[attr-defined]

            _, findings = examine(init_cuda=False)
            _cache = [f for f in findings if f.severity is Severity.ERROR]
        except Exception:  # the doctor is optional here; the audit goes on without it
            _cache = []
    return list(_cache)
