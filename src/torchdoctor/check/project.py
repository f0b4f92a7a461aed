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
import itertools
import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from torchdoctor.check.astutil import dotted
from torchdoctor.check.patterns import lazy
from torchdoctor.check.project_files import State, file_of, guess_root, import_statements
from torchdoctor.check.semantic import SemanticModel, program

if TYPE_CHECKING:  # summary.py is imported when a first module is summarised: a lone script never needs it
    from torchdoctor.check.semantic.summary import CallRecord, FunctionSummary, ModuleSummary

__all__ = ["Project"]

MAX_MODULES = 400  # summaries read per process
MAX_NEAR = 200  # .py files looked at for reverse questions in a single-file run
MAX_PENDING = 8  # parsed modules kept for their own check, at most (each holds a tree: 64 cost +29 MB peak on 620 files)
_RUNS = itertools.count()
_WORKER_STATES: dict[str, State] = {}  # in a worker process: each run's caches, shared by the runs of files it checks


class Project:
    """``files``: the paths checked together; ``root``: where absolute imports of the project start."""

    def __init__(self, files: Sequence[str], root: str | None = None) -> None:
        self.files = [os.path.abspath(f) for f in files if f.endswith(".py")]
        root = os.path.abspath(root) if root else None
        inside = root is not None and all(f.startswith(root + os.sep) for f in self.files)
        self.root = root if inside else guess_root(self.files)  # type: ignore[assignment]
        self._state: State | None = None
        self._checked = frozenset(self.files)
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
        self.state.current[os.path.abspath(sem.path)] = sem

    def end(self, sem: SemanticModel) -> None:
        path = os.path.abspath(sem.path)
        self.state.current.pop(path, None)
        if path not in self.state.records:  # what a reverse question asks first, without parsing it again
            self.state.imports_of[path] = (dict(sem.names.from_imports), dict(sem.names.imports))

    def take(self, path: str, text: str) -> tuple | None:
        """The tree and syntax-only parts of the semantic model the index already built for ``path``
        (``(tree, index, names, bindings)``), when it read the same text; else None."""
        if self._state is None:
            return None
        kept = self._state.pending.pop(os.path.abspath(path), None)
        if kept is None or kept[0] != text:
            return None
        return kept[1:]

    def waiting(self) -> list[str]:
        """The checked files (absolute paths) whose tree the index read for another file's questions and
        keeps for their own check, oldest first: checking them next parses no file twice."""
        return list(self._state.pending) if self._state is not None else []

    def forget_kept(self) -> None:
        """Drop the trees kept for files that are not checked here (in a worker: another worker's)."""
        if self._state is not None:
            self._state.pending.clear()

    def finished(self, path: str) -> None:
        """``path`` has had its own check: a later read of it for the index keeps no tree for it."""
        state = self.state
        path = os.path.abspath(path)
        state.finished.add(path)
        state.pending.pop(path, None)

    # ---- forward questions (what does that name, imported here, stand for?) ------------------------------
    def defines_class(self, sem: SemanticModel, written: str) -> bool:
        """``written`` (imported here, a star import included) is a class of another module of the project."""
        return self._lookup(sem, written, "class") is not None

    def is_module_class(self, sem: SemanticModel, written: str) -> bool | None:
        cls = self._lookup(sem, written, "class")
        return None if cls is None else cls.is_module  # type: ignore[attr-defined]

    def inherits_module(self, sem: SemanticModel, written: str) -> bool:
        """The class ``written`` (imported here) is an ``nn.Module``, through base classes of other modules too
        (``MiniGPT4(MiniGPTBase)``, ``MiniGPTBase(BaseModel)``, ``BaseModel(nn.Module)``)."""
        return self._lookup(sem, written, "module_class") is not None

    def calls_every_step(self, sem: SemanticModel, written: str, method: str) -> bool:
        """The class ``written`` (imported here) calls ``self.<method>(...)`` on every step of a batch loop."""
        cls = self._lookup(sem, written, "class")
        return cls is not None and method in cls.step_calls  # type: ignore[attr-defined]

    def class_dropout_bn(self, sem: SemanticModel, written: str) -> bool | None:
        cls = self._lookup(sem, written, "class")
        return None if cls is None or not cls.is_module else cls.dropout_bn  # type: ignore[attr-defined]

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
        cls = self._lookup(sem, written, "class")
        return cls is not None and cls.is_module and cls.stateless  # type: ignore[attr-defined]

    def function_for(self, sem: SemanticModel, call: ast.Call) -> FunctionSummary | None:
        written = dotted(call.func)
        if written is None:
            return None
        found = self._lookup(sem, written, "function")
        if found is None:  # ``Trainer(...)`` runs ``Trainer.__init__``
            found = self._lookup(sem, written + ".__init__", "function")
        if found is None and isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name):
            # ``metric_logger.update(...)`` on ``metric_logger = utils.MetricLogger()``: the class's method
            b = sem.binding_at(call.func.value.id, call)
            cls = dotted(b.value.func) if b is not None and isinstance(b.value, ast.Call) and not b.is_param else None
            if cls and cls.rsplit(".", 1)[-1][:1].isupper():
                found = self._lookup(sem, f"{cls}.{call.func.attr}", "function")
        return found  # type: ignore[return-value]

    def _lookup(self, sem: SemanticModel, written: str, what: str) -> object | None:
        key = (os.path.abspath(sem.path), written, what)
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
        summary = self.summary(target)
        if summary is None:
            return None
        if what == "class" and attr in summary.classes:
            return summary.classes[attr]
        if what == "module_class" and attr in summary.classes:
            cls = summary.classes[attr]
            if cls.is_module:
                return cls
            for base in cls.bases:
                found = self._in_module(target, base, what, depth + 1) if base in summary.classes else \
                    self._find(target, summary.from_imports, summary.imports, base, what, depth + 1, summary.star)
                if found is not None:
                    return found
            return None
        if what == "moved_class" and attr in summary.classes:
            cls = summary.classes[attr]
            if not cls.is_module or cls.moves_self:
                return cls
            if not cls.parts:
                return None
            for part in cls.parts:
                found = self._in_module(target, part, what, depth + 1) if part in summary.classes else \
                    self._find(target, summary.from_imports, summary.imports, part, what, depth + 1, summary.star)
                if found is None:
                    return None
            return cls
        if what == "function" and attr in summary.functions:
            return summary.functions[attr]
        if what == "cuda_setting" and attr in summary.cuda_names:
            return summary
        return self._find(target, summary.from_imports, summary.imports, attr, what, depth + 1, summary.star)  # a re-export

    def _split_module(self, path: str, module: str, rest: str) -> tuple[str | None, str]:
        """``import a.b as x`` + ``x.c.f``: the longest prefix that is a module file, and what is left."""
        parts = module.split(".") + (rest.split(".") if rest else [])
        for n in range(len(parts) - 1, 0, -1):
            found = self._module_file(path, 0, ".".join(parts[:n]))
            if found is not None:
                return found, ".".join(parts[n:])
        return None, ""

    # ---- reverse questions (how do other modules call this function?) ------------------------------------
    def callers_effect(self, sem: SemanticModel, func: ast.AST, effect: str) -> bool:
        """Some caller in another module sets eval mode before calling ``func`` (``effect`` == "eval")."""
        return any(r.eval_before for r in self._callers(sem, func)) if effect == "eval" else False

    def callers_rank_guarded(self, sem: SemanticModel, func: ast.AST) -> bool:
        """``func`` is called from other modules, and every caller that runs on many ranks (a DDP
        program) calls it under a rank guard (an inference script calling it runs once)."""
        records = self._callers(sem, func)
        return bool(records) and all(r.rank_guarded or not r.ddp for r in records)

    def has_callers(self, sem: SemanticModel, func: ast.AST) -> bool:
        """Some other module of the project calls ``func``."""
        return bool(self._callers(sem, func))

    def uncalled_helper(self, sem: SemanticModel, func: ast.AST) -> bool:
        """``func``, a module-level function of ``sem``'s module, is a helper no run takes: other modules of the
        project import the module, which is no script itself (no ``if __name__ == "__main__":``), and none of them
        names ``func`` (``from utils.datasets import *; autosplit(...)`` would). The module itself does not
        either (asked before)."""
        here, name = os.path.abspath(sem.path), func.name  # type: ignore[attr-defined]
        key = (here, name, "uncalled")
        memo = self.state.mentions
        if key not in memo:
            pattern = re.compile(rf"\b{re.escape(name)}\b")
            importers = [] if "__main__" in sem.text.source or self._package_reexports(here, name) else \
                self._module_importers(here)
            memo[key] = bool(importers) and not any(pattern.search(self.state.text(path) or "") for path in importers)
        return memo[key]

    def _module_importers(self, here: str) -> list[str]:
        """The modules of the project whose import statements lead to the module ``here`` (memoised per module)."""
        memo = self.state.module_importers
        if here not in memo:
            stem = os.path.splitext(os.path.basename(here))[0]
            if stem == "__init__":
                stem = os.path.basename(os.path.dirname(here))
            memo[here] = [other for other in self._importing(here, {stem}) if self._imports_module(other, here)]
        return memo[here]

    def _imports_module(self, path: str, target: str) -> bool:
        """An import statement of ``path`` (read from its import lines, not its tree) names the module ``target``."""
        for line in import_statements(self.state.text(path) or ""):
            try:
                stmt = ast.parse(line.strip()).body[0]
            except (SyntaxError, ValueError, IndexError):
                continue
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

    def unguarded_ddp_caller(self, sem: SemanticModel, func: ast.AST) -> CallRecord | None:
        """A call of ``func`` from the epoch or batch loop of a DDP program in another module that runs on every
        rank (no rank guard)."""
        return next((r for r in self._callers(sem, func, ddp_only=True) if r.ddp and r.in_loop and not r.rank_guarded),
                    None)

    def callers_mention(self, sem: SemanticModel, func: ast.AST, pattern: re.Pattern[str]) -> bool:
        """Some module that calls ``func`` says ``pattern`` (``make_data_parallel(...)`` before ``train_epoch(model)``)."""
        state = self.state
        key = (os.path.abspath(sem.path), func.name, pattern.pattern)  # type: ignore[attr-defined]
        if key not in state.mentions:  # (texts are read afresh, not kept: once per question)
            state.mentions[key] = any(pattern.search(state.text(path) or "")
                                      for path in {r.path for r in self._callers(sem, func)})
        return state.mentions[key]

    def callers_grad_mode(self, sem: SemanticModel, func: ast.AST) -> str | None:
        modes = {r.grad_mode for r in self._callers(sem, func)}
        return modes.pop() if len(modes) == 1 else None

    def step_callers(self, sem: SemanticModel, func: ast.AST) -> list[CallRecord]:
        """The calls of ``func`` from other modules that run on every step of their batch loop, on an accelerator,
        in the order the modules were read."""
        return [r for r in self._callers(sem, func) if r.per_step]

    def passes_accelerator(self, sem: SemanticModel, func: ast.AST, param: str) -> bool:
        """A caller in another module passes an accelerator device for ``param`` of ``func``."""
        params = [a.arg for a in func.args.posonlyargs + func.args.args]  # type: ignore[attr-defined]
        slot = f"#{params.index(param)}" if param in params else None
        return any(param in r.accelerator_args or (slot is not None and slot in r.accelerator_args)
                   for r in self._callers(sem, func))

    def _callers(self, sem: SemanticModel, func: ast.AST, ddp_only: bool = False) -> list[CallRecord]:
        """The calls of ``func`` in other modules; ``ddp_only``: only those of modules whose text names a process
        group (the others are not read: a question about DDP callers parses no single-process script)."""
        name = func.name  # type: ignore[attr-defined]
        cls = sem.class_of(func)
        if name == "__init__" and cls is not None:
            name = cls.name  # ``Trainer(model, device=device)`` calls ``Trainer.__init__``
        here = os.path.abspath(sem.path)
        key = (here, name)
        memo = self.state.callers
        if key in memo:
            return memo[key]
        if ddp_only and (here, name, "ddp") in memo:
            return memo[(here, name, "ddp")]
        stem = os.path.splitext(os.path.basename(here))[0]
        package = os.path.basename(os.path.dirname(here))
        if stem == "__init__":
            stem = package
        # A DDP caller may import a save helper through its package (``from pkg import save``); for the other
        # questions the module's own name is enough (reading every importer of a package cost ~40 parses on 620 files).
        words = {stem, package} if ddp_only and self._package_reexports(here, name) else {stem}
        pattern = re.compile(rf"\b{re.escape(name)}\b")
        out: list[CallRecord] = []
        for other in self._importing(here, words):
            if package in words and stem not in self.state.import_words(other) and \
                    name not in self.state.import_words(other):
                continue  # (imports the package, but not this function from it)
            text = self.state.text(other)
            if not text or name not in text or not pattern.search(text):  # (the substring test: 10x cheaper)
                continue
            if ddp_only and not program.names_process_group(text):
                continue
            known = self.state.imports_of.get(other)  # checked already: its imports say if it can call ``func``
            if known is not None and other not in self.state.records and \
                    not any(self._imports_function(other, known, head, here, name) for head in (*known[0], *known[1])):
                continue
            names, records = self._records(other)
            for head, found in records.items():
                if self._imports_function(other, names, head, here, name):
                    out += [r for r in found if r.written.rsplit(".", 1)[-1] == name or r.written == head]
        memo[(here, name, "ddp") if ddp_only else key] = out
        return out

    def _package_reexports(self, here: str, name: str) -> bool:
        """``pkg/__init__.py`` imports ``name`` from ``here`` (``from .handler import save``): importers may
        write ``from pkg import save``, naming the package, not the module."""
        init = os.path.join(os.path.dirname(here), "__init__.py")
        if init == here or not os.path.isfile(init):
            return False
        summary = self.summary(init)
        return summary is not None and (name in summary.from_imports or bool(summary.star))

    def _records(self, path: str) -> tuple[tuple[dict, dict], dict[str, list[CallRecord]]]:
        """A module's imports, and its calls of imported names grouped by the local name they start with."""
        memo = self.state.records
        if path not in memo:
            grouped: dict[str, list[CallRecord]] = {}
            names: tuple[dict, dict] = ({}, {})
            sem = self._model(path)
            if sem is not None:
                from torchdoctor.check.semantic.summary import call_records

                names = (dict(sem.names.from_imports), dict(sem.names.imports))
                heads = {h for h in set(sem.names.from_imports) | set(sem.names.modules) | set(sem.names.imports)
                         if self._from_project(path, sem.names, h)}  # (``torch.cat`` leads to no project function)
                accelerated = program.runs_on_accelerator(sem) or program.config_module_device(sem, self)
                for r in call_records(sem, heads, accelerated):
                    grouped.setdefault(r.written.split(".")[0], []).append(r)
                self._done_with(path, sem)
            memo[path] = (names, grouped)
        return memo[path]

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
            return self._module_file(path, level, f"{module}.{imported}" if module else imported) == target
        if head in imports:
            return self._module_file(path, 0, imports[head]) == target
        return False

    def accelerated_importer(self, sem: SemanticModel, maker: str | None = None) -> str | None:
        """A module of the project that imports this one (directly or through its package) and runs on an
        accelerator itself: where the batches of a loader made here go (``data/alpaca.py`` for ``finetune.py``).
        ``maker``: the function or class that builds the loader; a ``from m import Model`` that leaves it
        behind does not count."""
        here = os.path.abspath(sem.path)
        memo = self.state.importers
        key = (here, maker)
        if key not in memo:
            memo[key] = None
            stem = os.path.splitext(os.path.basename(here))[0]
            targets, words = {here}, {stem}
            init = os.path.join(os.path.dirname(here), "__init__.py")
            if init != here and os.path.isfile(init) and stem in self.state.import_words(init):
                targets.add(init)  # ``from litgpt.data import Alpaca`` through ``data/__init__.py``
                words.add(os.path.basename(os.path.dirname(here)))
            for other in self._importing(here, words):
                if other in targets:
                    continue
                summary = self.summary(other)
                if summary is not None and summary.accelerated and self._imports_any(other, summary, targets, maker):
                    memo[key] = other
                    break
        return memo[key]

    def _imports_any(self, path: str, summary: ModuleSummary, targets: set[str], maker: str | None = None) -> bool:
        for level, module, name in summary.from_imports.values():
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
        candidates = self._candidates(here)
        if len(self.files) <= 1:
            return [f for f in candidates if not words.isdisjoint(self.state.import_words(f))]
        index = self.state.by_word
        if index is None:  # every checked file's import words, once per run: a question is then a lookup
            index = self.state.by_word = {}
            for n, f in enumerate(self.files):
                for w in self.state.import_words(f):
                    index.setdefault(w, []).append(n)
        hits = sorted({n for w in words for n in index.get(w, ())})
        return [self.files[n] for n in hits if self.files[n] != here]

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
            for path in self._candidates(os.path.abspath(sem.path)) + [os.path.abspath(sem.path)]:
                text = state.text(path)
                if not text:
                    continue
                if "torch.save(" in text and _pickles_objects(text):
                    found = True
                    break
                # torch.save(*args, **kwargs) in a save helper, and somewhere the dict handed to it holds a config
                # object under its own name (mae: save_on_master(to_save, path), to_save = {..., 'args': args})
                helper = helper or _SAVE_HELPER.search(text) is not None
                entry = entry or _OBJECT_ENTRY.search(text) is not None
                if helper and entry:
                    found = True
                    break
            state.saves_objects = found
        return state.saves_objects

    def selects_wrapped_keys(self, sem: SemanticModel) -> bool:
        """A module beside ``sem`` (its folder: the pretraining script's linear evaluation, as in moco and simsiam)
        picks a checkpoint's keys by the DDP prefix (``k.startswith("module.encoder")``): the prefix is the format
        the program's own readers expect (a text scan of the folder's files, once per folder). The reader's own saves
        are not its business (vicreg's evaluate.py reads main_vicreg.py's checkpoint by the prefix and saves its own
        wrapped classifier, which only its resume reads)."""
        here = os.path.abspath(sem.path)
        folder = os.path.dirname(here)
        memo = self.state.wrapped_keys
        if folder not in memo:
            memo[folder] = {os.path.abspath(path) for path in self._candidates(here) + [here]
                            if os.path.dirname(os.path.abspath(path)) == folder and (text := self.state.text(path))
                            and SELECTS_WRAPPED.search(text)}
        return bool(memo[folder] - {here})

    # ---- modules on disk ---------------------------------------------------------------------------------------
    def _module_file(self, path: str, level: int, module: str) -> str | None:
        key = (os.path.dirname(os.path.abspath(path)), level, module)
        memo = self.state.modules
        if key in memo:
            return memo[key]
        parts = [p for p in module.split(".") if p]
        found = None
        if level > 0:
            base = key[0]
            for _ in range(level - 1):
                base = os.path.dirname(base)
            found = file_of(base, parts)
        elif parts:
            for base in self._roots(key[0]):
                found = file_of(base, parts)
                if found is not None:
                    break
        memo[key] = found
        return found

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
        return roots

    def imports_gpu_only_module(self, sem: SemanticModel) -> bool:
        """A module of the project that ``sem`` imports, or one it imports in turn (three imports deep at most), needs
        a GPU-only library or the project's own CUDA kernels (``import gnn_reranking``, which imports the kernels
        ``setup.py`` builds): so does ``sem``."""
        seen = {os.path.abspath(sem.path)}
        frontier = [(sem.path, sem.names.imports, sem.names.from_imports)]
        for _ in range(3):  # (``train.py`` imports ``op``, whose ``__init__`` imports the module that builds kernels)
            following = []
            for here, imports, from_imports in frontier:
                targets = [(0, q) for q in imports.values()] + [(level, module) for level, module, _ in from_imports.values()]
                for level, module in targets:
                    path = self._module_file(here, level, module) if module or level else None
                    if path is None or os.path.abspath(path) in seen:
                        continue
                    seen.add(os.path.abspath(path))
                    summary = self.summary(path)
                    if summary is not None and summary.gpu_only:
                        return True
                    if summary is not None:
                        following.append((path, summary.imports, summary.from_imports))
            frontier = following
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


_MODELISH = lazy(r"^(model|net|network|module|\w*_model|model_\w*|\w*_net|\w*Model|\w*Net)$")
_OBJECT_VALUE = lazy(r"[:=]\s*(self\.)?(args|opt|opts|config|cfg|hparams|hyperparameters|model|net)\b\s*[,})]")
# a dict entry holding such an object under its own name ('args': args), built apart from the save and handed to a
# helper that calls torch.save (mae's save_model: to_save = {..., 'args': args}; save_on_master(to_save, path))
_SAVE_HELPER = lazy(r"torch\.save\(\s*\*")
# a reader that picks a checkpoint's keys by the DDP prefix: ``k.startswith("module.encoder")``
SELECTS_WRAPPED = lazy(r"""(startswith|replace)\(\s*(f?["'])module\.\w""")  # picks (or renames) ``module.encoder.*``
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
