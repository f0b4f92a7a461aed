"""Facts about one file that many rules share: program kind, name kinds, loops, guards, device moves.

Rules reach them as ``ctx.facts`` (built on first use, once per file). The API
below is stable; everything else in this module and in ``scopes.py`` /
``loops.py`` is private.

Program
    ``is_cuda_program``  the file can put work on an accelerator ("cuda" as a device
                         string, ``.cuda()``, ``torch.cuda.*``, ``torch.accelerator``).
    ``has_cuda_check``   ``is_available()`` / ``device_count()`` / ``torch.accelerator`` anywhere.
    ``is_ddp_program``   DDP, ``init_process_group``, ``DistributedSampler`` or torchrun env vars.
    ``trains``           some ``backward()`` call exists.

Tree (the full parent map, built before the engine's walk reaches any node)
    ``parent(node)``, ``ancestors(node)`` (nearest first), ``scope_of(node)`` (function,
    lambda or module), ``function_of(node)`` (nearest def or None), ``class_of(node)``.

Names
    ``kind_of(key, at)`` -> one of "model", "tensor", "loader", "optimizer", "scaler",
        "sampler", "device", "loss_fn", "scheduler", "wrapper" (DataParallel/DDP/compiled) or
        None. ``key`` is a name or ``self.attr``; the binding that reaches ``at`` decides
        (falls back to name hints such as ``train_loader``/``criterion`` when the value is unknown).
    ``expr_kind(expr, at)``  the same for any expression.
    ``module_classes``       names of ``nn.Module`` subclasses defined in the file.
    ``has_dropout_or_bn(expr, at)`` True/False/None (unknown) for a model expression.

Loops (``for``/``async for``/``while``)
    ``loops``                every loop, in source order.
    ``loop_kind(loop)``      "train" (iterates batches and calls backward), "eval" (batches
                             of a val/test loader, after ``.eval()``, under no_grad, or in a
                             function named like evaluate/validate/test/predict; no backward),
                             "epoch" (encloses a train/eval loop, directly or via a called
                             function, or binds ``epoch``), or None.
    ``is_batch_loop(loop)``  iterates a loader (``enumerate``/``tqdm``/``zip`` unwrapped),
                             or is a ``while`` loop fetching ``next(it)``/``get_batch()``.
    ``batch_vars(loop)``     names bound to batch data: the target (tuple unpacking, minus
                             enumerate's counter) plus ``x, y = batch`` / ``x = batch["x"]``.
    ``loader_of(loop)``      the iterated loader expression, or None.
    ``enclosing_loop(node, kind=None)``  nearest loop around ``node`` in the same function
                             (a comprehension over a loader counts: ``[model(x) for x in loader]``);
                             ``kind`` in "train", "eval", "epoch", "batch" (train or eval or
                             any batch loop).

Guards
    ``under_no_grad(node, strict=False)``  inside ``with torch.no_grad()/inference_mode()/
        set_grad_enabled(False)`` or a function decorated with them; an inner
        ``enable_grad()`` undoes it. A conditional ``set_grad_enabled(flag)`` counts unless strict.
    ``under_step_guard(node)``  inside ``if step % N == 0``-style tests (any ``%`` in the test).
    ``under_rank_guard(node)``  inside a test on a rank (``rank == 0``, ``local_rank``,
        ``is_main_process``, ``get_rank()``, ``is_master``...), after an early
        ``if rank != 0: return``, or in a ``@rank_zero_only`` function.

Device moves
    ``is_device_move(call)``  ``x.to(device)`` (not a dtype-only ``.to``), ``x.cuda()``,
                             ``to_device(x, ...)``.
    ``move_device(call)``     the target device's source text ("cuda" for ``.cuda()``), or None.
    ``is_moved(key, at)``     the value of ``key`` reaching ``at`` was moved to a device.

Calls
    ``is_backward_call(node)``, ``is_model_call(call)`` (calls a model/wrapper),
    ``mode_call(call)`` -> "train" | "eval" | None for ``m.train()``/``m.eval()``/``m.train(False)``,
    ``nodes`` / ``calls`` every node / every Call of the file; ``calls_to[name]`` the calls whose
    callee's last name is ``name``; ``cached(key, compute)`` a per-file memo for rules.
    ``resolve(call)`` -> functions defined in the file that the call may run; ``call_sites(func)``,
    ``reachable(func)`` -> those functions plus every in-file function they call.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cached_property
from typing import TYPE_CHECKING

from torchdoctor.check import guards, models
from torchdoctor.check.astutil import COMP_TYPES, FUNC_TYPES, LOOP_TYPES, dotted, is_false, keyword, method_name, string_value, walk_local
from torchdoctor.check.loops import LoopInfo, Loops
from torchdoctor.check.scopes import Scopes

if TYPE_CHECKING:
    from torchdoctor.check.context import Context

_MODULE_BASES = {"Module", "LightningModule", "PreTrainedModel", "Sequential", "ModuleList"}
_TRAIN_METHODS = {"train", "eval", "to", "cuda", "step", "zero_grad", "backward", "parameters", "forward"}


class Facts:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.nodes: list[ast.AST] = list(ast.walk(ctx.tree))  # every node once (breadth-first)
        self.parents: dict[ast.AST, ast.AST] = {
            child: node for node in self.nodes for child in ast.iter_child_nodes(node)
        }
        self.module_classes = self._module_classes()
        self.scopes = Scopes(ctx, self.parents, self.module_classes)
        self.functions: dict[str, list[ast.AST]] = {}
        for node in self.nodes:
            if isinstance(node, FUNC_TYPES):
                self.functions.setdefault(node.name, []).append(node)
        self.calls_to: dict[str, list[ast.Call]] = {}  # last name of the callee -> calls
        self._reach: dict[int, list[ast.AST]] = {}
        self._classes = {n.name: n for n in self.nodes if isinstance(n, ast.ClassDef)}
        self.calls: list[ast.Call] = [n for n in self.nodes if isinstance(n, ast.Call)]
        self.memo: dict[object, object] = {}  # per-file caches for rules: key -> value
        for call in self.calls:
            last = (dotted(call.func) or "").rsplit(".", 1)[-1]
            self.calls_to.setdefault(last, []).append(call)

    # ---- tree ------------------------------------------------------------------
    def parent(self, node: ast.AST) -> ast.AST | None:
        return self.parents.get(node)

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        node = self.parents.get(node)  # type: ignore[assignment]
        while node is not None:
            yield node
            node = self.parents.get(node)  # type: ignore[assignment]

    def scope_of(self, node: ast.AST) -> ast.AST:
        return self.scopes.scope_of(node)

    def function_of(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        return next((a for a in self.ancestors(node) if isinstance(a, FUNC_TYPES)), None)

    def class_of(self, node: ast.AST) -> ast.ClassDef | None:
        return self.scopes.class_of(node)

    # ---- program ---------------------------------------------------------------
    @cached_property
    def is_cuda_program(self) -> bool:
        return self._mentions_cuda() and self._places_work()

    def _places_work(self) -> bool:
        """Something is put on a device: a move, a ``device=`` argument, a default device.
        A file that only defines ``device`` and never uses it (a tutorial's last cell) runs on the CPU."""
        for call in self.calls:
            if self.is_device_move(call) and (self.move_device(call) or "").strip("'\"") != "cpu":
                return True
            if any(k.arg in ("device", "device_ids", "map_location") and string_value(k.value) != "cpu"
                   for k in call.keywords):
                return True
            if method_name(call) in ("set_default_device", "prepare", "setup") or \
                    (self.ctx.call_name(call) or "").endswith(("set_device", "pick_device")):
                return True
        return False

    def _mentions_cuda(self) -> bool:
        for node in self.nodes:
            s = string_value(node)
            if s is not None and re.fullmatch(r"cuda(:\d+)?", s.strip()):
                return True
            if isinstance(node, ast.Call) and method_name(node) == "cuda":
                return True
            if isinstance(node, ast.Attribute):
                q = self.ctx.qualname(node) or ""
                if q.startswith(("torch.cuda.", "torch.accelerator")) or q.endswith("pick_device"):
                    return True
        return False

    @cached_property
    def has_cuda_check(self) -> bool:
        for node in self.nodes:
            if isinstance(node, (ast.Attribute, ast.Name)):
                q = self.ctx.qualname(node) or ""
                if q.endswith((".is_available", ".device_count")) or q.startswith("torch.accelerator"):
                    return True
        return False

    @cached_property
    def is_ddp_program(self) -> bool:
        for node in self.nodes:
            if isinstance(node, (ast.Attribute, ast.Name)):
                last = (self.ctx.qualname(node) or "").rsplit(".", 1)[-1]
                if last in ("DistributedDataParallel", "init_process_group", "DistributedSampler", "DDP"):
                    return True
            elif string_value(node) in ("LOCAL_RANK", "WORLD_SIZE", "RANK"):
                return True
        return False

    @cached_property
    def trains(self) -> bool:
        return any(self.is_backward_call(n) for n in self.nodes)

    # ---- names -------------------------------------------------------------------
    def kind_of(self, key: str, at: ast.AST) -> str | None:
        return self.scopes.kind_of(key, at)

    def expr_kind(self, expr: ast.AST, at: ast.AST) -> str | None:
        return self.scopes.expr_kind(expr, at)

    def _module_classes(self) -> set[str]:
        classes = [n for n in self.nodes if isinstance(n, ast.ClassDef)]
        found: set[str] = set()
        changed = True
        while changed:
            changed = False
            for cls in classes:
                if cls.name in found:
                    continue
                bases = [(self.ctx.qualname(b) or "").rsplit(".", 1)[-1] for b in cls.bases]
                if any(b in _MODULE_BASES or b in found for b in bases):
                    found.add(cls.name)
                    changed = True
        return found

    def has_dropout_or_bn(self, expr: ast.AST, at: ast.AST) -> bool | None:
        """Whether the model ``expr`` evaluates to uses dropout or batch-norm (None: unknown)."""
        return models.has_dropout_or_bn(self, expr, at)

    # ---- loops ---------------------------------------------------------------------
    @cached_property
    def _loops(self) -> Loops:
        return Loops(self)

    @property
    def loops(self) -> list[ast.AST]:
        return list(self._loops.order)

    def loop_info(self, loop: ast.AST) -> LoopInfo:
        return self._loops.get(loop)

    def loop_kind(self, loop: ast.AST) -> str | None:
        return self._loops.get(loop).kind

    def is_batch_loop(self, loop: ast.AST) -> bool:
        return self._loops.get(loop).is_batch

    def batch_vars(self, loop: ast.AST) -> list[str]:
        return list(self._loops.get(loop).batch_vars)

    def loader_of(self, loop: ast.AST) -> ast.AST | None:
        return self._loops.get(loop).loader

    def enclosing_loop(self, node: ast.AST, kind: str | None = None) -> ast.AST | None:
        scope = self.scope_of(node)
        for a in self.ancestors(node):
            if a is scope:
                return None
            if isinstance(a, COMP_TYPES) and not self._loops.get(a).is_batch:
                continue  # ``[t.item() for t in losses]``: not a loop over batches
            if isinstance(a, (*LOOP_TYPES, *COMP_TYPES)) and _in_body(a, node, self):
                info = self._loops.get(a)
                if kind is None or info.kind == kind or (kind == "batch" and (info.is_batch or info.kind in ("train", "eval"))):
                    return a
        return None

    # ---- guards ----------------------------------------------------------------------
    def under_no_grad(self, node: ast.AST, strict: bool = False) -> bool:
        return guards.grad_mode(self, node) in (("off",) if strict else ("off", "maybe"))

    def under_step_guard(self, node: ast.AST) -> bool:
        return guards.under_step_guard(self, node)

    def under_rank_guard(self, node: ast.AST) -> bool:
        return guards.under_rank_guard(self, node)

    # ---- calls -------------------------------------------------------------------------
    def is_backward_call(self, node: ast.AST) -> bool:
        if not isinstance(node, ast.Call):
            return False
        if method_name(node) == "backward":
            return True
        return (self.ctx.call_name(node) or "") in ("torch.autograd.backward",)

    def is_model_call(self, call: ast.Call) -> bool:
        key = dotted(call.func)
        return key is not None and self.kind_of(key, call) in ("model", "wrapper")

    def mode_call(self, call: ast.AST) -> str | None:
        meth = method_name(call)
        if meth not in ("train", "eval") or not isinstance(call, ast.Call):
            return None
        key = dotted(call.func.value) or ""  # type: ignore[union-attr]
        if "trainer" in key.lower() or self.kind_of(key, call) not in (None, "model", "wrapper"):
            return None
        if meth == "eval":
            return "eval" if not call.args else None
        arg = call.args[0] if call.args else (keyword(call, "mode").value if keyword(call, "mode") else None)  # type: ignore[union-attr]
        if arg is None or (isinstance(arg, ast.Constant) and arg.value is True):
            return "train"
        return "eval" if is_false(arg) else None

    def resolve(self, call: ast.Call) -> list[ast.AST]:
        """In-file functions a call may run: ``f()`` -> ``def f``; ``self.m()`` -> the class's ``m``."""
        func = call.func
        if isinstance(func, ast.Name):
            if func.id in self._classes:  # Trainer(...) runs Trainer.__init__
                return [f for f in self.functions.get("__init__", []) if self.class_of(f) is self._classes[func.id]]
            return [f for f in self.functions.get(func.id, []) if self.class_of(f) is None]
        if not isinstance(func, ast.Attribute):
            return []
        key = dotted(func.value) or ""
        if key == "self":
            cls = self.class_of(call)
            return [f for f in self.functions.get(func.attr, []) if self.class_of(f) is cls]
        if func.attr in _TRAIN_METHODS or self.kind_of(key, call) is not None:
            return []
        return [f for f in self.functions.get(func.attr, []) if self.class_of(f) is not None]

    def cached(self, key: object, compute):  # type: ignore[no-untyped-def]
        """``compute()`` once per file under ``key`` (rules share expensive per-file answers)."""
        if key not in self.memo:
            self.memo[key] = compute()
        return self.memo[key]

    @cached_property
    def _call_sites(self) -> dict[int, list[ast.Call]]:
        out: dict[int, list[ast.Call]] = {}
        for node in self.calls:
            for f in self.resolve(node):
                out.setdefault(id(f), []).append(node)
        return out

    def call_sites(self, func: ast.AST) -> list[ast.Call]:
        """Calls in the file that may run ``func`` (see ``resolve``)."""
        return self._call_sites.get(id(func), [])

    def reachable(self, func: ast.AST) -> list[ast.AST]:
        """``func`` and every in-file function it may call, transitively, in discovery order."""
        if id(func) in self._reach:
            return self._reach[id(func)]
        out: list[ast.AST] = [func]
        i = 0
        while i < len(out):
            for node in walk_local(out[i].body):  # type: ignore[attr-defined]
                if isinstance(node, ast.Call):
                    out.extend(f for f in self.resolve(node) if f not in out)
            i += 1
        self._reach[id(func)] = out
        return out

    def calls_training(self, call: ast.Call) -> bool:
        """The call runs an in-file function that holds a training or evaluation loop."""
        return self._loops.calls_training(call)

    # ---- device moves ---------------------------------------------------------------------
    def is_device_move(self, call: ast.AST) -> bool:
        return self.move_device(call) is not None

    def move_device(self, call: ast.AST) -> str | None:
        if not isinstance(call, ast.Call):
            return None
        meth = method_name(call)
        if meth == "cuda":
            return "cuda"
        if meth == "to":
            dev = keyword(call, "device")
            arg = dev.value if dev else (call.args[0] if call.args else None)
            if arg is None or self._is_dtype(arg):
                return None
            return string_value(arg) or self.ctx.segment(arg)
        name = (dotted(call.func) or "").rsplit(".", 1)[-1]
        if name in ("to_device", "move_to_device", "move_to", "send_to_device") and len(call.args) >= 2:
            return self.ctx.segment(call.args[1])
        return None

    def _is_dtype(self, arg: ast.AST) -> bool:
        from torchdoctor.check.astutil import DTYPES

        q = self.ctx.qualname(arg) or ""
        if q.startswith("torch.") and q.rsplit(".", 1)[-1] in DTYPES:
            return True
        if isinstance(arg, ast.Attribute) and arg.attr == "dtype":
            return True
        key = dotted(arg) or ""
        return "dtype" in key.rsplit(".", 1)[-1].lower() or (isinstance(arg, ast.Name) and self.kind_of(arg.id, arg) == "tensor")

    def is_moved(self, key: str, at: ast.AST) -> bool:
        b = self.scopes.binding_at(key, at)
        return b is not None and b.value is not None and self.value_is_moved(b.value)

    def value_is_moved(self, value: ast.AST) -> bool:
        """A device move at the top of the expression, under dtype/shape methods: ``x.to(d).float()``."""
        node = value
        while True:
            if isinstance(node, ast.Call):
                if self.is_device_move(node):
                    return True
                if isinstance(node.func, ast.Attribute):
                    node = node.func.value
                    continue
            if isinstance(node, (ast.Subscript, ast.Starred)):
                node = node.value
                continue
            if isinstance(node, ast.DictComp):  # ``{k: v.to(device) for k, v in batch.items()}``
                node = node.value
                continue
            if isinstance(node, (ast.ListComp, ast.GeneratorExp)):
                node = node.elt
                continue
            return False


def _in_body(loop: ast.AST, node: ast.AST, facts: Facts) -> bool:
    """``node`` is in the loop's body (not its iterable or its target)."""
    if isinstance(loop, COMP_TYPES):  # its first iterable is evaluated once, outside
        return not any(a is loop.generators[0].iter for a in [node, *facts.ancestors(node)])  # type: ignore[attr-defined]
    header = [getattr(loop, "iter", None), getattr(loop, "target", None), getattr(loop, "test", None)]
    for a in [node, *facts.ancestors(node)]:
        if a is loop:
            return True
        if any(a is h for h in header if h is not None):
            return False
    return False
