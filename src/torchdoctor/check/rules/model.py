"""Stage 2 rules: the model's parameters and buffers must live where the data is (TD201). Its wrappers are in
``wrappers.py``."""

from __future__ import annotations

import ast
import re

from torchdoctor.check.astutil import call_argument, dotted, keyword, method_name
from torchdoctor.check.context import Context
from torchdoctor.check.registry import rule
from torchdoctor.check.rules.pipeline import dataset_on_device, is_torch_dataloader
from torchdoctor.check.rules.host_values import loader_batch_on_host
from torchdoctor.check.semantic import cuda_sites, flow, program
from torchdoctor.check.semantic.models import STATELESS_LAYERS, class_holds_nothing, class_moves_itself, class_parts, \
    first_input_device, last_name, model_is_stateless, moved_keys
from torchdoctor.check.semantic.placement import never_moved

_NOT_MOVING_CALLS = ("torch.", "print", "len", "isinstance", "type", "id", "str", "repr", "sum", "getattr", "hasattr")


# ---- TD201 --------------------------------------------------------------------------------
@rule("TD201", ast.Module)
def model_never_moved(node: ast.AST, ctx: Context) -> None:
    """Model never moved to the device that its inputs are moved to."""
    sem = ctx.semantic
    input_device = first_input_device(sem)
    if input_device is None or program.is_rpc_program(sem):
        return  # (RPC: a trainer's model may be a proxy of a remote one)
    moved = moved_keys(sem)
    for stmt in sem.of_type(ast.Assign):
        if len(stmt.targets) != 1 or not isinstance(stmt.value, ast.Call):  # type: ignore[attr-defined]
            continue
        key = dotted(stmt.targets[0])  # type: ignore[attr-defined]
        call = stmt.value  # type: ignore[attr-defined]
        if key is None or last_name(key) in moved or not _used_as_model(ctx, key):
            continue  # (cheap questions first: whether a call makes a model may read other modules)
        if not _constructs_model(ctx, call, stmt) or sem.value_is_moved(call):
            continue
        if _submodule(ctx, stmt, key):
            continue  # a submodule moves with its parent
        if keyword(call, "device") or keyword(call, "device_map") or any(k.arg is None for k in call.keywords) \
                or _built_under_a_device(ctx, stmt):
            continue
        if _escapes(ctx, key) or _rebound_moved(ctx, key, stmt) or _parts_moved(ctx, key, stmt) \
                or _moved_by_a_base_class(ctx, key, stmt) or _parent_moved_after(ctx, key, stmt) \
                or _moved_by_the_class_callers(ctx, key, stmt):
            continue
        if _returned(ctx, key, stmt):
            continue  # a builder function: its caller decides where the model goes
        if _wraps_or_is_wrapped(ctx, key, call):
            continue  # one module inside another: it moves with the outer one
        if _inputs_stay_on_host(ctx, key, stmt) or _scalar_holder(ctx, call):
            continue
        near = _input_device_near(ctx, key, stmt)
        if near is None:
            continue  # the file moves data somewhere, but not where this model runs
        device, move = near
        name = ctx.name(call.func)
        ctx.report("TD201", call,
                   f"model `{key}` ({name}) is never moved to a device, but its inputs are moved to `{device}`",
                   fix=f"move it once after construction: `{key} = {_same_move(ctx, move, key)}`")


def _moved_by_a_base_class(ctx: Context, key: str, stmt: ast.AST) -> bool:
    """``self.model = CatNet()`` in a hook (``declare_networks``) of a subclass whose base class, of another module of
    the project, moves ``self.model`` after calling the hook (``self.model = self.model.to(self.device)``)."""
    sem = ctx.semantic
    cls = sem.class_of(stmt)
    if not key.startswith("self.") or key.count(".") != 1 or cls is None or sem.project is None:
        return False
    imported = {**sem.names.from_imports, **sem.names.imports}
    return any((written := dotted(b)) and written.split(".")[0] in imported
               and sem.project.base_moves_attribute(sem, written, key[5:]) for b in cls.bases)  # type: ignore[attr-defined]


def _moved_by_the_class_callers(ctx: Context, key: str, stmt: ast.AST) -> bool:
    """``self.model = model_class.from_pretrained(...)`` in a wrapper's ``__init__``, and the modules that make the
    wrapper move that attribute themselves (``wrapper.model.to(device)`` before training, PET's ``modeling.py``)."""
    sem = ctx.semantic
    cls = sem.class_of(stmt)
    func = sem.function_of(stmt)
    if not key.startswith("self.") or key.count(".") != 1 or cls is None or func is None or func.name != "__init__" \
            or sem.project is None:  # type: ignore[attr-defined]
        return False
    pattern = re.compile(rf"\.{re.escape(key[5:])}\s*(=\s*\w[\w.]*\.{re.escape(key[5:])}\s*)?\.(to|cuda)\(")
    return sem.project.callers_mention(sem, cls, pattern)  # type: ignore[attr-defined]


def _scalar_holder(ctx: Context, call: ast.Call) -> bool:
    """``Scalar(1.0)`` of a module class of this file whose ``__init__`` keeps one 0-dim parameter
    (``self.constant = nn.Parameter(torch.tensor(init_value))``) and whose ``forward`` takes no input: its output, a
    0-dim CPU tensor, combines with CUDA tensors (CQL's temperature), so nothing fails on the host."""
    sem = ctx.semantic
    cls = sem.calls_index.classes.get(ctx.call_name(call) or "")
    if cls is None or ctx.call_name(call) not in sem.module_classes:
        return False
    methods = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}  # type: ignore[attr-defined]
    init, forward = methods.get("__init__"), methods.get("forward")
    if init is None or forward is None or len(forward.args.args) != 1 or forward.args.vararg:
        return False  # (a forward given inputs computes with them: where they are matters)
    held = [n for n in sem.local_nodes(init) if isinstance(n, ast.Assign)
            and any((dotted(t) or "").startswith("self.") for t in n.targets)]
    return bool(held) and all(isinstance(n.value, ast.Call) and (ctx.call_name(n.value) or "").endswith("nn.Parameter")
                              and n.value.args and _zero_dim_value(ctx, n.value.args[0]) for n in held)


def _zero_dim_value(ctx: Context, value: ast.AST) -> bool:
    """``torch.tensor(init_value)`` of a number (or a name), ``torch.zeros(())``: a 0-dim tensor."""
    if not isinstance(value, ast.Call):
        return False
    q = ctx.call_name(value) or ""
    if q == "torch.tensor" and value.args:
        return isinstance(value.args[0], (ast.Constant, ast.Name, ast.UnaryOp))
    return q in ("torch.zeros", "torch.ones") and len(value.args) == 1 and isinstance(value.args[0], ast.Tuple) \
        and not value.args[0].elts


def _same_move(ctx: Context, move: ast.Call, key: str) -> str:
    """The move of the data, as code for the model: ``model.cuda()``, ``model.to(device)``, ``utils.cuda(model)``
    (a project's helper named ``cuda``, not the tensor method)."""
    if isinstance(move.func, ast.Attribute) and move.func.attr in ("cuda", "to"):
        if cuda_sites.on_module(ctx.semantic, move.func.value):
            return f"{ctx.semantic.segment(move.func)}({key})"
        args = ", ".join(ctx.semantic.segment(a) for a in [*move.args, *move.keywords][:1] if ctx.semantic.segment(a))
        return f"{key}.{move.func.attr}({args})"
    return f"{key}.to({ctx.semantic.move_device(move)})"


def _parent_moved_after(ctx: Context, key: str, stmt: ast.AST) -> bool:
    """``model.fc = nn.Linear(n, 10)`` then ``model.to(device)`` in the same scope: the new head is a part of the model
    that moves after it is set (set after the move, it stays behind)."""
    sem = ctx.semantic
    root, _, rest = key.partition(".")
    if not rest or root == "self":
        return False
    scope = sem.scope_of(stmt)
    return any(sem.is_device_move(c) and isinstance(c.func, ast.Attribute) and dotted(c.func.value) == root
               and sem.scope_of(c) is scope and (c.lineno, c.col_offset) > (stmt.end_lineno or stmt.lineno, 0)  # type: ignore[attr-defined]
               for c in sem.calls_named("to", "cuda"))


def _rebound_moved(ctx: Context, key: str, stmt: ast.AST) -> bool:
    """A later ``key = Wrapper(key).eval().to(device)``: the model is moved inside the expression that rebinds it."""
    sem = ctx.semantic
    for other in sem.of_type(ast.Assign):
        if other is stmt or len(other.targets) != 1 or dotted(other.targets[0]) != key:  # type: ignore[attr-defined]
            continue
        if sem.value_is_moved(other.value) and any(  # type: ignore[attr-defined]
                dotted(n) == key for n in sem.subtree(other.value) if isinstance(n, (ast.Name, ast.Attribute))):  # type: ignore[attr-defined]
            return True
        if sem.value_is_moved(other.value) and _class_takes_global(ctx, other.value, key):  # type: ignore[attr-defined]
            return True
    return False


def _class_takes_global(ctx: Context, value: ast.AST, key: str) -> bool:
    """``backbone = Trunk().cuda()`` where ``Trunk.__init__`` builds itself from ``list(backbone.children())``, the
    global model it replaces: the parts it takes move with it."""
    sem = ctx.semantic
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        value = value.func.value
    cls = sem.calls_index.classes.get(sem.call_name(value) or "") if isinstance(value, ast.Call) else None
    init = next((f for f in getattr(cls, "body", ()) if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
    return init is not None and "." not in key and any(
        isinstance(n, ast.Name) and n.id == key and isinstance(n.ctx, ast.Load) for n in sem.subtree(init))


def _parts_moved(ctx: Context, key: str, stmt: ast.AST) -> bool:
    """``loss.vgg = self.model_to_device(loss.vgg)``, ``loss.head = loss.head.to(device)`` in the same function:
    the model is moved part by part (``model_to_device``: a project's helper, by its name)."""
    sem = ctx.semantic
    scope = sem.scope_of(stmt)
    for other in sem.of_type(ast.Assign):
        target = dotted(other.targets[0]) if len(other.targets) == 1 else None  # type: ignore[attr-defined]
        if not target or not target.startswith(key + ".") or sem.scope_of(other) is not scope:
            continue
        value = other.value  # type: ignore[attr-defined]
        if sem.value_is_moved(value) or isinstance(value, ast.Call) and "device" in (dotted(value.func) or "").lower() \
                and any(dotted(a) == target for a in value.args):
            return True
        if target.count(".") == key.count(".") + 1 and isinstance(value, ast.Attribute) \
                and sem.expr_kind(value.value, other) in ("model", "wrapper", None) \
                and (source := dotted(value)) and not source.startswith(key + "."):
            return True  # ``wrap.net = predictor.net``: the part is another model's, placed where that one is
    return False


def _wraps_or_is_wrapped(ctx: Context, key: str, call: ast.Call) -> bool:
    """``tokenizer = EntropyTokenizer(model)`` wraps a model (that is moved); ``ssl = SelfMaskedRepr(student)``
    takes this model in (and is moved or prepared itself): either way it is not a model on its own."""
    sem = ctx.semantic
    if any(sem.expr_kind(a, call) in ("model", "wrapper") for a in [*call.args, *(k.value for k in call.keywords)]):
        return True
    if any(isinstance(n, ast.Call) and method_name(n) in ("children", "modules") and isinstance(n.func, ast.Attribute)
           and sem.expr_kind(n.func.value, call) in ("model", "wrapper") for a in call.args for n in sem.subtree(a)):
        return True  # ``nn.Sequential(*list(resnet.children())[:-1])``: the parts of a model, where that model is
    for other in sem.calls:  # (DataParallel/DDP/compile are wrappers of another kind: they move nothing)
        if other is call or sem.call_kind(other, other) != "model":
            continue
        if any(dotted(a) == key for a in [*other.args, *(k.value for k in other.keywords)]):
            return True
    return False


def _input_device_near(ctx: Context, key: str, stmt: ast.AST) -> tuple[str, ast.Call] | None:
    """The device data is moved to where this model runs: the scope that builds it (the class, for
    ``self.model``), functions it is handed to, and functions that read it as a global."""
    sem = ctx.semantic
    # (``self.model = ...`` in a plain function, ``def build(self, n)`` at module level: no class, its own scope)
    scope = (sem.class_of(stmt) if key.startswith("self.") else None) or sem.scope_of(stmt)
    regions = [scope]
    for call in sem.calls:
        if any(dotted(a) == key for a in [*call.args, *(k.value for k in call.keywords)]):
            for f in sem.resolve(call):
                regions += [g for g in sem.reachable(f) if g not in regions]
    if scope is ctx.tree:
        regions += [f for f in dict.fromkeys(sem.function_of(r) for r in sem.reads_of(key))  # (in source order: the
                    if f is not None and f not in regions]  # device the message names must not depend on hashing)
    for region in regions:
        nodes = sem.subtree(region) if isinstance(region, ast.ClassDef) else \
            sem.local_nodes(region) if not isinstance(region, ast.Module) else sem.body(region)
        for node in nodes:
            if isinstance(node, ast.Call) and sem.is_device_move(node):
                device = _input_move_device(ctx, node)
                if device is not None:
                    return device, node
    return None


def _input_move_device(ctx: Context, node: ast.Call) -> str | None:
    """The target of a move of data (not of a model or a loss, not to the CPU)."""
    sem = ctx.semantic
    dev = sem.move_device(node) or ""
    recv = node.func.value if isinstance(node.func, ast.Attribute) else (node.args[0] if node.args else None)
    kind = sem.expr_kind(recv, node) if recv is not None else None
    if kind in ("model", "wrapper", "loss_fn") or dev.strip("'\"") == "cpu" or program.moves_to_cpu_name(sem, node):
        return None
    if isinstance(recv, ast.Call) and sem.call_kind(recv, recv) in ("model", "wrapper"):
        return None
    return dev




def _constructs_model(ctx: Context, call: ast.Call, at: ast.AST) -> bool:
    """A model constructor (not ``maml.clone()``, a model method that returns a model where its receiver
    is), or an in-file builder that returns a model it did not move itself."""
    sem = ctx.semantic
    if sem.call_kind(call, at) != "model":
        return False
    q = ctx.call_name(call) or ""
    if q.startswith("torch.nn.") and q.rsplit(".", 1)[-1] in STATELESS_LAYERS:
        return False  # ``nn.Upsample(...)``, ``nn.ReLU()``: no parameters or buffers, nothing to move
    if q in ("torch.nn.Sequential", "torch.nn.ModuleList") and _of_stateless_parts(ctx, call):
        return False
    if sem.kinds.is_model_constructor(call, q, q.rsplit(".", 1)[-1]):
        cls = sem.calls_index.classes.get(q)
        if cls is None:  # a class of another module of the project, or of a library
            written = dotted(call.func)
            return not (sem.project is not None and written and (sem.project.class_stateless(sem, written)  # type: ignore[attr-defined]
                                                                 or sem.project.class_moves_itself(sem, written)  # type: ignore[attr-defined]
                                                                 or _weights_not_on_the_host(ctx, call, written)))
        return not (_moves_itself(ctx, cls) or class_holds_nothing(sem, cls))
    builders = sem.resolve(call)
    return bool(builders) and not any(_returns_moved(ctx, f) for f in builders)


def _weights_not_on_the_host(ctx: Context, call: ast.Call, written: str) -> bool:
    """``criterion = CrossEntropyLoss2d(weight)`` of a loss class of another module that holds nothing but the class
    weights it is given (``self.loss = nn.NLLLoss(weight)``), after ``weight = weight.cuda()``: nothing of it is left on
    the host (weights made on the host and given unmoved still are)."""
    from torchdoctor.check.rules.loop import _cpu_tensor

    weighted = ctx.semantic.project.class_loss_weights(ctx.semantic, written)  # type: ignore[union-attr]
    if weighted is None:
        return False
    names, params = weighted
    given = [k.value for k in call.keywords if k.arg in names]
    given += [a for a, p in zip(call.args, params) if p in names]
    return not any(isinstance(a, ast.Starred) for a in call.args) and not any(k.arg is None for k in call.keywords) \
        and not any(_cpu_tensor(ctx, v, call) for v in given)


def _of_stateless_parts(ctx: Context, call: ast.Call) -> bool:
    """``nn.Sequential(*augment)`` of a list filled with ``augment.append(Flip())``, ``augment.append(Shift(4))``
    (or listed in the call) whose every module holds nothing to move (here, or in another module of the project)."""
    sem = ctx.semantic
    made: list[ast.AST] = []
    for arg in call.args:
        if isinstance(arg, ast.Starred) and isinstance(arg.value, ast.Name):
            b = sem.binding_at(arg.value.id, call)
            if b is None or not isinstance(b.value, ast.List) or b.index is not None:
                return False
            made += b.value.elts
            for n in sem.calls_named("append"):
                if dotted(n.func.value) == arg.value.id and sem.scope_of(n) is sem.scope_of(call) and n.args:  # type: ignore[attr-defined]
                    made.append(n.args[0])
        else:
            made.append(arg)
    return bool(made) and all(isinstance(m, ast.Call) and model_is_stateless(sem, m, call) for m in made)


def _moves_itself(ctx: Context, cls: ast.AST, depth: int = 0) -> bool:
    """The class's ``__init__`` moves itself or its parts (``self.fc.cuda(device)``, ``self.to(device)``), or
    every submodule it builds is of a class that does (here or in another module of the project)."""
    sem = ctx.semantic
    if class_moves_itself(sem, cls):
        return True
    parts = class_parts(sem, cls)
    if not parts or depth > 3:
        return False
    for part in parts:
        inner = sem.calls_index.classes.get(part)
        if inner is not None:
            if inner.name in sem.module_classes and not _moves_itself(ctx, inner, depth + 1):
                return False
        elif sem.project is None or not sem.project.class_moves_itself(sem, part):  # type: ignore[attr-defined]
            return False
    return True


def _of_a_class_that_moves_itself(ctx: Context, call: ast.Call) -> bool:
    """``Net(device=args.device)``: a model class (of this file or of another module of the project) whose
    ``__init__`` moves it."""
    sem = ctx.semantic
    q = ctx.call_name(call) or ""
    cls = sem.calls_index.classes.get(q)
    if cls is not None:
        return q in sem.module_classes and _moves_itself(ctx, cls)
    written = dotted(call.func)
    return bool(sem.project is not None and written and written.rsplit(".", 1)[-1][:1].isupper()
                and sem.project.class_moves_itself(sem, written))  # type: ignore[attr-defined]


def _returns_moved(ctx: Context, func: ast.AST) -> bool:
    """A builder that moves what it returns (``return Net().to(args.device)``, or a moved name), or hands it to a
    trainer's ``fit`` first (a Lightning ``Trainer`` puts it on its accelerator)."""
    sem = ctx.semantic
    for ret in sem.kinds.returns_of(func):
        value = ret.value
        if value is not None and (sem.value_is_moved(value) or isinstance(value, ast.Name) and sem.is_moved(value.id, ret)):
            return True
        if isinstance(value, ast.Name) and any(  # ``if torch.cuda.is_available(): net.cuda()`` before ``return net``
                isinstance(n, ast.Expr) and isinstance(c := n.value, ast.Call) and method_name(c) in ("cuda", "to")
                and isinstance(c.func, ast.Attribute) and dotted(c.func.value) == value.id and sem.move_device(c)
                and n.lineno < ret.lineno for n in sem.local_nodes(func)):
            return True
        made = value
        if isinstance(made, ast.Name) and (b := sem.binding_at(made.id, ret)) is not None and not b.is_param \
                and b.index is None:
            made = b.value
        if isinstance(made, ast.Call) and _of_a_class_that_moves_itself(ctx, made):
            return True  # ``return Net(device=args.device)`` whose ``__init__`` ends with ``self.to(device)``
        if isinstance(value, ast.Name) and (b := sem.binding_at(value.id, ret)) is not None and not b.is_param \
                and isinstance(b.value, ast.Call) and sem.project is not None \
                and getattr(sem.project.function_for(sem, b.value), "returns", None) == "cuda_model":  # type: ignore[attr-defined]
            return True  # ``net = net_factory(...)`` of another module whose every return is ``Net(...).cuda()``
        if isinstance(value, ast.Name) and any(  # ``trainer.fit(model, loader)`` first: Lightning moves it
                isinstance(c, ast.Call) and method_name(c) == "fit" and any(dotted(a) == value.id for a in c.args)
                for c in sem.local_nodes(func)):
            return True
    return False


def _submodule(ctx: Context, stmt: ast.AST, key: str) -> bool:
    """Assigned inside an nn.Module (a class of this file or the project that is a module, or any class
    with a ``forward``): a submodule, which moves with its parent."""
    sem = ctx.semantic
    cls = sem.class_of(stmt)
    if cls is None:
        return False
    if cls.name in sem.module_classes:
        return True
    if any(isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == "forward" for f in cls.body):
        return True
    return sem.project is not None and any(  # a base of another module that is one, maybe a few imports away
        (written := dotted(b)) and sem.project.inherits_module(sem, written) for b in cls.bases)  # type: ignore[attr-defined]


def _returned(ctx: Context, key: str, stmt: ast.Assign) -> bool:
    """The model is handed back by the function that builds it (``return model``)."""
    sem = ctx.semantic
    body = sem.scope_of(stmt)
    if not isinstance(body, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    for n in sem.local_nodes(body):
        if isinstance(n, (ast.Return, ast.Yield)) and n.value is not None:
            if any(dotted(v) == key for v in sem.subtree(n.value) if isinstance(v, (ast.Name, ast.Attribute))):
                return True
    return False


def _built_under_a_device(ctx: Context, stmt: ast.AST) -> bool:
    """``with device: model = AutoModelForCausalLM.from_config(config)``: a ``torch.device`` used as a context manager
    (PyTorch 2) makes every parameter built inside on that device."""
    sem = ctx.semantic
    for up in sem.ancestors(stmt):
        if isinstance(up, (ast.With, ast.AsyncWith)) and any(
                isinstance(e := item.context_expr, ast.Call) and (sem.call_name(e) or "") == "torch.device"
                or isinstance(e, (ast.Name, ast.Attribute)) and sem.expr_kind(e, up) == "device" for item in up.items):
            return True
    return False


def _inputs_stay_on_host(ctx: Context, key: str, stmt: ast.Assign) -> bool:
    """Every call of this very binding (``model(x)`` in its scope) takes inputs known to be on the host:
    a model re-created for CPU inference (``x = test_data[0][0]``) next to a training part that moved data."""
    sem = ctx.semantic
    binding = next((b for b in sem.bindings_of(key) if b.node is stmt), None)
    if binding is None:
        return False
    body = sem.scope_of(stmt)
    runs = {key, f"{key}.generate", f"{key}.forward"}  # (``model.generate(input_ids, ...)``: its forwards, on those ids)
    calls = [n for n in sem.body(body) if isinstance(n, ast.Call) and dotted(n.func) in runs
             and getattr(n, "lineno", 0) > stmt.lineno and sem.binding_at(key, n) is binding]
    if "." not in key:  # (and in functions nested here: a collate function, a script's lookup helper)
        calls += [c for r in sem.reads_of(key) if isinstance(c := sem.parent(r), ast.Call) and c.func is r
                  and c not in calls and sem.contains(body, c) and sem.binding_at(key, r) is binding]
    if not calls:  # built to show its ``state_dict()`` (or its parameters), and never run: nothing meets a device
        reads = [r for r in sem.reads_of(key) if sem.binding_at(key, r) is binding]
        # (none at all: rebound before any use, ``model = AutoModel...`` then ``model = AutoModelForCausalLM...``)
        return not reads or all(isinstance(p := sem.parent(r), ast.Attribute) and p.attr in (
            "state_dict", "parameters", "named_parameters", "weight", "bias", "load_state_dict", "modules",
            "children", "named_modules", "eval", "train") or isinstance(p, ast.Expr)
            or isinstance(p, ast.Call) and dotted(p.func) == "print" for r in reads)
    if all(_output_moved(ctx, c) for c in calls):
        return True  # ``input_ent = embed(input_ent + 1)`` then ``input_ent = input_ent.to(device)``: a table kept
        # on the host on purpose, whose lookups go to the device
    args = [(a, c) for c in calls for a in [*c.args, *(k.value for k in c.keywords)]]
    return not any(_may_be_on_device(ctx, a, c, 0) for a, c in args)


def _output_moved(ctx: Context, call: ast.Call) -> bool:
    """The call's result is moved to a device: at once (``table(ids).to(dev)``), or through the name it is bound to,
    before any other use (``x = table(ids)``, ..., ``x = x.to(dev)``)."""
    sem = ctx.semantic
    up = sem.parent(call)
    if isinstance(up, ast.Attribute) and up.attr in ("to", "cuda") and isinstance(sem.parent(up), ast.Call) \
            and sem.is_device_move(sem.parent(up)):
        return True
    if not (isinstance(up, ast.Assign) and len(up.targets) == 1 and isinstance(up.targets[0], ast.Name)):
        return False
    name = up.targets[0].id
    mine = [r for r in sem.reads_of(name) if (r.lineno, r.col_offset) > (up.lineno, up.col_offset)
            and (b := sem.binding_at(name, r)) is not None and b.node is up]
    first = min(mine, key=lambda r: (r.lineno, r.col_offset)) if mine else None
    return first is not None and isinstance(p := sem.parent(first), ast.Attribute) and p.attr in ("to", "cuda") \
        and isinstance(sem.parent(p), ast.Call) and sem.is_device_move(sem.parent(p))


def may_be_on_device(ctx: Context, expr: ast.AST, at: ast.AST) -> bool:
    """``expr`` may hold a device tensor (it is not known to be made on the host)."""
    return _may_be_on_device(ctx, expr, at, 0)


def _may_be_on_device(ctx: Context, expr: ast.AST, at: ast.AST, depth: int) -> bool:
    """``expr`` may hold a device tensor: moved, created with ``device=``, or of unknown origin."""
    sem = ctx.semantic
    batch = expr.value if isinstance(expr, ast.Subscript) else expr
    if isinstance(batch, ast.Call) and _host_batch(ctx, batch):
        return False  # ``model(next(iter(loader))[0])``: a batch as the loader makes it
    nodes = sem.subtree(expr)
    plain = {id(a) for n in nodes if isinstance(n, ast.Call) and _host_maker(ctx, n) for a in sem.subtree(n) if a is not n}
    if plain:  # ``combinations_with_replacement(range(0, n + 1), k)``: numbers and lists, whatever they are made of
        nodes = [n for n in nodes if id(n) not in plain]
    for n in nodes:
        if isinstance(n, ast.Call) and (sem.is_device_move(n) or keyword(n, "device") is not None):
            return True
    called = {id(n.func) for n in nodes if isinstance(n, ast.Call)}
    names = [n for n in nodes if isinstance(n, ast.Name) and n.id not in ctx.imports]
    for name in names:
        b = sem.binding_at(name.id, at) or sem.binding_at(name.id, name)  # (a comprehension's own target)
        if b is None and id(name) in called and _makes_host_data(ctx, name.id):
            continue  # ``create_noise(n, z)``: an in-file function that puts nothing on a device
        if b is None and id(name) in called and name.id in sem.calls_index.classes:
            continue  # ``Encoder()``: an object of a class of the file, made here (its arguments are looked at)
        if depth > 7:
            return True
        if b is not None and b.index is not None and isinstance(b.value, ast.Call) and (_host_batch(ctx, b.value) or (
                _host_model_call(ctx, b.value) or flow.consumer_kind(sem, b.value) is None)
                and not _may_be_on_device(ctx, b.value, b.node, depth + 1)):
            continue  # ``x, y = next(iter(loader))``; ``points, directions = generate_sequences(n=128, seed=13)``
        if b is not None and b.index is not None and _item_of_a_library_dataset(ctx, b.value, b.node):
            continue  # ``image, label = cifar10_eval_data[777]``: an item of a torchvision dataset, on the host
        if b is not None and b.value is None and not b.is_param and (_iterates_host_values(ctx, b, depth)
                                                                      or loader_batch_on_host(ctx, name, at)):
            continue  # ``for i in range(n)``; ``[torch.as_tensor(seq) for seq in all_seqs]``; a loader's batch as
            # it comes, never moved in the loop
        if b is not None and b.is_param and _given_host_values(ctx, b, name.id, depth):
            continue  # ``words_to_vec([[1, 2, 3], [4, 5]])``: every call of the function passes lists of numbers
        if b is None or b.value is None or b.index is not None:
            return True  # a parameter, a loop target, an unpacked value: unknown
        if _may_be_on_device(ctx, b.value, b.node, depth + 1) and not (
                isinstance(b.value, ast.Call) and _host_model_call(ctx, b.value)
                and not _may_be_on_device(ctx, b.value, b.node, depth + 1)):
            return True
    return False


def _item_of_a_library_dataset(ctx: Context, value: ast.AST | None, at: ast.AST) -> bool:
    """``data[i]`` where ``data = torchvision.datasets.CIFAR10(...)`` (or torchaudio's, torchtext's): its items are
    made on the host."""
    if not isinstance(value, ast.Subscript) or not isinstance(value.value, ast.Name):
        return False
    b = ctx.semantic.binding_at(value.value.id, at)
    made = b.value if b is not None and not b.is_param and b.index is None else None
    return isinstance(made, ast.Call) and (ctx.call_name(made) or "").startswith(
        ("torchvision.datasets.", "torchaudio.datasets.", "torchtext.datasets."))


def _host_model_call(ctx: Context, call: ast.Call) -> bool:
    """``out0, h0 = rnn_layer0(x)`` of a demo model nothing moves: its output lives where its input does."""
    return isinstance(call.func, ast.Name) and flow.consumer_kind(ctx.semantic, call) == "model" \
        and never_moved(ctx.semantic, call.func.id, call)


_HOST_MAKERS = ("range", "len", "int", "float", "str", "round", "itertools.", "math.", "random.", "numpy.", "os.")


def _host_maker(ctx: Context, call: ast.Call) -> bool:
    """A call whose result is no device tensor, whatever its arguments: ``range(...)``, ``len(...)``, itertools, NumPy;
    ``torch.tensor(e.ids)`` and ``torch.from_numpy(a)`` without a device (a new host tensor from host values)."""
    name = ctx.call_name(call) or ""
    if name in ("torch.tensor", "torch.LongTensor", "torch.FloatTensor", "torch.from_numpy"):
        return keyword(call, "device") is None
    return name in _HOST_MAKERS or name.startswith(tuple(p for p in _HOST_MAKERS if p.endswith(".")))


def _given_host_values(ctx: Context, b, param: str, depth: int) -> bool:  # type: ignore[no-untyped-def]
    """Every call of this file's function passes the parameter a value that is no device tensor."""
    sem = ctx.semantic
    func = b.node
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) or depth > 5:
        return False
    sites = sem.call_sites(func)
    given = [(call_argument(site, func, param), site) for site in sites]
    return bool(sites) and all(arg is not None and not _may_be_on_device(ctx, arg, site, depth + 1) for arg, site in given)


def _iterates_host_values(ctx: Context, b, depth: int) -> bool:  # type: ignore[no-untyped-def]
    """A loop (or comprehension) target over ``range(...)``, or over values that are no device tensors."""
    sem = ctx.semantic
    loop = sem.parent(b.node)
    it = getattr(loop, "iter", None) if isinstance(loop, (ast.For, ast.comprehension)) else None
    if it is None:
        return False
    if isinstance(it, ast.Call) and dotted(it.func) == "range":
        return True  # (a counter, whatever bounds it)
    return not _may_be_on_device(ctx, it, loop, depth + 1)


def _makes_host_data(ctx: Context, name: str) -> bool:
    """Every in-file function ``name`` is moves nothing and names no device."""
    sem = ctx.semantic
    funcs = sem.bindings.functions.get(name)
    return bool(funcs) and not any(
        isinstance(n, ast.Call) and (sem.is_device_move(n) or keyword(n, "device") is not None or sem.resolve(n))
        or isinstance(n, ast.arg) and "device" in n.arg for f in funcs for n in sem.local_nodes(f))


def _host_batch(ctx: Context, value: ast.Call) -> bool:
    """``next(iter(loader))`` of a DataLoader whose dataset is not already on the device."""
    sem = ctx.semantic
    if isinstance(value.func, ast.Attribute) and value.func.attr == "next" and not value.args:
        it = value.func.value  # (Python 2's ``iter(loader).next()``)
    elif dotted(value.func) == "next" and len(value.args) == 1:
        it = value.args[0]
    else:
        return False
    if not isinstance(it, ast.Call) or dotted(it.func) != "iter" or len(it.args) != 1 or not isinstance(it.args[0], ast.Name):
        return False
    b = sem.binding_at(it.args[0].id, value)
    loader = b.value if b is not None and b.index is None else None
    return isinstance(loader, ast.Call) and is_torch_dataloader(ctx, loader) and not dataset_on_device(ctx, loader)


def _used_as_model(ctx: Context, key: str) -> bool:
    """The model is called somewhere (``model(x)``) or handed to an in-file function."""
    return last_name(key) in ctx.semantic.cached("models_used", lambda: _names_used_as_models(ctx))


def _names_used_as_models(ctx: Context) -> set[str]:
    out: set[str] = set()
    sem = ctx.semantic
    for node in sem.calls:
        key = dotted(node.func)
        if key and (not method_name(node) or key.startswith("self.")):
            out.add(last_name(key))
        if node.args and any(isinstance(a, (ast.Name, ast.Attribute)) for a in node.args) and sem.resolve(node):
            out |= {last_name(dotted(a) or "") for a in node.args}
    return out


def _escapes(ctx: Context, key: str) -> bool:
    """The model is handed to code outside the file that may move it (a Trainer, a helper module)."""
    return last_name(key) in ctx.semantic.cached("escaping", lambda: _names_escaping(ctx))


def _names_escaping(ctx: Context) -> set[str]:
    out: set[str] = set()
    sem = ctx.semantic
    for node in sem.calls:
        if sem.resolve(node) or method_name(node) in ("append", "add", "format"):
            continue
        q = ctx.call_name(node) or ""
        if q.startswith(_NOT_MOVING_CALLS) or q.rsplit(".", 1)[-1] in ("DataParallel", "DistributedDataParallel", "DDP", "compile"):
            continue
        for a in list(node.args) + [k.value for k in node.keywords]:
            for e in a.elts if isinstance(a, (ast.List, ast.Tuple)) else a.values if isinstance(a, ast.Dict) else [a]:
                # (``utils.cuda([D, G])``: each one; ``self.model_dict.update({"encoder": self.encoder})``, moved by a
                # loop over the dict's items)
                if isinstance(e, (ast.Name, ast.Attribute)) and dotted(e):
                    out.add(last_name(dotted(e) or ""))
    return out
