"""The one walk over a file: every node visited once, in source order, with its parent and its place.

The walk records, for every node, its parent and its index in the pre-order list (a subtree is
a contiguous slice of it), and lists the nodes of each type; everything else in ``semantic/``
is computed from those lists, never by walking the tree again. The shared singletons
``ast.Load``/``ast.Add``/... carry nothing and are not visited.

A *frame* is the region of code a node sits in: the module, a function body, a class body, a
loop body, a comprehension's per-item part, a ``with`` body, one branch of an ``if``, an
``except`` block. Frames form a tree much shorter than the syntax tree, so "the innermost
loop around this call" or "the grad mode here" reads a handful of frames instead of every
ancestor. Frames are found on demand from the parents (and memoised), so the walk itself
stays as cheap as a plain ``ast.walk``.
"""

from __future__ import annotations

import ast
from bisect import bisect_left
from collections import defaultdict

__all__ = ["Frame", "Index", "MODULE", "FUNCTION", "LAMBDA", "CLASS", "LOOP", "COMP", "WITH", "IF", "EXCEPT"]

MODULE, FUNCTION, LAMBDA, CLASS, LOOP, COMP, WITH, IF, EXCEPT = (
    "module", "function", "lambda", "class", "loop", "comp", "with", "if", "except")

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SCOPES = {ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef}
_COMPS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
_COMPREHENSION = ast.comprehension
# Fields that never hold a child worth visiting: names and numbers, and the shared singletons.
_NOT_CHILDREN = {"ctx", "op", "ops", "id", "attr", "name", "arg", "asname", "module", "level", "kind",
                 "type_comment", "is_async", "conversion", "lineno", "col_offset", "end_lineno", "end_col_offset"}
# Per type, the fields that hold something else than nodes, lists of nodes or None (a constant's value,
# ``global``'s names, ...): without them, the walk needs no isinstance test per value.
_NOT_NODES = {ast.Constant: ("value",), ast.AnnAssign: ("simple",), ast.Global: ("names",),
              ast.Nonlocal: ("names",), ast.MatchSingleton: ("value",), ast.MatchClass: ("kwd_attrs",),
              ast.MatchMapping: ("rest",), ast.TypeIgnore: ("tag",)}
_FIELDS: dict[type, tuple[str, ...]] = {}
_PUSH: dict[type, tuple[str, ...]] = {}  # the walk's: node fields only, last first (a stack pops them in order)
_AST = ast.AST


def child_fields(t: type) -> tuple[str, ...]:
    fields = _FIELDS.get(t)
    if fields is None:
        fields = _FIELDS[t] = tuple(f for f in t._fields if f not in _NOT_CHILDREN)  # type: ignore[attr-defined]
    return fields


def _push_fields(t: type) -> tuple[str, ...]:
    skip = _NOT_NODES.get(t, ())
    fields = _PUSH[t] = tuple(f for f in reversed(child_fields(t)) if f not in skip)
    return fields


class Frame:
    """One region of code. ``branch`` is "body" or "else" for an ``if`` frame.

    ``scope`` is the nearest function, lambda or the module (where a plain name
    binds); ``unit`` the nearest function, lambda, class or module (what "the same
    body" means); ``cls`` the nearest class; ``function`` the nearest ``def``.
    ``memo`` holds per-frame answers (the grad mode a ``with`` sets, ...).
    """

    __slots__ = ("parent", "kind", "node", "branch", "scope", "unit", "cls", "function", "memo")

    def __init__(self, parent: Frame | None, kind: str, node: ast.AST, branch: str | None = None) -> None:
        self.parent = parent
        self.kind = kind
        self.node = node
        self.branch = branch
        self.memo: dict | None = None
        if parent is None:
            self.scope = self.unit = node
            self.cls = self.function = None
            return
        self.cls = node if kind == CLASS else parent.cls
        self.function = node if kind == FUNCTION else parent.function
        self.scope = node if kind in (FUNCTION, LAMBDA) else parent.scope
        self.unit = node if kind in (FUNCTION, LAMBDA, CLASS) else parent.unit

    def chain(self):
        """This frame and every enclosing one, innermost first."""
        f: Frame | None = self
        while f is not None:
            yield f
            f = f.parent

    def __repr__(self) -> str:  # for debugging and test failures
        line = getattr(self.node, "lineno", 0)
        return f"<Frame {self.kind}{'/' + self.branch if self.branch else ''} line {line}>"


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_BLOCKS = (ast.Module, ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.ExceptHandler, *_FUNCTIONS)


class _Frames(dict):
    """node -> Frame, computed on first access from the parents: ``index.frame[node]``."""

    def __init__(self, index: Index) -> None:
        super().__init__()
        self.index = index
        self.opened: dict[tuple[int, str | None], Frame] = {}  # (id(opener), branch) -> its frame

    def __missing__(self, node: ast.AST) -> Frame:
        return self.index._frame_of(node)

    def get(self, node, default=None):  # type: ignore[override]
        frame = dict.get(self, node)
        if frame is not None:
            return frame
        if node not in self.index.pos:
            return default
        return self.index._frame_of(node)


class Index:
    """What the walk records: ``order`` (pre-order), ``pos``, ``parent``, nodes by type; frames on demand."""

    __slots__ = ("tree", "order", "pos", "parent", "by_type", "root", "frame", "_ends", "_bodies", "_scopes")

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.order: list[ast.AST] = []
        self.pos: dict[ast.AST, int] = {}
        self.parent: dict[ast.AST, ast.AST] = {}
        self.by_type: dict[type, list[ast.AST]] = defaultdict(list)
        self.root = Frame(None, MODULE, tree)
        self.frame = _Frames(self)
        dict.__setitem__(self.frame, tree, self.root)
        self._ends: dict[ast.AST, int] = {}
        self._bodies: dict[ast.AST, list[ast.AST]] = {}
        self._scopes: list[int] | None = None  # where functions, lambdas and classes start, sorted
        self._walk()

    # ---- the walk ------------------------------------------------------------------
    def _walk(self) -> None:
        # The hottest loop of the checker (every node of every file): no per-value isinstance, no
        # per-node list of children; positions are numbered afterwards, in C.
        order, parent, by_type = self.order, self.parent, self.by_type
        push_fields, lst = _PUSH, list
        stack: list[ast.AST] = [self.tree]
        pop, push, append = stack.pop, stack.append, order.append
        while stack:
            node = pop()
            append(node)
            t = type(node)
            by_type[t].append(node)
            fields = push_fields.get(t)
            if fields is None:
                fields = _push_fields(t)
            for f in fields:
                v = getattr(node, f, None)
                if v is None:
                    continue
                if type(v) is lst:
                    for c in reversed(v):
                        if c is not None:  # a dict's ``**`` key, a keyword-only argument without default
                            parent[c] = node
                            push(c)
                else:
                    parent[v] = node
                    push(v)
        self.pos.update(zip(order, range(len(order))))

    def forget_answers(self) -> None:
        """Drop what other parts memoised on the frames (the syntax stays)."""
        for frame in (*dict.values(self.frame), *self.frame.opened.values()):
            frame.memo = None

    # ---- places ----------------------------------------------------------------------
    def end(self, node: ast.AST) -> int:
        """One past the pre-order index of ``node``'s last descendant."""
        hit = self._ends.get(node)
        if hit is not None:
            return hit
        last = _last_child(node)
        if last is None or last not in self.pos:
            out = self.pos.get(node, -1) + 1
        else:
            out = self.end(last)
        self._ends[node] = out
        return out

    def subtree(self, node: ast.AST) -> list[ast.AST]:
        """``node`` and every node below it, in source order (what ``ast.walk`` reaches, ordered)."""
        start = self.pos.get(node)
        if start is None:
            return [node]
        return self.order[start:self.end(node)]

    def below(self, node: ast.AST) -> list[ast.AST]:
        """The nodes under ``node``, not ``node`` itself."""
        start = self.pos.get(node)
        if start is None:
            return []
        return self.order[start + 1:self.end(node)]

    def contains(self, outer: ast.AST, node: ast.AST) -> bool:
        """``node`` is ``outer`` or below it."""
        start, at = self.pos.get(outer), self.pos.get(node)
        return start is not None and at is not None and start <= at < self.end(outer)

    def ancestors(self, node: ast.AST):
        parent = self.parent
        node = parent.get(node)  # type: ignore[assignment]
        while node is not None:
            yield node
            node = parent.get(node)  # type: ignore[assignment]

    def block_of(self, stmt: ast.AST) -> list[ast.stmt] | None:
        """The statement list (``body``, ``orelse``, ``finalbody``) that holds ``stmt``, else None."""
        up = self.parent.get(stmt)
        return next((part for part in (getattr(up, "body", None), getattr(up, "orelse", None),
                                        getattr(up, "finalbody", None))
                     if isinstance(part, list) and any(s is stmt for s in part)), None)

    def earlier_statements(self, node: ast.AST, upto: ast.AST | None = None):
        """The statements that run before ``node`` in each block around it, innermost block first: in the
        statement list (``body``, ``orelse``...) that holds ``node``'s branch. Up to the function ``upto``'s body,
        or, without one, up to the first function around ``node``."""
        child = node
        for block in self.ancestors(node):
            if isinstance(block, _BLOCKS):
                for part in (getattr(block, "body", None), getattr(block, "orelse", None), getattr(block, "finalbody", None)):
                    if isinstance(part, list) and any(s is child for s in part):
                        yield from part[:next(i for i, s in enumerate(part) if s is child)]
                        break
            if block is upto or (upto is None and isinstance(block, _FUNCTIONS)):
                return
            child = block

    # ---- frames -----------------------------------------------------------------------
    def _frame_of(self, node: ast.AST) -> Frame:
        """The frame ``node`` sits in: found from its parent (the frame the parent opens for the field
        holding ``node``, else the parent's own frame), memoised for the path walked."""
        frames = self.frame
        path = []
        cur = node
        while True:
            if cur in frames:
                frame = dict.__getitem__(frames, cur)
                break
            up = self.parent.get(cur)
            if up is None:
                frame = self.root
                break
            path.append((cur, up))
            cur = up
        openers, setitem = _OPENERS, dict.__setitem__
        for child, up in reversed(path):
            t = type(up)
            if t in openers or t is _COMPREHENSION:  # else: the child sits in its parent's frame
                frame = self._opened(up, child, frame)
            setitem(frames, child, frame)
        return frame

    def _opened(self, up: ast.AST, child: ast.AST, outer: Frame) -> Frame:
        """The frame that ``up`` (sitting in ``outer``) opens for its child ``child``, or ``outer``."""
        t = type(up)
        if t is ast.comprehension:  # the first iterable of a comprehension runs once, outside it
            comp = self.parent.get(up)
            if child is up.iter and comp is not None and comp.generators[0] is up and outer.kind == COMP:  # type: ignore[attr-defined]
                return outer.parent  # type: ignore[return-value]
            return outer
        if t in _OPENERS:
            kind, branch = _OPENERS[t](self, up, child)
            if kind is None:
                return outer
            key = (id(up), branch)
            frame = self.frame.opened.get(key)
            if frame is None:
                frame = self.frame.opened[key] = Frame(outer, kind, up, branch)
            return frame
        return outer

    def in_list(self, child: ast.AST, stmts: list) -> bool:
        """``child`` (a direct child of the node owning ``stmts``) is one of them: a position test."""
        if not stmts:
            return False
        pos = self.pos
        at = pos.get(child)
        return at is not None and pos[stmts[0]] <= at <= pos[stmts[-1]]

    # ---- bodies ----------------------------------------------------------------------------
    def body(self, region: ast.AST) -> list[ast.AST]:
        """The nodes a loop, comprehension, ``with``, function or module runs as its body, in its own
        unit (nested functions, lambdas and classes left out), in source order; cached.

        A loop's header and ``else`` are not its body; a comprehension's body is its element(s),
        conditions and later iterables (its first iterable runs once, outside)."""
        hit = self._bodies.get(region)
        if hit is not None:
            return hit
        if isinstance(region, _COMPS):
            gens = region.generators
            skip = [(self.pos[gens[0].iter], self.end(gens[0].iter))]
            skip += [(self.pos[g.target], self.end(g.target)) for g in gens]
            out = [n for n in self.local(self.pos[region] + 1, self.end(region), skip)
                   if not isinstance(n, ast.comprehension)]
        else:
            stmts = getattr(region, "body", None)
            if not isinstance(stmts, list) or not stmts:
                out = []
            else:
                out = self.local(self.pos[stmts[0]], self.end(stmts[-1]))
        self._bodies[region] = out
        return out

    def local(self, lo: int, hi: int, skip: list[tuple[int, int]] = ()) -> list[ast.AST]:  # type: ignore[assignment]
        """The nodes of pre-order positions [lo, hi) outside nested functions, lambdas and classes
        (and outside the ``skip`` ranges, subtrees too): slices of ``order`` between the subtrees cut
        out (all subtrees, so they nest or are apart), not a test per node."""
        starts = self._scopes
        if starts is None:
            pos = self.pos
            starts = self._scopes = sorted(pos[n] for t in _SCOPES for n in self.by_type.get(t, ()))
        order, end = self.order, self.end
        cuts = [(s, end(order[s])) for s in starts[bisect_left(starts, lo):bisect_left(starts, hi)]]
        if skip:
            cuts = sorted(cuts + [c for c in skip if c[0] < hi])
        out: list[ast.AST] = []
        cursor = lo
        for a, b in cuts:
            if a >= cursor:
                out += order[cursor:a]
            if b > cursor:
                cursor = b
        out += order[cursor:hi]
        return out


def _last_child(node: ast.AST) -> ast.AST | None:
    for f in reversed(child_fields(type(node))):
        v = getattr(node, f, None)
        if type(v) is list:
            for c in reversed(v):
                if isinstance(c, _AST):
                    return c
        elif isinstance(v, _AST):
            return v
    return None


# ---- which field of a frame-opening node holds the child ---------------------------------------
def _function(index, up, child):
    return (FUNCTION, None) if index.in_list(child, up.body) else (None, None)


def _lambda(index, up, child):
    return (LAMBDA, None) if child is up.body else (None, None)


def _class(index, up, child):
    return (CLASS, None) if index.in_list(child, up.body) else (None, None)


def _loop(index, up, child):
    return (LOOP, None) if index.in_list(child, up.body) else (None, None)


def _if(index, up, child):
    body, orelse = up.body, up.orelse
    if child is body or (type(body) is list and index.in_list(child, body)):
        return IF, "body"
    if child is orelse or (type(orelse) is list and index.in_list(child, orelse)):
        return IF, "else"
    return None, None


def _with(index, up, child):
    return (WITH, None) if index.in_list(child, up.body) else (None, None)


def _handler(index, up, child):
    return (EXCEPT, None) if index.in_list(child, up.body) else (None, None)


def _comp(index, up, child):
    return COMP, None  # generators and element(s); the first iterable is handled by its generator


_OPENERS = {
    ast.FunctionDef: _function, ast.AsyncFunctionDef: _function, ast.Lambda: _lambda, ast.ClassDef: _class,
    ast.For: _loop, ast.AsyncFor: _loop, ast.While: _loop, ast.If: _if, ast.IfExp: _if,
    ast.With: _with, ast.AsyncWith: _with, ast.ExceptHandler: _handler,
    ast.ListComp: _comp, ast.SetComp: _comp, ast.GeneratorExp: _comp, ast.DictComp: _comp,
}
