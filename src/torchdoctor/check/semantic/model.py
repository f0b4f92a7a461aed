"""SemanticModel: one file as the rules see it, built by one walk.

Tree
    ``parent(node)``, ``ancestors(node)`` (nearest first), ``frame(node)``, ``scope_of(node)`` (function,
    lambda or module), ``function_of(node)`` (nearest def or None), ``class_of(node)``; ``subtree(node)``
    (the node and all below, in source order), ``body(region)`` (a loop's, comprehension's or
    function's own body), ``local_nodes(region)``; ``of_type(*types)`` the nodes of those types,
    in source order; ``calls`` every call; ``calls_named(*last_names)`` the calls whose callee's
    last name is one of those; ``calls_with_keyword(arg)``.
Names
    ``qualname(expr)``, ``call_name(call)``, ``imports``; ``binding_at(key, at)``, ``bindings_of(key)``;
    ``kind_of(key, at)`` / ``expr_kind(expr, at)`` -> "model", "tensor", "loader", "optimizer",
    "scaler", "sampler", "device", "loss_fn", "scheduler", "wrapper" or None; ``module_classes``.
Calls
    ``resolve(call)`` in-file functions it may run, ``external(call)`` a function of another module
    of the project (its summary), ``call_sites(func)``, ``reachable(func)``, ``effects(func)`` and
    ``region_effects(nodes)`` (frozensets of "backward", "step", "zero_grad", "set_epoch", "eval",
    "train", "save", "empty_cache"), ``is_backward_call``, ``mode_call``, ``is_optimizer_step``.
Context (read from the frames around a node)
    ``under_no_grad(node, strict=False)``, ``grad_mode(node)``, ``under_step_guard(node)``,
    ``under_rank_guard(node)``, ``chooses_device(node)``, ``in_handler(node, stop)``,
    ``in_exit_branch(node, stop)``, ``in_other_branch(a, b)``.
Loops
    ``loops``, ``loop_info(loop)``, ``loop_kind(loop)``, ``is_batch_loop``, ``batch_vars``, ``loader_of``,
    ``enclosing_loop(node, kind=None)``, ``loops_around(node)``, ``calls_training(call)``.
Device moves
    ``is_device_move(call)``, ``move_device(call)``, ``is_moved(key, at)``, ``value_is_moved(expr)``.
Memo
    ``cached(key, compute)``: a per-file memo that rules share.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator

from torchdoctor.check.astutil import DTYPES, PLACEMENT_METHODS, dotted, keyword, method_name, string_value, strip_methods
from torchdoctor.check.semantic.bindings import Binding, Bindings
from torchdoctor.check.semantic.calls import Calls
from torchdoctor.check.semantic.guards import Guards
from torchdoctor.check.semantic.kinds import Kinds
from torchdoctor.check.semantic.loops import LoopInfo, Loops
from torchdoctor.check.semantic.names import Names
from torchdoctor.check.semantic.text import Text
from torchdoctor.check.semantic.walk import COMP, FUNCTION, LAMBDA, LOOP, Frame, Index

__all__ = ["SemanticModel"]

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


# The project's own helpers that move what they are handed: ``x, lens = to_cuda(x, lens)``
MOVING_HELPERS = frozenset({"to_cuda", "to_gpu", "to_device", "move_to_device", "move_to", "send_to_device"})


class SemanticModel:
    def __init__(self, tree: ast.Module, source: str, path: str = "<stdin>", project: object | None = None,
                 prebuilt: tuple | None = None) -> None:
        """``prebuilt``: ``(index, names, bindings)`` of this same tree, built before (the project
        index read this module first); they depend on the syntax alone, so they are reused."""
        self.tree = tree
        self.path = path
        self.project = project
        self.text = Text(source)
        if prebuilt is not None:
            self.index, self.names, self.bindings = prebuilt
            self.index.forget_answers()  # what guards memoised per frame may have depended on the project
        else:
            self.index = Index(tree)
            self.names = Names(self.index)
            self.bindings = Bindings(self.index, set(self.names.imports) | set(self.names.relative))
        if project is not None and self.names.star:  # ``from network import *`` bringing ``nn``/``t`` (torch's) in
            borrowed = project.star_module_aliases(self)  # type: ignore[attr-defined]
            if borrowed:
                self.names = self.names.with_imports(borrowed)
        self.imports = self.names.imports
        self.kinds = Kinds(self.index, self.names, self.bindings, self.text.segment,
                           self._project_class if project is not None else None)
        self.module_classes = self.kinds.module_classes
        self.calls_index = Calls(self.index, self.names, self.bindings, self.kinds,
                                 self._project_function if project is not None else None)
        self.calls = self.calls_index.calls
        self.functions = self.calls_index.functions
        self.guards = Guards(self.index, self.names, self.bindings, self.text.segment, self.calls_index.sites)
        if project is not None and self.names.star:
            self.guards.star_flag = lambda name: project.star_true_flag(self, name)  # type: ignore[attr-defined]
        if project is not None:
            self.guards.true_option = lambda name: project.importer_true_option(self, name)  # type: ignore[attr-defined]
        self._loops: Loops | None = None
        self.memo: dict[object, object] = {}

    def release(self, keep_syntax: bool = False) -> None:
        """Break the model's reference cycles (bound methods handed between its parts, the frames' way
        back to the index), so that the file's tree is freed by reference counting as soon as the model
        is dropped: left to the cyclic collector, every file's tree stayed alive until a full collection,
        and the collections over that heap cost ~40 % of a check's time. ``keep_syntax``: the index,
        names and bindings are still wanted (the project keeps them for the file's own check)."""
        parts = [self.kinds, self.calls_index, self.guards, self._loops]
        if not keep_syntax:
            self.index.frame.index = None  # type: ignore[assignment]
        for part in parts:
            if part is not None:
                part.__dict__.clear()
        self.__dict__.clear()

    # ---- project ---------------------------------------------------------------------------------
    def _project_class(self, qualname: str) -> bool | None:
        return self.project.is_module_class(self, qualname)  # type: ignore[attr-defined]

    def _project_function(self, call: ast.Call) -> object | None:
        return self.project.function_for(self, call)  # type: ignore[attr-defined]

    def called_elsewhere_without_grad(self, func: ast.AST, by_class: bool = False) -> bool:
        """No call of ``func`` in this file, and every call of it from the project's other modules runs without
        autograd (``with torch.no_grad(): validate(hp, generator, loader)`` in the trainer); ``by_class``: a method's
        calls made through objects of its class count too (``self.critic.estimate(obs)``)."""
        return self.project is not None and not self.call_sites(func) \
            and self.project.callers_grad_mode(self, func, by_class=by_class) == "off"  # type: ignore[attr-defined]

    # ---- tree ---------------------------------------------------------------------------------------
    def segment(self, node: ast.AST | None) -> str:
        return self.text.segment(node)

    def parent(self, node: ast.AST) -> ast.AST | None:
        return self.index.parent.get(node)

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        return self.index.ancestors(node)

    def statement_of(self, node: ast.AST) -> ast.stmt | None:
        """The innermost statement around ``node``."""
        return next((a for a in self.index.ancestors(node) if isinstance(a, ast.stmt)), None)  # type: ignore[misc]

    def frame(self, node: ast.AST) -> Frame:
        return self.index.frame.get(node, self.index.root)

    def scope_of(self, node: ast.AST) -> ast.AST:
        return self.frame(node).scope

    def function_of(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        return self.frame(node).function  # type: ignore[return-value]

    def class_of(self, node: ast.AST) -> ast.ClassDef | None:
        return self.frame(node).cls  # type: ignore[return-value]

    def subtree(self, node: ast.AST) -> list[ast.AST]:
        return self.index.subtree(node)

    def body(self, region: ast.AST) -> list[ast.AST]:
        return self.index.body(region)

    def local_nodes(self, region: ast.AST) -> list[ast.AST]:
        return self.calls_index.local_nodes(region)

    def contains(self, outer: ast.AST, node: ast.AST) -> bool:
        return self.index.contains(outer, node)

    def of_type(self, *types: type) -> list[ast.AST]:
        if len(types) == 1:
            return self.index.by_type.get(types[0], [])
        out = [n for t in types for n in self.index.by_type.get(t, ())]
        out.sort(key=self.index.pos.__getitem__)
        return out

    def reads_of(self, key: str) -> list[ast.AST]:
        """Where a name (``loader``) or an attribute of ``self`` (``self.loader``) is read, in source order."""
        index = self.memo.get("reads")
        if index is None:
            index = {}
            for n in self.of_type(ast.Name):
                if isinstance(n.ctx, ast.Load):  # type: ignore[attr-defined]
                    index.setdefault(n.id, []).append(n)  # type: ignore[attr-defined]
            for n in self.of_type(ast.Attribute):
                if isinstance(n.ctx, ast.Load) and isinstance(n.value, ast.Name) and n.value.id == "self":  # type: ignore[attr-defined]
                    index.setdefault("self." + n.attr, []).append(n)  # type: ignore[attr-defined]
            self.memo["reads"] = index
        return index.get(key, [])  # type: ignore[union-attr]

    def self_reads(self, attr: str) -> list[ast.AST]:
        """Where ``self.<attr>`` is read (``reads_of(f"self.{attr}")`` without indexing every name of the file)."""
        index = self.memo.get("reads")
        if index is not None:
            return index.get("self." + attr, [])  # type: ignore[union-attr]
        index = self.memo.get("self_reads")
        if index is None:
            index = {}
            for n in self.of_type(ast.Attribute):
                if isinstance(n.ctx, ast.Load) and isinstance(n.value, ast.Name) and n.value.id == "self":  # type: ignore[attr-defined]
                    index.setdefault(n.attr, []).append(n)  # type: ignore[attr-defined]
            self.memo["self_reads"] = index
        return index.get(attr, [])  # type: ignore[union-attr]

    def calls_named(self, *names: str) -> list[ast.Call]:
        return self.calls_index.named(*names)

    def object_calls(self, cls_name: str) -> list[ast.Call]:
        """The calls of objects this file makes of the class ``cls_name``: ``crit(pred, y)`` of ``crit =
        OhemCE().to(device)`` (every name ever bound to one: ``model = Wrapper(net)``, then ``model = model.cuda()``)."""
        def compute() -> list[ast.Call]:
            keys = [key for key, bound in self.bindings.by_key.items() if any(
                isinstance(made := strip_methods(b.value, PLACEMENT_METHODS), ast.Call)
                and (dotted(made.func) or "").rsplit(".", 1)[-1] == cls_name for b in bound if b.value is not None)]
            return [call for key in keys for r in self.reads_of(key) if isinstance(call := self.parent(r), ast.Call)
                    and call.func is r]
        return self.cached(("object_calls", cls_name), compute)  # type: ignore[no-any-return]

    def calls_with_keyword(self, arg: str) -> list[ast.Call]:
        return self.calls_index.by_keyword.get(arg, [])

    # ---- names -----------------------------------------------------------------------------------------
    def qualname(self, node: ast.AST | None) -> str | None:
        return self.names.qualname(node)

    def call_name(self, node: ast.AST) -> str | None:
        return self.names.call_name(node)

    def binding_at(self, key: str, at: ast.AST) -> Binding | None:
        return self.bindings.at(key, at)

    def bindings_of(self, key: str) -> list[Binding]:
        return self.bindings.of_key(key)

    def binding_before_self_moves(self, name: str, at: ast.AST, methods: frozenset[str]) -> tuple[Binding | None, ast.AST | None]:
        """The binding of ``name`` at ``at``, followed back through rebindings to itself by ``methods`` (``net =
        net.to(device)``, ``x = x.cuda()``; three at most), and its value stripped of those methods (None for a
        parameter, an unpacked element, or a name bound to nothing)."""
        b, value = self.binding_at(name, at), None
        for _ in range(3):
            value = strip_methods(b.value, methods) if b is not None and not b.is_param and b.index is None \
                and b.value is not None else None
            if not (isinstance(value, ast.Name) and value.id == name):
                break
            b = self.binding_at(name, value)
        return b, value

    def kind_of(self, key: str, at: ast.AST) -> str | None:
        return self.kinds.kind_of(key, at)

    def expr_kind(self, expr: ast.AST, at: ast.AST) -> str | None:
        return self.kinds.expr_kind(expr, at)

    def call_kind(self, call: ast.Call, at: ast.AST) -> str | None:
        return self.kinds.call_kind(call, at)

    # ---- calls --------------------------------------------------------------------------------------------
    def resolve(self, call: ast.Call) -> list[ast.AST]:
        return self.calls_index.resolve(call)

    def external(self, call: ast.Call) -> object | None:
        return self.calls_index.external_of(call)

    def call_sites(self, func: ast.AST) -> list[ast.Call]:
        return self.calls_index.sites(func)

    def reachable(self, func: ast.AST) -> list[ast.AST]:
        return self.calls_index.reachable(func)

    def effects(self, func: ast.AST, deep: bool = False) -> frozenset[str]:
        return self.calls_index.effects(func, deep)

    def region_effects(self, nodes: list[ast.AST], deep: bool = False) -> frozenset[str]:
        return self.calls_index.region_effects(nodes, deep)

    def is_backward_call(self, node: ast.AST) -> bool:
        return self.calls_index.is_backward_call(node)

    def mode_call(self, call: ast.AST) -> str | None:
        return self.calls_index.mode_call(call)

    def is_optimizer_step(self, node: ast.AST) -> bool:
        return self.calls_index.is_optimizer_step(node)

    def is_model_call(self, call: ast.Call) -> bool:
        key = dotted(call.func)
        return key is not None and self.kind_of(key, call) in ("model", "wrapper")

    @property
    def trains(self) -> bool:
        return self.cached("trains", lambda: any(self.is_backward_call(c) for c in self.calls_named("backward"))
                           or any(self.call_name(c) == "torch.autograd.backward" for c in self.calls_named("backward")))

    # ---- context ------------------------------------------------------------------------------------------
    def grad_mode(self, node: ast.AST) -> str:
        return self.guards.grad_mode(node)

    def feeds_backward(self, expr: ast.AST, through_detach: bool = True) -> bool:
        return self.loops_index.feeds_backward(expr, through_detach)

    def under_no_grad(self, node: ast.AST, strict: bool = False) -> bool:
        return self.guards.grad_mode(node) in (("off",) if strict else ("off", "maybe"))

    def under_step_guard(self, node: ast.AST, loop: ast.AST | None = None) -> bool:
        return self.guards.under_step_guard(node, loop)

    def under_rank_guard(self, node: ast.AST) -> bool:
        return self.guards.under_rank_guard(node)

    def chooses_device(self, node: ast.AST) -> bool:
        return self.guards.chooses_device(node)

    def in_handler(self, node: ast.AST, stop: ast.AST) -> bool:
        return self.guards.in_handler(node, stop)

    def in_exit_branch(self, node: ast.AST, stop: ast.AST) -> bool:
        return self.guards.in_exit_branch(node, stop)

    def in_other_branch(self, a: ast.AST, b: ast.AST) -> bool:
        return self.guards.in_other_branch(a, b)

    # ---- loops ----------------------------------------------------------------------------------------------
    @property
    def loops_index(self) -> Loops:
        if self._loops is None:
            self._loops = Loops(self.index, self.kinds, self.calls_index, self.guards, self.text.segment)
        return self._loops

    @property
    def loops(self) -> list[ast.AST]:
        return list(self.loops_index.order)

    def loop_info(self, loop: ast.AST) -> LoopInfo:
        return self.loops_index.get(loop)

    def loop_kind(self, loop: ast.AST) -> str | None:
        return self.loops_index.get(loop).kind

    def is_batch_loop(self, loop: ast.AST) -> bool:
        return self.loops_index.get(loop).is_batch

    def batch_vars(self, loop: ast.AST) -> list[str]:
        return list(self.loops_index.get(loop).batch_vars)

    def loader_of(self, loop: ast.AST) -> ast.AST | None:
        return self.loops_index.get(loop).loader

    def enclosing_loop(self, node: ast.AST, kind: str | None = None) -> ast.AST | None:
        if self._loops is None and not self._in_loop_frame(node):
            return None  # no loop or comprehension around it in its function: no need to classify the file's loops
        return self.loops_index.enclosing(node, kind)

    def _in_loop_frame(self, node: ast.AST) -> bool:
        """Some frame around ``node`` in its function is a loop's or a comprehension's (where
        ``Loops.enclosing`` looks)."""
        frame = self.index.frame.get(node)
        while frame is not None and frame.kind not in (FUNCTION, LAMBDA):
            if frame.kind in (LOOP, COMP):
                return True
            frame = frame.parent
        return False

    def loops_around(self, node: ast.AST) -> list[ast.AST]:
        return self.loops_index.loops_around(node)

    def calls_training(self, call: ast.Call) -> bool:
        return self.loops_index.calls_training(call)

    # ---- device moves -------------------------------------------------------------------------------------------
    def is_device_move(self, call: ast.AST) -> bool:
        return self.move_device(call) is not None

    def moves_by_helper(self, call: ast.Call) -> bool:
        """``to_cuda(x, lens)``: a project helper named for moving what it is handed (not told ``"cpu"``)."""
        return isinstance(call.func, ast.Name) and call.func.id in MOVING_HELPERS and bool(call.args) and not any(
            isinstance(a, ast.Constant) and a.value == "cpu" for a in [*call.args, *(k.value for k in call.keywords)])

    def device_moves(self) -> list[ast.Call]:
        """Every move to a device in the file, in source order: ``.to(device)``, ``.cuda()``, ``to_cuda(x, y)``."""
        return self.cached("device_moves_and_helpers", lambda: sorted(  # type: ignore[no-any-return]
            (m for m in self.calls_named("to", "cuda", *MOVING_HELPERS) if self.is_device_move(m) or self.moves_by_helper(m)),
            key=self.index.pos.__getitem__))

    def move_device(self, call: ast.AST) -> str | None:
        """The target device's source text of a move (``"cuda"`` for ``.cuda()``), or None."""
        if not isinstance(call, ast.Call):
            return None
        meth = method_name(call)
        if meth == "cuda":
            return "cuda"
        if meth == "to":
            dev = keyword(call, "device")
            arg = dev.value if dev else (call.args[0] if call.args else None)
            if arg is None or self._is_dtype(arg):
                return None
            return string_value(arg) or self.segment(arg)
        if meth == "type" and len(call.args) == 1 and not call.keywords and self.cuda_tensor_type(call.args[0], call):
            return "cuda"  # ``imgs.type(Tensor)`` of ``Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor``
        name = (dotted(call.func) or "").rsplit(".", 1)[-1]
        if name in ("to_device", "move_to_device", "move_to", "send_to_device") and len(call.args) >= 2:
            return self.segment(call.args[1])
        return None

    def cuda_tensor_type(self, node: ast.AST, at: ast.AST) -> bool:
        """A legacy CUDA tensor type (``torch.cuda.FloatTensor``), or a name bound to one, maybe as an arm of a choice
        made on CUDA's presence (``Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor``)."""
        if isinstance(node, ast.Name) and (b := self.binding_at(node.id, at)) is not None and not b.is_param \
                and b.index is None and b.value is not None:
            node = b.value
        arms = (node.body, node.orelse) if isinstance(node, ast.IfExp) else (node,)
        return any((q := self.qualname(a) or "").startswith("torch.cuda.") and q.endswith("Tensor") for a in arms)

    def _is_dtype(self, arg: ast.AST) -> bool:
        q = self.qualname(arg) or ""
        if q.startswith("torch.") and q.rsplit(".", 1)[-1] in DTYPES:
            return True
        if isinstance(arg, ast.Attribute) and arg.attr == "dtype":
            return True
        key = dotted(arg) or ""
        return "dtype" in key.rsplit(".", 1)[-1].lower() or (isinstance(arg, ast.Name) and self.kind_of(arg.id, arg) == "tensor")

    def is_moved(self, key: str, at: ast.AST) -> bool:
        b = self.binding_at(key, at)
        return b is not None and b.value is not None and not b.is_param and self.value_is_moved(b.value)

    def value_is_moved(self, value: ast.AST, depth: int = 0) -> bool:
        """A device move at the top of the expression, under dtype/shape methods: ``x.to(d).float()``; also
        ``batch = tuple(t.to(d) for t in batch)`` and the names unpacked from it (``x, y = batch``)."""
        node = value
        while True:
            if isinstance(node, ast.Call):
                if self.is_device_move(node):
                    return True
                if isinstance(node.func, ast.Attribute):
                    node = node.func.value
                    continue
                if isinstance(node.func, ast.Name) and node.func.id in ("tuple", "list") and len(node.args) == 1:
                    node = node.args[0]
                    continue
                if isinstance(node.func, ast.Name) and node.func.id in MOVING_HELPERS:
                    return self.moves_by_helper(node)
                if any(isinstance(a, ast.Lambda) and self.value_is_moved(a.body, depth + 1) for a in node.args[1:]):
                    return True  # ``_nested_map(features, lambda x: x.to(device) if ... else x)``: mapped onto it
                if isinstance(node.func, ast.Name) and depth < 2 and (funcs := self.resolve(node)) and all(
                        returns and all(r.value is not None and self.value_is_moved(r.value, depth + 1) for r in returns)
                        for returns in (self.kinds.returns_of(f) for f in funcs)):
                    return True  # an in-file helper whose every return is moved: ``return [t.cuda() for t in ts]``
            if isinstance(node, (ast.IfExp,)):  # ``None if t is None else t.cuda()``
                node = node.orelse if isinstance(node.body, ast.Constant) else node.body
                continue
            if isinstance(node, ast.Name) and depth < 2:
                b = self.binding_at(node.id, node)
                if b is not None and b.value is not None and not b.is_param and b.node is not value and \
                        self.value_is_moved(b.value, depth + 1):
                    return True
                return self.elements_moved(node.id, node)
            if isinstance(node, (ast.Subscript, ast.Starred)):
                node = node.value
                continue
            if isinstance(node, ast.DictComp):  # ``{k: v.to(device) for k, v in batch.items()}``
                node = node.value
                continue
            if isinstance(node, (ast.ListComp, ast.GeneratorExp)):
                node = node.elt
                continue
            return False

    def elements_moved(self, key: str, at: ast.AST) -> bool:
        """``for i in range(len(batch)): batch[i] = batch[i].cuda()`` (or ``batch[k] = batch[k].to(d)`` over its
        keys) before ``at`` in the same scope, on the same binding of ``batch``: every element is on the device."""
        moves = self.cached("element_moves", self._element_moves).get(key)  # type: ignore[union-attr]
        if not moves:
            return False
        here = (getattr(at, "lineno", 0), getattr(at, "col_offset", 0))
        bound = self.binding_at(key, at)
        return any((m.lineno, m.col_offset) < here and self.scope_of(m) is self.scope_of(at)  # type: ignore[attr-defined]
                   and self.binding_at(key, m) is bound for m in moves)

    def _element_moves(self) -> dict[str, list[ast.AST]]:
        out: dict[str, list[ast.AST]] = {}
        for stmt in self.of_type(ast.Assign):
            target = stmt.targets[0] if len(stmt.targets) == 1 else None  # type: ignore[attr-defined]
            if not (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)):
                continue
            value = stmt.value  # type: ignore[attr-defined]
            if not (isinstance(value, ast.Call) and self.is_device_move(value) and isinstance(value.func, ast.Attribute)
                    and isinstance(recv := value.func.value, ast.Subscript) and self.segment(recv) == self.segment(target)):
                continue
            index = target.slice  # (the loop around it, through ``try:`` / ``if``: ``try: data[i] = data[i].cuda()``)
            loop = next((a for a in self.ancestors(stmt) if isinstance(a, (ast.For, ast.AsyncFor, *_SCOPES))), None)
            if isinstance(loop, (ast.For, ast.AsyncFor)) and isinstance(index, ast.Name) \
                    and isinstance(loop.target, ast.Name) and loop.target.id == index.id:
                out.setdefault(target.value.id, []).append(stmt)
        return out

    # ---- memo -------------------------------------------------------------------------------------------------
    def cached(self, key: object, compute: Callable[[], object]):  # type: ignore[no-untyped-def]
        """``compute()`` once per file under ``key`` (rules share expensive per-file answers)."""
        memo = self.memo
        if key not in memo:
            memo[key] = compute()
        return memo[key]
