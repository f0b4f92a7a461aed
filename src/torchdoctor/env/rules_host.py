"""Environment rules about the host: driver module, container, visibility, WSL, MIG, health, shm, fork."""

from __future__ import annotations

import re

from torchdoctor.env import knowledge as K
from torchdoctor.env.advice import container_gpu_flag, driver_branch_for, gpu_ccs
from torchdoctor.env.facts import Facts
from torchdoctor.env.visible import visible_count
from torchdoctor.findings import Finding

_NO_DRIVER = re.compile(r"found no nvidia driver|nvidia-smi has failed because it couldn't communicate with the nvidia driver", re.I)


def no_driver(f: Facts) -> list[Finding]:
    """TD007: an NVIDIA GPU on the PCI bus but no NVIDIA kernel module."""
    if not f.linux or f.bool("is_wsl"):
        return []
    pci = f.int("pci_nvidia_devices")
    loaded = f.nvidia_module_loaded
    if not pci or loaded is True or (loaded is None and not _NO_DRIVER.search(f.init_text)):
        return []
    nouveau = "nouveau" in f.modules
    why = "the nouveau driver has it" if nouveau else "no NVIDIA kernel module is loaded"
    host = " on the host" if f.bool("in_container") else ""
    fix = f"install the NVIDIA driver{host}, {driver_branch_for(gpu_ccs(f))} (Ubuntu: sudo ubuntu-drivers install)"
    fix += ", blacklist nouveau and reboot" if nouveau else "; if it is installed, `sudo modprobe nvidia` says why it does not load (Secure Boot needs a signed module)"
    return [Finding("TD007", f"{pci} NVIDIA GPU(s) on the PCI bus, but {why}{host}", fix=fix)]


def container_without_gpu(f: Facts) -> list[Finding]:
    """TD008: a container on a GPU host, started without the GPU (or without its driver libraries)."""
    if not f.bool("in_container") or not f.linux:
        return []
    host_gpu = bool(f.int("pci_nvidia_devices")) or f.nvidia_module_loaded is True or bool(f.bool("proc_driver_present"))
    nvd = f.env("NVIDIA_VISIBLE_DEVICES")
    if f.bool("dev_nvidia_present") is False and host_gpu:
        detail = f" (NVIDIA_VISIBLE_DEVICES={nvd!r})" if nvd in ("void", "none", "") else ""
        return [Finding("TD008", f"this container has no /dev/nvidia* devices, though the host has an NVIDIA GPU{detail}", fix=container_gpu_flag(f))]
    if f.bool("dev_nvidia_present") and f.bool("libcuda_loadable") is False and not f.bool("is_wsl"):
        caps = f.env("NVIDIA_DRIVER_CAPABILITIES")
        detail = f" (NVIDIA_DRIVER_CAPABILITIES={caps!r})" if caps is not None else ""
        return [Finding(
            "TD008",
            f"this container has the GPU devices but not the driver library libcuda.so.1{detail}",
            fix="set NVIDIA_DRIVER_CAPABILITIES=compute,utility (or all) and start the container with the NVIDIA runtime: " + container_gpu_flag(f),
        )]
    return []


def visible_devices(f: Facts) -> list[Finding]:
    """TD010: CUDA_VISIBLE_DEVICES hides every GPU."""
    cvd = f.cvd
    if cvd is None or not f.nvidia_present:
        return []
    if any(g.mig_mode.lower() == "enabled" for g in f.gpus) and not cvd.startswith("MIG-") and cvd.strip():
        return []  # TD017 says what MIG needs
    uuids = [g.uuid for g in f.gpus if g.uuid] or None
    vis = visible_count(cvd, f.nvidia_count, uuids)
    if vis.count != 0:
        return []
    n = f.nvidia_count
    ids = ",".join(str(i) for i in range(n)) if n else "0"
    return [Finding(
        "TD010",
        f"CUDA_VISIBLE_DEVICES={cvd!r} hides every GPU: {vis.reason}",
        fix=f"unset CUDA_VISIBLE_DEVICES, or list devices that exist, e.g. CUDA_VISIBLE_DEVICES={ids}",
    )]


def device_order(f: Facts) -> list[Finding]:
    """TD011: GPUs of different models and CUDA's fastest-first numbering."""
    gpus = f.gpus
    names = [g.name for g in gpus]
    if len(set(names)) < 2 or (f.str("cuda_device_order") or "").strip().upper() == "PCI_BUS_ID":
        return []
    seen = f.list("torch_device_names")
    if seen and f.cvd is None and seen == names:
        return []  # fastest-first happens to agree with the PCI order here
    return [Finding(
        "TD011",
        f"{len(gpus)} different GPUs ({', '.join(f'{g.index}: {g.name}' for g in gpus)}) and CUDA_DEVICE_ORDER is not PCI_BUS_ID: cuda:N is not nvidia-smi's GPU N",
        fix="export CUDA_DEVICE_ORDER=PCI_BUS_ID before starting Python, so that CUDA numbers GPUs as nvidia-smi does",
    )]


_MISMATCH = re.compile(r"driver/library version mismatch|system has unsupported display driver / cuda driver combination|error 803", re.I)


def driver_library_mismatch(f: Facts) -> list[Finding]:
    """TD012: the kernel module and the user-space driver libraries are different versions."""
    if f.bool("is_wsl"):
        return []
    kernel = K.parse_version(f.str("proc_driver_version"))
    user = _user_space_version(f)
    fix = "reboot, or reload the module: sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia"
    if kernel and user and kernel != user:
        return [Finding("TD012", f"the NVIDIA kernel module is {K.fmt_version(kernel)} but the user-space driver libraries are {K.fmt_version(user)} (an upgrade without a reboot)", fix=fix)]
    m = _MISMATCH.search(f.init_text)
    if m:
        if "803" in m.group(0) or "unsupported display" in m.group(0).lower():
            fix = "the libcuda.so in use does not match the kernel driver: remove a CUDA forward-compat library (cuda-compat, /usr/local/cuda/compat) from LD_LIBRARY_PATH on a GeForce GPU, or " + fix
        return [Finding("TD012", f"driver/library version mismatch: {m.group(0)}", fix=fix)]
    return []


def _user_space_version(f: Facts) -> tuple[int, ...] | None:
    v = K.parse_version(f.str("nvml_lib_version"))
    if v and len(v) >= 3 and v[0] < 100:  # "12.550.120": CUDA major, then the driver
        return v[1:]
    m = re.search(r"\.so\.(\d+\.\d+(?:\.\d+)?)$", f.text("libcuda_path"))
    return K.parse_version(m.group(1)) if m else None


_WSL_PKG = re.compile(r"^(nvidia-driver|libnvidia-compute|nvidia-dkms|cuda-drivers|nvidia-utils|xserver-xorg-video-nvidia)")


def wsl_driver(f: Facts) -> list[Finding]:
    """TD013: WSL 1 (no GPU), or a Linux NVIDIA driver inside WSL 2 shadowing the Windows one."""
    if not f.bool("is_wsl"):
        return []
    if f.int("wsl_version") == 1:
        return [Finding("TD013", f"this is WSL 1 ({f.text('osrelease') or 'kernel without GPU support'}): it has no GPU access", fix="in PowerShell: wsl --set-version <distro> 2 (WSL 2 passes the GPU through)")]
    pkgs = [p for p in f.list("linux_driver_pkgs") if _WSL_PKG.match(p)]
    libcuda = f.text("libcuda_path")
    shadow = bool(libcuda) and not libcuda.startswith("/usr/lib/wsl/")
    if pkgs or shadow:
        what = f"Linux NVIDIA driver packages are installed inside WSL ({', '.join(pkgs[:3])})" if pkgs else f"libcuda.so.1 resolves to {libcuda}, not the Windows driver's /usr/lib/wsl/lib"
        return [Finding("TD013", f"{what}: they shadow the Windows driver that WSL 2 must use", fix="sudo apt purge 'nvidia-driver-*' 'libnvidia-compute-*' 'nvidia-utils-*' inside WSL (keep only the Windows driver; for nvcc install the cuda-toolkit-X-Y 'wsl-ubuntu' package)")]
    return []


def macos(f: Facts) -> list[Finding]:
    """TD016: macOS has no CUDA; MPS is the GPU path (not under Rosetta)."""
    if f.platform != "darwin":
        return []
    if f.int("proc_translated") == 1:
        return [Finding("TD016", f"macOS: {f.this} Python is an x86_64 build running under Rosetta, which cannot use the Apple GPU (MPS)", fix="install a native arm64 Python (python.org universal2 installer, or an arm64 conda/uv Python), then pip install torch")]
    if f.bool("mps_available"):
        return [Finding("TD016", f"macOS: no CUDA {f.here}; the Apple GPU is available through MPS", fix="use device 'mps' (torchdoctor.env.pick_device() picks it), not 'cuda'")]
    mv = K.parse_version(f.str("macos_version"))
    if mv and mv < (12, 3):
        return [Finding("TD016", f"macOS {f.text('macos_version')}: no CUDA, and MPS needs macOS 12.3 or newer", fix="upgrade macOS to 12.3+ to train on the GPU with device 'mps'; otherwise training runs on the CPU")]
    if f.bool("mps_built") is False:
        return [Finding("TD016", "macOS: no CUDA, and this torch build has no MPS support", fix="pip install --force-reinstall torch (the macOS arm64 wheels include MPS)")]
    return [Finding("TD016", "macOS: no CUDA and no MPS device available: training will run on the CPU", fix="use device 'cpu' (or 'mps' on an Apple-silicon Mac)")]


def mig(f: Facts) -> list[Finding]:
    """TD017: MIG mode on, but no MIG instance, or CUDA_VISIBLE_DEVICES not naming one."""
    out = []
    for g in f.gpus:
        if g.mig_mode.lower() != "enabled":
            continue
        if g.mig_instances == 0:
            out.append(Finding("TD017", f"{g.label} is in MIG mode but has no MIG instance: CUDA sees no device on it", fix=f"create instances: sudo nvidia-smi mig -i {g.index} -cgi <profile, e.g. 1g.10gb> -C, then pick one with CUDA_VISIBLE_DEVICES=MIG-<uuid> (nvidia-smi -L), or disable MIG: sudo nvidia-smi -i {g.index} -mig 0"))
        elif f.cvd and not f.cvd.startswith("MIG-") and f.bool("cuda_available") is False:
            out.append(Finding("TD017", f"{g.label} is in MIG mode and CUDA_VISIBLE_DEVICES={f.cvd!r} names no MIG instance: CUDA sees no device", fix="set CUDA_VISIBLE_DEVICES=MIG-<uuid> of an instance (listed by nvidia-smi -L)"))
    return out


_UNKNOWN = re.compile(r"cuda unknown error|cudaErrorUnknown|CUDA_ERROR_UNKNOWN|error 999", re.I)


def unknown_error(f: Facts) -> list[Finding]:
    """TD018: 'CUDA unknown error' (typically after suspend/resume: nvidia_uvm needs reloading)."""
    fix = "sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm (or reboot); to keep it from recurring after suspend, enable nvidia-suspend.service / nvidia-resume.service"
    if _UNKNOWN.search(f.init_text):
        return [Finding("TD018", "CUDA initialisation fails with 'CUDA unknown error' (typical after a suspend/resume)", fix=fix)]
    mods = f.modules
    if f.linux and not f.bool("is_wsl") and "nvidia" in mods and "nvidia_uvm" not in mods and f.bool("cuda_available") is False and f.bool("dev_nvidia_uvm_present") is False:
        return [Finding("TD018", "the nvidia kernel module is loaded but nvidia_uvm is not (no /dev/nvidia-uvm): CUDA cannot initialise", fix="sudo modprobe nvidia_uvm (or reboot)")]
    return []


def stub_library(f: Facts) -> list[Finding]:
    """TD019: the link-time stub libcuda.so is what the loader finds."""
    libcuda = f.text("libcuda_path")
    stub = f.str("ld_stub_libcuda") or (libcuda if "/stubs/" in libcuda else "")
    if not stub:
        stub = next((p for p in f.text("ld_library_path").split(":") if p.rstrip("/").endswith("/stubs") and "cuda" in p.lower()), "")
    if not stub and "stub library" in f.init_text.lower():
        stub = "a stubs/ directory"
    if not stub:
        return []
    return [Finding("TD019", f"the CUDA driver stub library is on the loader path ({stub}): it only serves linking, and CUDA fails with 'CUDA driver is a stub library'", fix=f"remove {stub.rsplit('/libcuda', 1)[0]} from LD_LIBRARY_PATH (and from /etc/ld.so.conf.d); the real libcuda.so.1 comes with the driver")]


def compute_mode(f: Facts) -> list[Finding]:
    """TD020: a GPU in prohibited (or busy exclusive-process) compute mode."""
    busy = "busy or unavailable" in f.init_text.lower()
    out = []
    for g in f.gpus:
        mode = g.compute_mode.lower().replace(" ", "_")
        if mode == "prohibited" or (mode.startswith("exclusive") and busy):
            why = "prohibited: no process may use it" if mode == "prohibited" else f"{g.compute_mode}: another process holds it"
            out.append(Finding("TD020", f"{g.label} is in compute mode {why}", fix=f"sudo nvidia-smi -i {g.index} -c DEFAULT (on a shared cluster: ask the scheduler for the GPU, or find the holder with nvidia-smi)"))
    if busy and not out:
        out.append(Finding("TD020", "CUDA reports 'all CUDA-capable devices are busy or unavailable' (exclusive-process or prohibited compute mode)", fix="check `nvidia-smi -q -d COMPUTE`; sudo nvidia-smi -c DEFAULT, or wait for the process holding the GPU"))
    return out


_LOST = re.compile(r"fallen off the bus|gpu is lost|uncorrectable ecc|unable to determine the device handle for gpu[^:]*: (?:gpu is lost|unknown error)", re.I)


def failing_gpu(f: Facts) -> list[Finding]:
    """TD021: Xid 79 and friends, uncorrectable ECC errors, a lost GPU."""
    reasons = [f"Xid {x} ({K.FAILING_XIDS[x]})" for x in sorted({int(x) for x in f.list("dmesg_xid") if str(x).isdigit()}) if x in K.FAILING_XIDS]
    reasons += [f"{g.label}: {g.ecc_uncorrected} uncorrectable ECC error(s)" for g in f.gpus if g.ecc_uncorrected]
    m = _LOST.search(f.init_text)
    if m:
        reasons.append(m.group(0))
    if not reasons:
        return []
    return [Finding("TD021", f"a GPU is failing or lost: {'; '.join(reasons)}", fix="stop jobs on it, reset it (sudo nvidia-smi -r -i <n>) or reboot; if it recurs check power, cooling and PCIe seating, and have the GPU replaced")]


def shared_memory(f: Facts) -> list[Finding]:
    """TD022: /dev/shm too small for DataLoader workers."""
    shm = f.int("shm_bytes")
    if not f.linux or shm is None or shm >= K.SHM_MIN_BYTES:
        return []
    if f.bool("in_container"):
        fix = "start the container with --shm-size=8g (or --ipc=host); in Kubernetes mount an emptyDir with medium: Memory at /dev/shm"
    else:
        fix = "sudo mount -o remount,size=8G /dev/shm, or use fewer DataLoader workers"
    return [Finding("TD022", f"/dev/shm is only {shm // (1024 * 1024)} MiB: DataLoader workers will die with 'bus error' / 'unable to write to file </torch_...>'", fix=fix)]


_FORK = re.compile(r"cannot re-initialize cuda in forked subprocess", re.I)


def fork_after_init(f: Facts) -> list[Finding]:
    """TD023: CUDA was initialised before a fork."""
    if not _FORK.search(f.init_text):
        return []
    method = f.str("mp_start_method")
    how = f" (start method: {method})" if method else ""
    return [Finding("TD023", f"CUDA was initialised before a fork{how}: 'Cannot re-initialize CUDA in forked subprocess'", fix="use the spawn start method (torch.multiprocessing.set_start_method('spawn') or DataLoader(multiprocessing_context='spawn')), and keep CUDA out of code that runs before workers fork")]


RULES = (no_driver, container_without_gpu, visible_devices, device_order, driver_library_mismatch, wsl_driver, macos, mig, unknown_error, stub_library, compute_mode, failing_gpu, shared_memory, fork_after_init)
