"""The one walk over a file: every node visited once, in source order, with its parent and its frame.

A *frame* is the region of code a node sits in: the module, a function body, a
class body, a loop body, a comprehension's per-item part, a ``with`` body, one
branch of an ``if``, an ``except`` block. Frames form a tree much shorter than
the syntax tree, so "the innermost loop around this call" or "the grad mode
here" reads a handful of frames instead of searching every ancestor. The walk
records for every node its frame, its parent and its place in the pre-order
list (a subtree is a contiguous slice of it), and lists the nodes of each type;
everything else in ``semantic/`` is computed from those lists, never by walking
the tree again.
"""

from __future__ import annotations

import ast
from collections import defaultdict

__all__ = ["Frame", "Index", "MODULE", "FUNCTION", "LAMBDA", "CLASS", "LOOP", "COMP", "WITH", "IF", "EXCEPT"]

MODULE, FUNCTION, LAMBDA, CLASS, LOOP, COMP, WITH, IF, EXCEPT = (
    "module", "function", "lambda", "class", "loop", "comp", "with", "if", "except")

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_COMPS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


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


class Index:
    """What the walk records: ``order`` (pre-order), ``parent``, ``frame``, subtree ends, nodes by type."""

    __slots__ = ("tree", "order", "pos", "end", "parent", "frame", "by_type", "root", "_bodies")

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.order: list[ast.AST] = []
        self.pos: dict[ast.AST, int] = {}
        self.end: dict[ast.AST, int] = {}
        self.parent: dict[ast.AST, ast.AST] = {}
        self.frame: dict[ast.AST, Frame] = {}
        self.by_type: dict[type, list[ast.AST]] = defaultdict(list)
        self.root = Frame(None, MODULE, tree)
        self._bodies: dict[ast.AST, list[ast.AST]] = {}
        self._walk()

    # ---- the walk ------------------------------------------------------------------
    def _walk(self) -> None:
        order, pos, end, parent, frames, by_type = self.order, self.pos, self.end, self.parent, self.frame, self.by_type
        special = _SPECIAL
        iter_children = ast.iter_child_nodes
        stack: list = [(self.tree, self.root)]
        pop, push = stack.pop, stack.append
        while stack:
            node, frame = pop()
            if frame is None:  # the marker pushed before a node's children: its subtree ends here
                end[node] = len(order)
                continue
            pos[node] = len(order)
            order.append(node)
            frames[node] = frame
            by_type[type(node)].append(node)
            handler = special.get(type(node))
            if handler is None:
                kids = [(c, frame) for c in iter_children(node)]
            else:
                kids = handler(node, frame)
            if not kids:
                continue
            push((node, None))
            for child, child_frame in reversed(kids):
                parent[child] = node
                push((child, child_frame))

    # ---- queries -------------------------------------------------------------------------
    def subtree(self, node: ast.AST) -> list[ast.AST]:
        """``node`` and every node below it, in source order (what ``ast.walk`` reaches, ordered)."""
        start = self.pos.get(node)
        if start is None:
            return [node]
        return self.order[start:self.end.get(node, start + 1)]

    def below(self, node: ast.AST) -> list[ast.AST]:
        """The nodes under ``node``, not ``node`` itself."""
        start = self.pos.get(node)
        if start is None:
            return []
        return self.order[start + 1:self.end.get(node, start + 1)]

    def contains(self, outer: ast.AST, node: ast.AST) -> bool:
        """``node`` is ``outer`` or below it."""
        start, at = self.pos.get(outer), self.pos.get(node)
        return start is not None and at is not None and start <= at < self.end.get(outer, start + 1)

    def body(self, region: ast.AST) -> list[ast.AST]:
        """The nodes a loop, comprehension, ``with``, function or module runs as its body, in its own
        unit (nested functions, lambdas and classes left out), in source order; cached.

        A loop's header and ``else`` are not its body; a comprehension's body is its element(s),
        conditions and later iterables (its first iterable runs once, outside)."""
        hit = self._bodies.get(region)
        if hit is not None:
            return hit
        frames = self.frame
        if isinstance(region, _COMPS):
            first = region.generators[0].iter
            lo, hi = self.pos[first], self.end.get(first, self.pos[first] + 1)
            skip = {id(g.target) for g in region.generators}
            unit = frames[region].unit
            out = [n for n in self.below(region) if not lo <= self.pos[n] < hi and frames[n].unit is unit
                   and not isinstance(n, ast.comprehension) and id(n) not in skip
                   and not (isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and self._in_target(n, region))]
        else:
            stmts = getattr(region, "body", None)
            if not isinstance(stmts, list) or not stmts:
                out = []
            else:
                unit = region if isinstance(region, (*_FUNCS, ast.Lambda, ast.ClassDef)) else frames[region].unit
                lo, hi = self.pos[stmts[0]], self.end.get(stmts[-1], self.pos[stmts[-1]] + 1)
                out = [n for n in self.order[lo:hi] if frames[n].unit is unit]
        self._bodies[region] = out
        return out

    def _in_target(self, name: ast.AST, comp: ast.AST) -> bool:
        return any(self.contains(g.target, name) for g in comp.generators)  # type: ignore[attr-defined]

    def ancestors(self, node: ast.AST):
        parent = self.parent
        node = parent.get(node)  # type: ignore[assignment]
        while node is not None:
            yield node
            node = parent.get(node)  # type: ignore[assignment]


# ---- children with their frames, for the node types that open a frame ----------------------
def _function(node, frame):
    inner = Frame(frame, FUNCTION, node)
    kids = [(d, frame) for d in node.decorator_list]
    kids.append((node.args, frame))
    if node.returns is not None:
        kids.append((node.returns, frame))
    kids += [(s, inner) for s in node.body]
    return kids


def _lambda(node, frame):
    return [(node.args, frame), (node.body, Frame(frame, LAMBDA, node))]


def _class(node, frame):
    inner = Frame(frame, CLASS, node)
    kids = [(d, frame) for d in node.decorator_list]
    kids += [(b, frame) for b in node.bases]
    kids += [(k, frame) for k in node.keywords]
    kids += [(s, inner) for s in node.body]
    return kids


def _for(node, frame):
    inner = Frame(frame, LOOP, node)
    return [(node.target, frame), (node.iter, frame), *((s, inner) for s in node.body), *((s, frame) for s in node.orelse)]


def _while(node, frame):
    inner = Frame(frame, LOOP, node)
    return [(node.test, frame), *((s, inner) for s in node.body), *((s, frame) for s in node.orelse)]


def _if(node, frame):
    kids = [(node.test, frame)]
    if node.body:
        body = Frame(frame, IF, node, "body")
        kids += [(s, body) for s in node.body] if isinstance(node.body, list) else [(node.body, body)]
    if node.orelse:
        other = Frame(frame, IF, node, "else")
        kids += [(s, other) for s in node.orelse] if isinstance(node.orelse, list) else [(node.orelse, other)]
    return kids


def _with(node, frame):
    inner = Frame(frame, WITH, node)
    return [*((i, frame) for i in node.items), *((s, inner) for s in node.body)]


def _handler(node, frame):
    inner = Frame(frame, EXCEPT, node)
    kids = [(node.type, frame)] if node.type is not None else []
    return kids + [(s, inner) for s in node.body]


def _comp(node, frame):
    inner = Frame(frame, COMP, node)
    kids = [(g, inner) for g in node.generators]
    if isinstance(node, ast.DictComp):
        kids += [(node.key, inner), (node.value, inner)]
    else:
        kids.append((node.elt, inner))
    return kids


def _generator(node, frame):
    # The first generator's iterable is evaluated once, outside the comprehension.
    outer = frame.parent if frame.kind == COMP and frame.node.generators[0] is node else frame
    return [(node.target, frame), (node.iter, outer), *((i, frame) for i in node.ifs)]


_SPECIAL = {
    ast.FunctionDef: _function, ast.AsyncFunctionDef: _function, ast.Lambda: _lambda, ast.ClassDef: _class,
    ast.For: _for, ast.AsyncFor: _for, ast.While: _while, ast.If: _if, ast.IfExp: _if,
    ast.With: _with, ast.AsyncWith: _with, ast.ExceptHandler: _handler,
    ast.ListComp: _comp, ast.SetComp: _comp, ast.GeneratorExp: _comp, ast.DictComp: _comp,
    ast.comprehension: _generator,
}
