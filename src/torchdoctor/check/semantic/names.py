"""Imported names and qualified names: ``nn.Linear`` -> ``torch.nn.Linear`` after ``import torch.nn as nn``."""

from __future__ import annotations

import ast

from torchdoctor.check.astutil import dotted
from torchdoctor.check.semantic.walk import Index

__all__ = ["Names"]


class Names:
    """The file's imports, read from the walk's Import/ImportFrom lists.

    ``imports`` maps a local name to the qualified name it stands for;
    ``relative`` maps names bound by ``from .mod import x`` to (level, module, name)
    for the project index; ``modules`` holds names bound by plain ``import x``.
    """

    def __init__(self, index: Index) -> None:
        self.imports: dict[str, str] = {}
        self.relative: dict[str, tuple[int, str, str]] = {}
        self.modules: set[str] = set()
        self.from_imports: dict[str, tuple[int, str, str]] = {}  # local -> (level, module, name), absolute too
        self.shadowed: list[tuple[int, str, str]] = []  # earlier imports of a local name imported again (branches:
        # ``if aug == "node": from dataset.dataset import Wrapper`` / ``elif ...: from dataset.dataset_mix import Wrapper``)
        self.star: list[tuple[int, str]] = []  # ``from models import *``: (level, module)
        for node in index.by_type.get(ast.Import, ()):
            for alias in node.names:  # type: ignore[attr-defined]
                local = alias.asname or alias.name.split(".")[0]
                self.modules.add(local)
                if alias.asname:
                    self.imports[alias.asname] = alias.name
                else:
                    self.imports.setdefault(local, local)
        for node in index.by_type.get(ast.ImportFrom, ()):
            module, level = node.module or "", node.level  # type: ignore[attr-defined]
            for alias in node.names:  # type: ignore[attr-defined]
                if alias.name == "*":
                    self.star.append((level, module))
                    continue
                local = alias.asname or alias.name
                if local in self.from_imports and self.from_imports[local] != (level, module, alias.name):
                    self.shadowed.append(self.from_imports[local])
                self.from_imports[local] = (level, module, alias.name)
                if level == 0 and module:
                    self.imports[local] = f"{module}.{alias.name}"
                else:
                    self.relative[local] = (level, module, alias.name)
        self._cache: dict[int, str | None] = {}

    def with_imports(self, more: dict[str, str]) -> Names:
        """A copy that also knows ``more`` (local name -> qualified name: module aliases a star import brings in)."""
        out = Names.__new__(Names)
        out.__dict__.update(self.__dict__)
        out.imports = {**more, **self.imports}
        out._cache = {}
        return out

    def qualname(self, node: ast.AST | None) -> str | None:
        """The dotted name an expression refers to through the imports (names not imported resolve to
        themselves: ``model.cuda`` -> ``model.cuda``); None for anything but a name or attribute chain."""
        if node is None:
            return None
        key = id(node)
        cache = self._cache
        if key in cache:
            return cache[key]
        name = dotted(node)
        if name is not None:
            head, dot, rest = name.partition(".")
            name = self.imports.get(head, head) + dot + rest
        cache[key] = name
        return name

    def call_name(self, node: ast.AST) -> str | None:
        """``qualname`` of the function a Call calls, else None."""
        return self.qualname(node.func) if isinstance(node, ast.Call) else None  # type: ignore[attr-defined]

    def is_imported(self, name: str) -> bool:
        return name in self.imports or name in self.relative
