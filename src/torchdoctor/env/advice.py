"""Advice shared by the environment rules: which wheel flavour, which driver branch."""

from __future__ import annotations

from torchdoctor.env import knowledge as K
from torchdoctor.env.facts import Facts


def gpu_ccs(f: Facts) -> list[int]:
    return sorted({g.cc for g in f.gpus if g.cc is not None})


def recommend_flavour(f: Facts, ccs: list[int]) -> str | None:
    """The newest flavour with kernels for every ``ccs`` that this driver runs (fully, else by compatibility)."""
    machine = f.text("machine") or "x86_64"
    candidates = [fl for fl in K.FLAVOUR_ORDER if all(fl in K.flavours_for(cc, machine) for cc in ccs)]
    if not candidates:
        return None
    driver = f.driver
    if driver is None:
        return _by_driver_cuda(f, candidates)
    windows = f.windows_driver_numbers
    # A current flavour that runs by minor-version compatibility beats an old,
    # unmaintained one that the driver fully supports.
    current = [fl for fl in candidates if fl in K.CURRENT_FLAVOURS]
    older = [fl for fl in candidates if fl not in K.CURRENT_FLAVOURS]
    for group in (current, older):
        for fl in group:
            need = K.toolkit_driver(K.flavour_cuda(fl), windows)
            if need is not None and driver >= need:
                return fl
        for fl in group:
            floor = K.compat_floor(K.flavour_cuda(fl)[0], windows)
            if floor is not None and driver >= floor:
                return fl
    return candidates[0]


def _by_driver_cuda(f: Facts, candidates: list[str]) -> str:
    """Without a driver version, the CUDA version the driver reports (cuDriverGetVersion, or the
    'found version NNNNN' of PyTorch's error) still rules out flavours: a flavour runs when its CUDA
    is not newer, or has the same major (>= 11: minor-version compatibility)."""
    drv = f.drv_cuda
    if drv is None or drv[0] < 9:  # WSL without a driver reports 0
        return candidates[0]
    runs = [fl for fl in candidates if K.flavour_cuda(fl) <= drv or (K.flavour_cuda(fl)[0] == drv[0] >= 11)]
    current = [fl for fl in runs if fl in K.CURRENT_FLAVOURS]
    return (current or runs or candidates)[0]


def install_hint(f: Facts, ccs: list[int]) -> str:
    """``pip install ... cu<NNN>`` for this machine's GPUs, with the driver it needs if this one is too old."""
    fl = recommend_flavour(f, ccs)
    if fl is None:
        return "install a CUDA build of PyTorch from https://pytorch.org/get-started/locally/"
    hint = f"install the {K.flavour_label(fl)} build: {K.pip_command(fl)}"
    need = driver_needed(f, K.flavour_cuda(fl))
    return f"{hint} (it needs {need})" if need else hint + unknown_driver_note(f, fl)


def driver_needed(f: Facts, cuda: tuple[int, int]) -> str:
    """'' when this driver runs CUDA ``cuda``; else the driver it needs, in words."""
    driver = f.driver
    windows = f.windows_driver_numbers
    floor = K.compat_floor(cuda[0], windows)
    need = K.toolkit_driver(cuda, windows)
    if driver is None or (floor is not None and driver >= floor) or (need is not None and driver >= need):
        return ""
    branch = K.RECOMMENDED_BRANCH.get(cuda[0])
    version = K.fmt_version(need) if need else (K.fmt_version(floor) if floor else "a newer one")
    return f"driver >= {version}" + (f", e.g. the R{branch} branch" if branch else "")


def driver_ceiling(f: Facts) -> tuple[int, str] | None:
    """(branch, GPU label) of the GPU here whose driver support ends first, if any GPU has a ceiling."""
    caps = [(K.last_driver_for(g.cc), g.label) for g in f.gpus if g.cc is not None and K.last_driver_for(g.cc)]
    return min(caps) if caps else None  # type: ignore[return-value]


def unknown_driver_note(f: Facts, flavour: str) -> str:
    """' (it needs driver >= X)' when the snapshot does not tell the driver, so the advice stays checkable."""
    if f.driver is not None or f.drv_cuda is not None:
        return ""
    need = K.toolkit_driver(K.flavour_cuda(flavour), f.windows_driver_numbers)
    floor = K.compat_floor(K.flavour_cuda(flavour)[0], f.windows_driver_numbers)
    least = floor or need
    return f" (it needs an NVIDIA driver >= {K.fmt_version(least)})" if least else ""


def driver_branch_for(ccs: list[int]) -> str:
    """The driver branch to install for these GPUs (R580 is the last with Maxwell/Pascal/Volta)."""
    if ccs and min(ccs) < 50:
        return "R470 (the last branch that supports Kepler GPUs)"
    if ccs and min(ccs) < 75:
        return "R580 (the last branch that supports Maxwell, Pascal and Volta GPUs)"
    return "R580 or newer"


def container_gpu_flag(f: Facts) -> str:
    """How this kind of container is given the GPUs."""
    markers = " ".join(f.list("container_markers")).lower()
    if f.env("APPTAINER_CONTAINER") or f.env("SINGULARITY_CONTAINER") or "singularity" in markers or "apptainer" in markers:
        return "run it with `apptainer exec --nv` (or `singularity exec --nv`)"
    if "kubepods" in markers or f.env("KUBERNETES_SERVICE_HOST"):
        return "request the GPU in the pod spec (resources.limits: nvidia.com/gpu: 1) on a node with the NVIDIA device plugin"
    if "containerenv" in markers or "podman" in markers:
        return "start it with `podman run --device nvidia.com/gpu=all` (NVIDIA Container Toolkit, CDI)"
    return "start it with `docker run --gpus all` (NVIDIA Container Toolkit; in compose: deploy.resources.reservations.devices)"
