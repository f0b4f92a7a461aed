"""Stage 5 rules, results: `.numpy()` on device tensors, `torch.load` safety, pickled models."""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from torchdoctor.check.astutil import FUNC_TYPES, dotted, func_params, has_kwargs, keyword, walk_local
from torchdoctor.check.registry import rule
from torchdoctor.check.rules.device import all_nodes, memo
from torchdoctor.findings import Edit

if TYPE_CHECKING:
    from torchdoctor.check.context import Context

# Names people give a model object; what they give a checkpoint dict is excluded first.
_MODEL_NAME = re.compile(r"^(model|net|network|module|.*_model|model_.*|.*_net|.*_network|.*Model|.*Net)$")
_NOT_MODEL = re.compile(r"state|ckpt|checkpoint|dict|weights|params|optim|tensor|data", re.IGNORECASE)
# Library model constructors (their results are nn.Modules).
_MODEL_FACTORY = re.compile(r"^(torchvision\.models\.|timm\.create_model$|transformers\..*\.from_pretrained$|torch\.nn\.)")


def _insert_after_last_arg(ctx: Context, call: ast.Call, text: str) -> Edit | None:
    """An edit adding ``, text`` after the call's last argument (trailing commas and newlines are kept)."""
    items: list[ast.AST] = [*call.args, *call.keywords]
    if not items or any(isinstance(a, ast.Starred) for a in call.args):
        return None
    last = max(items, key=lambda a: (a.end_lineno, a.end_col_offset))
    return ctx.insert_edit(last.end_lineno, last.end_col_offset, f", {text}")


def _load_text(ctx: Context, call: ast.Call) -> str:
    first = ctx.segment(call.args[0]) if call.args else ""
    if len(first) > 40 or "\n" in first:
        first = "..."
    return f"{ctx.segment(call.func)}({first})"


# ---- TD502 / TD503 -------------------------------------------------------------


def _device_var(ctx: Context, call: ast.Call) -> str | None:
    """``device`` when a variable of that name clearly holds the program's device at ``call``."""
    func = next((a for a in ctx.ancestors(call) if isinstance(a, FUNC_TYPES)), None)
    stmt_line = call.lineno
    if func is not None:
        if "device" in func_params(func):
            return "device"
        local = [n for n in walk_local(func.body) if _assigns_device(n)]
        if local:
            # a local `device` is visible only after a plain statement of the body assigned it
            return "device" if any(s in func.body and s.lineno < stmt_line for s in local) else None
        if any(isinstance(a, FUNC_TYPES) for a in ctx.ancestors(func)) or _declares_global_device(ctx, func):
            return None
        return "device" if any(_assigns_device(s) for s in ctx.tree.body) else None
    return "device" if any(_assigns_device(s) and s.lineno < stmt_line for s in ctx.tree.body) else None


def _assigns_device(node: ast.AST) -> bool:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) and node.value else []
    return any(isinstance(t, ast.Name) and t.id == "device" for t in targets)


def _declares_global_device(ctx: Context, func: ast.AST) -> bool:
    return any(isinstance(n, ast.Global) and "device" in n.names for n in ast.walk(func))


def _target_torch(ctx: Context) -> tuple[int, ...] | None:
    value = getattr(ctx.settings, "target_torch", None)
    return tuple(value) if value else None


@rule("TD502", ast.Call)
def load_without_map_location(node: ast.Call, ctx: Context) -> None:
    """`torch.load` without `map_location`.

    What it does: finds `torch.load(...)` calls that do not say where the tensors go.
    Why is this bad? A checkpoint saved on a GPU is restored onto that GPU: it
    fails on a CPU-only machine ("Attempting to deserialize object on a CUDA
    device") and lands every rank on GPU 0 in a multi-GPU run.
    Use instead: `torch.load(path, map_location=device)` (or `"cpu"`).
    Fix safety: adds `map_location=device` when a `device` variable clearly holds the
    program's device there, else `map_location="cpu"`.
    """
    if ctx.call_name(node) != "torch.load":
        return
    if len(node.args) >= 2 or keyword(node, "map_location") or has_kwargs(node) \
            or any(isinstance(a, ast.Starred) for a in node.args):
        return
    target = _device_var(ctx, node) or '"cpu"'
    edit = _insert_after_last_arg(ctx, node, f"map_location={target}")
    ctx.report(
        "TD502",
        node,
        f"`{_load_text(ctx, node)}` has no map_location: a checkpoint saved on a GPU fails to load "
        "on a CPU-only machine, or lands on the wrong GPU",
        fix=f"pass `map_location={target}`",
        edits=(edit,) if edit else (),
    )


@rule("TD503", ast.Call)
def load_without_weights_only(node: ast.Call, ctx: Context) -> None:
    """`torch.load` without `weights_only=True`, or with `weights_only=False`.

    What it does: finds `torch.load` calls that may unpickle arbitrary objects.
    Why is this bad? Unpickling runs code from the file: a downloaded checkpoint can
    execute anything. Missing `weights_only` is not reported when the configuration
    says `target-torch >= "2.6"`, where `weights_only=True` is the default.
    Use instead: `torch.load(path, map_location="cpu", weights_only=True)`; save only
    state dicts and plain containers so that the safe loader reads them.
    Fix safety: adds `weights_only=True` to calls that do not set it (never with a
    custom `pickle_module`); `weights_only=False` is left for a person to decide.
    """
    if ctx.call_name(node) != "torch.load" or any(isinstance(a, ast.Starred) for a in node.args):
        return
    kw = keyword(node, "weights_only")
    if kw is not None:
        if isinstance(kw.value, ast.Constant) and kw.value.value is False:
            ctx.report(
                "TD503",
                node,
                f"`{_load_text(ctx, node)}` passes weights_only=False: unpickling the file can run arbitrary code",
                fix="load with `weights_only=True` (save state dicts, not pickled objects)",
            )
        return
    target = _target_torch(ctx)
    if has_kwargs(node) or (target is not None and target >= (2, 6)):
        return
    edit = None if keyword(node, "pickle_module") or len(node.args) >= 3 else \
        _insert_after_last_arg(ctx, node, "weights_only=True")
    ctx.report(
        "TD503",
        node,
        f"`{_load_text(ctx, node)}` does not pass weights_only=True: unpickling the file can run arbitrary code",
        fix="pass `weights_only=True`",
        edits=(edit,) if edit else (),
    )


# ---- TD504 ---------------------------------------------------------------------


def _model_classes(ctx: Context) -> set[str]:
    """Names of classes defined in the file that derive (directly or through the file) from nn.Module."""

    def compute() -> set[str]:
        classes = [n for n in all_nodes(ctx) if isinstance(n, ast.ClassDef)]
        found: set[str] = set()
        changed = True
        while changed:
            changed = False
            for cls in classes:
                if cls.name in found:
                    continue
                for base in cls.bases:
                    name = ctx.qualname(base) or ""
                    if name.startswith("torch.nn.") or name in found or name.endswith(("nn.Module", "PreTrainedModel")):
                        found.add(cls.name)
                        changed = True
                        break
        return found

    return memo(ctx, "model_classes", compute)


def _constructed_models(ctx: Context) -> set[str]:
    """Dotted names assigned a model constructor anywhere in the file (``model = Net()``)."""

    def compute() -> set[str]:
        classes = _model_classes(ctx)
        out: set[str] = set()
        for node in all_nodes(ctx):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                name = ctx.call_name(node.value) or ""
                if name in classes or _MODEL_FACTORY.match(name):
                    out.update(d for t in node.targets if (d := dotted(t)))
        return out

    return memo(ctx, "constructed_models", compute)


def is_model_expr(ctx: Context, expr: ast.AST) -> bool:
    """``expr`` is (very likely) an nn.Module object rather than a state dict or tensor."""
    name = dotted(expr)
    if name is None:
        if isinstance(expr, ast.Call):
            called = ctx.call_name(expr) or ""
            return called in _model_classes(ctx) or bool(_MODEL_FACTORY.match(called)) and called != "torch.nn.Parameter"
        return False
    last = name.rsplit(".", 1)[-1]
    if name in _constructed_models(ctx):
        return True
    if _NOT_MODEL.search(last):
        return False
    if last == "module":  # model.module: the model inside a (D)DP wrapper
        return "." in name and is_model_expr(ctx, expr.value)  # type: ignore[attr-defined]
    return bool(_MODEL_NAME.match(last))


@rule("TD504", ast.Call)
def whole_model_saved(node: ast.Call, ctx: Context) -> None:
    """`torch.save(model, ...)`: the whole model pickled instead of its `state_dict()`.

    What it does: finds `torch.save` calls whose object is a model.
    Why is this bad? The pickle stores the class by import path: loading needs the
    same code at the same place, breaks on refactors, and needs `weights_only=False`.
    Use instead: `torch.save(model.state_dict(), path)`.
    """
    if ctx.call_name(node) != "torch.save":
        return
    obj = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "obj"), None)
    if obj is None or not is_model_expr(ctx, obj):
        return
    text = ctx.segment(obj)
    ctx.report(
        "TD504",
        node,
        f"`torch.save({text}, ...)` pickles the whole model: loading needs the same class at the same "
        "import path and an unsafe `weights_only=False`",
        fix=f"save `{text}.state_dict()` and load it with `model.load_state_dict(...)`",
    )
