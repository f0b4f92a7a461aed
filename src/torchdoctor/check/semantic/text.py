"""The file's text as ast counts it: lines, a node's source segment, character columns."""

from __future__ import annotations

import ast

from torchdoctor.check.patterns import lazy

__all__ = ["Text", "short"]

_LINES = lazy(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")  # lines with their breaks, as ast numbers them
_NEWLINE = lazy(r"\r\n|\r|\n")


class Text:
    def __init__(self, source: str) -> None:
        self.source = source
        # without breaks (str.splitlines also breaks at \f, \x1c...); str.split when there is no \r (5x faster)
        self.lines = source.split("\n") if "\r" not in source else _NEWLINE.split(source)
        self._with_breaks: list[str] | None = None

    def segment(self, node: ast.AST | None) -> str:
        """The node's source text (as ast.get_source_segment, which re-splits the whole file per call)."""
        if node is None:
            return ""
        line, end_line = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        col, end_col = getattr(node, "col_offset", None), getattr(node, "end_col_offset", None)
        if line is None or end_line is None or col is None or end_col is None:
            return ""
        if line == end_line:  # (most nodes: one line, whose break is not part of it)
            if end_line > len(self.lines):
                return ""
            text = self.lines[line - 1]
            if text.isascii():
                return text[col:end_col]
            return text.encode()[col:end_col].decode("utf-8", "replace")
        lines = self._with_breaks
        if lines is None:
            lines = self._with_breaks = _lines_with_breaks(self.source)
        if end_line > len(lines):
            return ""
        first = lines[line - 1].encode()[col:].decode("utf-8", "replace")
        last = lines[end_line - 1].encode()[:end_col].decode("utf-8", "replace")
        return first + "".join(lines[line:end_line - 1]) + last

    def char_col(self, line: int, byte_col: int) -> int:
        """ast columns count UTF-8 bytes; people and editors count characters."""
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        if text.isascii():
            return byte_col
        return len(text.encode("utf-8")[:byte_col].decode("utf-8", "replace"))


def _lines_with_breaks(source: str) -> list[str]:
    """``_LINES.findall(source)``; str.splitlines (10x faster) when it splits at the same places: no \r,
    and as many lines as \n make (no \f, \x1c, \u2028... in the text)."""
    if "\r" not in source:
        lines = source.splitlines(True)
        if len(lines) == source.count("\n") + (not source.endswith("\n") and source != ""):
            return lines
    return _LINES.findall(source)


def short(text: str, limit: int = 40, placeholder: str = "...") -> str:
    """A one-line name for a message: multi-line or long source collapses to its head (``f(...)``)."""
    text = text.strip()
    if "\n" not in text and len(text) <= limit:
        return text
    head = text.split("\n", 1)[0]
    paren = head.find("(")
    if 0 < paren <= limit:
        close = _closing(text, paren)  # (``torch.eq(pred, y).sum().data[0]``: ``torch.eq(...).sum().data[0]``)
        tail = text[close + 1:] if close is not None else ""
        if tail and "\n" not in tail and paren + 5 + len(tail) <= limit:
            return head[:paren] + "(...)" + tail
        return head[:paren] + "(...)"
    return head[:limit].rstrip() + placeholder


def _closing(text: str, opened: int) -> int | None:
    """Where the parenthesis opened at ``opened`` closes (brackets in strings are not told apart: a name only)."""
    depth = 0
    for i in range(opened, len(text)):
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return i
    return None
