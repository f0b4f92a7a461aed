"""diagnose(facts) -> findings: the pure heart of the environment doctor (no I/O, no torch)."""

from __future__ import annotations

import os
from typing import Any

from torchdoctor.env import rules_build, rules_host
from torchdoctor.env.advice import container_gpu_flag
from torchdoctor.env.facts import Facts
from torchdoctor.findings import Finding, Severity

__all__ = ["diagnose"]

_RULES = rules_build.RULES + rules_host.RULES


def diagnose(facts: dict[str, Any], *, snapshot: bool = False) -> list[Finding]:
    """Every stage-0 finding that ``facts`` supports, errors first.

    ``facts`` is a snapshot in the format of ``torchdoctor.env.probe``: every key
    is optional (missing means unknown) and unknown keys are ignored, so a
    snapshot taken on another machine, or by an older version, diagnoses too.
    With ``snapshot`` the findings speak of "that machine", not "this machine".
    """
    f = Facts(facts, snapshot=snapshot)
    findings: list[Finding] = []
    for rule in _RULES:
        try:
            findings.extend(rule(f))
        except Exception:  # a malformed snapshot value must not cost the other findings
            if os.environ.get("TORCHDOCTOR_DEBUG"):
                raise
    findings.extend(_no_gpu(f, findings))
    order = {code: i for i, code in enumerate(sorted({x.code for x in findings}))}
    return sorted(findings, key=lambda x: (x.severity.rank, order[x.code]))


def _no_gpu(f: Facts, found: list[Finding]) -> list[Finding]:
    """TD009: no GPU at all, when nothing else explains the missing GPU."""
    if f.platform == "darwin" or any(x.severity is Severity.ERROR for x in found):
        return []
    if f.nvidia_present or f.amd_present or f.bool("cuda_available") or f.bool("mps_available"):
        return []
    if f.int("device_count"):
        return []
    fix = f"nothing to fix on a machine without a GPU; code that uses torchdoctor.env.pick_device() runs {f.here} unchanged"
    if f.bool("in_container"):
        fix = "if the host has a GPU, " + container_gpu_flag(f)
    return [Finding("TD009", f"no GPU found on {f.this} machine: training will run on the CPU", fix=fix)]

