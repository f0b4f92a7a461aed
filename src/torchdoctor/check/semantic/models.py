"""Where models come from and where things are placed: constructions seen through wrappers,
dropout/batch-norm, names moved to a device, the device inputs are moved to, wrapper key prefixes."""

from __future__ import annotations

import ast

from torchdoctor.check.astutil import FACTORIES, call_argument, dotted, func_params, is_false, keyword, method_name, param_default
from torchdoctor.check.patterns import LazyPattern, lazy
from torchdoctor.check.semantic import program
from torchdoctor.check.semantic.model import SemanticModel

__all__ = ["has_dropout_or_bn", "construction", "class_has_dropout_or_bn", "last_name", "first_input_device",
           "moved_keys", "wrapper_prefix", "DROPOUT_BN", "class_holds_no_state", "class_moves_itself", "class_parts",
           "STATELESS_LAYERS", "model_is_stateless", "class_holds_nothing", "init_params", "LEGACY_TENSORS",
           "loss_weight_params", "holds_plain_tensors_only", "class_has_no_parameters", "model_has_no_parameters",
           "built_nowhere", "init_of", "submodule_names", "LEGACY_DTYPES"]

DROPOUT_BN = lazy(r"Dropout|BatchNorm|dropout|batch_norm|SyncBatchNorm")  # (InstanceNorm: the catalog leaves it out)
_LIBRARY_MODELS = ("torchvision.", "timm.", "transformers.", "torch.hub.")
# torch.nn layers with no parameters or buffers: nothing to move, the output follows the input
STATELESS_LAYERS = frozenset(
    "Upsample UpsamplingBilinear2d UpsamplingNearest2d ReLU ReLU6 LeakyReLU GELU SiLU Mish Sigmoid Tanh Softmax "
    "Softmax2d LogSoftmax Softplus ELU Hardtanh Hardswish Hardsigmoid Dropout Dropout1d Dropout2d Dropout3d "
    "AlphaDropout Identity Flatten Unflatten MaxPool1d MaxPool2d MaxPool3d AvgPool1d AvgPool2d AvgPool3d "
    "AdaptiveAvgPool1d AdaptiveAvgPool2d AdaptiveAvgPool3d AdaptiveMaxPool1d AdaptiveMaxPool2d AdaptiveMaxPool3d "
    "PixelShuffle PixelUnshuffle ZeroPad2d ConstantPad1d ConstantPad2d ConstantPad3d ReflectionPad1d ReflectionPad2d "
    "ReplicationPad1d ReplicationPad2d ReplicationPad3d CosineSimilarity PairwiseDistance ChannelShuffle "
    "LogSigmoid Softmin Softsign Tanhshrink Threshold SELU CELU GLU Hardshrink Softshrink RReLU SiLU".split())


# ---- model constructions ----------------------------------------------------------------
def has_dropout_or_bn(sem: SemanticModel, expr: ast.AST, at: ast.AST) -> bool | None:
    """Whether the model ``expr`` evaluates to uses dropout or batch-norm (None: unknown)."""
    value = construction(sem, expr, at)
    if value is None:
        return _part_of_a_library_model(sem, expr, at) or _handed_self(sem, expr, at)
    q = sem.call_name(value) or ""
    if q in sem.module_classes:
        return class_has_dropout_or_bn(sem, q, cls=class_in_effect(sem, q, value))
    if q.startswith(_LIBRARY_MODELS) or q.endswith("from_pretrained"):
        return True
    if q.startswith("torch.nn."):
        if DROPOUT_BN.search(sem.segment(value)):
            return True
        for arg in value.args:  # ``nn.Sequential(*list(resnet.children())[:-1])``: the parts of another model
            inner = arg.value if isinstance(arg, ast.Starred) else arg
            while isinstance(inner, ast.Subscript):
                inner = inner.value
            if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name) and inner.func.id == "list" and inner.args:
                inner = inner.args[0]
            if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr in (
                    "children", "modules") and inner.func.value is not expr \
                    and has_dropout_or_bn(sem, inner.func.value, value):  # (asked where the Sequential is built:
                return True  # ``my_resnet = nn.Sequential(*list(my_resnet.children())[:-1])`` means the model before)
        return False
    written = dotted(value.func)
    if sem.project is not None and written:  # a class of another module of the project
        return sem.project.class_dropout_bn(sem, written)  # type: ignore[attr-defined]
    return None


def _part_of_a_library_model(sem: SemanticModel, expr: ast.AST, at: ast.AST) -> bool | None:
    """``dense = densenet121(pretrained=True).features.to(device)``: a part of a library model (its feature extractor,
    BatchNorm inside); None when ``expr`` is not bound so."""
    key = dotted(expr)
    for _ in range(3):  # (through ``dense = dense.cuda()``)
        b = sem.binding_at(key, at) if key else None
        value = b.value if b is not None and not b.is_param and b.index is None else None
        while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in (
                "to", "cuda", "eval", "train", "float"):
            value = value.func.value
        if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Call) \
                and (sem.call_name(value.value) or "").startswith(_LIBRARY_MODELS):
            return True
        if not (isinstance(value, ast.Name) and value.id == key) or b is None:
            return None
        at = b.node
    return None


def _handed_self(sem: SemanticModel, expr: ast.AST, at: ast.AST) -> bool | None:
    """``def accuracy_of(net, batches)`` called as ``accuracy_of(self, val_it)`` from a method of a module class of
    this file: whether that class uses dropout or batch-norm (None: not that shape)."""
    b = sem.binding_at(expr.id, at) if isinstance(expr, ast.Name) else None
    if b is None or not b.is_param:
        return None
    found = None
    for arg, site in _arguments_for(sem, b.node, expr.id):  # type: ignore[attr-defined]
        cls = sem.class_of(site)
        if not (isinstance(arg, ast.Name) and arg.id == "self" and cls is not None and cls.name in sem.module_classes):  # type: ignore[attr-defined]
            return None
        found = bool(found) or class_has_dropout_or_bn(sem, cls.name, cls=cls)  # type: ignore[attr-defined]
    return found


def construction(sem: SemanticModel, expr: ast.AST, at: ast.AST, depth: int = 0) -> ast.Call | None:
    """The constructor call a model expression came from, through names, ``.to()``, wrappers (memoised:
    a parameter fans out over every call site, and call sites over their own parameters)."""
    if depth > 8:
        return None
    memo = sem.memo.setdefault("construction", {})
    key = (id(expr), id(at))
    if key in memo:
        return memo[key]  # type: ignore[no-any-return]
    memo[key] = None  # while it is being found: a cycle finds nothing
    found = _construction(sem, expr, at, depth)
    memo[key] = found
    return found


def _construction(sem: SemanticModel, expr: ast.AST, at: ast.AST, depth: int) -> ast.Call | None:
    if isinstance(expr, ast.Call):
        kind = sem.call_kind(expr, at)
        if kind == "model" and method_name(expr) not in ("to", "cuda", "train", "eval"):
            return expr
        inner = _wrapped(sem, expr, kind)
        return construction(sem, inner, at, depth + 1) if inner is not None else None
    if isinstance(expr, ast.Attribute) and expr.attr in ("module", "_orig_mod"):
        return construction(sem, expr.value, at, depth + 1)
    key = dotted(expr)
    if key is None:
        return None
    b = sem.binding_at(key, at)
    if b is not None and b.value is not None and b.index is None and not b.is_param:
        return construction(sem, b.value, b.node, depth + 1)
    if b is not None and b.index is not None and isinstance(b.value, ast.Call) and not b.is_param:
        # ``model, loss_fn, opt = get_model()``: what the factory in effect there returns at that place
        for func in sem.resolve(b.value):
            for value in sem.kinds.returned_values(func, b.index) or ():
                found = construction(sem, value, value, depth + 1)
                if found is not None:
                    return found
    if b is not None and b.is_param:
        for arg, site in _arguments_for(sem, b.node, key):
            found = construction(sem, arg, site, depth + 1)
            if found is not None:
                return found
    for other in sem.bindings_of(key):  # a parameter: any construction of that name
        if other.value is not None and other.index is None and not other.is_param:
            found = construction(sem, other.value, other.node, depth + 1)
            if found is not None:
                return found
    return None


def _wrapped(sem: SemanticModel, call: ast.Call, kind: str | None) -> ast.AST | None:
    """The model a call passes through: ``m.to(d)`` -> m; ``DDP(m)``, ``torch.compile(m)``,
    ``nn.SyncBatchNorm.convert_sync_batchnorm(m)`` -> m (calls of imported functions)."""
    func = call.func
    first = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg in ("module", "model")), None)
    if kind == "wrapper" or not isinstance(func, ast.Attribute):
        return first
    root = func
    while isinstance(root, ast.Attribute):
        root = root.value
    if isinstance(root, ast.Name) and root.id in sem.imports and sem.binding_at(root.id, call) is None:
        return first
    return func.value


def _arguments_for(sem: SemanticModel, func: ast.AST, param: str) -> list[tuple[ast.AST, ast.Call]]:
    """What each call site passes for ``param`` of ``func``."""
    args = func.args  # type: ignore[attr-defined]
    names = [a.arg for a in args.posonlyargs + args.args]
    if sem.class_of(func) is not None and names[:1] == ["self"]:
        names = names[1:]
    out: list[tuple[ast.AST, ast.Call]] = []
    for site in sem.call_sites(func):
        for kw in site.keywords:
            if kw.arg == param:
                out.append((kw.value, site))
        if param in names and names.index(param) < len(site.args):
            out.append((site.args[names.index(param)], site))
    return out


def class_in_effect(sem: SemanticModel, name: str, at: ast.AST) -> ast.AST | None:
    """The module-level ``class name`` that a call at ``at`` makes: the last one defined above it (a notebook that
    defines ``Classifier`` again, with dropout, cells later); None when there is one definition only, or none above."""
    defs = [c for c in sem.of_type(ast.ClassDef) if c.name == name and sem.class_of(c) is None]  # type: ignore[attr-defined]
    if len(defs) < 2:
        return None
    here = sem.function_of(at)
    local = [c for c in defs if here is not None and sem.function_of(c) is here]
    if local:  # ``def get_model(): class Net(nn.Module): ...; return Net()``, the factory defined again cells later
        return local[-1]
    defs = [c for c in defs if sem.function_of(c) is None]
    above = [c for c in defs if c.lineno < at.lineno]  # type: ignore[attr-defined]
    return above[-1] if above else None


def class_has_dropout_or_bn(sem: SemanticModel, name: str, seen: frozenset[str] = frozenset(),
                            cls: ast.AST | None = None) -> bool:
    return _class_has(sem, name, None, "class_dropout_bn", seen, cls)


def class_has_batchnorm(sem: SemanticModel, name: str) -> bool:
    """torch's BatchNorm in the class, its submodules' classes or its bases (of this file or the project); not a
    synchronised one imported under that name (``from modules.bn import InPlaceABNSync as BatchNorm2d``)."""
    return _class_has(sem, name, _TORCH_BATCH_NORM, "class_batchnorm", frozenset(), None)


_TORCH_BATCH_NORM = lazy(r"torch\.nn\.(modules\.batchnorm\.)?BatchNorm[123]?d|torch\.nn\.functional\.batch_norm")


def _class_has(sem: SemanticModel, name: str, qualified: LazyPattern | None, ask: str, seen: frozenset[str],
               cls: ast.AST | None) -> bool:
    """``qualified``: the layers' qualified names to find (else any word naming dropout or batch-norm)."""
    cls = cls or sem.calls_index.classes.get(name)
    if cls is None or name in seen:
        return False
    seen = seen | {name}
    nodes = sem.subtree(cls)
    tested = {id(t) for n in nodes if isinstance(n, ast.Call) and dotted(n.func) == "isinstance" and len(n.args) == 2
              for t in sem.subtree(n.args[1])}  # ``if isinstance(m, nn.BatchNorm2d):`` in an init helper: no layer
    kept = [n for n in nodes if id(n) not in tested]
    if qualified is None and any(DROPOUT_BN.search(word) for word in _code_words(kept)) or qualified is not None and any(
            isinstance(n, (ast.Name, ast.Attribute)) and qualified.fullmatch(sem.qualname(n) or "") for n in kept):
        return True
    used = {dotted(n.func) for n in nodes if isinstance(n, ast.Call)}
    used |= {dotted(b) for b in cls.bases}  # type: ignore[attr-defined]
    for u in used:
        if u and u in sem.module_classes and _class_has(sem, u, qualified, ask, seen, None):
            return True
        if u and "." not in u and u not in sem.module_classes and any(  # ``convolution_block(64, 64, 2)``, a function
                sem.frame(f).kind == "module" and _nodes_have(sem, sem.subtree(f), qualified)  # of the module returning
                for f in sem.functions.get(u, ())):  # ``nn.Sequential(conv, nn.BatchNorm2d(out), act)``
            return True
    if sem.project is not None:  # a base class or a submodule class from another module of the project
        for u in used:
            if u and u not in sem.module_classes and u.rsplit(".", 1)[-1][:1].isupper() \
                    and getattr(sem.project, ask)(sem, u):
                return True
    return False


def _nodes_have(sem: SemanticModel, nodes: list[ast.AST], qualified: LazyPattern | None) -> bool:
    """The layers ``qualified`` names (else any word naming dropout or batch-norm) among ``nodes``."""
    if qualified is None:
        return any(DROPOUT_BN.search(word) for word in _code_words(nodes))
    return any(isinstance(n, (ast.Name, ast.Attribute)) and qualified.fullmatch(sem.qualname(n) or "") for n in nodes)


def _code_words(nodes: list[ast.AST]) -> list[str]:
    """The identifiers of the code (names, attributes, keywords), not its docstrings or comments: a docstring saying
    "no dropout" is not a dropout layer; nor is a parameter (``def __init__(self, vocab, dropout)``) that the class
    never reads (one it reads is a name where it is read: ``nn.GRU(h, h, dropout=dropout)``)."""
    words: list[str] = []
    for n in nodes:
        if isinstance(n, ast.Name):
            words.append(n.id)
        elif isinstance(n, ast.Attribute):
            words.append(n.attr)
        elif isinstance(n, ast.keyword) and n.arg:
            words.append(n.arg)
    return words


# ---- placement -------------------------------------------------------------------------------
def last_name(key: str) -> str:
    """``model`` for ``self.model``: moves and uses are matched by the last name part."""
    return key.rsplit(".", 1)[-1]


def first_input_device(sem: SemanticModel) -> str | None:
    """The device of the first tensor moved off the CPU in the file, if any."""
    return sem.cached("first_input_device", lambda: _find_input_device(sem))  # type: ignore[no-any-return]


def _device_moves(sem: SemanticModel) -> list[ast.Call]:
    return sem.cached("device_moves", lambda: [c for c in sem.calls_named("to", "cuda", "to_device", "move_to_device",
                                                                             "move_to", "send_to_device")
                                                if sem.is_device_move(c)])  # type: ignore[no-any-return]


def _find_input_device(sem: SemanticModel) -> str | None:
    for node in _device_moves(sem):
        cls = sem.class_of(node)
        if cls is not None and cls.name in sem.module_classes:
            continue  # a move inside a model's own code follows its input (``pos.to(x.device)``)
        dev = sem.move_device(node) or ""
        recv = node.func.value if isinstance(node.func, ast.Attribute) else (node.args[0] if node.args else None)
        kind = sem.expr_kind(recv, node) if recv is not None else None
        if kind in ("model", "wrapper", "loss_fn") or dev.strip("'\"") == "cpu" or program.moves_to_cpu_name(sem, node):
            continue  # (``x.to(device)`` with ``device = torch.device("cpu")``: no move off the host)
        if isinstance(recv, ast.Call) and sem.call_kind(recv, recv) in ("model", "wrapper"):
            continue
        return dev
    return None


def moved_keys(sem: SemanticModel) -> set[str]:
    """Last name parts of every receiver moved to a device, or handed to a device-aware helper."""
    return sem.cached("moved_keys", lambda: _find_moved_keys(sem))  # type: ignore[no-any-return]


def _find_moved_keys(sem: SemanticModel) -> set[str]:
    out: set[str] = set()
    for node in sem.calls_named("to", "cuda", "to_empty", "xpu", "mps"):
        if isinstance(node.func, ast.Attribute):
            recv = node.func.value
            key = dotted(recv) or dotted(getattr(recv, "func", None))
            if key:
                out.add(last_name(key))
            if isinstance(recv, ast.Call):  # convert_sync_batchnorm(model).to(device) moves `model` too
                out |= {last_name(dotted(a) or "") for a in recv.args}
                up = sem.parent(node)  # ``net = Imputer(cfg).to(device)``: ``net`` is moved
                if isinstance(up, ast.Assign) and up.value is node:
                    out |= {last_name(k) for t in up.targets if (k := dotted(t))}
    for node in sem.calls_named("prepare", "setup", "prepare_model", "setup_module", "to_device", "move_to_device",
                                "move_to", "send_to_device"):
        if method_name(node) in ("prepare", "setup", "prepare_model", "setup_module") or sem.is_device_move(node):
            out |= {last_name(dotted(a) or "") for a in node.args}
    for node in sem.calls_named("FullyShardedDataParallel", "FSDP"):  # ``FSDP(model, device_id=local_rank)``: FSDP
        dev = keyword(node, "device_id")  # moves the module to that device itself
        if dev is not None and not (isinstance(dev.value, ast.Constant) and dev.value.value is None) and node.args:
            out.add(last_name(dotted(node.args[0]) or ""))
    # a function that moves one of its parameters moves whatever is passed in
    for funcs in sem.functions.values():
        for func in funcs:
            params = {a.arg for a in func.args.args + func.args.kwonlyargs}  # type: ignore[attr-defined]
            if params & out:
                out |= _passed_to(sem, func)
    return out


def _passed_to(sem: SemanticModel, func: ast.AST) -> set[str]:
    """Names passed to ``func``: by its name, or to its class for an ``__init__`` (``Trainer(net, ...)``)."""
    calls = list(sem.calls_named(func.name)) + list(sem.call_sites(func))  # type: ignore[attr-defined]
    out: set[str] = set()
    for node in calls:
        out |= {last_name(dotted(a) or "") for a in list(node.args) + [k.value for k in node.keywords]}
    return out


# ---- wrappers ---------------------------------------------------------------------------------
_PARALLEL = {"DataParallel", "DistributedDataParallel", "DDP", "FullyShardedDataParallel", "FSDP"}
_FSDP = {"FullyShardedDataParallel", "FSDP"}
RETURNS_SELF = frozenset({"train", "eval", "half", "float", "double", "bfloat16", "requires_grad_"})  # a module's own
_SAME_MODULE = frozenset({"to", "cuda"}) | RETURNS_SELF  # methods that hand back the module (moved or not)


def wrapper_prefix(sem: SemanticModel, expr: ast.AST, at: ast.AST, depth: int = 0) -> str | None:
    """The key prefix a wrapper adds to ``expr.state_dict()``: ``module.`` (DataParallel/DDP),
    ``_orig_mod.`` (torch.compile), or None for a plain module (or when unknown).

    ``m.module`` is what the wrapper wraps, which may itself be compiled (nanoGPT's
    ``raw_model = model.module if ddp else model`` around ``DDP(torch.compile(model))``).
    """
    if depth > 8:
        return None
    if isinstance(expr, ast.Call):
        q = sem.call_name(expr) or ""
        if q.rsplit(".", 1)[-1] in _PARALLEL - _FSDP:
            return "module."  # (FSDP's ``state_dict()`` hands back the model's own names: its hooks strip the wrapper's)
        if q == "torch.compile":
            return "_orig_mod."
        if method_name(expr) in _SAME_MODULE:
            return wrapper_prefix(sem, expr.func.value, at, depth + 1)  # type: ignore[attr-defined]
        handed = _handed_back_argument(sem, expr)
        return wrapper_prefix(sem, handed, at, depth + 1) if handed is not None else None
    if isinstance(expr, ast.IfExp):  # `m.module if wrapped else m`: the unwrapping branch decides
        unwrap = [b for b in (expr.body, expr.orelse) if isinstance(b, ast.Attribute) and b.attr in ("module", "_orig_mod")]
        if unwrap:
            return wrapper_prefix(sem, unwrap[0], at, depth + 1)
        return wrapper_prefix(sem, expr.body, at, depth + 1) or wrapper_prefix(sem, expr.orelse, at, depth + 1)
    if isinstance(expr, ast.Attribute) and expr.attr in ("module", "_orig_mod"):
        inner = _wrapped_argument(sem, expr.value, at, depth)
        if inner is not None and _data_parallel_beside_ddp(sem, *inner):
            return None
        return wrapper_prefix(sem, inner[0], inner[1], depth + 1) if inner is not None else None
    key = dotted(expr)
    b = sem.binding_at(key, at) if key else None
    if b is not None and (sem.in_other_branch(b.node, at) or _dead_branch(sem, b.node)):  # ``if ddp: model = DDP(model)`` / ``elif ...:
        earlier = [o for o in sem.bindings_of(key) if o.scope is b.scope and o.pos < b.pos  # model = DP(model)``
                   and not sem.in_other_branch(o.node, at)]
        b = max(earlier, key=lambda o: o.pos) if earlier else None
    if b is not None and b.is_param and isinstance(b.node, ast.FunctionDef) and "." not in key and depth < 4:
        return _prefix_every_caller_hands(sem, b.node, key, depth)  # type: ignore[arg-type]
    if b is None or b.value is None or b.index is not None or b.is_param:
        return None
    return wrapper_prefix(sem, b.value, b.node, depth + 1)


def _handed_back_argument(sem: SemanticModel, call: ast.Call) -> ast.AST | None:
    """``model = load_my_state_dict(model, sd)``, ``model = train(args, model, True)``: a function of this file whose
    every ``return`` hands back one of its parameters as it came: the argument given for it (the same object)."""
    funcs = sem.resolve(call)
    if len(funcs) != 1 or sem.class_of(funcs[0]) is not None:
        return None
    func = funcs[0]
    returns = sem.kinds.returns_of(func)
    names = {r.value.id for r in returns if isinstance(r.value, ast.Name)}
    if not returns or len(names) != 1 or not all(isinstance(r.value, ast.Name) for r in returns):
        return None
    param = names.pop()
    if param not in func_params(func) or any(  # type: ignore[arg-type]
            not b.is_param for b in sem.bindings_of(param) if sem.scope_of(b.node) is func):
        return None  # (rebound in the function: not what the caller handed)
    return call_argument(call, func, param)  # type: ignore[arg-type]


def _dead_branch(sem: SemanticModel, node: ast.AST) -> bool:
    """``node`` sits in the body of ``if compile:`` (or ``if compile and ...:``) where ``compile = False`` is the
    only binding of the name in a file that rewrites no globals (no ``exec(open("configurator.py").read())``):
    nanoGPT-style settings left off, a branch that never runs."""
    for a in sem.ancestors(node):
        if isinstance(a, ast.If) and any(s is node or sem.contains(s, node) for s in a.body) and _off(sem, a.test):
            return not any(isinstance(c.func, ast.Name) and c.func.id == "exec" or isinstance(c.func, ast.Attribute)
                           and c.func.attr == "update" and isinstance(c.func.value, ast.Call)
                           and dotted(c.func.value.func) == "globals"
                           for c in sem.calls)
    return False


def _off(sem: SemanticModel, test: ast.AST) -> bool:
    """``compile`` (or one operand of an ``and``) whose only binding, at the module's top level, is False, None or 0."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(_off(sem, v) for v in test.values)
    if not isinstance(test, ast.Name):
        return False
    binds = sem.bindings_of(test.id)
    return len(binds) == 1 and not binds[0].is_param and binds[0].index is None \
        and isinstance(v := binds[0].value, ast.Constant) and v.value in (False, None, 0) \
        and sem.function_of(binds[0].node) is None


def _prefix_every_caller_hands(sem: SemanticModel, func: ast.FunctionDef, param: str, depth: int) -> str | None:
    """``def save_best(model, path): torch.save(model.state_dict(), ...)`` that every call of this file hands the same
    wrapper (``save_best(model, "ckpt")`` after ``model = nn.DataParallel(model)``): that wrapper's prefix."""
    sites = sem.call_sites(func)
    init = func.name == "__init__" and sem.class_of(func) is not None  # ``Trainer(args, config, model, ...)`` keeping
    if not sites or sem.class_of(func) is not None and not init or any(  # ``self.model = model``
            isinstance(n, ast.Name) and n.id == param and (isinstance(up := sem.parent(n), ast.Attribute) and up.attr in (
                "module", "_orig_mod") or isinstance(up, ast.Call) and dotted(up.func) in ("hasattr", "isinstance"))
            for n in sem.local_nodes(func)):
        return None  # (``g_module = generator.module`` under ``if args.distributed:``: the helper unwraps it itself)
    found = set()
    for site in sites:
        given = call_argument(site, func, param)
        if given is None:
            return None
        found.add(wrapper_prefix(sem, given, site, depth + 1))
    return found.pop() if len(found) == 1 else None


def _data_parallel_beside_ddp(sem: SemanticModel, inner: ast.AST, at: ast.AST) -> bool:
    """``if args.n_gpu > 1: model = DataParallel(model)`` then ``if args.local_rank != -1: model = DDP(model, ...)``
    (Hugging Face's legacy example scripts, which set ``n_gpu = 1`` for a distributed run): the two wraps are the
    single-process and the multi-process way, never both, so ``model.module`` of the DDP is the model itself."""
    stmt = at if isinstance(at, (ast.Assign, ast.AnnAssign)) else sem.parent(at)
    wrap = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
    if not (isinstance(wrap, ast.Call) and (sem.call_name(wrap) or "").endswith("DistributedDataParallel")) \
            or not isinstance(inner, ast.Name):
        return False
    b = sem.binding_at(inner.id, wrap)
    if b is None or not isinstance(b.value, ast.Call) or not (sem.call_name(b.value) or "").endswith(".DataParallel"):
        return False
    guard = next((a for a in sem.ancestors(b.node) if isinstance(a, ast.If)), None)
    return guard is not None and not sem.contains(guard, wrap)


def _wrapped_argument(sem: SemanticModel, expr: ast.AST, at: ast.AST, depth: int) -> tuple[ast.AST, ast.AST] | None:
    """The module a wrapper expression was built around, and where: ``DDP(m)`` -> (m, that call)."""
    for _ in range(8 - depth):
        if isinstance(expr, ast.Call):
            q = sem.call_name(expr) or ""
            if (q.rsplit(".", 1)[-1] in _PARALLEL or q == "torch.compile") and expr.args:
                return expr.args[0], at
            return None
        key = dotted(expr)
        b = sem.binding_at(key, at) if key else None
        if b is None or b.value is None or b.index is not None or b.is_param:
            return None
        expr, at = b.value, b.node
    return None


_STATE_CALLS = ("register_buffer", "register_parameter", "Parameter", "ParameterList", "ParameterDict")
_MODULE_BASES = ("nn.Module", "torch.nn.Module", "Module", "torch.nn.modules.loss._Loss", "nn.modules.loss._Loss",
                 "_Loss")  # (bases that hold nothing themselves: torch's ``_Loss`` keeps only its ``reduction`` string)
_PARAMETER_CALLS = ("register_parameter", "Parameter", "ParameterList", "ParameterDict")


def class_holds_no_state(sem: SemanticModel, cls: ast.AST, depth: int = 0) -> bool:
    """An ``nn.Module`` subclass with no parameters, buffers, submodules or tensors (``DiceLoss`` keeping
    ``self.n_classes``): it computes on its inputs' device, so there is nothing to move. Its bases are ``nn.Module``
    or such classes of this file (``MockAccuracy(Accuracy)``, ``Accuracy(_Metric)``, ``_Metric(nn.Module)``)."""
    if not cls.bases or depth > 3 or not all(  # type: ignore[attr-defined]
            (dotted(b) or "") in _MODULE_BASES or (base := sem.calls_index.classes.get(dotted(b) or "")) is not None
            and (dotted(b) or "") in sem.module_classes and class_holds_no_state(sem, base, depth + 1)
            for b in cls.bases):  # type: ignore[attr-defined]
        return False  # a subclass of another module class: it may hold what that one holds
    for n in sem.subtree(cls):
        if isinstance(n, ast.Call) and (n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")) \
                in _STATE_CALLS:
            return False
        for target, value in _self_assignments(n):
            if _kept_result(sem, value, n):
                continue  # ``self.loss = (diff ** 2).mean()`` in forward: a result of the inputs, where they are
            if any(isinstance(v, _HELD) and not _plain_setting(sem, v, n) and not _own_attribute(v)
                   for v in _held_parts(value)):
                return False  # (``self.end = self.n_classes + self.n_boxes * 4``: settings, judged where they are set)
            if isinstance(value, ast.Name) and (b := sem.binding_at(value.id, n)) is not None and b.is_param \
                    and param_default(b.node, value.id) is None and "Callable" not in sem.segment(b.value or value) \
                    and f"{dotted(target)}(" in sem.cached(("class_text", cls), lambda: sem.segment(cls)):
                return False  # ``self.featureMaker = featureMaker``, then ``self.featureMaker(x)``: a module handed in
                # (not ``loss_fn: Callable = nn.L1Loss()``: a function or a stateless loss by default)
    return True


_WEIGHT_FIRST = frozenset({"NLLLoss", "NLLLoss2d", "CrossEntropyLoss", "BCELoss", "BCEWithLogitsLoss",
                           "MultiLabelSoftMarginLoss"})  # (torch losses whose first parameter is the class weight)


def loss_weight_params(sem: SemanticModel, cls: ast.AST) -> tuple[str, ...] | None:
    """A loss class that holds nothing but torch losses weighted by its ``__init__``'s parameters that default to None
    (``def __init__(self, weight=None): self.nll = nn.NLLLoss(weight)``): those parameters, in order; built without
    them, it holds no tensor. None when it holds something else, or no such loss."""
    if not cls.bases or not all((dotted(b) or "") in _MODULE_BASES for b in cls.bases):  # type: ignore[attr-defined]
        return None
    init = init_of(cls)
    if init is None:
        return None
    found: list[str] = []
    for n in sem.subtree(cls):
        if isinstance(n, ast.Call) and (n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")) \
                in _STATE_CALLS:
            return None
        for _, value in _self_assignments(n):
            for v in _held_parts(value):
                if not isinstance(v, _HELD) or _plain_setting(sem, v, n):
                    continue
                names = _none_weights(sem, v, init) if sem.function_of(n) is init else None
                if names is None:
                    return None
                found += [name for name in names if name not in found]
    return tuple(found) if found else None


def _none_weights(sem: SemanticModel, value: ast.AST, init: ast.AST) -> list[str] | None:
    """``nn.NLLLoss(weight, ignore_index=i)`` whose weights are parameters of ``init`` that default to None: their
    names; None for anything else."""
    if not isinstance(value, ast.Call):
        return None
    q = sem.call_name(value) or ""
    last = q.rsplit(".", 1)[-1]
    if not (q.startswith("torch.nn.") and last.endswith("Loss") or last == "NLLLoss2d"):
        return None
    given = [k.value for k in value.keywords if k.arg in ("weight", "pos_weight")]
    if any(k.arg is None for k in value.keywords) or value.args and last not in _WEIGHT_FIRST:
        return None
    given += value.args[:1]
    names = []
    for g in given:
        if not (isinstance(g, ast.Name) and (b := sem.binding_at(g.id, value)) is not None and b.is_param
                and b.node is init and isinstance(d := param_default(init, g.id), ast.Constant) and d.value is None):
            return None
        names.append(g.id)
    return names


def _kept_result(sem: SemanticModel, value: ast.AST, stmt: ast.AST) -> bool:
    """``self.loss = diff.abs().mean()`` in ``forward``: a result computed from a local name of the forward (its inputs'
    tensors), kept for later; it holds no state of its own and sits where the inputs are."""
    func = sem.function_of(stmt)
    if func is None or func.name != "forward":  # type: ignore[attr-defined]
        return False
    if _sum_of_kept_results(sem, value, func):
        return True
    if isinstance(value, (ast.Dict, ast.Tuple, ast.List)):  # ``self.last_terms = {"coord": coord.mean().detach(), ...}``
        parts = value.values if isinstance(value, ast.Dict) else value.elts
        return bool(parts) and all(p is not None and _kept_result(sem, p, stmt) for p in parts)
    root = value
    while isinstance(root, (ast.Call, ast.Attribute, ast.Subscript, ast.BinOp)):
        root = root.left if isinstance(root, ast.BinOp) else root.func if isinstance(root, ast.Call) else root.value
    if not isinstance(root, ast.Name) or root.id == "self":
        return False
    b = sem.binding_at(root.id, stmt)
    return b is not None and sem.function_of(b.node) is func or b is not None and b.node is func


def _own_attribute(value: ast.AST) -> bool:
    """``self.n_classes``: another attribute of the same object, whose own assignment says what it holds."""
    return isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == "self"


def _sum_of_kept_results(sem: SemanticModel, value: ast.AST, func: ast.AST) -> bool:
    """``self.loss_tot = self.loss_coord + self.loss_conf`` in ``forward``, each part itself set in that ``forward``
    (``self.loss_coord = self.coord_scale * mse(...)``): the total of this call's results, no state."""
    parts: list[ast.AST] = []
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, ast.BinOp) and isinstance(v.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
            todo += [v.left, v.right]
        else:
            parts.append(v)
    attrs = [dotted(v) for v in parts if not isinstance(v, ast.Constant)]
    if not attrs or not all(a and a.startswith("self.") and a.count(".") == 1 for a in attrs):
        return False
    set_here = {dotted(t) for n in sem.local_nodes(func) for t, _ in _self_assignments(n)}
    return all(a in set_here for a in attrs)


def holds_plain_tensors_only(sem: SemanticModel, cls: ast.AST) -> bool:
    """``class_holds_no_state`` but for plain tensor attributes, which ``.to()`` does not move either: ``self.pool =
    nn.AdaptiveAvgPool2d(32)``, ``self.goal = self.pool(goal)`` (a loss keeping its target; TD203 tells of the
    tensor)."""
    if not cls.bases or not all((dotted(b) or "") in _MODULE_BASES for b in cls.bases):  # type: ignore[attr-defined]
        return False
    plain, settings, calls = False, set(), []
    for n in sem.subtree(cls):
        if isinstance(n, ast.Call) and (n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")) \
                in _STATE_CALLS:
            return False
        for target, value in _self_assignments(n):
            for v in _held_parts(value):
                if not isinstance(v, _HELD) or _plain_setting(sem, v, n) or _parameter_free_transform(sem, v) \
                        or isinstance(v, ast.Call) and (sem.call_name(v) or "").startswith("torchvision.transforms."):
                    settings.add(dotted(target))  # (``T.Resize(size)``: a transform that holds no parameter)
                elif _plain_tensor(sem, v):
                    plain = True
                elif isinstance(v, ast.Call) and (dotted(v.func) or "").startswith("self."):
                    calls.append(dotted(v.func))  # (what a stateless part of its own computes: a tensor)
                else:
                    return False
    return (plain or bool(calls)) and all(c in settings for c in calls)


def _held_parts(value: ast.AST) -> list[ast.AST]:
    """What an attribute is given: ``self.layers + [Layer(d, d2).to(device)]`` gives the list it appends; other
    arithmetic (``self.w += x.t() @ err``, a hand-written update) gives a tensor, no layer."""
    if isinstance(value, ast.BinOp):
        return [value.left, value.right] if isinstance(value.op, ast.Add) else []
    return [value]


_HELD = (ast.Call, ast.ListComp, ast.List, ast.Dict, ast.Name, ast.Attribute)


def _self_assignments(n: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
    """(target, value) pairs of ``self.x = ...`` in the statement ``n``, unpacking ``self.enc, self.dec =
    nn.Linear(4, 8), nn.Linear(8, 4)`` element by element."""
    if isinstance(n, ast.AugAssign) and (dotted(n.target) or "").startswith("self."):
        return [(n.target, n.value)]  # ``self.layers += [Layer(d, d2).cuda()]``: a list it fills with layers
    if not (isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None):
        return []
    out = []
    for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
        if isinstance(t, (ast.Tuple, ast.List)):
            same = isinstance(n.value, (ast.Tuple, ast.List)) and len(n.value.elts) == len(t.elts)
            out += [(e, n.value.elts[i] if same else n.value) for i, e in enumerate(t.elts)  # type: ignore[union-attr]
                    if (dotted(e) or "").startswith("self.")]
        elif (dotted(t) or "").startswith("self."):
            out.append((t, n.value))
    return out


def class_holds_nothing(sem: SemanticModel, cls: ast.AST, depth: int = 0) -> bool:
    """``class_holds_no_state``, or every submodule ``__init__`` builds is of such a class (of this file, or of
    another module of the project): ``self.pick = SoftTopK(k, 0.5)`` keeping two numbers."""
    if class_holds_no_state(sem, cls) or holds_plain_tensors_only(sem, cls):
        return True
    parts = class_parts(sem, cls) if depth < 3 else None
    if not parts:
        return False
    for written in parts:
        inner = sem.calls_index.classes.get(written)
        if inner is not None:
            if written not in sem.module_classes or not class_holds_nothing(sem, inner, depth + 1):
                return False
        elif not (sem.project is not None and sem.project.class_stateless(sem, written)):  # type: ignore[attr-defined]
            return False
    return True


def class_has_no_parameters(sem: SemanticModel, cls: ast.AST, depth: int = 0) -> bool:
    """An ``nn.Module`` subclass that may keep buffers and tensors but no parameter and no layer that has one
    (``Audio2Mel`` registering a window and a mel basis): its forward records no graph unless its input
    requires grad. Its bases are ``nn.Module`` or such classes of this file (``FCLegendre(FourierContinuation)``)."""
    if not cls.bases or depth > 3:  # type: ignore[attr-defined]
        return False
    for base in cls.bases:  # type: ignore[attr-defined]
        written = dotted(base) or ""
        if written in _MODULE_BASES:
            continue
        inner = sem.calls_index.classes.get(written)
        if inner is None or written not in sem.module_classes or not class_has_no_parameters(sem, inner, depth + 1):
            return False
    asked = None
    for n in sem.subtree(cls):
        if isinstance(n, ast.Call) and (n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")) \
                in _PARAMETER_CALLS:
            return False
        for target, value in _self_assignments(n):
            if any(isinstance(v, _HELD) and not _plain_setting(sem, v, n) and not _plain_tensor(sem, v)
                   and not _parameter_free_transform(sem, v) and not _activation_kept(sem, v, n) for v in _held_parts(value)):
                return False
            if isinstance(value, ast.Name) and isinstance(target, ast.Attribute):
                asked = _parameters_asked(sem, cls) if asked is None else asked
                if target.attr in asked:
                    return False  # (``self.net_t = net_t``, then ``self.net_t.parameters()``: a layer handed in)
    return True


_ASKS_PARAMETERS = frozenset({"parameters", "named_parameters", "children", "named_children", "modules"})


def _parameters_asked(sem: SemanticModel, cls: ast.AST) -> frozenset[str]:
    """The attributes ``a`` of which the class asks ``self.a.parameters()`` (or its children, its modules)."""
    return frozenset(n.func.value.attr for n in sem.subtree(cls) if isinstance(n, ast.Call)
                     and isinstance(n.func, ast.Attribute) and n.func.attr in _ASKS_PARAMETERS
                     and isinstance(n.func.value, ast.Attribute) and isinstance(n.func.value.value, ast.Name)
                     and n.func.value.value.id == "self")


def _activation_kept(sem: SemanticModel, value: ast.AST, stmt: ast.AST) -> bool:
    """``self.z2 = self.sigmoid(self.z)`` in ``forward``: an activation kept for a hand-written backward, no layer (a
    layer made there lazily is a class's: ``self.fc = nn.Linear(n, 1)``)."""
    func = sem.function_of(stmt)
    return func is not None and func.name == "forward" and isinstance(value, ast.Call) \
        and not (dotted(value.func) or "").rsplit(".", 1)[-1][:1].isupper()


def _parameter_free_transform(sem: SemanticModel, value: ast.AST) -> bool:
    """``torchaudio.transforms.MelSpectrogram(...)``: a feature transform of torchaudio, which keeps buffers (a
    window, a filter bank) and no parameter; an augmentation of ``kornia.augmentation``; an ``nn.Sequential`` of
    such transforms and stateless layers (``nn.Sequential(nn.ReplicationPad2d(4), kornia.augmentation.RandomCrop(s))``)."""
    if not isinstance(value, ast.Call):
        return False
    q = sem.call_name(value) or ""
    if q.startswith(("torchaudio.transforms.", "kornia.augmentation.")):
        return True
    if q == "torch.nn.Sequential" and value.args and not value.keywords:
        for part in value.args:
            inner = sem.call_name(part) or "" if isinstance(part, ast.Call) else ""
            if not (inner.startswith("torch.nn.") and inner.rsplit(".", 1)[-1] in STATELESS_LAYERS) \
                    and not (inner != q and _parameter_free_transform(sem, part)):
                return False
        return True
    return False


def _plain_tensor(sem: SemanticModel, value: ast.AST) -> bool:
    """``torch.hann_window(n)``, ``torch.from_numpy(basis).float()``: a tensor made by torch, no layer."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in (
            "float", "double", "half", "long", "contiguous", "clone", "detach", "t", "view", "reshape", "unsqueeze"):
        value = value.func.value
    q = sem.call_name(value) or "" if isinstance(value, ast.Call) else ""
    return q.startswith("torch.") and q.count(".") == 1 and q[6:7].islower()


def built_nowhere(sem: SemanticModel, cls: ast.AST) -> bool:
    """In a project run, the model class ``cls`` is built nowhere: its module names it only inside it, and the modules
    of the project that import the module never name it (Time-LLM's ``ProbAttention`` beside the attention layers its
    models use)."""
    return sem.project is not None and all(sem.class_of(r) is cls for r in sem.reads_of(cls.name)) \
        and sem.project.uncalled_helper(sem, cls)  # type: ignore[attr-defined]


def model_has_no_parameters(sem: SemanticModel, expr: ast.AST, at: ast.AST) -> bool:
    """The model ``expr`` evaluates to has no parameter (a class of this file or of another module of the project
    that keeps only buffers, a stateless torch layer, a norm layer told ``affine=False``)."""
    if model_is_stateless(sem, expr, at):
        return True
    value = construction(sem, expr, at)
    if value is None:
        return False
    q = sem.call_name(value) or ""
    last = q.rsplit(".", 1)[-1]
    if _parameter_free_transform(sem, value):
        return True
    if q.startswith("torch.nn.") and (last.startswith(("BatchNorm", "InstanceNorm")) or last == "LayerNorm"):
        flag = next((k.value for k in value.keywords if k.arg in ("affine", "elementwise_affine")), None)
        return is_false(flag) if flag is not None else last.startswith("InstanceNorm")  # (InstanceNorm: off)
    cls = sem.calls_index.classes.get(q)
    if cls is not None:
        return q in sem.module_classes and class_has_no_parameters(sem, cls)
    written = dotted(value.func)
    return bool(sem.project is not None and written and sem.project.class_paramless(sem, written))  # type: ignore[attr-defined]


def init_params(cls: ast.AST) -> tuple[str, ...]:
    """The parameters of the class's ``__init__`` after ``self``, in order (to read a construction's arguments)."""
    init = init_of(cls)
    return tuple(a.arg for a in init.args.args[1:]) if init is not None else ()  # type: ignore[attr-defined]


def init_of(cls: ast.AST) -> ast.AST | None:
    return next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)  # type: ignore[attr-defined]


_STAYS_WHERE_IT_IS = frozenset({"unsqueeze", "squeeze", "view", "reshape", "permute", "transpose", "contiguous", "float",
                                "half", "double", "long", "clone", "detach", "repeat", "expand"})


def submodule_names(sem: SemanticModel, cls: ast.AST) -> frozenset[str]:
    """The attributes the class sets to a layer of ``torch.nn`` or a model of its own (``self.decoder = nn.Sequential(
    ...)``, ``self.encoder = Encoder(...)``), in any of its methods."""
    out = set()
    for n in sem.subtree(cls):
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and (
                sem.call_kind(n.value, n) == "model" or (sem.call_name(n.value) or "").startswith("torch.nn.")):
            out.update(t.attr for t in n.targets if isinstance(t, ast.Attribute) and dotted(t.value) == "self")
    return frozenset(out)


def class_moves_itself(sem: SemanticModel, cls: ast.AST) -> bool:
    """The class's ``__init__`` moves itself or its parts: ``self.to(device)``, ``self.fc = self.fc.cuda()``,
    ``self.fc = nn.Linear(16, 8).cuda(rank)``, or a tensor moved first and then kept
    (``init = init.cuda()`` ... ``self.transitions = nn.Parameter(init)``)."""
    init = init_of(cls)
    if init is None:
        return False
    moved_locals: set[str] = set()
    for n in sem.local_nodes(init):
        if isinstance(n, ast.Call) and sem.is_device_move(n) and isinstance(n.func, ast.Attribute):
            if (dotted(n.func.value) or "").split(".")[0] == "self":
                return True
            if isinstance(n.func.value, ast.Name) and isinstance(sem.parent(n), ast.Expr) \
                    and _of_own_parts(sem, n.func.value, init, 0):
                return True  # ``for module in group: module.to(device)`` over groups of its layers: model parallel
            while isinstance(up := sem.parent(n), ast.Attribute) and up.attr in _STAYS_WHERE_IT_IS \
                    and isinstance(call := sem.parent(up), ast.Call) and call.func is up:
                n = call  # (``torch.FloatTensor(k).cuda().unsqueeze(0).unsqueeze(0)``: still on the device)
            stmt = sem.parent(n)
            if isinstance(stmt, ast.Call) and (sem.call_name(stmt) or "").endswith("nn.Parameter") and stmt.args \
                    and stmt.args[0] is n:  # ``self.scale = nn.Parameter(torch.tensor(5.0).to(dev))``
                stmt = sem.parent(stmt)
            if isinstance(stmt, ast.Assign):
                targets = [dotted(t) or "" for t in stmt.targets]
                if any(t.startswith("self.") for t in targets):
                    return True
                moved_locals.update(t for t in targets if t and "." not in t)
        elif moved_locals and isinstance(n, ast.Assign) and any((dotted(t) or "").startswith("self.") for t in n.targets) \
                and any(isinstance(v, ast.Name) and v.id in moved_locals for v in sem.subtree(n.value)):
            return True
        elif isinstance(n, ast.Assign) and any((dotted(t) or "").startswith("self.") for t in n.targets) \
                and _moved_by_own_method(sem, cls, n.value):
            return True  # ``self.mask = self._get_correlated_mask()``, whose ``return mask.to(self.device)`` moves it
    return False


def _of_own_parts(sem: SemanticModel, expr: ast.AST, init: ast.AST, depth: int) -> bool:
    """``expr`` in ``__init__`` is drawn from the module's own parts: ``module`` of ``for module in group``, of
    ``for group, idx in zip(np.array_split(modules, n), ...)``, of ``modules = [self.embeddings] + [e for e in
    self.encoders] + [self.head]``."""
    if depth > 10:
        return False
    if isinstance(expr, ast.Attribute):
        return (dotted(expr) or "").startswith("self.")
    if isinstance(expr, (ast.ListComp, ast.GeneratorExp)):
        return any(_of_own_parts(sem, g.iter, init, depth + 1) for g in expr.generators)
    if isinstance(expr, ast.Call):  # (``zip(groups, range(n))``, ``np.array_split(modules, n)``)
        return any(_of_own_parts(sem, a, init, depth + 1) for a in expr.args)
    if isinstance(expr, (ast.BinOp, ast.List, ast.Tuple)):  # (``[self.embeddings] + [...] + [self.head]``)
        parts = [expr.left, expr.right] if isinstance(expr, ast.BinOp) else expr.elts
        return any(_of_own_parts(sem, p, init, depth + 1) for p in parts)
    if not isinstance(expr, ast.Name):
        return False
    b = sem.binding_at(expr.id, expr)
    if b is None or b.is_param or sem.function_of(b.node) is not init and b.node is not init:
        return False
    if b.value is not None:
        return b.node is not expr and _of_own_parts(sem, b.value, init, depth + 1)
    loop = sem.parent(b.node)
    while loop is not None and not isinstance(loop, (ast.For, ast.comprehension)):
        loop = sem.parent(loop)
    return loop is not None and _of_own_parts(sem, loop.iter, init, depth + 1)  # type: ignore[attr-defined]


_KEEPS_DEVICE = frozenset({"type", "float", "bool", "long", "int", "half", "double", "contiguous", "view", "reshape"})


def _moved_by_own_method(sem: SemanticModel, cls: ast.AST, value: ast.AST) -> bool:
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in _KEEPS_DEVICE \
            and not (value.func.attr == "type" and any("Tensor" in (dotted(a) or "Tensor") for a in value.args)):
        value = value.func.value  # (``self._get_correlated_mask().type(torch.bool)``: a cast to a dtype keeps the device;
        # ``.type(torch.FloatTensor)`` is a host type)
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and isinstance(value.func.value, ast.Name)
            and value.func.value.id == "self"):
        return False
    method = next((f for f in getattr(cls, "body", ()) if isinstance(f, ast.FunctionDef) and f.name == value.func.attr), None)
    returns = sem.kinds.returned_values(method) if method is not None else None
    return bool(returns) and all(sem.value_is_moved(r) for r in returns)


def class_parts(sem: SemanticModel, cls: ast.AST) -> tuple[str, ...] | None:
    """The classes of the submodules ``__init__`` builds, as written (``self.enc = Encoder(cfg)``,
    ``self.crf = crf.CRF(n)``), when nothing else it keeps holds state (settings and stateless layers aside):
    None when it keeps a torch layer, a parameter or a tensor of its own, or has no ``__init__``."""
    init = init_of(cls)
    if init is None or len(cls.bases) != 1 or (dotted(cls.bases[0]) or "") not in _MODULE_BASES:  # type: ignore[attr-defined]
        return None
    parts: list[str] = []
    for n, value in [(n, v) for n in sem.local_nodes(init) for _, v in _self_assignments(n)]:
        if isinstance(value, ast.Call) and (sem.call_name(value) or "") in ("torch.nn.ModuleList", "torch.nn.Sequential"):
            if value.keywords or len(value.args) > 1:
                return None
            value = value.args[0] if value.args else ast.List(elts=[])  # ``nn.ModuleList()``: filled below
        if isinstance(value, ast.List | ast.ListComp | ast.Dict):  # ``nn.ModuleList([Band(dev, n) for n in sizes])``,
            # ``+= [...]``, ``{"dur": Cost()}``
            made = value.elts if isinstance(value, ast.List) else value.values if isinstance(value, ast.Dict) \
                else [value.elt]
            written_all = [dotted(e.func) or "" if isinstance(e, ast.Call) else "" for e in made]
            if not all(w and w.rsplit(".", 1)[-1][:1].isupper() and not (sem.call_name(e) or "").startswith("torch")
                       for w, e in zip(written_all, made)):
                return None
            parts.extend(written_all)
            continue
        if isinstance(value, ast.Call):
            q = sem.call_name(value) or ""
            written = dotted(value.func) or ""
            if q.startswith("torch.nn.") or q.rsplit(".", 1)[-1] in _STATE_CALLS:
                if not _plain_setting(sem, value, n):
                    return None
            elif not q.startswith("torch") and written and written.rsplit(".", 1)[-1][:1].isupper():
                parts.append(written)
            elif sem.expr_kind(value, n) in ("model", "tensor", "wrapper"):
                return None
        elif isinstance(value, (ast.Name, ast.Attribute)) and sem.expr_kind(value, n) in ("model", "tensor", "wrapper"):
            return None
        elif isinstance(value, (ast.List, ast.ListComp, ast.Dict, ast.Subscript)):
            return None
    return tuple(parts)


_NUMBER_CALLS = frozenset({"max", "min", "abs", "float", "int", "round", "pow", "len", "bool"})


LEGACY_TENSORS = frozenset({"Tensor", "FloatTensor", "LongTensor", "IntTensor", "ByteTensor", "BoolTensor",
                            "DoubleTensor", "HalfTensor"})  # (torch's legacy constructors: CPU tensors only)
LEGACY_DTYPES = {"LongTensor": "long", "ByteTensor": "uint8", "DoubleTensor": "float64", "IntTensor": "int32",
                 "BoolTensor": "bool", "HalfTensor": "float16"}  # (FloatTensor, Tensor: the default float32)


_NUMBER_CONSTANTS = frozenset({"numpy.inf", "numpy.nan", "numpy.pi", "numpy.e", "math.inf", "math.nan", "math.pi", "math.e",
                               "math.tau"})


def _plain_setting(sem: SemanticModel, value: ast.AST, at: ast.AST) -> bool:
    """``self.n_classes = n_classes``: a parameter's Python value (a setting), not a layer or a tensor; or a torch
    layer that holds nothing either (``self.act = nn.Softplus()``)."""
    if isinstance(value, (ast.List, ast.Tuple)):  # ``self.variance = [0.1, 0.2]``, ``self.funcs = [torch.sin, torch.cos]``
        return all(isinstance(e, ast.Constant) or isinstance(e, ast.Attribute) and (sem.qualname(e) or "").startswith(
            "torch.") and not (sem.qualname(e) or "").startswith("torch.nn.") for e in value.elts)
    if isinstance(value, ast.Name):
        if value.id in sem.bindings.functions and value.id not in sem.calls_index.classes:
            return True  # ``self.loss_func = calc_celoss``: a function of the module, which holds nothing
        b = sem.binding_at(value.id, at)
        return b is not None and b.is_param and sem.expr_kind(value, at) not in ("model", "tensor", "wrapper")
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Call):
        return _plain_setting(sem, value.value, at)  # ``Path(__file__).parent``: a part of a setting
    if isinstance(value, ast.Attribute) and (sem.qualname(value) or "") in _NUMBER_CONSTANTS:
        return True  # ``self.compared_length = numpy.inf``
    if isinstance(value, ast.ListComp):  # ``[Params(window=w, hop=w // 4) for w in sizes]``: records of settings
        return _namedtuple_call(sem, value.elt, at)
    if isinstance(value, ast.Call):
        if _namedtuple_call(sem, value, at):
            return True
        q = sem.call_name(value) or ""
        last = q.rsplit(".", 1)[-1]
        if q in ("list", "tuple", "sorted") and len(value.args) == 1 and isinstance(value.args[0], ast.Name):
            return _plain_setting(sem, value.args[0], at)  # ``self.sizes = list(sizes)``: a copy of a setting
        if q in ("list", "tuple", "sorted") and len(value.args) == 1 and isinstance(value.args[0], ast.Call) \
                and (sem.call_name(value.args[0]) or "").startswith(("itertools.", "range")):
            return True  # ``self.perms = list(itertools.permutations(torch.arange(n)))``: index tuples, no layer
        if q in _NUMBER_CALLS or q.startswith("math."):
            return True  # ``self.lamb = max(self.floor, self.base / (1 + 0.1 * self.it))``: a Python number
        if q in ("pathlib.Path", "os.path.join", "os.path.expanduser", "os.path.abspath", "str"):
            return True  # ``self.matrices_path = Path(matrices_path)``: where to read from, a setting
        if q.startswith("torch.nn.") and last.endswith("Loss"):  # ``nn.MSELoss(reduction="none")``; a class weight
            return not value.args and not any(k.arg in ("weight", "pos_weight") or k.arg is None  # is a buffer
                                              for k in value.keywords)
        if q.startswith("torch.") and q.count(".") == 1 and (last in FACTORIES or last in LEGACY_TENSORS):
            return True  # ``self.freq_bands = torch.linspace(...)``, ``torch.LongTensor(perms)``: a plain attribute,
            # which ``.to()`` leaves alone
        return q.startswith("torch.nn.") and last in STATELESS_LAYERS
    return False


def _namedtuple_call(sem: SemanticModel, node: ast.AST, at: ast.AST) -> bool:
    """``Params(window=w)`` where ``Params = namedtuple("Params", [...])`` before it: a record of settings."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        return False
    b = sem.binding_at(node.func.id, at)
    return b is not None and isinstance(b.value, ast.Call) and (sem.call_name(b.value) or "").endswith("namedtuple")


def model_is_stateless(sem: SemanticModel, expr: ast.AST, at: ast.AST) -> bool:
    """The model ``expr`` evaluates to holds no parameters, buffers, submodules or tensors (``nn.SiLU()``, an
    in-file ``nn.Module`` subclass that only computes in ``forward``, such a class of another module of the
    project): its output is computed from its inputs alone, on their device."""
    value = construction(sem, expr, at)
    if value is None:
        return False
    q = sem.call_name(value) or ""
    if q.startswith("torch.nn."):
        return q.rsplit(".", 1)[-1] in STATELESS_LAYERS
    cls = sem.calls_index.classes.get(q)
    if cls is not None:
        return q in sem.module_classes and class_holds_nothing(sem, cls)
    written = dotted(value.func)
    return bool(sem.project is not None and written and sem.project.class_stateless(sem, written))  # type: ignore[attr-defined]
