"""Name bindings per scope and what each bound value is (model, tensor, loader, ...)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torchdoctor.check.astutil import (
    COMP_TYPES,
    FACTORIES,
    FUNC_TYPES,
    SCOPE_TYPES,
    dotted,
    func_params,
    method_name,
    string_value,
    target_names,
    walk_local,
)

if TYPE_CHECKING:
    from torchdoctor.check.context import Context

KINDS = ("model", "tensor", "loader", "optimizer", "scaler", "sampler", "device", "loss_fn", "scheduler", "wrapper")

_WRAPPERS = {"DataParallel", "DistributedDataParallel", "DDP", "FullyShardedDataParallel", "FSDP"}
_NOT_MODELS = re.compile(r"Tokenizer|Processor|Config|FeatureExtractor|Dataset")
_OPTIMIZERS = {"SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam", "LBFGS",
               "SparseAdam", "ASGD", "Rprop", "Lion", "Adafactor", "AdamW8bit", "Adam8bit", "LARS", "LAMB"}
_SAME_AS_RECEIVER = {"to", "cuda", "cpu", "float", "half", "double", "bfloat16", "train", "eval", "requires_grad_",
                     "detach", "clone", "contiguous", "long", "int", "bool", "view", "reshape", "squeeze",
                     "unsqueeze", "permute", "transpose", "flatten", "type", "pin_memory", "share_memory_",
                     "to_empty", "mean", "sum", "abs", "sigmoid", "softmax", "argmax", "exp", "log"}
_TENSOR_METHODS_ONLY = {"mean", "sum", "abs", "sigmoid", "softmax", "argmax", "exp", "log", "view", "reshape",
                        "squeeze", "unsqueeze", "permute", "transpose", "flatten", "detach", "contiguous"}
_NAME_HINTS = (
    (re.compile(r"(^|_)(model|net|network|encoder|decoder|backbone|teacher|student|generator|discriminator|classifier)s?$", re.I), "model"),
    (re.compile(r"(loader|^dl$|_dl$)", re.I), "loader"),
    (re.compile(r"^(optimizer|optim|opt|optimiser)$|_(optimizer|optim|opt)$", re.I), "optimizer"),
    (re.compile(r"^(criterion|loss_fn|loss_func|loss_function|lossfn)$", re.I), "loss_fn"),
    (re.compile(r"(^|_)scaler$", re.I), "scaler"),
    (re.compile(r"(^|_)sampler$", re.I), "sampler"),
    (re.compile(r"^(device|dev)$|_device$", re.I), "device"),
    (re.compile(r"(^|_)(scheduler|sched|lr_scheduler)$", re.I), "scheduler"),
)


def kind_from_name(key: str) -> str | None:
    """A weak guess from a name alone (``train_loader`` -> loader), used when nothing better is known."""
    last = key.rsplit(".", 1)[-1]
    for pattern, kind in _NAME_HINTS:
        if pattern.search(last):
            return kind
    return None


@dataclass
class Binding:
    key: str  # "model" or "self.model"
    scope: ast.AST  # Module / FunctionDef / Lambda / ClassDef (for self.* attributes)
    value: ast.AST | None  # the bound expression, None for parameters and loop targets
    pos: tuple[int, int]  # where the binding takes effect (end of its statement)
    node: ast.AST  # the statement (or arg) that binds
    index: int | None = None  # element of a tuple value bound to this name


class Scopes:
    """Collects every binding once, then answers ``kind_of(key, at)`` lazily."""

    def __init__(self, ctx: Context, parents: dict[ast.AST, ast.AST], module_classes: set[str]) -> None:
        self.ctx = ctx
        self.parents = parents
        self.module_classes = module_classes
        self.bindings: dict[tuple[int, str], list[Binding]] = {}
        self.param_receivers: set[str] = set()  # keys used as ``x.parameters()``
        self._busy: set[int] = set()
        self.functions: dict[str, list[ast.AST]] = {}  # plain functions (not methods) by name
        self.defined: set[str] = set(ctx.imports)  # names bound by def, class or import
        self.comp_bindings: dict[str, dict[int, Binding]] = {}  # name -> id(comprehension) -> its target
        self._collect(ctx.tree)

    # ---- collection ----------------------------------------------------------
    def scope_of(self, node: ast.AST) -> ast.AST:
        """The nearest enclosing function or lambda, else the module."""
        cur = self.parents.get(node)
        while cur is not None and not isinstance(cur, (*FUNC_TYPES, ast.Lambda)):
            cur = self.parents.get(cur)
        return cur if cur is not None else self.ctx.tree

    def class_of(self, node: ast.AST) -> ast.ClassDef | None:
        cur = self.parents.get(node)
        while cur is not None and not isinstance(cur, ast.ClassDef):
            cur = self.parents.get(cur)
        return cur

    def _scope_for_key(self, key: str, at: ast.AST) -> ast.AST | None:
        return self.class_of(at) if key.startswith("self.") else self.scope_of(at)

    def _add(self, key: str, at: ast.AST, value: ast.AST | None, stmt: ast.AST, index: int | None = None) -> None:
        scope = self._scope_for_key(key, at)
        if scope is None:
            return
        pos = (getattr(stmt, "end_lineno", 0) or 0, getattr(stmt, "end_col_offset", 0) or 0)
        self.bindings.setdefault((id(scope), key), []).append(Binding(key, scope, value, pos, stmt, index))

    def _bind_target(self, target: ast.AST, value: ast.AST | None, stmt: ast.AST) -> None:
        if isinstance(target, (ast.Name, ast.Attribute)):
            key = dotted(target)
            if key and (isinstance(target, ast.Name) or key.startswith("self.")):
                self._add(key, stmt, value, stmt)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for i, elt in enumerate(target.elts):
                if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
                    self._bind_target(elt, value.elts[i], stmt)
                elif isinstance(elt, (ast.Name, ast.Attribute)) and dotted(elt):
                    self._add(dotted(elt), stmt, value, stmt, index=i)  # type: ignore[arg-type]

    def _collect(self, tree: ast.AST) -> None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    self._bind_target(t, node.value, node)
            elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                self._bind_target(node.target, node.value, node)
            elif isinstance(node, (ast.For, ast.AsyncFor)):
                for name in target_names(node.target):
                    self._add(name, node, None, node.target)
            elif isinstance(node, COMP_TYPES):
                self._collect_comp(node)
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                self._bind_target(node.optional_vars, node.context_expr, node.optional_vars)
            elif isinstance(node, (*FUNC_TYPES, ast.Lambda)):
                self._collect_params(node)
                if not isinstance(node, ast.Lambda):
                    self.defined.add(node.name)
                    if not isinstance(self.parents.get(node), ast.ClassDef):
                        self.functions.setdefault(node.name, []).append(node)
            elif isinstance(node, ast.ClassDef):
                self.defined.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                self.defined.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.Call) and method_name(node) in ("parameters", "named_parameters"):
                key = dotted(node.func.value)  # type: ignore[union-attr]
                if key:
                    self.param_receivers.add(key)

    def _collect_comp(self, comp: ast.AST) -> None:
        """A comprehension's targets bind inside it only (``x`` in ``[m(x) for x in loader]``)."""
        scope = self.scope_of(comp)
        for gen in comp.generators:  # type: ignore[attr-defined]
            for name in target_names(gen.target):
                pos = (gen.target.lineno, gen.target.col_offset)
                self.comp_bindings.setdefault(name, {})[id(comp)] = Binding(name, scope, None, pos, gen.target)

    def _comp_binding(self, key: str, at: ast.AST) -> Binding | None:
        """The binding of ``key`` by a comprehension around ``at`` (not in its first iterable)."""
        found = self.comp_bindings.get(key)
        if not found:
            return None
        path = [at]
        cur = self.parents.get(at)
        while cur is not None and not isinstance(cur, SCOPE_TYPES):
            b = found.get(id(cur))
            if b is not None and not (len(path) >= 2 and path[-2] is cur.generators[0].iter):  # type: ignore[attr-defined]
                return b
            path.append(cur)
            cur = self.parents.get(cur)
        return None

    def _collect_params(self, func: ast.AST) -> None:
        args = func.args  # type: ignore[attr-defined]
        annotated = {a.arg: a.annotation for a in args.posonlyargs + args.args + args.kwonlyargs}
        for name in func_params(func):  # type: ignore[arg-type]
            if name in ("self", "cls"):
                continue
            key = (id(func), name)
            pos = (func.lineno, func.col_offset)  # type: ignore[attr-defined]
            self.bindings.setdefault(key, []).append(Binding(name, func, annotated.get(name), pos, func))

    # ---- queries ---------------------------------------------------------------
    def binding_at(self, key: str, at: ast.AST) -> Binding | None:
        """The binding of ``key`` that reaches ``at``: the last one before it in its scope, else the global one."""
        scope = self._scope_for_key(key, at)
        if scope is None:
            return None
        comp = self._comp_binding(key, at)
        if comp is not None:
            return comp
        here = (getattr(at, "lineno", 0), getattr(at, "col_offset", 0))
        found = self.bindings.get((id(scope), key))
        if not found and not key.startswith("self."):
            scope = self.ctx.tree
            found = self.bindings.get((id(scope), key))
            if found and self.scope_of(at) is not self.ctx.tree:
                return found[-1]  # a global read from inside a function: its last value
        if not found:
            return None
        before = [b for b in found if b.pos <= here]
        if before:
            return max(before, key=lambda b: b.pos)
        return found[0]

    def bindings_of(self, key: str) -> list[Binding]:
        """Every binding of ``key`` in any scope, in source order."""
        out = [b for (_, k), bs in self.bindings.items() if k == key for b in bs]
        return sorted(out, key=lambda b: b.pos)

    def kind_of(self, key: str, at: ast.AST) -> str | None:
        b = self.binding_at(key, at)
        if b is None and key in self.defined:
            return None  # a function, class or module: name hints (``build_model``) describe values only
        kind = self.binding_kind(b) if b is not None else None
        if kind is None and key in self.param_receivers:
            return "model"
        if kind is None and (b is None or b.value is None or isinstance(b.value, ast.Call)):
            kind = kind_from_name(key)
        return kind

    def binding_kind(self, b: Binding) -> str | None:
        if id(b) in self._busy:
            return None
        self._busy.add(id(b))
        try:
            if b.value is None:
                return self._loop_target_kind(b)
            if isinstance(b.node, FUNC_TYPES + (ast.Lambda,)):
                return self._annotation_kind(b.value)
            if b.index is not None:
                return self._unpacked_kind(b.value, b.index, b.node)
            return self.expr_kind(b.value, b.node)
        finally:
            self._busy.discard(id(b))

    def _loop_target_kind(self, b: Binding) -> str | None:
        """Names a batch loop binds are tensors (enumerate's counter is not)."""
        from torchdoctor.check.loops import _LOADERISH, unwrap_iter

        loop = self.parents.get(b.node)
        if not isinstance(loop, (ast.For, ast.AsyncFor, ast.comprehension)) or b.node is not loop.target:
            return None
        iters, counter = unwrap_iter(loop.iter)
        if not any(_LOADERISH.search(self.ctx.segment(i)) or (dotted(i) and self.expr_kind(i, i) == "loader")
                   for i in iters):
            return None
        target = loop.target
        if counter and isinstance(target, ast.Tuple) and target.elts and b.key in target_names(target.elts[0]):
            return None
        return "tensor"

    def _annotation_kind(self, ann: ast.AST) -> str | None:
        q = self.ctx.qualname(ann) or ""
        last = q.rsplit(".", 1)[-1]
        return {"Module": "model", "Tensor": "tensor", "DataLoader": "loader", "device": "device",
                "Optimizer": "optimizer"}.get(last)

    def _unpacked_kind(self, value: ast.AST, index: int, at: ast.AST) -> str | None:
        # ``model, opt, loader = accelerator.prepare(model, opt, loader)`` keeps each kind.
        if isinstance(value, ast.Call) and method_name(value) in ("prepare", "setup") and index < len(value.args):
            return self.expr_kind(value.args[index], at)
        return None

    def expr_kind(self, node: ast.AST, at: ast.AST) -> str | None:
        """What an expression evaluates to, as one of KINDS, or None when unknown."""
        if isinstance(node, (ast.Name, ast.Attribute)) and dotted(node):
            key = dotted(node)
            if isinstance(node, ast.Attribute) and node.attr in ("module", "_orig_mod"):
                return "model"
            if isinstance(node, ast.Name) or key.startswith("self."):  # type: ignore[union-attr]
                return self.kind_of(key, at)  # type: ignore[arg-type]
            return kind_from_name(key) if isinstance(node, ast.Attribute) and node.attr == "device" else None
        if isinstance(node, ast.IfExp):
            if any(isinstance(b, ast.Attribute) and b.attr in ("module", "_orig_mod") for b in (node.body, node.orelse)):
                return "model"  # ``model.module if hasattr(model, "module") else model`` unwraps
            kinds = [self.expr_kind(node.body, at), self.expr_kind(node.orelse, at)]
            if "wrapper" in kinds:
                return "wrapper"
            return kinds[0] if kinds[0] == kinds[1] else (kinds[0] or kinds[1]) if None in kinds else None
        if isinstance(node, ast.Constant):
            s = string_value(node)
            return "device" if s and re.fullmatch(r"(cuda|cpu|mps|xpu|meta)(:\d+)?", s) else None
        if isinstance(node, ast.BinOp):
            return "tensor" if "tensor" in (self.expr_kind(node.left, at), self.expr_kind(node.right, at)) else None
        if isinstance(node, ast.Call):
            return self.call_kind(node, at)
        return None

    def call_kind(self, call: ast.Call, at: ast.AST) -> str | None:
        q = self.ctx.call_name(call) or ""
        last = q.rsplit(".", 1)[-1]
        meth = method_name(call)
        if last in _WRAPPERS or q in ("torch.compile", "torch.nn.parallel.DistributedDataParallel"):
            return "wrapper"
        if last == "DataLoader":
            return "loader"
        if last.endswith("Sampler"):
            return "sampler"
        if last == "GradScaler":
            return "scaler"
        if q == "torch.device":
            return "device"
        if "lr_scheduler" in q or last.startswith(("get_linear_schedule", "get_cosine_schedule")) or last.endswith("LR"):
            return "scheduler"
        if (q.startswith("torch.optim.") and last[:1].isupper()) or last in _OPTIMIZERS:
            return "optimizer"
        if last.endswith("Loss") and (q.startswith("torch.nn.") or "." not in q):
            return "loss_fn"
        if self._is_model_constructor(call, q, last):
            return "model"
        if last in ("tqdm", "trange", "track", "iter", "enumerate") and call.args:
            inner = self.expr_kind(call.args[0], at)
            return "loader" if inner == "loader" else None
        if meth in _SAME_AS_RECEIVER and isinstance(call.func, ast.Attribute):
            inner = self.expr_kind(call.func.value, at)
            if meth in _TENSOR_METHODS_ONLY and inner != "tensor":
                return None
            return inner
        if q.startswith("torch.") and last[:1].islower() and (last in FACTORIES or q.startswith("torch.nn.functional.")
                                                                or last in ("cat", "stack", "from_numpy", "where", "matmul")):
            return "tensor"
        if isinstance(call.func, ast.Name) and call.func.id in self.functions:
            return self._return_kind(self.functions[call.func.id])
        if isinstance(call.func, (ast.Name, ast.Attribute)) and dotted(call.func):
            callee = self.expr_kind(call.func, at)
            if callee in ("model", "wrapper", "loss_fn"):
                return "tensor"
        return None

    def _return_kind(self, funcs: list[ast.AST]) -> str | None:
        """What an in-file function returns, when every ``return`` agrees (``build_model()`` -> model)."""
        kinds: set[str | None] = set()
        for func in funcs:
            if id(func) in self._busy:
                return None
            self._busy.add(id(func))
            try:
                for node in walk_local(func.body):  # type: ignore[attr-defined]
                    if isinstance(node, ast.Return) and node.value is not None:
                        kinds.add(self.expr_kind(node.value, node))
            finally:
                self._busy.discard(id(func))
        return kinds.pop() if len(kinds) == 1 else None

    def _is_model_constructor(self, call: ast.Call, q: str, last: str) -> bool:
        if q in self.module_classes or (q.startswith("torch.nn.") and last[:1].isupper() and last != "Parameter"):
            return True
        if last == "from_pretrained":
            return not _NOT_MODELS.search(q)
        if q.startswith("torchvision.models.") and last[:1].islower() and not last.startswith("get_"):
            return True
        return q in ("timm.create_model", "torch.hub.load") or (q.startswith("transformers.Auto") and "Model" in q)
