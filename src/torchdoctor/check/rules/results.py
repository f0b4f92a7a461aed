"""Stage 5 rules, checkpoints: `torch.load` without map_location or weights_only (TD502, TD503), whole models
pickled by `torch.save` (TD504). `.numpy()` on device tensors (TD501) is in ``host.py``."""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from torchdoctor.check.astutil import PLACEMENT_METHODS, call_argument, dotted, func_params, has_kwargs, is_true, keyword, \
    method_name, param_default, strip_methods
from torchdoctor.check.patterns import lazy
from torchdoctor.check.registry import rule
from torchdoctor.findings import Edit

if TYPE_CHECKING:
    from torchdoctor.check.context import Context

# Names people give a model object; what they give a checkpoint dict is excluded first.
_MODEL_NAME = lazy(r"^(model|net|network|module|.*_model|model_.*|.*_net|.*_network|.*Model|.*Net)$")
_NOT_MODEL = lazy(r"state|ckpt|checkpoint|dict|weights|params|optim|tensor|data"  # (``model_args``: a settings object)
                  r"|(^|_)(args|arguments|config|cfg|conf|opt|opts|options|kwargs|settings|hparams|info|meta|stats|name|path|dir"
                  r"|step|steps|epoch|epochs|iter|iters|iteration|count|idx|index|size|lr|loss|score|acc)$",
                  re.IGNORECASE)
# Library model constructors (their results are nn.Modules).
_MODEL_FACTORY = lazy(r"^(torchvision\.models\.|timm\.create_model$|transformers\..*\.from_pretrained$"
                      r"|torch\.nn\.(?!functional\.|init\.|utils\.)(\w+\.)*[A-Z]\w*$)")  # (a layer's class, not ``F.softmax``)


def _insert_after_last_arg(ctx: Context, call: ast.Call, text: str) -> Edit | None:
    """An edit adding ``, text`` after the call's last argument (trailing commas and newlines are kept)."""
    items: list[ast.AST] = [*call.args, *call.keywords]
    if not items or any(isinstance(a, ast.Starred) for a in call.args):
        return None
    last = max(items, key=lambda a: (a.end_lineno, a.end_col_offset))
    return ctx.insert_edit(last.end_lineno, last.end_col_offset, f", {text}")


def _load_text(ctx: Context, call: ast.Call) -> str:
    first = ctx.name(call.args[0]) if call.args else ""
    if len(first) > 40:
        first = "..."
    return f"{ctx.name(call.func)}({first})"


# ---- TD502 / TD503 -------------------------------------------------------------


def _device_var(ctx: Context, call: ast.Call) -> str | None:
    """``device`` when a variable of that name clearly holds the program's device at ``call``."""
    sem = ctx.semantic
    func = sem.function_of(call)
    stmt_line = call.lineno
    if func is not None:
        if "device" in func_params(func):
            return "device"
        local = [n for n in sem.local_nodes(func) if _assigns_device(n)]
        if local:
            # a local `device` is visible only after a plain statement of the body assigned it
            return "device" if any(s in func.body and s.lineno < stmt_line for s in local) else None  # type: ignore[attr-defined]
        if sem.function_of(func) is not None or _declares_global_device(ctx, func):
            return None
        return "device" if any(_assigns_device(s) for s in ctx.tree.body) else None
    return "device" if any(_assigns_device(s) and s.lineno < stmt_line for s in ctx.tree.body) else None


def _map_location_no_caller_passes(ctx: Context, node: ast.Call) -> str | None:
    """``def load_checkpoint(path, map_location=None): ... torch.load(path, map_location=map_location)`` that no call,
    in this file or another module of the project, gives ``map_location`` (and there is one): the parameter's name."""
    given = keyword(node, "map_location")
    sem = ctx.semantic
    func = sem.function_of(node)
    if given is None or not isinstance(given.value, ast.Name) or func is None:
        return None
    name = given.value.id
    b = sem.binding_at(name, node)
    default = param_default(func, name) if b is not None and b.is_param and b.node is func else None  # type: ignore[arg-type]
    if not (isinstance(default, ast.Constant) and default.value is None):
        return None
    sites = [s for s in sem.call_sites(func) if not sem.contains(func, s)]
    if any(call_argument(s, func, name) is not None or any(k.arg is None for k in s.keywords)  # type: ignore[arg-type]
           or any(isinstance(a, ast.Starred) for a in s.args) for s in sites):
        return None
    project = sem.project
    if project is not None and (project.callers_pass(sem, func, name)  # type: ignore[attr-defined]
                                or sem.class_of(func) is not None):  # (a method: its calls go through objects)
        return None
    elsewhere = project is not None and project.has_callers(sem, func)  # type: ignore[attr-defined]
    return name if sites or elsewhere else None


def _assigns_device(node: ast.AST) -> bool:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) and node.value else []
    return any(isinstance(t, ast.Name) and t.id == "device" for t in targets)


def _declares_global_device(ctx: Context, func: ast.AST) -> bool:
    return any("device" in n.names and ctx.semantic.contains(func, n) for n in ctx.semantic.of_type(ast.Global))  # type: ignore[attr-defined]


def _target_torch(ctx: Context) -> tuple[int, ...] | None:
    value = getattr(ctx.settings, "target_torch", None)
    return tuple(value) if value else None


@rule("TD502", calls=("load",))
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
    if len(node.args) >= 2 or has_kwargs(node) or any(isinstance(a, ast.Starred) for a in node.args):
        return
    given = keyword(node, "map_location") is not None
    if given and not isinstance(keyword(node, "map_location").value, ast.Name):  # type: ignore[union-attr]
        return
    if _holds_no_device_tensors(ctx, node) or _saved_here(ctx, node):
        return
    unpassed = _map_location_no_caller_passes(ctx, node) if given else None  # (last: it may read the importers)
    if given and unpassed is None:
        return
    target = _device_var(ctx, node) or '"cpu"'
    edit = _insert_after_last_arg(ctx, node, f"map_location={target}") if unpassed is None else None
    ctx.report(
        "TD502",
        node,
        f"`{_load_text(ctx, node)}` has no map_location: a checkpoint saved on a GPU fails to load "
        "on a CPU-only machine, or lands on the wrong GPU" if unpassed is None else
        f"`{_load_text(ctx, node)}` passes `map_location={unpassed}`, a parameter no call gives (its default is "
        "None): a checkpoint saved on a GPU fails to load on a CPU-only machine, or lands on the wrong GPU",
        fix=f"pass `map_location={target}`" if unpassed is None else f'default `{unpassed}` to "cpu", or pass it',
        edits=(edit,) if edit else (),
        # map_location changes where tensors land: harmless when they are copied into a model by
        # load_state_dict (which keeps the model's device), a change of behaviour otherwise
        unsafe=_load_use(ctx, node) != "state",
    )


_STATE_ONLY_KINDS = ("scaler", "scheduler", "sampler", "loader", "optimizer")


def _holds_no_device_tensors(ctx: Context, call: ast.Call) -> bool:
    """``scaler.load_state_dict(torch.load(f))``, ``scheduler.load_state_dict(...)``: the state of a GradScaler,
    a scheduler or a sampler is Python numbers, not device tensors (an optimizer's state lives where its
    parameters do and is remapped by load_state_dict)."""
    sem = ctx.semantic
    uses = _uses_of_value(sem, call)
    if not uses:
        return False
    for use in uses:
        parent = sem.parent(use)
        if not (isinstance(parent, ast.Call) and method_name(parent) == "load_state_dict" and use in parent.args
                and isinstance(parent.func, ast.Attribute)
                and sem.expr_kind(parent.func.value, parent) in _STATE_ONLY_KINDS[:3]):
            return False
    return True


def _path_words(ctx: Context, expr: ast.AST | None) -> str | None:
    """A path expression's identity for matching a load with a save: its source without ``open(..., 'wb')``."""
    if expr is None:
        return None
    if isinstance(expr, ast.Name):  # ``with open(args.save, "wb") as f: torch.save(sd, f)``
        b = ctx.semantic.binding_at(expr.id, expr)
        if b is not None and isinstance(b.value, ast.Call) and (dotted(b.value.func) or "") in ("open", "io.open"):
            expr = b.value
    if isinstance(expr, ast.Call) and (dotted(expr.func) or "") in ("open", "io.open") and expr.args:
        expr = expr.args[0]
    return ctx.segment(expr).replace(" ", "")


def _saved_here(ctx: Context, load: ast.Call) -> bool:
    """Earlier in the same function this run wrote that path with ``torch.save``: it reads back what it
    just put there, on the same machine. Or every ``torch.save`` of the file writes host data (after
    ``.cpu()``, NumPy, FSDP's ``offload_to_cpu=True``): what it loads back is too."""
    if not load.args:
        return False
    want = _path_words(ctx, load.args[0])
    sem = ctx.semantic
    saves = [s for s in sem.calls_named("save") if ctx.call_name(s) == "torch.save" and s.args]
    scope = sem.scope_of(load)
    if any(len(s.args) >= 2 and _path_words(ctx, s.args[1]) == want and sem.scope_of(s) is scope
           and s.lineno < load.lineno for s in saves):
        return True  # reloads what this very run wrote just before (the best weights); a resume is not that
    if _written_by_an_earlier_call(ctx, load):
        return True
    same = [s for s in saves if len(s.args) >= 2 and _path_words(ctx, s.args[1]) == want]  # the saves of this path
    return bool(saves) and all(_saves_host_data(ctx, s) for s in same or saves)


_WRITERS = lazy(r"(?i)(^|_)(save|convert|export|write|dump|download|merge|consolidate)")


def _written_by_an_earlier_call(ctx: Context, load: ast.Call) -> bool:
    """Just before, in the same body, a call that writes files was given the folder or file the load
    reads (``convert_lit_checkpoint(output_dir=out_dir)`` then ``torch.load(out_dir / "model.pth")``)."""
    sem = ctx.semantic
    roots = _paths_named(sem, load.args[0]) - set(sem.imports)
    if not roots:
        return False
    scope = sem.scope_of(load)
    body = sem.local_nodes(scope) if not isinstance(scope, ast.Module) else sem.body(scope)
    for call in body:
        if not isinstance(call, ast.Call) or call is load or call.lineno >= load.lineno:  # type: ignore[attr-defined]
            continue
        name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
        if name[:1].isupper() and _saver_made_and_used(ctx, call, load, roots):
            return True
        if not _WRITERS.search(name or "") and _trains_and_saves(ctx, call, roots):
            return True  # (``best_acc = train.train(train_iter, dev_iter, cnn, args)`` saving ``best_steps_*.pt`` under
            # ``args.save_dir``, then ``torch.load`` of the newest file there)
        if not _WRITERS.search(name or "") or name[:1].isupper() or ctx.call_name(call) == "torch.save":
            continue  # (a class named ``CTCLabelConverter`` writes nothing)
        if name in ("write", "writelines") and isinstance(call.func, ast.Attribute) or _tracker_upload(ctx, call, name):
            continue  # ``tqdm.write(f"resume from {path}")`` writes text to a stream; ``wandb.save(path)`` uploads the file
        args = [*call.args, *(k.value for k in call.keywords)]
        if any(_paths_named(sem, a) & roots for a in args):
            return True
    return False


def _saver_made_and_used(ctx: Context, call: ast.Call, load: ast.Call, roots: set[str]) -> bool:
    """``call`` makes an object of a class, of this file or of the project, that saves with ``torch.save``, handed the
    path the load reads; the object is then used before the load (``early_stopping = EarlyStopping(model_path=
    cfg.checkpoint_path)``, ``early_stopping(val_loss, model)`` each epoch, then ``torch.load(cfg.checkpoint_path)``:
    the best weights this run wrote)."""
    sem = ctx.semantic
    if not any(_paths_named(sem, a) & roots for a in [*call.args, *(k.value for k in call.keywords)]):
        return False
    stmt = sem.parent(call)
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return False
    made, written = stmt.targets[0].id, dotted(call.func) or ""
    def runs(r: ast.AST) -> bool:  # ``early_stopping(...)``, ``saver.step(...)``
        up = sem.parent(r)
        if isinstance(up, ast.Attribute):
            r, up = up, sem.parent(up)
        return isinstance(up, ast.Call) and up.func is r

    if not any(call.lineno < r.lineno < load.lineno and runs(r) for r in sem.reads_of(made)):
        return False
    here = sem.calls_index.classes.get(sem.call_name(call) or "")
    if here is not None:
        return any("save" in sem.effects(m) for m in here.body  # type: ignore[attr-defined]
                   if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return sem.project is not None and sem.project.class_saves(sem, written)  # type: ignore[attr-defined]


_OUTPUT_SETTING = lazy(r"(?i)^(save|saved|out|output|ckpt|checkpoint|checkpoints|model|models|log|exp|experiment)_?(dir|path|folder|root)$")


def _trains_and_saves(ctx: Context, call: ast.Call, roots: set[str]) -> bool:
    """``call`` runs a function of this file or of another module of the project that saves checkpoints
    (``torch.save``) and is handed the options object whose attribute names the folder the load reads
    (``args`` of ``args.save_dir``)."""
    sem = ctx.semantic
    handed = {dotted(a) for a in [*call.args, *(k.value for k in call.keywords)] if isinstance(a, (ast.Name, ast.Attribute))}
    if not handed:
        return False
    seen, todo = set(roots), list(roots)
    for _ in range(3):  # (``best_path = max(best_files, ...)`` of ``best_files = glob(os.path.join(args.save_dir, ...))``)
        following = []
        for name in todo:
            if "." in name:
                continue
            for b in sem.bindings_of(name):
                if not b.is_param and b.value is not None:
                    following += [n for n in _paths_named(sem, b.value) if n not in seen]
        seen.update(following)
        todo = following
    attrs = {r[len(h) + 1:] for h in handed if h for r in seen if r.startswith(f"{h}.")}
    if not attrs:
        return False
    funcs = sem.resolve(call)
    if funcs:  # (and the function writes under that very setting: ``os.path.join(args.save_dir, ...)``)
        return any("save" in sem.effects(f) and any(f".{a}" in sem.segment(f) for a in attrs) for f in funcs)
    return "save" in getattr(sem.external(call), "effects", ()) and any(_OUTPUT_SETTING.match(a) for a in attrs)
    # (another module's: its folder named as an output one, ``args.save_dir``, not a file the user names,
    # ``args.snapshot``)


def _tracker_upload(ctx: Context, call: ast.Call, name: str) -> bool:
    """W&B's ``save(path)``: ``wandb.save(p)``, or ``.save(p)`` of a run or logger made by W&B (``wandb.init()``,
    ignite's or Lightning's ``WandBLogger(...)``): it uploads a file that exists, it writes nothing."""
    if name != "save" or not isinstance(call.func, ast.Attribute):
        return False
    sem = ctx.semantic
    recv = call.func.value
    if (sem.qualname(recv) or dotted(recv) or "").split(".", 1)[0] == "wandb":
        return True
    key = dotted(recv)
    return bool(key) and any(isinstance(b.value, ast.Call) and "wandb" in (ctx.call_name(b.value) or "").lower()
                             for b in sem.bindings_of(key) if not b.is_param)


def _paths_named(sem: object, expr: ast.AST) -> set[str]:
    """The whole names and attribute chains in ``expr``: ``out_dir``, ``opt.saved_model`` (not ``opt`` alone:
    ``opt.character`` and ``opt.saved_model`` are different things)."""
    out = set()
    for n in sem.subtree(expr):  # type: ignore[attr-defined]
        if isinstance(n, (ast.Name, ast.Attribute)) and not isinstance(sem.parent(n), ast.Attribute):  # type: ignore[attr-defined]
            key = dotted(n)
            if key:
                out.add(key)
    return out


def _saves_host_data(ctx: Context, save: ast.Call) -> bool:
    sem = ctx.semantic
    if "offload_to_cpu" in ctx.source:
        return True  # FSDP gathers its full state dicts to the CPU (``FullStateDictConfig(offload_to_cpu=True)``)
    obj = saved = save.args[0]
    nodes = sem.subtree(obj)
    if isinstance(obj, ast.Name) and (b := sem.binding_at(obj.id, obj)) is not None and b.value is not None \
            and not b.is_param:
        saved = b.value  # (``torch.save(ckpt, path)`` of ``ckpt = {...}``: what the name holds)
        nodes = nodes + sem.subtree(saved)
    if isinstance(saved, ast.Dict) and any(
            isinstance(v, ast.Call) and method_name(v) == "state_dict" and not any(
                isinstance(n, ast.Call) and method_name(n) == "cpu" for n in sem.subtree(v)) for v in saved.values):
        return False  # (``{"rnn_state_dict": self.rnn_model.state_dict(), "sigma2": s.detach().cpu().numpy()}``: the
        # model's own tensors beside a host copy are where the model is)
    if any(isinstance(n, ast.Call) and method_name(n) in ("cpu", "numpy") or
           isinstance(n, ast.Attribute) and (sem.qualname(n) or "").startswith("numpy.") for n in nodes):
        return True
    if _python_data(ctx, obj):
        return True
    scope = sem.scope_of(save)
    body = sem.local_nodes(scope) if not isinstance(scope, ast.Module) else sem.body(scope)
    for n in body:
        if isinstance(n, ast.Call):
            if method_name(n) == "cpu" and sem.expr_kind(n.func.value, n) in ("model", "wrapper"):  # type: ignore[attr-defined]
                return True  # ``model.eval().cpu()`` before saving its state dict
            if any(k.arg == "offload_to_cpu" and isinstance(k.value, ast.Constant) and k.value.value for k in n.keywords):
                return True
    return False


_PY_SCALARS = ("int", "float", "str", "bool")


def _python_data(ctx: Context, obj: ast.AST, depth: int = 0) -> bool:
    """Python numbers and strings, or containers of them (``ids = [int(i) for i in all_ids if keep(i)]``): no
    tensor in it, so nothing that could land on a GPU."""
    if isinstance(obj, ast.Constant):
        return True
    if isinstance(obj, ast.Call):
        return (dotted(obj.func) or "") in _PY_SCALARS
    if isinstance(obj, (ast.ListComp, ast.SetComp)):
        return _python_data(ctx, obj.elt, depth)
    if isinstance(obj, ast.DictComp):
        return _python_data(ctx, obj.key, depth) and _python_data(ctx, obj.value, depth)
    if isinstance(obj, (ast.List, ast.Tuple, ast.Set)):
        return all(_python_data(ctx, e, depth) for e in obj.elts)
    if isinstance(obj, ast.Dict):
        return all(v is not None and _python_data(ctx, v, depth) for v in obj.values)
    if isinstance(obj, ast.Name) and depth < 3:
        sem = ctx.semantic
        b = sem.binding_at(obj.id, obj)
        if b is None or b.is_param or b.index is not None or b.value is None or not _python_data(ctx, b.value, depth + 1):
            return False
        filled = [n.value for n in sem.local_nodes(sem.scope_of(obj)) if isinstance(n, ast.Assign)  # ``snapshot = {}``,
                  and any(isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == obj.id  # then
                          for t in n.targets) and sem.binding_at(obj.id, n) is b]  # ``snapshot["MODEL"] = ...``
        return all(_python_data(ctx, v, depth + 1) for v in filled)
    return False


_DICT_USES = {"keys", "items", "values", "get", "pop", "__getitem__", "copy", "update"}


def _load_use(ctx: Context, call: ast.Call) -> str:
    """How the loaded object is used: "state" (given to ``load_state_dict``, or read as a dict: ``ckpt["model"]``,
    ``ckpt.get(...)``), "object" (called, ``.eval()``, ``.to()``: a pickled model or object) or "unknown"."""
    sem = ctx.semantic
    uses = _uses_of_value(sem, call)
    if uses is None or not uses:
        return "unknown"
    kinds = {_use_kind(sem, u) for u in uses}
    if "object" in kinds:
        return "object"
    return "state" if kinds == {"state"} else "unknown"


def _uses_of_value(sem, call: ast.AST) -> list[ast.AST] | None:
    parent = sem.parent(call)
    if isinstance(parent, (ast.Assign, ast.AnnAssign)):
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        if len(targets) != 1 or not isinstance(targets[0], ast.Name):
            return None
        name = targets[0].id
        return [r for r in sem.reads_of(name) if sem.binding_at(name, r) is not None
                and sem.binding_at(name, r).node is parent]
    return [call]


def _use_kind(sem, use: ast.AST) -> str:
    parent = sem.parent(use)
    if isinstance(parent, ast.Call) and use in parent.args and method_name(parent) == "load_state_dict":
        return "state"
    if isinstance(parent, ast.Subscript) and parent.value is use:
        up = sem.parent(parent)
        if isinstance(up, ast.Call) and parent in up.args and method_name(up) == "load_state_dict":
            return "state"
        if isinstance(up, ast.Assign) and up.value is parent \
                and any(_item_used_as_an_object(sem, u) for u in _uses_of_value(sem, parent) or []):
            return "object"  # ``model = torch.load(p)["model"]``, then ``model.remove_weightnorm(model)``: a pickled model
        return "state" if not isinstance(up, ast.Call) or parent in up.args else "unknown"
    if isinstance(parent, ast.Attribute) and parent.value is use:
        if parent.attr in _DICT_USES:
            return "state"
        return "object"  # model.eval(), obj.to(device), obj.attr: a pickled object
    if isinstance(parent, ast.Call) and parent.func is use:
        return "object"
    if isinstance(parent, ast.Compare) or (isinstance(parent, ast.Call) and (dotted(parent.func) or "") in ("len", "print")):
        return "state"
    return "unknown"


# What an item of a loaded container may do as a tensor (or a container): no sign of a pickled object.
_TENSOR_USES = frozenset({"to", "cuda", "cpu", "float", "double", "half", "long", "int", "bool", "byte", "type", "view",
                          "reshape", "size", "numpy", "unsqueeze", "squeeze", "permute", "transpose", "t", "item",
                          "tolist", "clone", "detach", "contiguous", "sum", "mean", "max", "min", "argmax", "norm",
                          "index_select", "eq", "ne", "gt", "lt", "abs", "pow", "sqrt", "exp", "log", "std", "var",
                          "shape", "dtype", "device", "ndim", "data", "T", "copy_", "fill_", "zero_", "new_tensor",
                          # (a list's or a string's: ``epochs_count.append(epoch)``, ``arch.lower()``)
                          "append", "extend", "insert", "pop", "index", "count", "sort", "reverse", "copy", "remove",
                          "format", "split", "strip", "lower", "upper", "startswith", "endswith", "replace", "join"})


def _item_used_as_an_object(sem, use: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``model(x)``, ``model.eval()``, ``model.remove_weightnorm(model)``: an item of the loaded container used as a
    module or another object (not a tensor's method, nor a dict's)."""
    parent = sem.parent(use)
    if isinstance(parent, ast.Call) and parent.func is use:
        return True
    return isinstance(parent, ast.Attribute) and parent.value is use and parent.attr not in _TENSOR_USES \
        and parent.attr not in _DICT_USES


def _saves_objects(ctx: Context) -> bool:
    """The file, or the project, pickles something the safe loader refuses: a whole model, an argparse
    Namespace or a config object next to the weights (``torch.save({"args": args, ...})``)."""
    sem = ctx.semantic

    def compute() -> bool:
        for save in sem.calls_named("save"):
            if ctx.call_name(save) == "torch.save" and save.args and not _plain_state(ctx, save.args[0]):
                return True
        project = sem.project
        return bool(project is not None and project.saves_objects(sem))  # type: ignore[attr-defined]

    return sem.cached("saves_objects", compute)  # type: ignore[no-any-return]


_PLAIN_NAMES = lazy(r"(?i)(epoch|step|iter|loss|acc|best|score|lr|seed|metric|count|num|idx|state_dict|sd|"
                          r"weights|params|ckpt|checkpoint|state)")


def _plain_state(ctx: Context, obj: ast.AST) -> bool:
    """A state dict, tensors, numbers, strings, or a dict/list of those: what ``weights_only=True`` reads."""
    if isinstance(obj, ast.Call):
        return method_name(obj) == "state_dict" or (ctx.call_name(obj) or "").startswith("torch.") or \
            method_name(obj) in ("cpu", "detach", "clone", "item", "tolist") or (dotted(obj.func) or "") in ("dict",) \
            and all(_plain_state(ctx, k.value) for k in obj.keywords)
    if isinstance(obj, ast.Dict):
        return all(v is not None and _plain_state(ctx, v) for v in obj.values)
    if isinstance(obj, (ast.List, ast.Tuple)):
        return all(_plain_state(ctx, e) for e in obj.elts)
    if isinstance(obj, (ast.Constant, ast.JoinedStr, ast.BinOp, ast.Compare, ast.UnaryOp)):
        return True
    name = dotted(obj)
    if name is None:
        return isinstance(obj, ast.Subscript)
    if is_model_expr(ctx, obj):
        return False
    b = ctx.semantic.binding_at(name, obj) if "." not in name else None
    if b is not None and b.value is not None and not b.is_param and b.index is None and b.value is not obj:
        return _plain_state(ctx, b.value)
    return bool(_PLAIN_NAMES.search(name.rsplit(".", 1)[-1]))


@rule("TD503", calls=("load",))
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
    if ctx.semantic.guards.in_compat_branch(node):
        return  # the fallback for a torch too old to know weights_only
    edit = None if keyword(node, "pickle_module") or len(node.args) >= 3 else \
        _insert_after_last_arg(ctx, node, "weights_only=True")
    # weights_only=True refuses pickled objects: safe only where the file shows a state dict is loaded
    # and nothing here (or in the project) saves whole models, Namespaces or other objects
    unsafe = _load_use(ctx, node) != "state" or _saves_objects(ctx)
    ctx.report(
        "TD503",
        node,
        f"`{_load_text(ctx, node)}` does not pass weights_only=True: unpickling the file can run arbitrary code",
        fix="pass `weights_only=True`" + (" (check first that the file holds only tensors and plain containers)"
                                          if unsafe else ""),
        edits=(edit,) if edit else (),
        unsafe=unsafe,
    )


# ---- TD504 ---------------------------------------------------------------------


_TENSOR_HOLDERS = frozenset({"Parameter", "UninitializedParameter", "Buffer", "ParameterList", "ParameterDict"})
# (``patch = nn.Parameter(torch.zeros(3, h, w))``: a tensor, which ``weights_only=True`` loads)


def _constructed_models(ctx: Context) -> set[str]:
    """Dotted names assigned a model constructor anywhere in the file (``model = Net()``)."""

    def compute() -> set[str]:
        sem = ctx.semantic
        out: set[str] = set()
        for node in sem.of_type(ast.Assign):
            value = strip_methods(node.value, PLACEMENT_METHODS)  # type: ignore[attr-defined]  # (``Enc().cuda()``)
            if isinstance(value, ast.Call):
                name = ctx.call_name(value) or ""
                if (sem.kinds.is_module_class(name, value.func) or _MODEL_FACTORY.match(name)) \
                        and name.rsplit(".", 1)[-1] not in _TENSOR_HOLDERS:
                    out.update(d for t in node.targets if (d := dotted(t)))  # type: ignore[attr-defined]
        return out

    return ctx.semantic.cached("constructed_models", compute)  # type: ignore[no-any-return]


def _restores_a_model(ctx: Context, name: str, b: object, load: ast.Call) -> bool:
    """``enc, dec = torch.load(path)`` (in a ``try``) after ``enc = Enc().cuda()`` in the same scope: the load puts the
    pickled models back under the names that held them (not with ``weights_only=True``, which loads no module)."""
    flag = keyword(load, "weights_only")
    if flag is not None and is_true(flag.value):
        return False
    sem = ctx.semantic
    for earlier in sem.bindings_of(name):
        value = strip_methods(earlier.value, PLACEMENT_METHODS) if earlier.value is not None else None
        if earlier.scope is b.scope and earlier.pos < b.pos and not earlier.is_param \
                and isinstance(value, ast.Call) and sem.kinds.is_module_class(ctx.call_name(value) or "", value.func):  # type: ignore[attr-defined]
            return True
    return False


def _trained_as_a_model(ctx: Context, name: str, bound: ast.AST) -> bool:
    """Some read of this binding of ``name`` hands ``name.parameters()`` to an optimizer, or calls ``name.train()``."""
    sem = ctx.semantic
    for r in sem.reads_of(name):
        b = sem.binding_at(name, r)
        if b is None or b.node is not bound:
            continue
        up = sem.parent(r)
        call = sem.parent(up) if isinstance(up, ast.Attribute) else None
        if isinstance(call, ast.Call) and call.func is up and up.attr in ("parameters", "named_parameters", "train"):  # type: ignore[union-attr]
            return True
    return False


def is_model_expr(ctx: Context, expr: ast.AST) -> bool:
    """``expr`` is (very likely) an nn.Module object rather than a state dict or tensor."""
    if isinstance(expr, ast.Call) and method_name(expr) in ("cpu", "cuda", "eval", "half", "float") and not expr.args \
            and isinstance(expr.func.value, (ast.Name, ast.Attribute)):  # type: ignore[attr-defined]
        expr = expr.func.value  # type: ignore[attr-defined]  # ``torch.save(self.bert.cpu(), path)``: the module itself
        # (``.cpu()``/``.eval()`` hand back the same module; of a tensor, the tensor: asked the same way below)
    name = dotted(expr)
    if name is None:
        if isinstance(expr, ast.Call):
            called = ctx.call_name(expr) or ""
            return called in ctx.semantic.module_classes or bool(_MODEL_FACTORY.match(called)) and called != "torch.nn.Parameter"
        return False
    if name == "self":
        return _object_holding_modules(ctx, expr)
    last = name.rsplit(".", 1)[-1]
    if _another_librarys_object(ctx, name):
        return False
    if last == "module" and isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) \
            and _OPTIONS.match(expr.value.id):
        return False  # ``"module": args.module``: a command-line option (a path to a file of layers), no wrapper's module
    b = ctx.semantic.binding_at(name, expr)
    value = b.value if b is not None and not b.is_param else None
    if isinstance(value, ast.Call) and (ctx.call_name(value) or "") == "torch.load":
        # ``net = torch.load(path)``: a checkpoint's dict, unless the program trains it as a model (``net.parameters()``
        # handed to an optimizer, ``net(x)``): a whole pickled model, saved back whole
        return _load_use(ctx, value) == "object" and _trained_as_a_model(ctx, name, b.node) \
            or _restores_a_model(ctx, name, b, value)  # type: ignore[union-attr]
    if isinstance(value, ast.Call) and method_name(value) == "state_dict":
        return False  # ``crt_net = model.state_dict()`` (keys edited)
    if isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Constant) \
            and "state_dict" in str(value.slice.value):
        return False  # ``released_model = ckpt["state_dict"]``: a checkpoint's state dict, named for the model
    if isinstance(expr, ast.Name) and _only_state_dicts(ctx, expr):
        return False  # ``best_model = copy.deepcopy(model.state_dict())`` in the loop, ``None`` before it
    if name in _constructed_models(ctx):
        return True
    if _NOT_MODEL.search(last):
        return False
    if _container_value(ctx, expr) is not None or _keyed_by_strings(ctx, expr):
        return False  # ``model_to_save = {"model": weights}``, ``new_model = dict()``: named like a model, a dict
    if isinstance(expr, ast.Name) and (_used_as_a_dict(ctx, expr.id, ctx.semantic.function_of(expr) or ctx.semantic.tree)
                                       or isinstance(value, ast.Call) and _returns_dicts(ctx, value)):
        return False  # ``avg_model = average(paths)``, whose ``avg_model`` is iterated with ``.items()``
    if ctx.semantic.expr_kind(expr, expr) in ("model", "wrapper"):
        return True
    if last == "module":  # model.module: the model inside a (D)DP wrapper
        return "." in name and is_model_expr(ctx, expr.value)  # type: ignore[attr-defined]
    if isinstance(expr, ast.Name) and _plain_value(ctx, expr):
        return False  # ``base_model: str``, ``model = "gpt2"``: a name or path, not a module
    return bool(_MODEL_NAME.match(last))


_OPTIONS = lazy(r"(?i)^(args|opts?|options|cfg|config|conf|hparams|hps|flags|FLAGS)$")
_OTHER_LIBRARIES = frozenset({"sklearn", "xgboost", "lightgbm", "catboost", "scipy", "statsmodels", "gensim", "numpy",
                              "pandas"})


def _another_librarys_object(ctx: Context, name: str) -> bool:
    """Some binding of ``name`` makes an object of a library that is not torch (``self.classifier =
    sklearn.svm.SVC()`` beside a torch encoder): a classifier named like a model, no module."""
    return any(isinstance(b.value, ast.Call) and (ctx.call_name(b.value) or "").split(".")[0] in _OTHER_LIBRARIES
               for b in ctx.semantic.bindings_of(name))


_DICT_ONLY = ("items", "keys", "values")


def _used_as_a_dict(ctx: Context, name: str, region: ast.AST) -> bool:
    """``name`` is bound in ``region`` to an ``OrderedDict()``/a dict display, has ``.items()``/``.keys()``/
    ``.values()`` called on it there, or is loaded into a model there (``model.load_state_dict(best_model)``, of
    ``best_model, metric = train(...)`` whose ``train`` in another module returns a deep copy of a state dict): a dict
    (a state dict), not a module, whatever it is called."""
    sem = ctx.semantic
    for n in sem.local_nodes(region):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _DICT_ONLY and not n.args \
                and isinstance(n.func.value, ast.Name) and n.func.value.id == name:
            return True
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "load_state_dict" \
                and n.args and isinstance(n.args[0], ast.Name) and n.args[0].id == name:
            return True
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(t := n.targets[0], ast.Name) and t.id == name \
                and _container_value(ctx, n.value) is not None and not isinstance(n.value, (ast.List, ast.Tuple)):
            return True
    return False


def _returns_dicts(ctx: Context, call: ast.Call) -> bool:
    """``call`` runs a function of this file whose every ``return`` hands back a name it uses as a dict
    (``new_model = collections.OrderedDict()`` ... ``return new_model``)."""
    funcs = ctx.semantic.resolve(call)
    if len(funcs) != 1 or not isinstance(func := funcs[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    returns = [n for n in ctx.semantic.local_nodes(func) if isinstance(n, ast.Return)]
    return bool(returns) and all(isinstance(r.value, ast.Name) and _used_as_a_dict(ctx, r.value.id, func) for r in returns)


def _only_state_dicts(ctx: Context, expr: ast.Name) -> bool:
    """Every binding of ``expr``'s name in its scope is ``None`` or a state dict (``m.state_dict()``, a
    ``copy.deepcopy`` of one), one at least: what it holds when saved is a dict of tensors, whatever it is called."""
    sem = ctx.semantic
    scope = sem.scope_of(expr)
    values = [b.value for b in sem.bindings_of(expr.id) if b.scope is scope]
    if not values or any(v is None for v in values):
        return False
    found = False
    for v in values:
        if isinstance(v, ast.Constant) and v.value is None:
            continue
        if isinstance(v, ast.Call) and (ctx.call_name(v) or "") in ("copy.deepcopy", "deepcopy", "copy.copy") and v.args:
            v = v.args[0]
        if not (isinstance(v, ast.Call) and method_name(v) == "state_dict"):
            return False
        found = True
    return found


def _object_holding_modules(ctx: Context, expr: ast.AST) -> bool:
    """``torch.save(self, path)`` in a module class, or in a plain wrapper class that keeps modules in its attributes
    (``self.gen = nn.Sequential(...)``): the object is pickled with the modules in it."""
    sem = ctx.semantic
    cls = sem.class_of(expr)
    if cls is None:
        return False
    if cls.name in sem.module_classes:  # type: ignore[attr-defined]
        return True
    return any(isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and any(
        isinstance(t, ast.Attribute) and dotted(t.value) == "self" for t in n.targets)
        and sem.call_kind(n.value, n) == "model" for n in sem.subtree(cls))


def _keyed_by_strings(ctx: Context, expr: ast.AST) -> bool:
    """``model = package["model"]; model["state"] = best_state``: the same binding gets an entry stored under a
    string key, which a module never does: a dict (a serialised package), whatever it is called."""
    if not isinstance(expr, ast.Name):
        return False
    sem = ctx.semantic
    b = sem.binding_at(expr.id, expr)
    if b is None:
        return False
    return any(isinstance(n, ast.Assign) and any(
        isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == expr.id
        and isinstance(t.slice, ast.Constant) and isinstance(t.slice.value, str) for t in n.targets)
        and sem.binding_at(expr.id, n) is b for n in sem.of_type(ast.Assign))


_PLAIN_TYPES = ("str", "int", "float", "bool", "dict", "list", "Path", "PathLike")


def _plain_value(ctx: Context, name: ast.Name) -> bool:
    b = ctx.semantic.binding_at(name.id, name)
    if b is None or b.value is None:
        return False
    if b.is_param:  # (a parameter's value is its annotation)
        return (dotted(b.value) or "").rsplit(".", 1)[-1] in _PLAIN_TYPES
    return isinstance(b.value, (ast.Constant, ast.JoinedStr))


def _container_value(ctx: Context, expr: ast.AST) -> ast.AST | None:
    """The dict/list literal (or ``dict(...)``/``OrderedDict(...)``) a name is bound to, if it is."""
    if not isinstance(expr, ast.Name):
        if isinstance(expr, ast.Call) and (dotted(expr.func) or "").rsplit(".", 1)[-1] in ("dict", "OrderedDict"):
            return expr  # ``torch.save(dict(net=net, optimizer_state=...), path)``
        return expr if isinstance(expr, (ast.Dict, ast.List, ast.Tuple)) else None
    b = ctx.semantic.binding_at(expr.id, expr)
    value = b.value if b is not None and not b.is_param and b.index is None else None
    if isinstance(value, (ast.Dict, ast.List, ast.Tuple, ast.DictComp)):
        return value
    if isinstance(value, ast.Call) and (dotted(value.func) or "").rsplit(".", 1)[-1] in ("dict", "OrderedDict"):
        return value
    return None


def _model_inside(ctx: Context, obj: ast.AST) -> ast.AST | None:
    """A whole model stored as a value of a dict that is saved (``{"encoder": encoder, ...}``), or as an
    element of a saved list or tuple (``[policy, obs_stats]``)."""
    container = _container_value(ctx, obj)
    if container is None and isinstance(obj, ast.Name):
        return _module_under_key(ctx, obj)
    if isinstance(container, ast.Dict):
        values = container.values
    elif isinstance(container, (ast.List, ast.Tuple)):
        values = [e for e in container.elts if not isinstance(e, ast.Starred)]
    elif isinstance(container, ast.Call):
        values = [k.value for k in container.keywords]
    else:
        return None
    return next((m for m in (_whole_model_value(ctx, v) for v in values if v is not None) if m is not None), None)


_MODULE_ONLY = frozenset({"parameters", "named_parameters", "modules", "named_modules", "children", "named_children",
                          "buffers", "named_buffers"})


def _module_under_key(ctx: Context, obj: ast.Name) -> ast.AST | None:
    """``x = torch_load(f)`` ... ``for p in x["model"].parameters():`` ... ``torch.save(x, f)``: a loaded checkpoint
    whose ``x["model"]`` the function uses as an nn.Module (methods only a module has) is saved with it inside."""
    sem = ctx.semantic
    func = sem.function_of(obj)
    for n in sem.local_nodes(func) if func is not None else ():
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _MODULE_ONLY:
            recv = n.func.value
            if isinstance(recv, ast.Subscript) and isinstance(recv.value, ast.Name) and recv.value.id == obj.id \
                    and isinstance(recv.slice, ast.Constant) and isinstance(recv.slice.value, str):
                return recv
    return None


_COPIES = ("deepcopy", "copy", "half", "float", "double", "bfloat16", "cpu", "to", "eval", "module")


def _whole_model_value(ctx: Context, value: ast.AST) -> ast.AST | None:
    """The model in a value that is a model or a copy of one (``model`` in ``deepcopy(de_parallel(model)).half()``),
    None for anything else (its ``state_dict()``)."""
    node, copied = value, False
    for _ in range(6):
        if isinstance(node, ast.IfExp):  # ``deepcopy(model.module if is_parallel(model) else model)``: either is one
            node = node.orelse
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name == "state_dict":
                return None
            copied = copied or name == "deepcopy"
            if isinstance(node.func, ast.Attribute) and name in _COPIES:
                node = node.func.value
            elif node.args and (name in _COPIES or name in ("de_parallel", "unwrap_model", "unwrap")):
                node = node.args[0]
            else:
                return None
        else:
            # ``deepcopy(ema.ema).half()``: the averaged copy an EMA helper keeps is a whole model
            ema = copied and isinstance(node, ast.Attribute) and node.attr in _EMA_MODELS
            return node if is_model_expr(ctx, node) or ema else None
    return None


_EMA_MODELS = ("ema", "ema_model", "model_ema", "averaged_model")


_PICKLERS = frozenset({"torch.save", "joblib.dump", "pickle.dump", "dill.dump", "cloudpickle.dump"})


@rule("TD504", calls=("save", "dump"))
def whole_model_saved(node: ast.Call, ctx: Context) -> None:
    """`torch.save(model, ...)`: the whole model pickled instead of its `state_dict()`.

    What it does: finds `torch.save` calls (and `joblib.dump`/`pickle.dump` to a file) whose object is a model.
    Why is this bad? The pickle stores the class by import path: loading needs the
    same code at the same place, breaks on refactors, and needs `weights_only=False`.
    Use instead: `torch.save(model.state_dict(), path)`.
    """
    saver = ctx.call_name(node) or ""
    if saver not in _PICKLERS and not saver.endswith(".joblib.dump"):  # (``from sklearn.externals import joblib``)
        return
    obj = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg in ("obj", "value")), None)
    if obj is None:
        return
    inner = None if is_model_expr(ctx, obj) else _model_inside(ctx, obj)
    if inner is None and not is_model_expr(ctx, obj):
        return
    text = ctx.name(obj)
    brackets = {ast.List: "[]", ast.Tuple: "()", ast.Dict: "{}"}.get(type(obj))
    if brackets and text != ctx.segment(obj).strip():  # a long literal: ``[...]``, not its cut-off head
        text = f"{brackets[0]}...{brackets[1]}"
    what = f"the whole model `{ctx.name(inner)}` inside `{text}`" if inner is not None else "the whole model"
    plain = obj
    while isinstance(plain, ast.Call) and method_name(plain) in ("float", "half", "double", "cpu", "eval") \
            and isinstance(plain.func, ast.Attribute):
        plain = plain.func.value  # (``joblib.dump(model.float(), path)``: the model's own state_dict)
    model = ctx.name(inner) if inner is not None else ctx.name(plain)
    loading = "an unsafe `weights_only=False`" if saver == "torch.save" else "unpickling, which runs code"
    ctx.report(
        "TD504",
        node,
        f"`{dotted(node.func) or saver}({text}, ...)` pickles {what}: loading needs the same class at the same "
        f"import path and {loading}",
        fix=f"save `{model}.state_dict()` and load it with `model.load_state_dict(...)`",
    )
