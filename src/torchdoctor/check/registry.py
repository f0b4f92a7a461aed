"""Where rules register: ``@rule("TD502", calls=("load",))`` on a small check function.

A rule names what it looks at, and the engine hands it exactly those nodes
from the semantic model's lists, in source order: the calls whose callee's
last name is one of ``calls``, the calls passing one of ``keywords``, every
node of ``node_types`` (``ast.Module``: once per file). Nothing walks the tree
for a rule; most nodes never reach any rule.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from torchdoctor.record import FrozenRecord

if TYPE_CHECKING:
    from torchdoctor.check.context import Context

RuleFunc = Callable[[ast.AST, "Context"], None]


class RegisteredRule(FrozenRecord):
    __slots__ = ("code", "node_types", "func", "codes", "calls", "keywords")

    def __init__(self, code: str, node_types: tuple[type[ast.AST], ...], func: RuleFunc, codes: tuple[str, ...] = (),
                 calls: tuple[str, ...] = (), keywords: tuple[str, ...] = ()) -> None:
        # codes: every code the rule may report (() means just ``code``); calls: callee last names that trigger
        # the rule; keywords: keyword arguments that trigger it
        self._fill(code, node_types, func, codes, calls, keywords)

    @property
    def all_codes(self) -> tuple[str, ...]:
        return self.codes or (self.code,)


REGISTRY: list[RegisteredRule] = []


def rule(code: str, *node_types: type[ast.AST], codes: tuple[str, ...] = (), calls: tuple[str, ...] = (),
         keywords: tuple[str, ...] = ()) -> Callable[[RuleFunc], RuleFunc]:
    """Register ``func(node, ctx)`` for the nodes it looks at (see the module docstring).

    A rule may report several codes (they share the analysis); ``code`` names the main one
    and ``codes`` lists them all, so that ``--select TD303`` still runs a rule registered
    under TD302 that also reports TD303.
    """

    def decorate(func: RuleFunc) -> RuleFunc:
        REGISTRY.append(RegisteredRule(code, tuple(node_types), func, tuple(codes), tuple(calls), tuple(keywords)))
        return func

    return decorate


@contextmanager
def only_rules(*rules: RegisteredRule) -> Iterator[list[RegisteredRule]]:
    """Run with exactly these rules registered, then restore the registry (for tests)."""
    from torchdoctor.check.engine import load_rules

    load_rules()  # the real modules import now, not inside the block
    saved = REGISTRY[:]
    REGISTRY[:] = list(rules)
    try:
        yield REGISTRY
    finally:
        REGISTRY[:] = saved
