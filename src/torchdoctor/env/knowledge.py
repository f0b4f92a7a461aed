"""What the doctor knows about drivers, CUDA versions and PyTorch builds, kept as data with its sources."""

from __future__ import annotations

import re

# ---------------------------------------------------------------------------
# Driver versions.
# Source: NVIDIA CUDA Toolkit Release Notes, table "CUDA Toolkit and Corresponding
# Driver Versions" (docs.nvidia.com/cuda/cuda-toolkit-release-notes), GA releases.
# The value is the driver the toolkit ships with: at or above it, everything in
# that CUDA release works (PTX JIT included).
# Entries marked (?) are from memory of the release notes and were not re-checked
# against the table for this release; they err on the side of the GA number.
# ---------------------------------------------------------------------------
TOOLKIT_DRIVER_LINUX: dict[tuple[int, int], tuple[int, ...]] = {
    (9, 2): (396, 26),
    (10, 0): (410, 48),
    (10, 1): (418, 39),
    (10, 2): (440, 33),
    (11, 0): (450, 36, 6),
    (11, 1): (455, 23),
    (11, 2): (460, 27, 3),
    (11, 3): (465, 19, 1),
    (11, 4): (470, 42, 1),
    (11, 5): (495, 29, 5),
    (11, 6): (510, 39, 1),
    (11, 7): (515, 43, 4),
    (11, 8): (520, 61, 5),
    (12, 0): (525, 60, 13),
    (12, 1): (530, 30, 2),
    (12, 2): (535, 54, 3),
    (12, 3): (545, 23, 6),
    (12, 4): (550, 54, 14),
    (12, 5): (555, 42, 2),
    (12, 6): (560, 28, 3),
    (12, 8): (570, 26),
    (12, 9): (575, 51, 3),
    (13, 0): (580, 65, 6),
    (13, 1): (590, 44, 1),  # (?)
}

TOOLKIT_DRIVER_WINDOWS: dict[tuple[int, int], tuple[int, ...]] = {
    (10, 2): (441, 22),
    (11, 0): (451, 22),
    (11, 1): (456, 38),
    (11, 2): (460, 82),
    (11, 3): (465, 89),
    (11, 4): (471, 11),
    (11, 5): (496, 4),
    (11, 6): (511, 23),
    (11, 7): (516, 1),
    (11, 8): (520, 6),
    (12, 0): (527, 41),
    (12, 1): (531, 14),
    (12, 2): (536, 25),
    (12, 3): (545, 84),
    (12, 4): (551, 61),
    (12, 5): (555, 85),
    (12, 6): (560, 76),
    (12, 8): (570, 65),  # (?)
    (12, 9): (576, 2),  # (?)
    (13, 0): (580, 88),  # (?) CUDA 13 no longer bundles the Windows driver
}

# Source: NVIDIA "CUDA Compatibility", Minor Version Compatibility, Table 1
# (docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html):
# 13.x >= 580, 12.x >= 525, 11.x >= 450 (Linux; 11.x needs 450.80.02 exactly,
# Windows 452.39). Between this floor and the toolkit's own driver a program runs
# "with limited feature-set": no PTX JIT of newer PTX, some APIs return
# cudaErrorCallRequiresNewerDriver.
MINOR_COMPAT_FLOOR_LINUX: dict[int, tuple[int, ...]] = {11: (450, 80, 2), 12: (525, 60, 13), 13: (580,)}
MINOR_COMPAT_FLOOR_WINDOWS: dict[int, tuple[int, ...]] = {11: (452, 39), 12: (528, 33), 13: (580,)}

# Production/long-term driver branches worth recommending, per CUDA major
# (docs.nvidia.com/datacenter/tesla/drivers: R535 LTSB, R570 PB, R580 LTSB).
RECOMMENDED_BRANCH: dict[int, int] = {11: 535, 12: 570, 13: 580}


# ---------------------------------------------------------------------------
# PyTorch CUDA flavours: which compute capabilities each wheel ships cubins for.
# Sources: the TORCH_CUDA_ARCH_LIST of .ci/manywheel/build_cuda.sh, as copied into
# torch/cuda/__init__.py PYTORCH_RELEASES_CODE_CC of torch 2.13 (12.6, 12.9, 13.0,
# 13.2); torch.cuda.get_arch_list() of published conda/pip builds
# (moi90/pytorch_compute_capabilities: 2.5-2.7 cu118/cu121/cu124/cu126/cu128).
# cu128: 2.7 shipped sm_75..sm_120; 2.8 added sm_70 back on x86 (the 2.8 release
# notes drop Maxwell/Pascal from 12.8+ builds) -- we list 70 and say "torch 2.8+"
# where it matters; treat the Volta case on cu128 as not certain.
# cu129/cu130/cu132: no Maxwell, Pascal or Volta (CUDA 13 itself dropped sm_50..sm_72);
# aarch64 (SBSA) builds only target data-centre parts and GB10/Thor.
# ---------------------------------------------------------------------------
FLAVOUR_ARCHS: dict[str, dict[str, tuple[int, ...]]] = {
    "cu118": {"x86_64": (50, 60, 61, 70, 75, 80, 86, 90)},  # conda builds also had sm_37; pip never
    "cu121": {"x86_64": (50, 60, 61, 70, 75, 80, 86, 90)},
    "cu124": {"x86_64": (50, 60, 61, 70, 75, 80, 86, 90), "aarch64": (90,)},
    "cu126": {"x86_64": (50, 60, 70, 75, 80, 86, 90), "aarch64": (80, 90)},
    "cu128": {"x86_64": (70, 75, 80, 86, 90, 100, 120), "aarch64": (80, 90, 100, 120)},
    "cu129": {"x86_64": (75, 80, 86, 90, 100, 120), "aarch64": (80, 90, 100, 120)},
    "cu130": {"x86_64": (75, 80, 86, 90, 100, 120), "aarch64": (80, 90, 100, 110, 120)},
    "cu132": {"x86_64": (75, 80, 86, 90, 100, 120), "aarch64": (80, 90, 100, 110, 120)},
}

# The torch releases that publish each flavour on download.pytorch.org (first, last;
# None: still published by the newest release we know, torch 2.13, whose
# PYTORCH_RELEASES_CODE_CC lists 12.6, 12.9, 13.0 and 13.2). The "last" of cu128
# (2.9) and the first of cu132 (2.11) are our best reading, not re-checked.
FLAVOUR_TORCH: dict[str, tuple[str, str | None]] = {
    "cu118": ("2.0", "2.7"),
    "cu121": ("2.1", "2.5"),
    "cu124": ("2.4", "2.6"),
    "cu126": ("2.6", None),
    "cu128": ("2.7", "2.9"),
    "cu129": ("2.8", None),
    "cu130": ("2.9", None),
    "cu132": ("2.11", None),
}

# Newest first: the order we recommend flavours in.
FLAVOUR_ORDER = ("cu130", "cu129", "cu128", "cu126", "cu124", "cu121", "cu118", "cu132")
CURRENT_FLAVOURS = ("cu130", "cu129", "cu128", "cu126")

INDEX_URL = "https://download.pytorch.org/whl/{flavour}"

# Jetson/DRIVE integrated GPUs: their cubins are not interchangeable with the
# discrete parts of the same major, and PyPI wheels do not target them.
# Source: DEVICE_REQUIREMENT in torch/cuda/__init__.py (torch 2.13).
INTEGRATED_CC = frozenset({53, 62, 72, 87, 101})
# CUDA 13 renamed Thor's sm_101 to sm_110; a sm_101 cubin also runs on 11.0.
CC_ALIASES: dict[int, frozenset[int]] = {101: frozenset({101, 110})}

# The first driver branch that knows a GPU generation: below it the driver cannot
# drive the GPU at all, whatever CUDA minor-version compatibility promises.
# Source: NVIDIA driver release notes (R520/R525: Ada and Hopper; R570: Blackwell
# B200 and GeForce RTX 50; R580: GB10/DGX Spark and Thor).
FIRST_DRIVER_FOR_CC: dict[int, int] = {89: 525, 90: 525, 100: 570, 103: 575, 110: 580, 120: 570, 121: 580}

# The last driver branch that supports a GPU generation: a fix may not ask for a newer one.
# Source: NVIDIA driver release notes / support bulletins: R470 is the last branch with
# Kepler (sm_3x) support; R580 is the last with Maxwell, Pascal and Volta (sm_5x..sm_7.0/7.2).
LAST_DRIVER_FOR_CC: tuple[tuple[int, int], ...] = ((50, 470), (75, 580))  # (first cc NOT covered, branch)


def last_driver_for(cc: int) -> int | None:
    """The newest driver branch a GPU of capability ``cc`` can run; None when no ceiling is known."""
    for below, branch in LAST_DRIVER_FOR_CC:
        if cc < below:
            return branch
    return None


ARCH_NAMES = (
    (30, "Kepler"), (50, "Maxwell"), (60, "Pascal"), (70, "Volta"), (75, "Turing"),
    (80, "Ampere"), (89, "Ada Lovelace"), (90, "Hopper"), (100, "Blackwell"), (130, "?"),
)


def arch_name(cc: int) -> str:
    name = "Kepler"
    for start, label in ARCH_NAMES:
        if cc >= start:
            name = label
    return name


# Xid codes that mean the GPU or its memory is failing, not that a program has a bug.
# Source: NVIDIA "Xid Errors" (docs.nvidia.com/deploy/xid-errors): 48 double-bit ECC,
# 63/64 ECC page retirement / row remapping, 74 NVLink, 79 fallen off the bus,
# 92 high single-bit ECC rate, 94/95 contained/uncontained ECC, 119/120 GSP errors.
FAILING_XIDS: dict[int, str] = {
    48: "double-bit ECC error",
    63: "ECC page retirement or row remapping event",
    64: "ECC page retirement or row remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}

SHM_MIN_BYTES = 512 * 1024 * 1024  # docker's default is 64 MiB; workers need far more


def parse_version(text: object) -> tuple[int, ...] | None:
    """``"550.54.14"`` -> ``(550, 54, 14)``; None for anything that is not a version."""
    if not isinstance(text, str):
        return None
    m = re.match(r"\s*(\d+(?:\.\d+)*)", text)
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def cuda_pair(text: object) -> tuple[int, int] | None:
    """``"12.8"`` -> ``(12, 8)``; an int like 12040 (cuDriverGetVersion) -> ``(12, 4)``."""
    if isinstance(text, int) and not isinstance(text, bool) and text > 1000:
        return (text // 1000, (text % 1000) // 10)
    v = parse_version(text)
    if v is None or len(v) < 2:
        return None
    return (v[0], v[1])


def fmt_version(v: tuple[int, ...]) -> str:
    # NVIDIA pads every part after the branch to two digits: 450.80.02, 496.04.
    return ".".join(f"{p:02d}" if i else str(p) for i, p in enumerate(v))


def toolkit_driver(cuda: tuple[int, int], windows: bool) -> tuple[int, ...] | None:
    """The driver the CUDA ``cuda`` toolkit ships with; for an unknown minor, the next known one."""
    table = TOOLKIT_DRIVER_WINDOWS if windows else TOOLKIT_DRIVER_LINUX
    if cuda in table:
        return table[cuda]
    later = sorted(k for k in table if k[0] == cuda[0] and k > cuda)
    return table[later[0]] if later else None


def compat_floor(major: int, windows: bool) -> tuple[int, ...] | None:
    return (MINOR_COMPAT_FLOOR_WINDOWS if windows else MINOR_COMPAT_FLOOR_LINUX).get(major)


def max_cuda_for_driver(driver: tuple[int, ...], windows: bool) -> tuple[int, int] | None:
    """The newest CUDA toolkit whose own driver is at or below ``driver``."""
    table = TOOLKIT_DRIVER_WINDOWS if windows else TOOLKIT_DRIVER_LINUX
    ok = [k for k, need in table.items() if driver >= need]
    return max(ok) if ok else None


def parse_arch(entry: str) -> tuple[int, str] | None:
    """``"sm_86"`` -> ``(86, "sm")``; ``"compute_90"`` -> ``(90, "compute")``; ``sm_90a`` -> ``(90, "sm_a")``."""
    m = re.fullmatch(r"(sm|compute)_(\d+)([af]?)", entry.strip())
    if not m:
        return None
    kind = m.group(1) + (f"_{m.group(3)}" if m.group(3) else "")
    return int(m.group(2)), kind


def code_runs_on(entry: str, cc: int) -> bool:
    """Whether one arch-list entry gives a device of capability ``cc`` (e.g. 86) a kernel.

    A cubin for sm_XY runs on the same major with minor >= Y (binary compatibility;
    Jetson iGPUs excepted); sm_XYa only on exactly X.Y; sm_XYf on the same family
    (major) at or above X.Y; PTX (compute_XY) is JIT-compiled on X.Y and anything
    newer. Source: CUDA C++ Programming Guide, "Binary Compatibility" and
    "PTX Compatibility"; the iGPU exclusions follow DEVICE_REQUIREMENT in
    torch/cuda/__init__.py.
    """
    parsed = parse_arch(entry)
    if parsed is None:
        return False
    code, kind = parsed
    if kind.startswith("compute"):
        return cc >= code
    if kind == "sm_a":
        return cc == code
    if code in CC_ALIASES:
        return cc in CC_ALIASES[code]
    if code in INTEGRATED_CC or cc in INTEGRATED_CC:
        return cc == code
    return cc // 10 == code // 10 and cc % 10 >= code % 10


def arch_list_runs_on(arch_list: list[str], cc: int) -> bool:
    return any(code_runs_on(a, cc) for a in arch_list)


def flavours_for(cc: int, machine: str) -> list[str]:
    """PyTorch CUDA flavours (newest first) that ship a kernel for capability ``cc`` on ``machine``."""
    key = "aarch64" if machine.lower() in ("aarch64", "arm64") else "x86_64"
    out = []
    for flavour in FLAVOUR_ORDER:
        archs = FLAVOUR_ARCHS[flavour].get(key, ())
        if arch_list_runs_on([f"sm_{a}" for a in archs], cc):
            out.append(flavour)
    return out


def flavour_cuda(flavour: str) -> tuple[int, int]:
    digits = flavour[2:]
    return (int(digits[:-1]), int(digits[-1]))


def flavour_label(flavour: str) -> str:
    first, last = FLAVOUR_TORCH[flavour]
    span = f"torch {first}+" if last is None else f"torch {first}-{last}"
    return f"{flavour} ({span})"


def pip_command(flavour: str) -> str:
    return f"pip install --force-reinstall torch --index-url {INDEX_URL.format(flavour=flavour)}"
