"""Builders for messages about the machine: TD002 TD003 TD005-TD008 TD010 TD012 TD018-TD020 TD022 TD023 TD101.

The environment doctor already reads CUDA's own words (its rules search the
snapshot's init warnings and errors). A message is therefore diagnosed by
handing it to ``env.diagnose`` as the init text of this machine's facts, or of
an empty snapshot when the text is all there is; the doctor's finding, which
names the GPU, the build and the wheel to install, wins over the text-only one.
"""

from __future__ import annotations

from typing import Any

from torchdoctor.explain.common import Draft, at

_MACHINE_ERRORS = ("TD001", "TD002", "TD007", "TD008", "TD010", "TD012", "TD013", "TD014", "TD015", "TD017", "TD018", "TD019", "TD020")


def doctor(hit: Any, facts: dict[str, Any] | None, codes: tuple[str, ...], text: str | None = None) -> list[Draft]:
    """The environment doctor's findings among ``codes`` for this message: on ``facts`` first, else on the text alone.

    A machine that does not show the problem (the log came from elsewhere) still
    gets what the message itself proves, which names its GPU, build or driver.
    """
    from torchdoctor.env.diagnose import diagnose

    message = text if text is not None else hit.text
    for base in ([facts] if isinstance(facts, dict) else []) + [{}]:
        raw = dict(base)
        own = raw.get("init_error") if isinstance(raw.get("init_error"), str) else ""
        raw["init_error"] = "\n".join(t for t in (own, message) if t)
        found = [(f.code, f.message, f.fix or "") for f in diagnose(raw) if f.code in codes]
        if found:
            return found
    return []


def machine_covers(facts: dict[str, Any] | None) -> bool:
    """Whether these facts show every GPU with a kernel in this machine's own build."""
    from torchdoctor.env import knowledge as K
    from torchdoctor.env.facts import Facts

    if not isinstance(facts, dict):
        return False
    f = Facts(facts)
    archs, ccs = f.list("arch_list"), [g.cc for g in f.gpus if g.cc is not None]
    return bool(archs and ccs) and all(K.arch_list_runs_on(archs, cc) for cc in ccs)


def why_no_gpu(facts: dict[str, Any]) -> str:
    """Why CUDA sees no GPU on the machine these facts describe, in a few words ('' when nothing says)."""
    from torchdoctor.env.diagnose import diagnose
    from torchdoctor.env.facts import Facts

    for f in diagnose(facts):
        if f.code in _MACHINE_ERRORS:
            return f"{f.code}: {f.message}"
    f = Facts(facts)
    if f.nvidia_count == 0 or (f.nvidia_count is None and not f.nvidia_present and f.bool("cuda_available") is False):
        return "there is no NVIDIA GPU"
    return ""


def _or_text(found: list[Draft], draft: Draft) -> list[Draft]:
    return found or [draft]


_ELSEWHERE = "; this machine's GPUs all have kernels in its own build, so the message comes from another machine or environment, or from a CUDA extension built for other GPUs"


def no_kernel_image(hit: Any, facts: Any) -> list[Draft]:
    note = _ELSEWHERE if machine_covers(facts) else ""
    found = doctor(hit, facts, ("TD005", "TD006"))
    if found:
        return [(c, m + note, f) for c, m, f in found]
    g = hit.groups
    if g.get("min_ma"):
        name, cc, low = g.get("name", "the GPU"), f"{g['ma']}.{g['mi']}", f"{g['min_ma']}.{g['min_mi']}"
        return [("TD006", f"GPU {g.get('idx', '0')} {name} (compute capability {cc}) is older than this PyTorch supports (its minimum is {low}){at(hit)}",
                 "use an older PyTorch release whose wheels still carry this architecture, build from source with "
                 f"TORCH_CUDA_ARCH_LIST={cc}, or a newer GPU")]
    what = "'invalid device function'" if "invalid device function" in hit.text else "'no kernel image is available for execution on the device'"
    gpu = "this GPU's architecture"
    if g.get("cc") and not g.get("name"):
        g = {**g, "name": _name_before(hit.text, " with CUDA capability")}
    if g.get("name") and (g.get("ma") or g.get("cc")):
        cc = f"{g['ma']}.{g['mi']}" if g.get("ma") else f"{int(g['cc']) // 10}.{int(g['cc']) % 10}"
        gpu = f"GPU {g.get('idx', '0')} {g['name']} (compute capability {cc})"
    pips = hit.values.get("pip", [])
    fix = (f"install a build with kernels for it, as PyTorch suggests: {pips[0]}" if pips else
           "compare torch.cuda.get_device_capability() with torch.cuda.get_arch_list(), then install a build whose arch list has the GPU's sm_XY "
           "(`torchdoctor env` on that machine names it); rebuild CUDA extensions with TORCH_CUDA_ARCH_LIST set for it")
    return [("TD005", f"this PyTorch build has no kernel for {gpu}: {what}{at(hit)}{note}", fix)]


def _name_before(text: str, marker: str) -> str:
    """The GPU name a torch warning prints before ``marker`` on its line ('UserWarning:' prefixes dropped)."""
    for line in text.splitlines():
        if marker in line:
            return line.split(marker, 1)[0].split("Warning:")[-1].strip() or "the GPU"
    return "the GPU"


def driver_too_old(hit: Any, facts: Any) -> list[Draft]:
    found = hit.get("found")
    supports = ""
    if found and found.isdigit() and int(found) > 1000:
        supports = f" (it supports CUDA {int(found) // 1000}.{int(found) % 1000 // 10})"
    return _or_text(doctor(hit, facts, ("TD003",)), (
        "TD003", f"the NVIDIA driver{supports} is too old for the CUDA version this PyTorch was built with{at(hit)}",
        "upgrade the NVIDIA driver (R580 or newer; nvidia-smi shows the CUDA it supports), or install a PyTorch build for the CUDA the driver supports"))


def forward_compat(hit: Any, facts: Any) -> list[Draft]:
    """Error 804: a newer CUDA's forward-compatibility libcuda on a GPU that takes none (GeForce, most workstation cards)."""
    why = ("CUDA forward compatibility was attempted on a GPU that does not support it (error 804): the libcuda of a newer CUDA "
           "(cuda-compat, /usr/local/cuda/compat) sits on an older host driver, which only data-centre GPUs accept")
    drop = "and drop cuda-compat (/usr/local/cuda/compat) from LD_LIBRARY_PATH"
    found = doctor(hit, facts, ("TD003",), text="CUDA driver version is insufficient for CUDA runtime version") if facts else []
    if found:
        _, message, fix = found[0]
        return [("TD003", f"{why}; {message}{at(hit)}", f"{fix}, {drop}")]
    return [("TD003", f"{why}{at(hit)}",
             f"upgrade the host driver to one made for this CUDA, or use a torch build / container image for the CUDA the driver supports (nvidia-smi shows it), {drop}")]


def cpu_only_build(hit: Any, facts: Any) -> list[Draft]:
    if facts is not None:
        found = doctor(hit, facts, ("TD002", "TD014"))
        if found:
            return found
        if why_no_gpu(facts) == "there is no NVIDIA GPU":
            return [("TD101", f"the program asks for CUDA, but torch here is a CPU build and this machine has no NVIDIA GPU{at(hit)}",
                     "fall back when there is no GPU: device = torch.device('cuda' if torch.cuda.is_available() else 'cpu') (or torchdoctor.env.pick_device())")]
    return [("TD002", f"this PyTorch is a CPU-only build, and the program asks for CUDA{at(hit)}",
             "on a machine with an NVIDIA GPU install a CUDA build (pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/cu126); "
             "without one, fall back: torch.device('cuda' if torch.cuda.is_available() else 'cpu')")]


def no_gpu_visible(hit: Any, facts: Any) -> list[Draft]:
    if facts is not None:
        found = doctor(hit, facts, ("TD007", "TD008", "TD010", "TD013", "TD017"))
        if found:
            return found
    no_driver = "Found no NVIDIA driver" in hit.text
    said = "CUDA found no NVIDIA driver" if no_driver else "the program needs a CUDA GPU but this process sees none"
    if facts is not None and why_no_gpu(facts) == "there is no NVIDIA GPU":
        return [("TD101", f"{said}, and this machine has no NVIDIA GPU{at(hit)}",
                 "fall back when there is no GPU: device = torch.device('cuda' if torch.cuda.is_available() else 'cpu') (or torchdoctor.env.pick_device())")]
    if no_driver:
        return [("TD007", f"{said}: no NVIDIA kernel module is loaded, or the container was started without the GPU{at(hit)}",
                 "check `nvidia-smi`: install or load the driver on the host (sudo modprobe nvidia), start containers with --gpus all; "
                 "`torchdoctor env` on that machine says which")]
    return [("TD101", f"{said}{at(hit)}",
             "run `torchdoctor env` on that machine (CUDA_VISIBLE_DEVICES, container --gpus, driver); let the program fall back: "
             "torch.device('cuda' if torch.cuda.is_available() else 'cpu')")]


def gpu_busy(hit: Any, facts: Any) -> list[Draft]:
    return _or_text(doctor(hit, facts, ("TD020",)), (
        "TD020", f"every visible GPU is busy or unavailable: exclusive-process or prohibited compute mode, or another process holds it{at(hit)}",
        "check `nvidia-smi -q -d COMPUTE`; sudo nvidia-smi -c DEFAULT, or wait for the process holding the GPU (or ask the scheduler for it)"))


def unknown_error(hit: Any, facts: Any) -> list[Draft]:
    return _or_text(doctor(hit, facts, ("TD018",)), (
        "TD018", "CUDA initialisation fails with 'CUDA unknown error' (typical after a suspend/resume)",
        "sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm (or reboot)"))


def nvml_mismatch(hit: Any, facts: Any) -> list[Draft]:
    found = doctor(hit, facts, ("TD012",))
    nvml = hit.get("nvml")
    if found and nvml and nvml not in found[0][1]:
        code, message, fix = found[0]
        found[0] = (code, f"{message} (NVML library version {nvml})", fix)
    return found or [("TD012", "driver/library version mismatch" + (f" (NVML library version {nvml})" if nvml else ""),
                      "reboot, or reload the module: sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia")]


def stub_library(hit: Any, facts: Any) -> list[Draft]:
    return _or_text(doctor(hit, facts, ("TD019",)), (
        "TD019", "CUDA loaded the driver stub library (`.../stubs/libcuda.so`), which only serves linking: 'CUDA driver is a stub library'",
        "remove the CUDA toolkit's stubs/ directory from LD_LIBRARY_PATH (and /etc/ld.so.conf.d); the real libcuda.so.1 comes with the driver"))


def shm_bus_error(hit: Any, facts: Any) -> list[Draft]:
    found = doctor(hit, facts, ("TD022",))
    if found:
        return found
    pids = hit.values.get("pid", [])
    who = f"DataLoader worker (pid {', '.join(pids)})" if pids else "a DataLoader worker"
    message = f"{who} ran out of shared memory (/dev/shm): 'bus error' / 'unable to write to file </torch_...>'"
    if facts is not None and isinstance(facts.get("shm_bytes"), int):
        message += f"; this machine's /dev/shm holds {facts['shm_bytes'] / 2**30:.1f} GiB, so the batches or the number of workers filled it"
    return [("TD022", message, "start the container with --shm-size=8g (or --ipc=host), or lower num_workers / the batch size; "
             "torch.multiprocessing.set_sharing_strategy('file_system') moves worker tensors out of /dev/shm")]


def fork_after_init(hit: Any, facts: Any) -> list[Draft]:
    return _or_text(doctor(hit, facts, ("TD023",)), (
        "TD023", f"CUDA was initialised before a fork: 'Cannot re-initialize CUDA in forked subprocess'{at(hit)}",
        "use the spawn start method (torch.multiprocessing.set_start_method('spawn') or DataLoader(multiprocessing_context='spawn')), "
        "and keep CUDA out of code that runs before workers fork (no .cuda() in Dataset.__init__ or __getitem__)"))

