"""Device mismatches explained before PyTorch's own error: TD201 TD202 TD203 TD302 TD303 TD406 TD707.

A global forward pre-hook hands every module call here. The full comparison
runs only when the devices of a module's inputs differ from the last call, so
the steady state costs one tuple comparison per module call. What is found is
*pending*: it becomes a finding only if the forward then fails, so a module
that moves its inputs itself is never blamed.
"""

from __future__ import annotations

import inspect
import re
import weakref
from dataclasses import dataclass, field
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
                f"move the whole model once with model.to(device) after building it")
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
                f"move the batch to the model's device: x = x.to(device) (in training and in evaluation)")
    return ("TD303", f"a tensor created on {m.input_device} inside the model reaches {where}, whose parameters are on {m.param_device}",
            "create tensors with device=x.device (or use torch.zeros_like / x.new_zeros)")


@dataclass
class _ModuleState:
    ref: weakref.ReferenceType
    generation: int
    devices: tuple[str, ...]  # of the module's own parameters and buffers
    is_loss: bool
    plain: tuple[str, ...]  # names of plain tensor attributes
    last_inputs: tuple[Any, ...] = ()
    interesting: bool = field(default=True)


class DeviceCheck:
    def __init__(self, session: Any) -> None:
        import torch

        self._torch = torch
        self._session = session
        self._state: dict[int, _ModuleState] = {}
        self.generation = 0  # bumped by every Module._apply (.to, .cuda, .cpu, .half)
        self.pending: dict[int, Finding] = {}

    def on_call(self, module: Any, args: tuple[Any, ...]) -> None:
        st = self._state.get(id(module))
        if st is None or st.generation != self.generation or st.ref() is not module:
            st = self._build(module)
        if not st.interesting:
            return
        Tensor = self._torch.Tensor
        inputs = tuple(a.device for a in args if isinstance(a, Tensor))
        if inputs == st.last_inputs:
            return
        st.last_inputs = inputs
        self._compare(module, st, args)

    def _build(self, module: Any) -> _ModuleState:
        torch = self._torch
        own = [t for t in module._parameters.values() if t is not None]
        own += [t for t in module._buffers.values() if t is not None]
        devices = tuple(sorted({str(t.device) for t in own}))
        is_loss = isinstance(module, torch.nn.modules.loss._Loss)
        plain = tuple(k for k, v in vars(module).items() if isinstance(v, torch.Tensor) and not k.startswith("_"))
        st = _ModuleState(weakref.ref(module), self.generation, devices, is_loss, plain)
        st.interesting = bool(devices) or is_loss or bool(plain)
        self._state[id(module)] = st
        return st

    def _compare(self, module: Any, st: _ModuleState, args: tuple[Any, ...]) -> None:
        torch = self._torch
        tensors = [(i, a) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        if not tensors:
            return
        names = _arg_names(module, len(args))
        if len(st.devices) > 1:
            self._pend(module, st, names[0], str(tensors[0][1].device), st.devices[0], spread=st.devices)
            return
        if st.is_loss and len(tensors) >= 2:
            (i0, a0), (i1, a1) = tensors[0], tensors[1]
            d0, d1 = str(a0.device), str(a1.device)
            if d0 != d1:
                odd_i, odd, other = (i1, d1, d0) if not is_accelerator(d1) or is_accelerator(d0) else (i0, d0, d1)
                self._pend(module, st, names[odd_i], odd, other, from_loader=self._session.from_loader(args[odd_i]))
                return
        for i, a in tensors:
            dev = str(a.device)
            for p in st.devices:
                if p != dev:
                    buf = next((b for b in _LOSS_BUFFERS if module._buffers.get(b) is not None), None) if st.is_loss else None
                    self._pend(module, st, names[i], dev, p, loss_buffer=buf,
                               from_loader=self._session.from_loader(a), is_root_input=self._session.is_root_input(a))
                    return
            for attr in st.plain:
                value = vars(module).get(attr)
                if isinstance(value, torch.Tensor) and str(value.device) != dev:
                    self._pend(module, st, names[i], dev, str(value.device), plain_attr=attr)
                    return

    def _pend(self, module: Any, st: _ModuleState, argument: str, input_dev: str, param_dev: str, **kw: Any) -> None:
        path = self._session.module_path(module)
        m = Mismatch(path, type(module).__name__, argument, input_dev, param_dev,
                     self._session.root_devices(), is_loss=st.is_loss, **kw)
        code, message, fix = classify(m)
        # a batch or a model not moved is the caller's doing: point at the model call in the loop
        loc = self._session.root_call_location() if code in ("TD201", "TD302", "TD406") else self._session.call_location()
        if code == "TD203":
            loc = _assignment_location(module, m.plain_attr or "") or loc
        self.pending[id(module)] = Finding(code, message, loc, fix)

    def promote(self) -> list[Finding]:
        """The explanations of a forward that failed."""
        found = list(self.pending.values())
        self.pending.clear()
        return found

    def discard(self) -> None:
        self.pending.clear()


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

    for name, value in frame.f_locals.items():
        if isinstance(value, torch.Tensor) and session.from_loader(value) and name in source:
            return Finding("TD302", f"batch element `{name}` is on {value.device} and is combined with tensors on another device ({pair})",
                           loc, f"move it to the model's device: {name} = {name}.to(device)")
    return Finding("TD303", f"tensors on different devices ({pair}) are combined{inside}: one of them was created or left on the wrong device",
                   loc, "create new tensors with device=x.device and move every input with .to(device)")


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
