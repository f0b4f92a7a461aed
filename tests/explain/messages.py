"""Real messages, as PyTorch printed them in different versions, each with where it was copied from.

``CASES``: a message, the code it means and the concrete things the finding must
name. ``LOOKALIKES``: messages that share words with a family but mean something
else; they must give only the codes listed (usually none).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    family: str
    code: str
    text: str
    names: tuple[str, ...]
    source: str


TB = 'Traceback (most recent call last):\n  File "/home/ana/proj/train.py", line {line}, in <module>\n    {code}\n'
LIB = '  File "/opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py", line 1501, in _call_impl\n    return forward_call(*args, **kwargs)\n'


def tb(code: str, error: str, line: int = 42) -> str:
    """A traceback from the user's train.py through torch, ending in ``error``."""
    return TB.format(line=line, code=code) + LIB + error


CASES: list[Case] = [
    # --- device mismatch -------------------------------------------------------------------------------
    Case("device-mismatch", "TD201", "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cpu and cuda:0! "
         "(when checking argument for argument mat1 in method wrapper_CUDA_addmm)", ("cuda:0", "`mat1`", "`addmm`", "nn.Linear", "never moved"),
         "https://github.com/kijai/ComfyUI-FluxTrainer/issues/116"),
    Case("device-mismatch", "TD302", tb("loss = criterion(outputs, labels)", "RuntimeError: Expected all tensors to be on the same device, but found at least two "
         "devices, cuda:0 and cpu! (when checking arugment for argument target in method wrapper_nll_loss_forward)"),
         ("`target`", "cpu", "cuda:0", "labels = labels.to(device)"), "https://github.com/JieyuZ2/wrench/issues/4 (torch 1.9 'arugment')"),
    Case("device-mismatch", "TD302", "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:1 and cuda:0! "
         "(when checking argument for argument target in method wrapper_CUDA_nll_loss_forward)", ("`target`", "cuda:0", "cuda:1", "logits.device"),
         "https://github.com/shuxueslpi/chatGLM-6B-QLoRA/issues/38"),
    Case("device-mismatch", "TD302", "[FIX] ERROR !! Expected all tensors to be on the same device, but got mat1 is on cpu, different from other tensors on "
         "cuda:0 (when checking argument in method wrapper_CUDA_addmm)", ("`mat1`", "cpu", "cuda:0", "batch was not moved"),
         "https://github.com/ClownsharkBatwing/RES4LYF/pull/223 (torch 2.8+ wording)"),
    Case("device-mismatch", "TD406", "RuntimeError: Expected all tensors to be on the same device, but got weight is on cpu, different from other tensors on "
         "cuda:0 (when checking argument in method wrapper_CUDA_nll_loss_forward)", ("`weight`", "cpu", "criterion.to(device)"),
         "https://github.com/pytorch/pytorch/pull/155085"),
    Case("device-mismatch", "TD302", "RuntimeError: Expected object of device type cuda but got device type cpu for argument #3 'index' in call to _th_index_select",
         ("`index`", "index_select", "nn.Embedding"), "https://github.com/yangjianxin1/GPT2-chitchat/issues/8 (torch 1.3)"),
    Case("device-mismatch", "TD302", "RuntimeError: Expected object of device type cuda but got device type cpu for argument #1 'self' in call to _thnn_conv2d_forward",
         ("`self`", "conv2d", "convolution"), "https://github.com/HRNet/HigherHRNet-Human-Pose-Estimation/issues/75"),
    Case("device-mismatch", "TD302", "`Tensor for argument #2 'mat1' is on CPU, but expected it to be on GPU (while checking arguments for addmm)`",
         ("`mat1`", "addmm"), "https://github.com/diegoalejogm/gans/issues/12"),
    Case("device-mismatch", "TD302", tb("s_latent_a = static_enc_a(static_a)", "RuntimeError: Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor) "
         "should be the same", line=94), ("torch.FloatTensor", "torch.cuda.FloatTensor", "static_enc_a(static_a)", "x = x.to(device)"),
         "https://github.com/ANYMS-A/Skeleton_Aware_Networks_for_Deep_Motion_Retargeting/issues/1 (torch 1.5)"),
    Case("device-mismatch", "TD201", "RuntimeError: Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the same or input should be "
         "a MKLDNN tensor and weight is a dense tensor", ("torch.cuda.FloatTensor", "on cpu", "model.to(device)"),
         "https://github.com/yeyupiaoling/AudioClassification-Pytorch/issues/1 (torch 1.10 wording, reversed)"),
    Case("device-mismatch", "TD201", "[ignite]: Current run is terminating due to exception: Input type (MPSFloatType) and weight type (torch.FloatTensor) should be the same",
         ("MPSFloatType", "mps"), "https://github.com/pytorch/ignite/issues/2977"),
    Case("device-mismatch", "TD303", "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!",
         ("cuda:0", "cpu", "device=x.device"), "https://github.com/nunchux-ai/nunchaku/issues/805"),
    Case("device-mismatch", "TD303", "RuntimeError: Tensor on device cpu is not on the expected device meta!", ("cpu", "meta"),
         "torch 2.13, a meta-device model called with a CPU tensor"),
    Case("device-mismatch", "TD707", "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cuda:1! (when checking argument for "
         "argument index in method wrapper_CUDA_scatter__value)", ("cuda:0", "cuda:1", "`index`"), "https://github.com/zhongyy/Face-Transformer/issues/37"),
    # --- .numpy() ----------------------------------------------------------------------------------------
    Case("numpy-on-device", "TD501", tb("distmat = distmat.numpy()", "TypeError: can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the "
         "tensor to host memory first.", line=127), ("`distmat`", "cuda:0", ".detach().cpu().numpy()"), "https://github.com/JDAI-CV/fast-reid/pull/509"),
    Case("numpy-on-device", "TD501", "TypeError: can't convert CUDA tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first.",
         ("cuda",), "https://github.com/iMoonLab/PVRNet/issues/3 (torch 1.1 wording)"),
    Case("numpy-on-device", "TD501", "RuntimeError: Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.",
         ("requires grad", "detach"), "https://github.com/pytorch/pytorch/issues/44023"),
    Case("numpy-on-device", "TD501", "RuntimeError: Can't call numpy() on Variable that requires grad. Use var.detach().numpy() instead.",
         ("requires grad",), "https://github.com/GuHY777/SS-VAE-pytorch/issues/1 (torch 0.4 wording)"),
    # --- torch.load on a machine without the saving device --------------------------------------------------
    Case("load-on-missing-device", "TD502", "RuntimeError: Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False. If you are "
         "running on a CPU-only machine, please use torch.load with map_location=torch.device('cpu') to map your storages to the CPU.",
         ("CUDA", "map_location='cpu'"), "https://github.com/hkchengrex/Cutie/issues/37"),
    Case("load-on-missing-device", "TD502", "    raise RuntimeError('Attempting to deserialize object on a CUDA '\nRuntimeError: Attempting to deserialize object on a CUDA "
         "device but torch.cuda.is_available() is False. If you are running on a CPU-only machine, please use torch.load with map_locatio\nn=torch.device('cpu') "
         "to map your storages to the CPU.", ("map_location",), "https://github.com/HelixNGC7293/DeforumStableDiffusionLocal/issues/66 (wrapped, raise line)"),
    Case("load-on-missing-device", "TD502", "RuntimeError: Attempting to deserialize object on CUDA device 3 but torch.cuda.device_count() is 1. Please use "
         "torch.load with map_location to map your storages to an existing device.", ("device 3", "1 cuda device", "map_location='cuda:0'"),
         "pytorch/pytorch torch/serialization.py _validate_device"),
    # --- weights_only ---------------------------------------------------------------------------------------
    Case("weights-only-refused", "TD504", "Weights only load failed. This file can still be loaded, to do so you have two options, do those steps only if you trust "
         "the source of the checkpoint.\n(1) In PyTorch 2.6, we changed the default value of the `weights_only` argument in `torch.load` from `False` to `True`. "
         "Re-running `torch.load` with `weights_only` set to `False` will likely succeed, but it can result in arbitrary code execution. Do it only if you got the "
         "file from a trusted source.\n(2) Alternatively, to load with `weights_only=True` please check the recommended steps in the following error message.\n"
         "WeightsUnpickler error: Unsupported global: GLOBAL ultralytics.nn.tasks.DetectionModel was not an allowed global by default. Please use "
         "`torch.serialization.add_safe_globals([DetectionModel])` or the `torch.serialization.safe_globals([DetectionModel])` context manager to allowlist this "
         "global if you trust this class/function.", ("ultralytics.nn.tasks.DetectionModel", "state_dict()", "add_safe_globals([DetectionModel])"),
         "https://github.com/Comfy-Org/ComfyUI/issues/7425 (torch 2.6)"),
    Case("weights-only-refused", "TD504", "_pickle.UnpicklingError: Weights only load failed. This file can still be loaded, to do so you have two options, "
         "\x1b[1mdo those steps only if you trust the source of the checkpoint\x1b[0m. \n\t(1) In PyTorch 2.6, we changed the default value of the `weights_only` "
         "argument in `torch.load` from `False` to `True`.\n\t(2) Alternatively, to load with `weights_only=True` please check the recommended steps in the "
         "following error message.\n\tWeightsUnpickler error: Unsupported global: GLOBAL torch.nn.modules.linear.Linear was not an allowed global by default.",
         ("torch.nn.modules.linear.Linear",), "torch 2.13, torch.load of torch.save(nn.Linear(2, 2)) (bold escapes kept)"),
    Case("weights-only-refused", "TD503", "WeightsUnpickler error: Unsupported global: GLOBAL argparse.Namespace was not an allowed global by default. Please use "
         "`torch.serialization.add_safe_globals([Namespace])` or the `torch.serialization.safe_globals([Namespace])` context manager to allowlist this global if you "
         "trust this class/function.", ("argparse.Namespace", "add_safe_globals([argparse.Namespace])"), "https://github.com/mlcommons/mlperf-automations/issues/465"),
    Case("weights-only-refused", "TD503", "Weights only load failed. Re-running `torch.load` with `weights_only` set to `False` \nwill likely succeed, but it can "
         "result in arbitrary code execution.\nWeightsUnpickler error: Unsupported class TTS.tts.configs.xtts_config.XttsConfig",
         ("TTS.tts.configs.xtts_config.XttsConfig",), "torch 2.0-2.3 'Unsupported class' wording, quoted in a public project's notes (code corpus)"),
    Case("weights-only-refused", "TD503", "_pickle.UnpicklingError: Weights only load failed. Re-running `torch.load` with `weights_only` set to `False` will likely "
         "succeed, but it can result in arbitrary code execution. Do it only if you got the file from a trusted source.\nTrying to load unsupported GLOBAL "
         "posix.execv whose module posix is blocked.", ("posix.execv", "would run code"), "https://github.com/pytorch/pytorch/pull/131259"),
    # --- state_dict from a wrapper ----------------------------------------------------------------------------
    Case("state-dict-prefix", "TD205", "actual error: RuntimeError: Error(s) in loading state_dict for DTNet:\n\tMissing key(s) in state_dict: \"projection.0.weight\", "
         "\"recur_block.0.0.conv1.weight\", \"head.0.weight\". \n\tUnexpected key(s) in state_dict: \"module.projection.0.weight\", "
         "\"module.recur_block.0.0.conv1.weight\", \"module.head.0.weight\". ", ("`module.`", "`DTNet`", "removeprefix('module.')", "model.module.state_dict()"),
         "https://github.com/aks2203/deep-thinking/issues/5"),
    Case("state-dict-prefix", "TD205", "KeyError: 'unexpected key \"module.layer_module.0.weight\" in state_dict'", ("`module.`", "module.layer_module.0.weight"),
         "https://github.com/carpedm20/DiscoGAN-pytorch/issues/6 (torch 0.1 wording)"),
    Case("state-dict-prefix", "TD205", "RuntimeError: Error(s) in loading state_dict for DataParallel:\n\tMissing key(s) in state_dict: \"module.conv1.weight\", "
         "\"module.bn1.weight\". \n\tUnexpected key(s) in state_dict: \"conv1.weight\", \"bn1.weight\". ", ("`module.`", "model.module.load_state_dict"),
         "pytorch/pytorch torch/nn/modules/module.py load_state_dict (a plain checkpoint loaded into DataParallel)"),
    Case("state-dict-prefix", "TD205", "RuntimeError: Error(s) in loading state_dict for Net:\n\tMissing key(s) in state_dict: \"fc.weight\", \"fc.bias\". \n\t"
         "Unexpected key(s) in state_dict: \"_orig_mod.fc.weight\", \"_orig_mod.fc.bias\". ", ("`_orig_mod.`", "torch.compile", "model._orig_mod.state_dict()"),
         "pytorch/pytorch torch/nn/modules/module.py load_state_dict (a torch.compile'd model saved without unwrapping)"),
]

LOOKALIKES: list[tuple[str, frozenset[str], str]] = [
    ("RuntimeError: Input type (torch.cuda.HalfTensor) and weight type (torch.cuda.FloatTensor) should be the same", frozenset(),
     "https://github.com/baaivision/See3D/issues/11 (a dtype mismatch on one device)"),
    ("RuntimeError: Input type (torch.cuda.DoubleTensor) and weight type (torch.cuda.FloatTensor) should be the same", frozenset(),
     "https://github.com/timeseriesAI/tsai/issues/468"),
    ("RuntimeError: Input type (Byte) and weight type (Float) should be the same", frozenset(), "https://github.com/pytorch/pytorch/issues/2458"),
    ("RuntimeError: Input type (double) and bias type (float) should be the same", frozenset(), "torch 2.13 CPU conv with float64 input"),
    ("TypeError: can't convert np.ndarray of type numpy.object_. The only supported types are: float64, float32, float16, complex64, complex128, int64, int32, "
     "int16, int8, uint64, uint32, uint16, uint8, and bool.", frozenset(), "torch 2.13 libtorch_python (tensor_numpy.cpp)"),
    ("RuntimeError: Can't call numpy() on Tensor that has conjugate bit set. Use tensor.resolve_conj().numpy() instead.", frozenset(),
     "torch 2.13 libtorch_python (tensor_numpy.cpp)"),
    ("_pickle.UnpicklingError: Weights only load failed. In PyTorch 2.6, we changed the default value of the `weights_only` argument in `torch.load` from `False` "
     "to `True`. Re-running `torch.load` with `weights_only` set to `False` will likely succeed, but it can result in arbitrary code execution. Do it only if you got "
     "the file from a trusted source.\nPlease file an issue with the following so that we can make `weights_only=True` compatible with your use case: "
     "WeightsUnpickler error: Unsupported operand 118", frozenset(), "https://github.com/pytorch/pytorch/issues/150998 (a corrupted file)"),
    ("Missing key(s) in state_dict: \"map_classifier.0.weight\", \"map_classifier.0.bias\". \n\nUnexpected key(s) in state_dict: \"world_classifier.0.weight\", "
     "\"world_classifier.0.bias\".", frozenset(), "https://github.com/hou-yz/MVDet/issues/7 (renamed layers)"),
    ("RuntimeError: Error(s) in loading state_dict for DataParallel: Missing key(s) in state_dict: \"module.conv1.weight\", \"module.bn1.weight\", "
     "\"module.bn1.bias\",\nUnexpected key(s) in state_dict: \"state_dict\".", frozenset(),
     "https://github.com/ankitajaiswal00/Try-First/issues/26 (a checkpoint dict, not a prefix)"),
    ("RuntimeError: Error(s) in loading state_dict for Net:\n\tsize mismatch for fc.weight: copying a param with shape torch.Size([10, 512]) from checkpoint, "
     "the shape in current model is torch.Size([2, 512]).", frozenset(), "pytorch/pytorch torch/nn/modules/module.py _load_from_state_dict"),
]
