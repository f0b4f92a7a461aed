"""Device mismatches explained before PyTorch's own error: TD201 TD202 TD203 TD302 TD303 TD406 TD707.

Nothing runs while training is healthy: when a root module call fails with a
device error, the module calls on the failing path are read back from the
traceback and compared then, so a module that moves its inputs itself is never
blamed and the steady state costs nothing.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import Any

from torchdoctor.findings import Finding, Location

_LOSS_BUFFERS = ("weight", "pos_weight")
_FACTORY = re.compile(
    r"torch\.(zeros|ones|full|arange|tensor|rand|randn|randint|randperm|empty|eye|linspace|logspace|as_tensor)\((?![^)]*device\s*=)"
)


def is_accelerator(device: str) -> bool:
    return not device.startswith("cpu")


@dataclass
class Mismatch:
    """What the pre-hook saw: pure data, so that ``classify`` can be tested with device strings."""

    module_path: str
    module_type: str
    argument: str
    input_device: str
    param_device: str
    model_devices: tuple[str, ...]
    is_loss: bool = False
    loss_buffer: str | None = None
    from_loader: bool = False
    is_root_input: bool = False
    plain_attr: str | None = None
    spread: tuple[str, ...] = ()


def classify(m: Mismatch) -> tuple[str, str, str]:
    """(code, message, fix) for one mismatch."""
    where = f"`{m.module_path}`" if m.module_path == m.module_type else f"`{m.module_path}` ({m.module_type})"
    if m.spread:
        return ("TD202", f"parameters and buffers of {where} are spread over {', '.join(m.spread)}",
                "move the whole model once with model.to(device) after building it")
    if m.plain_attr:
        return ("TD203", f"plain tensor attribute `{m.plain_attr}` of {where} is on {m.param_device} "
                f"while the module works on {m.input_device}: it did not follow model.to(device)",
                f"register it with self.register_buffer({m.plain_attr!r}, ...) so that .to(device) moves it")
    if m.is_loss and m.loss_buffer:
        return ("TD406", f"loss {where} holds `{m.loss_buffer}` on {m.param_device} but its {m.argument} is on {m.input_device}",
                "move the loss to the device too: criterion = criterion.to(device) (or create its weight with device=)")
    if m.is_loss:
        return ("TD302", f"`{m.argument}` of loss {where} is on {m.input_device} while the other argument is on {m.param_device}",
                f"move it with {m.argument}.to(device) where the batch is unpacked")
    if len(m.model_devices) > 1:
        if not is_accelerator(m.param_device):
            return ("TD202", f"{where} was left on {m.param_device} while the rest of the model is on "
                    f"{', '.join(d for d in m.model_devices if d != m.param_device)}; it receives `{m.argument}` on {m.input_device}",
                    "register the submodule as an attribute or in nn.ModuleList, or move it after creating it, so model.to(device) reaches it")
        return ("TD707", f"model-parallel stage {where} is on {m.param_device} but receives `{m.argument}` on {m.input_device}",
                f"move the activation between stages: x = x.to({m.param_device!r}) before calling this stage")
    if not is_accelerator(m.param_device) and is_accelerator(m.input_device):
        return ("TD201", f"model is on {m.param_device} but its input reaches {where} on {m.input_device}: the model was never moved",
                "call model.to(device) with the device the batches are moved to")
    if m.is_root_input or m.from_loader:
        return ("TD302", f"`{m.argument}` reaches {where} on {m.input_device} but the model is on {m.param_device}: the batch was not moved",
                "move the batch to the model's device: x = x.to(device) (in training and in evaluation)")
    return ("TD303", f"a tensor created on {m.input_device} inside the model reaches {where}, whose parameters are on {m.param_device}",
            "create tensors with device=x.device (or use torch.zeros_like / x.new_zeros)")


def explain_failure(exc: BaseException, session: Any) -> list[Finding]:
    """The findings for a device error raised inside the root module call now ending.

    Nothing is compared while the run is healthy: the traceback still holds the
    frames of every module call on the failing path with their arguments, so the
    comparison runs once, here. The innermost module whose inputs disagree with
    its own tensors is the explanation; without one, the failing line is.
    """
    entries = _tb_entries(exc.__traceback__)
    found = None
    for index, (frame, _line) in enumerate(entries):
        if frame.f_code is not _call_impl_code():
            continue
        local = frame.f_locals
        module, args, kwargs = local.get("self"), local.get("args") or (), local.get("kwargs") or {}
        m = _mismatch(module, args, kwargs, session) if module is not None else None
        if m is not None:
            found = _finding(module, m, session, _caller_location(entries, index))
    if found is None:
        found = explain_error(exc, session)
    return [found] if found is not None else []


def _call_impl_code() -> Any:
    import torch

    return torch.nn.Module._call_impl.__code__


def _tb_entries(tb: Any) -> list[tuple[Any, int]]:
    out = []
    while tb is not None:
        out.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return out


def _caller_location(entries: list[tuple[Any, int]], index: int) -> Location | None:
    """The user's line that called the module whose frame is ``entries[index]`` (None: the root call's)."""
    from torchdoctor.runtime.locate import display_path, is_internal

    for frame, line in reversed(entries[:index]):
        if not is_internal(frame.f_code.co_filename):
            return Location(display_path(frame.f_code.co_filename), line)
    return None


def _mismatch(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], session: Any) -> Mismatch | None:
    import torch

    if not isinstance(module, torch.nn.Module):
        return None
    names = _arg_names(module, len(args))
    tensors = [(names[i], a) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    tensors += [(k, v) for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
    if not tensors:
        return None
    own = [t for t in module._parameters.values() if t is not None] + [t for t in module._buffers.values() if t is not None]
    devs = tuple(sorted({str(t.device) for t in own}))
    is_loss = isinstance(module, torch.nn.modules.loss._Loss)
    base = (session.module_path(module), type(module).__name__)
    model = session.root_devices()
    if len(devs) > 1:
        return Mismatch(*base, tensors[0][0], str(tensors[0][1].device), devs[0], model, spread=devs)
    if is_loss and len(tensors) >= 2:
        (n0, a0), (n1, a1) = tensors[0], tensors[1]
        d0, d1 = str(a0.device), str(a1.device)
        if d0 != d1:
            odd_n, odd_a, odd, other = (n1, a1, d1, d0) if not is_accelerator(d1) or is_accelerator(d0) else (n0, a0, d0, d1)
            return Mismatch(*base, odd_n, odd, other, model, is_loss=True, from_loader=session.from_loader(odd_a))
    plain = [(k, v) for k, v in vars(module).items() if isinstance(v, torch.Tensor) and not k.startswith("_")]
    for name, a in tensors:
        dev = str(a.device)
        for p in devs:
            if p != dev:
                buf = next((b for b in _LOSS_BUFFERS if module._buffers.get(b) is not None), None) if is_loss else None
                return Mismatch(*base, name, dev, p, model, is_loss=is_loss, loss_buffer=buf,
                                from_loader=session.from_loader(a), is_root_input=session.is_root_input(a))
        for attr, value in plain:
            if str(value.device) != dev:
                return Mismatch(*base, name, dev, str(value.device), model, is_loss=is_loss, plain_attr=attr)
    return None


def _finding(module: Any, m: Mismatch, session: Any, caller: Location | None) -> Finding:
    code, message, fix = classify(m)
    # a batch or a model not moved is the caller's doing: point at the model call in the loop
    loc = session.root_call_location() if code in ("TD201", "TD302", "TD406") or caller is None else caller
    if code == "TD203":
        loc = _assignment_location(module, m.plain_attr or "") or loc
    return Finding(code, message, loc, fix)


def _arg_names(module: Any, n: int) -> list[str]:
    try:
        params = [p.name for p in inspect.signature(module.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return [params[i] if i < len(params) else f"argument {i}" for i in range(n)]


def _assignment_location(module: Any, attr: str) -> Location | None:
    from torchdoctor.runtime.locate import display_path

    try:
        lines, start = inspect.getsourcelines(type(module).__init__)
        path = inspect.getsourcefile(type(module).__init__)
    except (OSError, TypeError):
        return None
    pattern = re.compile(rf"self\.{re.escape(attr)}\s*=")
    for offset, text in enumerate(lines):
        m = pattern.search(text)
        if m and path:
            return Location(display_path(path), start + offset, m.start() + 1)
    return None


def explain_error(exc: BaseException, session: Any) -> Finding | None:
    """A device error no pre-hook foresaw (a tensor combined inside forward or in the loop)."""
    if not is_device_error(exc):
        return None
    from torchdoctor.runtime.locate import tb_location, traceback_user_frames

    frames = traceback_user_frames(exc.__traceback__)
    if not frames:
        return None
    frame = frames[-1]
    loc = tb_location(exc.__traceback__, frame)
    source = _source_line(frame, loc.line if loc else frame.f_lineno)
    devices = re.findall(r"\b(cuda:\d+|cuda|cpu|meta|mps|xpu(?::\d+)?)\b", str(exc))
    pair = " and ".join(dict.fromkeys(devices)) or "two devices"
    factory = _FACTORY.search(source)
    owner = _module_of(frame, session)
    inside = f" inside `{owner}`" if owner else ""
    if factory:
        return Finding("TD303", f"`torch.{factory.group(1)}(...)` without device= is combined with tensors on another device{inside} ({pair})",
                       loc, "create it on the right device: device=x.device (or use *_like / x.new_*)")
    import torch

    model = set(session.root_devices())
    for name, value in frame.f_locals.items():
        if not isinstance(value, torch.Tensor) or name not in source:
            continue
        root_input = session.is_root_input(value) and model and str(value.device) not in model
        if root_input or session.from_loader(value):
            loc = session.root_call_location() if root_input else loc  # where the batch goes in unmoved
            return Finding("TD302", f"batch element `{name}` is on {value.device} and is combined with tensors on another device ({pair})",
                           loc, f"move it to the model's device: {name} = {name}.to(device)")
    weight = _loss_weight(frame, source, devices, getattr(session, "last_model_device_type", lambda: None)(), torch.Tensor)
    if weight:
        name, kw, device = weight
        return Finding("TD406", f"`{name}` passed as the loss's `{kw}=` is on {device} but the loss's inputs are on another device ({pair})",
                       loc, f"move it once, before the loop: {name} = {name}.to(device)")
    left = _plain_attribute_on_line(frame, source, torch)
    if left is not None:
        return left
    return Finding("TD303", f"tensors on different devices ({pair}) are combined{inside}: one of them was created or left on the wrong device",
                   loc, "create new tensors with device=x.device and move every input with .to(device)")


def _plain_attribute_on_line(frame: Any, source: str, torch: Any) -> Finding | None:
    """``x - self.mean`` failing inside forward: a plain tensor attribute left behind by model.to (TD203)."""
    from torchdoctor.runtime.checks.attributes import _assignment

    owner = frame.f_locals.get("self")
    if not isinstance(owner, torch.nn.Module):
        return None
    params = {str(p.device) for p in owner.parameters()}
    for name in re.findall(r"self\.(\w+)", source):
        value = vars(owner).get(name)
        if isinstance(value, torch.Tensor) and params and str(value.device) not in params:
            where = _assignment(type(owner), name)
            if where is not None:
                return Finding("TD203", f"plain tensor attribute `{name}` of `{type(owner).__name__}` is on {value.device} while "
                               f"the module works on {', '.join(sorted(params))}: it did not follow model.to(device)", where,
                               f"register it with self.register_buffer({name!r}, ...) so that .to(device) moves it")
    return None


_WEIGHT_ARG = re.compile(r"\b(pos_weight|weight)\s*=\s*([A-Za-z_]\w*)\b(?!\s*[.(\[])")


def _loss_weight(frame: Any, source: str, devices: list[str], model: str | None, tensor_type: type) -> tuple[str, str, str] | None:
    """A functional loss given ``weight=w`` (``F.cross_entropy(out, y, weight=w)``) with ``w`` on the odd device out."""
    for kw, name in _WEIGHT_ARG.findall(source):
        value = frame.f_locals.get(name, frame.f_globals.get(name))
        if not isinstance(value, tensor_type) or str(value.device) not in devices:
            continue
        if value.device.type != model if model else len(set(devices)) > 1:  # the model's device is the right one
            return name, kw, str(value.device)
    return None


def is_device_error(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, RuntimeError) and (
        "Expected all tensors to be on the same device" in text
        or "is not on the expected device" in text
        or bool(re.search(r"Input type \(.*\) and weight type \(.*\) should be the same", text))
        or "Expected object of device type" in text
    )


def _source_line(frame: Any, line: int) -> str:
    import linecache

    return linecache.getline(frame.f_code.co_filename, line)


def _module_of(frame: Any, session: Any) -> str | None:
    owner = frame.f_locals.get("self")
    try:
        import torch

        if isinstance(owner, torch.nn.Module):
            return session.module_path(owner)
    except Exception:
        return None
    return None
