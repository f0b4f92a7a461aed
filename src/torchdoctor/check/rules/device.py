"""Stage 1 rules, device choice: hard-coded CUDA (TD101) and ``.cuda()`` (TD102)."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from torchdoctor.check.astutil import PLACEMENT_METHODS, dotted, method_name, param_default, strip_methods
from torchdoctor.check.patterns import lazy
from torchdoctor.check.registry import rule
from torchdoctor.check.rules.bounded import branch_no_caller_chooses
from torchdoctor.check.semantic import cuda_sites, models, program
from torchdoctor.check.semantic.kinds import kind_from_name

if TYPE_CHECKING:
    from torchdoctor.check.context import Context


def _callers_need_a_gpu(sem, node: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``node`` in a module-level helper that every caller of another module calls after stopping without a GPU
    (``assert torch.cuda.is_available()`` in ``main()``, then ``helpers.eval_model(model, loader)``), or in a method
    of a class that every other module makes only after such a stop (and this file never makes): GPU-only code."""
    func = sem.function_of(node)
    while func is not None and sem.function_of(func) is not None:
        func = sem.function_of(func)
    if func is None or sem.project is None:
        return False
    cls = sem.class_of(func)
    if cls is not None and sem.frame(cls).kind == "module" and sem.frame(func).kind == "class" \
            and all(sem.class_of(c) is cls for c in sem.calls_named(cls.name)):  # type: ignore[attr-defined]
        # (``def new(self): return Net().cuda()``: a rebuild of an object that exists already, made elsewhere)
        return sem.project.callers_refuse_cpu(sem, cls, ddp_only=False)  # (``crit = NCESoftmaxLoss().cuda()`` there)
    return sem.frame(func).kind == "module" and not sem.call_sites(func) \
        and sem.project.callers_refuse_cpu(sem, func, ddp_only=False)


def _in_a_helper_nothing_calls(sem, node: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """The site is in a module-level function (its outermost) that no code calls or names
    (``program.uncalled_module_function``)."""
    func = sem.function_of(node)
    while func is not None and sem.function_of(func) is not None:
        func = sem.function_of(func)
    return program.uncalled_module_function(sem, func)


@rule("TD101", ast.Module)
def hard_coded_cuda(node: ast.AST, ctx: Context) -> None:
    """CUDA hard-coded with no GPU check anywhere in the file.

    Finds `torch.device("cuda")`, `device="cuda"`, `.to("cuda")`, `.cuda()`,
    `device = "cuda"`, `init_device_mesh("cuda", ...)` and Lightning's `Trainer/Fabric(accelerator="gpu")` in a file that never asks whether a GPU exists
    (`torch.cuda.is_available()`, `device_count()`, `torch.accelerator`). Argument
    defaults (`default="cuda"`, `def f(device="cuda")`) are configurable and not reported, nor is a file
    that calls a project helper which stops without a GPU (`if not torch.cuda.is_available(): sys.exit(...)`).
    """
    sem = ctx.semantic
    if program.has_cuda_check(sem):
        return
    sites = cuda_sites.cuda_sites(sem)
    at = {id(s.node) for s in sites}
    for site in sites:
        up = sem.parent(site.node)
        if site.text.startswith("torch.device(") and isinstance(up, ast.Call) and method_name(up) == "cuda" \
                and id(up) in at:
            continue  # (``x.cuda(torch.device(device))``: one finding, at the ``.cuda()`` that holds it)
        if program.uses_gpu_only_library(sem, site.node) or program.refuses_cpu(sem, at=site.node) \
                or _moves_nothing(sem, site.node) or sem.chooses_device(site.node) and not _cuda_either_way(sem, site.node) \
                and _fixed_flag(site.node) is None \
                or program.gpu_only_test(sem, site.node) or _unused_setting(sem, site.node) \
                or program.in_gpu_only_branch(sem, site.node) or _in_data_parallel_subclass(sem, site.node) \
                or _tried_with_a_fallback(sem, site.node) or _used_only_when_asked(sem, site.node) \
                or _rebound_to_the_cpu(sem, site.node) or _only_with_several_processes(sem, site.node) \
                or _callers_need_a_gpu(sem, site.node) or branch_no_caller_chooses(ctx, site.node) \
                or _only_when_given_an_index(sem, site.node) or _cpu_in_the_other_branch(sem, site.node) \
                or _class_asserts_cuda(sem, site.node) or _expected_to_raise(sem, site.node) \
                or _helper_called_when_chosen(sem, site.node) or _in_a_helper_nothing_calls(sem, site.node):
            continue
        chosen = _chosen_device(sem, site.node) if site.text.startswith("device=") and not site.indexed else None
        if chosen is not None:  # the class already holds the device it runs on: use it
            ctx.report("TD101", site.node, f"`{site.text}` hard-codes CUDA and the file never checks "
                       "`torch.cuda.is_available()`: it crashes on a machine without a GPU",
                       fix=f"pass the device this code already chose: `device={chosen}`")
            continue
        flag = _fixed_flag(site.node)
        if flag is not None:  # (``cuda = True``, then ``torch.device("cuda" if cuda else "cpu")``)
            ctx.report("TD101", site.node, f"`{site.text}` hard-codes CUDA: `{flag}` is always True and the file never "
                       "checks `torch.cuda.is_available()`: it crashes on a machine without a GPU",
                       fix=f"set the flag from the machine: `{flag} = torch.cuda.is_available()`")
            continue
        uncalled = program.uncalled_cuda_test(sem)
        asked = "the file never checks `torch.cuda.is_available()`" if uncalled is None else \
            f"the file's `{ctx.name(uncalled)}` on line {uncalled.lineno} is never called (a function is always true)"  # type: ignore[attr-defined]
        ctx.report(
            "TD101",
            site.node,
            f"`{site.text}` hard-codes CUDA and {asked}: it crashes on a machine without a GPU",
            fix=f'call the test: `{ctx.name(uncalled)}()` (as written, the function object is always true)'
            if uncalled is not None else
            'pass `accelerator="auto"`: Lightning takes the GPU when there is one, else the CPU'
            if site.text.startswith("accelerator=") else
            'ask for GPUs only when there are some: `gpus=1 if torch.cuda.is_available() else 0` (or, on Lightning '
            '1.6 and later, `accelerator="auto", devices=1`)' if site.text.startswith("gpus=") else
            'make it with a factory on the device of the data it meets: `torch.empty(..., device=x.device)` (or '
            '`torch.zeros`, `torch.rand`)' if site.text.startswith("torch.cuda.") else
            'pick the device once (`device = torch.device("cuda" if torch.cuda.is_available() else "cpu")`) and cast '
            f'with `.to(device, dtype={_legacy_dtype(site.node)})`' if site.text.startswith(".type(torch.cuda.") else
            'fall back to the CPU: `init_device_mesh("cuda" if torch.cuda.is_available() else "cpu", ...)` '
            '(with the gloo backend)' if site.text.startswith("init_device_mesh(") else
            ('keep the per-rank GPU but fall back: `torch.device("cuda", local_rank) if torch.cuda.is_available() '
                 'else torch.device("cpu")` (with the gloo backend)') if site.indexed and program.is_ddp_program(sem) else
            (f'keep the chosen GPU but fall back: `{site.text} if torch.cuda.is_available() else torch.device("cpu")`'
             if site.text.startswith("torch.device(") else
             'keep the chosen GPU but fall back to the CPU when `torch.cuda.is_available()` is False') if site.indexed else
                'pick the device once: `device = torch.device("cuda" if torch.cuda.is_available() else "cpu")`',
        )


def _legacy_dtype(cast: ast.AST) -> str:
    """``torch.long`` for ``x.type(torch.cuda.LongTensor)``: the dtype the legacy type names (``...`` if none)."""
    last = (dotted(cast.args[0]) or "").rsplit(".", 1)[-1] if isinstance(cast, ast.Call) and cast.args else ""
    dtype = "float32" if last == "FloatTensor" else models.LEGACY_DTYPES.get(last)
    return f"torch.{dtype}" if dtype else "..."


def _expected_to_raise(sem, node: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``with pytest.raises(TypeError): model.cuda()`` (or ``self.assertRaises``): a test that the move is refused; it
    raises before touching any device."""
    for up in sem.ancestors(node):
        if isinstance(up, (ast.With, ast.AsyncWith)) and any(
                isinstance(item.context_expr, ast.Call)
                and (dotted(item.context_expr.func) or "").rsplit(".", 1)[-1] in ("raises", "assertRaises", "assertRaisesRegex")
                for item in up.items):
            return True
        if isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return False
    return False


def _fixed_flag(node: ast.AST) -> str | None:
    """The flag of ``torch.device("cuda" if cuda else "cpu")`` (or ``device = "cuda" if cuda else "cpu"``), which
    cuda_sites takes for CUDA only when the file sets it True once."""
    value = node.args[0] if isinstance(node, ast.Call) and node.args else node
    return value.test.id if isinstance(value, ast.IfExp) and isinstance(value.test, ast.Name) else None


def _cuda_either_way(sem, node: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``node`` sits in the ``else`` of a test about the GPUs (``if cfg["ngpu"] > 1: net = DataParallel(net).cuda()``
    / ``else: net = net.cuda()``) whose body hard-codes CUDA too: the test picks how many GPUs, not whether one."""
    found = sem.guards.device_test_around(node)
    if found is None or not found[1]:
        return False
    test = found[0]
    if sem.chooses_device(test):
        return False  # (``if args.device == "gpu":`` around it: that test chose the GPU, the inner one how many)
    return any(isinstance(n, ast.Call) and method_name(n) == "cuda" for s in test.body for n in sem.subtree(s)) \
        and not any(isinstance(n, ast.Call) and method_name(n) in ("to", "cpu") for s in test.orelse for n in sem.subtree(s))


def _moves_nothing(sem, node: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``nn.BCEWithLogitsLoss().cuda()``, ``DiceLoss().cuda()`` of a module that holds no tensor: ``.cuda()`` moves
    nothing, so it cannot fail without a GPU (TD102 still asks for ``.to(device)``)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("cuda", "to")):
        return False
    return _holds_nothing(sem, node.func.value, node, 0)


_LOSS_WRAPPERS = lazy(r"(DataParallel|DataParallelCriterion|DataParallelModel|\w*Criterion)$")


def _holds_nothing(sem, recv: ast.AST, at: ast.AST, depth: int) -> bool:  # type: ignore[no-untyped-def]
    """``recv`` (as bound at ``at``) is a module that holds no tensor; through a parallel wrapper of one
    (``DataParallelCriterion(loss_fn).cuda()`` of ``loss_fn = nn.NLLLoss(ignore_index=pad)``)."""
    if isinstance(recv, ast.Name) and (b := sem.binding_at(recv.id, at)) is not None and not b.is_param \
            and b.index is None and isinstance(b.value, ast.Call):
        recv, at = b.value, b.node  # ``criterion = DiceLoss()``, then ``criterion.cuda()``
    recv = strip_methods(recv, PLACEMENT_METHODS) if isinstance(recv, ast.Call) else recv
    if not isinstance(recv, ast.Call):
        return False
    q = sem.call_name(recv) or ""
    if depth < 2 and _LOSS_WRAPPERS.search(q) and len(recv.args) >= 1 and isinstance(recv.args[0], ast.Name):
        return _holds_nothing(sem, recv.args[0], recv, depth + 1)  # (what the wrapper holds is what it wraps)
    if depth and not q.endswith("Loss"):
        return False  # (a wrapped model is judged only when it is a loss: a class's parts may be built at run time)
    cls = sem.calls_index.classes.get(q)
    if cls is not None:
        if q in sem.module_classes and (weights := models.loss_weight_params(sem, cls)) is not None:
            return not _given(recv, weights, models.init_params(cls))
        return q in sem.module_classes and models.class_holds_nothing(sem, cls)
    if q.startswith("torch.nn.") and q.rsplit(".", 1)[-1] in models.STATELESS_LAYERS:
        return True
    if q in ("torch.nn.Sequential", "torch.nn.ModuleList", "torch.nn.ModuleDict") and not recv.args and not recv.keywords:
        return True  # (``model = nn.Sequential(); model = model.cuda()``, filled with layers after: empty when moved)
    if q.startswith("torch.nn.") and q.endswith("Loss") and not recv.args and not any(
            k.arg in ("weight", "pos_weight") or k.arg is None for k in recv.keywords):  # (a loss without class weights)
        return True
    written = dotted(recv.func)  # ``criteria.MaskedL1Loss().cuda()``: a tensor-less module class of another module
    if sem.project is None or not written or q.startswith("torch."):
        return False
    if sem.project.class_stateless(sem, written):  # type: ignore[attr-defined]
        return True
    weighted = sem.project.class_loss_weights(sem, written)  # type: ignore[attr-defined]
    return weighted is not None and not _given(recv, *weighted)


def _given(call: ast.Call, names: tuple[str, ...], params: tuple[str, ...]) -> bool:
    """The construction ``call`` passes one of the parameters ``names`` (by keyword, or by position in ``params``):
    ``CrossEntropyLoss2d(weight=w)`` or ``CrossEntropyLoss2d(w)``, not ``CrossEntropyLoss2d(ignore_index=255)``."""
    if any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
        return True
    given = {k.arg for k in call.keywords} | set(params[:len(call.args)])
    return len(call.args) > len(params) or bool(given & set(names))


def _only_when_given_an_index(sem, node: ast.AST) -> bool:
    """``model.cuda(local_rank)`` under ``if local_rank is not None:`` (or the ``else`` of ``if local_rank is None:``):
    a GPU is used only when a launcher hands an index; ``None`` is the program's CPU mode (``worker(None, args)``)."""
    if not (isinstance(node, ast.Call) and method_name(node) == "cuda" and len(node.args) == 1
            and isinstance(index := node.args[0], (ast.Name, ast.Attribute))):
        return False
    key = dotted(index)
    return any(isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.IsNot))
               and dotted(test.left) == key and isinstance(c := test.comparators[0], ast.Constant) and c.value is None
               and holds == isinstance(test.ops[0], ast.IsNot) for test, holds in sem.guards.branch_tests(node))


def _tried_with_a_fallback(sem, node: ast.AST) -> bool:
    """In the body of a ``try`` whose handler goes on without it (``except Exception: ... torch.sort(scores)`` on the
    CPU): without a GPU the error is caught and the work done there."""
    child = node
    for up in sem.ancestors(node):
        if isinstance(up, ast.Try) and any(sem.contains(s, child) for s in up.body):
            tried = _called(sem, up.body)
            moved = {dotted(n.func.value) for s in up.body for n in sem.subtree(s) if isinstance(n, ast.Call)
                     and method_name(n) == "cuda" and isinstance(n.func, ast.Attribute)} - {None}
            return any((h.type is None or (dotted(h.type) or "").rsplit(".", 1)[-1] in ("Exception", "RuntimeError",
                                                                                       "AssertionError", "BaseException"))
                       and not any(isinstance(n, ast.Raise) for s in h.body for n in sem.subtree(s))
                       and (bool(tried & _called(sem, h.body)) or any(  # (the same work again, not a log; or the
                           isinstance(n, ast.Call) and method_name(n) == "to" and isinstance(n.func, ast.Attribute)
                           and dotted(n.func.value) in moved for s in h.body for n in sem.subtree(s)))  # same move by
                       for h in up.handlers)  # ``.to(device)``: ``try: x.cuda(device) except RuntimeError: x.to(device)``
        if isinstance(up, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            return False
        child = up
    return False


_NOT_WORK = frozenset({"print", "format", "warn", "warning", "info", "error", "exception", "debug", "print_exc", "str",
                       "len", "cuda", "to", "cpu"})


def _called(sem, stmts: list[ast.AST]) -> set[str]:
    """The functions and methods the statements call, by their last name, but logging and moves."""
    return {name for s in stmts for n in sem.subtree(s) if isinstance(n, ast.Call)
            and (name := (dotted(n.func) or "").rsplit(".", 1)[-1]) and name not in _NOT_WORK}


def _in_data_parallel_subclass(sem, node: ast.AST) -> bool:
    """A method of a ``DataParallel``/``DistributedDataParallel`` subclass (``scatter`` sending each chunk to
    ``f"cuda:{i}"``): it runs only when the program wraps its model for several GPUs."""
    cls = sem.class_of(node)
    return cls is not None and any((dotted(b) or "").rsplit(".", 1)[-1] in ("DataParallel", "DistributedDataParallel")
                                   for b in cls.bases)


@rule("TD102", calls=("cuda",))
def dot_cuda(node: ast.AST, ctx: Context) -> None:
    """`.cuda()` instead of `.to(device)`: every `.cuda()` call, guarded or not (a speed-neutral hint)."""
    assert isinstance(node, ast.Call)
    func = node.func
    if not isinstance(func, ast.Attribute):
        return
    sem = ctx.semantic
    if sem.qualname(func.value) == "torch" or cuda_sites.on_module(sem, func.value) or dotted(func.value) == "self" \
            and sem.resolve(node):
        return  # (``self.cuda(*items)`` of a class's own ``def cuda``: the project's helper, not torch's)
    if not node.args and not node.keywords and _project_cuda_method(sem, node):
        return  # (``self.mac.cuda()`` of an object of a plain class whose own ``def cuda`` moves its modules)
    if _expected_to_raise(sem, node):
        return  # (a test that the move is refused: there is no placement to control)
    own = sem.function_of(node)
    cls = sem.class_of(own) if own is not None else None
    if own is not None and own.name in ("cuda", "to", "_apply") and cls is not None and (
            cls.name in sem.module_classes or any(dotted(b) not in ("object", None) for b in cls.bases)
            or any(isinstance(a, ast.Name) and a.id in {p.arg for p in own.args.args[1:] + own.args.kwonlyargs}
                   for a in [*node.args, *(k.value for k in node.keywords)])):
        # (a plain class's ``def cuda(self, device=None)`` calling ``x.cuda(device=device)``: the caller's choice)
        return  # an override of Module.cuda: it passes the caller's choice on (not a plain class's own ``def cuda``,
        # whose ``self.body.cuda()`` hard-wires CUDA like any call: mt-dnn's MTDNNModel.cuda)
    receiver = _receiver_name(ctx, func.value)
    args = ctx.name(node)[len(ctx.name(func)):] if node.args or node.keywords else "()"
    if not args.startswith("(") or len(args) > 40:
        args = "(...)"
    chosen = f'`torch.device("cuda", {ctx.name(node.args[0])})`' if node.args else "CUDA if available, else the CPU"
    ctx.report(
        "TD102",
        node,
        f"`{receiver}.cuda{args}` hard-wires CUDA at this call: placement is not controlled by one `device` variable",
        fix=f"use `{receiver}.to(device)`, with `device` chosen once at start-up ({chosen})",
    )


def _project_cuda_method(sem, node: ast.Call) -> bool:  # type: ignore[no-untyped-def]
    """``learner.cuda()`` of an object whose kind is unknown here (a constructor's parameter, a registry's product),
    in a program where a plain class (no ``nn.Module``) defines its own ``def cuda(self)``: most likely that method,
    whose own moves are judged where they are."""
    recv = node.func.value  # type: ignore[attr-defined]
    own = sem.function_of(node)
    cls = sem.class_of(own) if own is not None else None
    delegating = own is not None and own.name == "cuda" and cls is not None and cls.name not in sem.module_classes
    if not _handed_object(sem, recv, node) or not delegating and sem.expr_kind(recv, node) is not None \
            or kind_from_name(dotted(recv) or "") is not None:
        return False  # (a plain class's own ``def cuda`` passing the call on to what its constructor was handed; one
        # named as a module, ``self.model``, ``self.criterion``, is torch's)
    if "def cuda(self" in sem.text.source:
        return any(isinstance(f, ast.FunctionDef) and f.name == "cuda" and sem.class_of(f) is not None
                   and sem.class_of(f).name not in sem.module_classes for f in sem.of_type(ast.FunctionDef))
    return sem.project is not None and sem.project.a_class_defines("cuda")  # type: ignore[attr-defined]


def _handed_object(sem, recv: ast.AST, at: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``self.mac`` kept from a constructor's parameter (``self.mac = mac``), or ``learner`` made by a registry's
    class (``learner = REGISTRY[name](...)``): an object of a class this expression does not name."""
    b = sem.binding_at(dotted(recv) or "", at) if isinstance(recv, (ast.Name, ast.Attribute)) else None
    if b is None or b.value is None or b.index is not None:
        return False
    if isinstance(recv, ast.Attribute):
        value = b.value.args[0] if isinstance(b.value, ast.Call) and (dotted(b.value.func) or "").endswith("deepcopy") \
            and b.value.args else b.value  # (``self.target_mac = copy.deepcopy(mac)``: an object of the same class)
        param = sem.binding_at(value.id, b.node) if isinstance(value, ast.Name) else None
        return param is not None and param.is_param and getattr(param.node, "name", "") == "__init__"
    return isinstance(b.value, ast.Call) and isinstance(b.value.func, ast.Subscript)


def _unused_setting(sem: object, node: ast.AST) -> bool:
    """``device = "cuda"`` at module level that this file never reads: a setting of a config module
    (``configs/baseline.py``), read as ``config.device`` by a runner that decides (and checks) itself."""
    if isinstance(node, ast.Constant):
        node = sem.parent(node)  # type: ignore[attr-defined]
    if _option_nothing_reads(sem, node):
        return True
    if isinstance(node, ast.Call) and dotted(node.func) in ("torch.device", "device") \
            and isinstance(sem.parent(node), ast.Assign):  # type: ignore[attr-defined]
        node = sem.parent(node)  # type: ignore[attr-defined]  # ``device = torch.device("cuda:0")``, only printed
        if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
            return False
        reads = sem.reads_of(node.targets[0].id)  # type: ignore[attr-defined]
        return bool(reads) and all(_only_shown(sem, r) for r in reads)
    if not isinstance(node, ast.Assign) or sem.function_of(node) is not None or sem.class_of(node) is not None:  # type: ignore[attr-defined]
        return False
    if not isinstance(node.value, ast.Constant) or len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
        return False
    return not sem.reads_of(node.targets[0].id) or _overridden_by_exec(sem, node)  # type: ignore[attr-defined]


def _only_shown(sem, read: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``print("device = {}".format(device))``, ``print(device)``, ``print(f"{device}")``: the device object is only
    printed (making it touches no GPU; moving something to it would)."""
    for up in sem.ancestors(read):
        if isinstance(up, ast.Call) and isinstance(up.func, ast.Name) and up.func.id == "print":
            return True
        if isinstance(up, ast.Call) and not (isinstance(up.func, ast.Attribute) and up.func.attr == "format"
                                             or isinstance(up.func, ast.Name) and up.func.id in ("str", "repr")):
            return False
        if isinstance(up, ast.stmt):
            return False
    return False


def _option_nothing_reads(sem, node: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``args.device = "cuda"`` before ``train(args)``, in a file where no option object's ``.device`` is read
    (``train`` makes its own ``Diffusion(device="cuda")``, told where it is) and ``args`` goes to this file's
    functions only: a setting nothing reads cannot crash."""
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(t := node.targets[0], ast.Attribute)
            and isinstance(t.value, ast.Name) and t.value.id not in ("self", "cls") and isinstance(node.value, ast.Constant)):
        return False
    attr, owner = t.attr, t.value.id
    if any(isinstance(n, ast.Attribute) and n.attr == attr and isinstance(n.ctx, ast.Load) and isinstance(n.value, ast.Name)
           and n.value.id not in ("self", "torch") for n in sem.of_type(ast.Attribute)):
        return False
    func = sem.function_of(node)
    for read in sem.reads_of(owner):
        if func is not None and sem.function_of(read) is not func:
            continue
        up = sem.parent(read)
        if isinstance(up, ast.Call) and read in [*up.args, *(k.value for k in up.keywords)] and not sem.resolve(up):
            return False  # (handed to a function of another module, which may read it)
        if isinstance(up, (ast.Return, ast.Assign, ast.List, ast.Tuple, ast.Dict)):
            return False
    return True


_WORLD = lazy(r"(?i)^(world_size|world|n_gpus?|num_gpus|ngpus?|nprocs)$")


def _only_with_several_processes(sem, node: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``if world_size == 1: return values`` earlier in the function, in a module whose distributed set-up gives each
    process a GPU (``torch.cuda.set_device(rank)``, or NCCL): the CUDA literal after it runs only in that
    GPU-only mode (denoiser's ``distrib.average``), never on a machine without GPUs."""
    func = sem.function_of(node)
    source = sem.text.source
    if func is not None and (_collective_helper(sem, func) or _collective_block(sem, node)) and "gloo" not in source \
            and (sem.project is None or not sem.project.names_gloo(sem)):
        return True
    if func is None or "set_device" not in source and "nccl" not in source:
        return False
    up = sem.parent(node)  # ``torch.device("cuda") if dist.get_world_size() > 1 else None``: the several-process arm
    if isinstance(up, ast.IfExp) and up.body is node and isinstance(t := up.test, ast.Compare) and len(t.ops) == 1 \
            and _WORLD.match(((dotted(t.left.func) if isinstance(t.left, ast.Call) else dotted(t.left)) or "")
                             .rsplit(".", 1)[-1].removeprefix("get_")) \
            and isinstance(c := t.comparators[0], ast.Constant) \
            and (type(t.ops[0]), c.value) in ((ast.Gt, 1), (ast.GtE, 2), (ast.NotEq, 1)):
        return True
    for stmt in func.body:  # type: ignore[attr-defined]
        if sem.contains(stmt, node):
            return False
        if isinstance(stmt, ast.If) and stmt.body and isinstance(stmt.body[-1], ast.Return) \
                and isinstance(t := stmt.test, ast.Compare) and len(t.ops) == 1 and isinstance(t.left, ast.Name) \
                and _WORLD.match(t.left.id) and isinstance(c := t.comparators[0], ast.Constant) and (
                    isinstance(t.ops[0], (ast.Eq, ast.LtE)) and c.value == 1 or isinstance(t.ops[0], ast.Lt) and c.value == 2):
            return True
    return False


_COLLECTIVES = frozenset({"all_reduce", "all_gather", "all_gather_into_tensor", "broadcast", "reduce", "reduce_scatter",
                          "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "gather", "scatter"})


def _collective(sem, call: ast.Call) -> bool:  # type: ignore[no-untyped-def]
    """``dist.all_reduce(t)``, ``torch.distributed.all_gather(out, t)``: a collective of ``torch.distributed``."""
    q = sem.qualname(call.func) or ""
    return q.startswith("torch.distributed.") and q.rsplit(".", 1)[-1] in _COLLECTIVES


def _collective_helper(sem, func: ast.AST, depth: int = 0) -> bool:  # type: ignore[no-untyped-def]
    """``func`` runs a ``torch.distributed`` collective on every call (a statement of its own body, maybe through a
    function of the module that does: fairseq's ``all_gather_list``, whose ``all_reduce(buffer)`` wraps
    ``dist.all_reduce``), with no return before it: it only runs inside a process group; with no gloo backend in the
    project, a GPU one."""
    for stmt in func.body:  # type: ignore[attr-defined]
        value = stmt.value if isinstance(stmt, (ast.Expr, ast.Assign, ast.Return)) else None
        if not isinstance(value, ast.Call):
            if any(isinstance(n, ast.Return) for n in sem.subtree(stmt)):
                return False  # (``if world_size == 1: return flag`` first: a single process runs what came before)
            continue
        if _collective(sem, value):
            return True
        if depth == 0 and isinstance(value.func, ast.Name) and any(
                isinstance(f, ast.FunctionDef) and f is not func and _collective_helper(sem, f, 1)
                for f in sem.resolve(value)):
            return True
    return False


def _collective_block(sem, node: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``avg = torch.tensor(avg).cuda()`` followed in its block by ``torch.distributed.reduce(avg, dst=0)`` (Cutie's
    ``if self.distributed:`` branch of a log integrator): the tensor made on the GPU is handed to a collective, so
    the block runs only inside a process group, where NCCL needs it there."""
    stmt = sem.statement_of(node)
    up = sem.parent(stmt)
    block = next((b for b in (getattr(up, "body", None), getattr(up, "orelse", None))
                  if isinstance(b, list) and any(s is stmt for s in b)), None)
    made = {n.id for t in getattr(stmt, "targets", ()) for n in sem.subtree(t) if isinstance(n, ast.Name)}
    if block is None or not made:
        return False  # (the tensor the collective is handed: not an input moved before a step that reduces others)
    for later in block[next(i for i, s in enumerate(block) if s is stmt) + 1:]:
        if any(isinstance(n, (ast.Return, ast.Raise, ast.Break, ast.Continue)) for n in sem.subtree(later)):
            return False  # (``if world_size == 1: return flag`` between: a single process may stop there)
        if isinstance(later, ast.Expr) and isinstance(later.value, ast.Call) and _collective(sem, later.value) \
                and any(isinstance(a, ast.Name) and a.id in made for a in later.value.args):
            return True
    return False


def _class_asserts_cuda(sem, node: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """A method of a class whose ``__init__`` asserts a CUDA device (``assert "cuda" in args.device, "DDP backend can
    not be used on non-CUDA devices"``, llm-baselines): no object of it exists without a GPU."""
    cls = sem.class_of(node)
    init = models.init_of(cls) if cls is not None else None
    return init is not None and any(
        isinstance(stmt, ast.Assert) and any(isinstance(n, ast.Constant) and isinstance(n.value, str)
                                             and n.value.lower().split(":")[0] == "cuda" for n in sem.subtree(stmt.test))
        and "device" in sem.segment(stmt.test) for stmt in init.body)


def _cpu_in_the_other_branch(sem, node: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``if opt.world_size == 1: self.device = "cuda"`` ``else: self.device = "cpu"``: an ``if`` whose other branch
    sets the same name to the CPU chooses the device, whatever its test asks."""
    setting = sem.parent(node)
    while isinstance(setting, ast.Call):  # (``torch.device("cuda")``)
        setting = sem.parent(setting)
    up = sem.parent(setting)
    if not (isinstance(setting, ast.Assign) and len(setting.targets) == 1 and isinstance(up, ast.If) and up.orelse):
        return False
    key = dotted(setting.targets[0])
    other = up.orelse if any(s is setting for s in up.body) else up.body
    return key is not None and any(isinstance(s, ast.Assign) and len(s.targets) == 1 and dotted(s.targets[0]) == key
                                   and program.cpu_device_value(sem, s.value) for s in other)


def _rebound_to_the_cpu(sem, node: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``device = torch.device('cuda')`` in a notebook's early cell, rebound by ``device = torch.device('cpu')`` at module
    level before the cell that trains, in a program whose every move ends on the CPU: making the CUDA device object
    needs no GPU, and nothing uses it."""
    setting = sem.parent(node)
    if not (isinstance(setting, ast.Assign) and setting.value is node and sem.function_of(setting) is None
            and len(setting.targets) == 1 and isinstance(setting.targets[0], ast.Name)):
        return False
    name = setting.targets[0].id
    return any(b.node is not setting and sem.function_of(b.node) is None and b.value is not None
               and sem.index.pos.get(b.node, -1) > sem.index.pos[setting] and program.cpu_device_value(sem, b.value)
               for b in sem.bindings_of(name)) and not program.runs_on_accelerator(sem)


def _helper_called_when_chosen(sem, node: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``def _move_to_cuda(t): return t.cuda()`` (recursing into dicts and lists), called only under ``if use_cuda:``:
    the helper runs when the caller chose the GPU, as a ``.cuda()`` written in that branch would."""
    func = sem.function_of(node)
    if func is None:
        return False
    sites = [s for s in sem.call_sites(func) if not sem.contains(func, s)]  # (its own recursive calls aside)
    return bool(sites) and all(sem.chooses_device(s) for s in sites)


def _used_only_when_asked(sem, node: ast.AST) -> bool:
    """``OFFLOAD = torch.device("cuda:0")`` at module level (making a device object needs no GPU), read only under
    ``if split:`` or ``if self.split:`` where ``split`` is a parameter that defaults to False (or None): the CUDA
    path runs when a caller asks for it (DropEdge's ``mixmode``, turned on only when CUDA is available)."""
    setting = sem.parent(node)
    if not (isinstance(setting, ast.Assign) and setting.value is node and sem.function_of(setting) is None
            and sem.class_of(setting) is None and len(setting.targets) == 1 and isinstance(setting.targets[0], ast.Name)):
        return False
    reads = sem.reads_of(setting.targets[0].id)
    return bool(reads) and all(_under_opt_in(sem, r) for r in reads)


def _under_opt_in(sem, node: ast.AST) -> bool:
    func = sem.function_of(node)
    for up in sem.ancestors(node):
        if up is func or func is None:
            return False
        if isinstance(up, ast.If) and any(s is node or sem.contains(s, node) for s in up.body):
            flag = up.test.attr if isinstance(up.test, ast.Attribute) and dotted(up.test.value) == "self" else \
                up.test.id if isinstance(up.test, ast.Name) else None
            owner = func if isinstance(up.test, ast.Name) else next(
                (f for f in getattr(sem.class_of(func), "body", ()) if isinstance(f, ast.FunctionDef)
                 and f.name == "__init__"), None)
            default = param_default(owner, flag) if owner is not None and flag else None
            if isinstance(default, ast.Constant) and default.value in (False, None):
                return True
    return False


def _overridden_by_exec(sem: object, setting: ast.Assign) -> bool:
    """A module-level setting that a later ``exec(open("configurator.py").read())`` may rebind from the command
    line (nanoGPT's and llama2.c's ``--device=cpu``): a default, like argparse's ``default="cuda"``."""
    return any(sem.function_of(call) is None and call.lineno > setting.lineno  # type: ignore[attr-defined]
               and isinstance(sem.parent(call), ast.Expr) for call in sem.calls_named("exec"))  # type: ignore[attr-defined]


def _chosen_device(sem, node: ast.AST) -> str | None:
    """``self._device`` where the class of ``node`` sets one from something other than a CUDA literal
    (``self._device = utils.get_device(device=cfg.device)``): the device a hard-coded ``device="cuda"`` bypasses."""
    cls, func = sem.class_of(node), sem.function_of(node)
    if cls is None or func is None or [a.arg for a in func.args.args[:1]] != ["self"]:
        return None
    for n in sem.subtree(cls):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Attribute) \
                and isinstance(n.targets[0].value, ast.Name) and n.targets[0].value.id == "self" \
                and n.targets[0].attr.lstrip("_") == "device" and not cuda_sites.cuda_string(n.value)[0]:
            return f"self.{n.targets[0].attr}"
    return None


def _receiver_name(ctx: Context, expr: ast.AST) -> str:
    """How a TD102 message names what ``.cuda()`` is called on: its source, or, when that is long, its head with the
    rest elided (``self.last_frames[...]``, ``build_model(...)``): never a name that is not on the line."""
    name = ctx.name(expr)
    if len(name) <= 40 or "\n" in name:
        return name
    if isinstance(expr, ast.Subscript) and len(head := ctx.name(expr.value)) <= 40:
        return f"{head}[...]"
    if isinstance(expr, ast.Call) and len(head := ctx.name(expr.func)) <= 40:
        return f"{head}(...)"
    return name
