"""Under torchrun each rank audits itself; global rank 0 prints one report merged over every node's ranks.

The ranks hand their findings to torchrun's own store: the TCPStore at
MASTER_ADDR:MASTER_PORT that torchrun's agents keep while the job runs
(TORCHELASTIC_USE_AGENT_STORE), so nodes need no shared folder. It is not a
collective: one at exit would hang if a rank had crashed, and the report matters
most exactly then. Every store call has a timeout and rank 0 waits a bounded
time for the others, then reports what it has and names the ranks missing.
Without that store (another launcher) the ranks of each node meet in a
temporary folder and each node's first rank prints its node's report.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from torchdoctor.record import replace
from datetime import timedelta
from typing import Any

from torchdoctor.findings import Finding, Location, Severity, sort_findings

WAIT_S = 20.0  # how long rank 0 waits for the other ranks' findings (TORCHDOCTOR_MERGE_WAIT_S)
CONNECT_S = 10.0  # how long a rank tries to reach the store

# Which report this process prints: "world" (rank 0: every rank's), "node" (the node's first
# rank: its node's), "self" (a rank that could not hand its findings on). Set by merge(),
# read by is_reporter() when the run ends; one process runs one session.
_scope = "node"


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
    if w is None or _scope == "self":
        return True
    return w[0] == 0 if _scope == "world" else w[2] == 0


def merge(findings: list[Finding], *, wait_s: float | None = None, store: Any = None) -> list[Finding]:
    """Tag findings with this rank; on the reporting rank, add the other ranks' findings."""
    global _scope
    w = world()
    if w is None:
        return findings
    rank, size, local, local_size = w
    mine = [f.with_rank(rank) for f in findings]
    wait = _wait_s() if wait_s is None else wait_s
    store = store if store is not None else agent_store()
    if store is not None:
        merged = _through_store(store, mine, rank, size, wait)
        if merged is not None:
            _scope = "world"
            return merged
        if rank != 0:
            _scope = "self"  # the store failed us: print our own findings rather than lose them
            return mine
    _scope = "node"
    return _through_folder(mine, rank, local, local_size, wait)


def agent_store(connect_s: float = CONNECT_S) -> Any:
    """A client of torchrun's store, or None when there is none (or it cannot be reached in time)."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    host, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not host or not port:
        return None
    try:
        from torch.distributed import TCPStore

        return TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=connect_s), wait_for_workers=False)
    except Exception:  # noqa: BLE001 - refused, timed out, no torch.distributed: fall back
        return None


def _key(rank: int) -> str:
    run = os.environ.get("TORCHELASTIC_RUN_ID", "run")
    return f"torchdoctor/{run}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/findings/{rank}"


def _through_store(store: Any, mine: list[Finding], rank: int, size: int, wait_s: float) -> list[Finding] | None:
    try:
        if rank != 0:
            store.set(_key(rank), _dumps(mine))
            return mine
        merged = list(mine)
        wanted = set(range(1, size))
        deadline = time.monotonic() + wait_s
        while wanted and time.monotonic() < deadline:
            for other in sorted(wanted):
                if store.check([_key(other)]):
                    merged += _loads(store.get(_key(other)))
                    wanted.discard(other)
            if wanted:
                time.sleep(0.05)
    except Exception:  # noqa: BLE001 - the store went away (its agent ended): fall back
        return None
    if wanted:
        missing = ", ".join(map(str, sorted(wanted)))
        print(f"torchdoctor: no findings from rank(s) {missing} within {wait_s:g} s (crashed or still running?); "
              "the report covers the other ranks", file=sys.stderr)  # fmt: skip
    return _ordered(merged)


def _through_folder(mine: list[Finding], rank: int, local: int, local_size: int, wait_s: float) -> list[Finding]:
    path = folder()
    os.makedirs(path, exist_ok=True)
    if local != 0:
        _write(os.path.join(path, f"rank{rank}.json"), mine)
        return mine
    merged = list(mine)
    deadline = time.monotonic() + wait_s
    wanted = set(range(rank + 1, rank + local_size))
    while wanted and time.monotonic() < deadline:
        for r in sorted(wanted):
            file = os.path.join(path, f"rank{r}.json")
            if os.path.exists(file):
                merged += _read(file)
                os.unlink(file)
                wanted.discard(r)
        if wanted:
            time.sleep(0.05)
    return _ordered(merged)


def _ordered(findings: list[Finding]) -> list[Finding]:
    return sorted(sort_findings(findings), key=lambda f: f.rank if f.rank is not None else -1)


def _wait_s() -> float:
    try:
        return float(os.environ.get("TORCHDOCTOR_MERGE_WAIT_S", WAIT_S))
    except ValueError:
        return WAIT_S


def _dumps(findings: list[Finding]) -> str:
    rows = [{"code": f.code, "message": f.message, "fix": f.fix, "severity": f.severity.value, "rank": f.rank,
             "location": None if f.location is None else [f.location.path, f.location.line, f.location.column]}
            for f in findings]  # fmt: skip
    return json.dumps(rows)


def _loads(text: Any) -> list[Finding]:
    try:
        rows = json.loads(text)
    except (TypeError, ValueError):
        return []
    out = []
    for r in rows:
        loc = Location(*r["location"]) if r.get("location") else None
        out.append(replace(Finding(r["code"], r["message"], loc, r.get("fix"), severity=Severity(r["severity"])), rank=r.get("rank")))
    return out


def _write(file: str, findings: list[Finding]) -> None:
    tmp = file + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(_dumps(findings))
    os.replace(tmp, file)


def _read(file: str) -> list[Finding]:
    try:
        with open(file, encoding="utf-8") as fh:
            return _loads(fh.read())
    except OSError:
        return []
