"""What one module tells the others: its model classes (and whether they hold dropout/batch-norm), the
effects of its functions, and, for reverse questions, what its calls into other modules look like.

Summaries are small and hold no syntax tree: the project index keeps them for the whole run.
"""

from __future__ import annotations

import ast

from torchdoctor.check.astutil import PLACEMENT_METHODS, dotted, func_params, strip_methods
from torchdoctor.check.patterns import lazy
from torchdoctor.check.semantic import flow, gpu_only, program
from torchdoctor.check.semantic.program import chosen_cuda, names_cuda
from torchdoctor.check.semantic.loaders import builds_a_loader, class_collates_arrays, class_yields_device_tensors, \
    class_yields_text, loader_init_passes, numpy_params, only_python, returned_keys, unpinned_returns
from torchdoctor.check.semantic.counts import few_passes
from torchdoctor.check.semantic.loops import EVAL_FUNC
from torchdoctor.check.semantic.model import SemanticModel
from torchdoctor.check.semantic.forwards import forward_moved_params, moved_params, network_methods
from torchdoctor.check.semantic.frozen import class_freezes_itself, methods_without_grad
from torchdoctor.check.semantic.models import class_has_dropout_or_bn, class_has_no_parameters, class_holds_no_state, \
    class_moves_itself, class_parts, holds_plain_tensors_only, moved_keys
from torchdoctor.check.semantic.placement import cpu_only_loop
from torchdoctor.record import FrozenRecord, Record

__all__ = ["ClassSummary", "FunctionSummary", "ModuleSummary", "CallRecord", "summarize", "call_records", "host_args_of"]

_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_WRAPS = lazy(r"DataParallel|\bDDP\b|FullyShardedDataParallel|\bFSDP\b")


class ClassSummary(FrozenRecord):
    __slots__ = ("name", "is_module", "dropout_bn", "stateless", "yields_text", "bases", "step_calls", "moves_self", "parts",
                 "paramless", "builds_loader", "frozen", "init_params", "yields_device", "loader_passes",
                 "collates_arrays", "quiet_methods", "moved_inputs", "network_methods")
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

    def __init__(self, name: str, is_module: bool, dropout_bn: bool, stateless: bool = False,
                 yields_text: bool = False, bases: tuple[str, ...] = (), step_calls: frozenset[str] = frozenset(),
                 moves_self: bool = False, parts: tuple[str, ...] | None = None, paramless: bool = False,
                 builds_loader: bool = False, frozen: str | None = None, init_params: tuple[str, ...] = (),
                 yields_device: bool = False, loader_passes: frozenset[str] = frozenset(),
                 collates_arrays: bool = False, quiet_methods: frozenset[str] = frozenset(),
                 moved_inputs: frozenset[int] = frozenset(), network_methods: frozenset[str] = frozenset()) -> None:
        self._fill(name, is_module, dropout_bn, stateless, yields_text, bases, step_calls, moves_self, parts, paramless,
                   builds_loader, frozen, init_params, yields_device, loader_passes, collates_arrays, quiet_methods,
                   moved_inputs, network_methods)


class FunctionSummary(FrozenRecord):
    __slots__ = ("name", "effects", "loops", "params", "returns", "one_step", "numpy_params", "keys", "moves",
                 "unpinned")
    name: str  # "f" or "Class.method"
    effects: frozenset[str]  # see semantic.calls.EFFECTS
    loops: bool  # trains (reaches backward), or is an evaluate-named function with a loop
    params: tuple[str, ...]
    returns: str | None  # "wrapper": every return is a DDP/DataParallel/FSDP wrapper; "device": it may return CUDA;
    # "cuda_model": it returns what it built moved by ``.cuda()`` (``return model.cuda()``, ``return enc.cuda(),
    # dec.cuda()``); "derived": tensor arithmetic on its parameters (a tensor where they are); "python": one parameter,
    # regrouped with Python alone (a collate function that makes no tensor: ``loaders.only_python``); "host": every
    # return hands back a host copy (``return err.view(-1).cpu().numpy()``); "moved": every return, each element of
    # its tuple, is moved to a device (``return x.to(device), y.to(device)``)

    one_step: bool  # one whole training step: backward and an optimizer step, no loop that backpropagates
    numpy_params: frozenset[str]  # parameters its first statement turns into NumPy arrays (``x = x.cpu().numpy()``)
    keys: frozenset[str] | None  # every return is a dict of these keys (``loaders.returned_keys``), else None
    moves: tuple[tuple[str, str], ...]  # (parameter, device) it moves there (``forwards.moved_params``)
    unpinned: frozenset[int]  # the unpinned DataLoaders it returns: -1 alone, else tuple positions (loaders.py)

    def __init__(self, name: str, effects: frozenset[str], loops: bool, params: tuple[str, ...],
                 returns: str | None = None, one_step: bool = False, numpy_params: frozenset[str] = frozenset(),
                 keys: frozenset[str] | None = None, moves: tuple[tuple[str, str], ...] = (),
                 unpinned: frozenset[int] = frozenset()) -> None:
        self._fill(name, effects, loops, params, returns, one_step, numpy_params, keys, moves, unpinned)


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


class CallRecord(FrozenRecord):
    """One call, in some module, of a name imported from another module of the project."""

    __slots__ = ("written", "grad_mode", "rank_guarded", "eval_before", "accelerator_args", "ddp", "per_step", "path",
                 "line", "in_loop", "rank_zero_only", "moved_models", "passed", "host_args", "per_iteration", "in_forward",
                 "made_by", "after_refusal", "choices", "in_model_loop")
    written: str  # the callee as written (``engine.train_one_epoch``, ``train_one_epoch``)
    grad_mode: str  # "on", "off", "maybe" at the call
    rank_guarded: bool
    eval_before: bool  # a ``model.eval()`` earlier in the caller's function
    accelerator_args: frozenset[str]  # parameters (by name, or "#i" by position) given an accelerator device
    ddp: bool  # the calling module is a DDP program (its calls run on every rank)
    per_step: bool  # made on every step of a batch loop (not behind a step guard), on an accelerator
    path: str  # the calling module
    line: int
    in_loop: bool  # inside the caller's epoch or batch loop (a training run's checkpoint, not a library's API)
    rank_zero_only: bool  # only the main process makes the call (``Logger(...) if rank == 0 else None``)
    moved_models: frozenset[str]  # parameters (by name, or "#i" by position) given a model moved to an accelerator
    passed: frozenset[str]  # the arguments given, by keyword name or "#i" by position ("*": some unpacked)
    host_args: frozenset[str]  # arguments that are a batch as the loop yields it, not moved yet (by name or "#i")
    per_iteration: bool  # made on every iteration of the loop around it, whatever its kind, on an accelerator
    in_forward: str  # "forward": made in a module class's ``forward`` (or a module-level helper only forwards call
    # here); "method": in another method of a module class (``get_feature_vectors``); "" elsewhere
    made_by: tuple[tuple[str, tuple[int, str, str]], ...]  # (argument slot, the imported function that made it): ``conf``
    # of ``conf = get_config()``, whose module may set its ``.device`` to CUDA (Project.passes_accelerator asks)
    after_refusal: bool  # made after the caller stops without a GPU (``if not torch.cuda.is_available(): raise ...``)
    choices: tuple[tuple[str, str | bool], ...]  # (argument slot, the string or bool it passes): ``distance="l_inf"`` (a literal, or an
    # attribute the caller's file sets once to one: ``norm=args.norm`` of ``args.norm = "l2"``)
    in_model_loop: bool  # made on every pass of a loop that runs a model (a sampling or generation loop), on an accelerator

    def __init__(self, written: str, grad_mode: str, rank_guarded: bool, eval_before: bool,
                 accelerator_args: frozenset[str], ddp: bool = False, per_step: bool = False, path: str = "",
                 line: int = 0, in_loop: bool = False, rank_zero_only: bool = False,
                 moved_models: frozenset[str] = frozenset(), passed: frozenset[str] = frozenset(),
                 host_args: frozenset[str] = frozenset(), per_iteration: bool = False, in_forward: str = "",
                 made_by: tuple[tuple[str, tuple[int, str, str]], ...] = (), after_refusal: bool = False,
                 choices: tuple[tuple[str, str | bool], ...] = (), in_model_loop: bool = False) -> None:
        self._fill(written, grad_mode, rank_guarded, eval_before, accelerator_args, ddp, per_step, path, line, in_loop,
                   rank_zero_only, moved_models, passed, host_args, per_iteration, in_forward, made_by, after_refusal,
                   choices, in_model_loop)


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
                and (owner := sem.class_of(call)) is not None and _per_step(sem, call):
            step_calls.setdefault(owner, set()).add(call.func.attr)
    moves = ".to(" in sem.text.source or ".cuda(" in sem.text.source
    for cls in sem.of_type(ast.ClassDef):
        name = cls.name  # type: ignore[attr-defined]
        is_module = name in sem.module_classes
        out.classes[name] = ClassSummary(name, is_module, is_module and class_has_dropout_or_bn(sem, name),
                                         is_module and (class_holds_no_state(sem, cls) or holds_plain_tensors_only(sem, cls)),
                                         not is_module and class_yields_text(sem, cls),
                                         tuple(b for b in map(dotted, cls.bases) if b),  # type: ignore[attr-defined]
                                         frozenset(step_calls.get(cls, ())),
                                         is_module and class_moves_itself(sem, cls),
                                         class_parts(sem, cls) if is_module else None,
                                         is_module and class_has_no_parameters(sem, cls),
                                         not is_module and builds_a_loader(sem, cls),
                                         class_freezes_itself(sem, cls) if is_module else None,
                                         _init_params(cls),
                                         not is_module and class_yields_device_tensors(sem, cls),
                                         loader_init_passes(sem, cls) if not is_module and builds_a_loader(sem, cls)
                                         else frozenset(),
                                         not is_module and class_collates_arrays(sem, cls),
                                         methods_without_grad(sem, cls) if is_module or cls.bases  # type: ignore[attr-defined]
                                         else frozenset(),  # (a base of another module: maybe a module class)
                                         forward_moved_params(sem, cls) if is_module and moves else frozenset(),
                                         network_methods(sem, cls) if is_module else frozenset())
    # A module that names no wrapper returns none (no return kinds asked); one that also compiles is left
    # unsaid: its wrapper's keys may gain `_orig_mod.` instead of `module.`.
    source = sem.text.source  # (substring tests first: a regex scan of the whole text costs ~10x more)
    wraps = ("DataParallel" in source or "DP" in source and _WRAPS.search(source) is not None) and \
        "compile(" not in source
    says_cuda, moves_to_cuda = "cuda" in source, ".cuda(" in source  # (once: a scan of the text for each function cost 2 %)
    asks_gpus = "is_available" in source or "device_count" in source
    samplers = "Sampler(" in source
    loaders_made = "DataLoader(" in source
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
            if "sync" in effects and _returns_after_a_read(sem, func):
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
                "python" if len(func.args.args) == 1 and only_python(sem, func) else \
                "host" if _returns_host_copies(sem, func) or _returns_fresh_host_tensor(sem, func) \
                or returns_from_numpy(sem, func) else \
                "derived" if sem.kinds.computes_on_params([func]) else \
                "moved" if moves and _returns_moved(sem, func) else _returned_object(sem, func)
            params = tuple(func_params(func))  # type: ignore[arg-type]
            one_step = {"backward", "step"} <= effects and not _loops_backward(sem, func)
            keys = returned_keys(sem, func) if not params and returns is None else None  # (what ``**f()`` passes)
            out.functions[key] = FunctionSummary(key, effects, has_loop, params, returns, one_step, numpy_params(func),
                                                 keys, moved_params(sem, func) if moves else (),
                                                 unpinned_returns(sem, func) if loaders_made else frozenset())
    _inherited_methods(sem, out)
    return out


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
                                                     found.moves, found.unpinned)




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
        written = dotted(value.func) if isinstance(value, ast.Call) else None
        if not written or not written.rsplit(".", 1)[-1][:1].isupper():
            return None
        made.add(written)
    return f"object:{made.pop()}" if len(made) == 1 else None


_HOST_COPIES = frozenset({"cpu", "numpy", "tolist", "item"})


def _returns_host_copies(sem: SemanticModel, func: ast.AST) -> bool:
    """Every ``return`` of ``func`` hands back a value copied to the host (``.cpu().numpy()``, ``.tolist()``, maybe
    indexed or reshaped after the copy: ``.cpu().numpy()[:, 0]``)."""
    by_unit = sem.cached("host_copy_returns", lambda: _returns_by_unit(sem))
    returns = by_unit.get(func)
    if not returns:
        return False
    return all(_host_copy(sem, r.value) for r in returns)  # type: ignore[attr-defined]


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


def _names_only(sem: SemanticModel, value: ast.AST | None) -> bool:
    return value is None or all(isinstance(n, (ast.Name, ast.Tuple, ast.List, ast.Dict, ast.Constant, ast.Load))
                                for n in sem.subtree(value))


_KEEPS_PLACE = frozenset({"float", "double", "long", "int", "half", "unsqueeze", "squeeze", "permute", "view",
                          "reshape", "contiguous", "clone", "transpose", "flip", "mul_", "div_", "sub_", "add_"})


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
    while isinstance(value, (ast.Call, ast.Subscript, ast.Attribute)):
        if isinstance(value, ast.Call):
            if not isinstance(value.func, ast.Attribute):
                return False
            if value.func.attr in _HOST_COPIES:
                return True
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


def _returns_moved_to_cuda(sem: SemanticModel, func: ast.AST) -> bool:
    """Every ``return`` of a value hands back ``x.cuda()`` (or a tuple of them): a builder that puts the models it
    makes on the GPU (XLM's ``build_model``: ``return model.cuda()``, ``return encoder.cuda(), decoder.cuda()``)."""
    def moved(v: ast.AST) -> bool:
        return isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr == "cuda"

    def none(v: ast.AST) -> bool:
        return isinstance(v, ast.Constant) and v.value is None

    values: list[ast.AST] = []
    for n in sem.local_nodes(func):
        if isinstance(n, ast.Return) and n.value is not None:
            for v in (n.value.elts if isinstance(n.value, ast.Tuple) else [n.value]):
                if isinstance(v, ast.Name):  # ``net = UNet(...).cuda()`` in each branch (``else: net = None``)
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
            if isinstance(n.value, ast.Name):
                values += [b.value for b in sem.bindings_of(n.value.id) if b.value is not None and not b.is_param
                           and sem.scope_of(b.node) is func]
            if any(names_cuda(sem, v) for v in values):
                return True
    return False


def _cuda_settings(sem: SemanticModel) -> frozenset[str]:
    """Module-level names set to a CUDA device or a choice that includes one: ``DEVICE = "cuda"``,
    ``device = torch.device("cuda" if torch.cuda.is_available() else "cpu")`` (a config module's); and the classes and
    functions that set such a device on the options object they make (``OptInit``, ``get_options``)."""
    out = set()
    for n in sem.body(sem.index.tree):
        if isinstance(n, ast.Assign) and sem.frame(n).kind == "module" and sem.function_of(n) is None \
                and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) and "cuda" in sem.segment(n.value):
            out.add(n.targets[0].id)
    if "cuda" in sem.text.source and ".device" in sem.text.source:
        for n in sem.of_type(ast.Assign):  # ``args.device = torch.device("cuda" if ...)`` in ``OptInit.__init__`` or
            if len(n.targets) == 1 and isinstance(t := n.targets[0], ast.Attribute) and t.attr == "device" \
                    and "cuda" in sem.segment(n.value):  # ``get_options()``: the options object it hands out
                cls, func = sem.class_of(n), sem.function_of(n)
                holder = cls if cls is not None else func if func is not None and sem.function_of(func) is None else None
                if holder is not None:
                    out.add(holder.name)  # type: ignore[attr-defined]
    return frozenset(out)


def call_records(sem: SemanticModel, names: set[str], accelerator: bool | None = None) -> list[CallRecord]:
    """Records of the calls whose callee (as written) starts with one of ``names`` (imported names);
    ``accelerator``: whether the module runs on one, when the caller knows better than the module alone."""
    out = []
    accelerator = program.runs_on_accelerator(sem) if accelerator is None else accelerator
    ddp = program.is_ddp_program(sem)
    made = {t.id for n in sem.of_type(ast.Assign) for t, value in _pairs(n)  # type: ignore[arg-type]
            if isinstance(v := strip_methods(value, PLACEMENT_METHODS), ast.Call) and (dotted(v.func) or "").split(".")[0] in names}
    # (names given an object of a class of the project: ``eng = Engine(...)``, ``log, step = Logger(), Step()``)
    held = _held_instances(sem, names)
    asks_gpus = "is_available" in sem.text.source or "device_count" in sem.text.source
    for call in sem.calls:
        written = dotted(call.func)
        if written is None and isinstance(call.func, ast.Attribute) and isinstance(obj := call.func.value, ast.Call) \
                and (ctor := dotted(obj.func)) and ctor.split(".")[0] in names and ctor.rsplit(".", 1)[-1][:1].isupper():
            written = f"{ctor}.{call.func.attr}"  # ``Trainer(cfg).train(model, opt)``: the method of an object made here
        if written is None:
            continue
        if written.split(".")[0] not in names:
            if written.split(".")[0] in made:
                written = _instance_method(sem, call, names)  # ``eng.fit_batch(x, y)`` of ``eng = Engine(...)``
            elif held and isinstance(call.func, ast.Attribute) and \
                    (ctor := held.get((sem.class_of(call), dotted(call.func.value)))) is not None:
                written = f"{ctor}.{call.func.attr}"  # ``self.critic.estimate(obs)`` of ``self.critic = Head(8).to(dev)``
            elif held and (ctor := held.get((sem.class_of(call), written))) is not None:
                written = f"{ctor}.forward"  # ``self.critic(obs)``: its forward
            else:
                continue
            if written is None:
                continue
        func = sem.function_of(call)
        scope = sem.scope_of(call)
        eval_before = any(sem.mode_call(n) == "eval" and sem.scope_of(n) is scope and n.lineno < call.lineno
                          for n in sem.calls_named("eval", "train"))
        given: set[str] = set()
        models: set[str] = set()
        if accelerator:  # ``Runner(model, opt, cfg)`` after ``model.cuda()``: the model it trains is on the GPU
            moved = moved_keys(sem)
            models |= {f"#{i}" for i, arg in enumerate(call.args) if isinstance(arg, ast.Name) and arg.id in moved
                       and sem.expr_kind(arg, call) in ("model", "wrapper")}
            models |= {kw.arg for kw in call.keywords if kw.arg and isinstance(kw.value, ast.Name)
                       and kw.value.id in moved and sem.expr_kind(kw.value, call) in ("model", "wrapper")}
        if not accelerator and (carriers := _cuda_carriers(sem)):  # ``args.device = torch.device('cuda')``
            given |= {kw.arg for kw in call.keywords if kw.arg and isinstance(kw.value, ast.Name)
                      and kw.value.id in carriers}
            given |= {f"#{i}" for i, arg in enumerate(call.args) if isinstance(arg, ast.Name) and arg.id in carriers}
        if not accelerator and "cuda" in sem.text.source:  # ``device = "cuda" if ... else "cpu"``, handed to a trainer
            given |= {kw.arg for kw in call.keywords if kw.arg and chosen_cuda(sem, kw.value, call)}
            given |= {f"#{i}" for i, arg in enumerate(call.args) if chosen_cuda(sem, arg, call)}
        if accelerator:
            carriers = _device_carriers(sem)
            for i, arg in enumerate(call.args):
                if _device_value(sem, arg, call) or isinstance(arg, ast.Name) and arg.id in carriers:
                    given.add(f"#{i}")
            for kw in call.keywords:
                if kw.arg and (_device_value(sem, kw.value, call) or isinstance(kw.value, ast.Name)
                               and kw.value.id in carriers):
                    given.add(kw.arg)
        guarded = sem.under_rank_guard(call) or (func is not None and bool(sem.call_sites(func)) and
                                                 all(sem.under_rank_guard(s) for s in sem.call_sites(func)))
        in_loop = sem.enclosing_loop(call, "epoch") is not None or sem.enclosing_loop(call, "batch") is not None
        passed = {f"#{i}" for i in range(len(call.args))} | {k.arg or "*" for k in call.keywords}
        if any(isinstance(a, ast.Starred) for a in call.args):
            passed.add("*")
        per_step = accelerator and _per_step(sem, call)
        per_iteration = per_step or accelerator and _per_iteration(sem, call)
        out.append(CallRecord(written, _grad_mode(sem, call), guarded, eval_before, frozenset(given), ddp,
                              per_step, sem.path, call.lineno, in_loop,
                              guarded and sem.guards.only_on_rank_zero(call), frozenset(models), frozenset(passed),
                              host_args_of(sem, call) if per_step else frozenset(),
                              per_iteration, _in_a_forward(sem, call),
                              () if accelerator or given else _made_by_imports(sem, call),
                              asks_gpus and program.refuses_cpu(sem, at=call), string_choices(sem, call),
                              per_iteration and not per_step and _in_a_model_loop(sem, call)))
    return out


def string_choices(sem: SemanticModel, call: ast.Call) -> tuple[tuple[str, str | bool], ...]:
    """The string (and bool) constants ``call`` passes, by slot (``"distance"``, ``"#2"``): literals, or attributes the file sets
    once at its top to one (``norm=args.norm`` of a notebook's ``args.norm = "l2"``)."""
    out = []
    for slot, arg in [(f"#{i}", a) for i, a in enumerate(call.args)] + [(k.arg, k.value) for k in call.keywords if k.arg]:
        if isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name):
            arg = set_once(sem, dotted(arg))
        if isinstance(arg, ast.Constant) and isinstance(arg.value, (str, bool)):
            out.append((slot, arg.value))  # (``sample=True``: a flag every call sets picks a branch too)
    return tuple(out)


def set_once(sem: SemanticModel, name: str | None) -> ast.AST | None:
    """The value of ``args.test_batch`` when the file sets that attribute once, at its top level (a notebook's
    ``args = Args(); args.test_batch = 10``), and stores it nowhere else; else None."""
    if name is None:
        return None
    stores = [n for n in sem.index.by_type.get(ast.Attribute, ()) if isinstance(n.ctx, ast.Store) and dotted(n) == name]
    if len(stores) != 1:
        return None
    stmt = sem.index.parent.get(stores[0])
    if not (isinstance(stmt, ast.Assign) and stmt.targets == [stores[0]] and sem.function_of(stmt) is None):
        return None
    return stmt.value


def _made_by_imports(sem: SemanticModel, call: ast.Call) -> tuple[tuple[str, tuple[int, str, str]], ...]:
    """The arguments of ``call`` that are names bound to what an imported function returns (``conf`` of ``conf =
    get_config()``), with that function: an options object another module may fill with a CUDA device."""
    out = []
    slots = [(f"#{i}", a) for i, a in enumerate(call.args)] + [(k.arg, k.value) for k in call.keywords if k.arg]
    for slot, arg in slots:
        b = sem.binding_at(arg.id, call) if isinstance(arg, ast.Name) else None
        value = b.value if b is not None and not b.is_param and b.index is None else None
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in sem.names.from_imports:
            out.append((slot, sem.names.from_imports[value.func.id]))
    return tuple(out)


def _grad_mode(sem: SemanticModel, call: ast.Call) -> str:
    """The grad mode at ``call``; "off" also when autograd is on there but every in-file call of its function is made
    without it (``def critic_value(self, obs): return self.critic.estimate(obs)``, called under ``no_grad``)."""
    mode = sem.grad_mode(call)
    func = sem.function_of(call) if mode == "on" else None
    sites = sem.call_sites(func) if func is not None else []
    return "off" if sites and all(sem.grad_mode(s) == "off" for s in sites) else mode


def _held_instances(sem: SemanticModel, names: set[str]) -> dict[tuple[ast.AST | None, str], str]:
    """(class, ``self.critic``) -> ``ValueHead`` for ``self.critic = ValueHead(8).to(device)`` in a method of the
    class, where ``ValueHead`` is imported from the project (``names``)."""
    out: dict[tuple[ast.AST | None, str], str] = {}
    for n in sem.of_type(ast.Assign):
        target = n.targets[0] if len(n.targets) == 1 else None  # type: ignore[attr-defined]
        if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"):
            continue
        value = strip_methods(n.value, PLACEMENT_METHODS)  # type: ignore[attr-defined]
        ctor = dotted(value.func) if isinstance(value, ast.Call) else None
        if ctor and ctor.split(".")[0] in names and ctor.rsplit(".", 1)[-1][:1].isupper():
            out[(sem.class_of(n), f"self.{target.attr}")] = ctor
    return out


def _in_a_model_loop(sem: SemanticModel, call: ast.Call) -> bool:
    """The innermost loop around ``call`` runs a model on every pass, unguarded (``for i in range(max_num_node):
    h = rnn(x_step); x_step = sample_sigmoid(h)``): a sampling or generation loop."""
    loop = next((a for a in sem.ancestors(call) if isinstance(a, _LOOPS)), None)
    if loop is None or few_passes(sem, loop):
        return False  # (``for attn_order in [0, 2, 6, 12]:``: a few settings tried, not steps)
    runs = sem.cached(("model_calls_of_loop", loop), lambda: [  # (the same for every call of the loop)
        c for c in sem.body(loop) if isinstance(c, ast.Call) and flow.consumer_kind(sem, c) == "model"
        and next((a for a in sem.ancestors(c) if isinstance(a, _LOOPS)), None) is loop and not sem.under_step_guard(c, loop)])
    return any(c is not call for c in runs)


def _per_iteration(sem: SemanticModel, call: ast.Call) -> bool:
    """``call`` runs on every iteration of the innermost loop around it, whatever kind of loop that is (``while
    trainer.n_sentences < epoch_size: trainer.mlm_step(...)``): when the callee is one whole training step, that loop
    is a batch loop (``Callers.step_callers``)."""
    loop = next((a for a in sem.ancestors(call) if isinstance(a, _LOOPS)), None)
    if loop is None or sem.function_of(loop) is not sem.function_of(call):
        return False
    return not (sem.under_step_guard(call, loop) or sem.in_handler(call, loop) or sem.in_exit_branch(call, loop))


def host_args_of(sem: SemanticModel, call: ast.Call) -> frozenset[str]:
    """The arguments of ``call`` (by name or "#i") that are values of this step made before the loop moves anything
    to the device: a batch loop that moves its batch after the call (``x, lengths = to_cuda(x, lengths)`` below
    ``join_pairs(a, a_len, b, b_len)``) hands the call host tensors, made from the batch as the loader gave it."""
    loop = sem.enclosing_loop(call, "batch")
    if loop is None:
        return frozenset()
    here = (call.lineno, call.col_offset)
    moves = [(m.lineno, m.col_offset) for m in sem.device_moves() if sem.contains(loop, m)]
    if not moves or min(moves) < here:
        return frozenset()  # (nothing moved in the step, or something of it is on the device already)
    out = set()
    args = [(f"#{i}", a) for i, a in enumerate(call.args)] + [(k.arg, k.value) for k in call.keywords if k.arg]
    for slot, arg in args:
        b = sem.binding_at(arg.id, call) if isinstance(arg, ast.Name) else None
        if isinstance(arg, ast.Constant) or b is not None and not b.is_param and sem.contains(loop, b.node) \
                and not (isinstance(b.value, ast.Call) and sem.is_model_call(b.value)) or _setting(sem, arg, b, call):
            out.add(slot)  # (a constant or a setting too: ``concat(s1, l1, s2, l2, params.pad_index, 1)``)
    return frozenset(out)


def _setting(sem: SemanticModel, arg: ast.AST, b: object, at: ast.AST) -> bool:
    """A plain setting, no tensor: ``params.pad_index``, or ``lang_id`` bound to ``params.lang2id['en']``."""
    if sem.expr_kind(arg, at) is not None:
        return False
    if isinstance(arg, ast.Attribute):
        return isinstance(arg.value, ast.Name) and arg.value.id not in ("self", "torch")
    value = getattr(b, "value", None)
    return isinstance(arg, ast.Name) and not getattr(b, "is_param", True) and isinstance(value, (ast.Attribute, ast.Subscript)) \
        and isinstance(getattr(value, "value", None), (ast.Name, ast.Attribute))


def _pairs(stmt: ast.Assign) -> list[tuple[ast.Name, ast.AST]]:
    """(name, value) of ``x = v`` and, element by element, of ``x, y = v, w``."""
    out = []
    for t in stmt.targets:
        if isinstance(t, ast.Name):
            out.append((t, stmt.value))
        elif isinstance(t, ast.Tuple) and isinstance(stmt.value, ast.Tuple) and len(t.elts) == len(stmt.value.elts):
            out += [(e, v) for e, v in zip(t.elts, stmt.value.elts) if isinstance(e, ast.Name)]
    return out


def _instance_method(sem: SemanticModel, call: ast.Call, names: set[str]) -> str | None:
    """``Engine.fit_batch`` for ``eng.fit_batch(x, y)`` where ``eng = Engine(net, lr, dev)`` and ``Engine`` (or the
    module ``engine.Engine`` is written through) is imported from the project: the class's method, as written."""
    func = call.func
    if isinstance(func, ast.Name):  # ``cell(h)`` of ``cell = Cell(8).to(device)``: the class's forward
        func = ast.Attribute(value=func, attr="forward", ctx=ast.Load())
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
        return None
    b = sem.binding_at(func.value.id, call)
    made = b.value if b is not None and not b.is_param else None
    if made is not None and b.index is not None:  # ``log, stepper = StatLogger(), ClipStep()``
        made = made.elts[b.index] if isinstance(made, ast.Tuple) and b.index < len(made.elts) else None
    made = strip_methods(made, PLACEMENT_METHODS) if made is not None else None
    ctor = dotted(made.func) if isinstance(made, ast.Call) else None
    if not ctor or ctor.split(".")[0] not in names or not ctor.rsplit(".", 1)[-1][:1].isalpha() \
            or func is not call.func and not ctor.rsplit(".", 1)[-1][:1].isupper():
        return None  # (a Name called: a class's object; ``step = make_step(cfg)``, a function's result, is no object)
    return f"{ctor}.{func.attr}"


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


def _in_a_forward(sem: SemanticModel, call: ast.Call, depth: int = 0) -> str:
    """"forward" when ``call`` runs on every forward: it is in a module class's ``forward``, or in a module-level
    helper whose every call in this file is (``emb = self.time_embed(timestep_embedding(t, ch))`` in a UNet's
    forward); "method" in another method of a module class; else ""."""
    func = sem.function_of(call)
    if func is None:
        return ""
    cls = sem.class_of(func)
    if cls is not None:
        return "" if cls.name not in sem.module_classes else "forward" if func.name == "forward" else "method"  # type: ignore[attr-defined]
    sites = sem.call_sites(func) if depth < 2 and sem.function_of(func) is None else []
    kinds = {_in_a_forward(sem, s, depth + 1) for s in sites}
    return "" if not kinds or "" in kinds else "forward" if "forward" in kinds else "method"


def _per_step(sem: SemanticModel, call: ast.Call, depth: int = 0) -> bool:
    """``call`` runs on every iteration of the batch loop around it (not every N steps, not on an error, not behind a
    debug or test switch of the options: ``if opt.debug > 0: self.debug(batch, output)``); or it runs in the forward of a
    module class whose objects that loop calls."""
    loop = sem.enclosing_loop(call, "batch")
    if loop is None:
        return depth < 2 and _in_a_stepped_forward(sem, call, depth)
    return not (sem.under_step_guard(call, loop) or sem.in_handler(call, loop)
                                     or sem.in_exit_branch(call, loop) or _behind_a_debug_switch(sem, call, loop)
                                     or cpu_only_loop(sem, loop))  # (a notebook's CPU baseline loop)


def _in_a_stepped_forward(sem: SemanticModel, call: ast.Call, depth: int) -> bool:
    """``self.criterion(out, y)`` in the ``forward`` of ``ModelWithLoss``, a module class of this file, unguarded, whose
    objects a batch loop here calls every step (``loss = model(x, y)`` of ``model = ModelWithLoss(net).cuda()``)."""
    func = sem.function_of(call)
    cls = sem.class_of(func) if func is not None else None
    if func is None or func.name != "forward" or cls is None or cls.name not in sem.module_classes \
            or sem.under_step_guard(call):
        return False
    return sem.cached(("stepped_objects", cls.name, depth),  # type: ignore[no-any-return]
                      lambda: any(_per_step(sem, c, depth + 1) for c in sem.object_calls(cls.name)))


_DEBUG_SWITCH = lazy(r"(?i)^(debug|verbose|test|vis|visuali[sz]e|show|plot|save_results?)$")


def _behind_a_debug_switch(sem: SemanticModel, call: ast.AST, loop: ast.AST) -> bool:
    """``call`` is in the ``if`` branch of an option such as ``opt.debug`` (``> 0``), ``args.test``, inside the loop."""
    for test, holds in sem.guards.branch_tests(call):
        if not holds or not sem.contains(loop, test):
            continue
        flag = test.left if isinstance(test, ast.Compare) else test
        if isinstance(flag, ast.Attribute) and _DEBUG_SWITCH.match(flag.attr):
            return True
    return False


def _device_carriers(sem: SemanticModel) -> set[str]:
    """Options objects whose ``.device`` this accelerator module reads or sets (``args.device``)."""
    return sem.cached("device_carriers", lambda: {n.value.id for n in sem.of_type(ast.Attribute)  # type: ignore[attr-defined]
                                                  if n.attr == "device" and isinstance(n.value, ast.Name)})  # type: ignore[attr-defined]


def _cuda_carriers(sem: SemanticModel) -> set[str]:
    """Options objects this module gives a CUDA device (``args.device = torch.device('cuda')`` when it is available,
    SimCLR's run.py): the functions it hands them to run there, though the module itself places no work."""
    def compute() -> set[str]:
        if "cuda" not in sem.text.source:
            return set()
        return {t.value.id for n in sem.of_type(ast.Assign) if len(n.targets) == 1  # type: ignore[attr-defined]
                and isinstance(t := n.targets[0], ast.Attribute) and t.attr == "device"  # type: ignore[attr-defined]
                and isinstance(t.value, ast.Name) and ("cuda" in sem.segment(n.value)  # type: ignore[attr-defined]
                                                       or program.chosen_cuda(sem, n.value, n))}  # type: ignore[attr-defined]
        # (``config.device = device`` of ``device = torch.device("cuda") if ... else torch.device("cpu")``: ncsnv2)
    def with_returns() -> set[str]:
        found = compute()
        return found | _returned_carriers(sem, found) if found else found
    return sem.cached("cuda_carriers", with_returns)  # type: ignore[no-any-return]


def _returned_carriers(sem: SemanticModel, carriers: set[str]) -> set[str]:
    """``args, config = parse_args_and_config()`` of a function of this file that returns ``new_config`` after setting
    its ``.device`` to a CUDA choice (ncsnv2's main.py): the names the caller binds to it carry the device too."""
    out: set[str] = set()
    for n in sem.of_type(ast.Assign):
        if not isinstance(n.value, ast.Call) or len(n.targets) != 1:  # type: ignore[attr-defined]
            continue
        target = n.targets[0]  # type: ignore[attr-defined]
        for func in sem.resolve(n.value):  # type: ignore[attr-defined]
            for ret in (r for r in sem.local_nodes(func) if isinstance(r, ast.Return) and r.value is not None):
                values = ret.value.elts if isinstance(ret.value, ast.Tuple) else [ret.value]
                targets = target.elts if isinstance(target, ast.Tuple) else [target]
                if len(values) == len(targets):
                    out |= {t.id for t, v in zip(targets, values) if isinstance(t, ast.Name) and isinstance(v, ast.Name)
                            and v.id in carriers}
    return out


def _device_value(sem: SemanticModel, arg: ast.AST, at: ast.AST) -> bool:
    """``arg`` holds a device in a program that runs on an accelerator: ``device``, ``args.device``,
    ``torch.device(...)``, ``accelerator.device``, ``local_rank``."""
    if isinstance(arg, ast.Call):
        return (sem.call_name(arg) or "") == "torch.device"
    name = dotted(arg) or ""
    last = name.rsplit(".", 1)[-1]
    return last in ("device", "dev", "local_rank", "gpu", "rank") or last.endswith("_device") or \
        (isinstance(arg, ast.Name) and sem.kind_of(arg.id, at) == "device")


def _init_params(cls: ast.AST) -> tuple[str, ...]:
    init = next((f for f in getattr(cls, "body", ()) if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
    return tuple(a.arg for a in init.args.args[1:]) if init is not None else ()
