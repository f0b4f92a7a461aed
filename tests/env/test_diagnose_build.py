"""Snapshot tests for the build rules: TD001-TD006, TD014, TD015, and healthy machines."""

from __future__ import annotations

from torchdoctor.env import diagnose
from torchdoctor.findings import Finding, Severity

from tests.env.snapshots import CU118_ARCHS, CU126_ARCHS, CU128_ARCHS, gb10_cu130, gpu, h100, laptop, rtx4090_cu118


def codes(facts: dict) -> list[str]:
    return [f.code for f in diagnose(facts)]


def only(facts: dict, code: str) -> Finding:
    found = [f for f in diagnose(facts) if f.code == code]
    assert len(found) == 1, [(f.code, f.message) for f in diagnose(facts)]
    return found[0]


def errors(facts: dict) -> list[str]:
    return [f.code for f in diagnose(facts) if f.severity is Severity.ERROR]


# -- healthy machines --------------------------------------------------------------
def test_healthy_h100_on_cu126_is_clean():
    assert diagnose(h100()) == []


def test_rtx4090_runs_sm86_cubins_by_the_same_major_rule():
    assert diagnose(rtx4090_cu118()) == []


def test_gb10_on_aarch64_cu130_is_clean():
    assert diagnose(gb10_cu130()) == []


def test_laptop_without_gpu_gets_only_the_td009_info():
    found = diagnose(laptop())
    assert [(f.code, f.severity) for f in found] == [("TD009", Severity.INFO)]


# -- TD001 ----------------------------------------------------------------------
def test_td001_torch_missing_on_a_gpu_machine_names_the_wheel():
    f = only(h100(torch_version=None, torch_cuda=None, torch_import_error="ModuleNotFoundError: No module named 'torch'"), "TD001")
    assert "No module named 'torch'" in f.message
    assert "download.pytorch.org/whl/cu12" in f.fix and f.severity is Severity.ERROR


def test_td001_cudnn_not_loadable_points_at_ld_library_path():
    facts = h100(
        torch_version=None, torch_cuda=None, ld_library_path="/usr/local/cuda-11.8/lib64",
        torch_import_error="Traceback...\nImportError: libcudnn.so.9: cannot open shared object file: No such file or directory",
    )
    f = only(facts, "TD001")
    assert "libcudnn.so.9" in f.message and "/usr/local/cuda-11.8/lib64" in f.fix


def test_td001_broken_numpy_abi():
    f = only(laptop(torch_version=None, torch_import_error="ImportError: numpy.core.multiarray failed to import"), "TD001")
    assert "numpy" in f.fix


# -- TD002 ----------------------------------------------------------------------
def test_td002_windows_cpu_wheel_with_rtx3060_recommends_a_flavour_the_driver_runs():
    facts = {
        "platform": "win32", "machine": "AMD64", "torch_version": "2.5.1+cpu", "torch_cuda": None,
        "cuda_available": False, "driver_version": "566.36", "nvidia_smi_present": True,
        "gpus": [gpu(0, "NVIDIA GeForce RTX 3060", (8, 6), 12288)],
    }
    f = only(facts, "TD002")
    assert "RTX 3060" in f.message and "CPU-only" in f.message
    assert "whl/cu126" in f.fix  # 566.36 runs CUDA 12.6 fully, not 12.8 (needs 570.65)


def test_td002_conda_cpu_build_on_a100_also_reports_cpuonly():
    facts = h100(
        torch_version="2.3.0", torch_cuda=None, arch_list=[], cuda_available=False, driver_version="535.104.05",
        proc_driver_version="535.104.05", nvml_lib_version="12.535.104.05", libcuda_path=None,
        gpus=[gpu(0, "NVIDIA A100-SXM4-80GB", (8, 0))], pip_dists=[],
        conda_pkgs=["pytorch 2.3.0 py3.11_cpu_0", "cpuonly 2.0 0"],
    )
    assert "torch_cuda" not in facts  # conda's build string alone says CPU
    f = only(facts, "TD002")
    assert f.fix.startswith("conda remove cpuonly") and "cu12" in f.fix
    assert "TD014" in codes(facts)


def test_td002_quiet_without_an_nvidia_gpu_and_on_macos():
    assert "TD002" not in codes(laptop())
    assert "TD002" not in codes({"platform": "darwin", "torch_version": "2.9.0", "torch_cuda": None})


# -- TD003 / TD004 --------------------------------------------------------------------
def test_td003_driver_470_with_cu128_offers_the_branch_or_cu118():
    facts = h100(
        torch_version="2.7.0+cu128", torch_cuda="12.8", arch_list=CU128_ARCHS, cuda_available=False,
        driver_version="470.182.03", proc_driver_version="470.182.03", nvml_lib_version="11.470.182.03",
        libcuda_path=None, drv_cuda=11040, gpus=[gpu(0, "NVIDIA A10G", (8, 6), 23028)],
        init_warning="CUDA initialization: The NVIDIA driver on your system is too old (found version 11040).",
    )
    f = only(facts, "TD003")
    assert "470.182.03" in f.message and "12.8" in f.message
    assert "R570" in f.fix and "whl/cu118" in f.fix
    assert "TD004" not in codes(facts)


def test_td003_from_the_init_message_alone():
    facts = {
        "platform": "linux", "torch_version": "2.4.0+cu124", "torch_cuda": "12.4", "cuda_available": False,
        "init_error": "RuntimeError: The NVIDIA driver on your system is too old (found version 11020). Please update your GPU driver",
    }
    f = only(facts, "TD003")
    assert "11.2" in f.message and "12.4" in f.message


def test_td003_driver_api_of_an_older_major():
    f = only(laptop(torch_version="2.9.0+cu130", torch_cuda="13.0", drv_cuda=12080, pci_nvidia_devices=1,
                    kernel_modules=["nvidia"], proc_driver_present=True), "TD003")
    assert "12.8" in f.message and "R580" in f.fix


def test_td004_h100_on_550_with_cu126_is_info_only():
    facts = h100(driver_version="550.54.15", proc_driver_version="550.54.15", nvml_lib_version="12.550.54.15",
                 libcuda_path=None, drv_cuda=12040)
    f = only(facts, "TD004")
    assert f.severity is Severity.INFO and "550.54.15" in f.message and "560.28.03" in f.fix
    assert errors(facts) == []


def test_td004_from_the_driver_api_version():
    facts = h100(driver_version=None, proc_driver_version=None, nvml_lib_version=None, libcuda_path=None,
                 torch_version="2.8.0+cu128", torch_cuda="12.8", arch_list=CU128_ARCHS, drv_cuda=12040)
    f = only(facts, "TD004")
    assert "12.4" in f.message and "12.8" in f.message


# -- TD005 / TD006 -----------------------------------------------------------------
def test_td005_rtx5090_on_cu124_needs_cu128():
    facts = h100(
        torch_version="2.6.0+cu124", torch_cuda="12.4", arch_list=CU118_ARCHS, driver_version="570.133.07",
        proc_driver_version="570.133.07", nvml_lib_version="12.570.133.07", libcuda_path=None, drv_cuda=12080,
        gpus=[gpu(0, "NVIDIA GeForce RTX 5090", (12, 0), 32607)],
    )
    f = only(facts, "TD005")
    assert "RTX 5090" in f.message and "12.0" in f.message and "no kernel image" in f.message
    assert "whl/cu128" in f.fix  # 570.133 runs 12.8 fully; 12.9 needs 575


def test_td005_h100_on_a_cu117_build_without_ptx():
    arch = ["sm_37", "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86"]
    f = only(h100(torch_version="1.13.1+cu117", torch_cuda="11.7", arch_list=arch), "TD005")
    assert "H100" in f.message and "cu126" in f.fix


def test_td005_quiet_when_ptx_can_be_jit_compiled():
    arch = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "compute_86"]
    assert "TD005" not in codes(h100(torch_version="1.13.1+cu117", torch_cuda="11.7", arch_list=arch))


def test_td005_gb10_on_an_aarch64_cu126_build_needs_cu130():
    facts = gb10_cu130(torch_version="2.7.0+cu126", torch_cuda="12.6", arch_list=["sm_80", "sm_90"])
    f = only(facts, "TD005")
    assert "GB10" in f.message and "whl/cu130" in f.fix


def test_td005_parsed_from_torch_warning_when_no_device_facts():
    facts = {
        "platform": "linux", "torch_version": "2.4.1+cu121", "torch_cuda": "12.1", "cuda_available": True,
        "init_warning": "\nNVIDIA GeForce RTX 5080 with CUDA capability sm_120 is not compatible with the current PyTorch installation.\n"
                        "The current PyTorch install supports CUDA capabilities sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90.\n",
    }
    f = only(facts, "TD005")
    assert "RTX 5080" in f.message and "whl/cu130" in f.fix  # driver unknown: the newest flavour


def test_td006_gtx1080_on_cu128_gets_cu126():
    facts = h100(torch_version="2.8.0+cu128", torch_cuda="12.8", arch_list=CU128_ARCHS, driver_version="570.172.08",
                 proc_driver_version="570.172.08", nvml_lib_version="12.570.172.08", libcuda_path=None,
                 gpus=[gpu(0, "NVIDIA GeForce GTX 1080", (6, 1), 8192)])
    f = only(facts, "TD006")
    assert "GTX 1080" in f.message and "Pascal" in f.message and "whl/cu126" in f.fix


def test_td006_maxwell_on_cu130():
    facts = h100(torch_version="2.9.0+cu130", torch_cuda="13.0", arch_list=["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
                 driver_version="580.95.05", proc_driver_version="580.95.05", nvml_lib_version="13.580.95.05",
                 libcuda_path=None, gpus=[gpu(0, "NVIDIA GeForce GTX 970", (5, 2), 4096)])
    f = only(facts, "TD006")
    assert "Maxwell" in f.message and "cu126" in f.fix


def test_td006_kepler_has_no_current_wheel():
    facts = h100(gpus=[gpu(0, "Tesla K80", (3, 7), 11441)], driver_version="470.256.02",
                 proc_driver_version="470.256.02", nvml_lib_version="11.470.256.02", libcuda_path=None)
    f = only(facts, "TD006")
    assert "from source" in f.fix and "3.7" in f.fix


# -- TD014 ----------------------------------------------------------------------
def test_td014_pip_and_conda_torch_together():
    facts = h100(pip_dists=["torch 2.4.0"], conda_pkgs=["pytorch 2.1.0 py3.10_cuda11.8_cudnn8.7.0_0", "pytorch-cuda 11.8 h7e8668a_5"])
    f = only(facts, "TD014")
    assert "2.4.0" in f.message and "2.1.0" in f.message


def test_td014_two_pip_copies_of_torch():
    f = only(h100(pip_dists=["torch 2.1.2", "torch 2.7.1+cu126"]), "TD014")
    assert "2.1.2" in f.message and "~/.local" in f.fix


def test_td014_cpuonly_quiet_on_a_machine_without_gpu():
    assert "TD014" not in codes(laptop(pip_dists=[], conda_pkgs=["pytorch 2.5.1 py3.12_cpu_0", "cpuonly 2.0 0"]))


# -- TD015 ----------------------------------------------------------------------
def test_td015_rocm_build_on_nvidia():
    f = only(h100(torch_version="2.5.1+rocm6.2", torch_cuda=None, torch_hip="6.2.41133", arch_list=[]), "TD015")
    assert "ROCm" in f.message and "whl/cu12" in f.fix


def test_td015_cuda_build_on_an_amd_rocm_machine():
    facts = laptop(torch_version="2.7.1+cu126", torch_cuda="12.6", pci_amd_devices=2, dev_kfd_present=True,
                   rocm_present=True, kernel_modules=["amdgpu"])
    f = only(facts, "TD015")
    assert "AMD" in f.message and "rocm" in f.fix
    assert "TD009" not in codes(facts)


def test_td015_quiet_for_a_cuda_build_next_to_an_amd_igpu_without_rocm():
    facts = laptop(torch_version="2.7.1+cu126", torch_cuda="12.6", pci_amd_devices=1, kernel_modules=["amdgpu"])
    assert "TD015" not in codes(facts)
