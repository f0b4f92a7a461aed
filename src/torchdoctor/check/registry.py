"""Where rules register: ``@rule("TD601", ast.Call)`` on a small check function."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchdoctor.check.context import Context

RuleFunc = Callable[[ast.AST, "Context"], None]


@dataclass(frozen=True)
class RegisteredRule:
    code: str
    node_types: tuple[type[ast.AST], ...]
    func: RuleFunc


REGISTRY: list[RegisteredRule] = []


def rule(code: str, *node_types: type[ast.AST]) -> Callable[[RuleFunc], RuleFunc]:
    """Register ``func(node, ctx)`` to be called for every node of ``node_types``.

    A rule that judges a whole file registers for ``ast.Module``. A rule may
    report several codes (they share the analysis); ``code`` names the main one.
    """

    def decorate(func: RuleFunc) -> RuleFunc:
        REGISTRY.append(RegisteredRule(code, node_types, func))
        return func

    return decorate
