"""Where a file hard-codes a CUDA device: ``torch.device("cuda")``, ``.cuda()``, ``.to("cuda:1")``,
``device="cuda"`` keywords, legacy ``torch.cuda.FloatTensor`` types, Lightning's ``accelerator="gpu"``/``gpus=``;
and receivers whose ``.cuda()`` is no tensor's or module's (``cupy.cuda()``, a plain class's own)."""

from __future__ import annotations

import ast

from torchdoctor.check.astutil import call_argument, dotted, func_params, param_default, string_value
from torchdoctor.check.patterns import lazy
from torchdoctor.check.semantic.model import SemanticModel
from torchdoctor.record import FrozenRecord

__all__ = ["CUDA_DEVICE", "CUDA_TEMPLATES", "CudaSite", "cuda_site", "cuda_sites", "cuda_string", "on_module",
           "some_gpus"]

CUDA_DEVICE = lazy(r"cuda(:\d+)?")


# Calls that take `device=` but fall back by themselves (autocast, GradScaler warn and disable)
# or hold configuration rather than placing anything.
_QUIET_DEVICE_KW = lazy(
    r"(^torch\.(cuda|amp|autocast|GradScaler|cpu)\b)|(^dict$)|(Config|Args|Arguments|Namespace|set_defaults|add_argument)$"
)


CUDA_TEMPLATES = ("cuda:{}", "cuda:{0}", "cuda:{:d}", "cuda:%d", "cuda:%s", "cuda:%i")  # an indexed CUDA device filled in
# by .format() or %


def cuda_string(node: ast.AST | None) -> tuple[bool, bool]:
    """(is a literal CUDA device string, names a device index) for ``"cuda"``, ``"cuda:1"``, ``f"cuda:{rank}"``."""
    text = string_value(node)
    if text is not None:
        m = CUDA_DEVICE.fullmatch(text.strip())
        return (m is not None, bool(m and m.group(1)))
    if isinstance(node, ast.JoinedStr) and node.values:
        head = string_value(node.values[0])
        if head is not None and head.startswith("cuda"):
            return (head in ("cuda", "cuda:"), len(node.values) > 1)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format" \
            and string_value(node.func.value) in CUDA_TEMPLATES and node.args \
            or isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and string_value(node.left) in CUDA_TEMPLATES \
            or isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and string_value(node.left) == "cuda:":
        return (True, True)  # ``torch.device("cuda:{}".format(gpu_ids[0]))``, ``"cuda:%d" % rank``, ``"cuda:" + str(i)``
    return (False, False)


# ---- hard-coded CUDA sites -----------------------------------------------------------------------
class CudaSite(FrozenRecord):
    """One place where a CUDA device is hard-coded."""

    __slots__ = ("node", "text", "indexed")
    node: ast.AST
    text: str  # how the message names it: `torch.device("cuda")`, `model.cuda()`
    indexed: bool  # names a device index (`"cuda:1"`, `.cuda(rank)`, `torch.device("cuda", rank)`)

    def __init__(self, node: ast.AST, text: str, indexed: bool) -> None:
        self._fill(node, text, indexed)


def _short(sem: SemanticModel, node: ast.AST) -> str:
    from torchdoctor.check.semantic.text import short

    return short(sem.segment(node), 60)


def cuda_site(sem: SemanticModel, node: ast.AST) -> CudaSite | None:
    """The hard-coded CUDA device at ``node``, if ``node`` is such a site."""
    if isinstance(node, ast.Call):
        return _call_site(sem, node)
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and _device_target(node):
        is_cuda, indexed = cuda_string(_fixed_choice(sem, node.value))
        if is_cuda and sem.frame(node).kind != "class":
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            return CudaSite(node.value, f"{_short(sem, target)} = {sem.segment(node.value)}", indexed)  # type: ignore[arg-type]
    return None


def _fixed_choice(sem: SemanticModel, expr: ast.AST | None) -> ast.AST | None:
    """``"cuda" if cuda else "cpu"`` where ``cuda = True`` is the file's only binding of the flag, at its top level (a
    notebook's settings cell), or ``"cuda" if torch.cuda.is_available else "cpu"`` (not called): the choice always
    gives ``"cuda"``. Any other expression: itself."""
    if isinstance(expr, ast.IfExp) and sem.qualname(expr.test) == "torch.cuda.is_available":
        return expr.body  # ``"cuda" if torch.cuda.is_available else "cpu"``: the function object, never called, is true
    if not (isinstance(expr, ast.IfExp) and isinstance(expr.test, ast.Name)):
        return expr
    bindings = sem.bindings_of(expr.test.id)
    if len(bindings) != 1 or bindings[0].is_param or bindings[0].index is not None \
            or not (isinstance(v := bindings[0].value, ast.Constant) and v.value is True) \
            or sem.frame(bindings[0].node).kind != "module" \
            or any(expr.test.id in g.names for g in sem.of_type(ast.Global)):  # type: ignore[attr-defined]
        return expr
    return expr.body


def _device_target(node: ast.Assign | ast.AnnAssign) -> bool:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    for t in targets:
        name = t.id if isinstance(t, ast.Name) else t.attr if isinstance(t, ast.Attribute) else ""
        if "device" in name.lower() or name.lower() == "dev":
            return True
    return False


_LEGACY_TYPES = ("FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor", "LongTensor", "IntTensor", "ShortTensor",
                 "CharTensor", "ByteTensor", "BoolTensor")


def _legacy_cuda_type(name: str | None) -> bool:
    """``torch.cuda.FloatTensor`` and the other legacy CUDA tensor types."""
    return bool(name) and name.startswith("torch.cuda.") and name[11:] in _LEGACY_TYPES  # type: ignore[union-attr]


def _call_site(sem: SemanticModel, call: ast.Call) -> CudaSite | None:
    name = sem.call_name(call)
    func = call.func
    if _legacy_cuda_type(name):  # ``torch.cuda.FloatTensor(n, c)``
        return CudaSite(call, f"{sem.segment(func)}(...)" if call.args else f"{sem.segment(func)}()", False)
    if isinstance(func, ast.Attribute) and func.attr == "type" and len(call.args) == 1 \
            and _legacy_cuda_type(sem.qualname(call.args[0])):  # ``A.type(torch.cuda.FloatTensor)``: a copy there
        return CudaSite(call, f".type({sem.segment(call.args[0])})", False)
    if name == "torch.device":
        first = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "type"), None)
        if isinstance(first, ast.Name) and (b := sem.binding_at(first.id, call)) is not None and not b.is_param \
                and b.index is None and isinstance(b.value, ast.BinOp):
            first = b.value  # ``cudaid = "cuda:" + str(args.dev)``, then ``torch.device(cudaid)``
        is_cuda, indexed = cuda_string(_fixed_choice(sem, first))
        if is_cuda:
            return CudaSite(call, _short(sem, call), indexed or len(call.args) > 1
                            or any(k.arg == "index" for k in call.keywords))
        return None
    if name and name.rsplit(".", 1)[-1] == "init_device_mesh":  # torch.distributed.device_mesh: its device type
        first = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "device_type"), None)
        is_cuda, _ = cuda_string(first)
        return CudaSite(call, f"init_device_mesh({sem.segment(first)}, ...)", False) if is_cuda else None  # type: ignore[arg-type]
    if isinstance(func, ast.Attribute) and func.attr == "cuda":
        if sem.qualname(func.value) == "torch" or on_module(sem, func.value) or dotted(func.value) == "self" \
                and sem.resolve(call):
            return None  # (``self.cuda(*items)`` of a class whose own ``def cuda`` moves to its configured device)
        args = "(...)" if call.args or call.keywords else "()"
        segment = sem.segment(call)  # a long chain is cut at its head: keep the .cuda() the finding is about
        text = segment if ("\n" not in segment and len(segment) <= 60) or (
            "\n" not in segment and not isinstance(func.value, (ast.Call, ast.Name, ast.Attribute, ast.Subscript))) \
            else f"{_short(sem, func.value)}.cuda{args}"
        return CudaSite(call, text, bool(call.args) or any(k.arg == "device" for k in call.keywords))
    if isinstance(func, ast.Attribute) and func.attr == "to":
        for arg in list(call.args[:1]) + [k.value for k in call.keywords if k.arg == "device"]:
            is_cuda, indexed = cuda_string(arg)
            if is_cuda:
                return CudaSite(call, _short(sem, call), indexed)
        return None
    if name and name.rsplit(".", 1)[-1] in ("Trainer", "Fabric"):  # Lightning: accelerator="gpu" fails without one
        acc = next((k.value for k in call.keywords if k.arg == "accelerator"), None)
        if isinstance(acc, ast.Constant) and acc.value in ("cuda", "gpu"):
            return CudaSite(acc, f"accelerator={sem.segment(acc)}", False)
        gpus = next((k.value for k in call.keywords if k.arg == "gpus"), None)
        if gpus is not None and some_gpus(gpus):  # Lightning < 2.0: ``Trainer(gpus=1)``, ``gpus=[0]``, ``gpus="0,1"``
            return CudaSite(gpus, f"gpus={sem.segment(gpus)}", False)
        return None
    if name and _QUIET_DEVICE_KW.search(name):
        return None
    for kw in call.keywords:
        if kw.arg in ("device", "map_location", "device_map"):  # (``device_map="cuda"``: Hugging Face loading)
            is_cuda, indexed = cuda_string(kw.value)
            if is_cuda and not (kw.arg == "map_location" and _takes_no(sem, call, kw.arg)):
                return CudaSite(kw.value, f"{kw.arg}={sem.segment(kw.value)}", indexed)
    return None


def _takes_no(sem: SemanticModel, call: ast.Call, param: str) -> bool:
    """``call`` runs a function of the project (this module's or another's) that has no parameter ``param`` and no
    ``**kwargs``: ``load_file(path, map_location="cuda")`` of a pickle helper never hands it to torch."""
    funcs = sem.resolve(call)
    if funcs:
        return all(isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.args.kwarg is None and param not in
                   {a.arg for a in f.args.posonlyargs + f.args.args + f.args.kwonlyargs} for f in funcs)
    found = sem.project.function_for(sem, call) if sem.project is not None else None  # type: ignore[attr-defined]
    params = getattr(found, "params", None)
    return params is not None and param not in params and not any(p in ("kwargs", "kw", "kwds", "kwarg", "options")
                                                                  for p in params)  # (a ``**kwargs`` may pass it on)


def cuda_sites(sem: SemanticModel) -> list[CudaSite]:
    """Every hard-coded CUDA device of the file, in source order."""

    def compute() -> list[CudaSite]:
        candidates = set(sem.calls_named("device", "cuda", "to", "type", "init_device_mesh", *_LEGACY_TYPES)) \
            | set(sem.calls_with_keyword("device")) \
            | set(sem.calls_with_keyword("map_location")) | set(sem.calls_with_keyword("accelerator")) \
            | set(sem.calls_with_keyword("device_map")) | set(sem.calls_with_keyword("gpus"))
        nodes = [*candidates, *sem.of_type(ast.Assign, ast.AnnAssign)]
        nodes.sort(key=sem.index.pos.__getitem__)
        return [s for n in nodes if (s := cuda_site(sem, n)) is not None and not _default_or_override(sem, n)
                and not _never_read(sem, n)]

    return sem.cached("cuda_sites", compute)  # type: ignore[no-any-return]


def _never_read(sem: SemanticModel, node: ast.AST) -> bool:
    """``device = f'cuda'`` at a notebook's top that nothing reads (the model is placed with ``device_map="auto"``):
    a binding that places nothing."""
    if not isinstance(node, ast.Assign) or len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
        return False
    name = node.targets[0].id
    if sem.frame(node).kind != "module" or sem.reads_of(name):
        return False
    return sem.path.endswith(".ipynb") or sem.project is None or not sem.project.imported_by_others(sem)  # type: ignore[attr-defined]
    # (a settings module's ``device = "cuda"`` is read by the modules that import it)


def _default_or_override(sem: SemanticModel, node: ast.AST) -> bool:
    """A parameter default (``def f(device=torch.device("cuda"))``: the caller chooses), or code inside an
    override of ``cuda``/``to``/``_apply`` (``def cuda(self, device=None): return super().cuda(device)``)."""
    func = sem.function_of(node)
    if func is not None and func.name in ("cuda", "to", "_apply", "cpu"):
        return True
    for a in sem.ancestors(node):
        if isinstance(a, ast.arguments):
            return not _default_no_call_overrides(sem, node, a)
        if isinstance(a, (ast.Compare, ast.Assert)):
            return True  # a comparison (``assert x.device == torch.device("cuda")``): no placement
        if isinstance(a, ast.stmt):
            return False
    return False


def _default_no_call_overrides(sem: SemanticModel, node: ast.AST, args: ast.arguments) -> bool:
    """``def train(dl, model, loss_fn, optimizer, device=torch.device("cuda:0"))`` called in the file, by every call
    without a device, and by no other module with one: the default is the only device the program uses (a default
    some call overrides, or one of a function nothing here calls, is the callers' choice)."""
    func = sem.parent(args)
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) or sem.class_of(func) is not None:
        return False
    param = next((p for p in func_params(func) if (d := param_default(func, p)) is not None and sem.contains(d, node)),
                 None)
    if param is None:
        return False
    sites = sem.call_sites(func)
    if not sites or any(call_argument(s, func, param) is not None or any(k.arg is None for k in s.keywords)
                        or any(isinstance(a, ast.Starred) for a in s.args) for s in sites):
        return False
    return sem.project is None or not sem.project.callers_pass(sem, func, param)  # type: ignore[attr-defined]


def on_module(sem: SemanticModel, receiver: ast.AST) -> bool:
    """``tvm.cuda()``, ``cupy.cuda...``: a function of an imported module, not a tensor's method;
    or ``settings.cuda()`` on an instance of a plain in-file class that defines its own ``cuda``, or of a class of
    another module of the project that is no ``nn.Module`` (``predictor = Predictor(...)``: it has a ``cuda`` of its
    own, or the call fails; its ``.to(device)`` may not exist)."""
    node = receiver
    while isinstance(node, ast.Attribute):
        node = node.value
    if isinstance(node, ast.Name) and node.id in sem.names.modules:
        b = sem.binding_at(node.id, receiver)  # ``import model`` then ``model = model.cifar10(...)``: a model now
        return b is None or not isinstance(b.node, ast.Assign)
    return isinstance(receiver, ast.Name) and _own_cuda_class(sem, receiver) is not None \
        or isinstance(receiver, (ast.Name, ast.Attribute)) and _project_plain_class(sem, receiver)


def _built_by(sem: SemanticModel, receiver: ast.AST) -> ast.Call | None:
    """The call ``receiver`` (a name, or ``self.reader``) was last bound to (``bundle = Bundle()``), if it was bound to
    one whole."""
    key = dotted(receiver)
    b = sem.binding_at(key, receiver) if key else None
    value = b.value if b is not None and b.index is None and not b.is_param else None
    return value if isinstance(value, ast.Call) else None


def _project_plain_class(sem: SemanticModel, receiver: ast.AST) -> bool:
    built, project = _built_by(sem, receiver), sem.project
    written = dotted(built.func) if built is not None else None
    if written and "." in written and written.rsplit(".", 1)[-1][:1].islower() \
            and written.rsplit(".", 2)[-2][:1].isupper() and project is not None \
            and project.function_for(sem, built) is not None:  # type: ignore[attr-defined,arg-type]
        written = written.rsplit(".", 1)[0]  # ``DocReader.load(path)``: a factory method of the class (DrQA), its instance
    return bool(written and written.rsplit(".", 1)[-1][:1].isupper()) and project is not None \
        and project.defines_class(sem, written) and not project.inherits_module(sem, written)  # type: ignore[attr-defined,arg-type]


def _own_cuda_class(sem: SemanticModel, receiver: ast.Name) -> str | None:
    """The in-file non-module class ``receiver`` was built from, when that class defines ``cuda``."""
    classes = sem.cached("own_cuda_classes", lambda: {
        c.name for c in sem.of_type(ast.ClassDef) if c.name not in sem.module_classes  # type: ignore[attr-defined]
        and any(isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == "cuda" for f in c.body)})  # type: ignore[attr-defined]
    if not classes:
        return None
    built = _built_by(sem, receiver)
    name = sem.call_name(built) if built is not None else None
    return name if name in classes else None


# ---- what the program is ---------------------------------------------------------------------------


def some_gpus(value: ast.AST) -> bool:
    """A ``gpus=`` setting that asks for GPUs: a positive number, a non-empty list of indices, a string of them."""
    if isinstance(value, ast.Constant):
        v = value.value
        return type(v) is int and v > 0 or isinstance(v, str) and v.strip() not in ("", "0", "-1", "None")
    return isinstance(value, ast.List | ast.Tuple) and bool(value.elts)
