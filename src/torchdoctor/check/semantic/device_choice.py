"""Which device a branch is for, as far as the program shows: a test about the device around a node (``if
args.cuda:``, a flag a device choice sets), the branch that runs only on the CPU (the ``else`` of ``if
torch.cuda.is_available():``). ``Guards`` answers these questions through this mixin."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

from torchdoctor.check.astutil import dotted, string_value
from torchdoctor.check.patterns import lazy
from torchdoctor.check.semantic.bindings import Bindings
from torchdoctor.check.semantic.names import Names
from torchdoctor.check.semantic.walk import CLASS, FUNCTION, IF, LAMBDA, LOOP, Index

__all__ = ["DeviceChoices"]

_DEVICE_WORDS = lazy(r"cuda|gpu|device|accelerat|(^|_)cpu($|_only$)|^dev_?id$", re.IGNORECASE)  # (``--devid``, -1: the CPU)
_DEVICE_NAMES = frozenset({"gpu", "cpu", "cuda", "mps", "xpu"})
_GPU_FLAG = lazy(r"(?i)^(is_|use_|on_|has_|with_)?(cuda|gpu)(_mode|_available|_enabled)?$")
_NO_GPU_FLAG = lazy(r"(?i)^(no_|disable_|without_)(cuda|gpu)$|^(use_|force_|on_)?cpu(_only)?$")


class DeviceChoices:
    """Needs ``index``, ``names``, ``bindings``, ``segment`` and ``_test_memo`` (``Guards`` has them)."""

    index: Index
    names: Names
    bindings: Bindings
    segment: Callable[[ast.AST], str]
    _test_memo: Callable[[ast.AST, str, Callable[[], bool]], bool]

    def chooses_device(self, node: ast.AST) -> bool:
        """``node`` sits in a branch that a test about the device chose (``if args.cuda:``, ``x.cuda() if gpu else x``)."""
        frame = self.index.frame.get(node)
        while frame is not None:
            if frame.kind == IF and self._mentions_device(frame.node.test):  # type: ignore[attr-defined]
                return True
            if frame.kind == LOOP and isinstance(frame.node, ast.While) and self._mentions_device(frame.node.test):
                return True
            frame = frame.parent
        return False

    def device_test_around(self, node: ast.AST) -> tuple[ast.If, bool] | None:
        """The innermost ``if`` around ``node`` whose test is about the device, and whether ``node`` is in its ``else``."""
        frame = self.index.frame.get(node)
        while frame is not None:
            if frame.kind == IF and isinstance(frame.node, ast.If) and self._mentions_device(frame.node.test):  # type: ignore[attr-defined]
                return frame.node, frame.branch == "else"  # type: ignore[return-value]
            frame = frame.parent
        return None

    def _mentions_device(self, test: ast.AST) -> bool:
        def compute() -> bool:
            if isinstance(test, ast.Attribute) and test.attr in ("is_available", "device_count"):
                return False  # ``if torch.cuda.is_available:``, never called: always true, it chooses nothing
            for n in self.index.subtree(test):
                word = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else string_value(n)
                if word and _DEVICE_WORDS.search(word) and not self._constant_flag(n):
                    return True
                if isinstance(n, ast.Name) and self._flag_of_device_choice(n):
                    return True
            return False

        return self._test_memo(test, "device", compute)

    def _flag_of_device_choice(self, name: ast.Name) -> bool:
        """``FAST_MODE = True if opts.run_on == "GPU" else False`` (or ``= opts.run_on == "GPU"``), bound once at
        module level: a flag whose value a device choice made, whatever it is called."""
        bound = self.bindings.by_key.get(name.id, [])
        return len(bound) == 1 and (b := bound[0]).value is not None and not b.is_param \
            and isinstance(b.value, (ast.IfExp, ast.Compare, ast.BoolOp)) and any(  # (a device named in a string)
                isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value.lower().split(":")[0] in _DEVICE_NAMES
                for c in self.index.subtree(b.value))

    def _constant_flag(self, n: ast.AST) -> bool:
        """``use_gpu = True`` at the top of the script, never bound again: ``if use_gpu:`` always takes the CUDA
        branch, so it chooses nothing (a command-line option or an availability test would)."""
        if isinstance(n, ast.Attribute):  # ``cfg.use_gpu`` of ``self.use_gpu = True`` in the config's class
            return self._test_memo(n, "constant", lambda: self._constant_attribute(n.attr))  # type: ignore[attr-defined]
        if not isinstance(n, ast.Name):
            return False
        bound = self.bindings.by_key.get(n.id, [])
        if not bound and self.star_flag is not None and n.id not in self.names.from_imports:  # type: ignore[attr-defined]
            return self.star_flag(n.id)  # type: ignore[attr-defined]  # ``USE_CUDA = True`` of ``from model import *``
        reaching = self.bindings.at(n.id, n)
        if reaching is not None and not reaching.is_param and reaching.scope is not self.index.tree:
            # ``use_cuda = True  # use gpu or cpu`` in ``main()``, read there: every binding of that function's
            bound = [b for b in bound if b.scope is reaching.scope]
            return bool(bound) and all(isinstance(b.value, ast.Constant) and b.value.value is True
                                       and isinstance(b.node, ast.Assign) for b in bound)
        if reaching is not None and not reaching.is_param:  # (``def train(..., use_cuda)`` elsewhere: another name)
            bound = [b for b in bound if not b.is_param]
        return bool(bound) and all(isinstance(b.value, ast.Constant) and b.value.value is True and not b.is_param
                                   and self.index.frame[b.node].kind not in (FUNCTION, LAMBDA, CLASS)
                                   and isinstance(b.node, ast.Assign) for b in bound)

    def _constant_attribute(self, attr: str) -> bool:
        """Every assignment of an attribute named ``attr`` in the file is ``... = True`` (``self.use_gpu = True`` in a
        settings class), and no call passes it by keyword; or the option that sets it is a ``store_true`` flag whose
        default is True (``add_argument("--cuda", action="store_true", default=True)``: no command line turns it
        off): a constant, which chooses nothing either."""
        stores = [t for n in self.index.by_type.get(ast.Assign, ()) for t in n.targets  # type: ignore[attr-defined]
                  if isinstance(t, ast.Attribute) and t.attr == attr]
        options = [c for c in self.index.by_type.get(ast.Call, ()) if isinstance(c.func, ast.Attribute)  # type: ignore[attr-defined]
                   and c.func.attr == "add_argument" and option_dest(c) == attr]
        copies = [t for t in stores if isinstance(v := self.index.parent[t], ast.Assign)
                  and isinstance(v.value, ast.Attribute) and v.value.attr == attr]
        if options and len(copies) == len(stores):  # (``self.gpu_mode = args.gpu_mode``: the option, copied)
            stores = []
        if stores and not options and len(copies) == len(stores) and self.true_option is not None:  # type: ignore[attr-defined]
            return self.true_option(attr)  # type: ignore[attr-defined]  # (the option declared by main.py, importing this)
        if options and not stores:  # ``add_argument("--cuda", action="store_true", default=True)``: never False; nor is
            # ``add_argument("--gpu_mode", type=bool, default=True)``: ``bool("False")`` is True
            return all((any(k.arg == "action" and isinstance(k.value, ast.Constant) and k.value.value == "store_true"
                            for k in c.keywords) or any(k.arg == "type" and isinstance(k.value, ast.Name)
                                                        and k.value.id == "bool" for k in c.keywords))
                       and any(k.arg == "default" and isinstance(k.value, ast.Constant) and k.value.value is True
                               for k in c.keywords) for c in options)
        return bool(stores) and not options and all(isinstance(v := self.index.parent[t], ast.Assign) and isinstance(v.value, ast.Constant)
                                    and v.value.value is True for t in stores) \
            and not any(k.arg == attr for c in self.index.by_type.get(ast.Call, ()) for k in c.keywords)  # type: ignore[attr-defined]

    def on_cpu_branch(self, node: ast.AST) -> bool:
        """``node`` runs only where a test says the device is the CPU: ``if self.device == torch.device("cpu"):``,
        ``if x.device.type == "cpu":``, or the ``else`` of ``if torch.cuda.is_available():`` / ``if x.is_cuda:`` /
        ``if use_cuda:`` / ``if device == "cuda":``, or of ``if isinstance(net, nn.Module):`` (a hand-written function
        model, in d2l's helpers)."""
        child = node
        for parent in self.index.ancestors(node):
            if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                return False
            if isinstance(parent, (ast.If, ast.IfExp)) and child is not parent.test:
                says = self._device_test(parent.test)
                in_body = child in parent.body if isinstance(parent, ast.If) else child is parent.body
                if says is not None and says != "gpu_body" and (says == "cpu") == in_body:
                    return True
            child = parent
        return False

    def _device_test(self, test: ast.AST) -> str | None:
        """"cpu" or "gpu" for a test that tells which device runs, else None."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self._device_test(test.operand)
            return None if inner in (None, "gpu_body") else "gpu" if inner == "cpu" else "cpu"
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):  # ``not args.no_cuda and is_available()``:
            tests = [self._device_test(v) for v in test.values]  # its body needs the GPU, its ``else`` is where the
            said = set(tests) - {None}  # program runs without one; with another condition beside (``args.cuda and
            if said != {"gpu"}:  # args.fp16``), the ``else`` may run on the GPU too: "gpu_body"
                return None
            return "gpu" if None not in tests else "gpu_body"
        if isinstance(test, ast.Call):
            if (self.names.call_name(test) or "") == "isinstance" and len(test.args) == 2 \
                    and (self.names.qualname(test.args[1]) or "") in ("torch.nn.Module", "torch.nn.modules.module.Module"):
                return "gpu"  # d2l's ``if isinstance(net, nn.Module): ... else:`` a hand-written function model, on the CPU
            return "gpu" if (self.names.call_name(test) or "") in ("torch.cuda.is_available",) else None
        if isinstance(test, (ast.Name, ast.Attribute)):
            last = (dotted(test) or "").rsplit(".", 1)[-1]
            return "gpu" if _GPU_FLAG.match(last) else "cpu" if _NO_GPU_FLAG.match(last) else None
            # (``not args.no_cuda``: the GPU wanted)
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and (index := self._gpu_index_test(test)) is not None:
            return index  # ``if gpu_id >= 0:`` (else: the CPU, ``gpu_id = -1``)
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.NotEq)):
            text = " ".join(self._spelled(x) for x in (test.left, test.comparators[0]))
            # A literal compared with decides (``device == 'cuda'``, ``device`` bound to ``'cuda' if ... else
            # 'cpu'``: its value spells both); else the value a name holds (``_CPU = torch.device("cpu")``).
            said = " ".join(repr(x.value) for x in (test.left, test.comparators[0])
                            if isinstance(x, ast.Constant) and isinstance(x.value, str))
            kind = _device_word(said) or _device_word(text)
            if kind is None or "device" not in text and ".type" not in text:
                return None
            return kind if isinstance(test.ops[0], ast.Eq) else ("gpu" if kind == "cpu" else "cpu")
        return None

    @staticmethod
    def _gpu_index_test(test: ast.Compare) -> str | None:
        """"gpu" for ``gpu_id >= 0`` / ``gpu > -1`` / ``gpu != -1``, "cpu" for ``gpu_id < 0`` / ``== -1``, on a name
        that says GPU; None for any other test."""
        name = (dotted(test.left) or "").rsplit(".", 1)[-1].lower()
        right = test.comparators[0]
        value = right.value if isinstance(right, ast.Constant) else -right.operand.value \
            if isinstance(right, ast.UnaryOp) and isinstance(right.op, ast.USub) and isinstance(right.operand, ast.Constant) \
            else None
        if not _GPU_INDEX_NAME.search(name) or type(value) is not int:
            return None  # (``gpu0_bsz >= 0``: a batch size for GPU 0, no device index)
        op = test.ops[0]
        if isinstance(op, ast.GtE) and value == 0 or isinstance(op, ast.Gt) and value == -1 or isinstance(op, ast.NotEq) \
                and value == -1:
            return "gpu"
        if isinstance(op, ast.Lt) and value == 0 or isinstance(op, ast.Eq) and value == -1:
            return "cpu"
        return None

    def _spelled(self, expr: ast.AST) -> str:
        """The expression's text, or for a name the text of the value it holds (``_CPU = torch.device("cpu")``)."""
        if isinstance(expr, ast.Name):
            b = self.bindings.at(expr.id, expr)
            if b is not None and b.value is not None and not b.is_param:
                return f"{expr.id} {self.segment(b.value)}"
        return self.segment(expr)


_GPU_INDEX_NAME = lazy(r"(^|_)gpus?(_?(ids?|index|idx|num|no|number|device))?$")


def _device_word(text: str) -> str | None:
    """"cpu" or "gpu" for a text holding a quoted ``'cpu'`` or ``'cuda'``/``'cuda:N'``, else None."""
    return "cpu" if re.search(r"""["']cpu["']""", text) else \
        "gpu" if re.search(r"""["']cuda(:\d+)?["']""", text) else None


def option_dest(call: ast.Call) -> str | None:
    """The attribute an ``add_argument`` call sets: its ``dest=``, else its first long option (``--no-cuda`` ->
    ``no_cuda``)."""
    for k in call.keywords:
        if k.arg == "dest" and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str):
            return k.value.value
    names = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    long = next((n for n in names if n.startswith("--")), names[0] if names else None)
    return long.lstrip("-").replace("-", "_") if long else None
