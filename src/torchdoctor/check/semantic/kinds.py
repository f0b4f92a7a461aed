"""What a name or an expression holds: a model, tensor, loader, optimizer, scaler, sampler, device,
loss function, scheduler or wrapper (DataParallel/DDP/compiled), as far as the code shows."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from functools import lru_cache

from torchdoctor.check.astutil import FACTORIES, HOST_COPIES, dotted, method_name, string_value, target_names
from torchdoctor.check.patterns import lazy
from torchdoctor.check.semantic.bindings import Binding, Bindings
from torchdoctor.check.semantic.names import Names
from torchdoctor.check.semantic.walk import Index

__all__ = ["KINDS", "Kinds", "kind_from_name", "LOADERISH", "unwrap_iter"]

KINDS = ("model", "tensor", "loader", "optimizer", "scaler", "sampler", "device", "loss_fn", "scheduler", "wrapper")

MODULE_BASES = {"Module", "LightningModule", "PreTrainedModel", "Sequential", "ModuleList", "ModuleDict"}
_LIBRARY_MODULE_BASES = ("torch.", "pytorch_lightning.", "lightning.", "transformers.", "flax.", "mindspore.", "paddle.",
                         "jittor.", "oneflow.", "megengine.", "mxnet.", "keras.", "tensorflow.")
_WRAPPERS = {"DataParallel", "DistributedDataParallel", "DDP", "FullyShardedDataParallel", "FSDP"}
_NOT_MODELS = lazy(r"(?i)Tokenizer|Processor|Config|Feature_?Extractor|Dataset|Pipeline|Scheduler|Accelerator")  # (``tokenizer_class.from_pretrained``)
_OPTIMIZERS = {"SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam", "LBFGS",
               "SparseAdam", "ASGD", "Rprop", "Lion", "Adafactor", "AdamW8bit", "Adam8bit", "LARS", "LAMB"}
_TENSOR_METHODS_ONLY = {"mean", "sum", "abs", "sigmoid", "softmax", "argmax", "exp", "log", "view", "reshape",
                        "squeeze", "unsqueeze", "permute", "transpose", "flatten", "detach", "contiguous",
                        "max", "min", "argmin", "norm", "std", "var", "sqrt", "clamp", "pow", "cumprod", "cumsum",
                        "log_softmax", "prod", "eq", "ne", "lt", "le", "gt", "ge",
                        "matmul", "mm", "bmm", "add", "sub", "mul", "div"}  # (``pred.eq(y)``: elementwise;
# ``x.matmul(w)``, ``a2.add(b1)``: arithmetic of tensors)
_SAME_AS_RECEIVER = {"to", "cuda", "cpu", "float", "half", "double", "bfloat16", "train", "eval", "requires_grad_",
                     "clone", "long", "int", "bool", "type", "pin_memory", "share_memory_",
                     "to_empty"} | _TENSOR_METHODS_ONLY  # (placed, cast or put in a mode: what it was; a tensor's
# method: a tensor when the receiver is one)
_NAME_HINTS = (
    (lazy(r"(^|_)(model|net|network|encoder|decoder|backbone|teacher|student|generator|discriminator|classifier)s?$", re.I), "model"),
    (lazy(r"(loader|^dl$|_dl$)", re.I), "loader"),
    (lazy(r"^(optimizer|optim|opt|optimiser)$|_(optimizer|optim|opt)$", re.I), "optimizer"),
    (lazy(r"^(criterion|loss_fn|loss_func|loss_function|lossfn)$", re.I), "loss_fn"),
    (lazy(r"(^|_)scaler$", re.I), "scaler"),
    (lazy(r"(^|_)sampler$", re.I), "sampler"),
    (lazy(r"^(device|dev)$|_device$", re.I), "device"),
    (lazy(r"(^|_)(scheduler|sched|lr_scheduler)$", re.I), "scheduler"),
)
_TORCH_OBJECTS = frozenset({"torch.Generator", "torch.cuda.Stream", "torch.cuda.Event", "torch.Stream", "torch.Event",
                            "torch.cuda.graphs.CUDAGraph", "torch.cuda.CUDAGraph"})  # (what a name hint may not override)
_SUBMODULE_FIELDS = frozenset({"features", "backbone", "encoder", "decoder", "body", "trunk", "classifier", "head"})
QUEUE_NAME = lazy(r"(?i)^(\w*_)?(queue|q)$")  # ``inputs, targets = queue.get()``: batches a loader thread puts there
_COUNTER_NAME = lazy(r"^(i|j|k|n|ii|idx|index|ix|it|itr|iter|iters|iteration|step|batch_idx|batch_id|batch_i|i_batch|"
                     r"batch_index|batch_num|bi|bidx|b_idx|cnt|count|num|[a-z]+_(?:idx|index|num|no|count))$")
_BUILDER_NAME = lazy(r"(?i)^(get|build|create|make|load|init|setup|prepare|construct|define|new|process|preprocess|"
                     r"convert)_")
# Tensor fields of a model's output object (transformers' ModelOutput and the like).
OUTPUT_FIELDS = frozenset({"logits", "loss", "last_hidden_state", "pooler_output", "start_logits", "end_logits",
                           "image_embeds", "text_embeds", "sample", "prev_sample", "pred_original_sample"})
# (``sample``: diffusers' ``unet(latents, t, emb).sample`` and the schedulers' steps)
# torch functions whose result is a tensor computed from their first argument (on its device)
_TENSOR_OPS = frozenset({"tanh", "sigmoid", "exp", "log", "abs", "sqrt", "relu", "softmax", "log_softmax", "sum", "mean",
                         "clamp", "norm", "pow", "sin", "cos", "flatten", "reshape", "transpose", "squeeze", "unsqueeze",
                         "bmm", "mm", "mul", "add", "sub", "div", "argmax", "argmin", "cumsum", "log1p", "sign", "round",
                         "floor", "ceil", "gather", "index_select", "masked_select", "diag", "tril", "triu", "isnan",
                         "isinf", "isfinite", "neg", "square", "logsumexp", "prod", "std", "var", "amax", "amin",
                         "permute", "narrow", "flip", "roll", "repeat_interleave", "clone", "detach", "sigmoid_", "erf"})
_PACKING = ("torch.nn.utils.rnn.pack_padded_sequence", "torch.nn.utils.rnn.pack_sequence")
LOADERISH = lazy(r"(?i)(loader|\bdl\b|_dl\b|dataloader|batches|batch_iter|data_iter)")
_TENSOR_TUPLES = {"max", "min", "sort", "topk", "kthvalue", "median", "mode", "unique", "chunk", "split",
                  "unbind", "broadcast_tensors", "meshgrid", "std_mean", "var_mean", "aminmax"}
_COLLECTIVES = {"gather", "gather_for_metrics", "reduce", "pad_across_processes", "all_gather"}
_WRAPPER_CALLS = {"enumerate", "tqdm", "trange", "iter", "zip", "islice", "track", "progress", "progress_bar",
                  "prefetch", "DeviceLoader", "cycle", "chain"}


def kind_from_name(key: str) -> str | None:
    """A weak guess from a name alone (``train_loader`` -> loader), used when nothing better is known."""
    return _kind_from_last(key.rsplit(".", 1)[-1])


def _torch_layer(q: str) -> bool:
    """``torch.nn.BatchNorm2d``, ``torch.nn.modules.conv.Conv2d``: a layer class of torch (not a parameter, not a
    data-parallel wrapper, not a helper of ``torch.nn.utils``)."""
    if not q.startswith("torch.nn.") or q.startswith(("torch.nn.utils.", "torch.nn.parallel.", "torch.nn.functional.")):
        return False
    last = q.rsplit(".", 1)[-1]  # (``torch.nn.modules.loss._Loss``, ``_WeightedLoss``: the bases of torch's losses)
    return last.lstrip("_")[:1].isupper() and last not in ("Parameter", "UninitializedParameter", "Buffer") \
        and last not in _WRAPPERS


@lru_cache(maxsize=4096)  # the same few names are asked about over and over (9 regex searches each)
def _kind_from_last(last: str) -> str | None:
    if _BUILDER_NAME.match(last.lstrip("_")) or "_for_" in last or "_to_" in last:
        return None  # ``get_model``, ``build_optimizer``: a function that makes one, not the thing itself;
        # ``_process_mentions_for_model``: one that prepares what the thing is given
    for pattern, kind in _NAME_HINTS:
        if pattern.search(last):
            return kind
    return None


def _slices(index: ast.AST) -> bool:
    """``[:eos]``, ``[:, 1:]``: a slice, or a tuple of indices with one (what cuts a tensor, not a list's element)."""
    return isinstance(index, ast.Slice) or isinstance(index, ast.Tuple) and any(isinstance(e, ast.Slice) for e in index.elts)


def unwrap_iter(node: ast.AST) -> tuple[list[ast.AST], bool]:
    """The iterables under enumerate/tqdm/zip wrappers, and whether an enumerate counter comes first."""
    counter = False
    while isinstance(node, ast.IfExp):  # ``tqdm(enumerate(loader)) if verbose else enumerate(loader)``: one loader
        node = node.orelse
    while isinstance(node, ast.Call) and node.args:
        name = (dotted(node.func) or "").rsplit(".", 1)[-1]
        if name not in _WRAPPER_CALLS:
            break
        if name == "enumerate":
            counter = True
        if name in ("zip", "chain"):
            return list(node.args), counter
        node = node.args[0]
    return [node], counter


def _parameters_of_a_model(kinds: "Kinds", it: ast.AST, prefix: str) -> bool:
    """``model.parameters()`` (``prefix`` ""), ``model.named_parameters()`` (``prefix`` "named_"): a model's own."""
    return isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) \
        and it.func.attr in (f"{prefix}parameters", f"{prefix}buffers") \
        and kinds.expr_kind(it.func.value, it) in ("model", "wrapper")


def plain_values(it: ast.AST) -> bool:
    """An iterable of plain values zipped beside a loader: ``["train", "val"]``, ``range(n)``."""
    if isinstance(it, ast.List | ast.Tuple):
        return all(isinstance(e, ast.Constant) for e in it.elts)
    return isinstance(it, ast.Call) and dotted(it.func) == "range"


def _names_a_class(name: str) -> bool:
    """``Model``, ``QNetwork``: named as classes are (not ``DEVICE``, a constant)."""
    return name[:1].isupper() and not name.isupper()


class Kinds:
    """Answers ``kind_of(key, at)`` and ``expr_kind(expr, at)``, memoised per binding.

    ``project_class(qualname)`` (given by the project index) says whether an imported
    name is an ``nn.Module`` class defined in another module of the project.
    """

    def __init__(self, index: Index, names: Names, bindings: Bindings, segment: Callable[[ast.AST], str],
                 project_class: Callable[[str], bool | None] | None = None) -> None:
        self.index = index
        self.names = names
        self.bindings = bindings
        self.segment = segment
        self.project_class = project_class
        self._memo: dict[object, str | bool | None] = {}
        self._busy: set[int] = set()
        self.module_classes = self._module_classes()

    # ---- classes ---------------------------------------------------------------------------------
    def _module_classes(self) -> set[str]:
        classes = self.index.by_type.get(ast.ClassDef, [])
        local = {cls.name for cls in classes}  # type: ignore[attr-defined]
        found: set[str] = set()
        changed = True
        while changed:
            changed = False
            for cls in classes:
                if cls.name in found:  # type: ignore[attr-defined]
                    continue
                for base in cls.bases:  # type: ignore[attr-defined]
                    q = self.names.qualname(base) or ""
                    last = q.rsplit(".", 1)[-1]
                    if last in MODULE_BASES and (q == last and last in local or self._plain_project_class(q, base)):
                        continue  # (``class Linear(Module)`` of a homework's own ``class Module:``, here or imported
                        # from another module of the project: no torch module, whatever its name)
                    if last in MODULE_BASES or last in found or self._imported_module_class(q, base) \
                            or last.endswith("PreTrainedModel") and q.startswith("transformers.") \
                            or _torch_layer(q):  # (``class BatchNormFw(nn.BatchNorm2d)``: a layer, forward overridden)
                        found.add(cls.name)  # type: ignore[attr-defined]
                        changed = True
                        break
        return found

    def _project_says(self, q: str, node: ast.AST, star: bool = True) -> bool | None:
        """Whether the class ``node`` names, imported from a module of the project (``star``: or maybe through a
        star import), is an nn.Module there; None when the project does not say (not imported, not its class)."""
        if self.project_class is None or q.startswith(("torch.", "typing.", "abc.", "enum.")):
            return None
        written = dotted(node) or ""
        head = written.split(".")[0]
        if head not in self.names.imports and head not in self.names.relative and \
                not (star and self.names.star and head not in self.bindings.defined):
            return None
        return self.project_class(written)

    def _imported_module_class(self, q: str, node: ast.AST) -> bool:
        return bool(self._project_says(q, node))

    def _plain_project_class(self, q: str, node: ast.AST) -> bool:
        """``Module`` imported from a module of the project that defines it as a plain class (``from hw2_nn import
        Module``)."""
        return "." in q and not q.startswith(_LIBRARY_MODULE_BASES) and self._project_says(q, node, star=False) is False

    def is_module_class(self, q: str, node: ast.AST | None = None) -> bool:
        """``q`` (a resolved call name) is an nn.Module class of this file or of the project."""
        if q in self.module_classes:
            return True
        last = q.rsplit(".", 1)[-1]
        if not last[:1].isupper() or node is None:
            return False
        return self._imported_module_class(q, node)

    # ---- names -------------------------------------------------------------------------------------
    def kind_of(self, key: str, at: ast.AST) -> str | None:
        b = self.bindings.at(key, at)
        if b is not None and isinstance(b.value, ast.Constant) and b.value.value is None:
            b = self._other_branch(b) or b  # ``x = t.mean()`` / ``else: x = None``: what it holds when it holds anything
        if b is None and (key in self.bindings.defined or key[:1].isupper()):
            return None  # a function, class or module (``Encoder``): name hints describe values only
        kind = self.binding_kind(b) if b is not None else None
        if kind is None and key in self.bindings.param_receivers:
            return "model"
        if kind is None and (b is None or b.value is None or isinstance(b.value, ast.Call)):
            if b is None and key.startswith("self.") and self._own_method(key[5:], at):
                return None  # ``self.pick_network(width)``: a method of the class, named like a model
            if b is not None and _names_a_class(key):
                return None  # ``Model = eval(args.arch)``: a class picked by name; what it builds is the model
            if b is not None and isinstance(b.value, ast.Call) and self.names.call_name(b.value) in _TORCH_OBJECTS:
                return None  # ``generator = torch.Generator(device=d)``: a random number generator, not a GAN's model
            kind = kind_from_name(key)
        return kind

    def _own_method(self, name: str, at: ast.AST) -> bool:
        frame = self.index.frame.get(at)
        cls = frame.cls if frame is not None else None
        return cls is not None and any(  # (a ``@property`` hands back a value: ``self.model`` may well be one)
            isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == name and not any(
                (dotted(d) or "").endswith("property") for d in f.decorator_list) for f in cls.body)  # type: ignore[attr-defined]

    def _other_branch(self, b: Binding) -> Binding | None:
        """The binding of the same name in the other branch of the ``if`` that holds ``b`` (``b`` is in ``else``)."""
        parent = self.index.parent
        child, node = b.node, parent.get(b.node)
        while node is not None and not isinstance(node, ast.If):
            child, node = node, parent.get(node)
        if node is None or child not in node.orelse:
            return None
        for other in self.bindings.in_scope(b.scope, b.key):
            if other is not b and other.value is not None and any(other.node is n or self.index.contains(n, other.node)
                                                                   for n in node.body):
                return other
        return None

    def _model_class_param(self, call: ast.Call) -> bool:
        """``Factory(envs)`` where ``Factory: nn.Module`` is a parameter named as a class is: it builds a model."""
        if not isinstance(call.func, ast.Name) or not _names_a_class(call.func.id):
            return False
        b = self.bindings.at(call.func.id, call)
        return b is not None and b.is_param and b.value is not None and self._annotation_kind(b.value) == "model"

    def binding_kind(self, b: Binding) -> str | None:
        key = id(b)
        if key in self._memo:
            return self._memo[key]
        if key in self._busy:
            return None
        self._busy.add(key)
        try:
            if b.is_param:
                kind = self._annotation_kind(b.value) if b.value is not None else None
                if kind == "model" and _names_a_class(b.key):
                    kind = None  # ``Model: nn.Module`` named as a class is: the class, called to build one
                if kind is None:
                    kind = self._kind_from_callers(b)
            elif b.value is None:
                kind = self._loop_target_kind(b)
            elif b.index is not None:
                kind = self._unpacked_kind(b.value, b.index, b.node)
            else:
                kind = self.expr_kind(b.value, b.node)
                if kind is None and isinstance(b.value, ast.Constant) and type(b.value.value) in (int, float) \
                        and b.value.value == 0 and self._accumulates_tensors(b):
                    kind = "tensor"  # ``correct = 0`` then ``correct += pred.eq(y).sum()``: a tensor from then on
        finally:
            self._busy.discard(key)
        self._memo[key] = kind
        return kind

    def _accumulates_tensors(self, b: Binding) -> bool:
        """Some ``<name> += <tensor>`` after ``b`` in its scope adds a tensor to the number ``b`` starts it at."""
        for n in self.index.by_type.get(ast.AugAssign, ()):
            if isinstance(n.op, ast.Add) and isinstance(n.target, ast.Name) and n.target.id == b.key \
                    and self.index.pos[n] > self.index.pos[b.node] and self.index.frame[n].scope is b.scope \
                    and self.expr_kind(n.value, n) == "tensor" and not any(
                        isinstance(c, ast.Call) and method_name(c) in HOST_COPIES
                        for c in self.index.subtree(n.value)):
                return True  # (``running_correct += pred.eq(y).cpu().sum()``: a host tensor, read as it was made)
        return False

    def _kind_from_callers(self, b: Binding) -> str | None:
        """"model" for a parameter of a module-level function that every call of it in this file hands a model
        (``score_agent(env, 3, actor)`` with ``actor = Actor().to(dev)``: ``policy`` is a model)."""
        func = b.node
        if not isinstance(func, ast.FunctionDef) or _kind_from_last(b.key) is not None \
                or self.index.frame[func].kind != "module":
            return None  # (a name that says what it holds is taken at its word: ``kind_of`` falls back on it)
        params = [a.arg for a in func.args.posonlyargs + func.args.args]
        if b.key not in params or not any(self.index.frame[c].function is func for c in self._name_calls().get(b.key, ())):
            return None  # (asked of a parameter the function calls: ``policy(obs)``)
        position = params.index(b.key)
        calls = [c for c in self._name_calls().get(func.name, []) if not self._demo_code(c)]
        if not calls:
            return None  # (a ``__main__`` demo handing it ``nn.Embedding(n, h)`` says little of the real callers)
        args = []
        for call in calls:
            if any(isinstance(a, ast.Starred) for a in call.args):
                return None
            arg = call.args[position] if position < len(call.args) else next(
                (k.value for k in call.keywords if k.arg == b.key), None)
            if not isinstance(arg, ast.Name | ast.Attribute | ast.Call):
                return None  # (a model is handed by name, or built in the call)
            args.append((arg, call))
        return "model" if all(self.expr_kind(arg, call) in ("model", "wrapper") for arg, call in args) else None

    def _demo_code(self, node: ast.AST) -> bool:
        """Under ``if __name__ == "__main__":`` or in a function named as a test."""
        func = self.index.frame[node].function
        if func is not None:
            return func.name.startswith("test") or func.name.endswith("_test")  # type: ignore[attr-defined]
        for up in self.index.ancestors(node):
            if isinstance(up, ast.If) and isinstance(up.test, ast.Compare) and isinstance(up.test.left, ast.Name) \
                    and up.test.left.id == "__name__":
                return True
        return False

    def _name_calls(self) -> dict[str, list[ast.Call]]:
        found = self._memo.get("name_calls")
        if found is None:
            found = {}
            for call in self.index.by_type.get(ast.Call, []):
                if isinstance(call.func, ast.Name):  # type: ignore[attr-defined]
                    found.setdefault(call.func.id, []).append(call)  # type: ignore[attr-defined]
            self._memo["name_calls"] = found  # type: ignore[assignment]
        return found  # type: ignore[return-value]

    def is_loader_expr(self, it: ast.AST) -> bool:
        if isinstance(it, ast.Call) and dotted(it.func) in ("range", "len"):
            return False  # (``range(num_microbatches)``: counts, whatever the bound is named)
        return bool(LOADERISH.search(self.segment(it))) or bool(dotted(it)) and self.expr_kind(it, it) == "loader"

    def _loop_target_kind(self, b: Binding) -> str | None:
        """Names a batch loop binds are tensors (enumerate's counter is not); so are a model's parameters
        (``for name, p in model.named_parameters():``)."""
        loop = self.index.parent.get(b.node)
        if isinstance(loop, (ast.For, ast.comprehension)) and b.node is loop.target:
            target = loop.target
            if isinstance(target, ast.Name) and _parameters_of_a_model(self, loop.iter, ""):
                return "tensor"
            if isinstance(target, ast.Tuple) and len(target.elts) == 2 and isinstance(second := target.elts[1], ast.Name) \
                    and second.id == b.key and _parameters_of_a_model(self, loop.iter, "named_"):
                return "tensor"
        if not isinstance(loop, (ast.For, ast.AsyncFor, ast.comprehension)) or b.node is not loop.target:
            return None
        iters, counter = unwrap_iter(loop.iter)
        if isinstance(loop.iter, ast.Call) and isinstance(loop.iter.func, ast.Name) and loop.iter.func.id == "sorted":
            return None  # (``for name in sorted(loaders, key=...)``: the names of a dict of loaders; batches are not sorted)
        if not any(self.is_loader_expr(i) for i in iters):
            return self._item_kind(loop, b)
        target = loop.target
        if isinstance(loop.iter, ast.Call) and method_name(loop.iter) in ("items", "keys", "values"):
            # ``for phase, loader in loaders.items()``: a name (a string key) and a loader, not batches
            values = target.elts[1] if method_name(loop.iter) == "items" and isinstance(target, ast.Tuple) \
                and len(target.elts) == 2 else target if method_name(loop.iter) == "values" else None
            return "loader" if values is not None and b.key in target_names(values) else None
        if not counter and isinstance(loop.iter, ast.Name):
            counter = self._counts(loop.iter, loop)
        if (counter or _COUNTER_NAME.match(b.key)) and isinstance(target, ast.Tuple) and len(target.elts) > 1 \
                and b.key in target_names(target.elts[0]):
            return None  # (``for idx, xb in prog.walk(loader)``, a helper handing back ``enumerate(...)``: a count)
        return "tensor"

    def _counts(self, name: ast.Name, at: ast.AST) -> bool:
        """``prog = enumerate(loader)`` (then perhaps ``prog = tqdm(prog, ...)``) and ``for i, batch in prog``: the
        name iterated holds an enumerate, whose first item is its counter."""
        for _ in range(4):  # rebound through a few wrappers at most
            b = self.bindings.at(name.id, at)
            if b is None or b.index is not None or not isinstance(b.value, ast.Call):
                return False
            inner, counter = unwrap_iter(b.value)
            if counter:
                return True
            if not (len(inner) == 1 and isinstance(inner[0], ast.Name) and inner[0] is not b.value):
                return False
            name, at = inner[0], b.node
        return False

    def _item_kind(self, loop: ast.AST, b: Binding) -> str | None:
        """``for name, prob in zip(names, probs)``: an item of a tensor is a tensor (``for row in t`` too)."""
        it, target = loop.iter, loop.target  # type: ignore[attr-defined]
        if isinstance(target, ast.Name):
            return "tensor" if target.id == b.key and self._computed_tensor(it, b.node) else None
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "zip" and \
                isinstance(target, ast.Tuple) and len(target.elts) == len(it.args):
            for elt, arg in zip(target.elts, it.args):
                if isinstance(elt, ast.Name) and elt.id == b.key:
                    return "tensor" if self._computed_tensor(arg, b.node) else None
        return None

    def _computed_tensor(self, expr: ast.AST, at: ast.AST) -> bool:
        """A tensor the program computed (not a batch element a loader yields: its names, paths, ids...)."""
        if isinstance(expr, ast.Name):
            b = self.bindings.at(expr.id, at)
            if b is None:
                return False
            if b.value is None:  # an item of a tensor the program computed (``for p in zip(..., probs)``) is one
                loop = self.index.parent.get(b.node)
                if not isinstance(loop, (ast.For, ast.AsyncFor)) or b.node is not loop.target:
                    return False
                iters, _ = unwrap_iter(loop.iter)
                return not any(self.is_loader_expr(i) for i in iters) and self._item_kind(loop, b) == "tensor"
        return self.expr_kind(expr, at) == "tensor"

    def _annotation_kind(self, ann: ast.AST) -> str | None:
        q = self.names.qualname(ann) or ""
        last = q.rsplit(".", 1)[-1]
        if q in self.module_classes:
            return "model"  # ``net: Net``
        return {"Module": "model", "Tensor": "tensor", "DataLoader": "loader", "device": "device",
                "Optimizer": "optimizer", "GradScaler": "scaler", "LRScheduler": "scheduler",
                "_LRScheduler": "scheduler"}.get(last)

    def _unpacked_kind(self, value: ast.AST, index: int, at: ast.AST) -> str | None:
        # ``model, opt, loader = accelerator.prepare(model, opt, loader)`` keeps each kind;
        # ``preds, refs = accelerator.gather_for_metrics((preds, batch["labels"]))`` too.
        if not isinstance(value, ast.Call):
            return None
        meth = method_name(value)
        q = self.names.call_name(value) or ""
        if q.startswith("torch.") and q.rsplit(".", 1)[-1] in _TENSOR_TUPLES:
            return "tensor"  # ``_, preds = torch.max(scores, dim=2)``
        if meth in _TENSOR_TUPLES and isinstance(value.func, ast.Attribute) and \
                self.expr_kind(value.func.value, at) == "tensor":
            return "tensor"  # ``best, _ = probs.max(dim=2)``: values and indices, where the tensor is
        if q.startswith(_PACKING) and index == 0:
            return "tensor"  # ``scores, _ = pack_padded_sequence(scores, lengths, batch_first=True)``: the data
        if meth == "get" and not value.args and isinstance(value.func, ast.Attribute) and \
                QUEUE_NAME.match((dotted(value.func.value) or "").rsplit(".", 1)[-1]):
            return "tensor"  # ``inputs, targets, lengths = queue.get()``: a batch a loader thread put there
        if meth in ("prepare", "setup") and index < len(value.args):
            return self.expr_kind(value.args[index], at)
        if meth in _COLLECTIVES and value.args and isinstance(value.args[0], (ast.Tuple, ast.List)):
            elts = value.args[0].elts
            return self.expr_kind(elts[index], at) if index < len(elts) else None
        if index == 0 and isinstance(value.func, ast.Name | ast.Attribute) and dotted(value.func) \
                and self.expr_kind(value.func, at) in ("model", "wrapper"):
            return "tensor"  # ``out, _ = gru(seq)``: a model's first output (an RNN's, beside its hidden state)
        if isinstance(value.func, ast.Name) and value.func.id in self.bindings.functions:
            # ``x, y, lengths = fetch_data(batch)`` of an in-file helper whose every ``return`` is a tuple
            found = self._return_kind(self.bindings.functions[value.func.id], index)
            if found is not None:
                return found
        return self._handed_back(value, index, at)

    def _handed_back(self, value: ast.Call, index: int, at: ast.AST) -> str | None:
        """``encoder, opt, epoch = load_checkpoint(path, encoder=encoder, opt=opt)``: a target named as the argument
        it was handed (by keyword or position) is that object given back, loaded or moved in place: its kind."""
        targets = at.targets if isinstance(at, ast.Assign) else []
        if len(targets) != 1 or not isinstance(t := targets[0], ast.Tuple) or index >= len(t.elts) \
                or not isinstance(e := t.elts[index], ast.Name):
            return None
        given = [a for a in value.args if isinstance(a, ast.Name) and a.id == e.id] + \
            [k.value for k in value.keywords if k.arg == e.id and isinstance(k.value, ast.Name) and k.value.id == e.id]
        if not given:
            return None
        b = self.bindings.at(e.id, value)
        if b is None or b.node is at:
            return None
        return self.binding_kind(b)

    # ---- expressions ----------------------------------------------------------------------------------
    def expr_kind(self, node: ast.AST, at: ast.AST) -> str | None:
        """What an expression evaluates to, as one of KINDS, or None when unknown."""
        if isinstance(node, ast.Name):
            return self.kind_of(node.id, at)
        if isinstance(node, ast.Attribute):
            if node.attr in ("module", "_orig_mod"):
                return "model"
            if node.attr == "data" and isinstance(node.value, ast.Call) and \
                    (self.names.call_name(node.value) or "").startswith(_PACKING):
                return "tensor"  # ``scores = pack_padded_sequence(scores, lengths, batch_first=True).data``
            if node.attr in OUTPUT_FIELDS and isinstance(node.value, ast.Call) and self.call_kind(node.value, at) == "tensor":
                return "tensor"  # ``loss = model(**batch).loss``
            if node.attr in _SUBMODULE_FIELDS and isinstance(node.value, ast.Call) \
                    and self.call_kind(node.value, at) == "model":
                return "model"  # ``densenet121(pretrained=True).features``: a part of a model just built
            key = dotted(node)
            if key is None:
                return "tensor" if node.attr in ("data", "T", "mT") and isinstance(node.value, ast.Call) \
                    and self.call_kind(node.value, at) == "tensor" else None  # ``model(x).data``
            if key.startswith("self."):
                return self.kind_of(key, at)
            if node.attr in OUTPUT_FIELDS and self.expr_kind(node.value, at) == "tensor":
                return "tensor"  # ``outputs.logits`` of a model's output
            if node.attr in ("data", "T", "mT") and self.expr_kind(node.value, at) == "tensor":
                return "tensor"  # ``preds_index.data``
            if node.attr == "grad":
                return "tensor"  # ``p.grad`` (a parameter's gradient, where the parameter is; or None)
            return kind_from_name(key) if node.attr == "device" else None
        if isinstance(node, ast.Call):
            return self.call_kind(node, at)
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
        if isinstance(node, ast.UnaryOp) and not isinstance(node.op, ast.Not):
            return "tensor" if self.expr_kind(node.operand, at) == "tensor" else None  # ``-disc(fake).mean()``
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, ast.Mod):
                return None  # ``i % accumulate``: a step counter's phase (or string formatting), not data
            return "tensor" if "tensor" in (self.expr_kind(node.left, at), self.expr_kind(node.right, at)) else None
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and \
                not isinstance(node.ops[0], (ast.Is, ast.IsNot, ast.In, ast.NotIn)):  # ``preds == y``: elementwise
            return "tensor" if "tensor" in (self.expr_kind(node.left, at), self.expr_kind(node.comparators[0], at)) \
                else None
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and _slices(node.slice):
            return "tensor" if self._computed_tensor(node.value, at) else None  # ``probs = probs[:eos]``, ``x[:, 1:]``
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call):  # ``out.max(-1)[1]``, ``net(x)[0]``
            if self.call_kind(node.value, at) == "tensor":
                return "tensor"
            value = node.value  # ``scores.cumprod(0)[-1]``, ``probs.max(dim=2)[0]``
            return "tensor" if isinstance(value.func, ast.Attribute) and value.func.attr in _TENSOR_TUPLES | \
                _TENSOR_METHODS_ONLY and self.expr_kind(value.func.value, at) == "tensor" else None
        return None

    def call_kind(self, call: ast.Call, at: ast.AST) -> str | None:
        q = self.names.call_name(call) or ""
        last = q.rsplit(".", 1)[-1]
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
        if (last.endswith("Loss") or last.endswith("Loss2d")) and (q.startswith("torch.nn.") or "." not in q):
            return "loss_fn"  # (``nn.NLLLoss2d``: the old 2-D alias of NLLLoss)
        if self.is_model_constructor(call, q, last) or self._model_class_param(call) or self._model_registry_call(call):
            return "model"
        if q == "torch.autograd.Variable" and call.args:
            return "tensor"  # ``conf_t = Variable(conf_t, requires_grad=False)``: PyTorch 0.3's wrapper of a tensor
        if last in ("tqdm", "trange", "track", "iter", "enumerate") and call.args:
            return "loader" if self.expr_kind(call.args[0], at) == "loader" else None
        meth = method_name(call)
        if meth in _COLLECTIVES and call.args and not isinstance(call.args[0], (ast.Tuple, ast.List)):
            return self.expr_kind(call.args[0], at)  # ``accelerator.gather(loss)``: a tensor like its input
        if meth in _SAME_AS_RECEIVER and not q.startswith("torch."):  # (``F.softmax(x)`` is torch's function)
            inner = self.expr_kind(call.func.value, at)  # type: ignore[attr-defined]
            recv = call.func.value  # type: ignore[attr-defined]
            if inner is None and meth in ("to", "cuda") and isinstance(recv, ast.Subscript) \
                    and isinstance(recv.value, ast.Name) and string_value(recv.slice) is not None \
                    and self.kind_of(recv.value.id, at) == "tensor":
                return "tensor"  # ``gt = batch["gt"].to(dev)``: an entry of a batch dict, moved
            if meth in _TENSOR_METHODS_ONLY and inner != "tensor":
                return None
            return inner
        if q in ("torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad.clip_grad_norm_", "torch.nn.utils.get_total_norm"):
            return "tensor"  # the total norm, where the gradients are
        if q.startswith("torch.") and last[:1].islower() and (last in FACTORIES or q.startswith("torch.nn.functional.")
                                                                or last in ("cat", "stack", "from_numpy", "where", "matmul")):
            return "tensor"
        if q.startswith("torch.") and q.count(".") == 1 and last in _TENSOR_OPS and call.args \
                and self.expr_kind(call.args[0], at) == "tensor":
            return "tensor"  # ``torch.tanh(self.lin(h))``: an op of a tensor, a tensor where it is
        if isinstance(call.func, ast.Name) and call.func.id in self.bindings.functions:
            funcs = self.bindings.functions[call.func.id]
            kind = self._return_kind(funcs)
            if kind is None and self.computes_on_params(funcs) and any(
                    self.expr_kind(a, at) == "tensor" for a in call.args if isinstance(a, (ast.Name, ast.Attribute))):
                return "tensor"  # ``similarity(out, high)`` returning ``(a * b).mean(dim=1)``: computed from its tensors
            return kind
        if isinstance(call.func, (ast.Name, ast.Attribute)) and dotted(call.func):
            callee = self.expr_kind(call.func, at)
            if callee in ("model", "wrapper", "loss_fn"):
                return "tensor"
        return None

    def computes_on_params(self, funcs: list[ast.AST]) -> bool:
        """Every ``return`` of each function is tensor arithmetic or tensor methods on its own parameters
        (``return (a * b).mean(dim=(1, 2, 3))``, ``rt = t.clone(); ...; return rt``): its result lives with its
        inputs."""
        for func in funcs:
            key = ("pure", id(func))
            if key not in self._memo:
                params = {a.arg for a in func.args.posonlyargs + func.args.args}  # type: ignore[attr-defined]
                values = [r.value for r in self.returns_of(func)]
                self._memo[key] = bool(values) and (all(  # type: ignore[index]
                    v is not None and not isinstance(v, ast.Constant) and not (isinstance(v, ast.Name) and v.id in params)
                    and self._pure(v, params, func, 0) for v in values) or self._reduced_in_place(func, values, params))
            if not self._memo[key]:  # type: ignore[index]
                return False
        return True

    def _reduced_in_place(self, func: ast.AST, values: list, params: set[str]) -> bool:
        """``dist.all_reduce(value); value /= world_size; return value`` (or ``return value`` at once with one process):
        every return hands back the one parameter the function reduces in place, a tensor where it was."""
        if not all(isinstance(v, ast.Name) for v in values) or len(names := {v.id for v in values}) != 1:
            return False
        name = names.pop()
        if name not in params:
            return False
        if "all_reduce" not in self._memo:  # (no ``all_reduce`` in the file, the common case: no function is walked)
            self._memo["all_reduce"] = any(isinstance(c.func, ast.Attribute) and c.func.attr == "all_reduce"  # type: ignore[attr-defined,index]
                                           for c in self.index.by_type.get(ast.Call, ()))
        if not self._memo["all_reduce"]:  # type: ignore[index]
            return False
        return any(
            isinstance(n, ast.Call) and (dotted(n.func) or "").rsplit(".", 1)[-1] == "all_reduce" and n.args
            and isinstance(n.args[0], ast.Name) and n.args[0].id == name for n in self.index.subtree(func))

    def _pure(self, expr: ast.AST, params: set[str], func: ast.AST, depth: int) -> bool:
        """(A method, not a closure: a recursive closure is a reference cycle that keeps the tree alive.)"""
        if isinstance(expr, ast.Name):
            if expr.id in params:
                return True
            bound = [b for b in self.bindings.by_key.get(expr.id, []) if b.scope is func]  # ``rt = t.clone()``
            return depth < 2 and len(bound) == 1 and bound[0].value is not None and bound[0].index is None \
                and not bound[0].is_param and self._pure(bound[0].value, params, func, depth + 1)
        if isinstance(expr, ast.Constant):
            return isinstance(expr.value, (int, float))
        if isinstance(expr, ast.BinOp):
            return self._pure(expr.left, params, func, depth) and self._pure(expr.right, params, func, depth)
        if isinstance(expr, ast.UnaryOp):
            return self._pure(expr.operand, params, func, depth)
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            return expr.func.attr in _TENSOR_METHODS_ONLY | {"clone", "float", "double", "half"} \
                and self._pure(expr.func.value, params, func, depth)
        return False

    def return_kind(self, func: ast.AST) -> str | None:
        """What ``func`` returns, when every ``return`` agrees (for the project index)."""
        return self._return_kind([func])

    def _return_kind(self, funcs: list[ast.AST], index: int | None = None) -> str | None:
        """What an in-file function returns, when every ``return`` agrees (``build_model()`` -> model); with ``index``,
        element ``index`` of the tuple every ``return`` hands back (``return x, y, torch.sum(y != 0, dim=-1)``)."""
        kinds: set[str | None] = set()
        for func in funcs:
            if id(func) in self._busy:
                return None
            self._busy.add(id(func))
            try:
                for node in self.returns_of(func):
                    value = node.value
                    if index is not None:
                        if not (isinstance(value, ast.Tuple) and index < len(value.elts)):
                            return None
                        value = value.elts[index]
                    kinds.add(self.expr_kind(value, node))  # type: ignore[arg-type]
            finally:
                self._busy.discard(id(func))
        return kinds.pop() if len(kinds) == 1 else None

    def returns_of(self, func: ast.AST) -> list[ast.Return]:
        """The ``return value`` statements of ``func`` itself (not of functions nested in it); memoised (the summary
        and the rules ask it of the same functions again and again)."""
        key = ("returns", id(func))
        found = self._memo.get(key)
        if found is None:
            frames = self.index.frame
            found = self._memo[key] = [n for n in self.index.below(func)  # type: ignore[assignment]
                                       if isinstance(n, ast.Return) and n.value is not None and frames[n].unit is func]  # type: ignore[misc]
        return found  # type: ignore[return-value]

    def returned_values(self, func: ast.AST, index: int | None = None) -> list[ast.AST] | None:
        """What every ``return`` of ``func`` hands back (element ``index`` of its tuple, when one is unpacked);
        None when ``func`` returns nothing, or some return is no tuple that long."""
        values: list[ast.AST] = []
        for ret in self.returns_of(func):
            value = ret.value
            if index is not None:
                if not (isinstance(value, ast.Tuple) and index < len(value.elts)):
                    return None
                value = value.elts[index]
            values.append(value)  # type: ignore[arg-type]
        return values or None

    def _model_registry_call(self, call: ast.Call) -> bool:
        """``models.__dict__[args.arch](num_classes=365)``: torchvision's model builders looked up by name."""
        func = call.func
        return isinstance(func, ast.Subscript) and isinstance(func.value, ast.Attribute) and func.value.attr == "__dict__" \
            and (self.names.qualname(func.value.value) or "") == "torchvision.models"

    def is_model_constructor(self, call: ast.Call, q: str, last: str) -> bool:
        if q.startswith("torch.nn.") and last[:1].isupper() and last != "Parameter":
            return True
        if self.is_module_class(q, call.func):
            return True
        if last == "from_pretrained":
            return not _NOT_MODELS.search(q)
        if q.startswith("torchvision.models.") and last[:1].islower() and not last.startswith("get_"):
            return True
        return q in ("timm.create_model", "torch.hub.load") or (q.startswith("transformers.Auto") and "Model" in q)
