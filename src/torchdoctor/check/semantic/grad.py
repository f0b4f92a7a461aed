"""The autograd mode at a node, as far as the program shows: ``no_grad``/``enable_grad``/``inference_mode`` blocks
and decorators around it, ``torch.set_grad_enabled(False)`` statements before it (in its blocks, or in the
``__init__`` of the object whose method it is), and, for a function, the mode at every call of it. ``Guards``
answers these questions through this mixin."""

from __future__ import annotations

import ast
from collections.abc import Callable

from torchdoctor.check.astutil import is_false, is_true, keyword
from torchdoctor.check.patterns import lazy
from torchdoctor.check.semantic.names import Names
from torchdoctor.check.semantic.walk import CLASS, FUNCTION, LAMBDA, WITH, Frame, Index

__all__ = ["GradModes"]

_LIGHTNING_EVAL_HOOKS = frozenset({"validation_step", "test_step", "predict_step"})
_OFF_WRAPPER = lazy(r"(?i)^\w*(inference_mode|no_?grad)\w*$")  # (``@nograd``: faster-rcnn's own wrapper)


class GradModes:
    """Needs ``index``, ``names``, ``call_sites`` and the memo sets ``_busy``, ``_mode_memo``, ``_grad_toggles``
    (``Guards.__init__`` makes them)."""

    index: Index
    names: Names
    call_sites: Callable[[ast.AST], list[ast.Call]]
    _busy: set[ast.AST]
    _mode_memo: dict[ast.AST, str]
    _grad_toggles: list[ast.AST] | None

    def grad_call(self, expr: ast.AST) -> str | None:
        """"off", "on" or "maybe" for a grad-mode context manager or decorator expression."""
        call = expr if isinstance(expr, ast.Call) else None
        q = self.names.qualname(call.func if call else expr) or ""
        last = q.rsplit(".", 1)[-1]
        if last == "no_grad":
            return "off"
        if last == "enable_grad":
            return "on"
        if last == "inference_mode":
            kw = keyword(call, "mode") if call else None
            arg = (call.args[0] if call and call.args else None) or (kw.value if kw else None)
            return "on" if is_false(arg) else ("off" if arg is None or is_true(arg) else "maybe")
        if last == "set_grad_enabled" and call is not None and call.args:
            arg = call.args[0]
            return "off" if is_false(arg) else ("on" if is_true(arg) else "maybe")
        if _OFF_WRAPPER.search(last) and last != "set_grad_enabled":
            return "off"  # a project's wrapper: ``@smart_inference_mode()``, ``@maybe_no_grad()``
        return None

    def grad_mode(self, node: ast.AST) -> str:
        """The autograd mode at ``node`` as far as the program shows: "on", "off" or "maybe"."""
        frame = self.index.frame.get(node)
        while frame is not None:
            kind = frame.kind
            if kind == WITH:
                mode = self._with_mode(frame)
                if mode is not None:
                    return mode
            elif kind == FUNCTION:
                return self._function_mode(frame.node, node)
            elif kind == LAMBDA:
                return "on"
            frame = frame.parent
        return "off" if self._disabled_before(self.index.tree, node) else "on"

    def _with_mode(self, frame: Frame) -> str | None:
        memo = frame.memo if frame.memo is not None else {}
        frame.memo = memo
        if "grad" not in memo:
            memo["grad"] = next((m for i in frame.node.items if (m := self.grad_call(i.context_expr)) is not None), None)  # type: ignore[attr-defined]
        return memo["grad"]

    def _function_mode(self, func: ast.AST, node: ast.AST) -> str:
        for dec in func.decorator_list:  # type: ignore[attr-defined]
            mode = self.grad_call(dec)
            if mode is not None:
                return mode
        if func.name in _LIGHTNING_EVAL_HOOKS and self._in_lightning_module(func):  # type: ignore[attr-defined]
            return "off"  # Lightning runs ``validation_step``/``test_step``/``predict_step`` under no_grad
        if self._disabled_before(func, node) or self._disabled_by_init(func):
            return "off"
        return self.callers_mode(func)

    def _in_lightning_module(self, func: ast.AST) -> bool:
        frame = self.index.frame.get(func)
        cls = frame.node if frame is not None and frame.kind == CLASS else None
        return cls is not None and any("Lightning" in (self.names.qualname(b) or "") for b in cls.bases)  # type: ignore[attr-defined]

    def callers_mode(self, func: ast.AST) -> str:
        """A function runs in the grad mode of its call sites when every one of them agrees."""
        if func in self._mode_memo:
            return self._mode_memo[func]
        if func in self._busy:
            return "on"
        self._busy.add(func)
        try:
            modes = {self.grad_mode(s) for s in self.call_sites(func)}
        finally:
            self._busy.discard(func)
        mode = modes.pop() if len(modes) == 1 else ("maybe" if "on" not in modes and modes else "on")
        self._mode_memo[func] = mode
        return mode

    def _toggles(self) -> list[ast.AST]:
        """The file's ``set_grad_enabled(...)`` calls (most files have none: one look at the calls, once)."""
        if self._grad_toggles is None:
            self._grad_toggles = [n for n in self.index.by_type.get(ast.Call, ()) if "set_grad_enabled" in (
                getattr(n.func, "attr", None), getattr(n.func, "id", None))]  # type: ignore[attr-defined]
        return self._grad_toggles

    def _disabled_before(self, scope: ast.AST, node: ast.AST) -> bool:
        """The last statement ``torch.set_grad_enabled(...)`` that runs before ``node`` in its body, or in the blocks
        around it (``if __name__ == "__main__":``), turned autograd off."""
        if not self._toggles():
            return False
        last: tuple[tuple[int, int], str | None] | None = None
        for stmt in self.index.earlier_statements(node, scope if not isinstance(scope, ast.Module) else None):
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and \
                    (self.names.call_name(stmt.value) or "").endswith("set_grad_enabled"):
                at = (stmt.lineno, stmt.col_offset)
                if last is None or at > last[0]:
                    last = (at, self.grad_call(stmt.value))
        return last is not None and last[1] == "off"

    def _disabled_by_init(self, func: ast.AST) -> bool:
        """A method of a class whose ``__init__`` turns autograd off for the process (``torch.set_grad_enabled(False)``
        as a statement of its body), and which turns it on nowhere."""
        if not self._toggles():
            return False
        frame = self.index.frame.get(func)
        cls = frame.node if frame is not None and frame.kind == CLASS else None
        if cls is None or func.name == "__init__":  # type: ignore[attr-defined]
            return False
        toggles = [self.grad_call(n) for n in self._toggles() if self.index.contains(cls, n)]
        if "off" not in toggles or any(t != "off" for t in toggles):
            return False
        init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)  # type: ignore[attr-defined]
        return init is not None and any(isinstance(st, ast.Expr) and isinstance(st.value, ast.Call)
                                        and (self.names.call_name(st.value) or "").endswith("set_grad_enabled")
                                        for st in init.body)
