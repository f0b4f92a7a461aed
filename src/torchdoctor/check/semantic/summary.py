"""What one module tells the others: its model classes (and whether they hold dropout/batch-norm), the
effects of its functions and what they return (its calls into other modules: call_records.py).

Summaries are small and hold no syntax tree: the project index keeps them for the whole run.
"""

from __future__ import annotations

import ast

from torchdoctor.check.astutil import HOST_COPIES, PLACEMENT_METHODS, dotted, func_params, strip_methods
from torchdoctor.check.patterns import lazy
from torchdoctor.check.semantic import gpu_only, program
from torchdoctor.check.semantic.program import names_cuda
from torchdoctor.check.semantic.loaders import builds_a_loader, class_collates_arrays, class_yields_device_tensors, \
    class_yields_text, loader_init_passes, numpy_params, only_python, returned_keys, unpinned_returns
from torchdoctor.check.semantic.call_records import runs_per_step
from torchdoctor.check.semantic.device_choice import option_dest
from torchdoctor.check.semantic.loops import EVAL_FUNC
from torchdoctor.check.semantic.model import SemanticModel
from torchdoctor.check.semantic.forwards import forward_moved_params, moved_params, network_methods
from torchdoctor.check.semantic.frozen import class_differentiates, class_freezes_itself, forward_flag_chain, \
    forward_quiet_unless, \
    methods_without_grad, quiet_self_calls
from torchdoctor.check.semantic.models import class_has_batchnorm, class_has_dropout_or_bn, class_has_no_parameters, class_holds_no_state, \
    class_moves_itself, class_parts, holds_plain_tensors_only, init_params, loss_weight_params, submodule_names
from torchdoctor.record import FrozenRecord, Record

__all__ = ["ClassSummary", "FunctionSummary", "ModuleSummary", "summarize"]

_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_WRAPS = lazy(r"DataParallel|\bDDP\b|FullyShardedDataParallel|\bFSDP\b")


class ClassSummary(FrozenRecord):
    __slots__ = ("name", "is_module", "dropout_bn", "stateless", "yields_text", "bases", "step_calls", "moves_self", "parts",
                 "paramless", "builds_loader", "frozen", "init_params", "yields_device", "loader_passes",
                 "collates_arrays", "quiet_methods", "moved_inputs", "network_methods", "batchnorm", "loss_weights",
                 "quiet_calls", "submodules", "quiet_unless", "differentiates", "flag_chain")
    name: str
    is_module: bool
    dropout_bn: bool
    stateless: bool  # no parameters, buffers, submodules or tensors: nothing to move
    yields_text: bool  # a Dataset whose items are strings read from a file
    bases: tuple[str, ...]  # as written (``BaseModel``, ``models.Base``): followed across modules on demand
    step_calls: frozenset[str]  # ``self.m(...)`` its methods call on every step of a batch loop (a subclass's m runs)
    moves_self: bool  # its ``__init__`` moves itself or its parts to a device
    parts: tuple[str, ...] | None  # its submodules' classes, as written, when it keeps no layer or tensor of its own
    paramless: bool  # buffers and tensors at most: no parameter, no layer that has one
    builds_loader: bool  # a DataLoader subclass whose ``__init__`` builds torch's (``super().__init__(...)``)
    frozen: str | None  # its ``__init__`` freezes every parameter: "" always, or unless this parameter is given
    init_params: tuple[str, ...]  # its ``__init__``'s parameters after ``self``, in order
    yields_device: bool  # a Dataset whose items it moves to a device itself (``return x.cuda(), y.cuda()``)
    loader_passes: frozenset[str]  # a DataLoader subclass: the pipeline arguments its ``__init__`` turns on
    collates_arrays: bool  # a Dataset whose ``collate_fn`` method makes no torch tensor (NumPy batches: nothing to pin)
    quiet_methods: frozenset[str]  # its methods that turn autograd off themselves (frozen.methods_without_grad)
    moved_inputs: frozenset[int]  # positions of the ``forward`` inputs it moves to a device itself (forwards.py)
    network_methods: frozenset[str]  # methods other than ``forward`` that run its layers (``process``: forwards.py)
    batchnorm: bool  # a BatchNorm layer in it, its parts or its bases (DDP without SyncBatchNorm: TD706)
    loss_weights: tuple[str, ...] | None  # a loss holding nothing unless given these weights (models.loss_weight_params)
    quiet_calls: frozenset[str]  # ``self.m(...)`` its methods call only with autograd off (a subclass's m records nothing)
    submodules: frozenset[str]  # attributes its ``__init__`` sets to a layer or a model (``self.decoder = Decoder(...)``)
    quiet_unless: str | None  # its ``forward`` runs a no-grad method unless built with this flag (frozen.forward_quiet_unless)
    differentiates: bool  # a module class whose methods take gradients themselves (``autograd.grad``: MAML's inner loop)
    flag_chain: tuple | None  # how its ``forward`` picks a branch by flags, and which run under no_grad (frozen.py)

    def __init__(self, name: str, is_module: bool, dropout_bn: bool, stateless: bool = False,
                 yields_text: bool = False, bases: tuple[str, ...] = (), step_calls: frozenset[str] = frozenset(),
                 moves_self: bool = False, parts: tuple[str, ...] | None = None, paramless: bool = False,
                 builds_loader: bool = False, frozen: str | None = None, init_params: tuple[str, ...] = (),
                 yields_device: bool = False, loader_passes: frozenset[str] = frozenset(),
                 collates_arrays: bool = False, quiet_methods: frozenset[str] = frozenset(),
                 moved_inputs: frozenset[int] = frozenset(), network_methods: frozenset[str] = frozenset(),
                 batchnorm: bool = False, loss_weights: tuple[str, ...] | None = None,
                 quiet_calls: frozenset[str] = frozenset(), submodules: frozenset[str] = frozenset(),
                 quiet_unless: str | None = None, differentiates: bool = False, flag_chain: tuple | None = None) -> None:
        self._fill(name, is_module, dropout_bn, stateless, yields_text, bases, step_calls, moves_self, parts, paramless,
                   builds_loader, frozen, init_params, yields_device, loader_passes, collates_arrays, quiet_methods,
                   moved_inputs, network_methods, batchnorm, loss_weights, quiet_calls, submodules, quiet_unless,
                   differentiates, flag_chain)


class FunctionSummary(FrozenRecord):
    __slots__ = ("name", "effects", "loops", "params", "returns", "one_step", "numpy_params", "keys", "moves",
                 "unpinned", "made")
    name: str  # "f" or "Class.method"
    effects: frozenset[str]  # see semantic.calls.EFFECTS
    loops: bool  # trains (reaches backward), or is an evaluate-named function with a loop
    params: tuple[str, ...]
    returns: str | None  # "wrapper": every return is a DDP/DataParallel/FSDP wrapper; "device": it may return CUDA;
    # "cuda_model": it returns what it built moved by ``.cuda()`` (``return model.cuda()``, ``return enc.cuda(),
    # dec.cuda()``); "derived": tensor arithmetic on its parameters (a tensor where they are); "python": its parameters,
    # regrouped with Python alone (a collate function that makes no tensor: ``loaders.only_python``); "host": every
    # return hands back a host copy (``return err.view(-1).cpu().numpy()``); "host_or_first": a host copy or the first
    # parameter as handed (``all_reduce_mean(x)``); "moved": every return, each element of
    # its tuple, is moved to a device (``return x.to(device), y.to(device)``); "generator": it yields (a call runs
    # nothing until iterated)

    one_step: bool  # one whole training step: backward and an optimizer step, no loop that backpropagates
    numpy_params: frozenset[str]  # parameters its first statement turns into NumPy arrays (``x = x.cpu().numpy()``)
    keys: frozenset[str] | None  # every return is a dict of these keys (``loaders.returned_keys``), else None
    moves: tuple[tuple[str, str], ...]  # (parameter, device) it moves there (``forwards.moved_params``)
    unpinned: frozenset[int]  # the unpinned DataLoaders it returns: -1 alone, else tuple positions (loaders.py)
    made: str | None  # the class, as written, of the object every return hands back (``pt.Model``; _returned_object)

    def __init__(self, name: str, effects: frozenset[str], loops: bool, params: tuple[str, ...],
                 returns: str | None = None, one_step: bool = False, numpy_params: frozenset[str] = frozenset(),
                 keys: frozenset[str] | None = None, moves: tuple[tuple[str, str], ...] = (),
                 unpinned: frozenset[int] = frozenset(), made: str | None = None) -> None:
        self._fill(name, effects, loops, params, returns, one_step, numpy_params, keys, moves, unpinned, made)


class ModuleSummary(Record):
    __slots__ = ("path", "classes", "functions", "from_imports", "imports", "star", "accelerated", "cuda_names",
                 "gpu_only", "kernel_builders", "kernel_calls", "optional_imports", "shadowed", "true_flags")

    def __init__(self, path: str, classes: dict[str, ClassSummary] | None = None,
                 functions: dict[str, FunctionSummary] | None = None,
                 from_imports: dict[str, tuple[int, str, str]] | None = None, imports: dict[str, str] | None = None,
                 star: list[tuple[int, str]] | None = None, accelerated: bool = False,
                 cuda_names: frozenset[str] = frozenset(), gpu_only: bool = False,
                 kernel_builders: frozenset[str] = frozenset(), kernel_calls: tuple[tuple[int, str, str], ...] = (),
                 optional_imports: frozenset[str] = frozenset()) -> None:
        self.path = path
        self.classes: dict[str, ClassSummary] = {} if classes is None else classes
        self.functions: dict[str, FunctionSummary] = {} if functions is None else functions
        # local name -> (level, module, name) for ``from m import x`` (re-exports), and plain imports
        self.from_imports: dict[str, tuple[int, str, str]] = {} if from_imports is None else from_imports
        self.imports: dict[str, str] = {} if imports is None else imports
        self.star: list[tuple[int, str]] = [] if star is None else star  # ``from m import *``
        self.accelerated = accelerated  # the module itself puts work on an accelerator (seen without other modules)
        self.cuda_names = cuda_names  # module-level settings naming CUDA (``device = torch.device("cuda" ...)``)
        self.gpu_only = gpu_only  # it imports a library that runs on NVIDIA GPUs only (program.imports_gpu_only)
        self.kernel_builders = kernel_builders  # its functions that compile a CUDA kernel (gpu_only.kernel_builders)
        self.kernel_calls = kernel_calls  # other modules' functions it calls on import (gpu_only.kernel_calls)
        self.optional_imports = optional_imports  # names it imports in a ``try`` that goes on without them
        self.shadowed: tuple[tuple[int, str, str], ...] = ()  # other imports of a name it imports again (Names.shadowed)
        self.true_flags: frozenset[str] = frozenset()  # module-level names only ever set to True (``USE_CUDA = True``)


def summarize(sem: SemanticModel) -> ModuleSummary:
    out = ModuleSummary(sem.path, from_imports=dict(sem.names.from_imports), imports=dict(sem.names.imports),
                        star=list(sem.names.star), accelerated=program.runs_on_accelerator(sem),
                        cuda_names=_cuda_settings(sem), gpu_only=program.imports_gpu_only(sem),
                        kernel_builders=gpu_only.kernel_builders(sem), kernel_calls=gpu_only.kernel_calls(sem),
                        optional_imports=gpu_only.optional_imports(sem))
    out.shadowed = tuple(sem.names.shadowed)
    out.true_flags = frozenset(k for k, bound in sem.bindings.by_key.items() if "." not in k and bound and all(
        isinstance(b.value, ast.Constant) and b.value.value is True and isinstance(b.node, ast.Assign)
        and sem.frame(b.node).kind == "module" for b in bound))
    step_calls: dict[ast.AST, set[str]] = {}
    for call in sem.calls:
        if isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name) and call.func.value.id == "self" \
                and (owner := sem.class_of(call)) is not None and runs_per_step(sem, call):
            step_calls.setdefault(owner, set()).add(call.func.attr)
    grad_off = "no_grad" in sem.text.source or "inference_mode" in sem.text.source
    moves = ".to(" in sem.text.source or ".cuda(" in sem.text.source
    for cls in sem.of_type(ast.ClassDef):
        name = cls.name  # type: ignore[attr-defined]
        is_module = name in sem.module_classes
        dropout_bn = is_module and class_has_dropout_or_bn(sem, name)
        out.classes[name] = ClassSummary(name, is_module, dropout_bn,
                                         is_module and (class_holds_no_state(sem, cls) or holds_plain_tensors_only(sem, cls)),
                                         not is_module and class_yields_text(sem, cls),
                                         tuple(b for b in map(dotted, cls.bases) if b),  # type: ignore[attr-defined]
                                         frozenset(step_calls.get(cls, ())),
                                         is_module and class_moves_itself(sem, cls),
                                         class_parts(sem, cls) if is_module else None,
                                         is_module and class_has_no_parameters(sem, cls),
                                         not is_module and builds_a_loader(sem, cls),
                                         class_freezes_itself(sem, cls) if is_module else None,
                                         init_params(cls),
                                         not is_module and class_yields_device_tensors(sem, cls),
                                         loader_init_passes(sem, cls) if not is_module and builds_a_loader(sem, cls)
                                         else frozenset(),
                                         not is_module and class_collates_arrays(sem, cls),
                                         methods_without_grad(sem, cls),
                                         forward_moved_params(sem, cls, moves) if is_module else frozenset(),
                                         network_methods(sem, cls) if is_module else frozenset(),
                                         dropout_bn and class_has_batchnorm(sem, name),
                                         loss_weight_params(sem, cls) if is_module and "Loss" in sem.text.source else None,
                                         quiet_self_calls(sem, cls) if grad_off else frozenset(),
                                         submodule_names(sem, cls) if is_module else frozenset(),
                                         forward_quiet_unless(sem, cls) if is_module and grad_off else None,
                                         is_module and "grad(" in sem.text.source and class_differentiates(sem, cls),
                                         _forward_flag_chain(sem, cls) if is_module and grad_off else None)
    # A module that names no wrapper returns none (no return kinds asked); one that also compiles is left
    # unsaid: its wrapper's keys may gain `_orig_mod.` instead of `module.`.
    source = sem.text.source  # (substring tests first: a regex scan of the whole text costs ~10x more)
    wraps = ("DataParallel" in source or "DP" in source and _WRAPS.search(source) is not None) and \
        "compile(" not in source
    says_cuda, moves_to_cuda = "cuda" in source, ".cuda(" in source  # (once: a scan of the text for each function cost 2 %)
    asks_gpus = "is_available" in source or "device_count" in source
    samplers = "Sampler(" in source
    loaders_made = "DataLoader(" in source
    generators = {sem.function_of(y) for y in [*sem.of_type(ast.Yield), *sem.of_type(ast.YieldFrom)]} \
        if "yield" in source else set()
    for funcs in sem.functions.values():
        for func in funcs:
            frame = sem.frame(func)
            if frame.kind == "class":
                key = f"{frame.node.name}.{func.name}"  # type: ignore[attr-defined]
            elif frame.kind == "module":
                key = func.name  # type: ignore[attr-defined]
            else:
                continue
            effects = sem.effects(func)  # this module's own code: a summary never reads further modules
            if "sync" in effects and _reads_host_draws_only(sem, func):
                effects -= {"sync", "read"}  # (stylegan2's ``augment``: ``torch.empty(2).uniform_(...)...item()``)
            if "sync" in effects and (_returns_after_a_read(sem, func) or _ends_in_host_work(sem, func)):
                effects |= {"drains"}  # (its GPU work read back before it returns: the GPU is idle after a call)
            if asks_gpus and program.refuses_cpu(sem, func):
                effects |= {"needs_gpu"}  # (not one of EFFECTS: said only to the callers in other modules)
            if samplers and program.shuffling_samplers(sem, sem.local_nodes(func)):
                effects |= {"dsampler"}  # (builds a shuffling DistributedSampler: its caller must call set_epoch)
            has_loop = "backward" in effects or bool(EVAL_FUNC.search(func.name)) and any(  # type: ignore[attr-defined]
                isinstance(n, _LOOPS) for n in sem.local_nodes(func))
            returns = "wrapper" if wraps and sem.kinds.return_kind(func) == "wrapper" else \
                "device" if says_cuda and _returns_cuda_choice(sem, func) else \
                "cuda_model" if moves_to_cuda and _returns_moved_to_cuda(sem, func) else \
                "python" if len(func.args.args) == 1 and only_python(sem, func, 1) else \
                "host" if _returns_host_copies(sem, func) or _returns_fresh_host_tensor(sem, func) \
                or returns_from_numpy(sem, func) else \
                "host_or_first" if _returns_host_or_first(sem, func) else \
                "derived" if sem.kinds.computes_on_params([func]) else \
                "python" if len(func.args.args) > 1 and only_python(sem, func, 1) else \
                "moved" if moves and _returns_moved(sem, func) else None
            made = _returned_object(sem, func)
            returns = returns or made or ("generator" if func in generators else None)
            params = tuple(func_params(func))  # type: ignore[arg-type]
            one_step = {"backward", "step"} <= effects and not _loops_backward(sem, func)
            keys = returned_keys(sem, func) if not params and returns is None else None  # (what ``**f()`` passes)
            out.functions[key] = FunctionSummary(key, effects, has_loop, params, returns, one_step, numpy_params(func),
                                                 keys, moved_params(sem, func) if moves else (),
                                                 unpinned_returns(sem, func) if loaders_made else frozenset(),
                                                 made[len("object:"):] if made else None)
    _inherited_methods(sem, out)
    return out


def _forward_flag_chain(sem: SemanticModel, cls: ast.AST) -> tuple | None:
    forward = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "forward"), None)  # type: ignore[attr-defined]
    chain = forward_flag_chain(sem, forward) if forward is not None else None
    return chain if chain is not None and any(quiet for _, _, quiet in chain) else None


def _inherited_methods(sem: SemanticModel, out: ModuleSummary) -> None:
    """``RecTrainer(Trainer)`` of this module, which overrides ``iteration`` but not ``train``: ``RecTrainer.train`` is
    ``Trainer.train`` (found by ``trainer.train(epoch)`` of ``trainer = RecTrainer(...)`` in another module) with its
    ``self.iteration(...)`` calls dispatched to the override (ICLRec's trainers, whose backward lives in the
    subclass): its effects are the base method's and the overrides' it calls."""
    classes = sem.calls_index.classes
    for cls in sem.of_type(ast.ClassDef):
        own = {f.name for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}  # type: ignore[attr-defined]
        bases = [classes.get(dotted(b) or "") for b in cls.bases]  # type: ignore[attr-defined]
        for base in (b for b in bases if b is not None and b is not cls):
            for method in base.body:  # type: ignore[attr-defined]
                if not isinstance(method, ast.FunctionDef) or method.name in own \
                        or (found := out.functions.get(f"{base.name}.{method.name}")) is None:  # type: ignore[attr-defined]
                    continue
                called = {c.func.attr for c in sem.local_nodes(method) if isinstance(c, ast.Call)
                          and isinstance(c.func, ast.Attribute) and isinstance(c.func.value, ast.Name)
                          and c.func.value.id == "self" and c.func.attr in own}
                extra = frozenset().union(*(out.functions[f"{cls.name}.{m}"].effects for m in called  # type: ignore[attr-defined]
                                            if f"{cls.name}.{m}" in out.functions))  # type: ignore[attr-defined]
                effects = found.effects | extra
                key = f"{cls.name}.{method.name}"  # type: ignore[attr-defined]
                out.functions[key] = FunctionSummary(key, effects, found.loops or "backward" in effects, found.params,
                                                     found.returns, found.one_step, found.numpy_params, found.keys,
                                                     found.moves, found.unpinned, found.made)


def _returned_object(sem: SemanticModel, func: ast.AST) -> str | None:
    """``"object:Wrapper"`` when every ``return`` of a module-level builder hands back an object it makes of one class
    (``return Wrapper(opt)``, or a name bound to that): whether it runs on an accelerator is that class's module's
    to say (``Project._in_module`` follows it)."""
    if sem.frame(func).kind != "module":
        return None
    made = set()
    for r in sem.kinds.returns_of(func):
        value = r.value
        if isinstance(value, ast.Name) and (b := sem.binding_at(value.id, r)) is not None and not b.is_param \
                and b.index is None:
            value = b.value
        value = strip_methods(value, PLACEMENT_METHODS) if value is not None else None  # (``S2S(enc, dec).to(device)``)
        written = dotted(value.func) if isinstance(value, ast.Call) else None
        if not written or not written.rsplit(".", 1)[-1][:1].isupper():
            return None
        made.add(written)
    return f"object:{made.pop()}" if len(made) == 1 else None


def _returns_host_copies(sem: SemanticModel, func: ast.AST) -> bool:
    """Every ``return`` of ``func`` hands back a value copied to the host (``.cpu().numpy()``, ``.tolist()``, maybe
    indexed or reshaped after the copy: ``.cpu().numpy()[:, 0]``)."""
    by_unit = sem.cached("host_copy_returns", lambda: _returns_by_unit(sem))
    returns = by_unit.get(func)
    if not returns:
        return False
    return all(_host_copy(sem, r.value) for r in returns)  # type: ignore[attr-defined]


def _returns_host_or_first(sem: SemanticModel, func: ast.AST) -> bool:
    """Every ``return`` hands back a host copy or the first parameter as it came (DeiT's ``all_reduce_mean(x)``:
    ``return x_reduce.item()`` with several processes, ``return x`` with one): a host number when handed one."""
    params = [a.arg for a in (*func.args.posonlyargs, *func.args.args)]  # type: ignore[attr-defined]
    if not params:
        return False
    returns = sem.kinds.returns_of(func)
    first = params[0]
    kept = [r for r in returns if isinstance(r.value, ast.Name) and r.value.id == first]
    if not kept or len(kept) == len(returns) or not all(r in kept or _host_copy(sem, r.value) for r in returns):
        return False
    return not any(not b.is_param for b in sem.bindings_of(first) if sem.scope_of(b.node) is func)
    # (rebound in the function: not what the caller handed)


_HOST_FACTORIES = frozenset({"torch.zeros", "torch.ones", "torch.empty", "torch.full", "torch.arange", "torch.tensor",
                             "torch.FloatTensor", "torch.LongTensor", "torch.Tensor"})


def _returns_fresh_host_tensor(sem: SemanticModel, func: ast.AST) -> bool:
    """Every ``return`` hands back a tensor the function made with a factory and no device, then filled in place
    (pose's ``accuracy``: ``acc = torch.zeros(len(idxs) + 1)``, ``acc[i + 1] = ...``, ``return acc``): a host tensor,
    wherever its arguments were."""
    returns = sem.kinds.returns_of(func)
    if not returns or not all(isinstance(r.value, ast.Name) for r in returns):
        return False
    for r in returns:
        if not isinstance(r.value, ast.Name):
            return False
        bound = [b for b in sem.bindings_of(r.value.id) if sem.scope_of(b.node) is func]
        if not bound or any(b.is_param or b.index is not None or not isinstance(b.value, ast.Call)
                            or sem.call_name(b.value) not in _HOST_FACTORIES
                            or any(k.arg == "device" for k in b.value.keywords) for b in bound):
            return False
    return True


def _returns_moved(sem: SemanticModel, func: ast.AST) -> bool:
    """Every ``return`` hands back moved tensors, each element of a tuple moved (``return torch.Tensor(x).to(device),
    torch.Tensor(y).to(device)``): a data helper that puts a whole set on the device."""
    values = sem.kinds.returned_values(func)
    if not values:
        return False
    return all(all(sem.value_is_moved(e) for e in (v.elts if isinstance(v, ast.Tuple) else [v])) for v in values)


_READS = frozenset({"cpu", "item", "tolist"})


def _returns_after_a_read(sem: SemanticModel, func: ast.AST) -> bool:
    """``func`` returns only after reading back the GPU work it queued: its last statement that does anything reads
    (``return [pickle.loads(bytes(o.cpu().tolist())) for o in out]``, or a loop of ``buf = t.cpu().numpy()`` before
    ``return data_list``), and any earlier ``return`` sits in an ``if`` at its top, before any work (``world_size =
    get_world_size()``, ``if world_size == 1: return [data]``), handing back its arguments."""
    body = [s for s in getattr(func, "body", ()) if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    tail = len(body)
    while tail and (isinstance(body[tail - 1], ast.Return) and _names_only(sem, body[tail - 1].value)
                    or isinstance(body[tail - 1], ast.Assign) and _names_only(sem, body[tail - 1].value)):
        tail -= 1  # (``return data_list``, ``data_list = []``: nothing queued)
    if not tail or not any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _READS
                           for n in sem.subtree(body[tail - 1])):
        return False
    early = 0
    while early < tail - 1 and isinstance(body[early], ast.Assign) and isinstance(call := body[early].value, ast.Call) \
            and not call.args and not call.keywords:
        early += 1  # (``world_size = get_world_size()``)
    while early < tail - 1 and isinstance(body[early], ast.If) and not body[early].orelse \
            and isinstance(body[early].body[-1], ast.Return):
        early += 1
    last = body[-1] if isinstance(body[-1], ast.Return) else None
    if any(isinstance(n, ast.Return) and n is not last for s in body[early:] for n in sem.subtree(s)):
        return False
    return all(r.value is None or not any(isinstance(n, ast.Call) for n in sem.subtree(r.value))
               for s in body[:early] for r in sem.subtree(s) if isinstance(r, ast.Return))


_HOST_BUILTINS = frozenset({"len", "float", "int", "round", "abs", "min", "max", "sum", "range", "zip", "enumerate",
                            "list", "tuple", "dict", "print", "isinstance"})


def _ends_in_host_work(sem: SemanticModel, func: ast.AST) -> bool:
    """After its last read back, ``func`` only works on the host copies and numbers (UNeXt's ``iou_score``:
    ``output = torch.sigmoid(output).data.cpu().numpy()``, then ``(output_ & target_).sum()`` in NumPy), returning once
    at its end: the GPU is idle when it returns."""
    body = [s for s in getattr(func, "body", ()) if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    last = max((i for i, stmt in enumerate(body) if any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in HOST_COPIES
        for n in sem.subtree(stmt))), default=None)
    if last is None or last == len(body) - 1 or not isinstance(body[-1], ast.Return):
        return False
    host = {n.id for stmt in body for n in sem.subtree(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
            and isinstance(up := sem.parent(n), ast.Assign) and (isinstance(up.value, ast.Constant) or any(
                isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr in HOST_COPIES
                for c in sem.subtree(up.value)))}
    if any(isinstance(n, ast.Return) and n is not body[-1] for stmt in body for n in sem.subtree(stmt)):
        return False
    args = func.args  # type: ignore[attr-defined]
    positional = [*args.posonlyargs, *args.args]
    host |= {a.arg for a, d in [*zip(positional[len(positional) - len(args.defaults):], args.defaults),
                                 *zip(args.kwonlyargs, args.kw_defaults)]
             if isinstance(d, ast.Constant) and type(d.value) in (int, float, bool, str)}  # (``min_depth=0.1``: a number)
    modules = set(sem.names.imports) | set(sem.names.modules)
    own = {f.name for funcs in sem.functions.values() for f in funcs  # type: ignore[attr-defined]
           if sem.frame(f).kind == "module"}  # (``compute_errors(gt[valid], pred[valid])``: a helper given host arrays)

    def host_only(node: ast.AST) -> bool:
        for n in sem.subtree(node):
            if isinstance(n, ast.Call) and not ((sem.qualname(n.func) or "").startswith("numpy.")
                                                or isinstance(n.func, ast.Name) and (n.func.id in _HOST_BUILTINS
                                                                                     or n.func.id in own and bool(n.args))
                                                or isinstance(n.func, ast.Attribute) and all(
                        isinstance(m, ast.Name) and m.id in host for m in sem.subtree(n.func.value)
                        if isinstance(m, ast.Name))):
                return False  # (``(output_ & target_).sum()``: a method of host arrays)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in host and n.id not in modules \
                    and n.id not in _HOST_BUILTINS and n.id not in own:
                return False
        return True

    todo = list(body[last + 1:])
    while todo:
        stmt = todo.pop(0)
        if isinstance(stmt, ast.For) and isinstance(stmt.target, ast.Name) and not stmt.orelse \
                and isinstance(stmt.iter, ast.Call) and isinstance(stmt.iter.func, ast.Name) and stmt.iter.func.id == "range":
            # (``for b in range(y.shape[0]): total += W[b][i][j]``: a Python loop over host arrays)
            if not all(isinstance(m, ast.Name) and (m.id in host or m.id in _HOST_BUILTINS) or not isinstance(m, ast.Name)
                       for a in stmt.iter.args for m in sem.subtree(a)):
                return False
            host.add(stmt.target.id)
            todo[:0] = list(stmt.body)
            continue
        if isinstance(stmt, ast.If):  # (``if garg_crop or eigen_crop:`` over flags and host arrays: a mask made in NumPy)
            if not host_only(stmt.test):
                return False
            todo[:0] = [*stmt.body, *stmt.orelse]
            continue
        if not isinstance(stmt, (ast.Assign, ast.AugAssign, ast.Return)) or not host_only(stmt):
            return False
        if isinstance(stmt, ast.Assign):
            host |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
            host |= {e.id for t in stmt.targets if isinstance(t, ast.Tuple) for e in t.elts if isinstance(e, ast.Name)}
    return True


def _names_only(sem: SemanticModel, value: ast.AST | None) -> bool:
    return value is None or all(isinstance(n, (ast.Name, ast.Tuple, ast.List, ast.Dict, ast.Constant, ast.Load))
                                for n in sem.subtree(value))


_KEEPS_PLACE = frozenset({"float", "double", "long", "int", "half", "unsqueeze", "squeeze", "permute", "view",
                          "reshape", "contiguous", "clone", "transpose", "flip", "mul_", "div_", "sub_", "add_", "copy_",
                          "fill_", "zero_", "detach", "t"})


def returns_from_numpy(sem: SemanticModel, func: ast.AST) -> bool:
    """Every ``return`` hands back ``torch.from_numpy(...)``, maybe reshaped or cast in place of the device
    (``torch.from_numpy(img).permute(2, 0, 1).float().unsqueeze(0)``): a host tensor made from an array."""
    returns = sem.kinds.returns_of(func)
    if not returns:
        return False
    for r in returns:
        value = r.value
        while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in _KEEPS_PLACE:
            value = value.func.value
        if not (isinstance(value, ast.Call) and sem.call_name(value) == "torch.from_numpy"):
            return False
    return True


def _host_copy(sem: SemanticModel, value: ast.AST | None) -> bool:
    """``out.cpu().numpy()[:, 0]``, ``np.mean(ious)``, ``loss.item() / n`` (arithmetic of such values and numbers)."""
    if isinstance(value, ast.BinOp):
        return all(isinstance(v, ast.Constant) and type(v.value) in (int, float) or _host_copy(sem, v)
                   for v in (value.left, value.right))
    if isinstance(value, ast.Call) and (sem.qualname(value.func) or "").startswith("numpy."):
        return True  # ``return np.mean(ious)``: NumPy hands back host values (it cannot take a CUDA tensor)
    in_place = True  # (only methods that keep the place so far: ``torch.FloatTensor(x.size()).copy_(x)`` is fresh)
    while isinstance(value, (ast.Call, ast.Subscript, ast.Attribute)):
        if isinstance(value, ast.Call):
            if not isinstance(value.func, ast.Attribute):
                return False
            if value.func.attr in HOST_COPIES:
                return True
            if in_place and sem.call_name(value) in _HOST_FACTORIES and not any(k.arg == "device" for k in value.keywords):
                return True  # (a legacy ``convert2cpu``: a new host tensor the device one is copied into)
            in_place = in_place and value.func.attr in _KEEPS_PLACE
            value = value.func.value
        else:
            value = value.value
    return False


def _returns_by_unit(sem: SemanticModel) -> dict[ast.AST, list[ast.Return]]:
    """The module's ``return value`` statements by the function they return from, when its text copies anything to
    the host at all (most modules: an empty dict, no walk)."""
    out: dict[ast.AST, list[ast.Return]] = {}
    source = sem.text.source
    if ".cpu()" not in source and ".numpy()" not in source and ".tolist()" not in source and "np." not in source \
            and ".item()" not in source:
        return out
    frames = sem.index.frame
    for r in sem.of_type(ast.Return):
        if r.value is not None:  # type: ignore[attr-defined]
            out.setdefault(frames[r].unit, []).append(r)  # type: ignore[arg-type]
    return out


def _loops_backward(sem: SemanticModel, func: ast.AST) -> bool:
    """Some loop in ``func`` or the in-file functions it calls backpropagates: ``func`` runs many steps, not one.
    (Asked of a module summarized for others without classifying its loops: ``Loops`` costs a pass of its own.)"""
    for f in sem.calls_index.reachable(func):
        for n in sem.local_nodes(f):
            if isinstance(n, _LOOPS) and "backward" in sem.region_effects(sem.body(n)):
                return True
    return False


def _returns_moved_to_cuda(sem: SemanticModel, func: ast.AST, depth: int = 0) -> bool:
    """Every ``return`` of a value hands back ``x.cuda()`` (or a tuple of them), or a name moved in place by a
    ``x.cuda()`` statement of the function: a builder that puts the models it makes on the GPU (XLM's
    ``build_model``: ``return model.cuda()``, ``return encoder.cuda(), decoder.cuda()``; ``mapping.cuda()`` then
    ``return emb, mapping``); or what such a builder of the module returns (``return build_lm(params)``)."""
    def moved(v: ast.AST) -> bool:
        if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and depth < 2:
            funcs = [f for f in sem.resolve(v) if f is not func]
            return bool(funcs) and all(_returns_moved_to_cuda(sem, f, depth + 1) for f in funcs)
        return isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr == "cuda"

    def none(v: ast.AST) -> bool:
        return isinstance(v, ast.Constant) and v.value is None

    values: list[ast.AST] = []
    in_place = {n.value.func.value.id for n in sem.local_nodes(func) if isinstance(n, ast.Expr) and moved(n.value)
                and isinstance(n.value.func.value, ast.Name)}  # (``if params.cuda: mapping.cuda()``: moved in place)
    for n in sem.local_nodes(func):
        if isinstance(n, ast.Return) and n.value is not None:
            for v in (n.value.elts if isinstance(n.value, ast.Tuple) else [n.value]):
                if isinstance(v, ast.Name) and v.id in in_place:
                    values.append(ast.Call(func=ast.Attribute(value=v, attr="cuda"), args=[], keywords=[]))
                elif isinstance(v, ast.Name):  # ``net = UNet(...).cuda()`` in each branch (``else: net = None``)
                    bound = [b.value for b in sem.bindings_of(v.id) if sem.scope_of(b.node) is func and not b.is_param]
                    values += bound if bound and all(x is not None for x in bound) else [v]
                else:
                    values.append(v)
    kept = [v for v in values if not none(v)]
    return bool(kept) and all(moved(v) for v in kept)


def _returns_cuda_choice(sem: SemanticModel, func: ast.AST) -> bool:
    """``return "cuda" if torch.cuda.is_available() else "cpu"``, ``return torch.device("cuda:0")``, ``device =
    "cuda"; ... return device``: the function hands back a device that may be a GPU (tabnet's ``define_device``)."""
    for n in sem.local_nodes(func):
        if isinstance(n, ast.Return) and n.value is not None:
            values = [n.value]
            if isinstance(n.value, ast.Tuple) and n.value.elts and isinstance(n.value.elts[0], ast.Name):
                values = [n.value.elts[0]]  # (``return device, gpu_ids``: the device first, as squad's helper hands it)
            if isinstance(values[0], ast.Name):
                values += [b.value for b in sem.bindings_of(values[0].id) if b.value is not None and not b.is_param
                           and sem.scope_of(b.node) is func]
            if any(names_cuda(sem, v) for v in values):
                return True
    return False


def _cuda_settings(sem: SemanticModel) -> frozenset[str]:
    """Module-level names set to a CUDA device or a choice that includes one: ``DEVICE = "cuda"``,
    ``device = torch.device("cuda" if torch.cuda.is_available() else "cpu")`` (a config module's); and the classes and
    functions that set such a device on the options object they make (``OptInit``, ``get_options``), or hold one as a
    class attribute (a config dataclass's ``device = "cuda:0"``)."""
    out = set()
    for n in sem.body(sem.index.tree):
        if isinstance(n, ast.Assign) and sem.frame(n).kind == "module" and sem.function_of(n) is None \
                and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) and "cuda" in sem.segment(n.value):
            out.add(n.targets[0].id)
    for cls in sem.tree.body if "cuda" in sem.text.source else ():
        if not isinstance(cls, ast.ClassDef):
            continue
        for n in cls.body:  # ``@dataclass class TrainConfig: device = "cuda:0"``; ``class Hyper: device_superres = "cuda:0"``
            if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None and "cuda" in sem.segment(n.value):
                for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                    if isinstance(t, ast.Name) and "device" in t.id.lower():
                        out.add(f"{cls.name}.{t.id}")  # (read off the class itself: ``Hyper.device_superres``)
                        if t.id.lower().endswith("device"):
                            out.add(cls.name)
    if "cuda" in sem.text.source and ".device" in sem.text.source:
        for n in sem.of_type(ast.Assign):  # ``args.device = torch.device("cuda" if ...)`` in ``OptInit.__init__`` or
            if len(n.targets) == 1 and isinstance(t := n.targets[0], ast.Attribute) and t.attr == "device" \
                    and "cuda" in sem.segment(n.value):  # ``get_options()``: the options object it hands out
                cls, func = sem.class_of(n), sem.function_of(n)
                holder = cls if cls is not None else func if func is not None and sem.function_of(func) is None else None
                if holder is not None:
                    out.add(holder.name)  # type: ignore[attr-defined]
    if "cuda" in sem.text.source and "add_argument" in sem.text.source:
        for c in sem.calls_named("add_argument"):  # ``def get_arguments(): ... add_argument("--device", default="cuda")
            # ... return parser.parse_args()``: the options object it hands out names CUDA
            dest = option_dest(c) or ""
            default = next((k.value for k in c.keywords if k.arg == "default"), None)
            func = sem.function_of(c)
            if dest.endswith("device") and default is not None and "cuda" in sem.segment(default) \
                    and func is not None and sem.function_of(func) is None and sem.class_of(func) is None:
                out.add(func.name)  # type: ignore[attr-defined]
    return frozenset(out)


_HOST_DRAW_METHODS = frozenset({"uniform_", "normal_", "random_", "fill_", "zero_", "bernoulli_", "round", "abs",
                                "max", "min", "sum", "mean", "floor", "ceil", "float", "long", "int", "clone"})


def _reads_host_draws_only(sem: SemanticModel, func: ast.AST) -> bool:
    """Every read back in ``func``'s own body (``.item()``, ``.tolist()``) is of a tensor it drew on the host
    (``shift = torch.empty(2).uniform_(-4, 4).round()``, then ``int(shift.abs().max().item())``), and it calls
    nothing of this file that reads: it waits for no GPU."""
    reads = [n for n in sem.local_nodes(func) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr in ("item", "tolist", "cpu") and not n.args]
    if not reads or any(sem.effects(f) & {"sync"} for n in sem.local_nodes(func) if isinstance(n, ast.Call)
                        for f in sem.resolve(n)):
        return False
    for read in reads:
        recv = strip_methods(read.func.value, _HOST_DRAW_METHODS)  # type: ignore[attr-defined]
        b = sem.binding_at(recv.id, read) if isinstance(recv, ast.Name) else None
        made = strip_methods(b.value, _HOST_DRAW_METHODS) if b is not None and not b.is_param and b.value is not None \
            else None
        q = sem.call_name(made) or "" if isinstance(made, ast.Call) else ""
        if not (q in ("torch.empty", "torch.zeros", "torch.ones", "torch.rand", "torch.randn", "torch.randint",
                      "torch.randperm", "torch.arange") and not any(k.arg == "device" for k in made.keywords)):  # type: ignore[union-attr]
            return False
    return True
