"""Real messages a training run dies with (loaders, autograd, NCCL, AMP, asserts, memory), with their sources."""

from __future__ import annotations

from tests.explain.messages import Case, tb

CASES: list[Case] = [
    Case("invalid-device-ordinal", "TD104", tb("torch.cuda.set_device(args.local_rank)", '  File "/home/socialab/miniconda3/envs/x/lib/python3.10/site-packages/'
         'torch/cuda/__init__.py", line 314, in set_device\n    torch._C._cuda_setDevice(device)\nRuntimeError: CUDA error: invalid device ordinal', line=57),
         ("`args.local_rank`", "LOCAL_RANK"), "https://github.com/microsoft/SimXNS/issues/2"),
    Case("invalid-device-ordinal", "TD104", "RuntimeError: CUDA error: invalid device ordinal\nCUDA kernel errors might be asynchronously reported at some other API "
         "call, so the stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1.", ("invalid device ordinal",),
         "https://github.com/wdrink/PyDeepFakeDet/issues/1"),
    Case("invalid-device-ordinal", "TD104", "RuntimeError: cuda runtime error (10) : invalid device ordinal at torch/csrc/cuda/Module.cpp:88", ("CUDA_VISIBLE_DEVICES",),
         "https://github.com/NVIDIA/vid2vid/issues/17 (torch 0.4)"),
    Case("sampler-and-shuffle", "TD702", "ValueError: sampler option is mutually exclusive with shuffle", ("sampler=", "shuffle=True"),
         "pytorch/pytorch torch/utils/data/dataloader.py (2.13)"),
    Case("sampler-and-shuffle", "TD702", "    raise ValueError('sampler is mutually exclusive with shuffle')\nValueError: sampler is mutually exclusive with shuffle",
         ("shuffle=True",), "https://github.com/chineseocr/chinese-ocr/issues/136 (torch 0.3)"),
    Case("sampler-and-shuffle", "TD702", "ValueError: batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last",
         ("batch_sampler",), "pytorch/pytorch torch/utils/data/dataloader.py (2.13)"),
    Case("backward-without-graph", "TD407", tb("loss.backward()", '  File "/usr/lib64/python3.6/site-packages/torch/tensor.py", line 107, in backward\n'
         '    torch.autograd.backward(self, gradient, retain_graph, create_graph)\nRuntimeError: element 0 of tensors does not require grad and does not have a '
         'grad_fn', line=189), ("no_grad", "loss.backward()", "requires_grad"), "https://github.com/ronghuaiyang/arcface-pytorch/issues/56"),
    Case("backward-without-graph", "TD407", "RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn", ("grad_fn",),
         "https://github.com/pytorch/pytorch/issues/19806"),
    Case("nccl-unavailable", "TD704", "D:\\Python39\\lib\\site-packages\\torch\\distributed\\distributed_c10d.py:613: UserWarning: Attempted to get default timeout "
         "for nccl backend, but NCCL support is not compiled\n  warnings.warn(\"Attempted to get default timeout for nccl backend, but NCCL support is not compiled\")\n"
         "RuntimeError: Distributed package doesn't have NCCL built in", ("gloo", "no NCCL"), "https://github.com/pytorch/pytorch/issues/159742"),
    Case("nccl-unavailable", "TD704", "RuntimeError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!", ("found no GPU", "gloo"),
         "https://github.com/meta-llama/codellama/issues/125"),
    Case("nccl-duplicate-gpu", "TD705", "torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1727, "
         "invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.19.3\nncclInvalidUsage: This usually reflects invalid usage of NCCL library.\nLast error:\n"
         "Duplicate GPU detected : rank 3 and rank 0 both on CUDA device f000\n    torch.distributed.barrier()\ntorch.distributed.DistBackendError: NCCL error in: "
         "/opt/pytorch/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1727, invalid usage\nLast error:\nDuplicate GPU detected : rank 7 and rank 0 both on "
         "CUDA device f000", ("0, 3, 7", "f000", "set_device"), "https://github.com/NVIDIA/Megatron-LM/issues/661"),
    Case("nccl-duplicate-gpu", "TD705", "[1,2]<stdout>:smc-gpu-03:29880:30398 [0] init.cc:497 NCCL WARN Duplicate GPU detected : rank 2 and rank 0 both on CUDA device "
         "1000\n[1,4]<stdout>:smc-gpu-03:29882:30400 [0] init.cc:497 NCCL WARN Duplicate GPU detected : rank 4 and rank 0 both on CUDA device 1000",
         ("0, 2, 4", "1000"), "https://github.com/horovod/horovod/issues/3929"),
    Case("deprecated-amp", "TD601", "/work/efficientvit/train.py:31: FutureWarning: `torch.cuda.amp.autocast(args...)` is deprecated. Please use "
         "`torch.amp.autocast('cuda', args...)` instead.\n  with torch.cuda.amp.autocast(enabled=self.enable_amp):", ("torch.amp.autocast('cuda', ...)",),
         "https://github.com/mit-han-lab/efficientvit/issues/127 (torch 2.4)"),
    Case("deprecated-amp", "TD601", "FutureWarning: `torch.cuda.amp.GradScaler(args...)` is deprecated. Please use `torch.amp.GradScaler('cuda', args...)` instead.",
         ("torch.amp.GradScaler('cuda', ...)",), "torch 2.13 torch/cuda/amp/grad_scaler.py"),
    Case("deprecated-amp", "TD601", "FutureWarning: `torch.cpu.amp.autocast(args...)` is deprecated. Please use `torch.amp.autocast('cpu', args...)` instead.",
         ("torch.amp.autocast('cpu', ...)",), "torch 2.13 torch/cpu/amp/autocast_mode.py"),
    Case("index-out-of-range", "TD307", "/pytorch/aten/src/THCUNN/ClassNLLCriterion.cu:108: cunn_ClassNLLCriterion_updateOutput_kernel: block: [0,0,0], thread: [0,0,0] "
         "Assertion `t >= 0 && t < n_classes` failed.\n/pytorch/aten/src/THCUNN/ClassNLLCriterion.cu:108: cunn_ClassNLLCriterion_updateOutput_kernel: block: [0,0,0], "
         "thread: [8,0,0] Assertion `t >= 0 && t < n_classes` failed.\nTraceback (most recent call last):\n  File \"train.py\", line 379, in train_model\n    "
         "running_loss += loss.item() * now_batch_size\nRuntimeError: CUDA error: device-side assert triggered", ("class label", "CUDA_LAUNCH_BLOCKING=1", "ignore_index"),
         "https://github.com/layumi/Person_reID_baseline_pytorch/issues/372 (torch 1.x)"),
    Case("index-out-of-range", "TD307", "../aten/src/ATen/native/cuda/Indexing.cu:1146: indexSelectLargeIndex: block: [18,0,0], thread: [5,0,0] Assertion `srcIndex < "
         "srcSelectDimSize` failed.\n../aten/src/ATen/native/cuda/Indexing.cu:1146: indexSelectLargeIndex: block: [18,0,0], thread: [6,0,0] Assertion `srcIndex < "
         "srcSelectDimSize` failed.", ("nn.Embedding", "num_embeddings"), "https://github.com/huggingface/transformers/issues/28104 (torch 2.x)"),
    Case("index-out-of-range", "TD307", "RuntimeError: CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously reported at some other API "
         "call,so the stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1.\n/pytorch/aten/src/ATen/native/cuda/"
         "ScatterGatherKernel.cu:115: operator(): block: [0,0,0], thread: [1,0,0] Assertion `idx_dim >= 0 && idx_dim < index_size && \"index out of bounds\"` failed.",
         ("gather/scatter",), "https://github.com/xhw205/GPLinker_torch/issues/14"),
    Case("index-out-of-range", "TD307", "THCudaCheck FAIL file=/pytorch/torch/lib/THC/generic/THCStorage.cu line=58 error=59 : device-side assert triggered",
         ("CUDA_LAUNCH_BLOCKING=1",), "https://github.com/zhanghang1989/PyTorch-Encoding/issues/23 (torch 0.3)"),
    Case("index-out-of-range", "TD307", "IndexError: Target 5 is out of bounds.", ("class label 5",), "torch 2.13 CPU: F.cross_entropy with a label of 5 for 3 classes"),
    Case("index-out-of-range", "TD307", "IndexError: index out of range in self", ("nn.Embedding",), "torch 2.13 CPU: nn.Embedding(3, 2)(torch.tensor([5]))"),
    Case("out-of-memory", "TD610", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.78 GiB. GPU 0 has a total capacity of 31.47 GiB of which 12.73 GiB "
         "is free. Including non-PyTorch memory, this process has 18.73 GiB memory in use. Of the allocated memory 9.08 GiB is allocated by PyTorch, and 9.35 GiB is "
         "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
         "fragmentation.", ("GPU 0", "22.78 GiB", "12.73 GiB", "9.08 GiB", "expandable_segments:True"), "https://github.com/murong-xu/CADS/issues/4 (torch 2.4+)"),
    Case("out-of-memory", "TD610", "CUDA out of memory. Tried to allocate 124.68 GiB. GPU 0 has a total capacity of 95.22 GiB of which 51.23 GiB is free. Process "
         "608946 has 14.91 GiB memory in use. Process 734147 has 29.07 GiB memory in use. Of the allocated memory 25.50 GiB is allocated by PyTorch, and 3.14 GiB is "
         "reserved by PyTorch but unallocated.", ("124.68 GiB", "larger than the whole GPU"), "https://github.com/QwenLM/Qwen2.5-Omni/issues/240"),
    Case("out-of-memory", "TD610", "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB. GPU 1 has a total capacty of 79.10 GiB of which "
         "364.31 MiB is free. Process 175080 has 1.46 GiB memory in use. Process 175356 has 77.26 GiB memory in use. Of the allocated memory 72.12 GiB is allocated "
         "by PyTorch, and 3.78 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting max_split_size_mb to avoid "
         "fragmentation.", ("GPU 1", "pid 175080", "1.46 GiB", "batch size"), "torch 2.1 ('capacty'), quoted in public MLPerf Llama2-70B LoRA notes (code corpus)"),
    Case("out-of-memory", "TD610", "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.70 GiB. GPU 0 has a total capacty of 6.00 GiB of which 0 bytes "
         "is free. Of the allocated memory 2.93 GiB is allocated by PyTorch, and 2.30 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory "
         "is large try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF",
         ("6.00 GiB", "0 bytes", "expandable_segments:True"), "https://github.com/carolchenyx/MGFN./issues/35 (torch 2.1)"),
    Case("out-of-memory", "TD610", "RuntimeError: CUDA out of memory. Tried to allocate 74.00 MiB (GPU 0; 11.91 GiB total capacity; 10.79 GiB already allocated; "
         "12.94 MiB free; 11.21 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.",
         ("GPU 0", "74.00 MiB", "10.79 GiB", "batch size"), "https://github.com/RistoranteRist/FastFlow/issues/4 (torch 1.10-2.0)"),
    Case("out-of-memory", "TD610", "RuntimeError: CUDA out of memory. Tried to allocate 12.50 MiB (GPU 0; 10.92 GiB total capacity; 8.57 MiB already allocated; "
         "9.28 GiB free; 4.68 MiB cached)", ("12.50 MiB", "9.28 GiB"), "https://github.com/pytorch/pytorch/issues/16417 (torch 1.0)"),
    Case("out-of-memory", "TD610", "RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/generic/THCStorage.cu:58", ("out of memory",),
         "https://github.com/MVIG-SJTU/AlphaPose/issues/154 (torch 0.4)"),
    Case("out-of-memory", "TD610", "RuntimeError: MPS backend out of memory (MPS allocated: 1.45 GB, other allocations: 7.42 GB, max allowed: 9.07 GB). Tried to "
         "allocate 563.62 MB on private pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory allocations (may cause system failure).",
         ("MPS", "563.62 MB", "9.07 GB"), "https://github.com/pytorch/pytorch/issues/105839"),
]
