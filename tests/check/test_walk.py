"""The one walk (semantic/walk.py) reaches exactly the nodes ``ast`` has, in source order, with their parents.

The walk skips, per node type, the fields that hold no nodes (walk._NOT_NODES) instead of testing each
value; a construct whose field it misjudged would lose nodes or crash. The reference here is
``ast.iter_child_nodes``, less the shared ``Load``/``Add``/... singletons the walk never visits.
"""

from __future__ import annotations

import ast
import textwrap

from torchdoctor.check.semantic.walk import Index

SINGLETONS = (ast.expr_context, ast.operator, ast.boolop, ast.unaryop, ast.cmpop)

TRICKY = textwrap.dedent('''
    from __future__ import annotations
    import os.path as p, sys
    from . import sibling
    x: int = 1
    y: "list[int]"
    (z): int = 2
    def f(a, /, b=1, *args, c, d=2, **kw) -> None:
        global G
        nonlocal_free = {**kw, "k": a, None: b}
        lam = lambda q=1, *, r: q + r
        return [i async for i in args] if a else {k: v for k, v in kw.items() if v}
    async def g():
        async with open(p) as fh, open(p):
            async for line in fh:
                await line
        def inner():
            nonlocal fh
    class C(Base, metaclass=M):
        """doc"""
        attr: int
        def m(self):
            try:
                pass
            except (ValueError, TypeError) as exc:
                raise RuntimeError from exc
            else:
                yield from range(3)
            finally:
                del self.attr
    match command:
        case ["go", direction] if direction:
            pass
        case {"x": 1, **rest}:
            pass
        case Point(x=0, y=_) | None | True:
            pass
        case [1, *others]:
            pass
        case str() as s:
            pass
    print(f"{x!r:>{width}} {y=}", *args, sep="", **kw)
    assert x < y <= z, "message"
    w = (yield) if False else not -x @ y
    s = x[1:2:3, ...]
    t = (a := 1)
    with a as (b, c):
        pass
    while t:
        break
    else:
        continue
''')


def reference(tree: ast.AST) -> tuple[list[ast.AST], dict[ast.AST, ast.AST]]:
    order: list[ast.AST] = []
    parent: dict[ast.AST, ast.AST] = {}

    def visit(node: ast.AST) -> None:
        order.append(node)
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, SINGLETONS):
                parent[child] = node
                visit(child)

    visit(tree)
    return order, parent


def test_the_walk_reaches_every_node_in_source_order_with_its_parent() -> None:
    tree = ast.parse(TRICKY)
    index = Index(tree)
    order, parent = reference(tree)
    assert index.order == order
    assert index.parent == parent
    assert index.pos == {n: i for i, n in enumerate(order)}
    assert {t: list(ns) for t, ns in index.by_type.items()} == {
        t: [n for n in order if type(n) is t] for t in {type(n) for n in order}}
    assert len(index.by_type[ast.MatchClass]) == 2 and index.by_type[ast.Global] and index.by_type[ast.MatchStar]


def test_a_body_leaves_out_nested_functions_lambdas_and_classes() -> None:
    tree = ast.parse("def f():\n    a = 1\n    def g():\n        b = 2\n    h = lambda: c\n    class K:\n        d = 3\n    e = 4\n")
    index = Index(tree)
    names = [n.id for n in index.body(tree.body[0]) if isinstance(n, ast.Name)]
    assert names == ["a", "h", "e"]
