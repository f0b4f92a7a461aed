"""Stage 2 rules: the model's parameters, buffers and wrappers must live where the data is."""

from __future__ import annotations

import ast

from torchdoctor.check.astutil import FACTORIES, dotted, keyword, method_name, param_default, string_value
from torchdoctor.check.context import Context
from torchdoctor.check.patterns import lazy
from torchdoctor.check.registry import rule
from torchdoctor.check.project import SELECTS_WRAPPED
from torchdoctor.check.semantic import program
from torchdoctor.check.semantic.models import STATELESS_LAYERS, class_holds_no_state, class_moves_itself, class_parts, \
    first_input_device, last_name, moved_keys, wrapper_prefix

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
        if key is None or not _constructs_model(ctx, call, stmt) or sem.value_is_moved(call):
            continue
        if _submodule(ctx, stmt, key):
            continue  # a submodule moves with its parent
        if keyword(call, "device") or keyword(call, "device_map") or any(k.arg is None for k in call.keywords):
            continue
        if last_name(key) in moved or not _used_as_model(ctx, key) or _escapes(ctx, key) or _rebound_moved(ctx, key, stmt) \
                or _parts_moved(ctx, key, stmt):
            continue
        if _returned(ctx, key, stmt):
            continue  # a builder function: its caller decides where the model goes
        if _wraps_or_is_wrapped(ctx, key, call):
            continue  # one module inside another: it moves with the outer one
        if _inputs_stay_on_host(ctx, key, stmt):
            continue
        near = _input_device_near(ctx, key, stmt)
        if near is None:
            continue  # the file moves data somewhere, but not where this model runs
        device, move = near
        name = ctx.name(call.func)
        ctx.report("TD201", call,
                   f"model `{key}` ({name}) is never moved to a device, but its inputs are moved to `{device}`",
                   fix=f"move it once after construction: `{key} = {key}{_same_move(ctx, move)}`")


def _same_move(ctx: Context, move: ast.Call) -> str:
    """The move of the data, as code for the model: ``.cuda()``, ``.to(device)``, ``.to("cuda:0")``."""
    if isinstance(move.func, ast.Attribute) and move.func.attr in ("cuda", "to"):
        args = ", ".join(ctx.semantic.segment(a) for a in [*move.args, *move.keywords][:1] if ctx.semantic.segment(a))
        return f".{move.func.attr}({args})"
    return f".to({ctx.semantic.move_device(move)})"


def _rebound_moved(ctx: Context, key: str, stmt: ast.AST) -> bool:
    """A later ``key = Wrapper(key).eval().to(device)``: the model is moved inside the expression that rebinds it."""
    sem = ctx.semantic
    for other in sem.of_type(ast.Assign):
        if other is stmt or len(other.targets) != 1 or dotted(other.targets[0]) != key:  # type: ignore[attr-defined]
            continue
        if sem.value_is_moved(other.value) and any(  # type: ignore[attr-defined]
                dotted(n) == key for n in sem.subtree(other.value) if isinstance(n, (ast.Name, ast.Attribute))):  # type: ignore[attr-defined]
            return True
    return False


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
    return False


def _wraps_or_is_wrapped(ctx: Context, key: str, call: ast.Call) -> bool:
    """``tokenizer = EntropyTokenizer(model)`` wraps a model (that is moved); ``ssl = SelfMaskedRepr(student)``
    takes this model in (and is moved or prepared itself): either way it is not a model on its own."""
    sem = ctx.semantic
    if any(sem.expr_kind(a, call) in ("model", "wrapper") for a in [*call.args, *(k.value for k in call.keywords)]):
        return True
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
        regions += [f for f in {sem.function_of(r) for r in sem.reads_of(key)} if f is not None and f not in regions]
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
    if kind in ("model", "wrapper", "loss_fn") or dev.strip("'\"") == "cpu":
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
    if sem.kinds.is_model_constructor(call, q, q.rsplit(".", 1)[-1]):
        cls = sem.calls_index.classes.get(q)
        if cls is None:  # a class of another module of the project, or of a library
            written = dotted(call.func)
            return not (sem.project is not None and written and (sem.project.class_stateless(sem, written)  # type: ignore[attr-defined]
                                                                 or sem.project.class_moves_itself(sem, written)))  # type: ignore[attr-defined]
        return not (_moves_itself(ctx, cls) or class_holds_no_state(sem, cls))
    builders = sem.resolve(call)
    return bool(builders) and not any(_returns_moved(ctx, f) for f in builders)


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


def _returns_moved(ctx: Context, func: ast.AST) -> bool:
    """A builder that moves what it returns (``return Net().to(args.device)``, or a moved name)."""
    sem = ctx.semantic
    for ret in sem.kinds.returns_of(func):
        value = ret.value
        if value is not None and (sem.value_is_moved(value) or isinstance(value, ast.Name) and sem.is_moved(value.id, ret)):
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


def _inputs_stay_on_host(ctx: Context, key: str, stmt: ast.Assign) -> bool:
    """Every call of this very binding (``model(x)`` in its scope) takes inputs known to be on the host:
    a model re-created for CPU inference (``x = test_data[0][0]``) next to a training part that moved data."""
    sem = ctx.semantic
    binding = next((b for b in sem.bindings_of(key) if b.node is stmt), None)
    if binding is None:
        return False
    body = sem.scope_of(stmt)
    calls = [n for n in sem.body(body) if isinstance(n, ast.Call) and dotted(n.func) == key
             and getattr(n, "lineno", 0) > stmt.lineno and sem.binding_at(key, n) is binding]
    args = [(a, c) for c in calls for a in [*c.args, *(k.value for k in c.keywords)]]
    return bool(calls) and not any(_may_be_on_device(ctx, a, c, 0) for a, c in args)


def _may_be_on_device(ctx: Context, expr: ast.AST, at: ast.AST, depth: int) -> bool:
    """``expr`` may hold a device tensor: moved, created with ``device=``, or of unknown origin."""
    sem = ctx.semantic
    nodes = sem.subtree(expr)
    for n in nodes:
        if isinstance(n, ast.Call) and (sem.is_device_move(n) or keyword(n, "device") is not None):
            return True
    names = [n for n in nodes if isinstance(n, ast.Name) and n.id not in ctx.imports]
    for name in names:
        b = sem.binding_at(name.id, at)
        if b is None or b.value is None or b.index is not None or depth > 4:
            return True  # a parameter, a loop target, an unpacked value: unknown
        if _may_be_on_device(ctx, b.value, b.node, depth + 1):
            return True
    return False


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
        if sem.resolve(node):
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
            if isinstance(a, (ast.Name, ast.Attribute)) and dotted(a):
                out.add(last_name(dotted(a) or ""))
    return out


# ---- TD203 --------------------------------------------------------------------------------
@rule("TD203", ast.Assign)
def plain_tensor_attribute(node: ast.AST, ctx: Context) -> None:
    """Plain tensor attribute set in an nn.Module's __init__: it stays behind on model.to(device)."""
    assert isinstance(node, ast.Assign)
    if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Attribute):
        return
    target = node.targets[0]
    value = node.value
    if isinstance(value, ast.IfExp):  # ``self.mean = torch.tensor(mean).view(-1, 1, 1) if mean else None``
        value = value.body if isinstance(value.body, ast.Call) else value.orelse
    if not (isinstance(target.value, ast.Name) and target.value.id == "self" and isinstance(value, ast.Call)):
        return
    sem = ctx.semantic
    func, cls = sem.function_of(node), sem.class_of(node)
    if func is None or func.name != "__init__" or cls is None or cls.name not in sem.module_classes:
        return
    if not _new_tensor(ctx, value, node, 0) or sem.value_is_moved(value):
        return  # (``self.scale = torch.sqrt(torch.FloatTensor([0.5])).to(device)``: on the device from the start)
    if _registered(ctx, cls, target.attr) or _moved_by_own_to(ctx, cls, target.attr) or not _used_later(ctx, cls, target.attr) \
            or _moved_at_every_use(ctx, cls, target.attr) or _default_device_set(ctx):
        return  # (``torch.set_default_device(device)`` first: the tensor is made on the device)
    if _zero_dim(ctx, value, node) and _only_in_arithmetic(ctx, cls, target.attr):
        return  # a 0-dim CPU tensor combines with tensors of any device: ``y * self.scale`` runs on the GPU
    call = ctx.segment(node.value)
    edits = ()
    if value is node.value and keyword(value, "requires_grad") is None and _after_super_init(ctx, func, node):
        edits = (ctx.replace_edit(node, f'self.register_buffer("{target.attr}", {call}, persistent=False)'),)
    ctx.report("TD203", node,
               f"`self.{target.attr}` in `{cls.name}.__init__` is a plain tensor: `model.to(device)` leaves it on the CPU",
               fix=f'register it: `self.register_buffer("{target.attr}", {ctx.name(value, 50)})` '
                   "(or wrap a learned value in nn.Parameter)",
               edits=edits)


def _default_device_set(ctx: Context) -> bool:
    """``torch.set_default_device(device)`` at module level, to something other than the CPU."""
    sem = ctx.semantic
    return any((ctx.call_name(c) or "") == "torch.set_default_device" and sem.function_of(c) is None and c.args
               and (string_value(c.args[0]) or "cuda") != "cpu" for c in sem.calls_named("set_default_device"))


def _moved_at_every_use(ctx: Context, cls: ast.ClassDef, attr: str) -> bool:
    """Every read of ``self.attr`` outside ``__init__`` moves it first: ``self.validation_z.type_as(weight)``,
    ``self.mean.to(x.device)``."""
    sem = ctx.semantic
    reads = [r for r in sem.reads_of(f"self.{attr}") if sem.class_of(r) is cls
             and (f := sem.function_of(r)) is not None and f.name != "__init__"]
    return bool(reads) and all(_moved_after_reshapes(sem, r) or _copy_moved(ctx, r) for r in reads)


_RESHAPED = frozenset({"repeat", "view", "reshape", "expand", "unsqueeze", "squeeze", "permute", "transpose", "float",
                       "long", "int", "clone", "detach", "contiguous", "flatten"})


def _moved_after_reshapes(sem: object, read: ast.AST) -> bool:
    """``self.mean.to(x.device)``, ``self.slots.repeat(b, 1).to(x.device)``: moved as it is read."""
    cur = read
    while isinstance(p := sem.parent(cur), ast.Attribute) and isinstance(call := sem.parent(p), ast.Call) \
            and call.func is p:  # type: ignore[attr-defined]
        if p.attr in ("to", "type_as", "cuda"):
            return True
        if p.attr not in _RESHAPED:
            return False
        cur = call
    return False


def _copy_moved(ctx: Context, read: ast.AST) -> bool:
    """``batchgrid[i] = self.grid`` (or ``g = self.grid.expand(...)``), then ``batchgrid = batchgrid.cuda()`` in the
    same method: what meets the input is a copy moved to its device."""
    sem = ctx.semantic
    up = sem.parent(read)
    if isinstance(up, ast.Attribute) and up.attr in ("size", "shape", "dim", "numel", "dtype", "ndim"):
        return True  # ``self.grid.size()``: its shape, wherever it lives
    stmt = sem.statement_of(read)
    func = sem.function_of(read)
    if not isinstance(stmt, ast.Assign) or func is None:
        return False
    names = {dotted(t.value if isinstance(t, ast.Subscript) else t) for t in stmt.targets} - {None}
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("cuda", "to", "type_as")
               and dotted(n.func.value) in names and n.lineno > stmt.lineno for n in sem.local_nodes(func))


_SCALAR_FACTORIES = ("torch.tensor", "torch.as_tensor", "torch.scalar_tensor")


def _zero_dim(ctx: Context, value: ast.AST, at: ast.AST) -> bool:
    """``torch.tensor(<a number>)``: a 0-dim tensor (``torch.tensor(0.5)``, ``torch.tensor(d ** -0.5)``,
    ``torch.tensor(temperature)`` of a parameter whose default is a number)."""
    return isinstance(value, ast.Call) and (ctx.call_name(value) or "") in _SCALAR_FACTORIES \
        and len(value.args) == 1 and _number(ctx, value.args[0], at)


def _number(ctx: Context, expr: ast.AST, at: ast.AST, literal: bool = True) -> bool:
    """A Python number: a literal, ``float()``/``int()``/``math.*()``, arithmetic of those with at least one
    literal among names, or (``literal=False``) a name; a parameter with a number default counts alone."""
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, (int, float)) and not isinstance(expr.value, bool)
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, (ast.USub, ast.UAdd)):
        return _number(ctx, expr.operand, at, literal)
    if isinstance(expr, ast.BinOp) and not isinstance(expr.op, ast.MatMult):
        sides = (expr.left, expr.right)
        return all(_number(ctx, e, at, False) for e in sides) and any(_number(ctx, e, at) for e in sides)
    if isinstance(expr, ast.Call):
        q = ctx.call_name(expr) or ""
        return q in ("float", "int") or q.startswith("math.")
    if isinstance(expr, ast.Name):
        if not literal:
            return True
        b = ctx.semantic.binding_at(expr.id, at)
        if b is None or not b.is_param or isinstance(b.node, ast.Lambda):
            return False
        default = param_default(b.node, expr.id)  # type: ignore[arg-type]
        return default is not None and _number(ctx, default, at)
    return False


def _only_in_arithmetic(ctx: Context, cls: ast.ClassDef, attr: str) -> bool:
    """Every read of ``self.attr`` outside ``__init__`` is an operand of arithmetic or a comparison
    (``y * self.scale``, ``y /= self.t``), where a 0-dim CPU tensor meets a device tensor as a scalar; not an
    argument of a call, a receiver of a method, an index or an element of a list (``torch.stack``)."""
    sem = ctx.semantic
    reads = [r for r in sem.reads_of(f"self.{attr}") if sem.class_of(r) is cls
             and (f := sem.function_of(r)) is not None and f.name != "__init__"]
    return bool(reads) and all(isinstance(sem.parent(r), (ast.BinOp, ast.Compare))
                               or isinstance(p := sem.parent(r), ast.AugAssign) and p.value is r for r in reads)


# Attributes that frameworks read themselves and move as they need (Lightning's model summary input).
_FRAMEWORK_ATTRS = {"example_input_array"}


def _used_later(ctx: Context, cls: ast.ClassDef, attr: str) -> bool:
    """``self.attr`` is read by a method other than ``__init__`` (forward, a helper): a tensor only
    ``__init__`` uses, or one a framework reads, never meets the moved weights."""
    if attr in _FRAMEWORK_ATTRS:
        return False
    sem = ctx.semantic
    for b in sem.bindings.in_scope(cls, f"self.{attr}"):
        func = sem.function_of(b.node)
        if func is not None and func.name != "__init__":
            return False  # reassigned as the object runs (an environment's state): data, not module state
    for read in sem.reads_of(f"self.{attr}"):
        func = sem.function_of(read)
        if sem.class_of(read) is cls and func is not None and func.name != "__init__":
            return True
    return False


def _new_tensor(ctx: Context, value: ast.AST, at: ast.AST, depth: int) -> bool:
    """A fresh plain tensor: ``torch.ones(...)``, ``torch.tril(torch.ones(...))``, ``pe.unsqueeze(0)`` of a local one."""
    if depth > 4:
        return False
    if isinstance(value, ast.Call):
        q = ctx.call_name(value) or ""
        if q.startswith("torch.") and q.count(".") == 1:  # torch.nn.Parameter, torch.nn.init.* are not plain
            if q.split(".")[1] in FACTORIES or q.endswith(("Tensor", "from_numpy")):
                return True
            return any(_new_tensor(ctx, a, at, depth + 1) for a in value.args)
        recv = value.func.value if isinstance(value.func, ast.Attribute) else None
        if recv is None or (isinstance(recv, ast.Name) and recv.id in ctx.imports):
            return False
        return _new_tensor(ctx, recv, at, depth + 1)  # pe.unsqueeze(0), mask.float()
    if isinstance(value, ast.Name):
        b = ctx.semantic.binding_at(value.id, at)
        if b is None or b.value is None or b.index is not None or b.is_param:
            return False
        return _new_tensor(ctx, b.value, b.node, depth + 1)
    return False


def _registered(ctx: Context, cls: ast.ClassDef, attr: str) -> bool:
    sem = ctx.semantic
    for node in sem.calls_named("register_buffer", "register_parameter"):
        if node.args and sem.contains(cls, node):
            first = node.args[0]
            if isinstance(first, ast.Constant) and first.value == attr:
                return True
    return False


def _moved_by_own_to(ctx: Context, cls: ast.ClassDef, attr: str) -> bool:
    """The class overrides ``to``/``cuda``/``_apply`` and moves ``self.attr`` there itself."""
    for func in cls.body:
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) and func.name in ("to", "cuda", "_apply"):
            for node in ctx.semantic.subtree(func):
                if isinstance(node, ast.Assign) and any(dotted(t) == f"self.{attr}" for t in node.targets):
                    return True
    return False


def _after_super_init(ctx: Context, func: ast.AST, node: ast.AST) -> bool:
    for stmt in ctx.semantic.local_nodes(func):
        if getattr(stmt, "lineno", 10**9) >= node.lineno:  # type: ignore[attr-defined]
            break
        if isinstance(stmt, ast.Call) and method_name(stmt) == "__init__":
            return True
    return False


# ---- TD204 --------------------------------------------------------------------------------
_DATA_PARALLEL = ("torch.nn.DataParallel", "torch.nn.parallel.DataParallel", "torch.nn.parallel.data_parallel.DataParallel",
                  "torch.nn.parallel.data_parallel", "torch.nn.parallel.data_parallel.data_parallel")


@rule("TD204", calls=("DataParallel", "data_parallel"))
def data_parallel(node: ast.AST, ctx: Context) -> None:
    """nn.DataParallel (or the functional ``nn.parallel.data_parallel``): single-process, slower and unbalanced."""
    q = ctx.call_name(node) or ""
    if q in _DATA_PARALLEL:
        ctx.report("TD204", node, f"`{ctx.name(node.func)}` runs one process over all GPUs (GIL-bound, "  # type: ignore[attr-defined]
                   "unbalanced on GPU 0)", fix="use DistributedDataParallel launched with torchrun")


# ---- TD205 --------------------------------------------------------------------------------
_WRAPPER_CLASSES = ("DataParallel", "DistributedDataParallel", "DDP", "OptimizedModule", "FullyShardedDataParallel")


def _in_unwrapped_branch(ctx: Context, recv: ast.AST, node: ast.AST) -> bool:
    """``if isinstance(net, nn.DataParallel): save(net.module.state_dict()) else: save(net.state_dict())``: the
    else branch runs only when ``net`` is no wrapper (or the if branch of ``if not isinstance(...)``)."""
    sem = ctx.semantic
    key = dotted(recv)
    wraps_under = _wrapping_tests(ctx, key) if key else frozenset()
    for test, holds in sem.guards.branch_tests(node):
        if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "isinstance" \
                and len(test.args) == 2 and dotted(test.args[0]) == key and any(
                    (dotted(n) or "").rsplit(".", 1)[-1] in _WRAPPER_CLASSES for n in sem.subtree(test.args[1])):
            return not holds
        if sem.segment(test) in wraps_under:  # ``if MANY: enc = nn.DataParallel(enc)`` ... ``else: save(enc...)``
            return not holds
        if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "hasattr" \
                and len(test.args) == 2 and dotted(test.args[0]) == key and string_value(test.args[1]) in (
                    "module", "_orig_mod"):  # ``net.module.state_dict() if hasattr(net, "module") else net.state_dict()``
            return not holds
    return False


def _wrapping_tests(ctx: Context, key: str) -> frozenset[str]:
    """The tests (as written) of the ``if`` blocks that hold every wrapping of ``key`` (``if MANY: enc =
    nn.DataParallel(enc)``): where that test is false, ``key`` is no wrapper. Empty when one wrap is unconditional."""
    sem = ctx.semantic
    wraps = [b for b in sem.bindings_of(key) if isinstance(b.value, ast.Call) and b.index is None
             and (sem.call_name(b.value) or "").rsplit(".", 1)[-1] in _WRAPPER_CLASSES]
    tests: set[str] = set()
    for b in wraps:
        guard = next((a for a in sem.ancestors(b.node) if isinstance(a, ast.If) and any(
            s is b.node or sem.contains(s, b.node) for s in a.body)), None)
        if guard is None or isinstance(guard.test, ast.UnaryOp):
            return frozenset()
        tests.add(sem.segment(guard.test))
    return frozenset(tests)


@rule("TD205", calls=("state_dict",))
def wrapped_state_dict_saved(node: ast.AST, ctx: Context) -> None:
    """state_dict() saved from a DataParallel/DDP/compiled wrapper: keys gain a prefix."""
    assert isinstance(node, ast.Call)
    if node.args or not isinstance(node.func, ast.Attribute):
        return
    sem = ctx.semantic
    recv = node.func.value
    prefix = wrapper_prefix(sem, recv, node)
    if prefix is None and sem.expr_kind(recv, node) == "wrapper":
        prefix = "_orig_mod." if _wrapped_by_compile(ctx, recv, node) else "module."
    if prefix is None and _wrapped_by_a_helper(ctx, recv, node):
        prefix = "module."
    if prefix is None or not _saved(ctx, node) or _in_unwrapped_branch(ctx, recv, node):
        return
    if prefix == "module." and (SELECTS_WRAPPED.search(sem.text.source) if sem.project is None
                                else sem.project.selects_wrapped_keys(sem)):
        return  # the project's own readers pick keys by ``module.encoder``: the prefix is its format
    name = ctx.name(recv)
    attr = prefix.rstrip(".")
    inner = _unwrapped_alias(ctx, recv, attr) or f"{name}.{attr}"
    restore = _restored_into_wrapper(ctx, recv, node)
    fix = f"save `{inner}.state_dict()` (unwrap first)" if restore is None else (
        f"save `{inner}.state_dict()`, and resume into `{inner}` too: line {restore.lineno} loads this checkpoint "
        "into the wrapper, which would then find none of its keys")
    ctx.report("TD205", node, f"`{name}.state_dict()` is saved from a wrapper: every key gains a `{prefix}` prefix",
               fix=fix)


_RESTORES = lazy(r"(?i)restore|resume|restart|load_?(checkpoint|ckpt|model|weights)")


def _restored_into_wrapper(ctx: Context, recv: ast.AST, at: ast.AST) -> ast.AST | None:
    """Where the program resumes into the same wrapper (``utils.restart_from_checkpoint(path, student=student)``,
    ``student.load_state_dict(ckpt["student"])``): its own checkpoints round-trip with the prefix, and saving the
    unwrapped module alone would make that resume load no key (silently, under ``strict=False``)."""
    sem = ctx.semantic
    key = dotted(recv)
    if key is None:
        return None
    saved = sem.binding_at(key, at) if "." not in key else None
    for use in sem.reads_of(key):
        if use is recv or (saved is not None and sem.binding_at(key, use) is not saved):
            continue
        parent = sem.parent(use)
        if isinstance(parent, ast.Attribute) and parent.attr == "load_state_dict" and parent.value is use:
            return parent
        if isinstance(parent, ast.keyword):
            parent = sem.parent(parent)
        if isinstance(parent, ast.Call) and use is not parent.func and _RESTORES.search(
                (dotted(parent.func) or "").rsplit(".", 1)[-1]):
            return parent
    return None


def _unwrapped_alias(ctx: Context, recv: ast.AST, attr: str) -> str | None:
    """``teacher_without_ddp = teacher.module``: the name the program already keeps the inner model under (the
    wrap may be conditional, where ``teacher.module`` would not exist)."""
    key = dotted(recv)
    if key is None:
        return None
    for node in ctx.semantic.of_type(ast.Assign):
        value = node.value  # type: ignore[attr-defined]
        if isinstance(value, ast.Attribute) and value.attr == attr and dotted(value.value) == key \
                and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):  # type: ignore[attr-defined]
            return node.targets[0].id  # type: ignore[attr-defined]
    return None


def _wrapped_by_a_helper(ctx: Context, recv: ast.AST, at: ast.AST) -> bool:
    """``model = setup_model(args)``, a function of another module of the project whose every return is a
    DDP/DataParallel/FSDP wrapper (asked here, at a saved state_dict, not of every call in the file)."""
    key = dotted(recv)
    b = ctx.semantic.binding_at(key, at) if key else None
    if b is None or b.is_param or not isinstance(b.value, ast.Call) or b.index is not None:
        return False
    return getattr(ctx.semantic.external(b.value), "returns", None) == "wrapper"


def _wrapped_by_compile(ctx: Context, recv: ast.AST, at: ast.AST) -> bool:
    key = dotted(recv)
    b = ctx.semantic.binding_at(key, at) if key else None
    value = b.value if b is not None else None
    if isinstance(value, ast.IfExp):
        value = value.body
    return isinstance(value, ast.Call) and (ctx.call_name(value) or "").endswith("compile")


def _saved(ctx: Context, call: ast.Call) -> bool:
    """The state_dict flows into ``torch.save`` (or a helper that saves: ``save_checkpoint({...})``),
    directly or through the name it is stored under."""
    sem = ctx.semantic
    stmt: ast.AST = call
    for a in sem.ancestors(call):
        if isinstance(a, ast.Call) and a is not call and _is_save(ctx, a):
            return True
        if isinstance(a, ast.stmt):
            stmt = a
            break
    names: set[str] = set()
    if isinstance(stmt, ast.Assign):
        for t in stmt.targets:
            base = t.value if isinstance(t, ast.Subscript) else t
            if isinstance(base, ast.Name):
                names.add(base.id)
    if not names:
        return False
    for node in sem.local_nodes(sem.scope_of(stmt)):
        if isinstance(node, ast.Call) and getattr(node, "lineno", 0) >= stmt.lineno and _is_save(ctx, node):  # type: ignore[attr-defined]
            args = list(node.args) + [k.value for k in node.keywords]
            if any(isinstance(a, ast.Name) and a.id in names for a in args):
                return True
    return False


def _is_save(ctx: Context, call: ast.Call) -> bool:
    """``torch.save`` and friends, or a function of this file or the project that saves what it gets."""
    q = ctx.call_name(call) or ""
    if q in ("torch.save", "torch_xla.core.xla_model.save", "xm.save") or q.endswith("safetensors.torch.save_file"):
        return True
    sem = ctx.semantic
    if any("save" in sem.effects(f, deep=True) for f in sem.resolve(call)):
        return True
    ext = sem.external(call)
    return ext is not None and "save" in getattr(ext, "effects", ())
