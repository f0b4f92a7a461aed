"""Snapshot tests for the host rules: TD007-TD013, TD016-TD023, and their look-alikes."""

from __future__ import annotations

from torchdoctor.env import diagnose
from torchdoctor.findings import Severity

from tests.env.snapshots import gpu, h100, laptop
from tests.env.test_diagnose_build import codes, errors, only

NO_DRIVER = dict(
    driver_version=None, proc_driver_version=None, nvml_lib_version=None, drv_cuda=None, libcuda_path=None,
    gpus=None, torch_device_names=None, nvml_device_count=None, proc_driver_present=False, dev_nvidia_present=False,
    dev_nvidia_uvm_present=False, libcuda_loadable=False, cuda_available=False, device_count=None,
)


# -- TD007 ----------------------------------------------------------------------
def test_td007_nouveau_holds_the_gpu():
    f = only(h100(**NO_DRIVER, kernel_modules=["nouveau"]), "TD007")
    assert "nouveau" in f.message and "blacklist nouveau" in f.fix
    assert "TD009" not in codes(h100(**NO_DRIVER, kernel_modules=["nouveau"]))


def test_td007_module_not_loaded_with_torch_message():
    facts = h100(**NO_DRIVER, pci_nvidia_devices=2, kernel_modules=[], init_warning="CUDA initialization: Found no NVIDIA driver on your system.")
    f = only(facts, "TD007")
    assert f.message.startswith("2 NVIDIA GPU(s)") and "R580" in f.fix


def test_td007_pascal_gets_the_last_branch_that_supports_it():
    f = only(h100(**{**NO_DRIVER, "kernel_modules": []}), "TD007")
    assert "modprobe nvidia" in f.fix


def test_td007_quiet_on_wsl_where_there_is_no_pci_module():
    facts = h100(is_wsl=True, wsl_version=2, kernel_modules=[], proc_driver_present=False, pci_nvidia_devices=0,
                 proc_driver_version=None, driver_version="566.36", nvml_lib_version="12.566.36",
                 libcuda_path="/usr/lib/wsl/lib/libcuda.so.1.1", linux_driver_pkgs=[], osrelease="5.15.153.1-microsoft-standard-WSL2")
    assert diagnose(facts) == []


# -- TD008 ----------------------------------------------------------------------
def test_td008_docker_without_gpus_flag():
    facts = h100(**{**NO_DRIVER, "proc_driver_present": True}, in_container=True, container_markers=["/.dockerenv"],
                 kernel_modules=["nvidia", "nvidia_uvm"], pci_nvidia_devices=4)
    f = only(facts, "TD008")
    assert "--gpus all" in f.fix and "TD007" not in codes(facts) and "TD009" not in codes(facts)


def test_td008_kubernetes_pod_without_gpu_request():
    facts = h100(**NO_DRIVER, in_container=True, container_markers=["cgroup:kubepods"], kernel_modules=["nvidia"],
                 env={"KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert "nvidia.com/gpu" in only(facts, "TD008").fix


def test_td008_devices_without_driver_libraries():
    facts = h100(in_container=True, container_markers=["/.dockerenv"], libcuda_loadable=False, libcuda_path=None,
                 cuda_available=False, env={"NVIDIA_DRIVER_CAPABILITIES": "utility"})
    f = only(facts, "TD008")
    assert "libcuda" in f.message and "compute" in f.fix


def test_td008_quiet_in_a_cpu_only_ci_container():
    facts = laptop(in_container=True, container_markers=["/.dockerenv"], env={"NVIDIA_VISIBLE_DEVICES": "all"})
    assert codes(facts) == ["TD009"]


# -- TD009 ----------------------------------------------------------------------
def test_td009_container_hint():
    f = only(laptop(in_container=True, container_markers=["/run/.containerenv"]), "TD009")
    assert f.severity is Severity.INFO and "podman" in f.fix


def test_td009_not_when_an_error_explains_the_missing_gpu():
    assert "TD009" not in codes(h100(**NO_DRIVER, kernel_modules=["nouveau"]))
    assert "TD009" not in codes(h100())


# -- TD010 ----------------------------------------------------------------------
def _two_gpus(**kw):
    g = [gpu(0, "NVIDIA A100-SXM4-80GB", (8, 0)), gpu(1, "NVIDIA A100-SXM4-80GB", (8, 0))]
    return h100(**{"gpus": g, "nvml_device_count": 2, "pci_nvidia_devices": 2, "cuda_available": False, "device_count": 0, **kw})


def test_td010_empty_value():
    f = only(_two_gpus(cvd=""), "TD010")
    assert "CUDA_VISIBLE_DEVICES=''" in f.message and "empty" in f.message and "0,1" in f.fix


def test_td010_minus_one():
    assert "not a device number" in only(_two_gpus(cvd="-1"), "TD010").message


def test_td010_duplicates_empty_the_list():
    assert "twice" in only(_two_gpus(cvd="1,1"), "TD010").message


def test_td010_id_that_does_not_exist():
    assert "device 2 does not exist" in only(_two_gpus(cvd="2,3"), "TD010").message


def test_td010_uuid_of_another_machine():
    assert "UUID" in only(_two_gpus(cvd="GPU-deadbeef"), "TD010").message


def test_td010_quiet_for_values_that_leave_a_gpu():
    for value in ("1", "0,5", "1gpu", "GPU-00000001", " 0"):
        assert "TD010" not in codes(_two_gpus(cvd=value)), value


def test_td010_quiet_on_a_machine_without_gpu():
    assert "TD010" not in codes(laptop(cvd=""))


# -- TD011 ----------------------------------------------------------------------
def _mixed(**kw):
    g = [gpu(0, "NVIDIA GeForce RTX 3060", (8, 6), 12288), gpu(1, "NVIDIA GeForce RTX 4090", (8, 9), 24564)]
    return h100(**{"gpus": g, "nvml_device_count": 2, "pci_nvidia_devices": 2, "device_count": 2,
                   "torch_device_names": ["NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3060"], **kw})


def test_td011_mixed_gpus_numbered_fastest_first():
    f = only(_mixed(), "TD011")
    assert f.severity is Severity.WARNING and "RTX 3060" in f.message and "PCI_BUS_ID" in f.fix


def test_td011_mixed_gpus_with_unknown_cuda_order():
    assert "TD011" in codes(_mixed(torch_device_names=None))


def test_td011_quiet_with_pci_bus_order_or_identical_gpus_or_agreeing_order():
    assert "TD011" not in codes(_mixed(cuda_device_order="PCI_BUS_ID"))
    assert "TD011" not in codes(_two_gpus(cuda_available=True, device_count=2))
    assert "TD011" not in codes(_mixed(torch_device_names=["NVIDIA GeForce RTX 3060", "NVIDIA GeForce RTX 4090"]))


# -- TD012 ----------------------------------------------------------------------
def test_td012_kernel_module_and_libraries_differ():
    facts = h100(nvml_lib_version="12.560.35.05", libcuda_path="/usr/lib/x86_64-linux-gnu/libcuda.so.560.35.05")
    f = only(facts, "TD012")
    assert "560.35.03" in f.message and "560.35.05" in f.message and "reboot" in f.fix


def test_td012_nvml_mismatch_message():
    facts = h100(driver_version=None, nvml_lib_version=None, libcuda_path=None, gpus=None, cuda_available=False,
                 nvidia_smi_error="Failed to initialize NVML: Driver/library version mismatch")
    assert "mismatch" in only(facts, "TD012").message


def test_td012_error_803_in_a_container():
    facts = h100(in_container=True, container_markers=["/.dockerenv"], cuda_available=False,
                 init_warning="CUDA initialization: Unexpected error from cudaGetDeviceCount(). Error 803: system has unsupported display driver / cuda driver combination")
    assert "compat" in only(facts, "TD012").fix


# -- TD013 ----------------------------------------------------------------------
def _wsl(**kw):
    base = dict(is_wsl=True, wsl_version=2, osrelease="5.15.153.1-microsoft-standard-WSL2", kernel_modules=[],
                proc_driver_present=False, proc_driver_version=None, pci_nvidia_devices=0, dev_dxg_present=True,
                wsl_libcuda_present=True, libcuda_path="/usr/lib/wsl/lib/libcuda.so.1.1", linux_driver_pkgs=[],
                driver_version="566.36", nvml_lib_version="12.566.36")
    base.update(kw)
    return h100(**base)


def test_td013_wsl1():
    f = only(_wsl(wsl_version=1, osrelease="4.4.0-19041-Microsoft", cuda_available=False), "TD013")
    assert "WSL 1" in f.message and "--set-version" in f.fix


def test_td013_linux_driver_inside_wsl2():
    facts = _wsl(linux_driver_pkgs=["libnvidia-compute-535", "nvidia-driver-535"], cuda_available=False,
                 libcuda_path="/usr/lib/x86_64-linux-gnu/libcuda.so.535.183.01")
    f = only(facts, "TD013")
    assert "nvidia-driver-535" in f.message and "apt purge" in f.fix


def test_td013_quiet_on_healthy_wsl2_and_windows_driver_numbers_understood():
    assert diagnose(_wsl()) == []  # 566.36 (Windows numbering) runs CUDA 12.6


# -- TD016 ----------------------------------------------------------------------
MAC = {"platform": "darwin", "machine": "arm64", "torch_version": "2.9.0", "torch_cuda": None, "mps_built": True,
       "mps_available": True, "macos_version": "15.1", "cuda_available": False}


def test_td016_apple_silicon_uses_mps():
    f = only(MAC, "TD016")
    assert f.severity is Severity.INFO and "mps" in f.fix and "TD009" not in codes(MAC)


def test_td016_rosetta_python():
    f = only({**MAC, "machine": "x86_64", "proc_translated": 1, "mps_available": False}, "TD016")
    assert "Rosetta" in f.message and "arm64" in f.fix


def test_td016_old_macos():
    assert "12.3" in only({**MAC, "mps_available": False, "macos_version": "11.7"}, "TD016").message


# -- TD017 ----------------------------------------------------------------------
def test_td017_mig_without_instances():
    facts = h100(gpus=[gpu(0, "NVIDIA A100-SXM4-40GB", (8, 0), mig_mode="Enabled", mig_instances=0)], cuda_available=False)
    f = only(facts, "TD017")
    assert "MIG" in f.message and "-cgi" in f.fix


def test_td017_mig_instances_but_ordinal_cvd():
    facts = h100(gpus=[gpu(0, "NVIDIA H100 80GB HBM3", (9, 0), mig_mode="Enabled", mig_instances=7)], cuda_available=False, cvd="0")
    assert "MIG-<uuid>" in only(facts, "TD017").fix
    assert "TD010" not in codes(facts)


def test_td017_quiet_with_a_mig_uuid():
    facts = h100(gpus=[gpu(0, "NVIDIA H100 80GB HBM3", (9, 0), mig_mode="Enabled", mig_instances=7)], cvd="MIG-4b5a9c1e-aaaa")
    assert diagnose(facts) == []


# -- TD018 ----------------------------------------------------------------------
def test_td018_unknown_error_after_suspend():
    facts = h100(cuda_available=False, device_count=0, init_warning=(
        "CUDA initialization: CUDA unknown error - this may be due to an incorrectly set up environment, e.g. changing env "
        "variable CUDA_VISIBLE_DEVICES after program start. Setting the available devices to be zero."))
    assert "nvidia_uvm" in only(facts, "TD018").fix


def test_td018_uvm_module_missing():
    facts = h100(cuda_available=False, kernel_modules=["nvidia", "nvidia_drm"], dev_nvidia_uvm_present=False)
    assert "modprobe nvidia_uvm" in only(facts, "TD018").fix


# -- TD019 ----------------------------------------------------------------------
def test_td019_stub_library_resolved():
    facts = h100(cuda_available=False, libcuda_path="/usr/local/cuda-12.4/targets/x86_64-linux/lib/stubs/libcuda.so",
                 init_warning="CUDA initialization: CUDA driver is a stub library")
    assert "LD_LIBRARY_PATH" in only(facts, "TD019").fix


def test_td019_stubs_directory_on_ld_library_path():
    f = only(h100(ld_library_path="/usr/local/cuda/lib64:/usr/local/cuda/lib64/stubs"), "TD019")
    assert "/usr/local/cuda/lib64/stubs" in f.message


def test_td019_quiet_for_normal_library_paths():
    assert "TD019" not in codes(h100(ld_library_path="/usr/local/cuda/lib64:/usr/local/nvidia/lib64"))


# -- TD020 ----------------------------------------------------------------------
def test_td020_prohibited_mode():
    f = only(h100(gpus=[gpu(0, "NVIDIA H100 80GB HBM3", (9, 0), compute_mode="Prohibited")]), "TD020")
    assert "-c DEFAULT" in f.fix


def test_td020_exclusive_process_held_by_another_process():
    facts = h100(gpus=[gpu(0, "NVIDIA A100-SXM4-80GB", (8, 0), compute_mode="Exclusive_Process")], cuda_available=False,
                 init_error="RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable")
    assert "another process" in only(facts, "TD020").message


def test_td020_quiet_for_an_idle_exclusive_process_gpu():
    assert "TD020" not in codes(h100(gpus=[gpu(0, "NVIDIA A100-SXM4-80GB", (8, 0), compute_mode="Exclusive_Process")]))


# -- TD021 ----------------------------------------------------------------------
def test_td021_xid_79():
    assert "fallen off the bus" in only(h100(dmesg_xid=[13, 79]), "TD021").message


def test_td021_uncorrectable_ecc():
    f = only(h100(gpus=[gpu(0, "NVIDIA A100-SXM4-80GB", (8, 0), ecc_uncorrected=2)]), "TD021")
    assert "2 uncorrectable ECC" in f.message


def test_td021_quiet_for_application_xids():
    assert "TD021" not in codes(h100(dmesg_xid=[13, 31, 43]))


# -- TD022 ----------------------------------------------------------------------
def test_td022_docker_default_64m():
    f = only(h100(in_container=True, container_markers=["/.dockerenv"], shm_bytes=64 * 2**20), "TD022")
    assert "64 MiB" in f.message and "--shm-size" in f.fix and f.severity is Severity.WARNING


def test_td022_small_host_shm():
    assert "remount" in only(laptop(shm_bytes=256 * 2**20), "TD022").fix


def test_td022_quiet_for_large_or_non_linux():
    assert "TD022" not in codes(h100())
    assert "TD022" not in codes({**MAC, "shm_bytes": 2**20})


# -- TD023 ----------------------------------------------------------------------
def test_td023_reinit_in_forked_worker():
    facts = h100(init_error="RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use the 'spawn' start method")
    f = only(facts, "TD023")
    assert "fork" in f.message and "spawn" in f.fix


def test_td023_from_a_dataloader_worker_traceback():
    facts = h100(mp_start_method="fork", init_warning="Caught RuntimeError in DataLoader worker process 0.\nRuntimeError: Cannot re-initialize CUDA in forked subprocess.")
    assert "start method: fork" in only(facts, "TD023").message


def test_td023_quiet_for_the_fork_method_alone():
    assert "TD023" not in codes(h100(mp_start_method="fork"))


# -- robustness -----------------------------------------------------------------
def test_garbage_values_are_unknown_not_crashes():
    facts = {"platform": 3, "gpus": ["x", {"capability": "weird"}], "cvd": 5, "pip_dists": "torch", "shm_bytes": "lots",
             "dmesg_xid": ["a", None], "kernel_modules": None, "torch_cuda": 12.4, "env": []}
    assert errors(facts) == []


def test_errors_come_first():
    found = diagnose(h100(shm_bytes=2**20, gpus=[gpu(0, "NVIDIA H100 80GB HBM3", (9, 0), compute_mode="Prohibited")]))
    assert [f.severity for f in found] == sorted((f.severity for f in found), key=lambda s: s.rank)
