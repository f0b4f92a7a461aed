"""Environment rules about the PyTorch build: import, CPU/ROCm flavour, driver version, kernels, installs."""

from __future__ import annotations

import re

from torchdoctor.env import knowledge as K
from torchdoctor.env.advice import (
    driver_branch_for, driver_ceiling, driver_needed, gpu_ccs, install_hint, recommend_flavour, unknown_driver_note,
)
from torchdoctor.env.facts import Facts
from torchdoctor.findings import Finding


def torch_not_importable(f: Facts) -> list[Finding]:
    """TD001: ``import torch`` fails; say why and what usually cures that error."""
    err = f.text("torch_import_error").strip()
    if not err:
        return []
    last = err.splitlines()[-1].strip()
    low = err.lower()
    if "no module named 'torch'" in low or 'no module named "torch"' in low:
        fix = f"PyTorch is not installed for this Python: {install_hint(f, gpu_ccs(f)) if f.nvidia_present else 'pip install torch'}"
    elif re.search(r"lib(cudnn|cublas|cusparse|nccl|cudart|nvjitlink|cufft|curand|cusolver)", low) or "undefined symbol" in low:
        ld = f.text("ld_library_path")
        extra = f" and drop the CUDA directories from LD_LIBRARY_PATH ({ld})" if ld else ""
        fix = f"the CUDA libraries this build bundles do not load: reinstall it in a clean environment ({K.pip_command(recommend_flavour(f, gpu_ccs(f)) or 'cu126')}){extra}"
    elif "glibc" in low:
        fix = "this wheel needs a newer glibc than this OS has: use a newer OS image (manylinux_2_28: glibc >= 2.28) or conda-forge's pytorch"
    elif "numpy" in low:
        fix = "a NumPy that this torch was not built against: pip install 'numpy<2', or upgrade torch"
    else:
        fix = "reinstall PyTorch in a clean virtual environment: pip install --force-reinstall torch"
    return [Finding("TD001", f"`import torch` fails: {last}", fix=fix)]


def cpu_only_build(f: Facts) -> list[Finding]:
    """TD002: a CPU wheel on a machine with an NVIDIA GPU."""
    if not f.torch_ok or f.str("torch_cuda") or f.str("torch_hip") or f.platform == "darwin":
        return []
    conda_cpu = any(p.split()[0] == "pytorch" and "cpu" in p.split()[-1] for p in f.list("conda_pkgs") if len(p.split()) == 3)
    if "torch_cuda" not in f.raw and "+cpu" not in f.text("torch_version") and not conda_cpu:
        return []  # the snapshot does not say which build this is
    if not f.nvidia_present:
        return []
    gpus = f.gpus
    what = gpus[0].label if gpus else f"{f.nvidia_count} NVIDIA GPU(s)"
    conda = any(p.split()[0] in ("pytorch", "pytorch-cpu", "cpuonly") for p in f.list("conda_pkgs") if p.split())
    fix = install_hint(f, gpu_ccs(f))
    if conda:
        fix = "conda remove cpuonly pytorch, then " + fix
    return [Finding("TD002", f"torch {f.text('torch_version')} is a CPU-only build, but {f.this} machine has {what}", fix=fix)]


_TOO_OLD = re.compile(r"driver on your system is too old \(found version (\d+)\)", re.I)
_INSUFFICIENT = re.compile(r"driver version is insufficient for CUDA runtime version", re.I)


def driver_version(f: Facts) -> list[Finding]:
    """TD003 (too old) and TD004 (old, but within CUDA minor-version compatibility)."""
    cuda = f.torch_cuda
    text = f.init_text
    m = _TOO_OLD.search(text)
    if cuda is None and (m or _INSUFFICIENT.search(text)) and _maybe_cuda_build(f):
        return [_too_old_unknown_build(f, K.cuda_pair(int(m.group(1))) if m else f.drv_cuda)]
    if not f.torch_ok or cuda is None:
        return []
    found = K.cuda_pair(int(m.group(1))) if m else None
    windows = f.windows_driver_numbers
    need = K.toolkit_driver(cuda, windows)
    floor = K.compat_floor(cuda[0], windows)
    driver = f.driver
    where = "Windows driver (WSL uses it)" if f.bool("is_wsl") else "driver"
    if driver is not None and need is not None:
        if driver >= need:
            return []
        if floor is not None and driver >= floor and not m and not _INSUFFICIENT.search(text):
            return [Finding(
                "TD004",
                f"NVIDIA {where} {K.fmt_version(driver)} is older than the {K.fmt_version(need)} that CUDA "
                f"{cuda[0]}.{cuda[1]} (torch {f.text('torch_version')}) ships with: it runs only by minor-version compatibility",
                fix=_compat_fix(f, f"fine for most training; to avoid PTX-JIT and 'requires newer driver' errors, upgrade to >= {K.fmt_version(need)} (R{K.RECOMMENDED_BRANCH.get(cuda[0], need[0])} branch)", need),
            )]
        return [_too_old(f, cuda, f"NVIDIA {where} {K.fmt_version(driver)}")]
    drv = found or f.drv_cuda
    if drv is not None and drv < cuda:
        if drv[0] == cuda[0] and drv[0] >= 11 and not m and not _INSUFFICIENT.search(text):
            return [Finding(
                "TD004",
                f"the NVIDIA driver supports CUDA {drv[0]}.{drv[1]}, older than this build's CUDA {cuda[0]}.{cuda[1]}: it runs only by minor-version compatibility",
                fix=_compat_fix(f, f"upgrade the driver to >= {K.fmt_version(need) if need else 'the ' + str(cuda) + ' one'} to avoid PTX-JIT and 'requires newer driver' errors", need),
            )]
        return [_too_old(f, cuda, f"the NVIDIA {where}, which supports CUDA {drv[0]}.{drv[1]} only,")]
    if m or _INSUFFICIENT.search(text):
        return [_too_old(f, cuda, f"the NVIDIA {where}")]
    return []


def _compat_fix(f: Facts, fix: str, need: tuple[int, ...] | None) -> str:
    """The TD004 fix, unless a GPU here cannot take the driver it names (Kepler stops at R470)."""
    ceiling = driver_ceiling(f)
    if ceiling and need and ceiling[0] < need[0]:
        return f"nothing to upgrade: {ceiling[1]} is supported by drivers up to R{ceiling[0]} only, so minor-version compatibility is as far as it goes (fine for most training)"
    return fix


def _too_old(f: Facts, cuda: tuple[int, int], subject: str) -> Finding:
    windows = f.windows_driver_numbers
    floor = K.compat_floor(cuda[0], windows)
    branch = K.RECOMMENDED_BRANCH.get(cuda[0])
    need = driver_needed(f, cuda) or (f"driver >= {K.fmt_version(floor)}" if floor else "a newer driver")
    upgrade = f"upgrade the NVIDIA {'Windows ' if f.bool('is_wsl') or windows else ''}driver ({need}"
    upgrade += f"; R{branch} branch)" if branch and "branch" not in need else ")"
    ceiling = driver_ceiling(f)
    if ceiling and floor and ceiling[0] < floor[0]:
        upgrade = f"{ceiling[1]} cannot run a driver newer than R{ceiling[0]}, too old for CUDA {cuda[0]}.x: install a build for an older CUDA"
    alt = recommend_flavour(f, gpu_ccs(f))
    if alt and K.flavour_cuda(alt) < cuda and not driver_needed(f, K.flavour_cuda(alt)):
        upgrade += f", or keep the driver and install the {K.flavour_label(alt)} build: {K.pip_command(alt)}"
    return Finding(
        "TD003",
        f"{subject} is too old for CUDA {cuda[0]}.{cuda[1]}, which torch {f.text('torch_version')} was built with",
        fix=upgrade,
    )


def _too_old_unknown_build(f: Facts, drv: tuple[int, int] | None) -> Finding:
    """TD003 from CUDA's own message when the snapshot does not say which CUDA torch was built with."""
    driver = f" {K.fmt_version(f.driver)}" if f.driver else ""
    supports = f" (it supports CUDA {drv[0]}.{drv[1]})" if drv else ""
    windows = f.windows_driver_numbers
    upgrade = f"upgrade the NVIDIA {'Windows ' if windows else ''}driver ({driver_branch_for(gpu_ccs(f))})"
    alt = recommend_flavour(f, gpu_ccs(f)) if (f.driver or drv) else None
    if alt and not driver_needed(f, K.flavour_cuda(alt)) and (drv is None or _drv_runs(drv, K.flavour_cuda(alt))):
        upgrade += f", or keep the driver and install the {K.flavour_label(alt)} build: {K.pip_command(alt)}"
    return Finding(
        "TD003",
        f"the NVIDIA driver{driver}{supports} is too old for the CUDA version {f.this} PyTorch was built with",
        fix=upgrade,
    )


def _drv_runs(drv: tuple[int, int], cuda: tuple[int, int]) -> bool:
    """Whether a driver supporting CUDA ``drv`` runs a build for ``cuda`` (same major: minor-version compatibility)."""
    return cuda <= drv or (cuda[0] == drv[0] and cuda[0] >= 11)


_WARN_OLD = re.compile(r"(?P<name>[^\n]+?) with CUDA capability sm_(?P<cc>\d+) is not compatible")
_WARN_NEW = re.compile(r"Found GPU(?P<idx>\d+) (?P<name>.+?) which is of (?:cuda )?compute capability \(CC\) (?P<ma>\d+)\.(?P<mi>\d+)", re.I)
_WARN_ARCHS = re.compile(r"supports CUDA capabilities ((?:(?:sm|compute)_\d+[af]? ?)+)")


def kernels_for_gpus(f: Facts) -> list[Finding]:
    """TD005 (GPU newer than every kernel) and TD006 (GPU older than the build supports)."""
    if not _maybe_cuda_build(f):
        return []
    arch_list = [a for a in f.list("arch_list") if K.parse_arch(a)]
    text = f.init_text
    if not arch_list:
        m = _WARN_ARCHS.search(text)
        arch_list = m.group(1).split() if m else []
    devices = [(g.label, g.cc) for g in f.gpus if g.cc is not None]
    if not devices:
        devices = [(f"{m.group('name').strip()} (compute capability {int(m.group('cc')) // 10}.{int(m.group('cc')) % 10})", int(m.group("cc"))) for m in _WARN_OLD.finditer(text)]
        devices += [(f"GPU {m.group('idx')} {m.group('name')} (compute capability {m.group('ma')}.{m.group('mi')})", int(m.group("ma")) * 10 + int(m.group("mi"))) for m in _WARN_NEW.finditer(text)]
    if not arch_list:
        return []
    codes = sorted({K.parse_arch(a)[0] for a in arch_list})  # type: ignore[index]
    out: list[Finding] = []
    seen: set[int] = set()
    for label, cc in devices:
        if cc in seen or K.arch_list_runs_on(arch_list, cc):
            continue
        seen.add(cc)
        out.append(_kernel_finding(f, label, cc, arch_list, codes))
    return out


def _maybe_cuda_build(f: Facts) -> bool:
    """False only when the snapshot says torch is broken or a CPU/ROCm build; unknown stays possible.

    A snapshot pasted from a bug report often lacks torch_version or torch_cuda while
    PyTorch's own warning (or the arch list) still proves a CUDA build.
    """
    if f.str("torch_import_error") or f.str("torch_hip"):
        return False
    return bool(f.str("torch_cuda")) if "torch_cuda" in f.raw else True


def _build_label(f: Facts, arch_list: list[str]) -> str:
    version = f"torch {f.text('torch_version')}" if f.str("torch_version") else "this PyTorch"
    cuda = f"CUDA {f.text('torch_cuda')}, " if f.str("torch_cuda") else ""
    return f"{version} ({cuda}kernels for {' '.join(arch_list)})"


def _kernel_finding(f: Facts, label: str, cc: int, arch_list: list[str], codes: list[int]) -> Finding:
    build = _build_label(f, arch_list)
    if cc in K.INTEGRATED_CC:
        fix = "Jetson/DRIVE GPUs need NVIDIA's PyTorch wheels for JetPack (developer.nvidia.com, 'PyTorch for Jetson'); PyPI builds do not target them"
    else:
        flavours = [fl for fl in K.flavours_for(cc, f.text("machine") or "x86_64") if fl in K.CURRENT_FLAVOURS or fl == "cu118"]
        fl = recommend_flavour(f, [cc]) if flavours else None
        if fl is None:
            fix = f"no current PyTorch wheel ships kernels for compute capability {cc // 10}.{cc % 10} ({K.arch_name(cc)}): build PyTorch from source with TORCH_CUDA_ARCH_LIST={cc // 10}.{cc % 10}, or use a newer GPU"
        else:
            need = driver_needed(f, K.flavour_cuda(fl))
            first = K.FIRST_DRIVER_FOR_CC.get(cc)
            if f.driver and first and f.driver[0] < first and not f.windows_driver_numbers:
                need = f"an R{first} or newer driver: {f.driver[0]} does not know this GPU"
            fix = f"install the {K.flavour_label(fl)} build: {K.pip_command(fl)}" + (f" (it needs {need})" if need else unknown_driver_note(f, fl))
    if cc > max(codes) or (cc >= min(codes) and any(c // 10 == cc // 10 for c in codes)):
        what = "is newer than every kernel in" if cc > max(codes) else "has no kernel that runs on it in"
        msg = f"{label} {what} {build}: 'no kernel image is available for execution on the device'"
        return Finding("TD005", msg, fix=fix)
    # Older than every kernel, or a generation the build skipped while keeping older and
    # newer ones (the cu111 nightlies kept sm_50 and sm_70 but dropped Pascal:
    # https://github.com/pytorch/pytorch/issues/53164): either way the architecture was dropped.
    older = "is older than" if cc < min(codes) else "is a generation left out of"
    msg = f"{label} ({K.arch_name(cc)}) {older} {build}: its architecture was dropped from this build"
    return Finding("TD006", msg, fix=fix)


def conflicting_installs(f: Facts) -> list[Finding]:
    """TD014: torch from pip and conda at once (or two pip copies), or conda's cpuonly on a GPU machine."""
    out: list[Finding] = []
    pip_torch = sorted({p.split()[1] for p in f.list("pip_dists") if len(p.split()) >= 2 and p.split()[0].lower() == "torch"})
    conda_torch = sorted({p.split()[1] for p in f.list("conda_pkgs") if len(p.split()) >= 2 and p.split()[0] in ("pytorch", "pytorch-gpu", "pytorch-cpu")})
    using = f" (Python imports {f.text('torch_file')})" if f.str("torch_file") else ""
    if pip_torch and conda_torch:
        out.append(Finding(
            "TD014",
            f"torch {', '.join(pip_torch)} from pip and pytorch {', '.join(conda_torch)} from conda are installed in the same environment{using}",
            fix="keep one: `conda remove pytorch` then reinstall with pip (the pytorch conda channel stopped at 2.5), or `pip uninstall torch` and keep conda's",
        ))
    elif len(pip_torch) > 1:
        out.append(Finding(
            "TD014",
            f"several torch installs are on the path at once (versions {', '.join(pip_torch)}){using}",
            fix="pip uninstall torch until none is left (check ~/.local too: `python -m pip list --user`), then install one build",
        ))
    cpuonly = [p for p in f.list("conda_pkgs") if p.split() and p.split()[0] == "cpuonly"]
    if cpuonly and f.nvidia_present:
        out.append(Finding(
            "TD014",
            f"conda's `cpuonly` package is installed ({cpuonly[0]}): it pins the CPU build of PyTorch on {f.this} GPU machine",
            fix="conda remove cpuonly pytorch, then " + install_hint(f, gpu_ccs(f)),
        ))
    return out


def wrong_vendor_build(f: Facts) -> list[Finding]:
    """TD015: a ROCm build on an NVIDIA machine, or a CUDA build on an AMD (ROCm) one."""
    if not f.torch_ok:
        return []
    hip, cuda = f.str("torch_hip"), f.str("torch_cuda")
    if hip and f.nvidia_present and not f.amd_present:
        return [Finding(
            "TD015",
            f"torch {f.text('torch_version')} is a ROCm (HIP {hip}) build, but {f.this} machine's GPUs are NVIDIA",
            fix=install_hint(f, gpu_ccs(f)),
        )]
    rocm = bool(f.bool("dev_kfd_present")) or bool(f.bool("rocm_present"))
    if cuda and not hip and f.amd_present and rocm and not f.nvidia_present:
        return [Finding(
            "TD015",
            f"torch {f.text('torch_version')} is a CUDA {cuda} build, but {f.this} machine's GPU is AMD (ROCm)",
            fix="install the ROCm build that matches your ROCm: pip install torch --index-url https://download.pytorch.org/whl/rocmX.Y (see pytorch.org/get-started)",
        )]
    return []


RULES = (torch_not_importable, cpu_only_build, driver_version, kernels_for_gpus, conflicting_installs, wrong_vendor_build)
