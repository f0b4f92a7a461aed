"""What a module's calls into the other modules of the project look like (one ``CallRecord`` each): the grad mode
and rank guard around the call, whether it runs on every step of a batch loop on an accelerator, which arguments
carry a device, a moved model, a host batch or a known string. The project asks them the reverse questions (who
calls this function, and how); records are small and hold no syntax tree.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from torchdoctor.check.astutil import PLACEMENT_METHODS, call_argument, dotted, strip_methods
from torchdoctor.check.patterns import lazy
from torchdoctor.check.semantic import flow, program
from torchdoctor.check.semantic.program import chosen_cuda
from torchdoctor.check.semantic.counts import few_passes
from torchdoctor.check.semantic.forwards import reached_from_forward
from torchdoctor.check.semantic.model import SemanticModel
from torchdoctor.check.semantic.models import moved_keys
from torchdoctor.check.semantic.placement import cpu_only_loop
from torchdoctor.record import FrozenRecord

__all__ = ["CallRecord", "call_records", "host_args_of", "per_rank_value", "chosen_value", "runs_per_step", "set_once",
           "string_choices", "unpinned_loader_args", "INFERENCE_NAME"]

_LOOPS = (ast.For, ast.AsyncFor, ast.While)


class CallRecord(FrozenRecord):
    """One call, in some module, of a name imported from another module of the project."""

    __slots__ = ("written", "grad_mode", "rank_guarded", "eval_before", "accelerator_args", "ddp", "per_step", "path",
                 "line", "in_loop", "rank_zero_only", "moved_models", "passed", "host_args", "per_iteration", "in_forward",
                 "made_by", "after_refusal", "choices", "in_model_loop", "unpinned_loaders", "trains", "wrapped_models",
                 "per_rank")
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
    unpinned_loaders: frozenset[str]  # arguments (by name or "#i") that are torch DataLoaders made without pinned memory
    trains: bool  # autograd is on at the call and its result reaches a ``backward()`` (a training forward)
    wrapped_models: frozenset[str]  # arguments (by name or "#i") that are a DataParallel/DDP wrapper (``module.`` keys)
    per_rank: frozenset[str]  # arguments (by name or "#i") that name a per-rank value: ``"{}.rank{}".format(p, rank)``

    def __init__(self, written: str, grad_mode: str, rank_guarded: bool, eval_before: bool,
                 accelerator_args: frozenset[str], ddp: bool = False, per_step: bool = False, path: str = "",
                 line: int = 0, in_loop: bool = False, rank_zero_only: bool = False,
                 moved_models: frozenset[str] = frozenset(), passed: frozenset[str] = frozenset(),
                 host_args: frozenset[str] = frozenset(), per_iteration: bool = False, in_forward: str = "",
                 made_by: tuple[tuple[str, tuple[int, str, str]], ...] = (), after_refusal: bool = False,
                 choices: tuple[tuple[str, str | bool], ...] = (), in_model_loop: bool = False,
                 unpinned_loaders: frozenset[str] = frozenset(), trains: bool = False,
                 wrapped_models: frozenset[str] = frozenset(), per_rank: frozenset[str] = frozenset()) -> None:
        self._fill(written, grad_mode, rank_guarded, eval_before, accelerator_args, ddp, per_step, path, line, in_loop,
                   rank_zero_only, moved_models, passed, host_args, per_iteration, in_forward, made_by, after_refusal,
                   choices, in_model_loop, unpinned_loaders, trains, wrapped_models, per_rank)


def call_records(sem: SemanticModel, names: set[str], accelerator: bool | None = None,
                 quiet_elsewhere: Callable[[ast.AST], bool] | None = None) -> list[CallRecord]:
    """Records of the calls whose callee (as written) starts with one of ``names`` (imported names);
    ``accelerator``: whether the module runs on one, when the caller knows better than the module alone;
    ``quiet_elsewhere``: whether every call of a function of the module from the other modules runs without autograd
    (the project's answer, for a module read for the index that resolves no import itself)."""
    out = []
    accelerator = program.runs_on_accelerator(sem) if accelerator is None else accelerator
    ddp = program.is_ddp_program(sem)
    made = {t.id for n in sem.of_type(ast.Assign) for t, value in _pairs(n)  # type: ignore[arg-type]
            if isinstance(v := strip_methods(value, PLACEMENT_METHODS), ast.Call) and (dotted(v.func) or "").split(".")[0] in names}
    # (names given an object of a class of the project: ``eng = Engine(...)``, ``log, step = Logger(), Step()``)
    made |= {name for name, ann in _annotated(sem) if _project_class(dotted(ann), names)}  # (``bpr: utils.BPRLoss``)
    looked_up = {t.id for n in sem.of_type(ast.Assign) for t, value in _pairs(n)  # type: ignore[arg-type]
                 if isinstance(v := strip_methods(value, PLACEMENT_METHODS), ast.Call) and isinstance(v.func, ast.Name)
                 and v.func.id in made} if made else set()  # (``algorithm = algorithm_class(...)``)
    held = _held_instances(sem, names)
    asks_gpus = "is_available" in sem.text.source or "device_count" in sem.text.source
    loaders_made = "DataLoader(" in sem.text.source
    wraps_models = "DataParallel" in sem.text.source or "DDP" in sem.text.source
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
            elif written.split(".")[0] in looked_up and isinstance(call.func, ast.Attribute) \
                    and isinstance(call.func.value, ast.Name):
                written = _object_of_a_looked_up_class(sem, call, names)  # ``algorithm.update(batch)``
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
            models |= {f"#{i}" for i, arg in enumerate(call.args) if isinstance(arg, ast.Name)
                       and (arg.id in moved and _moved_model(sem, arg, call, names) or _wraps_a_moved(sem, arg, call, moved))}
            models |= {kw.arg for kw in call.keywords if kw.arg and isinstance(kw.value, ast.Name)
                       and (kw.value.id in moved and _moved_model(sem, kw.value, call, names)
                            or _wraps_a_moved(sem, kw.value, call, moved))}
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
        per_step = accelerator and runs_per_step(sem, call)
        grad_mode = _grad_mode(sem, call, quiet_elsewhere)
        per_iteration = per_step or accelerator and _per_iteration(sem, call)
        out.append(CallRecord(written, grad_mode, guarded, eval_before, frozenset(given), ddp,
                              per_step, sem.path, call.lineno, in_loop,
                              guarded and sem.guards.only_on_rank_zero(call), frozenset(models), frozenset(passed),
                              host_args_of(sem, call) if per_step else frozenset(),
                              per_iteration, _in_a_forward(sem, call),
                              () if accelerator or given else _made_by_imports(sem, call),
                              asks_gpus and program.refuses_cpu(sem, at=call) or _on_the_gpu_side(sem, call),
                              string_choices(sem, call),
                              per_iteration and not per_step and _in_a_model_loop(sem, call),
                              unpinned_loader_args(sem, call) if loaders_made else frozenset(),
                              grad_mode == "on" and in_loop and bool(INFERENCE_NAME.match(written.rsplit(".", 1)[-1]))
                              and sem.feeds_backward(call),  # (asked of inference-named helpers only: TD401's)
                              _wrapper_args(sem, call) if wraps_models else frozenset(),
                              _per_rank_args(sem, call) if ddp else frozenset()))
    return out


_RANK = lazy(r"(?i)rank")
_GPU_INDEX_NAME = lazy(r"(?i)^(gpu|gpu_?id|gpu_?idx|local_gpu|device_?id)$")


def per_rank_value(sem: SemanticModel, arg: ast.AST, at: ast.AST, depth: int = 0) -> bool:
    """``arg`` (at ``at``) names a per-rank value, so each process writes its own file: ``f"ckpt_rank{rank}.pt"``, a name
    of the rank (``rank_aliases``), a GPU index (``"embd_{}.pt".format(gpu)``, RawNet2's), a name some binding makes so
    (``p = os.path.join(out, "{}.rank{}".format(prefix, rank))``), or a parameter every call of the file hands one."""
    if _RANK.search(sem.segment(arg)) or any(dotted(n) in sem.guards.rank_aliases() for n in sem.subtree(arg)):
        return True
    if any(isinstance(n, ast.Name) and _GPU_INDEX_NAME.match(n.id) for n in sem.subtree(arg)) \
            and not isinstance(arg, ast.Name):
        return True
    if not isinstance(arg, ast.Name):
        return False
    if any(b.value is not None and not b.is_param and _RANK.search(sem.segment(b.value)) for b in sem.bindings_of(arg.id)):
        return True
    b = sem.binding_at(arg.id, at)
    func = sem.function_of(at)
    if depth > 2 or b is None or not b.is_param or func is None or b.node is not func:
        return False
    sites = sem.call_sites(func)
    given = [call_argument(site, func, arg.id) for site in sites]  # type: ignore[arg-type]
    return bool(sites) and all(g is not None and per_rank_value(sem, g, site, depth + 1) for g, site in zip(given, sites))


def _per_rank_args(sem: SemanticModel, call: ast.Call) -> frozenset[str]:
    """The arguments of ``call`` (by name or "#i") that name a per-rank value (``per_rank_value``): ``write_data(pred,
    p)`` of ``p = os.path.join(out, "{}.rank{}".format(pre, rank))`` (each rank writes its own file)."""
    return frozenset(slot for slot, arg in [(f"#{i}", a) for i, a in enumerate(call.args)]
                     + [(k.arg, k.value) for k in call.keywords if k.arg] if per_rank_value(sem, arg, call))


def _moved_model(sem: SemanticModel, arg: ast.Name, call: ast.Call, names: set[str]) -> bool:
    """A moved name handed on is a model: known as one, or, in a module read for the project's index (which resolves
    no import), an object of a class of the project (``actor_critic = Policy(...)``, then ``actor_critic.to(device)``
    and ``algo.PPO(actor_critic, ...)``)."""
    if sem.expr_kind(arg, call) in ("model", "wrapper"):
        return True
    if sem.project is not None:
        return False
    b = sem.binding_at(arg.id, call)
    made = strip_methods(b.value, PLACEMENT_METHODS) if b is not None and not b.is_param and b.index is None \
        and b.value is not None else None
    return isinstance(made, ast.Call) and _project_class(dotted(made.func), names)


def _wrapper_bound(sem: SemanticModel, arg: ast.AST, call: ast.Call) -> ast.Call | None:
    """The wrapper construction (DataParallel, DDP, FSDP, ``torch.compile``) the name ``arg`` is bound to at ``call``,
    through placements (``model = nn.DataParallel(model).cuda()``); else None."""
    b = sem.binding_at(arg.id, call) if isinstance(arg, ast.Name) else None
    made = strip_methods(b.value, PLACEMENT_METHODS) if b is not None and not b.is_param and b.index is None \
        and b.value is not None else None
    return made if isinstance(made, ast.Call) and sem.call_kind(made, b.node) == "wrapper" else None  # type: ignore[union-attr]


def _wrapper_args(sem: SemanticModel, call: ast.Call) -> frozenset[str]:
    """The arguments of ``call`` (by name or "#i") that are DataParallel/DDP wrappers (``model =
    nn.DataParallel(model).cuda()``, then ``utils.train(args, model=model)``): their ``state_dict()`` keys gain
    ``module.``."""
    return frozenset(slot for slot, arg in [(f"#{i}", a) for i, a in enumerate(call.args)]
                     + [(k.arg, k.value) for k in call.keywords if k.arg]
                     if (made := _wrapper_bound(sem, arg, call)) is not None
                     and (sem.call_name(made) or "").rsplit(".", 1)[-1] in _DP_WRAPPERS)


_DP_WRAPPERS = frozenset({"DataParallel", "DistributedDataParallel", "DDP"})


def _wraps_a_moved(sem: SemanticModel, arg: ast.Name, call: ast.Call, moved: set[str]) -> bool:
    """``ddp_model = DDP(model, device_ids=[rank])`` of a ``model`` moved to the accelerator: the wrapper runs there."""
    made = _wrapper_bound(sem, arg, call)
    return made is not None and bool(made.args) and isinstance(made.args[0], ast.Name) and made.args[0].id in moved


def _project_class(written: str | None, names: set[str]) -> bool:
    """``utils.BPRLoss``, ``Policy``: a capitalised name reached through a name imported from the project."""
    return bool(written) and written.split(".")[0] in names and written.rsplit(".", 1)[-1][:1].isupper()  # type: ignore[union-attr]


def _on_the_gpu_side(sem: SemanticModel, call: ast.Call) -> bool:
    """The call sits in the GPU branch of a device choice (``if args.ngpu > 0: inputs = map_to_cuda(inputs)``): it
    runs only where the program chose a GPU."""
    found = sem.guards.device_test_around(call)
    if found is None:
        return False
    test, in_else = found
    said = sem.guards._device_test(test.test)  # type: ignore[attr-defined]
    return said is not None and (said == "gpu") != in_else or said is None and not in_else \
        and _count_test(test.test)


def _count_test(test: ast.AST) -> bool:
    """``args.ngpu > 0``, ``n_gpu >= 1``: a count of GPUs compared with none (its body runs with some)."""
    return isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Gt, ast.GtE)) \
        and "gpu" in (dotted(test.left) or "").lower() and isinstance(c := test.comparators[0], ast.Constant) \
        and c.value in (0, 1) and (c.value == 0) == isinstance(test.ops[0], ast.Gt)


def unpinned_loader_args(sem: SemanticModel, call: ast.Call) -> frozenset[str]:
    """The arguments of ``call`` (by name or "#i") that are names bound to a torch DataLoader made without pinned
    memory (``train_loader = DataLoader(ds, batch_size=32, pin_memory=False)``, then ``train(model, train_loader)``)."""
    out = set()
    for slot, arg in [(f"#{i}", a) for i, a in enumerate(call.args)] + [(k.arg, k.value) for k in call.keywords if k.arg]:
        b = sem.binding_at(arg.id, call) if isinstance(arg, ast.Name) else None
        made = b.value if b is not None and not b.is_param and b.index is None else None
        if isinstance(made, ast.Call) and (sem.call_name(made) or "").endswith("utils.data.DataLoader") \
                and not any(k.arg is None for k in made.keywords) and not any(
                    k.arg == "pin_memory" and not (isinstance(k.value, ast.Constant) and k.value.value is False)
                    for k in made.keywords):
            out.add(slot)
    return frozenset(out)


def string_choices(sem: SemanticModel, call: ast.Call) -> tuple[tuple[str, str | bool], ...]:
    """The string (and bool) constants ``call`` passes, by slot (``"distance"``, ``"#2"``): literals, or attributes the file sets
    once at its top to one (``norm=args.norm`` of a notebook's ``args.norm = "l2"``)."""
    out = []
    for slot, arg in [(f"#{i}", a) for i, a in enumerate(call.args)] + [(k.arg, k.value) for k in call.keywords if k.arg]:
        if isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name):
            arg = set_once(sem, dotted(arg))
        elif isinstance(arg, ast.Name):
            arg = _local_constant(sem, arg, call)
        if isinstance(arg, ast.Constant) and isinstance(arg.value, (str, bool)):
            out.append((slot, arg.value))  # (``sample=True``: a flag every call sets picks a branch too)
    return tuple(out)


def _local_constant(sem: SemanticModel, name: ast.Name, at: ast.AST) -> ast.AST | None:
    """The constant a local name holds at ``at`` when every binding of it in that function (or module) is that one
    literal (``is_word = False`` ... ``CGCN(feats, ..., is_word)``); else None."""
    b = sem.binding_at(name.id, at)
    if b is None or b.is_param or b.index is not None or not isinstance(b.value, ast.Constant):
        return None
    same = [o for o in sem.bindings_of(name.id) if o.scope is b.scope]
    if any(o.is_param or o.index is not None or not isinstance(o.value, ast.Constant) or o.value.value != b.value.value
           for o in same):
        return None
    return b.value


def _attribute_stores(sem: SemanticModel) -> dict[str, list[ast.AST]]:
    """The attributes the file stores to, by dotted name (once per file)."""
    def compute() -> dict[str, list[ast.AST]]:
        out: dict[str, list[ast.AST]] = {}
        for n in sem.index.by_type.get(ast.Attribute, ()):
            if isinstance(n.ctx, ast.Store) and (key := dotted(n)) is not None:
                out.setdefault(key, []).append(n)
        return out
    return sem.cached("attribute_stores", compute)  # type: ignore[no-any-return]


def chosen_value(choices: tuple[tuple[str, str | bool], ...], passed: bool, param: str, slot: str | None,
                 default: ast.AST | None) -> str | bool | None:
    """What one call gives ``param`` (by name, or at ``slot``): the string or bool among its ``choices``; when it
    passes nothing there, the default's; else (a name, an expression) None."""
    given = next((v for k, v in choices if k in (param, slot)), None)
    if given is not None or passed:
        return given
    return default.value if isinstance(default, ast.Constant) and isinstance(default.value, (str, bool)) else None


def set_once(sem: SemanticModel, name: str | None) -> ast.AST | None:
    """The value of ``args.test_batch`` when the file sets that attribute once, at its top level (a notebook's
    ``args = Args(); args.test_batch = 10``), and stores it nowhere else; else None."""
    if name is None:
        return None
    stores = _attribute_stores(sem).get(name, [])
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
        elif isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and isinstance(value.func.value, ast.Name) \
                and (module := sem.names.imports.get(value.func.value.id)) is not None:
            out.append((slot, (0, module, value.func.attr)))  # ``cfg = config.TrainConfig()``
    return tuple(out)


INFERENCE_NAME = lazy(r"(?i)^((predict|infer|inference|detect|classify|recogni[sz]e|eval|evaluate|validate|sample|generate|translate)(_|$)"
                       r"|score_(model|test|val|valid|validation)$"  # (SGCN's ``score_model(epoch)``: the test set's scores)
                       r"|test(_(env|model|agent|policy|net|network|epoch|episode|game)s?)?$"  # (not ``test_split_fn``)
                       r"|(save|show|plot|log|draw|visuali[sz]e)_(samples?|generated|predictions?|reconstructions?)$)")
# (``save_sample(step)``: draws from the generator to write them, as ``sample_images`` does)
_GENERATES = lazy(r"(?i)generat|sampl|decod|translat|infer|predict|beam|search")
_ASKING_FURTHER = [False]  # (one module further at most: records read while answering ask no further themselves)


def _grad_mode(sem: SemanticModel, call: ast.Call, quiet_elsewhere: Callable[[ast.AST], bool] | None = None) -> str:
    """The grad mode at ``call``; "off" also when autograd is on there but every in-file call of its function is made
    without it (``def critic_value(self, obs): return self.critic.estimate(obs)``, called under ``no_grad``), or, with
    no call of it in the file, every call of it from the other modules (a decoder's ``generate`` that runs
    ``Beam(self).generate(x)``, called under ``no_grad`` by the evaluation scripts)."""
    mode = sem.grad_mode(call)
    func = sem.function_of(call) if mode == "on" else None
    sites = [s for s in sem.call_sites(func) if not sem.contains(func, s)] if func is not None else []
    # (not ``Beam(self).generate(x)`` inside ``generate`` itself: another class's method of that name)
    if sites:
        return "off" if all(sem.grad_mode(s) == "off" for s in sites) else mode
    if func is None or quiet_elsewhere is None or _ASKING_FURTHER[0] or not _GENERATES.search(func.name):  # type: ignore[attr-defined]
        return mode  # (asked of generation and inference methods only: each question reads the importers)
    _ASKING_FURTHER[0] = True
    try:
        further = quiet_elsewhere(func)
    finally:
        _ASKING_FURTHER[0] = False
    return "off" if further else mode


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


def _annotated(sem: SemanticModel) -> list[tuple[str, ast.AST]]:
    """(name, annotation) of ``bpr: utils.BPRLoss = loss_class`` and of ``def train(bpr: utils.BPRLoss)``."""
    out: list[tuple[str, ast.AST]] = [(n.target.id, n.annotation) for n in sem.of_type(ast.AnnAssign)  # type: ignore[attr-defined]
                                      if isinstance(n.target, ast.Name)]  # type: ignore[attr-defined]
    return out + [(a.arg, a.annotation) for a in sem.of_type(ast.arg)  # type: ignore[attr-defined]
                  if isinstance(a.annotation, (ast.Name, ast.Attribute))]  # type: ignore[attr-defined]


def _instance_method(sem: SemanticModel, call: ast.Call, names: set[str]) -> str | None:
    """``Engine.fit_batch`` for ``eng.fit_batch(x, y)`` where ``eng = Engine(net, lr, dev)`` and ``Engine`` (or the
    module ``engine.Engine`` is written through) is imported from the project: the class's method, as written."""
    func = call.func
    if isinstance(func, ast.Name):  # ``cell(h)`` of ``cell = Cell(8).to(device)``: the class's forward
        func = ast.Attribute(value=func, attr="forward", ctx=ast.Load())
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
        return None
    b = sem.binding_at(func.value.id, call)
    annotated = b.node.annotation if b is not None and isinstance(b.node, ast.AnnAssign) else \
        b.value if b is not None and b.is_param and isinstance(b.value, (ast.Name, ast.Attribute)) else None
    # (``bpr: utils.BPRLoss = loss_class``, ``def train(bpr: utils.BPRLoss)``: an object of the class written)
    if b is not None and b.is_param and isinstance(b.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        b = _handed_object(sem, b.node, func.value.id)  # ``train_moco(..., contrast, ...)``: what every call hands it
    made = b.value if b is not None and not b.is_param else None
    if made is not None and b.index is not None:  # ``log, stepper = StatLogger(), ClipStep()``
        made = made.elts[b.index] if isinstance(made, ast.Tuple) and b.index < len(made.elts) else None
    made = strip_methods(made, PLACEMENT_METHODS) if made is not None else None
    for _ in range(3):  # ``model = model.cuda()`` after ``model = LSTMC.LSTMClassifier(...)``: the object made before
        if not (isinstance(made, ast.Name) and made.id == func.value.id and b is not None):
            break
        b = sem.binding_at(made.id, b.node)
        made = strip_methods(b.value, PLACEMENT_METHODS) if b is not None and not b.is_param and b.index is None \
            and b.value is not None else None
    ctor = dotted(made.func) if isinstance(made, ast.Call) else dotted(annotated) if annotated is not None else None
    if not ctor or ctor.split(".")[0] not in names or not ctor.rsplit(".", 1)[-1][:1].isalpha() \
            or func is not call.func and not ctor.rsplit(".", 1)[-1][:1].isupper():
        return None  # (a Name called: a class's object; ``step = make_step(cfg)``, a function's result, is no object)
    return f"{ctor}.{func.attr}"


def _handed_object(sem: SemanticModel, func: ast.AST, param: str):  # type: ignore[no-untyped-def]
    """The binding of the name every call of ``func`` in this file passes as ``param`` (``contrast =
    MemoryMoCo(...).cuda(gpu)`` in ``main``, handed to ``train_moco(epoch, loader, model, contrast)``), when they
    all pass the same one; else None."""
    sites = sem.call_sites(func)
    found = None
    for site in sites:
        arg = call_argument(site, func, param)  # type: ignore[arg-type]
        b = sem.binding_at(arg.id, site) if isinstance(arg, ast.Name) else None
        if b is None or b.is_param or (found is not None and b is not found):
            return None
        found = b
    return found


def _object_of_a_looked_up_class(sem: SemanticModel, call: ast.Call, names: set[str]) -> str | None:
    """``algorithms.get_algorithm_class.update`` for ``algorithm.update(batch)`` where ``algorithm = cls(...)`` and
    ``cls = algorithms.get_algorithm_class(args.algorithm)``, a function of the project that may hand back a class (a
    registry: ``return globals()[name]``). Project.step_callers matches it to the methods of that module's classes."""
    b = sem.binding_at(call.func.value.id, call)  # type: ignore[attr-defined]
    made = strip_methods(b.value, PLACEMENT_METHODS) if b is not None and not b.is_param and b.index is None else None
    if not (isinstance(made, ast.Call) and isinstance(made.func, ast.Name)):
        return None
    looked_up = sem.binding_at(made.func.id, made)
    lookup = looked_up.value if looked_up is not None and not looked_up.is_param and looked_up.index is None else None
    factory = dotted(lookup.func) if isinstance(lookup, ast.Call) else None
    if not factory or factory.split(".")[0] not in names or not factory.rsplit(".", 1)[-1][:1].islower():
        return None
    return f"{factory}.{call.func.attr}"  # type: ignore[attr-defined]


def _in_a_forward(sem: SemanticModel, call: ast.Call, depth: int = 0) -> str:
    """"forward" when ``call`` runs on every forward: it is in a module class's ``forward``, or in a module-level
    helper whose every call in this file is (``emb = self.time_embed(timestep_embedding(t, ch))`` in a UNet's
    forward); "method" in another method of a module class; else ""."""
    func = sem.function_of(call)
    if func is None:
        return ""
    cls = sem.class_of(func)
    if cls is not None:
        return "" if cls.name not in sem.module_classes else "forward" if func.name == "forward" \
            or reached_from_forward(sem, func, cls) else "method"  # type: ignore[attr-defined]
        # (``self._update_context(...)`` in the forward builds a ``ProbMask``: on every forward too)
    sites = sem.call_sites(func) if depth < 2 and sem.function_of(func) is None else []
    kinds = {_in_a_forward(sem, s, depth + 1) for s in sites}
    return "" if not kinds or "" in kinds else "forward" if "forward" in kinds else "method"


def runs_per_step(sem: SemanticModel, call: ast.Call, depth: int = 0) -> bool:
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
                      lambda: any(runs_per_step(sem, c, depth + 1) for c in sem.object_calls(cls.name)))


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
