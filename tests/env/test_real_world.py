"""Real-world CUDA failures from public reports, as facts snapshots, with the diagnosis an expert would give.

Each snapshot holds only what its report says (unknown keys omitted); the source is cited per case.
"""

from __future__ import annotations

from typing import Any

from torchdoctor.env import diagnose
from torchdoctor.findings import Finding, Severity

CU124_ARCHS = ["sm_50", "sm_60", "sm_61", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
CU126_ARCHS = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]


def gpu(index: int, name: str, cap: tuple[int, int], **extra: Any) -> dict[str, Any]:
    return {"index": index, "name": name, "capability": list(cap), **extra}


def by_code(facts: dict) -> dict[str, list[Finding]]:
    out: dict[str, list[Finding]] = {}
    for f in diagnose(facts):
        out.setdefault(f.code, []).append(f)
    return out


def errors(facts: dict) -> list[str]:
    return [f.code for f in diagnose(facts) if f.severity is Severity.ERROR]


def one(facts: dict, code: str) -> Finding:
    found = by_code(facts).get(code, [])
    assert len(found) == 1, [(f.code, f.message) for f in diagnose(facts)]
    return found[0]


def _flavour_in(fix: str) -> str | None:
    import re
    m = re.search(r"whl/(cu\d+)", fix)
    return m.group(1) if m else None


# -- Blackwell on builds without sm_120 -------------------------------------------------
def test_rtx5090_on_a_build_that_stops_at_sm90():
    # https://github.com/Hellod035/LeggedLab/issues/26 (fixed with a cu128 build)
    facts = {
        "platform": "linux", "machine": "x86_64", "torch_cuda": "12.6", "torch_version": "2.7.0+cu126",
        "arch_list": CU126_ARCHS, "gpus": [gpu(0, "NVIDIA GeForce RTX 5090", (12, 0))],
        "init_warning": "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch installation.\n"
                        "The current PyTorch install supports CUDA capabilities sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90.",
    }
    assert errors(facts) == ["TD005"]
    assert _flavour_in(one(facts, "TD005").fix) in ("cu128", "cu129", "cu130")


def test_rtx5090_on_torch_2_0_cu118():
    # https://github.com/pBFSLab/DeepPrep/issues/233 (torch 2.0.1, CUDA 11.8, sm_37..sm_90)
    facts = {
        "platform": "linux", "torch_version": "2.0.1", "torch_cuda": "11.8",
        "arch_list": ["sm_37", "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
        "gpus": [gpu(0, "NVIDIA GeForce RTX 5090", (12, 0))],
    }
    assert errors(facts) == ["TD005"]
    assert _flavour_in(one(facts, "TD005").fix) in ("cu128", "cu129", "cu130")


def test_rtx5080_on_windows_known_only_from_the_warning_text():
    # https://github.com/lllyasviel/FramePack/issues/702 (Windows, framepack_cu126_torch26 package)
    facts = {
        "platform": "win32", "torch_version": "2.6.0+cu126", "torch_cuda": "12.6",
        "init_warning": "NVIDIA GeForce RTX 5080 with CUDA capability sm_120 is not compatible with the current PyTorch installation.\n"
                        "The current PyTorch install supports CUDA capabilities sm_50 sm_60 sm_61 sm_70 sm_75 sm_80 sm_86 sm_90.\n"
                        "If you want to use the NVIDIA GeForce RTX 5080 GPU with PyTorch, please check the instructions at https://pytorch.org/get-started/locally/",
    }
    found = one(facts, "TD005")
    assert "RTX 5080" in found.message
    assert _flavour_in(found.fix) in ("cu128", "cu129", "cu130")


def test_rtx_pro_6000_in_a_container_with_cuda_visible_devices_1():
    # https://github.com/spinalcordtoolbox/spinalcordtoolbox/issues/5104 (CUDA 12.1 build, device count 1)
    facts = {
        "platform": "linux", "torch_cuda": "12.1", "cuda_available": True, "device_count": 1, "cvd": "1",
        "init_warning": "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition with CUDA capability sm_120 is not compatible with the current PyTorch installation.\n"
                        "The current PyTorch install supports CUDA capabilities sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90.",
    }
    assert errors(facts) == ["TD005"]  # no TD010: the visible device count is unknown, and torch saw one


def test_rtx5090_in_docker_started_with_gpus_all():
    # https://github.com/xorbitsai/inference/issues/3603 (docker run --gpus all)
    facts = {
        "platform": "linux", "in_container": True, "dev_nvidia_present": True, "torch_cuda": "12.4",
        "init_warning": "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch installation.\n"
                        "The current PyTorch install supports CUDA capabilities sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90.",
    }
    assert errors(facts) == ["TD005"]


# -- GB10 (DGX Spark): PyTorch's own warning is a false alarm -------------------------------
def test_gb10_cu130_warning_is_not_an_error():
    # https://github.com/pytorch/pytorch/issues/172629 and https://github.com/mllam/neural-lam/issues/163
    # (torch 2.9.0+cu130 on aarch64; sm_120 cubins run on 12.1; driver 580.95.05 from
    # https://github.com/p-e-w/heretic/issues/13)
    facts = {
        "platform": "linux", "machine": "aarch64", "torch_version": "2.9.0+cu130", "torch_cuda": "13.0",
        "cuda_available": True, "device_count": 1, "driver_version": "580.95.05",
        "gpus": [gpu(0, "NVIDIA GB10", (12, 1))],
        "init_warning": "Found GPU0 NVIDIA GB10 which is of cuda capability 12.1.\n"
                        "Minimum and Maximum cuda capability supported by this version of PyTorch is\n(8.0) - (12.0)",
    }
    assert errors(facts) == []
    facts["arch_list"] = ["sm_80", "sm_90", "sm_100", "sm_110", "sm_120"]
    assert errors(facts) == []


def test_gb10_torch_2_13_warning_text_is_not_an_error():
    # https://github.com/pytorch/pytorch/issues/172629#issuecomment (torch==2.13.0+cu130: a false positive)
    facts = {
        "platform": "linux", "machine": "aarch64", "torch_version": "2.13.0+cu130", "torch_cuda": "13.0",
        "cuda_available": True,
        "init_warning": "Found GPU0 NVIDIA GB10 which is of compute capability (CC) 12.1.\n"
                        "Your installed torch==2.13.0+cu130 does not include kernels for this GPU.",
    }
    assert errors(facts) == []


# -- older GPUs dropped from a build ---------------------------------------------------------
def test_gtx1070ti_on_a_build_without_pascal_is_td006():
    # https://github.com/pytorch/pytorch/issues/53164 (cu111 nightly: sm_50 sm_70 sm_80 sm_86)
    facts = {
        "platform": "linux", "machine": "x86_64", "torch_cuda": "11.1", "torch_version": "1.9.0.dev20210303+cu111",
        "arch_list": ["sm_50", "sm_70", "sm_80", "sm_86"], "gpus": [gpu(0, "GeForce GTX 1070 Ti", (6, 1))],
    }
    assert errors(facts) == ["TD006"]
    # a Pascal GPU runs the sm_60 cubins of the cu126 builds; no cu128+ build has them
    assert _flavour_in(one(facts, "TD006").fix) in ("cu126", "cu118", "cu124", "cu121")


def test_tesla_k80_on_torch_2_7_cu118():
    # https://github.com/nelson-liu/pytorch-manylinux-binaries/issues/13 (torch 2.7.1+cu118; K80 driver max CUDA 11.4)
    facts = {
        "platform": "linux", "machine": "x86_64", "torch_version": "2.7.1+cu118", "torch_cuda": "11.8",
        "arch_list": ["sm_50", "sm_60", "sm_61", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
        "drv_cuda": 11040, "gpus": [gpu(0, "Tesla K80", (3, 7)), gpu(1, "Tesla K80", (3, 7))],
    }
    assert errors(facts) == ["TD006"]
    fix = one(facts, "TD006").fix
    assert "source" in fix and "whl/cu" not in fix  # no PyPI wheel has sm_37 kernels


def test_k40c_and_gt710_next_to_a_k80_on_torch_1_3():
    # https://github.com/pytorch/pytorch/issues/31319 (K80 works, K40c and GeForce 710 (sm_35) get
    # cudaErrorNoKernelImageForDevice; torch 1.3 kept sm_37 but not sm_35:
    # https://github.com/pytorch/pytorch/issues/46647)
    facts = {
        "platform": "linux", "torch_version": "1.3.1", "torch_cuda": "10.1",
        "arch_list": ["sm_37", "sm_50", "sm_60", "sm_70", "sm_75"],
        "gpus": [gpu(0, "Tesla K80", (3, 7)), gpu(1, "Tesla K40c", (3, 5)), gpu(2, "Tesla K40c", (3, 5)),
                 gpu(3, "GeForce GT 710", (3, 5))],
        "init_error": "RuntimeError: parallel_for failed: cudaErrorNoKernelImageForDevice: no kernel image is available for execution on the device",
    }
    found = by_code(facts)
    assert errors(facts) == ["TD006"]
    assert "3.5" in found["TD006"][0].message
    assert "TD011" in found  # three different models: CUDA's order is not nvidia-smi's


def test_a100_on_a_build_with_sm70_at_most_and_driver_450():
    # https://github.com/pytorch/pytorch/issues/45028 (comment of 2022-01-15: driver 450.119.03, CUDA 11.0)
    facts = {
        "platform": "linux", "machine": "x86_64", "torch_cuda": "10.2",
        "arch_list": ["sm_37", "sm_50", "sm_60", "sm_70"], "driver_version": "450.119.03", "drv_cuda": 11000,
        "gpus": [gpu(0, "A100-SXM4-40GB", (8, 0), mig_mode="Disabled")],
    }
    assert errors(facts) == ["TD005"]
    # driver 450.119 runs CUDA 11.x by minor-version compatibility, not 12.x (needs >= 525)
    assert _flavour_in(one(facts, "TD005").fix) == "cu118"


def test_a100_known_only_from_the_warning_when_torch_cuda_is_not_in_the_snapshot():
    # https://github.com/andreimargeloiu/WPFS/issues/3 (torch 1.10.1 default build on an A100)
    facts = {
        "platform": "linux", "torch_version": "1.10.1",
        "init_warning": "NVIDIA A100-SXM4-80GB with CUDA capability sm_80 is not compatible with the current PyTorch installation.\n"
                        "The current PyTorch install supports CUDA capabilities sm_37 sm_50 sm_60 sm_70.",
    }
    assert errors(facts) == ["TD005"]


# -- driver too old ---------------------------------------------------------------------------
def test_driver_470_too_old_with_the_build_unknown():
    # https://github.com/lllyasviel/Fooocus/issues/1313 (RTX 3050 laptop, driver 470.86, CUDA 11.4)
    facts = {
        "platform": "linux", "driver_version": "470.86", "drv_cuda": 11040,
        "gpus": [gpu(0, "NVIDIA GeForce RTX 3050 Laptop GPU", (8, 6))],
        "init_error": "RuntimeError: The NVIDIA driver on your system is too old (found version 11040). Please update your GPU driver by downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx Alternatively, go to: https://pytorch.org to install a PyTorch version that has been compiled with your version of the CUDA driver.",
    }
    found = one(facts, "TD003")
    assert errors(facts) == ["TD003"]
    assert "cu118" in found.fix  # 470 runs the cu118 build by minor-version compatibility


def test_driver_found_11000_on_a_cuda_12_1_container():
    # https://github.com/IEIT-Yuan/Yuan-2.0/issues/65 (container CUDA 12.1; maintainers: update the driver to 535)
    facts = {
        "platform": "linux", "in_container": True, "torch_version": "2.1.0a0+32f93b1", "torch_cuda": "12.1",
        "init_warning": "CUDA initialization: The NVIDIA driver on your system is too old (found version 11000). Please update your GPU driver by downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx",
    }
    found = one(facts, "TD003")
    assert errors(facts) == ["TD003"]
    assert "525" in found.fix or "R5" in found.fix


def test_driver_found_11060_with_a_cu121_build_offers_cu118():
    # https://github.com/zai-org/ChatGLM3/issues/100 (found version 11060; RVC-Boss/GPT-SoVITS#83 says cu118 works)
    facts = {
        "platform": "linux", "machine": "x86_64", "torch_version": "2.1.0+cu121", "torch_cuda": "12.1",
        "init_error": "RuntimeError: The NVIDIA driver on your system is too old (found version 11060).",
    }
    found = one(facts, "TD003")
    assert "cu118" in found.fix


# -- host problems ----------------------------------------------------------------------------
def test_cuda_unknown_error_after_suspend():
    # https://github.com/pytorch/pytorch/issues/88639 (torch 1.13.0+cu117, Debian 11)
    facts = {
        "platform": "linux", "torch_version": "1.13.0+cu117", "torch_cuda": "11.7", "cuda_available": False,
        "init_warning": "CUDA initialization: CUDA unknown error - this may be due to an incorrectly set up environment, e.g. changing env variable CUDA_VISIBLE_DEVICES after program start. Setting the available devices to be zero.",
    }
    assert errors(facts) == ["TD018"]


def test_nvml_driver_library_mismatch():
    # https://github.com/mozilla/translations/issues/1167 (nvidia-smi: NVML library version 550.144)
    facts = {
        "platform": "linux", "nvidia_smi_present": True, "nvml_lib_version": "12.550.144",
        "nvidia_smi_error": "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 550.144",
    }
    assert errors(facts) == ["TD012"]


def test_cuda_visible_devices_1_on_a_single_gpu_machine():
    # https://github.com/thuml/Autoformer/issues/25 (scripts export CUDA_VISIBLE_DEVICES=1)
    facts = {"platform": "linux", "torch_cuda": "11.3", "cuda_available": False, "nvml_device_count": 1, "cvd": "1"}
    found = one(facts, "TD010")
    assert "device 1 does not exist" in found.message


def test_cuda_visible_devices_2_on_windows_with_one_gpu():
    # https://github.com/thuml/Time-Series-Library/issues/10 (RTX 2070 SUPER, "No CUDA GPUs are available")
    facts = {
        "platform": "win32", "torch_cuda": "11.3", "cuda_available": False, "cvd": "2",
        "gpus": [gpu(0, "NVIDIA GeForce RTX 2070 SUPER", (7, 5))], "init_error": "RuntimeError: No CUDA GPUs are available",
    }
    assert errors(facts) == ["TD010"]


def test_stub_libcuda_on_ld_library_path_in_wsl():
    # https://github.com/xmake-io/xmake/issues/4686 (WSL2, LD_LIBRARY_PATH has /usr/local/cuda/lib64/stubs)
    facts = {
        "platform": "linux", "is_wsl": True, "wsl_version": 2, "ld_library_path": "/usr/local/cuda/lib64/stubs:/usr/local/cuda/lib64",
        "init_error": "CUDA driver is a stub library",
    }
    assert errors(facts) == ["TD019"]


def test_conda_cpuonly_build_on_a_gpu_machine():
    # https://github.com/pytorch/pytorch/issues/32369 (pytorch 1.4.0 py3.7_cpu_0 [cpuonly], Ubuntu 16.04)
    facts = {
        "platform": "linux", "torch_version": "1.4.0", "torch_cuda": None, "cuda_available": False,
        "nvml_device_count": 1, "conda_pkgs": ["pytorch 1.4.0 py3.7_cpu_0", "cpuonly 1.0 0"],
    }
    assert sorted(set(errors(facts))) == ["TD002", "TD014"]


def test_conda_solver_fell_back_to_the_cpu_build():
    # https://github.com/pytorch/pytorch/issues/69202 (pytorch=1.9.0=py3.8_cpu_0 although cudatoolkit=11.3 was asked)
    facts = {
        "platform": "linux", "torch_version": "1.9.0", "cuda_available": False, "nvml_device_count": 1,
        "conda_pkgs": ["pytorch 1.9.0 py3.8_cpu_0", "cudatoolkit 11.3.1 h2bc3f7f_2"],
    }
    assert errors(facts) == ["TD002"]


def test_docker_default_shm_bus_error():
    # https://github.com/bytedance/Protenix/issues/2 (RTX 4090 in docker; fixed with --shm-size / -v /dev/shm)
    facts = {
        "platform": "linux", "in_container": True, "dev_nvidia_present": True, "cuda_available": True,
        "shm_bytes": 64 * 2**20, "gpus": [gpu(0, "NVIDIA GeForce RTX 4090", (8, 9))],
    }
    found = diagnose(facts)
    assert [(f.code, f.severity) for f in found] == [("TD022", Severity.WARNING)]
    assert "--shm-size" in found[0].fix


def test_fork_after_cuda_init():
    # https://github.com/facebookresearch/pycls/issues/183
    facts = {"platform": "linux", "cuda_available": True, "mp_start_method": "fork",
             "init_error": "RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use the 'spawn' start method"}
    assert errors(facts) == ["TD023"]


def test_one_mig_instance_per_process_is_not_an_error():
    # https://github.com/pytorch/pytorch/issues/102715 (A100 in MIG mode; device_count() is 1 by design)
    facts = {
        "platform": "linux", "torch_version": "1.13.1", "torch_cuda": "11.7", "cuda_available": True, "device_count": 1,
        "gpus": [gpu(0, "NVIDIA A100-SXM4-40GB", (8, 0), mig_mode="Enabled", mig_instances=7)],
    }
    assert errors(facts) == []


# -- little known: no confident wrong error ------------------------------------------------------
def test_is_available_false_and_nothing_else_known_is_quiet():
    # the bare "torch.cuda.is_available() returns False" of https://github.com/pyg-team/pytorch_geometric/issues/738
    assert errors({"torch_version": "1.3.0", "cuda_available": False}) == []


def test_unknown_driver_numbers_do_not_make_a_driver_error():
    # https://github.com/microsoft/WSL/issues/9254: WSL, torch 1.10.0+cu111, the driver reports version 0
    facts = {"platform": "linux", "is_wsl": True, "torch_version": "1.10.0+cu111", "torch_cuda": "11.1", "drv_cuda": 0}
    assert "TD003" not in errors(facts)


def test_k80_fix_never_asks_for_a_driver_kepler_cannot_run():
    # https://github.com/nelson-liu/pytorch-manylinux-binaries/issues/13: the K80's driver stops at R470 (CUDA 11.4)
    facts = {"platform": "linux", "torch_version": "1.12.1+cu113", "torch_cuda": "11.3", "driver_version": "470.256.02",
             "arch_list": ["sm_37", "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86"],
             "gpus": [gpu(0, "Tesla K80", (3, 7))]}
    assert errors(facts) == []
    facts.update(torch_version="2.0.1+cu118", torch_cuda="11.8", arch_list=["sm_50", "sm_60", "sm_61", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"])
    found = by_code(facts)
    assert "520" not in found["TD004"][0].fix and "R470" in found["TD004"][0].fix
    facts.update(torch_version="2.5.1+cu121", torch_cuda="12.1")
    fix = one(facts, "TD003").fix
    assert "R5" not in fix and "R470" in fix


def test_flavour_advice_names_the_driver_it_needs_when_the_driver_is_unknown():
    # the RTX 5080 of https://github.com/lllyasviel/FramePack/issues/702: a cu13x wheel needs driver >= 580
    facts = {"platform": "win32", "torch_cuda": "12.6", "arch_list": CU124_ARCHS,
             "gpus": [gpu(0, "NVIDIA GeForce RTX 5080", (12, 0))]}
    fix = one(facts, "TD005").fix
    assert "needs an NVIDIA driver >=" in fix


def test_healthy_machines_minus_any_two_facts_never_get_an_error():
    # precision first: losing facts (a partial snapshot pasted from a report) must not invent an error
    import itertools

    from tests.env.snapshots import gb10_cu130, h100, rtx4090_cu118

    for base in (h100(), rtx4090_cu118(), gb10_cu130()):
        for r in (1, 2):
            for gone in itertools.combinations(list(base), r):
                facts = {k: v for k, v in base.items() if k not in gone}
                assert errors(facts) == [], gone


def test_nvml_version_of_a_two_part_driver_is_read_as_the_driver():
    # nvidia-smi's "NVML library version: 550.144" (https://github.com/mozilla/translations/issues/1167);
    # NVML reports it as "12.550.144": the leading 12 is the CUDA major, not the driver branch
    facts = {"platform": "linux", "torch_cuda": "12.4", "torch_version": "2.5.1+cu124", "nvml_lib_version": "12.550.144"}
    assert errors(facts) == []
