"""The project index: what the other modules of the program define and how they call each other.

Rules ask it cross-file questions through the semantic model: is ``Net`` (imported from
``model.py``) an ``nn.Module`` with dropout? what does ``train_one_epoch`` (from
``engine.py``) do: backward, zero_grad, set_epoch? do the callers of this function guard it
by rank, set eval mode first, pass it a CUDA device?

Answers come from small per-module summaries, made the first time a module is asked about
(one parse and one walk of that file) and kept for the rest of the run in this process. The
tree is dropped, except for a module that is itself among the files checked: its tree and walk
wait (a bounded number of them) for its own check, so no file is parsed twice. Modules resolve as Python would from the checked file's folder, its
package and the project root, only to ``.py`` files that exist on disk, so a single-file
run (pre-commit passes changed files) still sees its siblings; the number of modules read
and their size are bounded. Reverse questions (who calls this function?) look only at the
files checked together, or, for a single-file run, the ``.py`` files near it.
"""

from __future__ import annotations

import ast
import functools
import itertools
import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from torchdoctor.check.astutil import PLACEMENT_METHODS, dotted, strip_methods
from torchdoctor.check.patterns import lazy
from torchdoctor.check.project_callers import REQUIRES_WRAPPED, SELECTS_WRAPPED, STRIPS_WRAPPED, Callers
from torchdoctor.check.project_files import State, file_of, guess_root
from torchdoctor.check.semantic import SemanticModel
from torchdoctor.check.semantic.gpu_only import kernel_calls, optional_imports

if TYPE_CHECKING:  # summary.py is imported when a first module is summarised: a lone script never needs it
    from torchdoctor.check.semantic.summary import FunctionSummary, ModuleSummary

__all__ = ["Project", "REQUIRES_WRAPPED", "SELECTS_WRAPPED", "STRIPS_WRAPPED"]

MAX_MODULES = 400  # summaries read per process
MAX_PENDING = 8  # parsed modules kept for their own check, at most (each holds a tree: 64 cost +29 MB peak on 620 files)
_RUNS = itertools.count()
_WORKER_STATES: dict[str, State] = {}  # in a worker process: each run's caches, shared by the runs of files it checks


_NOT_MODULE_BASES = frozenset({"Dataset", "IterableDataset", "DataLoader", "Exception", "Enum", "ABC", "object", "dict",
                               "NamedTuple", "Sampler"})


class Project(Callers):
    """``files``: the paths checked together; ``root``: where absolute imports of the project start."""

    def __init__(self, files: Sequence[str], root: str | None = None) -> None:
        # (notebooks checked with the modules are read as callers of them: a notebook drives a project's trainer)
        self.files = [os.path.abspath(f) for f in files if f.endswith((".py", ".ipynb"))]
        modules = [f for f in self.files if f.endswith(".py")]
        root = os.path.abspath(root) if root else None
        inside = root is not None and all(f.startswith(root + os.sep) for f in modules)
        self.root = root if inside else guess_root(modules)  # type: ignore[assignment]
        self._state: State | None = None
        self._checked = frozenset(modules)  # (a notebook's own check reads it afresh: no tree is kept for it)
        self._run = f"{os.getpid()}.{next(_RUNS)}"  # names this run in its worker processes

    def __getstate__(self) -> dict:  # worker processes start with an empty cache, shared by their runs of files
        return {"files": self.files, "root": self.root, "_state": None, "_checked": self._checked, "_run": self._run,
                "_in_worker": True}

    @property
    def state(self) -> State:
        if self._state is None:
            if self.__dict__.get("_in_worker"):
                self._state = _WORKER_STATES.setdefault(self._run, State())
            else:
                self._state = State()
        return self._state

    # ---- the file being analysed ------------------------------------------------------------------
    def begin(self, sem: SemanticModel) -> None:
        """``sem`` is being analysed: questions about its own module use it instead of reading the file."""
        self.state.current[self.state.absolute(sem.path)] = sem

    def end(self, sem: SemanticModel) -> None:
        path = self.state.absolute(sem.path)
        self.state.current.pop(path, None)
        if path not in self.state.records:  # what a reverse question asks first, without parsing it again
            self.state.imports_of[path] = (dict(sem.names.from_imports) | self.star_names(path, sem),
                                           dict(sem.names.imports))

    def take(self, path: str, text: str) -> tuple | None:
        """The tree and syntax-only parts of the semantic model the index already built for ``path``
        (``(tree, index, names, bindings)``), when it read the same text; else None."""
        if self._state is None:
            return None
        kept = self._state.pending.pop(self.state.absolute(path), None)
        if kept is None or kept[0] != text:
            return None
        return kept[1:]

    def waiting(self) -> list[str]:
        """The checked files (absolute paths) whose tree the index read for another file's questions and
        keeps for their own check, oldest first: checking them next parses no file twice."""
        return list(self._state.pending) if self._state is not None else []

    def importers_first(self, paths: Sequence[str]) -> list[str]:
        """``paths`` reordered so that a file comes after the files whose import lines name it (by its module's
        name, a package's by the folder's): the index reads a module for its importer's questions and keeps the
        tree for the module's own check, which comes soon after. Checked in the given order, modules checked before
        their importers were read and walked a second time (50 of 620 files; 40 in this order; cycles and
        modules of the same name in other folders keep the rest). Findings do not depend on the order."""
        state = self.state
        given = {state.absolute(p): p for p in paths}
        index = self.word_index()  # (the index the reverse questions use: built now instead of later)

        def importers(p: str) -> list[str]:
            full = state.absolute(p)
            stem = os.path.splitext(os.path.basename(full))[0]
            word = os.path.basename(os.path.dirname(full)) if stem == "__init__" else stem
            return [given[f] for n in index.get(word, ()) if (f := self.files[n]) in given and f.endswith(".py")]

        out: list[str] = []
        seen: set[str] = set()
        for first in paths:  # depth first over "is imported by": a file is listed once all its importers are
            if first in seen:
                continue
            seen.add(first)
            stack = [(first, iter(importers(first)))]
            while stack:
                node, rest = stack[-1]
                for other in rest:
                    if other not in seen:
                        seen.add(other)
                        stack.append((other, iter(importers(other))))
                        break
                else:
                    stack.pop()
                    out.append(node)
        return out

    def forget_kept(self) -> None:
        """Drop the trees kept for files that are not checked here (in a worker: another worker's)."""
        if self._state is not None:
            self._state.pending.clear()

    def finished(self, path: str) -> None:
        """``path`` has had its own check: a later read of it for the index keeps no tree for it."""
        state = self.state
        path = self.state.absolute(path)
        state.finished.add(path)
        state.pending.pop(path, None)

    # ---- forward questions (what does that name, imported here, stand for?) ------------------------------
    def defines_class(self, sem: SemanticModel, written: str) -> bool:
        """``written`` (imported here, a star import included) is a class of another module of the project."""
        return self._lookup(sem, written, "class") is not None

    def is_module_class(self, sem: SemanticModel, written: str) -> bool | None:
        """Whether the class ``written`` (imported here) is an ``nn.Module``; None when it is not the project's. A class
        whose base comes from a third module (``DiffVC(BaseModule)``, read without resolving its imports) is asked
        through its bases."""
        cls = self._lookup(sem, written, "class")
        if cls is None:
            return None
        return cls.is_module or any(b[:1].isupper() and b not in _NOT_MODULE_BASES for b in cls.bases) \
            and self.inherits_module(sem, written)  # type: ignore[attr-defined]

    def inherits_module(self, sem: SemanticModel, written: str) -> bool:
        """The class ``written`` (imported here) is an ``nn.Module``, through base classes of other modules too
        (``MiniGPT4(MiniGPTBase)``, ``MiniGPTBase(BaseModel)``, ``BaseModel(nn.Module)``)."""
        return self._lookup(sem, written, "module_class") is not None

    def calls_every_step(self, sem: SemanticModel, written: str, method: str) -> bool:
        """The class ``written`` (imported here) calls ``self.<method>(...)`` on every step of a batch loop, itself or
        through a base class (``LASTrainer(NonSplitTrainer)``, ``NonSplitTrainer(Trainer)``, whose ``train_epoch``
        loop calls ``self.unit_train(data)``)."""
        return self._lookup(sem, written, f"step_calls:{method}") is not None  # (or one of its bases does)

    def calls_without_grad(self, sem: SemanticModel, written: str, method: str) -> bool:
        """The class ``written`` (imported here) calls ``self.<method>(...)`` only with autograd off (``@torch.inference_mode()
        def generate(self, ...)`` calling ``self.generate_next_token(tok)``): a subclass's ``method`` records no graph."""
        cls = self._lookup(sem, written, "class")
        return cls is not None and method in cls.quiet_calls  # type: ignore[attr-defined]

    def class_dropout_bn(self, sem: SemanticModel, written: str) -> bool | None:
        cls = self._lookup(sem, written, "class")
        return None if cls is None or not cls.is_module else cls.dropout_bn  # type: ignore[attr-defined]

    def class_batchnorm(self, sem: SemanticModel, written: str) -> bool:
        cls = self._lookup(sem, written, "class")
        return cls is not None and cls.batchnorm  # type: ignore[attr-defined]

    def cuda_setting(self, sem: SemanticModel, written: str) -> bool:
        """``config.device`` names a module-level setting of another module that is (or may be) CUDA."""
        return self._lookup(sem, written, "cuda_setting") is not None

    def class_yields_text(self, sem: SemanticModel, written: str) -> bool:
        cls = self._lookup(sem, written, "class")
        return cls is not None and cls.yields_text  # type: ignore[attr-defined]

    def class_moves_itself(self, sem: SemanticModel, written: str) -> bool:
        """The class ``written`` (imported here) moves itself to a device as it is built: its ``__init__`` moves
        it or its parts, or each submodule it builds is of such a class (maybe in yet other modules)."""
        cls = self._lookup(sem, written, "moved_class")
        return cls is not None and cls.is_module  # type: ignore[attr-defined]

    def class_stateless(self, sem: SemanticModel, written: str) -> bool:
        """The module class ``written`` (imported here) holds nothing to move: no parameter, buffer or tensor, and
        its submodules (maybe of classes in yet other modules) hold nothing either."""
        cls = self._lookup(sem, written, "stateless_class")
        return cls is not None and cls.is_module  # type: ignore[attr-defined]

    def class_loss_weights(self, sem: SemanticModel, written: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        """The module class ``written`` (imported here) is a loss that holds nothing unless given class weights: the
        parameters that take them, and its ``__init__``'s parameters (to read a call's positional arguments)."""
        cls = self._lookup(sem, written, "class")
        if cls is None or not cls.is_module or cls.loss_weights is None:  # type: ignore[attr-defined]
            return None
        return cls.loss_weights, cls.init_params  # type: ignore[attr-defined]

    def class_yields_device(self, sem: SemanticModel, written: str) -> bool:
        """``written`` (imported here) is a Dataset class whose items it moves to a device itself."""
        cls = self._lookup(sem, written, "class")
        return cls is not None and cls.yields_device  # type: ignore[attr-defined]

    def class_builds_loader(self, sem: SemanticModel, written: str) -> bool:
        """``written`` (imported here) is a DataLoader subclass that builds torch's loader from what it is given."""
        cls = self._lookup(sem, written, "class")
        return cls is not None and cls.builds_loader  # type: ignore[attr-defined]

    def class_collates_arrays(self, sem: SemanticModel, written: str) -> bool:
        """``written`` (imported here) is a Dataset whose ``collate_fn`` method makes no torch tensor."""
        cls = self._lookup(sem, written, "class")
        return cls is not None and cls.collates_arrays  # type: ignore[attr-defined]

    def loader_passes(self, sem: SemanticModel, written: str) -> frozenset[str]:
        """The pipeline arguments the DataLoader subclass ``written`` (imported here) turns on in its ``__init__``."""
        cls = self._lookup(sem, written, "class")
        return cls.loader_passes if cls is not None and cls.builds_loader else frozenset()  # type: ignore[attr-defined]

    def class_frozen(self, sem: SemanticModel, written: str) -> tuple[str, tuple[str, ...]] | None:
        """The module class ``written`` (imported here) freezes its parameters as it is built: how (see
        ``frozen.class_freezes_itself``) and its ``__init__``'s parameters; None when it does not."""
        cls = self._lookup(sem, written, "class")
        if cls is None or not cls.is_module or cls.frozen is None:  # type: ignore[attr-defined]
            return None
        return cls.frozen, cls.init_params  # type: ignore[attr-defined]

    def class_quiet_unless(self, sem: SemanticModel, written: str) -> tuple[str, tuple[str, ...]] | None:
        """The module class ``written`` (imported here) runs a no-grad method from ``forward`` unless built with a flag
        (``frozen.forward_quiet_unless``): the flag and its ``__init__``'s parameters; else None."""
        cls = self._lookup(sem, written, "class")
        if cls is None or cls.quiet_unless is None:  # type: ignore[attr-defined]
            return None
        return cls.quiet_unless, cls.init_params  # type: ignore[attr-defined]

    def class_quiet_methods(self, sem: SemanticModel, written: str) -> frozenset[str]:
        """The methods of the module class ``written`` (imported here) that turn autograd off themselves."""
        cls = self._lookup(sem, written, "class")  # (a class whose base comes from a third module: its ``is_module``
        return cls.quiet_methods if cls is not None else frozenset()  # may be unknown; quiet methods are its own)

    def _star_summaries(self, sem: SemanticModel):  # type: ignore[no-untyped-def]
        """The summaries of the modules of the project that ``sem`` star-imports, and of those they star-import in turn
        (three levels), nearest first."""
        frontier = [(sem.path, level, module) for level, module in sem.names.star]
        for _ in range(3):
            following = []
            for here, level, module in frontier:
                target = self._module_file(here, level, module)
                summary = self.summary(target) if target is not None else None
                if summary is not None:
                    yield summary
                    following += [(target, lv, m) for lv, m in summary.star]
            frontier = following

    def star_true_flag(self, sem: SemanticModel, name: str) -> bool:
        """``name`` (not bound in ``sem``'s module) is a flag a star-imported module of the project (or one it
        star-imports) only ever sets to True: ``USE_CUDA = True`` of ``from model import *``."""
        return any(name in summary.true_flags for summary in self._star_summaries(sem))

    def star_module_aliases(self, sem: SemanticModel) -> dict[str, str]:
        """The module aliases (``nn`` -> ``torch.nn``, ``t`` -> ``torch``) that ``from network import *`` brings in:
        plain imports of torch in the star-imported modules of the project, and in the modules they star-import in
        turn, for names the file does not bind itself."""
        out: dict[str, str] = {}
        for summary in self._star_summaries(sem):
            for local, qual in summary.imports.items():
                if "." not in local and local not in summary.from_imports and qual.split(".")[0] == "torch":
                    out.setdefault(local, qual)
        defined = sem.bindings.defined | set(sem.bindings.by_key)
        return {k: v for k, v in out.items() if k not in defined and k not in sem.names.imports}

    def class_moved_inputs(self, sem: SemanticModel, written: str) -> frozenset[int]:
        """Positions of the ``forward`` inputs the module class ``written`` (imported here) moves to a device itself."""
        cls = self._lookup(sem, written, "class")
        return cls.moved_inputs if cls is not None else frozenset()  # type: ignore[attr-defined]

    def class_submodules(self, sem: SemanticModel, written: str) -> frozenset[str]:
        """The attributes the model class ``written`` (imported here) sets to layers or models (models.submodule_names)."""
        cls = self._lookup(sem, written, "class")
        return cls.submodules if cls is not None else frozenset()  # type: ignore[attr-defined]

    def class_differentiates(self, sem: SemanticModel, written: str) -> bool:
        """The module class ``written`` (imported here) takes gradients in its own methods (``autograd.grad``)."""
        cls = self._lookup(sem, written, "class")
        return cls is not None and cls.differentiates  # type: ignore[attr-defined]

    def class_flag_chain(self, sem: SemanticModel, written: str) -> tuple | None:
        """How the ``forward`` of the module class ``written`` (imported here) picks a branch by flag parameters
        (``frozen.forward_flag_chain``), when some branch runs under no_grad."""
        cls = self._lookup(sem, written, "class")
        return cls.flag_chain if cls is not None else None  # type: ignore[attr-defined]

    def class_network_methods(self, sem: SemanticModel, written: str) -> frozenset[str]:
        """The methods of the module class ``written`` (imported here) other than ``forward`` that run its layers."""
        cls = self._lookup(sem, written, "class")
        return cls.network_methods if cls is not None else frozenset()  # type: ignore[attr-defined]

    def class_saves(self, sem: SemanticModel, written: str) -> bool:
        """``written`` (imported here) is a class of the project one of whose methods saves with ``torch.save``
        (``EarlyStopping.save_checkpoint``)."""
        return self._lookup(sem, written, "saving_class") is not None

    def class_of_project(self, sem: SemanticModel, written: str) -> bool:
        """``written`` (imported here) is a class defined in a module of the project."""
        return self._lookup(sem, written, "class") is not None

    def class_paramless(self, sem: SemanticModel, written: str) -> bool:
        cls = self._lookup(sem, written, "class")
        return cls is not None and cls.is_module and cls.paramless  # type: ignore[attr-defined]

    def defined_on_accelerator(self, sem: SemanticModel, written: str) -> bool:
        """``written`` (``Coach``, ``trainers.fit``) is a class or function of a module of the project that puts work
        on an accelerator itself (its trainer moves the model and each batch to the GPU)."""
        return self._lookup(sem, written, "accelerated") is not None

    def base_moves_attribute(self, sem: SemanticModel, written: str, attr: str) -> bool:
        """The class ``written`` (imported here) is defined in a module of the project that moves a ``self.<attr>`` to a
        device (``self.model = self.model.to(self.device)`` in the ``__init__`` that calls a ``declare_networks()`` hook
        the subclass overrides: DeepRL-Tutorials' agents)."""
        summary = self._lookup(sem, written, "class_module")
        text = self.state.text(summary.path) if summary is not None else None  # type: ignore[attr-defined]
        return bool(text) and re.search(rf"\bself\.{re.escape(attr)}(\s*=\s*self\.{re.escape(attr)})?\.(to|cuda)\(",
                                        text) is not None  # type: ignore[arg-type]

    def is_data_parallel_class(self, sem: SemanticModel, written: str) -> bool:
        """``written`` (imported here) is a class of the project that subclasses ``torch.nn.DataParallel``, directly or
        through classes of other modules (``UserScatteredDataParallel(DictGatherDataParallel(DataParallel))``)."""
        return self._lookup(sem, written, "data_parallel_class") is not None

    def external_origin(self, sem: SemanticModel, written: str) -> str | None:
        """What ``written``, imported here from a module of the project, stands for when that module imports it from
        outside the project (``from dataset import DataLoader``, dataset.py's ``from torch.utils.data import
        DataLoader``): ``"torch.utils.data.DataLoader"``."""
        return self._lookup(sem, written, "external")  # type: ignore[return-value]

    def returned_library_object(self, sem: SemanticModel, written: str) -> str | None:
        """``written`` (imported here) is a function of the project that returns an object of a class it imports from
        outside the project (``def get_model(net): model = pt.Model(net, ...); return model`` with ``import poutyne as
        pt``): that class's full name, ``"poutyne.Model"``."""
        return self._lookup(sem, written, "library_object")  # type: ignore[return-value]

    def function_for(self, sem: SemanticModel, call: ast.Call) -> FunctionSummary | None:
        written = dotted(call.func)
        if written is None:
            return None
        found = self._lookup(sem, written, "function")
        if found is None:  # ``Trainer(...)`` runs ``Trainer.__init__``
            found = self._lookup(sem, written + ".__init__", "function")
        if found is None and isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name):
            # ``metric_logger.update(...)`` on ``metric_logger = utils.MetricLogger()``: the class's method
            b = sem.binding_at(call.func.value.id, call)  # (through placements: ``S2S(enc, dec).to(device)``)
            made = strip_methods(b.value, PLACEMENT_METHODS) if b is not None and not b.is_param and b.value is not None \
                else None
            cls = dotted(made.func) if isinstance(made, ast.Call) else None
            if cls and cls.rsplit(".", 1)[-1][:1].isupper():
                found = self._lookup(sem, f"{cls}.{call.func.attr}", "function")
            elif cls:  # ``s2s = build_transformer(args, device)``, a builder of the project returning ``S2S(...)``
                found = self._lookup(sem, cls, f"made_method:{call.func.attr}")
        return found  # type: ignore[return-value]

    def _lookup(self, sem: SemanticModel, written: str, what: str) -> object | None:
        key = (self.state.absolute(sem.path), written, what)
        memo = self.state.lookups
        if key not in memo:
            memo[key] = self._find(sem.path, sem.names.from_imports, sem.names.imports, written, what, 0,
                                   sem.names.star)
        return memo[key]

    def _find(self, path: str, from_imports: dict, imports: dict, written: str, what: str, depth: int,
              star: list | None = None) -> object | None:
        if depth > 3:
            return None
        head, _, rest = written.partition(".")
        if head not in from_imports and head not in imports:
            for level, module in star or ():  # ``from models import *``
                target = self._module_file(path, level, module)
                if target is not None:
                    found = self._in_module(target, written, what, depth)
                    if found is not None:
                        return found
            return None
        if head in from_imports:
            level, module, name = from_imports[head]
            target = self._module_file(path, level, module)
            attr = name + ("." + rest if rest else "")
            sub = self._module_file(path, level, f"{module}.{name}" if module else name)  # `from . import models`
            if sub is not None and rest:
                target, attr = sub, rest
        elif head in imports:
            target, attr = self._split_module(path, imports[head], rest)
        else:
            return None
        if target is None or not attr:
            return None
        return self._in_module(target, attr, what, depth)

    def _in_module(self, target: str, attr: str, what: str, depth: int) -> object | None:
        if depth > 3:
            return None  # (as ``_find``: a class whose parts include itself, SCINet's tree, would recurse for ever)
        summary = self.summary(target)
        if summary is None:
            return None
        if what == "accelerated" and (attr in summary.classes or attr in summary.functions):
            made = getattr(summary.functions.get(attr), "returns", None) or ""
            if not summary.accelerated and made.startswith("object:"):  # ``def get_model(): return Wrapper()``:
                ctor = made[len("object:"):]  # the module of the class it makes
                return self._in_module(target, ctor, what, depth + 1) if ctor in summary.classes else \
                    self._find(target, summary.from_imports, summary.imports, ctor, what, depth + 1, summary.star)
            return summary if summary.accelerated else None  # the module that defines ``attr`` puts work on an
            # accelerator itself (a package's ``__init__`` that re-exports it: followed below)
        if what == "class" and attr in summary.classes:
            return summary.classes[attr]
        if what.startswith("step_calls:") and attr in summary.classes:
            cls = summary.classes[attr]
            return cls if what[len("step_calls:"):] in cls.step_calls else self._in_bases(target, summary, cls, what, depth)
        if what == "saving_class" and attr in summary.classes:  # a method of it saves with ``torch.save``
            return summary.classes[attr] if any(k.startswith(f"{attr}.") and "save" in f.effects
                                                for k, f in summary.functions.items()) else None
        if what == "class_module" and attr in summary.classes:
            return summary  # (the module that defines the class)
        if what == "module_class" and attr in summary.classes:
            cls = summary.classes[attr]
            return cls if cls.is_module else self._in_bases(target, summary, cls, what, depth)
        if what in ("stateless_class", "moved_class") and attr in summary.classes:
            # a class that holds nothing (moves itself), or whose every part, maybe in other modules, does
            cls = summary.classes[attr]
            if cls.stateless if what == "stateless_class" else not cls.is_module or cls.moves_self:
                return cls
            if not cls.is_module or not cls.parts:
                return None
            for part in cls.parts:
                found = self._in_module(target, part, what, depth + 1) if part in summary.classes else \
                    self._find(target, summary.from_imports, summary.imports, part, what, depth + 1, summary.star)
                if found is None:
                    return None
            return cls
        if what == "function" and attr in summary.functions:
            return summary.functions[attr]
        if what.startswith("made_method:") and attr in summary.functions:
            ctor = summary.functions[attr].made  # (``transformer.S2S``: every return makes one, maybe moved)
            if not ctor:
                return None
            method = f"{ctor}.{what[len('made_method:'):]}"
            return self._in_module(target, method, "function", depth + 1) if ctor in summary.classes else \
                self._find(target, summary.from_imports, summary.imports, method, "function", depth + 1, summary.star)
        if what == "library_object" and attr in summary.functions:
            made = summary.functions[attr].made
            if not made:
                return None
            head, _, rest = made.partition(".")
            if rest and head in summary.imports:  # ``pt.Model(...)`` of ``import poutyne as pt``
                module, name = summary.imports[head], rest
            elif not rest and head in summary.from_imports and summary.from_imports[head][0] == 0:
                module, name = summary.from_imports[head][1], summary.from_imports[head][2]  # ``from skorch import X``
            else:
                return None
            return f"{module}.{name}" if self._module_file(target, 0, module) is None else None
        if what == "cuda_setting" and attr in summary.cuda_names:
            return summary
        if what == "data_parallel_class" and attr in summary.classes:  # a subclass of torch's DataParallel, maybe
            cls = summary.classes[attr]  # (through classes of other modules: ``BalancedDataParallel``)
            if any(_names_torch_data_parallel(summary, base) for base in cls.bases):
                return cls
            return self._in_bases(target, summary, cls, what, depth)
        if what == "external" and attr in summary.from_imports:  # ``from torch.utils.data import DataLoader`` there
            level, module, name = summary.from_imports[attr]
            if level == 0 and self._module_file(target, 0, module) is None:
                return f"{module}.{name}"
        return self._find(target, summary.from_imports, summary.imports, attr, what, depth + 1, summary.star)  # a re-export

    def _in_bases(self, target: str, summary: ModuleSummary, cls: object, what: str, depth: int) -> object | None:
        """The first answer to ``what`` about a base of ``cls`` (a class of module ``target``), wherever it is defined."""
        for base in cls.bases:  # type: ignore[attr-defined]
            found = self._in_module(target, base, what, depth + 1) if base in summary.classes else \
                self._find(target, summary.from_imports, summary.imports, base, what, depth + 1, summary.star)
            if found is not None:
                return found
        return None

    def _split_module(self, path: str, module: str, rest: str) -> tuple[str | None, str]:
        """``import a.b as x`` + ``x.c.f``: the longest prefix that is a module file, and what is left."""
        parts = module.split(".") + (rest.split(".") if rest else [])
        for n in range(len(parts) - 1, 0, -1):
            found = self._module_file(path, 0, ".".join(parts[:n]))
            if found is not None:
                return found, ".".join(parts[n:])
        return None, ""

    # ---- modules on disk ---------------------------------------------------------------------------------------
    def _module_file(self, path: str, level: int, module: str) -> str | None:
        extra = self._sys_path(path) if level == 0 else ()
        key = (os.path.dirname(self.state.absolute(path)), level, module, extra)
        memo = self.state.modules
        if key in memo:
            return memo[key]
        parts = [p for p in module.split(".") if p]
        found = None
        if level > 0:
            base = key[0]
            for _ in range(level - 1):
                base = os.path.dirname(base)
            found = file_of(base, parts, self.state.is_file)
        elif parts:
            for base in [*self._roots(key[0]), *extra]:
                found = file_of(base, parts, self.state.is_file)
                if found is not None:
                    break
            if found is None and parts[0] == os.path.basename(self.root) \
                    and self.state.is_file(os.path.join(self.root, "__init__.py")):
                found = file_of(os.path.dirname(self.root), parts, self.state.is_file)  # ``from pseudoESM.trainer
                # import Trainer`` in the package ``pseudoESM`` that is the project itself
        memo[key] = found
        return found

    def _sys_path(self, path: str) -> tuple[str, ...]:
        """The folders the module itself puts on ``sys.path`` (``ROOT_DIR = os.path.dirname(BASE_DIR)``, then
        ``sys.path.append(os.path.join(ROOT_DIR, "pointnet2"))``): ``from pointnet2_modules import ...`` finds them."""
        memo = self.state.sys_paths
        here = self.state.absolute(path)
        if here not in memo:
            text = self.state.text(here) or ""
            memo[here] = _appended_folders(text, os.path.dirname(here)) if "sys.path" in text else ()
        return memo[here]

    def _roots(self, directory: str) -> list[str]:
        """Where ``import x`` may find a project module: the file's folder, each package folder above it
        (up to the project root), and the root."""
        roots = [directory]
        cur = directory
        while cur.startswith(self.root) and cur != self.root:
            cur = os.path.dirname(cur)
            roots.append(cur)
        if self.root not in roots:
            roots.append(self.root)
        return roots + [p for p in _init_paths(directory) if p not in roots]

    def imports_gpu_only_module(self, sem: SemanticModel) -> bool:
        """A module of the project that ``sem`` imports, or one it imports in turn (six imports deep at most: a
        diffusion GAN's sampler imports its network, whose blocks import the op that compiles ``.cu`` sources on
        import), needs a GPU-only library or the project's own CUDA kernels (``import gnn_reranking``, which imports
        the kernels ``setup.py`` builds): so does ``sem``. Each module is read once."""
        seen = {self.state.absolute(sem.path)}
        if "(" in sem.text.source and self._calls_kernel_builder(sem.path, kernel_calls(sem)):
            return True
        frontier = [(sem.path, sem.names.imports, sem.names.from_imports, optional_imports(sem), sem.names.star)]
        for _ in range(6):  # (``train.py`` imports ``op``, whose ``__init__`` imports the module that builds kernels)
            following = []
            for here, imports, from_imports, optional, star in frontier:
                targets = [(0, q) for name, q in imports.items() if name not in optional]
                targets += list(star)  # (``from .functions import *`` runs the module that compiles on import)
                targets += [(level, module) for name, (level, module, _) in from_imports.items() if name not in optional]
                targets += [(level, f"{module}.{imported}" if module else imported)
                            for name, (level, module, imported) in from_imports.items() if name not in optional]
                for level, module in targets:
                    path = self._module_file(here, level, module) if module or level else None
                    if path is None or self.state.absolute(path) in seen:
                        continue
                    seen.add(self.state.absolute(path))
                    summary = self.summary(path)
                    if summary is not None and (summary.gpu_only or self._calls_kernel_builder(path, summary.kernel_calls)):
                        return True
                    if summary is not None:
                        following.append((path, summary.imports, summary.from_imports, summary.optional_imports,
                                          summary.star))
            frontier = following
        return False

    def _calls_kernel_builder(self, path: str, calls: tuple[tuple[int, str, str], ...]) -> bool:
        """The module at ``path`` calls, when imported, a function of another module that compiles a CUDA kernel
        (``anti_alias = load.load()``, whose ``load`` builds ``.cu`` sources with ``cpp_extension.load``)."""
        for level, module, name in calls:
            target = self._module_file(path, level, module)
            other = self.summary(target) if target is not None else None
            if other is not None and name in other.kernel_builders:
                return True
        return False

    def summary(self, path: str) -> ModuleSummary | None:
        memo = self.state.summaries
        if path not in memo:
            memo[path] = None  # a module importing itself back, meanwhile, gets nothing
            from torchdoctor.check.semantic.summary import summarize

            sem = self._model(path)
            memo[path] = summarize(sem) if sem is not None else None
            self._done_with(path, sem)
        return memo[path]

    def _done_with(self, path: str, sem: SemanticModel | None) -> None:
        """Free a model read for the index at once (SemanticModel.release), unless a check is using it."""
        if sem is None or self.state.current.get(path) is sem:
            return
        kept = self.state.pending.get(path)
        sem.release(keep_syntax=kept is not None and kept[2] is sem.index)

    def _model(self, path: str) -> SemanticModel | None:
        current = self.state.current.get(path)
        if current is not None:
            return current
        state = self.state
        if state.parsed >= MAX_MODULES:
            return None
        text = state.text(path)
        if text is None:
            return None  # (a module without torch still counts: a package __init__ re-exports)
        from torchdoctor.check.engine import parse

        try:
            tree = parse(text, path)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        state.parsed += 1
        # A module read for the index resolves its own imports no further: one level, no cascades.
        sem = SemanticModel(tree, text, path, None)
        if path in self._checked and path not in state.finished and len(state.pending) < MAX_PENDING:
            state.pending[path] = (text, tree, sem.index, sem.names, sem.bindings)
        return sem


def _names_torch_data_parallel(summary: ModuleSummary, base: str) -> bool:
    """``base``, written in the module ``summary`` describes, is torch's ``DataParallel``."""
    head, _, rest = base.partition(".")
    if base.rsplit(".", 1)[-1] != "DataParallel":
        return False
    if not rest:
        origin = summary.from_imports.get(head)
        return origin is not None and origin[0] == 0 and origin[1].split(".")[0] == "torch"
    if head in summary.from_imports:  # ``from torch import nn``
        return summary.from_imports[head][1].split(".")[0] == "torch"
    return summary.imports.get(head, head).split(".")[0] == "torch"  # ``nn.DataParallel``, ``torch.nn.DataParallel``


_HERE = lazy(r"""(?m)^\s*(\w+)\s*=\s*(?:os\.path|osp)\.dirname\(\s*(?:os\.path|osp)\.(?:abspath|realpath)\(\s*__file__\s*\)\s*\)""")
_UP = lazy(r"""(?m)^\s*(\w+)\s*=\s*(?:os\.path|osp)\.dirname\(\s*(\w+)\s*\)""")
_APPENDED = lazy(r"""sys\.path\.(?:append|insert)\(\s*(?:\d+\s*,\s*)?(?:(?:os\.path|osp)\.join\(\s*(\w+)\s*((?:,\s*['"][^'"]+['"]\s*)+)\)|(\w+))\s*\)""")


def _appended_folders(text: str, directory: str) -> tuple[str, ...]:
    """``BASE_DIR = os.path.dirname(os.path.abspath(__file__))``, ``ROOT_DIR = os.path.dirname(BASE_DIR)``,
    ``sys.path.append(os.path.join(ROOT_DIR, "utils"))``: the folders, when they exist."""
    names = {m.group(1): directory for m in _HERE.finditer(text)}
    for m in _UP.finditer(text):
        if m.group(2) in names:
            names[m.group(1)] = os.path.dirname(names[m.group(2)])
    out = []
    for m in _APPENDED.finditer(text):
        base = names.get(m.group(1) or m.group(3) or "")
        if base is None:
            continue
        parts = [p.strip().strip("'\"") for p in (m.group(2) or "").split(",") if p.strip()]
        folder = os.path.normpath(os.path.join(base, *parts))
        if folder not in out and os.path.isdir(folder):
            out.append(folder)
    for m in _APPENDED_LITERAL.finditer(text):  # ``sys.path.append('core')``: run from the script's folder
        folder = os.path.normpath(os.path.join(directory, m.group(1)))
        if folder not in out and not os.path.isabs(m.group(1)) and os.path.isdir(folder):
            out.append(folder)
    return tuple(out)


_APPENDED_LITERAL = lazy(r"""sys\.path\.(?:append|insert)\(\s*(?:\d+\s*,\s*)?['"]([\w./-]+)['"]\s*\)""")


_JOINED = lazy(r"""join\(\s*(?:this_dir|osp\.dirname\(__file__\)|os\.path\.dirname\(__file__\))\s*((?:,\s*['"][^'"]+['"]\s*)+)\)""")


@functools.lru_cache(maxsize=256)
def _init_paths(directory: str) -> tuple[str, ...]:
    """The folders a script's ``_init_paths.py`` puts on ``sys.path`` (``lib_path = osp.join(this_dir, '..', 'lib');
    add_path(lib_path)``, the convention of HRNet and its kin): ``import core.function`` finds ``lib/core/function.py``."""
    path = os.path.join(directory, "_init_paths.py")
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read(20000)
    except OSError:
        return ()
    if "sys.path" not in text:
        return ()
    out = []
    for m in _JOINED.finditer(text):
        parts = [p.strip().strip("'\"") for p in m.group(1).split(",") if p.strip()]
        folder = os.path.normpath(os.path.join(directory, *parts))
        if os.path.isdir(folder):
            out.append(folder)
    return tuple(out)
