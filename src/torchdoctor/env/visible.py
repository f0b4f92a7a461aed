"""CUDA_VISIBLE_DEVICES, parsed exactly as PyTorch parses it, and what it leaves visible."""

from __future__ import annotations

from dataclasses import dataclass

# Mirrors torch/cuda/__init__.py `_parse_visible_devices` (torch 2.13, CUDA branch)
# and `_transform_uuid_to_ordinals` / `_device_count_nvml`:
# - unset: every device;
# - "GPU-..."/"MIG-..." first entry: a UUID list; an entry without that prefix
#   ends the list; a repeated entry empties it;
# - otherwise each entry is read like C strtoul (leading digits, optional sign:
#   "1gpu2" is 1); a negative or unreadable entry ends the list; a repeated
#   ordinal empties it; ordinals from the first one >= the device count are cut.


def _strtoul(s: str) -> int:
    """-1, or the integer that ``s`` starts with (PyTorch's `_strtoul`)."""
    if not s:
        return -1
    idx = 0
    for idx, c in enumerate(s):
        if not (c.isdigit() or (idx == 0 and c in "+-")):
            break
        if idx + 1 == len(s):
            idx += 1
    if idx <= 0:
        return -1
    try:
        return int(s[:idx])
    except ValueError:  # a lone sign: PyTorch would raise; CUDA reads nothing
        return -1


def _with_prefix(value: str, prefix: str) -> list[str]:
    out: list[str] = []
    for elem in value.split(","):
        if elem in out:
            return []
        if not elem.startswith(prefix):
            break
        out.append(elem)
    return out


def parse_visible_devices(value: str | None) -> list[int] | list[str] | None:
    """The devices PyTorch takes from CUDA_VISIBLE_DEVICES; None when it is unset."""
    if value is None:
        return None
    if value.startswith("GPU-"):
        return _with_prefix(value, "GPU-")
    if value.startswith("MIG-"):
        return _with_prefix(value, "MIG-")
    out: list[int] = []
    for elem in value.split(","):
        x = _strtoul(elem.strip())
        if x in out:
            return []
        if x < 0:
            break
        out.append(x)
    return out


@dataclass(frozen=True)
class Visibility:
    """What CUDA_VISIBLE_DEVICES leaves visible, and why it hides what it hides."""

    count: int | None  # visible devices; None: cannot tell
    reason: str = ""  # for count == 0: what in the value hides everything


def visible_count(value: str | None, physical: int | None, uuids: list[str] | None = None) -> Visibility:
    """How many of ``physical`` GPUs (with their ``uuids``, if known) the value leaves visible."""
    parsed = parse_visible_devices(value)
    if parsed is None:
        return Visibility(physical)
    if not parsed:
        return Visibility(0, _why_empty(value or ""))
    first = parsed[0]
    if isinstance(first, str):
        if first.startswith("MIG-") or not uuids:
            return Visibility(None)  # PyTorch cannot resolve MIG UUIDs either
        n = _uuid_prefix_count([str(p) for p in parsed], uuids)
        return Visibility(n, "" if n else _why_no_uuid(first, uuids))
    if physical is None:
        return Visibility(len(parsed))
    for i, ordinal in enumerate(parsed):
        if int(ordinal) >= physical:
            reason = "" if i else f"device {ordinal} does not exist (there {'are' if physical != 1 else 'is'} {physical} GPU{'s' * (physical != 1)}: 0..{physical - 1})"
            return Visibility(i, reason)
    return Visibility(len(parsed))


def _uuid_prefix_count(candidates: list[str], uuids: list[str]) -> int:
    seen: list[int] = []
    for cand in candidates:
        hits = [i for i, u in enumerate(uuids) if u.startswith(cand)]
        if len(hits) != 1:  # no match or ambiguous: the list ends here
            break
        if hits[0] in seen:
            return 0
        seen.append(hits[0])
    return len(seen)


def _why_no_uuid(first: str, uuids: list[str]) -> str:
    hits = sum(u.startswith(first) for u in uuids)
    if hits == 0:
        return f"no GPU has a UUID starting with {first!r}"
    if hits > 1:
        return f"{first!r} starts the UUIDs of {hits} GPUs (CUDA takes none of them)"
    return "it names the same device twice (CUDA then shows none)"


def _why_empty(value: str) -> str:
    stripped = value.strip()
    if stripped == "":
        return "it is set to the empty string"
    parts = [p.strip() for p in stripped.split(",")]
    if _strtoul(parts[0]) < 0 and not stripped.startswith(("GPU-", "MIG-")):
        return f"its first entry {parts[0]!r} is not a device number"
    return "it names the same device twice (CUDA then shows none)"
