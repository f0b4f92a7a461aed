"""Context: what a rule sees of one file: the tree, resolved names, parents, and ``report``."""

from __future__ import annotations

import ast
from functools import cached_property
from typing import TYPE_CHECKING

from torchdoctor.check.astutil import dotted
from torchdoctor.check.source import split_lines
from torchdoctor.findings import Edit, Finding, Location, Severity

if TYPE_CHECKING:
    from torchdoctor.check.facts import Facts


class Context:
    def __init__(self, path: str, source: str, tree: ast.Module, settings: object | None = None) -> None:
        self.path = path
        self.source = source
        self.tree = tree
        self.settings = settings
        self.findings: list[Finding] = []
        self.lines = split_lines(source)  # str.splitlines also breaks at \f, \v, \x1c..: ast does not
        if self.lines and not self.lines[-1]:
            self.lines.pop()  # as splitlines: no empty line after the final newline
        self.imports: dict[str, str] = {}  # local name -> qualified name ("nn" -> "torch.nn")
        self.parents: dict[ast.AST, ast.AST] = {}
        self.enabled: set[str] | None = None  # None: every code

    # ---- names -------------------------------------------------------------
    def qualname(self, node: ast.AST) -> str | None:
        """The dotted name an expression refers to through the file's imports.

        ``nn.Linear`` -> ``torch.nn.Linear`` after ``import torch.nn as nn``;
        ``load`` -> ``torch.load`` after ``from torch import load``. Names that
        are not imported resolve to themselves (``model.cuda`` -> ``model.cuda``).
        """
        name = dotted(node)
        if name is None:
            return None
        head, dot, rest = name.partition(".")
        return self.imports.get(head, head) + dot + rest

    def call_name(self, node: ast.AST) -> str | None:
        """``qualname`` of the function a Call calls, else None."""
        return self.qualname(node.func) if isinstance(node, ast.Call) else None

    # ---- tree --------------------------------------------------------------
    def parent(self, node: ast.AST) -> ast.AST | None:
        return self.parents.get(node)

    def ancestors(self, node: ast.AST):
        node = self.parents.get(node)
        while node is not None:
            yield node
            node = self.parents.get(node)

    @cached_property
    def facts(self) -> Facts:
        from torchdoctor.check.facts import Facts

        return Facts(self)

    # ---- output ------------------------------------------------------------
    def wants(self, code: str) -> bool:
        return self.enabled is None or code in self.enabled

    def location(self, node: ast.AST) -> Location:
        line = getattr(node, "lineno", 1)
        end_line = getattr(node, "end_lineno", None)
        return Location(
            self.path,
            line,
            self.char_col(line, getattr(node, "col_offset", 0)) + 1,
            end_line,
            self.char_col(end_line, node.end_col_offset) + 1 if end_line and getattr(node, "end_col_offset", None) is not None else None,
        )

    def char_col(self, line: int, byte_col: int) -> int:
        """ast columns count UTF-8 bytes; people and editors count characters."""
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        if text.isascii():
            return byte_col
        return len(text.encode("utf-8")[:byte_col].decode("utf-8", "replace"))

    def segment(self, node: ast.AST) -> str:
        """The node's source text (as ast.get_source_segment, which re-splits the whole file per call)."""
        line, end_line = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        col, end_col = getattr(node, "col_offset", None), getattr(node, "end_col_offset", None)
        lines = self._segment_lines
        if line is None or end_line is None or col is None or end_col is None or end_line > len(lines):
            return ""
        if line == end_line:
            return lines[line - 1].encode()[col:end_col].decode("utf-8", "replace")
        first = lines[line - 1].encode()[col:].decode("utf-8", "replace")
        last = lines[end_line - 1].encode()[:end_col].decode("utf-8", "replace")
        return first + "".join(lines[line:end_line - 1]) + last

    @cached_property
    def _segment_lines(self) -> list[str]:
        import re  # the line breaks ast counts, kept (str.splitlines also breaks at \f and \x1c)

        return re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z", self.source)

    def replace_edit(self, node: ast.AST, text: str) -> Edit:
        """An edit replacing the node's source text with ``text``."""
        return Edit(
            node.lineno,
            self.char_col(node.lineno, node.col_offset),
            node.end_lineno,
            self.char_col(node.end_lineno, node.end_col_offset),
            text,
        )

    def insert_edit(self, line: int, byte_col: int, text: str) -> Edit:
        """An edit inserting ``text`` at an ast position (1-based line, UTF-8 byte column)."""
        col = self.char_col(line, byte_col)
        return Edit(line, col, line, col, text)

    def report(
        self,
        code: str,
        node: ast.AST,
        message: str,
        *,
        fix: str | None = None,
        edits: tuple[Edit, ...] = (),
        severity: Severity | None = None,
    ) -> None:
        if self.wants(code):
            self.findings.append(Finding(code, message, self.location(node), fix, edits, severity))
