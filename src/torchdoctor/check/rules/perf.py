"""Stage 6 rules, mixed precision: deprecated AMP APIs (TD601), float16 without a scaler (TD604), a
half-used GradScaler (TD605). The steps of a loop (TD602, TD603) are in ``steps.py`` and ``syncs.py``."""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from torchdoctor.check.astutil import dotted, keyword, string_value
from torchdoctor.check.patterns import lazy
from torchdoctor.check.registry import rule
from torchdoctor.findings import Edit

if TYPE_CHECKING:
    from torchdoctor.check.context import Context

# deprecated name -> (new name under torch, device type)
_DEPRECATED_AMP = {
    "torch.cuda.amp.autocast": ("amp.autocast", "cuda"),
    "torch.cuda.amp.GradScaler": ("amp.GradScaler", "cuda"),
    "torch.cpu.amp.autocast": ("amp.autocast", "cpu"),
    "torch.cpu.amp.GradScaler": ("amp.GradScaler", "cpu"),
    # (imported from the submodules: ``from torch.cuda.amp.grad_scaler import GradScaler``)
    "torch.cuda.amp.autocast_mode.autocast": ("amp.autocast", "cuda"),
    "torch.cuda.amp.grad_scaler.GradScaler": ("amp.GradScaler", "cuda"),
    "torch.cpu.amp.autocast_mode.autocast": ("amp.autocast", "cpu"),
    "torch.cpu.amp.grad_scaler.GradScaler": ("amp.GradScaler", "cpu"),
}
_AUTOCASTS = ("torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast", "torch.amp.autocast_mode.autocast")
_SCALERS = lazy(r"^torch\.(cuda\.amp\.|cpu\.amp\.|amp\.|amp\.grad_scaler\.)?GradScaler$|ShardedGradScaler$")
_EVAL_FUNC = lazy(r"eval|valid|test|predict|infer|generate|sample", re.IGNORECASE)


def _torch_name(ctx: Context) -> str | None:
    """A local name bound to the torch module (``torch``, or ``th`` after ``import torch as th``)."""
    names = sorted(k for k, v in ctx.imports.items() if v == "torch")
    return "torch" if "torch" in names else (names[0] if names else None)


# ---- TD601 ---------------------------------------------------------------------


def _amp_edits(ctx: Context, call: ast.Call, new: str, device: str) -> tuple[Edit, ...]:
    """`torch.cuda.amp.X(kw=...)` -> `torch.amp.X("cuda", kw=...)`; only keyword calls (positions differ)."""
    torch_name = _torch_name(ctx)
    if torch_name is None or call.args:
        return ()
    func = call.func
    line = ctx.lines[func.end_lineno - 1] if func.end_lineno else ""
    col = ctx.char_col(func.end_lineno, func.end_col_offset)
    rest = line[col:]
    paren = col + (len(rest) - len(rest.lstrip()))
    if not rest.strip().startswith("("):
        return ()
    at_line_end = not line[paren + 1:].strip()
    arg = f'"{device}"' + (("," if at_line_end else ", ") if call.keywords else "")
    return (
        ctx.replace_edit(func, f"{torch_name}.{new}"),
        Edit(func.end_lineno, paren + 1, func.end_lineno, paren + 1, arg),
    )


@rule("TD601", ast.Module)
def deprecated_amp_module(node: ast.AST, ctx: Context) -> None:
    """Deprecated AMP calls and references: only files that mention ``amp`` are looked at."""
    sem = ctx.semantic
    if "amp" not in ctx.source:  # (`torch.cuda.amp`, `from torch.cuda import amp`, `from torch.cuda.amp import ...`)
        return
    if "autocast" not in ctx.source and "GradScaler" not in ctx.source:  # nothing below can match ("amp" is in "example")
        return
    for call in sem.calls_named("autocast", "GradScaler"):
        deprecated_amp(call, ctx)
    for ref in sem.of_type(ast.Attribute, ast.Name):
        if (ref.attr if isinstance(ref, ast.Attribute) else ref.id) in ("autocast", "GradScaler"):  # type: ignore[attr-defined]
            deprecated_amp(ref, ctx)


def _compat(ctx: Context, node: ast.AST) -> bool:
    """Code for an older torch (a version branch, an ImportError fallback), or a name imported there
    (``if is_torch_version("<", "2.4"): from torch.cuda.amp import GradScaler``), or a type annotation."""
    sem = ctx.semantic
    if sem.guards.in_compat_branch(node):
        return True
    for a in sem.ancestors(node):
        if isinstance(a, ast.arg) or isinstance(a, ast.AnnAssign) and sem.contains(a.annotation, node) or \
                isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef)) and a.returns is not None and sem.contains(a.returns, node):
            return True
        if isinstance(a, ast.stmt):
            break
    head = dotted(node.func if isinstance(node, ast.Call) else node) or ""
    head = head.split(".")[0]
    return any(sem.guards.in_compat_branch(i) for i in sem.of_type(ast.ImportFrom, ast.Import)
               if any((a.asname or a.name).split(".")[0] == head for a in i.names))  # type: ignore[attr-defined]


def deprecated_amp(node: ast.AST, ctx: Context) -> None:
    """Deprecated `torch.cuda.amp.autocast`/`GradScaler` (and `torch.cpu.amp`).

    What it does: finds uses of the per-device AMP namespaces, deprecated since PyTorch 2.4.
    Why is this bad? They warn on every call and will be removed; the device-generic
    API takes the device type as its first argument.
    Use instead: `torch.amp.autocast("cuda", ...)`, `torch.amp.GradScaler("cuda", ...)`.
    Fix safety: calls that pass only keywords are rewritten (the positional
    parameters differ between the old and the new API).
    """
    if isinstance(node, ast.Call):
        name = ctx.call_name(node)
        if name not in _DEPRECATED_AMP or _compat(ctx, node):
            return
        new, device = _DEPRECATED_AMP[name]
        old = ctx.name(node.func)
        ctx.report(
            "TD601",
            node,
            f"`{old}(...)` is deprecated: use `torch.{new}(\"{device}\", ...)`",
            fix=f"replace with `torch.{new}(\"{device}\", ...)`",
            edits=_amp_edits(ctx, node, new, device),
        )
        return
    # a reference that is not called here (`amp_ctx = torch.cuda.amp.autocast`)
    if (node.attr if isinstance(node, ast.Attribute) else node.id) not in ("autocast", "GradScaler"):  # type: ignore[attr-defined]
        return
    parent = ctx.parent(node)
    if isinstance(parent, ast.Call) and parent.func is node:
        return
    if isinstance(parent, ast.Attribute) or isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
        return
    name = ctx.qualname(node)
    if name in _DEPRECATED_AMP and not _compat(ctx, node):
        new, device = _DEPRECATED_AMP[name]
        ctx.report("TD601", node, f"`{ctx.name(node)}` is deprecated: use `torch.{new}` with device type \"{device}\"",
                   fix=f"use `torch.{new}` and pass \"{device}\" as the device type")


# ---- TD604 ---------------------------------------------------------------------


def _autocast_dtype(ctx: Context, call: ast.Call) -> str | None:
    """"float16" when this autocast certainly runs float16; None when it does not or we cannot tell."""
    name = ctx.call_name(call)
    if name not in _AUTOCASTS:
        return None
    enabled = keyword(call, "enabled")
    if enabled is not None and isinstance(enabled.value, ast.Constant) and not enabled.value.value:
        return None  # switched off; `enabled=use_amp` still runs float16 whenever AMP is on
    if any(k.arg is None for k in call.keywords):
        return None
    dtype = keyword(call, "dtype")
    if name == "torch.cuda.amp.autocast":
        device = "cuda"
        if dtype is None and len(call.args) >= 2:
            dtype = ast.keyword(arg="dtype", value=call.args[1])
    else:
        dev = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "device_type"), None)
        device = string_value(dev)
        if dtype is None and len(call.args) >= 2:
            dtype = ast.keyword(arg="dtype", value=call.args[1])
    if dtype is None:
        return "float16" if device == "cuda" else None
    dtype_name = ctx.qualname(dtype.value) or string_value(dtype.value) or ""
    return "float16" if dtype_name in ("torch.float16", "torch.half", "float16") else None


def _autocast_trains(ctx: Context, node: ast.Call) -> bool:
    """The float16 region is part of training: inside a training loop, or followed (in the same
    function) by a backward; an autocast around a final inference call after training computes no
    gradients."""
    sem = ctx.semantic
    if sem.enclosing_loop(node, "train") is not None:
        return True
    with_node = sem.parent(sem.parent(node))  # the ``with`` whose item this call is
    body = sem.body(with_node) if isinstance(with_node, (ast.With, ast.AsyncWith)) else []
    if "backward" in sem.region_effects(body):
        return True
    if body:  # a later backward counts when it backpropagates something computed in the region (not a shape check
        return any(isinstance(n, ast.Call) and sem.feeds_backward(n) for n in body)  # under float16, then another block)
    scope = sem.scope_of(node)
    nodes = sem.local_nodes(scope) if not isinstance(scope, ast.Module) else sem.body(scope)
    return any(sem.is_backward_call(n) and n.lineno >= node.lineno for n in nodes)  # type: ignore[attr-defined]


def _has_scaler(ctx: Context) -> bool:
    """A GradScaler (or a wrapper such as timm's NativeScaler, or one passed in as `scaler`) is in use."""

    def compute() -> bool:
        if "caler" not in ctx.source:  # GradScaler, NativeScaler, scaler: none can appear
            return False
        sem = ctx.semantic
        for n in sem.of_type(ast.Attribute, ast.Name):
            if _SCALERS.search(ctx.qualname(n) or "") or "scaler" in (dotted(n) or "").lower():
                return True
        return any("scaler" in n.arg.lower() for n in sem.of_type(ast.arg))  # type: ignore[attr-defined]

    return ctx.semantic.cached("has_scaler", compute)  # type: ignore[no-any-return]


def _trains(ctx: Context) -> bool:
    return ctx.semantic.trains


def _in_evaluation(ctx: Context, node: ast.AST) -> bool:
    sem = ctx.semantic
    for frame in sem.frame(node).chain():
        if frame.kind == "function" and _EVAL_FUNC.search(frame.node.name):  # type: ignore[attr-defined]
            return True
    item = sem.parent(node)
    stmt = sem.parent(item) if isinstance(item, ast.withitem) else None
    if isinstance(stmt, (ast.With, ast.AsyncWith)) and any(  # ``with torch.no_grad(), torch.autocast("cuda"):``
            isinstance(i.context_expr, ast.Call) and (ctx.call_name(i.context_expr) or "") in _NO_GRAD for i in stmt.items):
        return True
    return sem.grad_mode(node) == "off"


_NO_GRAD = frozenset({"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad", "torch.autograd.grad_mode.no_grad"})


@rule("TD604", calls=("autocast",))
def float16_without_scaler(node: ast.Call, ctx: Context) -> None:
    """float16 autocast in a training program with no GradScaler.

    What it does: finds float16 autocast regions (`torch.autocast("cuda")` without
    `dtype` means float16) in a file that calls `backward()` but never creates a GradScaler.
    Why is this bad? float16 gradients below ~6e-8 underflow to zero: training stalls
    or diverges silently.
    Use instead: `scaler = torch.amp.GradScaler("cuda")` with `scaler.scale(loss).backward()`,
    `scaler.step(optimizer)`, `scaler.update()`; or `dtype=torch.bfloat16` (no scaler needed).
    """
    if _autocast_dtype(ctx, node) != "float16" or _has_scaler(ctx) or not _trains(ctx):
        return
    if _in_evaluation(ctx, node) or not _autocast_trains(ctx, node):
        return
    ctx.report(
        "TD604",
        node,
        f"`{ctx.name(node.func)}(...)` computes in float16 but no GradScaler scales the loss: "
        "small gradients underflow to zero",
        fix='use `torch.amp.GradScaler("cuda")` (scale, step, update) or autocast with `dtype=torch.bfloat16`',
    )


# ---- TD605 ---------------------------------------------------------------------


def _scaler_names(ctx: Context) -> set[str]:
    """Dotted names that hold a GradScaler: assigned from its constructor, or named ``scaler``."""

    def compute() -> set[str]:
        out = {"scaler", "grad_scaler", "amp_scaler", "self.scaler", "self.grad_scaler"}
        for n in ctx.semantic.of_type(ast.Assign, ast.AnnAssign):
            if isinstance(n.value, ast.Call) and _SCALERS.search(ctx.call_name(n.value) or ""):  # type: ignore[attr-defined]
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]  # type: ignore[attr-defined]
                out.update(d for t in targets if (d := dotted(t)))
        return out

    return ctx.semantic.cached("scaler_names", compute)  # type: ignore[no-any-return]


def _scaler_handed_on(ctx: Context) -> bool:
    """``AcceleratedOptimizer(optimizer, scaler=self.scaler)``: the scaler is passed to other code."""
    sem = ctx.semantic
    names = _scaler_names(ctx)
    indexed = {n for n in names if "." not in n or n.startswith("self.") and n.count(".") == 1}
    for key in indexed:  # (where the names are read, rather than every call of the file)
        for r in sem.reads_of(key):
            up = sem.parent(r)
            if isinstance(up, ast.keyword):
                up = sem.parent(up)
            if isinstance(up, ast.Call) and r is not up.func and (r in up.args or any(k.value is r for k in up.keywords)):
                return True
    rest = names - indexed
    if not rest:
        return False
    for c in sem.calls:  # (loops, not generators: every call of the file)
        if isinstance(c.func, ast.Attribute) and dotted(c.func.value) in rest:
            continue  # (a scaler's own method call hands nothing on)
        for a in c.args:
            if dotted(a) in rest:
                return True
        for k in c.keywords:
            if dotted(k.value) in rest:
                return True
    return False


def _scaler_method_calls(ctx: Context, attr: str) -> list[ast.Call]:
    names = _scaler_names(ctx)
    return [c for c in ctx.semantic.calls_named(attr)
            if isinstance(c.func, ast.Attribute) and dotted(c.func.value) in names]


_OPTIMIZER = lazy(r"^(optimizer|optim|opt|optimiser)s?$|_(optimizer|optim|opt)$|^(optimizer|opt)_", re.I)


def _optimizer_steps(ctx: Context) -> list[ast.Call]:
    """``optimizer.step()`` calls (never a scheduler's or a scaler's step)."""
    scalers = _scaler_names(ctx)
    out = []
    for c in ctx.semantic.calls_named("step"):
        if not isinstance(c.func, ast.Attribute):
            continue
        name = dotted(c.func.value)
        if name and name not in scalers and _OPTIMIZER.search(name.rsplit(".", 1)[-1]):
            out.append(c)
    return out


def _enclosing_func(ctx: Context, node: ast.AST) -> ast.AST:
    return ctx.semantic.function_of(node) or ctx.tree


def _direct_steps_beside(ctx: Context, scale: ast.Call) -> list[ast.Call]:
    """Direct ``optimizer.step()`` calls on the same path as ``scaler.scale(...)``."""
    func = _enclosing_func(ctx, scale)
    return [s for s in _optimizer_steps(ctx)
            if _enclosing_func(ctx, s) is func and not ctx.semantic.in_other_branch(scale, s)]


def _steps_anything(ctx: Context) -> bool:
    """The file makes or is given an optimizer, or calls some ``.step()``."""
    sem = ctx.semantic
    return bool(sem.calls_named("step")) or any(sem.call_kind(c, c) == "optimizer" for c in sem.calls) or \
        any("optim" in a.arg for f in sem.of_type(ast.FunctionDef) for a in f.args.args)  # type: ignore[attr-defined]


@rule("TD605", calls=("scale", "step"))
def half_used_scaler(node: ast.Call, ctx: Context) -> None:
    """GradScaler used half-way.

    What it does: finds `scaler.scale(loss).backward()` in a file that never calls
    `scaler.step(optimizer)` (reported on a direct `optimizer.step()` beside it, else
    on the `scale` call) or never calls `scaler.update()`.
    Why is this bad? `optimizer.step()` then applies gradients still multiplied by
    the scale (65536 by default) and skips the inf/NaN check; without `update()` the
    scale never adapts.
    Use instead: `scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()`.
    """
    if not (isinstance(node.func, ast.Attribute) and node.func.attr in ("scale", "step")):
        return
    if _scaler_handed_on(ctx):
        return  # the scaler is given to another object that may step and update it
    scales = _scaler_method_calls(ctx, "scale")
    if not scales or _scaler_method_calls(ctx, "step"):
        missing_step = False
    else:
        missing_step = True
    missing_update = bool(scales) and not _scaler_method_calls(ctx, "update")
    if node.func.attr == "step":
        if missing_step and any(node in _direct_steps_beside(ctx, s) for s in scales):
            opt = ctx.name(node.func.value)
            ctx.report("TD605", node,
                       f"`{opt}.step()` is called directly although the loss is scaled by a GradScaler: "
                       "the step applies scaled gradients and skips the inf/NaN check",
                       fix=f"call `scaler.step({opt})` then `scaler.update()` instead")
        return
    if node not in scales or not _steps_anything(ctx):
        return  # (no optimizer and no step in the file: a benchmark that times the scaled backward alone)
    problems = []
    if missing_step:
        if _direct_steps_beside(ctx, node):
            return  # reported on the direct `optimizer.step()`, whose fix names both calls
        problems.append("`scaler.step(optimizer)`")
    if missing_update:
        problems.append("`scaler.update()`")
    if problems:
        scaler = ctx.name(node.func.value)
        ctx.report("TD605", node,
                   f"`{scaler}.scale(...)` is used without {' and '.join(problems)}: the GradScaler is used half-way",
                   fix=f"after backward call `{scaler}.step(optimizer)` and `{scaler}.update()`")
