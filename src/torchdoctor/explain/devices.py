"""Builders for messages about where tensors live and how checkpoints load: TD201 TD205 TD302 TD303 TD406 TD501-TD504 TD707."""

from __future__ import annotations

import re
from typing import Any

from torchdoctor.explain.common import Draft, at, device, is_accelerator, plural, type_device

_LOSS_OP = re.compile(r"loss|nll|entropy|ctc|margin|kl_div|hinge|huber")
_TARGETS = {"target", "targets", "label", "labels"}
# Which argument of an operator is the data and which the layer's own tensor: addmm(bias, input, weight.T)
# is nn.Linear, index_select(weight, 0, ids) is nn.Embedding.
_ROLES = {
    "addmm": {"mat1": "data", "self": "param", "mat2": "param"},
    "index_select": {"index": "data", "indices": "data", "self": "param", "weight": "param"},
    "embedding": {"indices": "data", "weight": "param"},
}
_CONV = re.compile(r"conv|convolution")
_LAYER = {"addmm": "nn.Linear", "index_select": "nn.Embedding or tensor indexing", "embedding": "nn.Embedding",
          "mm": "a matrix product", "bmm": "a batched matrix product", "native_layer_norm": "nn.LayerNorm",
          "native_batch_norm": "nn.BatchNorm", "cudnn_batch_norm": "nn.BatchNorm"}


def _op(method: str | None) -> str | None:
    """``wrapper_CUDA__index_select`` -> ``index_select``; ``_thnn_conv2d_forward`` -> ``conv2d``."""
    if not method:
        return None
    op = re.sub(r"^(?:wrapper_)?(?:CUDA_|CPU_|MPS_|XPU_)?_*", "", method)
    op = re.sub(r"^th(?:nn)?_", "", op)
    return re.sub(r"_(?:forward|out|Tensor)$", "", op) or method


def _role(arg: str | None, op: str | None) -> str | None:
    if op and _LOSS_OP.search(op):
        return "loss-weight" if arg in ("weight", "pos_weight") else ("target" if arg else None)
    if arg in _TARGETS:
        return "target"
    if op in _ROLES:
        return _ROLES[op].get(arg or "")
    if op and _CONV.search(op):
        return {"input": "data", "self": "data", "weight": "param", "bias": "param"}.get(arg or "")
    return "data" if arg in ("input", "mat1") else None


def _where(arg: str | None, op: str | None) -> str:
    if not op:
        return f" (argument `{arg}`)" if arg else ""
    layer = f", {_LAYER[op]}" if op in _LAYER else (", a convolution" if _CONV.search(op) else "")
    return f" (argument `{arg}` of `{op}`{layer})" if arg else f" (in `{op}`{layer})"


_CALL = re.compile(r"[\w.]+\(([^()]*)\)")
_NAME = re.compile(r"[A-Za-z_][\w.]*(?:\[[^\]]*\])?")


def _second_argument(source: str | None) -> str | None:
    """``loss = criterion(outputs, labels)`` -> ``labels``: the user's name for the loss target."""
    for m in _CALL.finditer(source or ""):
        args = [a.strip() for a in m.group(1).split(",")]
        if len(args) >= 2 and all(_NAME.fullmatch(a) for a in args[:2]):
            return args[1]
    return None


def device_mismatch(hit: Any, facts: Any) -> list[Draft]:
    g = hit.groups
    if "input" in g:
        return _layer_types(hit)
    first, second = device(g.get("first")), device(g.get("second"))
    if not first or not second or first == second:
        return []
    arg, op = g.get("arg"), _op(g.get("method"))
    where = _where(arg, op) + at(hit)
    role = _role(arg, op)
    if role == "target":  # with a model split over GPUs (device_map="auto") the targets go where the logits are
        name = _second_argument(hit.source) or arg
        fix = (f"move the targets to the outputs' device before the loss: {name} = {name}.to(logits.device) (a model split over GPUs puts its outputs on the last one)"
               if is_accelerator(second) else
               f"move the targets with the inputs where the batch is unpacked: {name} = {name}.to(device) (in training and in validation)")
        return [("TD302", f"the loss's `{arg}` is on {second} while its input is on {first}{where}: the targets were not moved", fix)]
    if role == "loss-weight":
        return [("TD406", f"the loss's `{arg}` tensor is on {second} while its inputs are on {first}{where}",
                 f"move the loss (criterion = criterion.to(device)) or create its {arg} with device=")]
    if is_accelerator(first) and is_accelerator(second):
        return [("TD707", f"tensors on two accelerators ({first} and {second}) meet in one operation{where}: a stage's input is on another device",
                 f"move the activation between stages (x = x.to('{second}')), or keep the whole model on one device with model.to(device)")]
    batch_on_cpu = (role == "data" and not is_accelerator(second)) or (role == "param" and is_accelerator(second))
    if role in ("data", "param") and batch_on_cpu:
        return [("TD302", f"the input is on cpu but the layer's tensors are on {first if role == 'data' else second}{where}: the batch was not moved to the model's device",
                 "move the batch where the model is: x = x.to(device) (in training and in evaluation)")]
    if role in ("data", "param"):
        return [("TD201", f"the input is on {second if role == 'data' else first} but the layer's tensors are on cpu{where}: the model (or this layer) was never moved",
                 "call model.to(device) once after building it (sub-layers must be attributes or in nn.ModuleList so that it reaches them)")]
    cpu = first if not is_accelerator(first) else second
    return [("TD303", f"tensors on {first} and {second} meet in one operation{where}: one of them was created or left on {cpu}",
             "create new tensors with device=x.device (or *_like / x.new_*), and move every input with .to(device)")]


def _layer_types(hit: Any) -> list[Draft]:
    """``Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor)``: which way round decides the code."""
    g = hit.groups
    inp, par = type_device(g["input"]), type_device(g["weight"])
    if inp is None or par is None or inp == par:
        return []  # a dtype mismatch (HalfTensor vs FloatTensor on one device): not a device error
    what = f"the input ({g['input']}) is on {inp} but the layer's {g.get('param', 'weight')} ({g['weight']}) is on {par}{at(hit)}"
    if is_accelerator(par) and not is_accelerator(inp):
        return [("TD302", f"{what}: the batch was not moved to the model's device",
                 "move the batch where the model is: x = x.to(device) (in training and in evaluation)")]
    if is_accelerator(inp) and not is_accelerator(par):
        return [("TD201", f"{what}: the model (or this layer) was never moved",
                 "call model.to(device) once after building it (sub-layers must be attributes or in nn.ModuleList so that it reaches them)")]
    return [("TD303", f"{what}: one of them was created or left on the wrong device",
             "create tensors with device= and move model and batch to one device")]


_NUMPY_CALL = re.compile(r"([\w.\[\]]+?)(?:\.detach\(\))?(?:\.cpu\(\))?\.numpy\(\)")


def numpy_on_device(hit: Any, facts: Any) -> list[Draft]:
    call = _NUMPY_CALL.search(hit.source or "")
    name = f"`{call.group(1)}`" if call else "a tensor"
    if hit.get("kind"):
        return [("TD501", f"`.numpy()` on {name}, which requires grad (it is part of the autograd graph){at(hit)}",
                 "detach it first: t.detach().cpu().numpy() (or compute it under torch.no_grad())")]
    dev = device(hit.get("device")) or "an accelerator"
    return [("TD501", f"`.numpy()` on {name}, which is on {dev}: NumPy reads host memory only{at(hit)}",
             "copy it to the CPU first: t.detach().cpu().numpy() (t.item() for a single value)")]


def load_on_missing_device(hit: Any, facts: Any) -> list[Draft]:
    backend, module = hit.get("backend") or "CUDA", hit.get("module") or "cuda"
    if hit.get("index") is not None:
        count = int(hit.get("count") or 0)
        message = (f"the checkpoint's tensors were saved on {backend} device {hit.get('index')}, but this process sees "
                   f"{plural(count, module + ' device')}{at(hit)}")
        fix = f"load with map_location: torch.load(path, map_location='{module}:0') (or map_location=device)"
    else:
        message = f"the checkpoint's tensors were saved on {backend}, but torch.{module}.is_available() is False here{at(hit)}"
        fix = "load with map_location: torch.load(path, map_location='cpu') (or map_location=device, the device you train on)"
    if facts is not None and module == "cuda":
        from torchdoctor.explain.environment import why_no_gpu

        reason = why_no_gpu(facts)
        if reason:
            message += f"; on this machine {reason}"
    return [("TD502", message, fix)]


_MODEL_CLASS = re.compile(r"(?:^torch\.nn\.modules\.|(?:Model|Net|Network|Module|Sequential)$)")


def weights_only_refused(hit: Any, facts: Any) -> list[Draft]:
    blocked, operand, name = hit.get("blocked"), hit.get("operand"), hit.get("global")
    if blocked:
        return [("TD503", f"the checkpoint asks to call `{blocked}` while it is unpickled (module `{hit.get('module')}` is blocked): loading it would run code",
                 "do not load it with weights_only=False; get the weights from a trusted source (or as .safetensors)")]
    if operand is not None:
        return []  # "Unsupported operand N": a truncated or non-torch file, not a pitfall of the catalog
    if name and _MODEL_CLASS.search(name):
        short = name.rsplit(".", 1)[-1]
        return [("TD504", f"the file holds a whole pickled model (`{name}`), which torch.load(weights_only=True), the default since torch 2.6, refuses{at(hit)}",
                 f"if you trust the file, load it once with weights_only=False and re-save model.state_dict(); load that with weights_only=True into a model built in code "
                 f"(or allowlist the class: torch.serialization.add_safe_globals([{short}]))")]
    what = f"a `{name}` object" if name else "an object that is not a tensor"
    return [("TD503", f"torch.load(weights_only=True), the default since torch 2.6, refused {what} in the checkpoint{at(hit)}",
             (f"if you trust the file, allowlist it and keep weights_only=True: torch.serialization.add_safe_globals([{name}])" if name
              else "if you trust the file, allowlist what it holds with torch.serialization.add_safe_globals([...]) and keep weights_only=True")
             + "; weights_only=False would run any code the file contains")]


_WRAPPERS = (("module.", "module", "DataParallel/DistributedDataParallel"), ("_orig_mod.", "_orig_mod", "torch.compile"))


def _keys(hit: Any, name: str) -> list[str]:
    out: list[str] = []
    for chunk in hit.values.get(name, []):
        found = re.findall(r'"([^"]+)"', chunk)
        out.extend(found or [chunk.strip().rstrip(".").strip()])
    return [k for k in out if k]


def state_dict_prefix(hit: Any, facts: Any) -> list[Draft]:
    missing, unexpected = _keys(hit, "missing"), _keys(hit, "unexpected")
    target = f"`{hit.get('cls')}`" if hit.get("cls") else "the model"
    for prefix, inner, wrapper in _WRAPPERS:
        # the same names on both sides but for the prefix (a checkpoint holding {"state_dict": ...} is another matter)
        same = {k.removeprefix(prefix) for k in unexpected} & set(missing) or {prefix + k for k in unexpected} & set(missing)
        if missing and unexpected and not same:
            continue
        if unexpected and all(k.startswith(prefix) for k in unexpected) and not any(k.startswith(prefix) for k in missing):
            return [("TD205", f"every checkpoint key starts with `{prefix}` ({plural(len(unexpected), 'key')}, e.g. `{unexpected[0]}`) but {target} "
                     f"expects none: the state_dict was saved from a {wrapper} wrapper{at(hit)}",
                     f"strip the prefix when loading: model.load_state_dict({{k.removeprefix('{prefix}'): v for k, v in state.items()}}); "
                     f"save model.{inner}.state_dict() from now on")]
        if missing and all(k.startswith(prefix) for k in missing) and not any(k.startswith(prefix) for k in unexpected):
            return [("TD205", f"{target} expects keys starting with `{prefix}` (e.g. `{missing[0]}`) but the checkpoint has none: "
                     f"a plain state_dict is loaded into a {wrapper} wrapper{at(hit)}",
                     f"load it into the inner model: model.{inner}.load_state_dict(state) (or load before wrapping)")]
    return []  # keys differ for another reason (renamed layers, another architecture): no catalog code
