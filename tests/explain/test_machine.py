"""Refined by the machine: the same message means something concrete on the facts of a given machine (injected, never this one's)."""

from __future__ import annotations

from tests.env.snapshots import gpu, h100, laptop, rtx4090_cu118
from torchdoctor.explain import explain_text

NO_KERNEL = "RuntimeError: CUDA error: no kernel image is available for execution on the device"
CPU_BUILD = "AssertionError: Torch not compiled with CUDA enabled"


def _one(text, facts):
    [f] = explain_text(text, facts)
    return f


def test_no_kernel_image_on_a_new_gpu_names_the_gpu_the_wheels_kernels_and_the_build_to_install():
    facts = h100(gpus=[gpu(0, "NVIDIA GeForce RTX 5090", (12, 0), 32607)], driver_version="570.133.07",
                 proc_driver_version="570.133.07", nvml_lib_version="12.570.133.07", drv_cuda=12080)
    f = _one(NO_KERNEL, facts)
    assert f.code == "TD005"
    assert "NVIDIA GeForce RTX 5090" in f.message and "12.0" in f.message and "sm_90" in f.message
    assert "cu128" in f.fix and "download.pytorch.org/whl/cu128" in f.fix  # the driver (570) runs cu128, not cu130


def test_no_kernel_image_where_this_machines_gpus_are_covered_says_the_message_comes_from_elsewhere():
    f = _one(NO_KERNEL, h100())
    assert f.code == "TD005" and "another machine" in f.message


def test_an_old_gpu_is_td006():
    facts = rtx4090_cu118(gpus=[gpu(0, "Tesla K80", (3, 7), 11441)])
    assert _one(NO_KERNEL, facts).code == "TD006"


def test_cpu_build_without_any_gpu_is_the_programs_hard_coded_cuda():
    f = _one(CPU_BUILD, laptop())
    assert f.code == "TD101" and "no NVIDIA GPU" in f.message


def test_cpu_build_on_a_gpu_machine_is_td002_with_the_wheel_for_its_gpu():
    facts = laptop(pci_nvidia_devices=1, gpus=[gpu(0, "NVIDIA GeForce RTX 4090", (8, 9), 24564)], driver_version="550.120")
    f = _one(CPU_BUILD, facts)
    assert f.code == "TD002" and "RTX 4090" in f.message and "download.pytorch.org/whl/cu" in f.fix


def test_driver_too_old_names_this_machines_driver_and_build():
    facts = h100(driver_version="470.57.02", proc_driver_version="470.57.02", nvml_lib_version="11.470.57.02", drv_cuda=11040)
    f = _one("RuntimeError: The NVIDIA driver on your system is too old (found version 11040).", facts)
    assert f.code == "TD003" and "470.57.02" in f.message and "12.6" in f.message and "2.7.1+cu126" in f.message


def test_forward_compatibility_error_on_a_geforce_names_the_driver_and_the_compat_library():
    facts = rtx4090_cu118(torch_version="2.5.1+cu124", torch_cuda="12.4", driver_version="470.57.02", proc_driver_version="470.57.02",
                          nvml_lib_version="11.470.57.02", drv_cuda=11040)
    f = _one("RuntimeError: ... Error 804: forward compatibility was attempted on non supported HW", facts)
    assert f.code == "TD003" and "error 804" in f.message and "470.57.02" in f.message and "/usr/local/cuda/compat" in f.fix


def test_invalid_ordinal_counts_the_gpus_this_machine_shows():
    facts = h100(gpus=[gpu(0, "NVIDIA H100 80GB HBM3", (9, 0)), gpu(1, "NVIDIA H100 80GB HBM3", (9, 0))], nvml_device_count=2,
                 pci_nvidia_devices=2, cvd="1")
    f = _one("RuntimeError: CUDA error: invalid device ordinal", facts)
    assert f.code == "TD104" and "2 GPUs, 1 of them visible with CUDA_VISIBLE_DEVICES='1'" in f.message


def test_out_of_memory_names_the_gpu():
    f = _one("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.06 GiB is free.", h100())
    assert f.code == "TD610" and "NVIDIA H100 80GB HBM3" in f.message


def test_bus_error_in_a_container_with_the_default_shm_is_the_doctors_td022():
    f = _one("ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
             h100(shm_bytes=64 * 2**20, in_container=True))
    assert f.code == "TD022" and "64 MiB" in f.message and "--shm-size" in f.fix


def test_bus_error_with_a_large_shm_says_what_filled_it():
    f = _one("RuntimeError: DataLoader worker (pid 77) is killed by signal: Bus error.", h100())
    assert f.code == "TD022" and "270.0 GiB" in f.message


def test_nccl_missing_on_windows_says_so():
    f = _one("RuntimeError: Distributed package doesn't have NCCL built in", laptop(platform="win32"))
    assert f.code == "TD704" and "Windows" in f.message


def test_a_checkpoint_from_a_gpu_on_a_cpu_build_with_a_gpu_names_the_real_problem():
    facts = laptop(pci_nvidia_devices=1, gpus=[gpu(0, "NVIDIA GeForce RTX 3060", (8, 6), 12288)], driver_version="550.120")
    f = _one("RuntimeError: Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False.", facts)
    assert f.code == "TD502" and "TD002" in f.message and "RTX 3060" in f.message


def test_the_machine_is_probed_only_for_messages_about_it():
    calls = []

    def probe():
        calls.append(1)
        return laptop()

    assert [f.code for f in explain_text("ValueError: sampler option is mutually exclusive with shuffle", probe)] == ["TD702"]
    assert calls == []
    assert [f.code for f in explain_text(CPU_BUILD + "\n" + CPU_BUILD, probe)] == ["TD101"]
    assert calls == [1]


def test_a_probe_that_fails_leaves_the_text_alone():
    assert [f.code for f in explain_text(CPU_BUILD, lambda: None)] == ["TD002"]
