"""Stage 2 rules on wrappers: DataParallel instead of DDP (TD204, subclasses included), and a wrapper's
state dict saved with its ``module.``/``_orig_mod.`` prefix (TD205) where the program's own readers do not expect it."""

from __future__ import annotations

import ast
import re

from torchdoctor.check.astutil import PLACEMENT_METHODS, dotted, func_params, param_default, string_value, strip_methods
from torchdoctor.check.context import Context
from torchdoctor.check.patterns import lazy
from torchdoctor.check.project import REQUIRES_WRAPPED, SELECTS_WRAPPED, STRIPS_WRAPPED
from torchdoctor.check.registry import rule
from torchdoctor.check.rules.bounded import branch_no_caller_chooses
from torchdoctor.check.semantic import program
from torchdoctor.check.semantic.models import wrapper_prefix


# ---- TD204 --------------------------------------------------------------------------------
_ONE_PROCESS = "runs one process over all GPUs (GIL-bound, unbalanced on GPU 0)"
_USE_DDP = "use DistributedDataParallel launched with torchrun"
_DATA_PARALLEL = ("torch.nn.DataParallel", "torch.nn.parallel.DataParallel", "torch.nn.parallel.data_parallel.DataParallel",
                  "torch.nn.parallel.data_parallel", "torch.nn.parallel.data_parallel.data_parallel",
                  "torch_geometric.nn.DataParallel", "torch_geometric.nn.data_parallel.DataParallel")
# (PyTorch Geometric's ``DataParallel`` subclasses torch's to scatter lists of graphs: one process all the same)


@rule("TD204", calls=("DataParallel", "data_parallel"))
def data_parallel(node: ast.AST, ctx: Context) -> None:
    """nn.DataParallel (or the functional ``nn.parallel.data_parallel``): single-process, slower and unbalanced."""
    q = ctx.call_name(node) or ""
    if q in _DATA_PARALLEL and not _key_adapter(ctx, node) and not program.in_dead_branch(ctx.semantic, node) \
            and not ctx.semantic.guards.on_cpu_branch(node) and not _one_device(ctx, node) \
            and not branch_no_caller_chooses(ctx, node):  # (``if self.parallel:`` that no construction turns on)
        ctx.report("TD204", node, f"`{ctx.name(node.func)}` {_ONE_PROCESS}", fix=_USE_DDP)  # type: ignore[attr-defined]


def _one_device(ctx: Context, call: ast.AST) -> bool:
    """``nn.DataParallel(net, device_ids=[0])`` (or a parameter whose default is one id and no call of the function
    in this file passes it): a wrapper over one GPU, whose forward is a plain call of the module."""
    ids = next((k.value for k in call.keywords if k.arg == "device_ids"), None)  # type: ignore[attr-defined]
    if ids is None and len(call.args) > 1:  # type: ignore[attr-defined]
        ids = call.args[1]  # type: ignore[attr-defined]
    sem = ctx.semantic
    if ids is None and _one_visible_gpu(ctx, call):
        return True
    if isinstance(ids, ast.Name) and (b := sem.binding_at(ids.id, call)) is not None and b.is_param:
        func = b.node
        if any(k.arg == ids.id for site in sem.call_sites(func) for k in site.keywords) or any(
                len(site.args) > 1 for site in sem.call_sites(func)) \
                or sem.project is not None and sem.project.callers_pass(sem, func, ids.id):  # type: ignore[attr-defined]
            return False  # (some caller chooses the devices)
        ids = param_default(func, ids.id)  # type: ignore[arg-type]
    return isinstance(ids, (ast.List, ast.Tuple)) and len(ids.elts) == 1


def _one_visible_gpu(ctx: Context, call: ast.AST) -> bool:
    """``os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu_id)`` earlier in the same function (or script): one GPU is
    visible, so the wrapper's ``device_ids`` (all visible GPUs) are that one (a detector's single-GPU inference class)."""
    sem = ctx.semantic
    func = sem.function_of(call)
    for n in sem.local_nodes(func) if func is not None else sem.body(sem.tree):
        if isinstance(n, ast.Assign) and n.lineno < call.lineno and len(n.targets) == 1 \
                and isinstance(t := n.targets[0], ast.Subscript) and string_value(t.slice) == "CUDA_VISIBLE_DEVICES" \
                and (dotted(t.value) or "").endswith("environ"):
            value = n.value
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "str" \
                    and len(value.args) == 1 and isinstance(value.args[0], (ast.Name, ast.Attribute, ast.Constant)):
                return True  # ``str(gpu_id)``: one id
            text = string_value(value)
            return text is not None and text.strip() != "" and "," not in text
    return False


def _key_adapter(ctx: Context, call: ast.AST) -> bool:
    """``holder = nn.DataParallel(trunk)``, ``holder.load_state_dict(ckpt)``, ``trunk = holder.module``: borrowed only to
    read a checkpoint saved from a wrapper (its keys carry ``module.``), or to write one, never run."""
    sem = ctx.semantic
    value, up = call, sem.parent(call)
    while isinstance(up, ast.Attribute) and up.attr in ("to", "cuda") and isinstance(sem.parent(up), ast.Call):
        value = sem.parent(up)  # ``nn.DataParallel(Net()).to(device)``
        up = sem.parent(value)
    if not (isinstance(up, ast.Assign) and len(up.targets) == 1 and isinstance(up.targets[0], ast.Name)):
        return False
    name = up.targets[0].id
    reads = [r for r in sem.reads_of(name) if (b := sem.binding_at(name, r)) is not None and b.value is value]
    attrs = _borrowed_uses(ctx, reads, 0)
    return attrs is not None and bool(attrs & {"load_state_dict", "state_dict", "module"})
    # (or to write one with the prefix: ``net = nn.DataParallel(net)``, ``torch.save(net.state_dict(), path)``; or
    # unwrapped at once, ``model = model.module`` on the next line: the wrapper never runs)


_RETURNS_ITSELF = frozenset({"eval", "train", "requires_grad_", "cuda", "to"})  # (as a statement: runs nothing)
_NOT_RUN = frozenset({"module", "load_state_dict", "state_dict", "children", "named_children"}) | _RETURNS_ITSELF
# (``next(wrapper.children())``: the wrapped model, taken out as ``.module`` is)


def _borrowed_uses(ctx: Context, reads: list[ast.AST], depth: int) -> set[str] | None:
    """The attributes the reads of a wrapper use, when none runs it (``.module``, ``.load_state_dict``, ``.eval()``...),
    followed through ``return model`` to the names this file's callers bind it to, and through arguments to the
    parameters of this file's functions (FastSpeech's ``get_DNN`` and ``synthesis``'s ``model.module.forward``);
    None when some read may run it, or goes elsewhere."""
    sem = ctx.semantic
    out: set[str] = set()
    if not reads:
        return None
    for r in reads:
        up = sem.parent(r)
        if isinstance(up, ast.Attribute) and up.attr in _NOT_RUN:
            if up.attr in _RETURNS_ITSELF and isinstance(call := sem.parent(up), ast.Call) \
                    and not isinstance(sem.parent(call), ast.Expr):
                return None  # ``model = model.eval()``: the wrapper itself, handed on (and run, most likely)
            out.add(up.attr)  # (``model.cuda()`` as a statement: placed, not run; RAFT's evaluate.py)
            continue
        if depth >= 2:
            return None
        more: list[ast.AST] | None = None
        if isinstance(up, ast.Return) and (func := sem.function_of(r)) is not None:
            more = []
            for site in sem.call_sites(func):
                holder = sem.parent(site)
                if not (isinstance(holder, ast.Assign) and len(holder.targets) == 1 and isinstance(holder.targets[0], ast.Name)):
                    return None
                key = holder.targets[0].id
                more += [n for n in sem.reads_of(key) if (b := sem.binding_at(key, n)) is not None and b.value is site]
            if not more or sem.project is not None and sem.project.has_callers(sem, func):  # type: ignore[attr-defined]
                return None
        elif isinstance(up, ast.Call) and r in up.args and len(targets := sem.resolve(up)) == 1:
            params = func_params(targets[0])  # type: ignore[arg-type]
            index = up.args.index(r)
            param = params[index] if index < len(params) else None
            more = [n for n in sem.reads_of(param) if (b := sem.binding_at(param, n)) is not None and b.is_param
                    and b.node is targets[0]] if param else None
        if more is None:
            return None
        found = _borrowed_uses(ctx, more, depth + 1)
        if found is None:
            return None
        out |= found
    return out


@rule("TD204", ast.ClassDef)
def data_parallel_subclass(node: ast.AST, ctx: Context) -> None:
    """A subclass of ``nn.DataParallel`` (forwarding attribute access to ``.module``, scattering pre-split batches)
    is DataParallel all the same: reported where this file builds one."""
    assert isinstance(node, ast.ClassDef)
    sem = ctx.semantic
    if not any(sem.qualname(b) in _DATA_PARALLEL for b in node.bases) or sem.function_of(node) is not None:
        return
    for call in sem.calls_named(node.name):
        if isinstance(call.func, ast.Name) and call.func.id == node.name and sem.binding_at(node.name, call) is None \
                and sem.calls_index.classes.get(node.name) is node:
            ctx.report("TD204", call, f"`{node.name}` is a `DataParallel`: it {_ONE_PROCESS}", fix=_USE_DDP)


@rule("TD204", ast.Module)
def imported_data_parallel_subclass(node: ast.AST, ctx: Context) -> None:
    """``BalancedDataParallel(gpu0_bsz, model)`` of a class another module of the project derives from
    ``nn.DataParallel`` (transformer-xl's ``utils/data_parallel.py``): DataParallel all the same."""
    sem = ctx.semantic
    if sem.project is None:
        return
    named = [n for n in sem.calls_index.by_name if "Parallel" in n and n not in ("DataParallel", "DistributedDataParallel")]
    for call in sem.calls_named(*named) if named else ():
        written = dotted(call.func)
        if not written or written.split(".")[0] not in sem.names.from_imports \
                and written.split(".")[0] not in sem.names.imports or (ctx.call_name(call) or "") in _DATA_PARALLEL:
            continue
        if program.in_dead_branch(sem, call) or sem.guards.on_cpu_branch(call) or _key_adapter(ctx, call) \
                or not sem.project.is_data_parallel_class(sem, written):  # type: ignore[attr-defined]
            continue
        ctx.report("TD204", call, f"`{written}` is a `DataParallel` (of another module): it {_ONE_PROCESS}", fix=_USE_DDP)


# ---- TD205 --------------------------------------------------------------------------------
def _wrapped_by_fsdp(ctx: Context, recv: ast.AST, node: ast.AST) -> bool:
    """``model = FSDP(model, ...)``: FSDP's ``state_dict()`` hands back the model's own names (its hooks strip the
    wrapper's), under ``FSDP.state_dict_type(model, FULL_STATE_DICT, ...)`` or not."""
    sem = ctx.semantic
    key = dotted(recv)
    for b in (sem.bindings_of(key) if key else []):
        value = b.value if not b.is_param else None
        if isinstance(value, ast.Call) and (sem.call_name(value) or "").rsplit(".", 1)[-1] in ("FullyShardedDataParallel", "FSDP"):
            return True
    return False


_WRAPPER_CLASSES = ("DataParallel", "DistributedDataParallel", "DDP", "OptimizedModule", "FullyShardedDataParallel")


def _in_unwrapped_branch(ctx: Context, recv: ast.AST, node: ast.AST) -> bool:
    """``if isinstance(net, nn.DataParallel): save(net.module.state_dict()) else: save(net.state_dict())``: the
    else branch runs only when ``net`` is no wrapper (or the if branch of ``if not isinstance(...)``)."""
    sem = ctx.semantic
    recv = strip_methods(recv, PLACEMENT_METHODS)  # ``self.model.cpu().state_dict()``: the test is of ``self.model``
    key = dotted(recv)
    wraps_under = _wrapping_tests(ctx, key, node) if key else frozenset()
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
    return _handler_of_an_unwrap(ctx, key, node)


def _handler_of_an_unwrap(ctx: Context, key: str | None, node: ast.AST) -> bool:
    """``try: d["model"] = net.module.state_dict()`` / ``except: d["model"] = net.state_dict()``: the handler runs
    only when ``net`` has no ``.module``, no wrapper."""
    sem = ctx.semantic
    for handler in (a for a in sem.ancestors(node) if isinstance(a, ast.ExceptHandler)):
        owner = sem.parent(handler)
        if isinstance(owner, ast.Try) and key and any(
                isinstance(n, ast.Attribute) and n.attr in ("module", "_orig_mod") and dotted(n.value) == key
                for stmt in owner.body for n in sem.subtree(stmt)):
            return True
    return False


def _unwrap_chosen(ctx: Context, node: ast.Call) -> bool:
    """``model.module.state_dict() if is_parallel(model) else model.state_dict()``: the two branches save the model
    with and without its wrapper, chosen by a test of the program's own: it handles the prefix itself."""
    up = ctx.semantic.parent(node)
    if not isinstance(up, ast.IfExp) or node not in (up.body, up.orelse):
        return False
    other = up.orelse if node is up.body else up.body
    if not (isinstance(other, ast.Call) and isinstance(other.func, ast.Attribute) and other.func.attr == "state_dict"):
        return False
    mine, theirs = dotted(node.func.value) or "", dotted(other.func.value) or ""  # type: ignore[attr-defined]
    return bool(mine and theirs) and (mine == theirs + ".module" or theirs == mine + ".module")


def _wrapping_tests(ctx: Context, key: str, at: ast.AST) -> frozenset[str]:
    """The tests (as written) of the ``if`` blocks that hold every wrapping of ``key`` (``if MANY: enc =
    nn.DataParallel(enc)``): where that test is false, ``key`` is no wrapper. Empty when one wrap is unconditional.
    A local name's wraps are those of the function around ``at`` (another function may wrap its own ``model``)."""
    sem = ctx.semantic
    scope = None if key.startswith("self.") else sem.scope_of(at)
    if scope is not None and "." not in key and not any(b.scope is scope for b in sem.bindings_of(key)):
        scope = sem.tree  # (a global read in a function: ``if ddp: model = DDP(model)`` under ``__main__``)
    wraps = [b for b in sem.bindings_of(key) if isinstance(b.value, ast.Call) and b.index is None
             and (sem.call_name(b.value) or "").rsplit(".", 1)[-1] in _WRAPPER_CLASSES
             and (scope is None or sem.scope_of(b.node) is scope)]
    tests: set[str] = set()
    for b in wraps:
        guard = next((a for a in sem.ancestors(b.node) if isinstance(a, ast.If) and any(
            s is b.node or sem.contains(s, b.node) for s in a.body)), None)
        if guard is None or isinstance(guard.test, ast.UnaryOp):
            return frozenset()
        tests.add(sem.segment(guard.test))
        if isinstance(guard.test, ast.BoolOp) and isinstance(guard.test.op, ast.And) and len(wraps) == 1:
            tests.update(sem.segment(v) for v in guard.test.values)  # ``if distributed and n_gpus > 1:``: each must hold
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
    if prefix is None and sem.expr_kind(recv, node) == "wrapper" and not _wrapped_by_fsdp(ctx, recv, node):
        prefix = "_orig_mod." if _wrapped_by_compile(ctx, recv, node) else "module." if _wrapped_here(ctx, recv) else None
        # (a wrapper handed back by a builder of another function, compiled or wrapped there: which prefix it adds
        # is not seen here)
    if prefix is None and _wrapped_by_a_helper(ctx, recv, node):
        prefix = "module."
    if prefix is None and _saved(ctx, node) and _wrapped_by_the_callers(ctx, recv, node):
        prefix = "module."  # (asked last, of saved state dicts only: it reads the modules that call this one)
    if prefix is None or not _saved(ctx, node) or _in_unwrapped_branch(ctx, recv, node) or _unwrap_chosen(ctx, node) \
            or _unwrapped_on_every_branch(ctx, recv, node):
        return
    if prefix == "module." and ((SELECTS_WRAPPED.search(sem.text.source) or REQUIRES_WRAPPED.search(sem.text.source)
                                 if sem.project is None
                                 else sem.project.selects_wrapped_keys(sem)) or STRIPS_WRAPPED.search(sem.text.source)
                                or sem.project is not None and "load_state_dict(" not in sem.text.source
                                and sem.project.requires_wrapped_keys(sem)  # (a reader elsewhere requires it; none here)
                                or sem.project is not None and REQUIRES_WRAPPED.search(sem.text.source)
                                or sem.project is not None and _read_back_beside(ctx, node)
                                or sem.project is not None and sem.project.loads_through_a_stripping_helper(sem, STRIPS_WRAPPED)):
        return  # the project's own readers pick keys by ``module.encoder`` (or strip it: ``k[7:]``): the prefix is its format
    if prefix == "_orig_mod." and _STRIPS_COMPILED.search(sem.text.source) and _SLICED_OFF.search(sem.text.source):
        return  # ``unwanted_prefix = "_orig_mod."`` ... ``sd[k[len(unwanted_prefix):]] = sd.pop(k)``: it resumes its own
    name = ctx.name(recv)
    attr = prefix.rstrip(".")
    inner = _unwrapped_alias(ctx, recv, attr) or f"{name}.{attr}"
    restore = _restored_into_wrapper(ctx, recv, node)
    fix = f"save `{inner}.state_dict()` (unwrap first)" if restore is None else (
        f"save `{inner}.state_dict()`, and resume into `{inner}` too: line {restore.lineno} loads this checkpoint "
        "into the wrapper, which would then find none of its keys")
    ctx.report("TD205", node, f"`{name}.state_dict()` is saved from a wrapper: every key gains a `{prefix}` prefix",
               fix=fix)


_STRIPS_COMPILED = lazy(r"""(=\s*|startswith\(\s*|replace\(\s*)["']_orig_mod\.["']""")
_SLICED_OFF = lazy(r"""\[\s*len\(\s*[\w.'"]+\s*\)\s*:\s*\]|replace\(\s*["']_orig_mod\.["']""")


def _unwrapped_on_every_branch(ctx: Context, recv: ast.AST, at: ast.AST) -> bool:
    """``model_without_ddp = model.module`` where ``model`` is wrapped, ``model_without_ddp = model`` in the branch
    that wraps nothing (gmflow, DeiT): every binding of the name is the inner module."""
    if not isinstance(recv, ast.Name):
        return False
    sem = ctx.semantic
    scope = sem.scope_of(at)
    binds = [b for b in sem.bindings_of(recv.id) if b.scope is scope]
    if len(binds) < 2 or any(b.is_param or b.value is None for b in binds):
        return False
    for b in binds:
        value = b.value
        if isinstance(value, ast.Attribute) and value.attr in ("module", "_orig_mod"):
            continue
        if not isinstance(value, ast.Name):
            return False
        wraps = [w for w in sem.bindings_of(value.id) if w.scope is scope and w.value is not None and not w.is_param
                 and sem.expr_kind(w.value, w.node) == "wrapper"]
        if not wraps or not all(sem.in_other_branch(w.node, b.node) for w in wraps):
            return False  # (an alias of a name that may hold the wrapper there)
    return True


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


def _wrapped_by_the_callers(ctx: Context, recv: ast.AST, at: ast.AST) -> bool:
    """``model.state_dict()`` of a parameter ``model`` (or ``self.model`` that ``__init__`` sets from its parameter)
    that a caller in another module hands a DataParallel/DDP wrapper (``utils.train(args, model=model)`` after
    ``model = nn.DataParallel(model)``; ``Trainer(args, model)``): the keys gain ``module.`` there."""
    sem = ctx.semantic
    if sem.project is None:
        return False
    key = dotted(recv)
    func = sem.function_of(at)
    while func is not None and isinstance(sem.scope_of(at), ast.Lambda) and sem.function_of(func) is not None:
        func = sem.function_of(func)
    if key is None or func is None:
        return False
    if "." not in key:
        b = sem.binding_at(key, at)
        owner = b.node if b is not None and b.is_param else None
        if owner is None or sem.class_of(owner) is not None and owner.name != "__init__":  # type: ignore[attr-defined]
            return False  # (a method's parameter: asked of the class's objects, not here)
        if any(c is not b and not c.is_param and sem.scope_of(c.node) is owner for c in sem.bindings_of(key)):
            return False  # (``model = model.module`` first: unwrapped)
        return sem.project.passes_wrapper(sem, owner, key)  # type: ignore[attr-defined]
    cls = sem.class_of(func)
    if not key.startswith("self.") or key.count(".") != 1 or cls is None:
        return False
    init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)  # type: ignore[attr-defined]
    params = {a.arg for a in init.args.args[1:]} if init is not None else set()
    sets = [b for b in sem.bindings_of(key) if sem.class_of(b.node) is cls and not (
        b.value is not None and dotted(strip_methods(b.value, PLACEMENT_METHODS)) == key)]  # (``self.model.to(dev)``)
    if init is None or len(sets) != 1 or not isinstance(sets[0].value, ast.Name) or sets[0].value.id not in params \
            or sem.function_of(sets[0].node) is not init:
        return False  # (``self.model = model`` in ``__init__``, set nowhere else)
    return sem.project.passes_wrapper(sem, init, sets[0].value.id)  # type: ignore[attr-defined]


def _wrapped_here(ctx: Context, recv: ast.AST) -> bool:
    """Some binding of ``recv``'s name in this file wraps a model in DataParallel/DDP (``encoder =
    DistributedDataParallel(encoder)``), or is no call this file's functions make (a parameter, an attribute kept
    elsewhere), so the ``module.`` prefix is the wrappers' (not ``torch.compile``'s, done in a builder)."""
    key = dotted(recv)
    if not key:
        return True
    sem = ctx.semantic
    bound = sem.bindings_of(key)
    if bound and all(isinstance(b.value, (ast.Name, ast.Attribute)) for b in bound):
        return False  # (``plain = net`` before ``net = DataParallel(net)``: an alias the wrap's prefix search followed)
    if any(isinstance(v := strip_methods(b.value, PLACEMENT_METHODS), ast.Call) and b.index is None
           and (sem.call_name(v) or "").rsplit(".", 1)[-1] in ("DataParallel", "DistributedDataParallel", "DDP")
           for b in bound if b.value is not None):  # (``nn.DataParallel(model).cuda()``)
        return True
    return not any(isinstance(b.value, ast.Call) and (sem.resolve(b.value) or b.index is not None) for b in bound)


def _wrapped_by_compile(ctx: Context, recv: ast.AST, at: ast.AST) -> bool:
    key = dotted(recv)
    b = ctx.semantic.binding_at(key, at) if key else None
    value = b.value if b is not None else None
    if isinstance(value, ast.IfExp):
        value = value.body
    return isinstance(value, ast.Call) and (ctx.call_name(value) or "").endswith("compile")


def _saved_file_words(ctx: Context, call: ast.Call) -> list[str]:
    """The words of the file name ``torch.save(x.state_dict(), os.path.join(d, "netG_{}.pth".format(e)))`` writes
    (``netG_``, ``.pth``: pieces of four characters or more), when the state dict is saved directly."""
    save = ctx.semantic.parent(call)
    if not (isinstance(save, ast.Call) and save.args[:1] == [call] and len(save.args) > 1 and _is_save(ctx, save)):
        return []
    pieces = [p for n in ctx.semantic.subtree(save.args[1]) if isinstance(n, ast.Constant) and isinstance(n.value, str)
              for p in re.split(r"\{[^}]*\}|%\w|/", n.value)]
    return [p for p in pieces if len(p) >= 4 and p not in (".pth", ".pkl", ".bin")]


def _read_back_beside(ctx: Context, call: ast.Call) -> bool:
    """A script beside this one reads the checkpoint back with the prefix sliced off (by the file name it shares,
    or by the entry the state dict is stored under)."""
    words, entries = _saved_file_words(ctx, call), _saved_entry(ctx, call) or _entry_with_companions(ctx, call)
    return bool(words or entries) and ctx.semantic.project.strips_wrapped_beside(ctx.semantic, words, entries)  # type: ignore[union-attr]


def _entry_with_companions(ctx: Context, call: ast.Call) -> list[str]:
    """A generic entry (``"state_dict"``) saved beside entries of the program's own (``"best_prec1"``): readers that
    name those too (``checkpoint['best_prec1']``) read this checkpoint, not another one. The entries, generic first."""
    up = ctx.semantic.parent(call)
    if not isinstance(up, ast.Dict):
        return []
    keys = [string_value(k) if k is not None else None for k in up.keys]
    at = next((i for i, v in enumerate(up.values) if v is call), None)
    own = [k for k in keys if k and k.lower() not in _GENERIC_ENTRIES and k.lower() not in _COMMON_ENTRIES]
    return [keys[at], *own] if at is not None and keys[at] and own else []


def _saved_entry(ctx: Context, call: ast.Call) -> list[str]:
    """The checkpoint entry the state dict is stored under: ``{"g_model_state_dict": net_g.state_dict(), ...}`` or
    ``ckpt["g_model"] = net_g.state_dict()``."""
    up = ctx.semantic.parent(call)
    if isinstance(up, ast.Dict):
        at = next((i for i, v in enumerate(up.values) if v is call), None)
        key = string_value(up.keys[at]) if at is not None and up.keys[at] is not None else None
    elif isinstance(up, ast.Assign) and len(up.targets) == 1 and isinstance(up.targets[0], ast.Subscript):
        key = string_value(up.targets[0].slice)
    else:
        key = None
    return [key] if key and key.lower() not in _GENERIC_ENTRIES else []


# entries every checkpoint has: a sibling reading ``ckpt["state_dict"]`` may read another checkpoint (DINO's linear
# evaluation saves its classifier under "state_dict", and strips the prefix off the pretrained backbone's)
_COMMON_ENTRIES = frozenset({"epoch", "step", "iteration", "global_step", "optimizer", "optim", "scheduler", "lr",
                             "arch", "args", "config", "cfg", "opt"})  # (in most checkpoints: they tell no program apart)
_GENERIC_ENTRIES = frozenset({"state_dict", "model", "model_state_dict", "model_state", "net", "network", "state",
                              "weights", "params", "module", "checkpoint", "ckpt", "student", "teacher", "encoder"})


def _saved(ctx: Context, call: ast.Call) -> bool:
    """The state_dict flows into ``torch.save`` (or a helper that saves: ``save_checkpoint({...})``),
    directly or through the name it is stored under (asked twice a call: once)."""
    return ctx.semantic.cached(("saved", id(call)), lambda: _flows_into_a_save(ctx, call))  # type: ignore[no-any-return]


def _flows_into_a_save(ctx: Context, call: ast.Call) -> bool:
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
