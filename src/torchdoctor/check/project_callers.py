"""The project index's reverse questions: how do the other modules of the program call this function (under
``no_grad``, behind a rank guard, on every step, given a GPU)? who imports this module? and what do the files of the
project save and read back? ``Project`` answers them through this mixin, from the call records of the files checked
together, or, in a single-file run, of the ``.py`` files near it."""

from __future__ import annotations

import ast
import builtins
import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from torchdoctor.check.astutil import dotted, param_default, param_slot
from torchdoctor.check.patterns import lazy
from torchdoctor.check.project_files import State, import_statements
from torchdoctor.check.semantic import SemanticModel, program
from torchdoctor.check.semantic.project_devices import model_from_project_builder
from torchdoctor.check.semantic.call_records import call_records, chosen_value

if TYPE_CHECKING:
    from torchdoctor.check.semantic.call_records import CallRecord
    from torchdoctor.check.semantic.summary import ModuleSummary

__all__ = ["Callers", "MAX_NEAR", "SELECTS_WRAPPED"]

MAX_NEAR = 200  # .py files looked at for reverse questions in a single-file run


def _import_nodes(text: str):  # type: ignore[no-untyped-def]
    """The import statements of a module's text, parsed one line at a time (its tree is not needed)."""
    for line in import_statements(text):
        try:
            yield ast.parse(line.strip()).body[0]
        except (SyntaxError, ValueError, IndexError):
            continue


def _named_in_code(pattern: re.Pattern, text: str) -> bool:
    """``pattern`` matches ``text`` outside a comment and a one-line string (``wandb.init(project='Raindrop')``, a
    docstring that names the model class, do not build it); a string over several lines still counts."""
    for m in pattern.finditer(text):
        before = text[text.rfind("\n", 0, m.start()) + 1:m.start()]
        if before.count('"') % 2 or before.count("'") % 2 or "#" in before:
            continue
        return True
    return False


class Callers:
    """Needs ``files``, ``root``, ``state``, ``summary()``, ``_module_file()``, ``_model()`` and ``_done_with()``
    (``Project`` has them)."""

    files: Sequence[str]
    root: str
    state: State

    def callers_effect(self, sem: SemanticModel, func: ast.AST, effect: str) -> bool:
        """Some caller in another module sets eval mode before calling ``func`` (``effect`` == "eval")."""
        if effect != "eval":
            return False
        return any(r.eval_before for r in self._callers(sem, func, by_class=sem.class_of(func) is not None))

    def callers_rank_guarded(self, sem: SemanticModel, func: ast.AST, gates: tuple[str, ...] = ()) -> bool:
        """``func`` is called from other modules, and every caller that runs on many ranks (a DDP
        program) calls it under a rank guard (an inference script calling it runs once); a method, through objects
        of its class (``model.save(path)`` of ``model = MTDNNModel(...)`` behind ``if local_rank in [-1, 0]:``).
        ``gates``: parameters (defaulting to None) that the write needs: a call that passes none of them does not
        write (``state = checkpoint(path)`` of a helper that saves only when handed a model)."""
        records = self._callers(sem, func, by_class=sem.class_of(func) is not None)
        if records and gates:
            names = [a.arg for a in func.args.posonlyargs + func.args.args]  # type: ignore[attr-defined]
            if sem.class_of(func) is not None and names[:1] in (["self"], ["cls"]):
                names = names[1:]
            given = {*gates, *(f"#{names.index(p)}" for p in gates if p in names), "*"}
            return all(r.rank_guarded or not r.ddp or given.isdisjoint(r.passed) for r in records)
        return bool(records) and all(r.rank_guarded or not r.ddp for r in records)

    def has_callers(self, sem: SemanticModel, func: ast.AST, by_class: bool = False) -> bool:
        """Some other module of the project calls ``func`` (``by_class``: a method, through objects of its class)."""
        return bool(self._callers(sem, func, by_class=by_class))

    def uncalled_helper(self, sem: SemanticModel, func: ast.AST) -> bool:
        """``func``, a module-level function of ``sem``'s module, is a helper no run takes: other modules of the
        project import the module, which is no script itself (no ``if __name__ == "__main__":``), and none of them
        names ``func`` (``from utils.datasets import *; autosplit(...)`` would). The module itself does not
        either (asked before)."""
        here, name = self.state.absolute(sem.path), func.name  # type: ignore[attr-defined]
        key = (here, name, "uncalled")
        memo = self.state.mentions
        if key not in memo:
            pattern = re.compile(rf"\b{re.escape(name)}\b")
            importers = [] if "__main__" in sem.text.source or self._package_reexports(here, name) else \
                self._module_importers(here)
            memo[key] = bool(importers) and not any(_named_in_code(pattern, self.state.text(path) or "")
                                                    for path in importers)
        return memo[key]

    def uncalled_method(self, sem: SemanticModel, func: ast.AST) -> bool:
        """``func``, a method of a plain class (no base a library could call it through), is named nowhere in the
        project's code but as ``torch.NAME``: no ``.NAME``, no ``"NAME"`` for ``getattr`` (``def save(self, f):
        torch.save(self.capture_snapshot(), f)`` of a ``State`` whose users call ``save_checkpoint(state, ...)``
        instead), so it runs on no rank."""
        cls = sem.class_of(func)
        name = func.name  # type: ignore[attr-defined]
        if cls is None or name.startswith("__") or any(dotted(b) != "object" for b in cls.bases) or cls.keywords:  # type: ignore[attr-defined]
            return False
        here = self.state.absolute(sem.path)  # type: ignore[attr-defined]
        key = (here, f"{cls.name}.{name}", "uncalled method")  # type: ignore[attr-defined]
        memo = self.state.mentions
        if key not in memo:
            pattern = re.compile(rf"(?<!\btorch)\.{re.escape(name)}\b|[\"']{re.escape(name)}[\"']")
            memo[key] = not any(pattern.search(self.state.text(path) or "") for path in (here, *self._candidates(here)))
        return memo[key]

    def imported_by_others(self, sem: SemanticModel) -> bool:
        """Some other module of the project imports ``sem``'s module."""
        return bool(self._module_importers(self.state.absolute(sem.path)))

    def _module_importers(self, here: str) -> list[str]:
        """The modules of the project whose import statements lead to the module ``here`` (memoised per module)."""
        memo = self.state.module_importers
        if here not in memo:
            stem = os.path.splitext(os.path.basename(here))[0]
            if stem == "__init__":
                stem = os.path.basename(os.path.dirname(here))
            memo[here] = [other for other in self._importing(here, {stem}) if self._imports_module(other, here)]
        return memo[here]

    def importer_sets_device(self, sem: SemanticModel) -> bool:
        """A module of the project that imports this helper module (no script itself) binds its process to a GPU
        (``torch.cuda.set_device(device_id)`` in ``train.py``, which starts the processes that call in here)."""
        if "__main__" in sem.text.source:
            return False
        importers = self._module_importers(self.state.absolute(sem.path))
        return any(_SETS_DEVICE.search(self.state.text(path) or "") for path in importers)

    def importer_true_option(self, sem: SemanticModel, dest: str) -> bool:
        """A module of the project that imports this one declares the option ``--dest`` so that it is always True
        (``add_argument("--gpu_mode", type=bool, default=True)``: ``bool("False")`` is True; or ``action="store_true",
        default=True``): a flag this module copies (``self.gpu_mode = args.gpu_mode``) chooses nothing."""
        memo = self.state.true_options
        here = self.state.absolute(sem.path)
        if here not in memo:
            found: set[str] = set()
            for path in self._module_importers(here):
                for m in _OPTION.finditer(self.state.text(path) or ""):
                    if _ALWAYS_TRUE.search(m.group(2)) and _DEFAULT_TRUE.search(m.group(2)):
                        found.add(m.group(1).replace("-", "_"))
            memo[here] = frozenset(found)
        return dest in memo[here]

    def importer_wraps_data_parallel(self, sem: SemanticModel) -> bool:
        """A module of the project that imports this helper module (no script itself) wraps a model in
        ``nn.DataParallel``: in a DDP program, one process per machine (``--nproc_per_node=1``), on all its GPUs."""
        if "__main__" in sem.text.source:
            return False
        importers = self._module_importers(self.state.absolute(sem.path))
        return any(_DATA_PARALLEL.search(self.state.text(path) or "") for path in importers)

    def trains_here_or_through(self, path: str) -> bool:
        """The module ``path`` backpropagates, or a module of the project it imports does (``model.run_epoch(loader,
        opt)`` of a model class whose method trains) and ``path`` turns autograd off nowhere (an evaluation script
        says ``no_grad``): a training program (memoised per module)."""
        key = (path, "trains")
        memo = self.state.mentions
        if key not in memo:
            text = self.state.text(path) or ""
            memo[key] = ".backward(" in text or "no_grad" not in text and "inference_mode" not in text and any(
                ".backward(" in (self.state.text(found) or "") for found in self._imported_files(path, text))
        return memo[key]

    def a_class_defines(self, method: str) -> bool:
        """Some file of the project defines a method ``method`` (``def cuda(self):``, as pymarl's plain controllers and
        learners do to pass the call on to their modules), by its text alone: any class's (memoised)."""
        key = ("", method, "defined")
        memo = self.state.mentions
        if key not in memo:
            word = f"def {method}(self"
            memo[key] = any(word in (self.state.text(path) or "") for path in self.files)
        return memo[key]

    def _imported_files(self, path: str, text: str) -> list[str]:
        """The project's files that the import statements of ``path`` name (read from its import lines)."""
        out = []
        for stmt in _import_nodes(text):
            if isinstance(stmt, ast.ImportFrom):
                module = stmt.module or ""
                out += [f for f in [self._module_file(path, stmt.level, module)] if f]
            elif isinstance(stmt, ast.Import):
                out += [f for a in stmt.names if (f := self._module_file(path, 0, a.name))]
        return out

    def _imports_module(self, path: str, target: str) -> bool:
        """An import statement of ``path`` (read from its import lines, not its tree) names the module ``target``."""
        for stmt in _import_nodes(self.state.text(path) or ""):
            if isinstance(stmt, ast.ImportFrom):
                module = stmt.module or ""
                if self._module_file(path, stmt.level, module) == target or \
                        any(self._module_file(path, stmt.level, f"{module}.{a.name}" if module else a.name) == target
                            for a in stmt.names):
                    return True
            elif isinstance(stmt, ast.Import) and any(self._module_file(path, 0, a.name) == target for a in stmt.names):
                return True
        return False

    def made_on_rank_zero(self, sem: SemanticModel, init: ast.AST) -> bool | None:
        """Whether every module that makes an object of ``init``'s class makes it on the main process only
        (``Logger(...) if rank == 0 else None``); None when no other module makes one. (A caller that is no DDP
        program is not excused: an ``accelerate launch`` script runs on every process too.)"""
        records = self._callers(sem, init)
        return all(r.rank_zero_only for r in records) if records else None

    def unguarded_ddp_caller(self, sem: SemanticModel, func: ast.AST, anywhere: bool = False,
                             named_by: frozenset[str] = frozenset()) -> CallRecord | None:
        """A call of ``func`` from the epoch or batch loop of a DDP program in another module that runs on every
        rank (no rank guard); ``anywhere``: from any place of such a program (a helper that unwraps DDP models, made
        for DDP programs, is no library API that any program may call once); ``named_by``: the parameter (by name and
        slot) that names the file written, which a call handing it a per-rank name writes apart from the others."""
        return next((r for r in self._callers(sem, func, ddp_only=True) if r.ddp and (anywhere or r.in_loop)
                     and not r.rank_guarded and not named_by & r.per_rank), None)

    def callers_mention(self, sem: SemanticModel, func: ast.AST, pattern: re.Pattern[str], by_class: bool = False) -> bool:
        """Some module that calls ``func`` says ``pattern`` (``make_data_parallel(...)`` before ``train_epoch(model)``);
        ``by_class``: a method's calls through its class (``Trainer.train(model, ...)``)."""
        state = self.state
        key = (self.state.absolute(sem.path), func.name, pattern.pattern + ("/class" if by_class else ""))  # type: ignore[attr-defined]
        if key not in state.mentions:  # once per question: texts are read afresh
            state.mentions[key] = any(pattern.search(state.text(path) or "")
                                      for path in {r.path for r in self._callers(sem, func, by_class=by_class)})
        return state.mentions[key]

    def callers_grad_mode(self, sem: SemanticModel, func: ast.AST, by_class: bool = False) -> str | None:
        """The grad mode of every call of ``func`` from other modules, when they agree; ``by_class``: a method's, made
        through objects of its class (``self.critic.estimate(obs)`` of ``self.critic = ValueHead(8)``)."""
        modes = {r.grad_mode for r in self._callers(sem, func, by_class=by_class)}
        return modes.pop() if len(modes) == 1 else None

    def never_called_with_grad(self, sem: SemanticModel, func: ast.AST, by_class: bool = False) -> bool:
        """No call of ``func`` from the other modules runs with autograd on (there may be none)."""
        return all(r.grad_mode == "off" for r in self._callers(sem, func, by_class=by_class))

    def callers_train_through(self, sem: SemanticModel, func: ast.AST) -> bool:
        """Some call of ``func`` in another module trains through it: autograd on, and its result reaches a
        ``backward()`` (Raindrop's baselines: ``outputs = evaluate_standard(model, P, ...)``, then the loss of it)."""
        return any(r.trains for r in self._callers(sem, func, by_class=sem.class_of(func) is not None))

    def step_callers(self, sem: SemanticModel, func: ast.AST) -> list[CallRecord]:
        """The calls of ``func`` from other modules that run on every step of their batch loop, on an accelerator,
        in the order the modules were read; when ``func`` is one whole training step (backward and an optimizer step,
        no loop of its own), every loop that calls it on each iteration is such a batch loop."""
        one_step = {"backward", "step"} <= sem.effects(func) and not sem.loops_index.loops_backward(func)
        return [r for r in self._callers(sem, func, by_class=True) if r.per_step or one_step and r.per_iteration]

    def callers_hand_unpinned_loaders(self, sem: SemanticModel, func: ast.AST, param: str) -> CallRecord | None:
        """A call of ``func`` in another module, when every such call hands ``param`` a DataLoader made without pinned
        memory (``train(audio_model, train_loader, ...)`` after ``DataLoader(..., pin_memory=False)`` in run.py)."""
        slot = param_slot(func, param)
        records = self._callers(sem, func)
        if records and all(param in r.unpinned_loaders or slot is not None and slot in r.unpinned_loaders
                           for r in records):
            return min(records, key=lambda r: (r.path, r.line))
        return None

    def model_loop_callers(self, sem: SemanticModel, func: ast.AST) -> list[CallRecord]:
        """The calls of ``func`` from other modules made on every pass of a loop that runs a model (a generation loop's
        ``x_step = sample_sigmoid(h)``), on an accelerator."""
        return [r for r in self._callers(sem, func) if r.in_model_loop]

    def passes_accelerator(self, sem: SemanticModel, func: ast.AST, param: str) -> bool:
        """A caller in another module passes an accelerator device for ``param`` of ``func`` (a method's ``self``
        takes no argument slot: ``Denoiser(50, cfg.device)`` gives ``dev`` of ``__init__(self, n_steps, dev)``)."""
        slot = param_slot(func, param)
        records = self._callers(sem, func, through_package=func.name == "__init__")  # type: ignore[attr-defined]
        # (``NCSNRunner(args, config)`` in a script that imports the class through ``runners/__init__.py``)
        if not records and func.name != "__init__" and sem.class_of(func) is None and any(  # type: ignore[attr-defined]
                isinstance(n, (ast.For, ast.While)) for n in sem.local_nodes(func)):
            records = self._callers(sem, func, via_package=True)  # (``utils.run(model, ..., device)`` of ``import
            # utils``, whose ``__init__`` re-exports ``run``: asked only when the module's own importers call none, and
            # of a function that loops: a layer factory's ``device`` of ``timm.layers`` decides no step's reads)
        if any(param in r.accelerator_args or (slot is not None and slot in r.accelerator_args) for r in records):
            return True
        for r in records:  # ``Learner(conf)`` of ``conf = get_config()``, whose module sets ``conf.device`` to CUDA
            for given, (level, module, name) in r.made_by:
                if given in (param, slot) and (target := self._module_file(r.path, level, module)) is not None \
                        and (summary := self.summary(target)) is not None and name in summary.cuda_names:
                    return True
        return False

    def callers_pass(self, sem: SemanticModel, func: ast.AST, param: str, every: bool = False,
                     by_class: bool = False) -> bool:
        """Some call (``every``: every call, and there is one) of ``func`` in another module passes ``param`` (by
        name, by position, or unpacked); ``by_class``: a method's calls through objects of its class."""
        slot = param_slot(func, param)
        passes = [param in r.passed or slot in r.passed or "*" in r.passed
                  for r in self._callers(sem, func, by_class=by_class)]
        return bool(passes) and all(passes) if every else any(passes)

    def callers_choose(self, sem: SemanticModel, func: ast.AST, param: str) -> frozenset[str | bool] | None:
        """The strings the calls of ``func`` in other modules pass as ``param`` (``distance="l_inf"``; the default's,
        where a call passes none), when every such call passes a known string and there is one; else None."""
        slot = param_slot(func, param)
        default = param_default(func, param)  # type: ignore[arg-type]
        out: set[str | bool] = set()
        records = self._callers(sem, func)
        for r in records:
            given = chosen_value(r.choices, param in r.passed or slot in r.passed, param, slot, default) \
                if "*" not in r.passed else None
            if given is None:
                return None  # (a name, an expression, an unpacked argument: not known here)
            out.add(given)
        return frozenset(out) if records else None

    def callers_refuse_cpu(self, sem: SemanticModel, func: ast.AST, ddp_only: bool = True) -> bool:
        """Every call of ``func`` in other modules comes after its caller stops without a GPU (``if not
        torch.cuda.is_available(): raise EnvironmentError(...)``, then ``init_distributed_mode(args)``), and there is
        one: ``func`` runs with a GPU only. (``ddp_only``: DDP launchers, through the package that re-exports it too.)"""
        records = self._callers(sem, func, ddp_only=ddp_only)
        return bool(records) and all(r.after_refusal or not ddp_only and self._caller_refuses_cpu(r) for r in records)

    def _caller_refuses_cpu(self, record: CallRecord, depth: int = 0) -> bool:
        """The call of ``record`` is made in a function (or a method: through its class) every call of which, in the
        other modules, comes after a stop without a GPU: ``RunningScale(cfg)`` in ``TDMPC2.__init__``, made by
        train.py's ``main`` after ``assert torch.cuda.is_available()``; two calls up at most."""
        model = self._model(record.path) if depth < 2 else None
        call = next((c for c in model.calls if c.lineno == record.line), None) if model is not None else None
        func = model.function_of(call) if call is not None else None
        return func is not None and self._function_refuses_cpu(model, func, depth)

    def _function_refuses_cpu(self, model: SemanticModel, func: ast.AST, depth: int) -> bool:
        """Every run of ``func`` (of ``model``'s module) comes after a stop without a GPU, as far as its callers in
        other modules show; a network's ``forward`` (or ``__init__``) runs where its class is built, also when another
        class of the module builds it (``self.cells = nn.ModuleList([Cell() for _ in range(3)])`` in ``Net``)."""
        cls = model.class_of(func)
        if cls is not None and model.frame(cls).kind == "module" and func.name == "forward" \
                and cls.name in model.module_classes:  # type: ignore[attr-defined]
            built = [c for c in model.calls if isinstance(c.func, ast.Name) and c.func.id == cls.name]  # type: ignore[attr-defined]
            makers = {id(g): g for c in built if (g := model.function_of(c)) is not None}
            if len(makers) != len({id(model.function_of(c)) for c in built}) or depth >= 2:
                return False  # (built at module level: not followed)
            records = self._callers(model, cls)
            return bool(records or makers) and all(r.after_refusal or self._caller_refuses_cpu(r, depth + 1)
                                                   for r in records) \
                and all(g is not func and self._function_refuses_cpu(model, g, depth + 1) for g in makers.values())
        if any(not (func.name == "__init__" and model.class_of(c) is cls) for c in model.call_sites(func)):
            return False  # (called in its own module too: not followed; a rebuild in the class's own ``new()`` runs
            # on an object made elsewhere)
        if cls is not None and model.frame(cls).kind == "module":  # (``__init__``: the class's makers; another
            records = self._callers(model, cls) if func.name == "__init__" \
                else self._callers(model, func, by_class=True)  # method: its calls through objects of the class)
        elif cls is None and model.frame(func).kind == "module":
            records = self._callers(model, func)
        else:
            return False
        return bool(records) and all(r.after_refusal or self._caller_refuses_cpu(r, depth + 1) for r in records)

    def run_by_forwards_only(self, sem: SemanticModel, func: ast.AST) -> bool:
        """Every call of ``func`` in other modules is in a model's method, one of them its ``forward``
        (improved-diffusion's ``timestep_embedding``, which the UNet's forward calls): it runs on every forward."""
        callers = self._callers(sem, func)
        return bool(callers) and all(r.in_forward for r in callers) and any(r.in_forward == "forward" for r in callers)

    def passes_moved_model(self, sem: SemanticModel, func: ast.AST, param: str, by_class: bool = False) -> bool:
        """A caller in another module hands ``param`` of ``func`` a model it moved to an accelerator (``Runner(model,
        opt, cfg)`` after ``model.cuda()``; a method's ``self`` takes no argument slot); ``by_class``: a method's
        calls made through objects of its class (``trainer.train(model, opt)``)."""
        return _handed(self._callers(sem, func, by_class=by_class, through_package=func.name == "__init__"), func, param,
                       "moved_models")
        # (``agent = algo.PPO(actor_critic, ...)`` of ``from pkg import algo``, whose ``__init__`` imports ``PPO``)

    def passes_wrapper(self, sem: SemanticModel, func: ast.AST, param: str) -> bool:
        """A caller in another module hands ``param`` of ``func`` a DataParallel/DDP wrapper (``utils.train(args,
        model=model)`` after ``model = nn.DataParallel(model)``; ``Trainer(args, model)`` for ``__init__``)."""
        return _handed(self._callers(sem, func, wrapper_only=True), func, param, "wrapped_models")

    def _callers(self, sem: SemanticModel, func: ast.AST, ddp_only: bool = False, by_class: bool = False,
                 through_package: bool = False, via_package: bool = False, wrapper_only: bool = False) -> list[CallRecord]:
        """The calls of ``func`` in other modules; ``ddp_only``: only those of modules whose text names a process
        group (the others are not read: a question about DDP callers parses no single-process script);
        ``wrapper_only``: only those of modules whose text names a DataParallel/DDP wrapper."""
        name = func.name  # type: ignore[attr-defined]
        cls = sem.class_of(func)
        method = None
        if name == "__init__" and cls is not None:
            name = cls.name  # ``Trainer(model, device=device)`` calls ``Trainer.__init__``
        elif by_class and cls is not None and sem.function_of(func) is None:
            method, name = name, cls.name  # ``eng.fit_batch(x, y)`` of ``eng = Engine(...)``: found by its class
            # (asked about per-step calls only: reading every importer of a class for every method costs memory)
        here = self.state.absolute(sem.path)
        key = (here, f"{name}.{method}" if method else name)
        memo = self.state.callers
        variant = "ddp" if ddp_only else "wrapper" if wrapper_only else "package" if through_package \
            else "via" if via_package else None
        mkey = (*key, variant) if variant else key
        if key in memo and not via_package:
            return memo[key]  # (every caller found already answers the narrower questions too; not the package's)
        if mkey in memo:
            return memo[mkey]
        stem = os.path.splitext(os.path.basename(here))[0]
        package = os.path.basename(os.path.dirname(here))
        if stem == "__init__":
            stem = package
        # A DDP caller may import a save helper through its package (``from pkg import save``); for the other
        # questions the module's own name is enough (reading every importer of a package cost ~40 parses on 620 files).
        words = {stem, package} if variant and self._package_reexports(here, name) else {stem}
        out: list[CallRecord] = []
        names = [name]
        if method is not None:  # ``trainer.mlm_step(...)`` of ``trainer = EncDecTrainer(...)``, a subclass here that
            names += [c.name for c in sem.of_type(ast.ClassDef) if c is not cls and any(  # type: ignore[attr-defined]
                dotted(b) == name for b in c.bases) and not any(  # type: ignore[attr-defined]
                isinstance(f, ast.FunctionDef) and f.name == method for f in c.body)]  # type: ignore[attr-defined]
            names += registries(sem, cls)  # (``algorithm.update(...)`` of ``algorithms.get_algorithm_class(name)(...)``)
        skipped, self.state.skipped = self.state.skipped, False
        for name in names:
            out += self._callers_named(here, stem, package, words, name, method, ddp_only, wrapper_only=wrapper_only)
        if not self.state.skipped:
            memo[mkey] = out
        self.state.skipped = skipped or self.state.skipped
        return out

    def _callers_named(self, here: str, stem: str, package: str, words: set[str], name: str, method: str | None,
                       ddp_only: bool, wrapper_only: bool = False) -> list[CallRecord]:
        """Of the modules that import the package (``words`` holds its name), those that import ``name`` from it (``from
        disvae import Trainer``), import all it re-exports (``from runners import *``), or write ``package.name``."""
        pattern = re.compile(rf"\b{re.escape(name)}\b")
        out: list[CallRecord] = []
        for other in self._importing(here, words):
            if package in words and stem not in self.state.import_words(other) \
                    and name not in self.state.import_words(other) and not (
                    "*" in self.state.import_words(other) and re.search(
                        rf"(?m)^\s*from\s+[\w.]*\b{re.escape(package)}\s+import\s+\*", self.state.text(other) or "")) \
                    and not (package in self.state.import_words(other)
                             and f"{package}.{name}" in (self.state.text(other) or "")):
                continue  # (imports the package, but not this function from it, nor everything it re-exports, nor
                # writes it through the package: ``algo.PPO(...)``)
            text = self.state.text(other)
            if not text or name not in text or not pattern.search(text):  # (the substring test: 10x cheaper)
                continue
            if ddp_only and not program.names_process_group(text) \
                    or wrapper_only and "DataParallel" not in text and "DDP" not in text:
                continue  # (a question about wrapped models parses no module that wraps none: ~80 parses on 620 files)
            known = self.state.imports_of.get(other)  # checked already: its imports say if it can call ``func``
            if known is not None and other not in self.state.records and \
                    not any(self._imports_function(other, known, head, here, name) for head in (*known[0], *known[1])):
                continue
            names, records = self._records(other)
            for head, found in records.items():
                if not self._imports_function(other, names, head, here, name):
                    continue
                if method is None:
                    out += [r for r in found if r.written.rsplit(".", 1)[-1] == name or r.written == head]
                else:  # (the class's method, not a function of the same name: ``Engine.fit_batch``)
                    ends = (f"{name}.{method}", f"{name}.forward") if method == "__call__" else (f"{name}.{method}",)
                    out += [r for r in found if r.written.endswith(ends)]  # (``extractor(sents)``: its __call__)
        return out

    def _package_reexports(self, here: str, name: str) -> bool:
        """``pkg/__init__.py`` imports ``name`` from ``here`` (``from .handler import save``): importers may
        write ``from pkg import save``, naming the package, not the module."""
        init = os.path.join(os.path.dirname(here), "__init__.py")
        if init == here or not self.state.is_file(init):
            return False
        summary = self.summary(init)
        return summary is not None and (name in summary.from_imports or bool(summary.star))

    def _records(self, path: str) -> tuple[tuple[dict, dict], dict[str, list[CallRecord]]]:
        """A module's imports, and its calls of imported names grouped by the local name they start with."""
        memo = self.state.records
        if path in self.state.recording:
            self.state.skipped = True
            return ({}, {}), {}  # (asked again while its callers are asked about its device: no call of it yet)
        if path not in memo:
            grouped: dict[str, list[CallRecord]] = {}
            names: tuple[dict, dict] = ({}, {})
            sem = self._model(path)
            if sem is not None:
                names = (dict(sem.names.from_imports) | self.star_names(path, sem), dict(sem.names.imports))
                heads = {h for h in set(sem.names.from_imports) | set(sem.names.modules) | set(sem.names.imports)
                         if self._from_project(path, sem.names, h)}  # (``torch.cat`` leads to no project function)
                heads |= set(names[0]) - set(sem.names.from_imports)  # (called names a star import brings)
                self.state.recording.add(path)
                try:
                    accelerated = program.runs_on_accelerator(sem) or program.config_module_device(sem, self) \
                        or model_from_project_builder(sem, self) or program.subclass_of_an_accelerated_class(sem, self) \
                        or any(self.passes_accelerator(sem, f, p) for f, p in program.device_params(sem))
                finally:
                    self.state.recording.discard(path)
                # (a module read for the index resolves no import itself: the project answers for its bases, and for
                # the device its functions are handed: ``def Trainer(model, ..., device)`` called with CUDA by main.py)
                def quiet_elsewhere(func: ast.AST, sem: SemanticModel = sem) -> bool:
                    return self.callers_grad_mode(sem, func, by_class=sem.class_of(func) is not None) == "off"

                for r in call_records(sem, heads, accelerated, quiet_elsewhere):
                    grouped.setdefault(r.written.split(".")[0], []).append(r)
                self._done_with(path, sem)
            memo[path] = (names, grouped)
        return memo[path]

    def star_names(self, path: str, sem: SemanticModel) -> dict[str, tuple[int, str, str]]:
        """``from batch_test import *`` of a module of the project: the names this module calls and does not define
        itself, as if imported one by one from that module (``{"test": (0, "batch_test", "test")}``)."""
        if not sem.names.star:
            return {}
        sources = [(level, module) for level, module in sem.names.star if self._module_file(path, level, module) is not None]
        if not sources:
            return {}
        defined = sem.bindings.defined
        called = {c.func.id for c in sem.calls if isinstance(c.func, ast.Name) and c.func.id not in defined
                  and c.func.id not in sem.names.from_imports and c.func.id not in _BUILTINS}
        if len(sources) == 1:
            return {name: (sources[0][0], sources[0][1], name) for name in called}
        out = {}  # (``from utils import *``, ``from model import *``: each name from the module that defines it)
        summaries = [(source, self.summary(self._module_file(path, *source))) for source in sources]  # type: ignore[arg-type]
        for name in called:
            source = next((src for src, summary in summaries if summary is not None
                           and (name in summary.functions or name in summary.classes)), sources[0])
            out[name] = (source[0], source[1], name)
        return out

    def _from_project(self, path: str, names, head: str) -> bool:  # type: ignore[no-untyped-def]
        """The local name ``head`` of module ``path`` comes from a module of the project (a file on disk)."""
        if head in names.from_imports:
            level, module, imported = names.from_imports[head]
            return self._module_file(path, level, module) is not None or \
                self._module_file(path, level, f"{module}.{imported}" if module else imported) is not None
        module = names.imports.get(head, head)
        parts = module.split(".")
        return any(self._module_file(path, 0, ".".join(parts[:n])) is not None for n in range(len(parts), 0, -1))

    def _imports_function(self, path: str, names: tuple[dict, dict], head: str, target: str, name: str) -> bool:
        """In module ``path``, the local name ``head`` leads to function ``name`` of module ``target``."""
        from_imports, imports = names
        if head in from_imports:
            level, module, imported = from_imports[head]
            found = self._module_file(path, level, module)
            if imported == name and (found == target or found is not None and self._reexports(found, name, target)):
                return True
            found = self._module_file(path, level, f"{module}.{imported}" if module else imported)
        elif head in imports:
            found = self._module_file(path, 0, imports[head])
        else:
            return False
        return found == target or found is not None and found.endswith("__init__.py") and self._reexports(found, name, target)
        # (``algo.PPO(...)`` of ``from pkg import algo``, whose ``__init__.py`` imports ``PPO`` from ``target``)

    def accelerated_importer(self, sem: SemanticModel, maker: str | None = None, training: bool = False) -> str | None:
        """A module of the project that imports this one (directly or through its package) and runs on an
        accelerator itself: where the batches of a loader made here go (``data/alpaca.py`` for ``finetune.py``).
        ``maker``: the function or class that builds the loader; a ``from m import Model`` that leaves it
        behind does not count. One module between them counts too (``train.py`` imports ``dataset_setup.py``, which
        imports ``wham.py`` and calls its ``Dataset(...).get_generator()``). ``training``: the first such importer that
        also trains (yolov3's ``dataset.py``, imported by ``evaluate.py`` first and by ``train.py`` too)."""
        return self._accelerated_importer(self.state.absolute(sem.path), maker, 0, training)

    def _accelerated_importer(self, here: str, maker: str | None, depth: int, training: bool = False) -> str | None:
        memo = self.state.importers
        key = (here, maker, "training") if training else (here, maker)
        if key not in memo:
            memo[key] = None
            stem = os.path.splitext(os.path.basename(here))[0]
            if stem == "__init__":  # (``from datasets import create_dataloader`` of ``datasets/__init__.py``)
                stem = os.path.basename(os.path.dirname(here))
            targets, words = {here}, {stem}
            init = os.path.join(os.path.dirname(here), "__init__.py")
            package = os.path.basename(os.path.dirname(here))
            written = None  # (``losses.triplet_loss.TripletLoss(...)`` after ``import losses``, whose ``__init__``
            if init != here and self.state.is_file(init):  # loads its modules at run time, found by the text)
                if stem in self.state.import_words(init):
                    targets.add(init)  # ``from litgpt.data import Alpaca`` through ``data/__init__.py``
                else:
                    written = f"{package}.{stem}."
                words.add(package)
            between = []
            for other in self._importing(here, words):
                text = self.state.text(other) or ""
                named = _ACCELERATOR_WORDS.search(text)
                if other in targets or maker is not None and maker not in text:
                    continue  # (one that never names the maker cannot take it)
                through = written is not None and stem not in self.state.import_words(other)
                if through and written not in text:
                    continue  # (imports the package, and never writes this module of it)
                if depth == 0 and maker is not None and "__main__" not in text:
                    between.append(other)  # (a setup module that names no device: its importers may)
                if not named and (maker is None or not _CONSTRUCTS.search(text)):
                    continue  # (one that names no device, GPU or accelerator, and makes no object of a class it
                    # imports, runs on none: it is not parsed)
                summary = self.summary(other)
                if summary is None or not self._imports_any(other, summary, targets | {init} if through else targets,
                                                            maker):
                    continue
                if (named and summary.accelerated or self._trains_with_an_accelerated_object(other)) \
                        and (not training or self.trains_here_or_through(other)):  # type: ignore[attr-defined]
                    memo[key] = other  # (``Ganomaly(opt, load_data(opt))``: handed to a trainer that runs on a GPU)
                    break
            else:
                for other in between:
                    summary = self.summary(other)
                    if summary is not None and self._imports_any(other, summary, targets, maker) \
                            and (found := self._accelerated_importer(other, None, depth + 1, training)) is not None:
                        memo[key] = found
                        break
        return memo[key]

    def _trains_with_an_accelerated_object(self, path: str) -> bool:
        """The module makes an object of a class of another module that puts its work on an accelerator, and hands
        it this module's values (``model = Ganomaly(opt, dataloader)``)."""
        sem = self._model(path)
        return sem is not None and program.makes_an_accelerated_trainer(sem, self)

    def _imports_any(self, path: str, summary: ModuleSummary, targets: set[str], maker: str | None = None) -> bool:
        for level, module, name in (*summary.from_imports.values(), *summary.shadowed):
            if self._module_file(path, level, module) in targets and (maker is None or name == maker) or \
                    self._module_file(path, level, f"{module}.{name}" if module else name) in targets:
                return True
        return any(self._module_file(path, 0, m) in targets for m in summary.imports.values()) or \
            any(self._module_file(path, level, m) in targets for level, m in summary.star)

    def _reexports(self, init: str, name: str, target: str) -> bool:
        """The package ``__init__`` brings ``name`` in from ``target``: ``from .trainer import *`` / ``import Trainer``."""
        if not init.endswith("__init__.py"):
            return False
        summary = self.summary(init)
        if summary is None:
            return False
        if name in summary.from_imports:
            level, module, _ = summary.from_imports[name]
            return self._module_file(init, level, module) == target
        return any(self._module_file(init, level, module) == target for level, module in summary.star)

    def _importing(self, here: str, words: set[str]) -> list[str]:
        """The candidates (see ``_candidates``) with one of ``words`` on an import line, in their order."""
        if len(self.files) <= 1:  # (a single-file run: the files near it; else the word index of the files checked)
            return [f for f in self._candidates(here) if not words.isdisjoint(self.state.import_words(f))]
        index = self.word_index()
        hits = sorted({n for w in words for n in index.get(w, ())})
        return [self.files[n] for n in hits if self.files[n] != here]

    def word_index(self) -> dict[str, list[int]]:
        """Every checked file's import words, to its positions in ``files``: built once per run, then a question
        (who imports this module?) is a lookup."""
        index = self.state.by_word
        if index is None:
            index = self.state.by_word = {}
            for n, f in enumerate(self.files):
                for w in self.state.import_words(f):
                    index.setdefault(w, []).append(n)
        return index

    def _candidates(self, here: str) -> list[str]:
        if len(self.files) > 1:
            return [f for f in self.files if f != here]
        memo = self.state.near
        if here not in memo:
            found: list[str] = []
            top = self.root if here.startswith(self.root + os.sep) else os.path.dirname(here)
            for dirpath, dirnames, filenames in os.walk(top):
                dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in ("venv", ".venv", "build",
                                                                                          "dist", "__pycache__")]
                found += [os.path.join(dirpath, f) for f in filenames if f.endswith(".py")]
                if len(found) > MAX_NEAR:
                    break
            memo[here] = [f for f in found[:MAX_NEAR] if f != here]
        return memo[here]

    def saves_objects(self, sem: SemanticModel) -> bool:
        """Some module of the project pickles a whole model or a config object with ``torch.save``
        (a text scan of the project's files, bounded, once per process)."""
        state = self.state
        if state.saves_objects is None:
            found = helper = entry = False
            for path in self._candidates(self.state.absolute(sem.path)) + [self.state.absolute(sem.path)]:
                text = state.text(path)
                if not text:
                    continue
                if "torch.save(" in text and _pickles_objects(text):
                    found = True
                    break
                # torch.save(*args, **kwargs) in a save helper, or torch.save(build_checkpoint(...), path), and somewhere
                # a dict holds a config object under its own name (mae: save_on_master(to_save, path), to_save = {...,
                # 'args': args}; NMT: torch.save(save_model(s2s, opt, args), path) of a helper returning {..., "args": args})
                helper = helper or _SAVE_HELPER.search(text) is not None or _saves_a_built_value(text)
                entry = entry or _OBJECT_ENTRY.search(text) is not None
                if helper and entry:
                    found = True
                    break
            state.saves_objects = found
        return state.saves_objects

    def names_gloo(self, sem: SemanticModel) -> bool:
        """Some module of the project (as ``saves_objects`` reads it: a text scan, once per process) names the gloo
        backend: its process groups may run on CPUs."""
        state = self.state
        if state.names_gloo is None:
            state.names_gloo = any("gloo" in (state.text(path) or "") for path in
                                   self._candidates(state.absolute(sem.path)) + [state.absolute(sem.path)])
        return state.names_gloo

    def selects_wrapped_keys(self, sem: SemanticModel) -> bool:
        """A module beside ``sem`` (its folder: the pretraining script's linear evaluation, as in moco and simsiam)
        picks a checkpoint's keys by the DDP prefix (``k.startswith("module.encoder")``): the prefix is the format
        the program's own readers expect (a text scan of the folder's files, once per folder). The reader's own saves
        are not its business (vicreg's evaluate.py reads main_vicreg.py's checkpoint by the prefix and saves its own
        wrapped classifier, which only its resume reads)."""
        here = self.state.absolute(sem.path)
        folder = os.path.dirname(here)
        memo = self.state.wrapped_keys
        if folder not in memo:
            memo[folder] = {self.state.absolute(path) for path in self._candidates(here) + [here]
                            if os.path.dirname(self.state.absolute(path)) == folder and (text := self.state.text(path))
                            and SELECTS_WRAPPED.search(text)}
        return bool(memo[folder] - {here})

    def requires_wrapped_keys(self, sem: SemanticModel) -> bool:
        """A module of ``sem``'s folder or below it indexes a checkpoint by a prefixed key (``sd['module.v.patch_embed
        .proj.weight']``, raising without it: ssast's model class reading the pretraining script's checkpoints): the
        program's own reader requires the prefix (a text scan, once per folder)."""
        here = self.state.absolute(sem.path)
        folder = os.path.dirname(here)
        memo = self.state.required_keys
        if folder not in memo:
            below = folder + os.sep
            memo[folder] = {self.state.absolute(path) for path in self._candidates(here) + [here]
                            if self.state.absolute(path).startswith(below) and (text := self.state.text(path))
                            and REQUIRES_WRAPPED.search(text)}
        return bool(memo[folder] - {here})

    def loads_through_a_stripping_helper(self, sem: SemanticModel, pattern: re.Pattern) -> bool:
        """``sem`` loads checkpoints through a helper of a project module it imports (``utils.load_checkpoint(model,
        path)``, ``ckpt.restore(net, path)``) whose module slices the wrapper's prefix off the keys it reads
        (``pattern``): the program reads its own checkpoints back, prefix or not."""
        modules: dict[str, tuple[int, str]] = {}
        for alias, module in sem.names.imports.items():
            modules[alias] = (0, module)
        for alias, (level, module, name) in sem.names.from_imports.items():
            modules[alias] = (level, f"{module}.{name}" if module else name)
        here = self.state.absolute(sem.path)
        for call in sem.calls:
            written = dotted(call.func) or ""
            head, last = written.split(".")[0], written.rsplit(".", 1)[-1]
            if head not in modules or not _LOADS.search(last):
                continue
            level, module = modules[head]
            path = self._module_file(here, level, module) or (
                self._module_file(here, level, module.rsplit(".", 1)[0]) if "." in module else None)
            if path is not None and path != here and self._says(path, last, pattern, 1):
                return True
        return False

    def _says(self, path: str, func: str, pattern: re.Pattern, depth: int) -> bool:
        """The module-level function ``func`` of ``path`` (or of a module it re-exports: ``from .model_utils import
        *`` in a package's ``__init__.py``, ``depth`` levels down) loads a file and has ``pattern`` in its text (not
        ``load_swa_state_dict``, which strips an ``AveragedModel``'s own prefix)."""
        text = self.state.text(path) or ""
        m = re.search(rf"(?m)^def {re.escape(func)}\(", text)
        if m is not None:
            end = _TOP_LEVEL.search(text, m.end())
            body = text[m.start():end.start() if end else len(text)]
            return pattern.search(body) is not None and "load(" in body  # (reads a checkpoint file: ``torch.load``)
        if depth <= 0:
            return False
        for m in _RELATIVE_IMPORT.finditer(text):
            found = self._module_file(path, len(m.group(1)), m.group(2))
            if found is not None and found != path and self._says(found, func, pattern, depth - 1):
                return True
        return False

    def strips_wrapped_beside(self, sem: SemanticModel, words: list[str], entries: list[str] = ()) -> bool:  # type: ignore[assignment]
        """A module beside ``sem`` strips the first 7 characters of every key of a checkpoint whose file name it
        shares a word with (``netG_{}.pth``): that reader needs the prefix the save writes. Or it reads the entry
        the state dict is saved under (``ckpt["g_model_state_dict"]``, the first of ``entries``, and one of the others
        when there are more) and takes the prefix off (``k[7:] if k.startswith("module.") else k``,
        ``k.replace("module.", "")``, ``'.'.join(k.split('.')[1:])``): the program's own reader copes."""
        here = self.state.absolute(sem.path)
        folder = os.path.dirname(here)
        for path in self._candidates(here):
            if os.path.dirname(self.state.absolute(path)) != folder or self.state.absolute(path) == here:
                continue
            text = self.state.text(path)
            if not text:
                continue
            if words and (_STRIPS_ALWAYS.search(text) or _DROPS_FIRST_PART.search(text)) and any(w in text for w in words):
                return True
            if entries and (STRIPS_WRAPPED.search(text) or _RENAMES_WRAPPED.search(text) or _DROPS_FIRST_PART.search(text)) \
                    and _names_entry(text, entries[0]) and (len(entries) == 1 or any(_names_entry(text, e) for e in entries[1:])):
                return True  # (several entries: a generic one, and one the program names its own, read together)
        return False


def _names_entry(text: str, entry: str) -> bool:
    return f'["{entry}"]' in text or f"['{entry}']" in text


# a reader beside it that strips the first 7 characters of every key (``weights[name[7:]] = weights.pop(name)``), not
# only of those that have the prefix (``k[7:] if k.startswith("module.") else k`` tolerates both formats)
_BUILTINS = frozenset(dir(builtins))
_RENAMES_WRAPPED = lazy(r"""\breplace\(\s*["']module\.["']\s*,\s*["']["']\s*\)""")  # ``k.replace("module.", "")``
_STRIPS_ALWAYS = lazy(r"(?m)^(?!.*(startswith|\bif\b|#)).*\b(k|key|name|n)\[\s*(7|len\(\s*[\"']module\.[\"']\s*\))\s*:\s*\]")
_DROPS_FIRST_PART = lazy(r"""["']\.["']\.join\(\s*(k|key|name|n)\.split\(\s*["']\.["']\s*\)\s*\[\s*1\s*:\s*\]\s*\)""")
# (``{'.'.join(k.split('.')[1:]): v for k, v in checkpoint['state_dict'].items()}``: every key's first part dropped)
_SETS_DEVICE = lazy(r"\bcuda\.set_device\s*\(")
_OPTION = lazy(r"add_argument\(\s*['\"]--([\w-]+)['\"]([^)]*)\)")
_ALWAYS_TRUE = lazy(r"type\s*=\s*bool\b|action\s*=\s*['\"]store_true['\"]")
_DEFAULT_TRUE = lazy(r"default\s*=\s*True\b")
_LOADS = lazy(r"(?i)load|restore|resume")
_TOP_LEVEL = lazy(r"(?m)^\S")  # the next statement at column 0: where a module-level function's text ends
_RELATIVE_IMPORT = lazy(r"(?m)^from\s+(\.+)(\w[\w.]*)\s+import\b")
_DATA_PARALLEL = lazy(r"(?<!Distributed)DataParallel\(")
_CONSTRUCTS = lazy(r"=\s*[A-Z]\w*\(\w")  # (``model = Ganomaly(opt, ...)``: an object made of a class, given values)
_ACCELERATOR_WORDS = lazy(r"(?i)cuda|device|accelerat|rank|gpu|fabric|\.to\(\s*\d")
_MODELISH = lazy(r"^(model|net|network|module|\w*_model|model_\w*|\w*_net|\w*Model|\w*Net)$")
_OBJECT_VALUE = lazy(r"[:=]\s*(self\.)?(args|opt|opts|config|cfg|hparams|hyperparameters|model|net)\b\s*[,})]")
# a dict entry holding such an object under its own name ('args': args), built apart from the save and handed to a
# helper that calls torch.save (mae's save_model: to_save = {..., 'args': args}; save_on_master(to_save, path))
_SAVE_HELPER = lazy(r"torch\.save\(\s*\*")
# a reader that picks a checkpoint's keys by the DDP prefix: ``k.startswith("module.encoder")``
# a reader of the folder (or below it) indexes a checkpoint by a prefixed key, raising without it:
# ``sd['module.v.patch_embed.proj.weight']`` (the program's own format; its file's saves included)
REQUIRES_WRAPPED = lazy(r"""\[\s*(f?["'])module\.\w[\w.]*["']\s*\]|\[\s*["']module\.["']\s*\+""")
# (``sd['module.v.patch_embed.proj.weight']``, or a converter's ``ckpt["model"]["module." + key]``)
SELECTS_WRAPPED = lazy(r"""(startswith|replace)\(\s*(f?["'])module\.\w""")  # picks (or renames) ``module.encoder.*``
# the saving file's own reader strips the prefix by a slice: ``{k[7:]: v for k, v in sd.items()}`` (asked of that file
# only: a helper elsewhere that strips it when present, ``k[7:] if k.startswith('module') else k``, tolerates both)
# or keeps only the prefixed keys: ``{k.replace("module.", ""): v for k, v in sd.items() if "module." in k}``
STRIPS_WRAPPED = lazy(r"""\b(k|key|name|n)\[\s*(7|len\(\s*["']module\.["']\s*\))\s*:\s*\]"""
                      r"""|\bif\s+["']module\.["']\s+in\s+(k|key|name|n)\b""")
_BUILT_SAVE = lazy(r"torch\.save\(\s*([A-Za-z_][\w.]*)\(")
_PLAIN_BUILDERS = frozenset({"state_dict", "cpu", "deepcopy", "clone", "detach", "dict", "OrderedDict", "stack", "cat",
                             "tensor", "from_numpy", "Tensor"})


def _saves_a_built_value(text: str) -> bool:
    """``torch.save(save_transformer(s2s, optimizer, args), path)``: what a function builds is saved (NMT's helper
    returns ``{"model_dict": ..., "args": args}``); ``torch.save(model.state_dict(), path)`` is no such call."""
    return any(m.group(1).rsplit(".", 1)[-1] not in _PLAIN_BUILDERS for m in _BUILT_SAVE.finditer(text))


_OBJECT_ENTRY = lazy(r"""["'](args|opt|opts|config|cfg|hparams|hyperparameters)["']\s*:\s*(self\.)?"""
                     r"""(args|opt|opts|config|cfg|hparams|hyperparameters)\b\s*[,})]""")


def _built_with_objects(text: str, name: str) -> bool:
    """``checkpoint = {'epoch': e, 'settings': opt, 'model': model.state_dict()}`` somewhere in ``text``, then
    ``torch.save(checkpoint, path)``: the dict saved under that name holds a config object."""
    for m in re.finditer(rf"(?m)^[ \t]*{re.escape(name)}[ \t]*=[ \t]*(\{{|dict\()", text):
        depth, i, end = 0, m.end() - 1, min(len(text), m.end() + 2000)
        while i < end:
            depth += text[i] in "([{"
            depth -= text[i] in ")]}"
            i += 1
            if depth == 0:
                break
        if _OBJECT_VALUE.search(text[m.end() - 1:i]):
            return True
    return False


def _pickles_objects(text: str) -> bool:
    """Does some ``torch.save(...)`` in ``text`` save a bare model name, or a dict holding ``args``/``config``
    objects or a whole model?"""
    start = 0
    while True:
        at = text.find("torch.save(", start)
        if at < 0:
            return False
        depth, i = 0, at + len("torch.save")
        end = min(len(text), i + 2000)
        while i < end:
            ch = text[i]
            depth += ch in "([{"
            depth -= ch in ")]}"
            i += 1
            if depth == 0:
                break
        args = text[at + len("torch.save("):i - 1]
        first = args.split(",", 1)[0].strip()
        if _MODELISH.match(first) or _OBJECT_VALUE.search(args):
            return True
        if first.isidentifier() and _built_with_objects(text, first):
            return True
        start = i


def registries(sem: SemanticModel, cls: ast.AST) -> list[str]:
    """The module-level functions of ``cls``'s module that hand back a class looked up by name, ``cls`` among them:
    ``return globals()[name]`` (any class of the module), ``return MODELS[name]`` of a module-level dict literal whose
    values name ``cls``. Their callers make objects of ``cls`` without writing its name."""
    def compute() -> tuple[list[str], dict[str, set[str]]]:
        tables = {t.id: {v.id for v in n.value.values if isinstance(v, ast.Name)}  # type: ignore[attr-defined]
                  for n in sem.tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Dict)
                  for t in n.targets if isinstance(t, ast.Name)}
        anything, by_table = [], {}
        for func in sem.tree.body:
            if not isinstance(func, ast.FunctionDef):
                continue
            for ret in ast.walk(func):
                value = ret.value if isinstance(ret, ast.Return) else None
                table = value.value if isinstance(value, ast.Subscript) else \
                    value.func.value if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
                    and value.func.attr == "get" else None
                if isinstance(table, ast.Call) and dotted(table.func) == "globals":
                    anything.append(func.name)
                    break
                if isinstance(table, ast.Name) and table.id in tables:
                    by_table.setdefault(func.name, set()).update(tables[table.id])
                    break
        return anything, by_table

    if sem.frame(cls).kind != "module" or "return" not in sem.text.source:
        return []
    anything, by_table = sem.cached("registries", compute)
    return anything + [f for f, classes in by_table.items() if cls.name in classes]  # type: ignore[attr-defined]


def _handed(records: list[CallRecord], func: ast.AST, param: str, field: str) -> bool:
    """Some call record's ``field`` (``moved_models``, ``wrapped_models``: parameters by name or "#i") names
    ``param`` of ``func``, by name or by its position."""
    slot = param_slot(func, param)
    return any(param in (given := getattr(r, field)) or slot is not None and slot in given for r in records)
