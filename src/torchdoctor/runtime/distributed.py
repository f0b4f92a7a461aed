"""Under torchrun each rank audits itself; the first rank of each node prints one merged report.

Ranks exchange findings through files in a temporary folder named after
TORCHELASTIC_RUN_ID rather than a collective: a collective at exit would
hang if one rank crashed, and the report matters most exactly then.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import replace

from torchdoctor.findings import Finding, Location, Severity, sort_findings

WAIT_S = 20.0


def world() -> tuple[int, int, int, int] | None:
    """(rank, world size, local rank, local world size) under torchrun, else None."""
    try:
        size = int(os.environ.get("WORLD_SIZE", "1"))
        if size <= 1:
            return None
        rank = int(os.environ["RANK"])
        local = int(os.environ.get("LOCAL_RANK", rank))
        local_size = int(os.environ.get("LOCAL_WORLD_SIZE", size))
    except (KeyError, ValueError):
        return None
    return rank, size, local, local_size


def folder() -> str:
    run = os.environ.get("TORCHELASTIC_RUN_ID") or os.environ.get("MASTER_PORT", "run")
    safe = "".join(c for c in run if c.isalnum() or c in "-_") or "run"
    return os.path.join(tempfile.gettempdir(), f"torchdoctor-{safe}")


def is_reporter() -> bool:
    """Whether this process prints the report (always, outside torchrun)."""
    w = world()
    return w is None or w[2] == 0


def merge(findings: list[Finding], *, wait_s: float = WAIT_S) -> list[Finding]:
    """Tag findings with this rank; on the node's first rank, add the others' findings."""
    w = world()
    if w is None:
        return findings
    rank, _, local, local_size = w
    mine = [f.with_rank(rank) for f in findings]
    path = folder()
    os.makedirs(path, exist_ok=True)
    if local != 0:
        _write(os.path.join(path, f"rank{rank}.json"), mine)
        return mine
    merged = list(mine)
    deadline = time.monotonic() + wait_s
    wanted = {r for r in range(rank + 1, rank + local_size)}
    while wanted and time.monotonic() < deadline:
        for r in sorted(wanted):
            file = os.path.join(path, f"rank{r}.json")
            if os.path.exists(file):
                merged += _read(file)
                os.unlink(file)
                wanted.discard(r)
        if wanted:
            time.sleep(0.05)
    return sorted(sort_findings(merged), key=lambda f: f.rank if f.rank is not None else -1)


def _write(file: str, findings: list[Finding]) -> None:
    rows = [{"code": f.code, "message": f.message, "fix": f.fix, "severity": f.severity.value, "rank": f.rank,
             "location": None if f.location is None else [f.location.path, f.location.line, f.location.column]}
            for f in findings]
    tmp = file + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(rows, fh)
    os.replace(tmp, file)


def _read(file: str) -> list[Finding]:
    try:
        with open(file, encoding="utf-8") as fh:
            rows = json.load(fh)
    except (OSError, ValueError):
        return []
    out = []
    for r in rows:
        loc = Location(*r["location"]) if r.get("location") else None
        out.append(replace(Finding(r["code"], r["message"], loc, r.get("fix"), severity=Severity(r["severity"])), rank=r.get("rank")))
    return out
