"""Stage 1 rules, device choice: hard-coded CUDA (TD101) and ``.cuda()`` (TD102).

Also the file-level device facts that the later stages share (where CUDA is
hard-coded, whether the file checks for a GPU, whether it is a DDP program).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from torchdoctor.check.astutil import string_value
from torchdoctor.check.registry import rule

if TYPE_CHECKING:
    from torchdoctor.check.context import Context

T = TypeVar("T")

_CUDA = re.compile(r"cuda(:\d+)?")
# An `if` or conditional expression testing one of these words chooses the device itself.
_DEVICE_WORDS = re.compile(r"cuda|gpu|device|accelerat", re.IGNORECASE)
# Calls that take `device=` but fall back by themselves (autocast, GradScaler warn and disable)
# or hold configuration rather than placing anything.
_QUIET_DEVICE_KW = re.compile(
    r"(^torch\.(cuda|amp|autocast|GradScaler|cpu)\b)|(^dict$)|(Config|Args|Arguments|Namespace|set_defaults|add_argument)$"
)


def memo(ctx: Context, key: str, compute: Callable[[], T]) -> T:
    """Compute a file-level fact once per file (rules run once per node); kept in the file's Facts."""
    return ctx.facts.cached(("rules", key), compute)  # type: ignore[no-any-return]


def all_nodes(ctx: Context) -> list[ast.AST]:
    """Every node of the file, in a deterministic order (ast.walk is breadth-first)."""
    return ctx.facts.nodes


def parent_map(ctx: Context) -> dict[ast.AST, ast.AST]:
    """Parents of every node (the engine's map only covers nodes already visited)."""
    return ctx.facts.parents


def ancestors(ctx: Context, node: ast.AST) -> Iterator[ast.AST]:
    parents = parent_map(ctx)
    node = parents.get(node)  # type: ignore[assignment]
    while node is not None:
        yield node
        node = parents.get(node)  # type: ignore[assignment]


def in_other_branch(ctx: Context, a: ast.AST, b: ast.AST) -> bool:
    """``a`` and ``b`` sit in the two exclusive branches of one ``if`` (AMP on / AMP off)."""
    for anc in ancestors(ctx, a):
        if isinstance(anc, ast.If):
            in_body = any(a is n for s in anc.body for n in ast.walk(s))
            other = anc.orelse if in_body else anc.body
            if any(b is n for s in other for n in ast.walk(s)):
                return True
    return False


def calls_named(ctx: Context, *qualnames: str) -> list[ast.Call]:
    """Every call in the file whose resolved name is one of ``qualnames``."""
    return [n for n in all_nodes(ctx) if isinstance(n, ast.Call) and ctx.call_name(n) in qualnames]


def method_calls(ctx: Context, attr: str) -> list[ast.Call]:
    """Every ``<something>.attr(...)`` call in the file."""
    return [n for n in all_nodes(ctx)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == attr]


def cuda_string(node: ast.AST | None) -> tuple[bool, bool]:
    """(is a literal CUDA device string, names a device index) for ``"cuda"``, ``"cuda:1"``, ``f"cuda:{rank}"``."""
    text = string_value(node)
    if text is not None:
        m = _CUDA.fullmatch(text.strip())
        return (m is not None, bool(m and m.group(1)))
    if isinstance(node, ast.JoinedStr) and node.values:
        head = string_value(node.values[0])
        if head is not None and head.startswith("cuda"):
            return (head in ("cuda", "cuda:"), len(node.values) > 1)
    return (False, False)


def has_cuda_check(ctx: Context) -> bool:
    """The file asks whether a GPU exists somewhere (``is_available()``, ``device_count()``, ``torch.accelerator``)."""

    def compute() -> bool:
        for node in all_nodes(ctx):
            if isinstance(node, ast.Attribute):
                name = ctx.qualname(node) or node.attr
                if node.attr in ("is_available", "device_count") or name.startswith("torch.accelerator"):
                    return True
            elif isinstance(node, ast.Name) and (ctx.imports.get(node.id) or "").startswith("torch.accelerator"):
                return True
            elif isinstance(node, ast.Name) and node.id in ("is_available", "device_count"):
                return True
        return False

    return memo(ctx, "has_cuda_check", compute)


@dataclass(frozen=True)
class CudaSite:
    """One place where a CUDA device is hard-coded."""

    node: ast.AST
    text: str  # how the message names it: `torch.device("cuda")`, `model.cuda()`
    indexed: bool  # names a device index (`"cuda:1"`, `.cuda(rank)`, `torch.device("cuda", rank)`)


def cuda_site(node: ast.AST, ctx: Context) -> CudaSite | None:
    """The hard-coded CUDA device at ``node``, if ``node`` is such a site."""
    if isinstance(node, ast.Call):
        return _call_site(node, ctx)
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and _device_target(node):
        is_cuda, indexed = cuda_string(node.value)
        if is_cuda and not isinstance(parent_map(ctx).get(node), ast.ClassDef):
            text = f"{ctx.segment(node.targets[0] if isinstance(node, ast.Assign) else node.target)} = {ctx.segment(node.value)}"  # type: ignore[arg-type]
            return CudaSite(node.value, text, indexed)  # type: ignore[arg-type]
    return None


def _device_target(node: ast.Assign | ast.AnnAssign) -> bool:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    for t in targets:
        name = t.id if isinstance(t, ast.Name) else t.attr if isinstance(t, ast.Attribute) else ""
        if "device" in name.lower() or name.lower() == "dev":
            return True
    return False


def _call_site(call: ast.Call, ctx: Context) -> CudaSite | None:
    name = ctx.call_name(call)
    func = call.func
    if name == "torch.device":
        first = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "type"), None)
        is_cuda, indexed = cuda_string(first)
        if is_cuda:
            return CudaSite(call, ctx.segment(call), indexed or len(call.args) > 1
                            or any(k.arg == "index" for k in call.keywords))
        return None
    if isinstance(func, ast.Attribute) and func.attr == "cuda":
        if ctx.qualname(func.value) == "torch" or on_module(ctx, func.value):
            return None
        return CudaSite(call, _short(ctx, call), bool(call.args) or any(k.arg == "device" for k in call.keywords))
    if isinstance(func, ast.Attribute) and func.attr == "to":
        for arg in list(call.args[:1]) + [k.value for k in call.keywords if k.arg == "device"]:
            is_cuda, indexed = cuda_string(arg)
            if is_cuda:
                return CudaSite(call, _short(ctx, call), indexed)
        return None
    if name and _QUIET_DEVICE_KW.search(name):
        return None
    for kw in call.keywords:
        if kw.arg in ("device", "map_location"):
            is_cuda, indexed = cuda_string(kw.value)
            if is_cuda:
                return CudaSite(kw.value, f"{kw.arg}={ctx.segment(kw.value)}", indexed)
    return None


def _short(ctx: Context, call: ast.Call) -> str:
    text = ctx.segment(call)
    return text if len(text) <= 60 and "\n" not in text else f"{ctx.segment(call.func)}(...)"


def _module_names(ctx: Context) -> set[str]:
    """Names bound by plain ``import x`` / ``import x as y`` statements (modules, not objects)."""

    def compute() -> set[str]:
        return {(a.asname or a.name.split(".")[0]) for n in all_nodes(ctx) if isinstance(n, ast.Import) for a in n.names}

    return memo(ctx, "module_names", compute)


def on_module(ctx: Context, receiver: ast.AST) -> bool:
    """``tvm.cuda()``, ``cupy.cuda...``: a function of an imported module, not a tensor's method;
    or ``settings.cuda()`` on an instance of a plain in-file class that defines its own ``cuda``."""
    node = receiver
    while isinstance(node, ast.Attribute):
        node = node.value
    if isinstance(node, ast.Name) and node.id in _module_names(ctx):
        return True
    return isinstance(receiver, ast.Name) and _own_cuda_class(ctx, receiver) is not None


def _own_cuda_class(ctx: Context, receiver: ast.Name) -> str | None:
    """The in-file non-module class ``receiver`` was built from, when that class defines ``cuda``."""
    classes = memo(ctx, "own_cuda_classes", lambda: {
        c.name for c in all_nodes(ctx) if isinstance(c, ast.ClassDef) and c.name not in ctx.facts.module_classes
        and any(isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == "cuda" for f in c.body)})
    if not classes:
        return None
    b = ctx.facts.scopes.binding_at(receiver.id, receiver)
    value = b.value if b is not None and b.index is None else None
    name = ctx.call_name(value) if isinstance(value, ast.Call) else None
    return name if name in classes else None


def chooses_device(ctx: Context, node: ast.AST) -> bool:
    """``node`` sits in a branch that a test about the device chose (``if args.cuda:``, ``x.cuda() if gpu else x``)."""
    child = node
    for anc in ancestors(ctx, node):
        test = getattr(anc, "test", None) if isinstance(anc, (ast.If, ast.IfExp, ast.While)) else None
        if test is not None and child is not test and _mentions_device(test):
            return True
        child = anc
    return False


def _mentions_device(test: ast.AST) -> bool:
    for n in ast.walk(test):
        word = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else string_value(n)
        if word and _DEVICE_WORDS.search(word):
            return True
    return False


def is_ddp_program(ctx: Context) -> bool:
    """The file starts a process group or wraps a model in DistributedDataParallel."""

    def compute() -> bool:
        for node in all_nodes(ctx):
            if isinstance(node, ast.Call):
                name = ctx.call_name(node) or ""
                if name.endswith(("init_process_group", "DistributedDataParallel")) and name.startswith("torch"):
                    return True
        return False

    return memo(ctx, "is_ddp", compute)


def iter_cuda_sites(ctx: Context) -> Iterator[CudaSite]:
    for node in all_nodes(ctx):
        site = cuda_site(node, ctx)
        if site is not None:
            yield site


# ---- rules --------------------------------------------------------------------


@rule("TD101", ast.Call, ast.Assign, ast.AnnAssign)
def hard_coded_cuda(node: ast.AST, ctx: Context) -> None:
    """CUDA hard-coded with no GPU check anywhere in the file.

    What it does: finds `torch.device("cuda")`, `device="cuda"`, `.to("cuda")`,
    `.cuda()` and `device = "cuda"` in a file that never asks whether a GPU
    exists (`torch.cuda.is_available()`, `device_count()`, `torch.accelerator`).
    Why is this bad? The program crashes on a machine without a GPU.
    Use instead: `device = torch.device("cuda" if torch.cuda.is_available() else "cpu")`.
    Argument defaults (`default="cuda"`, `def f(device="cuda")`) are configurable and not reported.
    """
    site = cuda_site(node, ctx)
    if site is None or has_cuda_check(ctx) or chooses_device(ctx, node):
        return
    ctx.report(
        "TD101",
        site.node,
        f"`{site.text}` hard-codes CUDA and the file never checks `torch.cuda.is_available()`: "
        "it crashes on a machine without a GPU",
        fix=('keep the per-rank GPU but fall back: `torch.device("cuda", local_rank) if torch.cuda.is_available() '
             'else torch.device("cpu")` (with the gloo backend)') if site.indexed else
            'pick the device once: `device = torch.device("cuda" if torch.cuda.is_available() else "cpu")`',
    )


@rule("TD102", ast.Call)
def dot_cuda(node: ast.Call, ctx: Context) -> None:
    """`.cuda()` instead of `.to(device)`.

    What it does: reports every `.cuda()` call, guarded or not (a speed-neutral hint).
    Why is this bad? Placement is no longer controlled by one `device` variable:
    switching to the CPU, MPS or another GPU means editing every call.
    Use instead: `x.to(device)`.
    """
    func = node.func
    if not (isinstance(func, ast.Attribute) and func.attr == "cuda"):
        return
    if ctx.qualname(func.value) == "torch" or on_module(ctx, func.value):
        return
    receiver = ctx.segment(func.value)
    if len(receiver) > 40 or "\n" in receiver:
        receiver = "x"
    args = ctx.segment(node)[len(ctx.segment(func)):] if node.args or node.keywords else "()"
    if len(args) > 40 or "\n" in args:
        args = "(...)"
    chosen = f'`torch.device("cuda", {ctx.segment(node.args[0])})`' if node.args else "CUDA if available, else the CPU"
    ctx.report(
        "TD102",
        node,
        f"`{receiver}.cuda{args}` hard-wires CUDA at this call: placement is not controlled by one `device` variable",
        fix=f"use `{receiver}.to(device)`, with `device` chosen once at start-up ({chosen})",
    )
