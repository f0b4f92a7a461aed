"""Name bindings per scope, read from the walk's lists: which assignment, loop target or parameter a
name refers to at a given place."""

from __future__ import annotations

import ast
from bisect import bisect_right
from operator import attrgetter

from torchdoctor.check.astutil import dotted, func_params, target_names
from torchdoctor.check.semantic.walk import COMP, Index

__all__ = ["Binding", "Bindings"]

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_POS = attrgetter("pos")


class Binding:
    """One binding of a name (compared by identity, as the nodes it points at)."""

    __slots__ = ("key", "scope", "value", "pos", "node", "index")

    def __init__(self, key: str, scope: ast.AST, value: ast.AST | None, pos: tuple[int, int], node: ast.AST,
                 index: int | None = None) -> None:
        self.key = key  # "model" or "self.model"
        self.scope = scope  # Module / FunctionDef / Lambda, or the ClassDef for self.* attributes
        self.value = value  # the bound expression; the annotation for parameters; None for loop targets
        self.pos = pos  # where the binding takes effect (the end of its statement)
        self.node = node  # the statement (or function, or loop target) that binds
        self.index = index  # element of a tuple value bound to this name

    def __repr__(self) -> str:  # for debugging and test failures
        return f"Binding({self.key!r}, line {getattr(self.node, 'lineno', 0)})"

    @property
    def is_param(self) -> bool:
        return isinstance(self.node, (*_FUNCS, ast.Lambda))


class Bindings:
    def __init__(self, index: Index, imported: set[str]) -> None:
        self.index = index
        self.table: dict[tuple[ast.AST, str], list[Binding]] = {}
        self.by_key: dict[str, list[Binding]] = {}
        self.param_receivers: set[str] = set()  # keys used as ``x.parameters()``, ``x.eval()``
        self.functions: dict[str, list[ast.AST]] = {}  # plain functions (not methods) by name
        self.defined: set[str] = set(imported)  # names bound by def, class or import
        self.comp: dict[str, dict[ast.AST, Binding]] = {}  # name -> comprehension -> its target binding
        self._positions: dict[tuple[ast.AST, str], list[tuple[int, int]]] = {}
        self._collect()

    # ---- collection --------------------------------------------------------------------------
    def _scope_for_key(self, key: str, at: ast.AST) -> ast.AST | None:
        frame = self.index.frame.get(at)
        if frame is None:
            return None
        return frame.cls if key.startswith("self.") else frame.scope

    def _add(self, key: str, at: ast.AST, value: ast.AST | None, stmt: ast.AST, index: int | None = None) -> None:
        scope = self._scope_for_key(key, at)
        if scope is None:
            return
        pos = (getattr(stmt, "end_lineno", 0) or 0, getattr(stmt, "end_col_offset", 0) or 0)
        b = Binding(key, scope, value, pos, stmt, index)
        self.table.setdefault((scope, key), []).append(b)
        self.by_key.setdefault(key, []).append(b)

    def _bind_target(self, target: ast.AST, value: ast.AST | None, stmt: ast.AST) -> None:
        if isinstance(target, ast.Name):
            self._add(target.id, stmt, value, stmt)
        elif isinstance(target, ast.Attribute):
            key = dotted(target)
            if key and key.startswith("self."):
                self._add(key, stmt, value, stmt)
        elif isinstance(target, (ast.Tuple, ast.List)):
            same = isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts)
            for i, elt in enumerate(target.elts):
                if same:
                    self._bind_target(elt, value.elts[i], stmt)  # type: ignore[union-attr]
                elif isinstance(elt, (ast.Name, ast.Attribute)) and dotted(elt):
                    key = dotted(elt)
                    if isinstance(elt, ast.Name) or key.startswith("self."):  # type: ignore[union-attr]
                        self._add(key, stmt, value, stmt, index=i)  # type: ignore[arg-type]
                elif isinstance(elt, (ast.Tuple, ast.List, ast.Starred)):
                    # ``_, (x, y) = next(enumerate(loader))``: bound here, to a part of the value not followed
                    for name in target_names(elt):
                        self._add(name, stmt, None, stmt)

    def _collect(self) -> None:
        get = self.index.by_type.get
        for node in get(ast.Assign, ()):
            for t in node.targets:  # type: ignore[attr-defined]
                self._bind_target(t, node.value, node)  # type: ignore[attr-defined]
        for t in (ast.AnnAssign, ast.NamedExpr):
            for node in get(t, ()):
                if node.value is not None:  # type: ignore[attr-defined]
                    self._bind_target(node.target, node.value, node)  # type: ignore[attr-defined]
        for t in (ast.For, ast.AsyncFor):
            for node in get(t, ()):
                for name in target_names(node.target):  # type: ignore[attr-defined]
                    self._add(name, node, None, node.target)  # type: ignore[attr-defined]
        for node in get(ast.withitem, ()):
            if node.optional_vars is not None:  # type: ignore[attr-defined]
                self._bind_target(node.optional_vars, node.context_expr, node.optional_vars)  # type: ignore[attr-defined]
        for node in get(ast.comprehension, ()):
            self._collect_comp(node)
        for t in (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda):
            for node in get(t, ()):
                self._collect_params(node)
                if t is not ast.Lambda:
                    self.defined.add(node.name)  # type: ignore[attr-defined]
                    if self.index.frame[node].kind != "class":
                        self.functions.setdefault(node.name, []).append(node)  # type: ignore[attr-defined]
        for node in get(ast.ClassDef, ()):
            self.defined.add(node.name)  # type: ignore[attr-defined]
        for node in get(ast.Call, ()):
            func = node.func  # type: ignore[attr-defined]
            if isinstance(func, ast.Attribute) and (func.attr in ("parameters", "named_parameters") or func.attr == "eval"
                                                    and isinstance(func.value, ast.Name) and func.value.id != "self"
                                                    and not node.args and not node.keywords):  # type: ignore[attr-defined]
                key = dotted(func.value)  # (``detector.eval()``: a module put in evaluation mode)
                if key:
                    self.param_receivers.add(key)
        for key, found in self.table.items():
            if len(found) > 1:  # (most names are bound once in their scope)
                found.sort(key=_POS)
            self._positions[key] = [b.pos for b in found]
        for found in self.by_key.values():
            if len(found) > 1:
                found.sort(key=_POS)

    def _collect_comp(self, gen: ast.comprehension) -> None:
        """A comprehension's targets bind inside it only (``x`` in ``[m(x) for x in loader]``)."""
        frame = self.index.frame[gen]
        comp = frame.node if frame.kind == COMP else self.index.parent.get(gen)
        for name in target_names(gen.target):
            pos = (gen.target.lineno, gen.target.col_offset)
            self.comp.setdefault(name, {})[comp] = Binding(name, frame.scope, None, pos, gen.target)  # type: ignore[arg-type]

    def _collect_params(self, func: ast.AST) -> None:
        args = func.args  # type: ignore[attr-defined]
        annotated = {a.arg: a.annotation for a in args.posonlyargs + args.args + args.kwonlyargs}
        pos = (func.lineno, func.col_offset)  # type: ignore[attr-defined]
        for name in func_params(func):  # type: ignore[arg-type]
            if name in ("self", "cls"):
                continue
            b = Binding(name, func, annotated.get(name), pos, func)
            self.table.setdefault((func, name), []).append(b)
            self.by_key.setdefault(name, []).append(b)

    # ---- queries ------------------------------------------------------------------------------
    def comp_binding(self, key: str, at: ast.AST) -> Binding | None:
        """The binding of ``key`` by a comprehension around ``at`` (not in its first iterable)."""
        found = self.comp.get(key)
        if not found:
            return None
        frame = self.index.frame.get(at)
        while frame is not None and frame.kind not in ("function", "lambda", "class", "module"):
            if frame.kind == COMP:
                b = found.get(frame.node)
                if b is not None:
                    return b
            frame = frame.parent
        return None

    def at(self, key: str, at: ast.AST) -> Binding | None:
        """The binding of ``key`` that reaches ``at``: the last one before it in its scope, else the global one."""
        if key not in self.by_key and key not in self.comp:
            return None  # bound nowhere in the file (``len``, ``print``, an imported name)
        scope = self._scope_for_key(key, at)
        if scope is None:
            return None
        if key in self.comp:
            comp = self.comp_binding(key, at)
            if comp is not None:
                return comp
        here = (getattr(at, "lineno", 0), getattr(at, "col_offset", 0))
        slot = (scope, key)
        found = self.table.get(slot)
        if not found and not key.startswith("self.") and scope is not self.index.tree:
            closed = self._enclosing(key, scope)
            if closed is not None:
                return closed
        if not found and not key.startswith("self."):
            slot = (self.index.tree, key)
            found = self.table.get(slot)
            if found and scope is not self.index.tree:
                return found[-1]  # a global read from inside a function: its last value
        if not found:
            return None
        i = bisect_right(self._positions[slot], here)
        return found[i - 1] if i else found[0]

    def _enclosing(self, key: str, scope: ast.AST) -> Binding | None:
        """A free name of a nested function: its binding in the nearest enclosing function that binds it,
        the last one before the nested ``def`` (``encoder = DDP(encoder)``, then ``def save(): encoder.state_dict()``)."""
        inner = scope
        for _ in range(8):
            frame = self.index.frame.get(inner)
            outer = frame.scope if frame is not None else None
            if outer is None or outer is self.index.tree:
                return None
            found = self.table.get((outer, key))
            if found:
                i = bisect_right(self._positions[(outer, key)], (inner.lineno, inner.col_offset))  # type: ignore[attr-defined]
                return found[i - 1] if i else None
            inner = outer
        return None

    def of_key(self, key: str) -> list[Binding]:
        """Every binding of ``key`` in any scope, in source order."""
        return self.by_key.get(key, [])

    def in_scope(self, scope: ast.AST, key: str) -> list[Binding]:
        return self.table.get((scope, key), [])
