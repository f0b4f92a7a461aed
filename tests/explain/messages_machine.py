"""Real messages about the machine (kernels, driver, build, NVML, containers, shared memory), with their sources."""

from __future__ import annotations

from tests.explain.messages import Case

CASES: list[Case] = [
    # --- no kernel image / GPU too new or too old -----------------------------------------------------------
    Case("no-kernel-image", "TD005", "Oct 04 13:19:39 llm sd-webui-forge-start[394]: /nix/store/a1j-python3-3.11.13-env/lib/python3.11/site-packages/torch/cuda/"
         "__init__.py:209: UserWarning:\nNVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch installation.\n"
         "The current PyTorch install supports CUDA capabilities sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90.\nIf you want to use the NVIDIA GeForce RTX 5090 GPU with "
         "PyTorch, please check the instructions at https://pytorch.org/get-started/locally/\nRuntimeError: CUDA error: no kernel image is available for execution "
         "on the device\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
         ("NVIDIA GeForce RTX 5090", "12.0", "sm_90", "download.pytorch.org/whl/cu1"), "https://github.com/Janrupf/stable-diffusion-webui-nix/issues/9 (torch 2.x)"),
    Case("no-kernel-image", "TD005", "UserWarning: Found GPU0 NVIDIA GeForce RTX 5090 which is of compute capability (CC) 12.0.\nThe following list shows the CCs "
         "this version of PyTorch was built for and the hardware CCs it supports:\n- 5.0 which supports hardware CC >=5.0,<6.0\n- 9.0 which supports hardware CC "
         ">=9.0,<10.0\nYour installed torch==2.13.0+cu126 does not include kernels for this GPU. Reinstall the same version against a CUDA build that does, e.g.:\n"
         "  For CUDA 12.9 use pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu129",
         ("NVIDIA GeForce RTX 5090", "12.0", "whl/cu129"), "pytorch/pytorch torch/cuda/__init__.py _warn_unsupported_code (torch 2.13)"),
    Case("no-kernel-image", "TD006", "Found GPU0 NVIDIA GeForce GTX 680 which is of cuda capability 3.0.\n    PyTorch no longer supports this GPU because it is too "
         "old.\n    The minimum cuda capability supported by this library is 3.7.", ("GTX 680", "3.0", "3.7"),
         "https://github.com/rupeshs/diffusionmagic/issues/12 (torch 1.x)"),
    Case("no-kernel-image", "TD006", "UserWarning: \n    Found GPU0 Ellesmere [Radeon RX 470/480/570/570X/580/580X] which is of cuda capability 3.0.\n    PyTorch no "
         "longer supports this GPU because it is too old.\n    The minimum cuda capability that we support is 3.5.", ("Ellesmere", "3.5"),
         "https://github.com/ROCm/pytorch/issues/627 (torch 1.5 wording)"),
    Case("no-kernel-image", "TD005", "RuntimeError: cuda runtime error (8) : invalid device function at c:\\anaconda2\\conda-bld\\pytorch_1519496000060\\work\\torch"
         "\\lib\\thc\\generic/THCTensorMathPointwise.cu:301", ("invalid device function",), "https://github.com/peterjc123/pytorch-scripts/issues/18 (torch 0.3)"),
    # --- driver too old / insufficient / forward compatibility --------------------------------------------
    Case("driver-too-old", "TD003", "RuntimeError: The NVIDIA driver on your system is too old (found version 11040). Please update your GPU driver by downloading "
         "and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx Alternatively, go to: https://pytorch.org to install a PyTorch "
         "version that has been compiled with your version of the CUDA driver.", ("CUDA 11.4",), "https://github.com/lllyasviel/Fooocus/issues/1313"),
    Case("driver-too-old", "TD003", "AssertionError: \nThe NVIDIA driver on your system is too old (found version 9000).\nPlease update your GPU driver by downloading "
         "and installing a new\nversion from the URL: http://www.nvidia.com/Download/index.aspx", ("CUDA 9.0",), "https://github.com/wuhuikai/FastFCN/issues/37 (torch 1.0)"),
    Case("driver-too-old", "TD003", "UserWarning: CUDA initialization: The NVIDIA driver on your system is too old (found version 10010). Please update your GPU "
         "driver by downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx (Triggered internally at  "
         "/pytorch/c10/cuda/CUDAFunctions.cpp:100.)", ("CUDA 10.1",), "https://github.com/ultralytics/yolov5/issues/2389 (torch 1.7)"),
    Case("driver-too-old", "TD003", "RuntimeError: cuda runtime error (35) : CUDA driver version is insufficient for CUDA runtime version at /opt/conda/conda-bld/"
         "pytorch_1524586445097/work/aten/src/THC/THCGeneral.cpp:70", ("too old",), "https://github.com/BobLiu20/YOLOv3_PyTorch/issues/12 (torch 0.4)"),
    Case("forward-compat-unsupported", "TD003", "UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions "
         "before calling NumCudaDevices() that might have already set an error? Error 804: forward compatibility was attempted on non supported HW (Triggered "
         "internally at ../c10/cuda/CUDAFunctions.cpp:109.)", ("error 804", "cuda-compat"), "https://github.com/PKU-YuanGroup/Video-LLaVA/issues/22"),
    Case("forward-compat-unsupported", "TD003", "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
         "NumCudaDevices() that might have already set an error? Error 804: forward compatibility was attempted on non supported HW", ("/usr/local/cuda/compat",),
         "https://github.com/chenfei-wu/TaskMatrix/issues/379"),
    # --- CPU-only build, no driver, no GPU visible ------------------------------------------------------------
    Case("cpu-only-build", "TD002", 'File "/home/xx/anaconda3/envs/tf-gpu/lib/python3.7/site-packages/torch/cuda/__init__.py", line 95, in _check_driver\n'
         '    raise AssertionError("Torch not compiled with CUDA enabled")\nAssertionError: Torch not compiled with CUDA enabled', ("CPU-only build", "whl/cu"),
         "https://github.com/facebookresearch/detectron2/issues/460 (torch 1.3)"),
    Case("cpu-only-build", "TD002", "AssertionError: Torch not compiled with CUDA enabled", ("CPU-only",), "pytorch/pytorch torch/cuda/__init__.py _lazy_init (2.13)"),
    Case("cpu-only-build", "TD002", "AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'", ("CPU-only",),
         "torch 2.13 CPU build, torch.cuda.set_device(1)"),
    Case("no-gpu-visible", "TD007", "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver from "
         "http://www.nvidia.com/Download/index.aspx", ("no NVIDIA driver",), "pytorch/pytorch c10/cuda/CUDAFunctions.cpp"),
    Case("no-gpu-visible", "TD101", "RuntimeError: No CUDA GPUs are available", ("sees none",), "pytorch/pytorch c10/cuda/CUDAFunctions.cpp device_count_ensure_non_zero"),
    Case("no-gpu-visible", "TD101", "RuntimeError: CUDA driver initialization failed, you might not have a CUDA gpu.", ("sees none",),
         "pytorch/pytorch c10/cuda/CUDAFunctions.cpp (cudaErrorInitializationError)"),
    # --- busy, unknown error, NVML, stub -----------------------------------------------------------------------
    Case("gpu-busy", "TD020", "RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable", ("busy",),
         "https://github.com/facebookresearch/detectron2/issues/2580"),
    Case("gpu-busy", "TD020", "RuntimeError: cuda runtime error (46) : all CUDA-capable devices are busy or unavailable at /opt/conda/conda-bld/pytorch_1502004572321/"
         "work/torch/lib/THC/generic/THCStorage.cu:66", ("busy",), "https://github.com/pytorch/pytorch/issues/2704 (torch 0.2)"),
    Case("gpu-busy", "TD020", "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side "
         "assertions.", ("busy",), "https://github.com/cositools/cosipy/issues/631 (CUDA 12 wording)"),
    Case("cuda-unknown-error", "TD018", "/opt/anaconda3/lib/python3.8/site-packages/torch/cuda/__init__.py:88: UserWarning: CUDA initialization: CUDA unknown error - "
         "this may be due to an incorrectly set up environment, e.g. changing env variable CUDA_VISIBLE_DEVICES after program start. Setting the available devices "
         "to be zero. (Triggered internally at ../c10/cuda/CUDAFunctions.cpp:109.)", ("unknown error", "nvidia_uvm"), "https://github.com/pytorch/pytorch/issues/88639"),
    Case("cuda-unknown-error", "TD018", "    torch._C._cuda_init()\nRuntimeError: CUDA unknown error - this may be due to an incorrectly set up environment, e.g. changing "
         "env variable CUDA_VISIBLE_DEVICES after program start. Setting the available devices to be zero.", ("nvidia_uvm",),
         "https://github.com/pytorch/pytorch/issues/49327 (torch 1.7)"),
    Case("nvml-mismatch", "TD012", "[task 2025-07-01T05:06:30.005+00:00] [train] [nvidia-smi(stdout)] Failed to initialize NVML: Driver/library version mismatch\n"
         "[task 2025-07-01T05:06:30.005+00:00] [train] [nvidia-smi(stdout)] NVML library version: 550.144", ("550.144", "reboot"),
         "https://github.com/mozilla/translations/issues/1167"),
    Case("nvml-mismatch", "TD012", "Failed to initialize NVML: Driver/library version mismatch", ("mismatch",),
         "https://github.com/NVIDIA/ubuntu-packaging-nvidia-driver/issues/3"),
    Case("nvml-mismatch", "TD012", "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling NumCudaDevices() that "
         "might have already set an error? Error 803: system has unsupported display driver / cuda driver combination", ("cuda-compat",),
         "https://github.com/vllm-project/vllm/issues/15335"),
    Case("stub-libcuda", "TD019", "UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
         "NumCudaDevices() that might have already set an error? Error 34: CUDA driver is a stub library (Triggered internally at  ../c10/cuda/CUDAFunctions.cpp:109.)",
         ("stub",), "https://github.com/fboulnois/stable-diffusion-docker/issues/22"),
    Case("stub-libcuda", "TD019", "chifflot-7:1234:1234 [0] NCCL WARN Cuda failure 'CUDA driver is a stub library'", ("LD_LIBRARY_PATH",),
         "https://github.com/horovod/horovod/issues/3831"),
    # --- shared memory, fork ---------------------------------------------------------------------------------
    Case("shm-bus-error", "TD022", "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).\nTraceback (most "
         "recent call last):\nRuntimeError: DataLoader worker (pid 3216) is killed by signal: Bus error. It is possible that dataloader's workers are out of shared "
         "memory. Please try to raise your shared memory limit.", ("shared memory", "--shm-size"), "https://github.com/THU-DA-6D-Pose-Group/GDR-Net/issues/16"),
    Case("shm-bus-error", "TD022", "RuntimeError: DataLoader worker (pid 46794) is killed by signal: Bus error. It is possible that dataloader's workers are out of "
         "shared memory. Please try to raise your shared memory limit.", ("46794",), "https://github.com/hkchengrex/STCN/issues/132"),
    Case("shm-bus-error", "TD022", "RuntimeError: unable to write to file </torch_31911_952036340_6686>: No space left on device (28)", ("/dev/shm",),
         "https://github.com/idiap/ESLAM/issues/20 (torch 2.x)"),
    Case("shm-bus-error", "TD022", "RuntimeError: unable to write to file </torch_76_3625483894> at /pytorch/aten/src/TH/THAllocator.c:383", ("/dev/shm",),
         "https://github.com/pytorch/pytorch/issues/10396 (torch 0.4)"),
    Case("cuda-before-fork", "TD023", "RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use the 'spawn' start "
         "method", ("spawn",), "https://github.com/facebookresearch/pycls/issues/183"),
    Case("cuda-before-fork", "TD023", "raise RuntimeError(\nRuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must "
         "use the 'spawn' start method)", ("multiprocessing_context='spawn'",), "https://github.com/shubham-goel/4D-Humans/issues/59"),
]

LOOKALIKES: list[tuple[str, frozenset[str], str]] = [
    ("RuntimeError: DataLoader worker (pid 1234) is killed by signal: Killed.", frozenset(),
     "torch/csrc/DataLoader.cpp template with SIGKILL (the host's OOM killer, not /dev/shm)"),
    ("InvalidArgumentError: Invalid device ordinal value (1). Valid range is [0, 0]. while setting up XLA_GPU_JIT device number 1", frozenset(),
     "https://github.com/google/automl/issues/111 (TensorFlow's wording)"),
    ("UserWarning: torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.", frozenset(),
     "torch 2.13 torch/amp/grad_scaler.py (a notice, not the deprecation)"),
    ("RuntimeError: CUDA error: invalid device ordinal\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
     "incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1.\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.", frozenset({"TD104"}),
     "https://github.com/hpcaitech/Open-Sora/issues/40 (no device-side assert: only TD104)"),
    ("RuntimeError: [enforce fail at alloc_cpu.cpp:73] . DefaultCPUAllocator: can't allocate memory: you tried to allocate 116813856768 bytes. Error code 12 "
     "(Cannot allocate memory)", frozenset(), "https://github.com/JingyunLiang/VRT/issues/49 (host RAM, not the GPU)"),
    ("RuntimeError: Trying to backward through the graph a second time (or directly access saved tensors after they have already been freed).", frozenset(),
     "pytorch/pytorch torch/csrc/autograd (another autograd error)"),
]
