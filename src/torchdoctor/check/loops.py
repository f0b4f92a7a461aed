"""Loops of a training program: batch loops, training, evaluation and epoch loops, and what they bind."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from torchdoctor.check.astutil import (
    COMP_TYPES,
    FUNC_TYPES,
    LOOP_TYPES,
    body_nodes,
    dotted,
    method_name,
    names_in,
    target_names,
    walk_local,
)

if TYPE_CHECKING:
    from torchdoctor.check.facts import Facts

_WRAPPER_CALLS = {"enumerate", "tqdm", "trange", "iter", "zip", "islice", "track", "progress", "progress_bar",
                  "prefetch", "DeviceLoader", "cycle", "chain"}
_LOADERISH = re.compile(r"(?i)(loader|\bdl\b|_dl\b|dataloader|batches|batch_iter|data_iter)")
_EVALISH = re.compile(r"(?i)(val|valid|test|eval|dev\b|holdout)")
_EVAL_FUNC = re.compile(r"(?i)(eval|valid|test|predict|infer|score)")
_NOT_BATCH_NAMES = {"_", "i", "idx", "step", "batch_idx", "batch_i", "it", "iteration", "n", "k", "j"}


@dataclass
class LoopInfo:
    node: ast.AST
    is_batch: bool = False  # iterates batches of data
    loader: ast.AST | None = None  # the iterated loader expression, unwrapped
    batch_vars: list[str] = field(default_factory=list)  # names bound to batch data (target + unpacking)
    index_var: str | None = None  # enumerate's counter
    has_backward: bool = False  # backward() anywhere in its body (nested loops included, same function)
    kind: str | None = None  # "train" | "eval" | "epoch" | None


def unwrap_iter(node: ast.AST) -> tuple[list[ast.AST], bool]:
    """The iterables under enumerate/tqdm/zip wrappers, and whether an enumerate counter comes first."""
    counter = False
    while isinstance(node, ast.Call) and node.args:
        name = (dotted(node.func) or "").rsplit(".", 1)[-1]
        if name not in _WRAPPER_CALLS:
            break
        if name == "enumerate":
            counter = True
        if name in ("zip", "chain"):
            return list(node.args), counter
        node = node.args[0]
    return [node], counter


class Loops:
    """Classifies every loop of the file once."""

    def __init__(self, facts: Facts) -> None:
        self.facts = facts
        self.info: dict[int, LoopInfo] = {}
        loops = [n for n in ast.walk(facts.ctx.tree) if isinstance(n, LOOP_TYPES)]
        loops.sort(key=lambda n: (n.lineno, n.col_offset))
        self.order = loops
        for loop in loops:
            self.info[id(loop)] = self._describe(loop)
        for loop in loops:
            self._classify_train(loop)
        # Comprehensions over a loader (``sum(f(model(x)) for x, y in val_loader)``) are batch loops too.
        comps = [n for n in facts.nodes if isinstance(n, COMP_TYPES)]
        comps.sort(key=lambda n: (n.lineno, n.col_offset))
        for comp in comps:
            self.info[id(comp)] = self._describe_comp(comp)
        for loop in loops:
            self._classify_eval(loop)
        for comp in comps:
            if self.info[id(comp)].is_batch:
                self._classify_comp(comp)
        for loop in loops:
            self._classify_epoch(loop)

    # ---- description -----------------------------------------------------------
    def _describe(self, loop: ast.AST) -> LoopInfo:
        info = LoopInfo(loop)
        info.has_backward = any(self.facts.is_backward_call(n) for n in body_nodes(loop))
        if isinstance(loop, ast.While):
            self._describe_while(info)
        else:
            self._describe_for(info)
        if info.is_batch:
            info.batch_vars += self._derived_batch_vars(loop, info.batch_vars)
        return info

    def _describe_for(self, info: LoopInfo) -> None:
        loop = info.node
        iters, counter = unwrap_iter(loop.iter)  # type: ignore[attr-defined]
        loaders = [it for it in iters if self._is_loader(it, loop)]
        if not loaders:
            return
        info.is_batch = True
        info.loader = loaders[0]
        target = loop.target  # type: ignore[attr-defined]
        if counter and isinstance(target, ast.Tuple) and len(target.elts) == 2:
            info.index_var = target.elts[0].id if isinstance(target.elts[0], ast.Name) else None
            target = target.elts[1]
        info.batch_vars = [n for n in target_names(target) if n not in _NOT_BATCH_NAMES]

    def _describe_comp(self, comp: ast.AST) -> LoopInfo:
        info = LoopInfo(comp)
        gen = comp.generators[0]  # type: ignore[attr-defined]
        iters, counter = unwrap_iter(gen.iter)
        loaders = [it for it in iters if self._is_loader(it, comp)]
        if not loaders:
            return info
        info.is_batch, info.loader = True, loaders[0]
        info.has_backward = any(self.facts.is_backward_call(n) for n in body_nodes(comp))
        target = gen.target
        if counter and isinstance(target, ast.Tuple) and len(target.elts) == 2:
            info.index_var = target.elts[0].id if isinstance(target.elts[0], ast.Name) else None
            target = target.elts[1]
        info.batch_vars = [n for n in target_names(target) if n not in _NOT_BATCH_NAMES]
        return info

    def _classify_comp(self, comp: ast.AST) -> None:
        """Train when its result is backpropagated, else evaluation by the same signs as a loop."""
        info = self.info[id(comp)]
        if info.has_backward or self._feeds_backward(comp):
            info.kind = "train"
        else:
            self._classify_eval(comp)

    def _feeds_backward(self, comp: ast.AST) -> bool:
        """``loss = sum(crit(model(x), y) for ...)`` followed by ``loss.backward()`` (through assignments)."""
        stmt = next((a for a in self.facts.ancestors(comp) if isinstance(a, ast.stmt)), None)
        if stmt is None:
            return False
        if not hasattr(stmt, "body") and any(self.facts.is_backward_call(n) for n in walk_local([stmt])):
            return True
        scope = self.facts.scope_of(comp)
        tainted = {n for t in getattr(stmt, "targets", [getattr(stmt, "target", None)]) if t is not None
                   for n in target_names(t)}
        for node in walk_local(getattr(scope, "body", [])):
            if not tainted or (getattr(node, "lineno", 0), getattr(node, "col_offset", 0)) <= (stmt.lineno, stmt.col_offset):
                continue
            if isinstance(node, (ast.Assign, ast.AugAssign)) and names_in(node.value) & tainted:
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                    tainted.update(target_names(t))
            elif self.facts.is_backward_call(node) and names_in(node) & tainted:
                return True
        return False

    def _describe_while(self, info: LoopInfo) -> None:
        # ``while True: x, y = get_batch("train")`` / ``batch = next(it)``.
        for node in body_nodes(info.node):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                name = (dotted(node.value.func) or "").rsplit(".", 1)[-1]
                if name == "next" or "batch" in name.lower():
                    info.is_batch = True
                    for t in node.targets:
                        info.batch_vars += [n for n in target_names(t) if n not in _NOT_BATCH_NAMES]

    def _is_loader(self, it: ast.AST, loop: ast.AST) -> bool:
        if isinstance(it, (ast.List, ast.Tuple, ast.Set)) and all(isinstance(e, ast.Constant) for e in it.elts):
            return False  # ``for phase in ["train", "val"]``: phases, not batches
        key = dotted(it)
        if key and self.facts.kind_of(key, loop) == "loader":
            return True
        if isinstance(it, ast.Subscript):  # dataloaders[phase]
            it = it.value
        text = self.facts.ctx.segment(it)
        if isinstance(it, (ast.Name, ast.Attribute, ast.Call)) and _LOADERISH.search(text):
            return not isinstance(it, ast.Call) or method_name(it) not in ("items", "keys", "values")
        # ``for x, y in val_data:`` counts when the body runs a model on it.
        return bool(_EVALISH.search(text)) and self._calls_model(loop)

    def _calls_model(self, loop: ast.AST) -> bool:
        return any(isinstance(n, ast.Call) and self.facts.is_model_call(n) for n in body_nodes(loop))

    def _derived_batch_vars(self, loop: ast.AST, roots: list[str]) -> list[str]:
        """Names unpacked from batch values in the body: ``x, y = batch``, ``ids = batch["input_ids"]``."""
        known = set(roots)
        out: list[str] = []
        for node in body_nodes(loop):
            if isinstance(node, ast.Assign) and _reads_only_batch(node.value, known):
                for t in node.targets:
                    for name in target_names(t):
                        if name not in known and name not in _NOT_BATCH_NAMES:
                            known.add(name)
                            out.append(name)
        return out

    # ---- classification --------------------------------------------------------------
    def _classify_train(self, loop: ast.AST) -> None:
        """A training loop is the innermost batch loop around a backward() (else the innermost loop)."""
        for node in body_nodes(loop):
            if not self.facts.is_backward_call(node):
                continue
            chain = [a for a in self.facts.ancestors(node) if isinstance(a, LOOP_TYPES)]
            chain = self._same_function(node, chain)
            if loop not in chain:
                continue
            target = next((c for c in chain if self.info[id(c)].is_batch), chain[0])
            if target is loop:
                self.info[id(loop)].kind = "train"
                return

    def _same_function(self, node: ast.AST, chain: list[ast.AST]) -> list[ast.AST]:
        scope = self.facts.scope_of(node)
        return [c for c in chain if self.facts.scope_of(c) is scope]

    def _classify_eval(self, loop: ast.AST) -> None:
        info = self.info[id(loop)]
        if not info.is_batch or info.has_backward or info.kind:
            return
        if any(self.info[id(a)].kind == "train" for a in self.facts.ancestors(loop) if isinstance(a, LOOP_TYPES)):
            return  # teacher/EMA forwards inside training are not evaluation
        func = self.facts.function_of(loop)
        text = self.facts.ctx.segment(info.loader) if info.loader is not None else ""
        if _EVALISH.search(text) or (func is not None and _EVAL_FUNC.search(func.name)):
            info.kind = "eval"
        elif self._after_eval_call(loop) or self.facts.under_no_grad(loop):
            info.kind = "eval"

    def _after_eval_call(self, loop: ast.AST) -> bool:
        """A ``.eval()`` call earlier in the same function (and no ``.train()`` after it)."""
        scope = self.facts.scope_of(loop)
        here = (loop.lineno, loop.col_offset)
        last = None
        for node in walk_local(scope.body if isinstance(scope, (*FUNC_TYPES, ast.Module)) else []):
            if isinstance(node, ast.Call) and (node.lineno, node.col_offset) < here:
                mode = self.facts.mode_call(node)
                if mode is not None and (last is None or (node.lineno, node.col_offset) > last[0]):
                    last = ((node.lineno, node.col_offset), mode)
        return last is not None and last[1] == "eval"

    def _classify_epoch(self, loop: ast.AST) -> None:
        info = self.info[id(loop)]
        if info.kind:
            return
        target = getattr(loop, "target", None)
        names = target_names(target) if target is not None else []
        if any("epoch" in n.lower() for n in names):
            info.kind = "epoch"
            return
        for node in body_nodes(loop):
            if isinstance(node, LOOP_TYPES) and self.info[id(node)].kind in ("train", "eval"):
                info.kind = "epoch"
                return
            if isinstance(node, ast.Call) and self.calls_training(node):
                info.kind = "epoch"
                return

    def calls_training(self, call: ast.Call) -> bool:
        """The call runs an in-file function that holds a training or evaluation loop."""
        for func in self.facts.resolve(call):
            for f in self.facts.reachable(func):
                for n in walk_local(f.body):  # type: ignore[attr-defined]
                    if isinstance(n, LOOP_TYPES) and id(n) in self.info and self.info[id(n)].kind in ("train", "eval"):
                        return True
        return False

    # ---- queries ---------------------------------------------------------------------
    def get(self, loop: ast.AST) -> LoopInfo:
        return self.info[id(loop)]


def _reads_only_batch(value: ast.AST, batch: set[str]) -> bool:
    """True for ``batch``, ``batch["x"]``, ``batch[0]``, ``batch.x`` and tuples of those (no calls)."""
    if isinstance(value, (ast.Tuple, ast.List)):
        return bool(value.elts) and all(_reads_only_batch(e, batch) for e in value.elts)
    node = value
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return isinstance(node, ast.Name) and node.id in batch
