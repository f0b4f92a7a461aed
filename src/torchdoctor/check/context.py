"""Context: what a rule sees of one file: the semantic model, the settings, and ``report``."""

from __future__ import annotations

import ast

from torchdoctor.check.semantic import SemanticModel, program, short
from torchdoctor.findings import Edit, Finding, Location, Severity


class Context:
    def __init__(self, path: str, source: str, tree: ast.Module, settings: object | None = None,
                 project: object | None = None, prebuilt: tuple | None = None) -> None:
        self.path = path
        self.source = source
        self.tree = tree
        self.settings = settings
        self.findings: list[Finding] = []
        self.sites: list[ast.AST] = []  # the node each finding was reported at (its construct)
        self.semantic = SemanticModel(tree, source, path, project, prebuilt)
        self.lines = self.semantic.text.lines  # as ast numbers them (str.splitlines also breaks at \f)
        self.imports = self.semantic.imports  # local name -> qualified name ("nn" -> "torch.nn")
        self.enabled: set[str] | None = None  # None: every code

    # ---- names (the semantic model's, for brevity in rules) ------------------------------------
    def qualname(self, node: ast.AST | None) -> str | None:
        """The dotted name an expression refers to through the file's imports."""
        return self.semantic.qualname(node)

    def call_name(self, node: ast.AST) -> str | None:
        """``qualname`` of the function a Call calls, else None."""
        return self.semantic.call_name(node)

    def parent(self, node: ast.AST) -> ast.AST | None:
        return self.semantic.parent(node)

    def ancestors(self, node: ast.AST):
        return self.semantic.ancestors(node)

    # ---- text ------------------------------------------------------------------------------------
    def segment(self, node: ast.AST | None) -> str:
        """The node's exact source text (for edits); messages use ``name``."""
        return self.semantic.segment(node)

    def name(self, node: ast.AST | None, limit: int = 40) -> str:
        """How a message names a node: its source on one line, long or multi-line text collapsed
        (``build(...)``); messages never paste a multi-line expression."""
        return short(self.semantic.segment(node), limit)

    def char_col(self, line: int, byte_col: int) -> int:
        return self.semantic.text.char_col(line, byte_col)

    # ---- output ------------------------------------------------------------------------------------
    def wants(self, code: str) -> bool:
        return self.enabled is None or code in self.enabled

    def location(self, node: ast.AST) -> Location:
        line = getattr(node, "lineno", 1)
        col = getattr(node, "col_offset", 0)
        end_line = getattr(node, "end_lineno", None)
        end_col = getattr(node, "end_col_offset", None)
        func = getattr(node, "func", None)
        if isinstance(node, ast.Call) and isinstance(func, ast.Attribute) and (func.end_lineno or line) > line:
            # ``DINOLoss(\n...\n).cuda()``: the method called is the site, on the line where it is written
            line, col = func.end_lineno, func.end_col_offset - len(func.attr.encode())  # type: ignore[operator]
        return Location(
            self.path,
            line,
            self.char_col(line, col) + 1,
            end_line,
            self.char_col(end_line, end_col) + 1 if end_line and end_col is not None else None,
        )

    def replace_edit(self, node: ast.AST, text: str) -> Edit:
        """An edit replacing the node's source text with ``text``."""
        return Edit(
            node.lineno,  # type: ignore[attr-defined]
            self.char_col(node.lineno, node.col_offset),  # type: ignore[attr-defined]
            node.end_lineno,  # type: ignore[attr-defined]
            self.char_col(node.end_lineno, node.end_col_offset),  # type: ignore[attr-defined]
            text,
        )

    def insert_edit(self, line: int, byte_col: int, text: str) -> Edit:
        """An edit inserting ``text`` at an ast position (1-based line, UTF-8 byte column)."""
        col = self.char_col(line, byte_col)
        return Edit(line, col, line, col, text)

    def _dead(self, node: ast.AST) -> bool:
        """``node`` sits in code that never runs: the body of ``if False:`` (``if 0:``), the ``else`` of ``if True:``,
        statements after ``assert False, "broken"`` (or a ``raise``, ``return``) in the same block. (Not the body of
        ``if distributed:`` under ``distributed = False  # set True to train on several GPUs``: a switch the user
        edits, whose code reviewers judge as live.)"""
        child = node
        for up in self.semantic.ancestors(node):
            if isinstance(up, ast.If) and isinstance(up.test, ast.Constant) and up.test.value in (False, True, 0, 1):
                if any(s is child for s in (up.body if not up.test.value else up.orelse)):
                    return True
            if isinstance(child, ast.stmt) and not isinstance(up, ast.Module) and _after_an_exit(up, child):
                # (not at a module's top: a notebook's cells run one by one, whatever an earlier cell raised)
                return True
            child = up
        return False

    def report(
        self,
        code: str,
        node: ast.AST,
        message: str,
        *,
        fix: str | None = None,
        edits: tuple[Edit, ...] = (),
        severity: Severity | None = None,
        unsafe: bool = False,
    ) -> None:
        """Record a finding at ``node``. ``unsafe`` marks edits that may change what the program does
        (applied only with ``--unsafe-fixes``)."""
        if self.wants(code) and not (code in program.QUIET_IN_TESTS and program.in_test(self.semantic, node)) \
                and not program.on_old_torch_branch(self.semantic, node) and not self._dead(node):
            self.findings.append(Finding(code, message, self.location(node), fix, edits, severity,
                                         unsafe_fix=bool(edits) and unsafe))
            self.sites.append(node)


def _after_an_exit(block: ast.AST, stmt: ast.stmt) -> bool:
    """``stmt`` follows, in the same statement list of ``block``, a statement that never lets control through:
    ``assert False, "do not use"``, ``raise``, ``return``, ``continue`` or ``break``."""
    for field in ("body", "orelse", "finalbody"):
        seq = getattr(block, field, None)
        if isinstance(seq, list) and any(s is stmt for s in seq):
            for s in seq:
                if s is stmt:
                    return False
                if isinstance(s, (ast.Raise, ast.Return, ast.Continue, ast.Break)) or isinstance(s, ast.Assert) \
                        and isinstance(s.test, ast.Constant) and not s.test.value:
                    return True
    return False
