"""Scripts the probe runs in child processes, so that neither CUDA nor a broken torch touches the doctor."""

from __future__ import annotations

# Each script prints one JSON object per line, so whatever a stage managed to
# learn before a later stage hangs still reaches the parent.

# The driver, through ctypes only (no torch): libcuda's cuDriverGetVersion needs
# no cuInit, and NVML creates no CUDA context (PyTorch uses it for the same reason).
DRIVER_SCRIPT = r'''
import ctypes, json, sys
out = {}
def emit():
    sys.stdout.write(json.dumps(out) + "\n"); sys.stdout.flush()
def mapped(fragment):
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 6 and fragment in parts[-1]:
                    return parts[-1]
    except OSError:
        pass
    return None
names = {"win32": ("nvcuda.dll", "nvml.dll")}.get(sys.platform, ("libcuda.so.1", "libnvidia-ml.so.1"))
try:
    cu = ctypes.CDLL(names[0])
    out["libcuda_loadable"] = True
    v = ctypes.c_int(0)
    if cu.cuDriverGetVersion(ctypes.byref(v)) == 0 and v.value:
        out["drv_cuda"] = v.value
    path = mapped("libcuda.so")
    if path:
        out["libcuda_path"] = path
except (OSError, AttributeError) as exc:
    out["libcuda_loadable"] = False
    out["libcuda_error"] = str(exc)
emit()
try:
    nv = ctypes.CDLL(names[1])
except OSError as exc:
    out["nvml_error"] = str(exc); emit(); sys.exit(0)
nv.nvmlErrorString.restype = ctypes.c_char_p
rc = nv.nvmlInit_v2()
if rc != 0:
    out["nvml_error"] = nv.nvmlErrorString(rc).decode(errors="replace"); emit(); sys.exit(0)
buf = ctypes.create_string_buffer(96)
if nv.nvmlSystemGetDriverVersion(buf, 96) == 0:
    out["driver_version"] = buf.value.decode()
if nv.nvmlSystemGetNVMLVersion(buf, 96) == 0:
    out["nvml_lib_version"] = buf.value.decode()
v = ctypes.c_int(0)
if "drv_cuda" not in out and nv.nvmlSystemGetCudaDriverVersion_v2(ctypes.byref(v)) == 0:
    out["drv_cuda"] = v.value
count = ctypes.c_uint(0)
if nv.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0:
    out["nvml_device_count"] = count.value
class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]
class Pci(ctypes.Structure):
    _fields_ = [("legacy", ctypes.c_char * 16), ("domain", ctypes.c_uint), ("bus", ctypes.c_uint),
                ("device", ctypes.c_uint), ("did", ctypes.c_uint), ("sdid", ctypes.c_uint), ("bus_id", ctypes.c_char * 32)]
MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}
gpus = []
for i in range(count.value):
    h = ctypes.c_void_p()
    if nv.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h)) != 0:
        continue
    g = {"index": i}
    if nv.nvmlDeviceGetName(h, buf, 96) == 0:
        g["name"] = buf.value.decode(errors="replace")
    if nv.nvmlDeviceGetUUID(h, buf, 96) == 0:
        g["uuid"] = buf.value.decode(errors="replace")
    ma, mi = ctypes.c_int(0), ctypes.c_int(0)
    if nv.nvmlDeviceGetCudaComputeCapability(h, ctypes.byref(ma), ctypes.byref(mi)) == 0:
        g["capability"] = [ma.value, mi.value]
    mem = Memory()
    if nv.nvmlDeviceGetMemoryInfo(h, ctypes.byref(mem)) == 0:
        g["memory_mb"] = mem.total // (1024 * 1024)
    pci = Pci()
    if nv.nvmlDeviceGetPciInfo_v3(h, ctypes.byref(pci)) == 0:
        g["pci"] = pci.bus_id.decode(errors="replace")
    mode = ctypes.c_int(-1)
    if nv.nvmlDeviceGetComputeMode(h, ctypes.byref(mode)) == 0:
        g["compute_mode"] = MODES.get(mode.value, str(mode.value))
    cur, pend = ctypes.c_uint(0), ctypes.c_uint(0)
    if nv.nvmlDeviceGetMigMode(h, ctypes.byref(cur), ctypes.byref(pend)) == 0:
        g["mig_mode"] = "Enabled" if cur.value else "Disabled"
        if cur.value:
            most, n = ctypes.c_uint(0), 0
            nv.nvmlDeviceGetMaxMigDeviceCount(h, ctypes.byref(most))
            for j in range(most.value):
                mh = ctypes.c_void_p()
                if nv.nvmlDeviceGetMigDeviceHandleByIndex(h, j, ctypes.byref(mh)) == 0:
                    n += 1
            g["mig_instances"] = n
    ecc = ctypes.c_ulonglong(0)
    if nv.nvmlDeviceGetTotalEccErrors(h, 1, 0, ctypes.byref(ecc)) == 0:
        g["ecc_uncorrected"] = ecc.value
    gpus.append(g)
out["gpus"] = gpus
nv.nvmlShutdown()
emit()
'''

# torch: import it (its error is TD001), read the build, then, only when asked,
# initialise CUDA and record what that prints.
TORCH_SCRIPT = r'''
import json, sys, warnings
out = {}
def emit():
    sys.stdout.write(json.dumps(out, default=str) + "\n"); sys.stdout.flush()
try:
    import torch
except BaseException as exc:
    import traceback
    out["torch_import_error"] = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    emit(); sys.exit(0)
out["torch_version"] = str(torch.__version__)
out["torch_cuda"] = getattr(torch.version, "cuda", None)
out["torch_hip"] = getattr(torch.version, "hip", None)
out["torch_file"] = getattr(torch, "__file__", None)
try:
    flags = torch._C._cuda_getArchFlags() if hasattr(torch._C, "_cuda_getArchFlags") else ""
    out["arch_list"] = flags.split() if flags else []
except Exception:
    pass
mps = getattr(torch.backends, "mps", None)
try:
    out["mps_built"] = bool(mps.is_built()) if mps is not None else False
except Exception:
    pass
emit()
if sys.argv[1:] != ["1"]:
    sys.exit(0)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        out["cuda_available"] = bool(torch.cuda.is_available())
        if out["cuda_available"] or out["torch_cuda"] or out["torch_hip"]:
            try:
                torch.cuda.init()
            except Exception as exc:
                out["init_error"] = "%s: %s" % (type(exc).__name__, exc)
        if out["cuda_available"]:
            n = torch.cuda.device_count()
            out["device_count"] = n
            devs = []
            for i in range(n):
                p = torch.cuda.get_device_properties(i)
                devs.append({"index": i, "name": p.name, "capability": [p.major, p.minor],
                             "memory_mb": p.total_memory // (1024 * 1024), "uuid": "GPU-%s" % getattr(p, "uuid", "")})
            out["torch_device_names"] = [d["name"] for d in devs]
            out["torch_devices"] = devs
    except Exception as exc:
        out.setdefault("init_error", "%s: %s" % (type(exc).__name__, exc))
    try:
        if mps is not None:
            out["mps_available"] = bool(mps.is_available())
    except Exception:
        pass
text = "\n".join(str(w.message) for w in caught)
if text:
    out["init_warning"] = text
emit()
'''
