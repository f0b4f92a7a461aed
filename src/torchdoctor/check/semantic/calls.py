"""Calls: which function a call may run (in this file, or in another module of the project), the call
sites of a function, and the *effects* of code: backward, optimizer steps, zero_grad, set_epoch,
train/eval modes, saving, all through the functions it calls."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable

from torchdoctor.check.astutil import PLACEMENT_METHODS, call_argument, dotted, is_false, keyword, method_name, param_default, \
    strip_methods
from torchdoctor.check.patterns import lazy
from torchdoctor.check.semantic.bindings import Bindings
from torchdoctor.check.semantic.kinds import Kinds
from torchdoctor.check.semantic.names import Names
from torchdoctor.check.semantic.walk import CLASS, Index

__all__ = ["Calls", "EFFECTS", "SAVERS"]

# What code may do, as far as rules care.
# ("sync": reads a tensor back to the host; "read": a scalar read, ``.item()``, the kind that a device total avoids)
EFFECTS = ("backward", "step", "zero_grad", "set_epoch", "eval", "train", "save", "empty_cache", "sync", "read",
           "set_device")  # ("set_device": binds this process to its GPU, ``torch.cuda.set_device(rank)``)
_TRAIN_METHODS = {"train", "eval", "to", "cuda", "step", "zero_grad", "backward", "parameters", "forward"}
_STORE_NAME = lazy(r"(?i)(buffer|memory|replay|storage|rollouts?|dataset|sampler|loader)$")  # (no network)
_ELSEWHERE = object()  # the elements are instances of a class this file does not define
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
SAVERS = ("torch.save", "torch_xla.core.xla_model.save", "xm.save", "safetensors.torch.save_file",
          "numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.savetxt")

# The last word of every call ``node_effects`` may report (method or function name, SAVERS' included).
_EFFECT_WORDS = frozenset({"backward", "step", "zero_grad", "zero_grad_", "zero_", "fill_", "detach_", "set_epoch",
                           "set_device",
                           "train", "eval", "empty_cache", "item", "tolist", "cpu", "save_pretrained", "save_state",
                           "save_model", *(s.rsplit(".", 1)[-1] for s in SAVERS)})

_EFFECT_NODES = (ast.Call, ast.Assign, ast.Compare, ast.comprehension)  # what ``node_effects`` may find effects in



class Calls:
    """``external(call)`` (given by the project index) returns the summary of a function of another
    module that the call runs, or None; its ``effects`` are a frozenset of EFFECTS."""

    def __init__(self, index: Index, names: Names, bindings: Bindings, kinds: Kinds,
                 external: Callable[[ast.Call], object | None] | None = None) -> None:
        self.index = index
        self.names = names
        self.bindings = bindings
        self.kinds = kinds
        self.external = external
        self.functions: dict[str, list[ast.AST]] = {}  # every def, methods included, by name
        for t in (ast.FunctionDef, ast.AsyncFunctionDef):
            for f in index.by_type.get(t, ()):
                self.functions.setdefault(f.name, []).append(f)  # type: ignore[attr-defined]
        self.classes = {c.name: c for c in index.by_type.get(ast.ClassDef, ())}  # type: ignore[attr-defined]
        self.calls: list[ast.Call] = index.by_type.get(ast.Call, [])  # type: ignore[assignment]
        self.by_name: dict[str, list[ast.Call]] = {}  # the callee's last name -> calls
        self.by_keyword: dict[str, list[ast.Call]] = {}
        by_name, by_keyword, Name, Attribute = self.by_name.setdefault, self.by_keyword.setdefault, ast.Name, ast.Attribute
        for call in self.calls:
            func = call.func
            last = func.id if isinstance(func, Name) else func.attr if isinstance(func, Attribute) else ""
            by_name(last, []).append(call)
            for kw in call.keywords:
                if kw.arg:
                    by_keyword(kw.arg, []).append(call)
        self._resolved: dict[ast.Call, list[ast.AST]] = {}
        self._sites: dict[ast.AST, list[ast.Call]] | None = None
        self._reach: dict[ast.AST, list[ast.AST]] = {}
        self._effects: dict[ast.AST, frozenset[str]] = {}
        self._deep: dict[ast.AST, frozenset[str]] = {}
        self._externals: dict[ast.Call, object | None] = {}
        self._busy: set[tuple[ast.AST, bool]] = set()

    def named(self, *names: str) -> list[ast.Call]:
        """Calls whose callee's last name is one of ``names``, in source order."""
        if len(names) == 1:
            return self.by_name.get(names[0], [])
        out = [c for n in names for c in self.by_name.get(n, [])]
        out.sort(key=self.index.pos.__getitem__)
        return out

    # ---- resolution -------------------------------------------------------------------------------
    def class_of(self, node: ast.AST) -> ast.AST | None:
        frame = self.index.frame.get(node)
        return frame.cls if frame is not None else None

    def resolve(self, call: ast.Call) -> list[ast.AST]:
        """In-file functions a call may run: ``f()`` -> ``def f``; ``self.m()`` -> the class's ``m``;
        ``Trainer(...)`` -> ``Trainer.__init__``."""
        hit = self._resolved.get(call)
        if hit is None:
            self._resolved[call] = []  # (while it is being found: ``model = model(x)`` asks about itself)
            hit = self._resolved[call] = self._resolve(call)
        return hit

    def _closures(self, value: ast.AST | None, depth: int = 0) -> list[ast.AST]:
        """``train_step_fn = make_train_step_fn(model, loss_fn, opt)``: the functions nested in the factory that its
        every ``return`` hands back (``return perform_train_step_fn``); also through an alias of such a name
        (``step_fn = self.train_step_fn``)."""
        if isinstance(value, (ast.Name, ast.Attribute)) and depth < 2 and (key := dotted(value)):
            bound = self.bindings.at(key, value)
            return self._closures(bound.value, depth + 1) if bound is not None and bound.index is None \
                and not bound.is_param else []
        if not isinstance(value, ast.Call):
            return []
        out: list[ast.AST] = []
        for factory in self.resolve(value):
            nested = {f.name: f for f in self.index.below(factory) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                      and self.index.frame[f].function is factory}
            returns = [n for n in self.kinds.returns_of(factory)]
            if not nested or not returns or not all(isinstance(r.value, ast.Name) and r.value.id in nested  # type: ignore[attr-defined]
                                                    for r in returns):
                return []
            out += [nested[r.value.id] for r in returns]  # type: ignore[attr-defined]
        return out

    def _handed_functions(self, outer: ast.AST, param: str) -> list[ast.AST]:
        """The module-level functions of the file a parameter of ``outer`` holds: its default (``def eval_model(...,
        accuracy_fn=accuracy_fn)``) and what the file's direct calls of ``outer`` pass for it (``validate(loader,
        model, criterion, eval_score=accuracy)``), when each is a function's name; else nothing."""
        if not isinstance(outer, (ast.FunctionDef, ast.AsyncFunctionDef)) or self.index.frame[outer].function is not None:
            return []
        given = [param_default(outer, param)]
        for site in self.by_name.get(outer.name, []):
            if isinstance(site.func, ast.Name) and site.func.id == outer.name:
                given.append(call_argument(site, outer, param))
        out: list[ast.AST] = []
        for g in given:
            if isinstance(g, ast.Name):
                out += [f for f in self.functions.get(g.id, []) if self.index.frame[f].function is None
                        and not self._is_method(f) and f not in out and not self._backpropagates(f)]
        return out

    def _backpropagates(self, func: ast.AST) -> bool:
        """``def fgsm(model, x, y, loss_fn): ... loss.backward()``: an attack handed to an evaluation loop takes its own
        gradients; followed, it would make the loop a training one (so it is not followed)."""
        return any(isinstance(c.func, ast.Attribute) and self.index.frame[c].function is func
                   for c in self.by_name.get("backward", []))  # (the calls whose last name is ``backward``)

    def _live_at_calls(self, found: list[ast.AST], outer: ast.AST) -> list[ast.AST]:
        """A notebook defines ``accuracy()`` again cells later, and ``test()`` calls it: at run time each top-level
        call of ``test`` runs the ``accuracy`` last defined before that call (a ``trainIters`` run again after
        ``train_onepair`` is redefined runs the new one). A ``test`` no top-level code calls runs the def nearest
        above it (or, none above, the first below it: a helper defined under its caller)."""
        name = outer.name  # type: ignore[attr-defined]
        rivals = [f for f in self.functions.get(name, []) if self.index.frame[f].function is None]
        runs = [c.lineno for c in self.by_name.get(name, []) if isinstance(c.func, ast.Name)
                and self.index.frame[c].function is None
                and max((f for f in rivals if f.lineno < c.lineno), key=lambda f: f.lineno, default=None) is outer]  # type: ignore[attr-defined]
        if runs:
            live = {max((f for f in found if f.lineno < line), key=lambda f: f.lineno, default=None) for line in runs}  # type: ignore[attr-defined]
            live.discard(None)
            if live:
                return sorted(live, key=lambda f: f.lineno)  # type: ignore[attr-defined, return-value]
        above = [f for f in found if f.lineno < outer.lineno]  # type: ignore[attr-defined]
        below = [f for f in found if f.lineno > outer.lineno]  # type: ignore[attr-defined]
        return above[-1:] if above else below[:1]

    def _resolve(self, call: ast.Call) -> list[ast.AST]:
        func = call.func
        if isinstance(func, ast.Name):
            bound = self.bindings.at(func.id, call)
            if bound is not None and (func.id not in self.bindings.functions or bound.scope is not self.index.tree):
                # (``loss_fn = nn.NLLLoss()`` in ``def loss_fn(params)``, or a parameter: a local shadows the def)
                # ``backwards = partial(loss_backwards, self.fp16)``: a call of it runs that function
                value = bound.value
                if isinstance(value, ast.Call) and value.args and (dotted(value.func) or "").rsplit(".", 1)[-1] == \
                        "partial" and isinstance(value.args[0], ast.Name) and value.args[0].id != func.id:
                    return [f for f in self.functions.get(value.args[0].id, []) if not self._is_method(f)]
                if bound.is_param:
                    return self._handed_functions(bound.node, func.id)
                return self._closures(value) if bound.index is None else []
                # (a local value shadows nothing else we know)
            if func.id in self.classes:
                return self._methods(self.classes[func.id], "__init__")
            found = [f for f in self.functions.get(func.id, []) if not self._is_method(f)]
            if len(found) > 1 and self.index.frame[call].function is None:
                # a notebook defines ``training_loop`` again, cells later: a top-level call runs the one above it
                above = [f for f in found if f.lineno < call.lineno and self.index.frame[f].function is None]  # type: ignore[attr-defined]
                return above[-1:] or found
            outer = self.index.frame[call].function
            if len(found) > 1 and outer is not None and self.index.frame[outer].function is None \
                    and all(self.index.parent.get(f) is self.index.tree for f in [*found, outer]):
                return self._live_at_calls(found, outer)
            return found
        if isinstance(func, ast.Attribute) and func.attr not in self.functions and (dotted(func) or "").startswith("self.") \
                and (bound := self.bindings.at(dotted(func) or "", call)) is not None and bound.index is None:
            return self._closures(bound.value)  # ``self.step = self._build_step()``, then ``self.step(x, y)``
        if not isinstance(func, ast.Attribute) or func.attr not in self.functions:
            return []  # (what a method call may run is a def of its name: most calls have none in the file)
        receiver = func.value
        if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "super":
            cls = self.class_of(call)  # ``super().__init__(...)``: the base classes of this file
            bases = self._bases(cls)
            return [f for base in bases for f in self._methods(base, func.attr)]
        if isinstance(receiver, ast.Subscript) and (base := dotted(receiver.value)):
            # ``self.stats[k].update(x)``: an element of a list of in-file class instances runs that class's method
            # (and nothing else: a list of known elements is no guess by name)
            element = self._element_class(base, call)
            if element is not None:
                return self._methods(element, func.attr) if element is not _ELSEWHERE else []
            if self._holds_plain_values(base, call):
                return []
        key = dotted(receiver) or ""
        if key == "self":
            cls = self.class_of(call)
            own = [f for f in self.functions.get(func.attr, []) if self.class_of(f) is cls]
            if not own and cls is not None:  # ``self.optimize(loss)`` in a subclass: the in-file base's method runs
                own = [f for base in self._bases(cls) for f in self._methods(base, func.attr)]
            # (when ``self`` is a subclass of this file, its override runs: ``self.forward_backward(batch)`` in
            # ``Engine.train``'s loop runs ``SoftmaxEngine.forward_backward``)
            return own + [f for f in self.functions.get(func.attr, [])
                          if (c := self.class_of(f)) is not None and c is not cls and self._inherits(c, cls)]
        owner = self._instance_class(key, call) if key else None
        if owner is not None:  # ``trainer = Trainer(...); trainer.fit()``
            return self._methods(owner, func.attr)
        if func.attr in _TRAIN_METHODS or func.attr.startswith("__"):
            return []
        methods = [f for f in self.functions[func.attr] if self.class_of(f) is not None]
        if not methods:
            return []  # (only functions of that name, no method: no kind to ask)
        if key and (key.split(".")[0] in self.names.modules or self.kinds.kind_of(key, call) is not None):
            return []  # a module's function, or a method of a value whose kind we know (not an in-file class)
        if _STORE_NAME.search(key.rsplit(".", 1)[-1]):  # ``replay_buffer.sample(batch_size)`` is no network's
            methods = [f for f in methods if self.class_of(f).name not in self.kinds.module_classes]  # type: ignore[union-attr]
            # ``sample(state)`` (an actor's, a VAE's)
        # (an attribute of ``self`` holds another object: ``self.ret_rms.update(x)`` is not this class's ``update``)
        own = self.class_of(call) if key.startswith("self.") else None
        return methods if own is None else [f for f in methods if self.class_of(f) is not own]

    def _bases(self, cls: ast.AST | None) -> list[ast.AST]:
        """The base classes of ``cls`` that this file defines."""
        return [self.classes[n] for b in getattr(cls, "bases", []) if (n := dotted(b) or "") in self.classes]

    def _inherits(self, cls: ast.AST, base: ast.AST | None) -> bool:
        """``cls`` derives from ``base``, through classes of this file."""
        todo, seen = [cls], set()
        while todo:
            c = todo.pop()
            if id(c) in seen:
                continue
            seen.add(id(c))
            parents = self._bases(c)
            if any(p is base for p in parents):
                return True
            todo += parents
        return False

    def _is_method(self, func: ast.AST) -> bool:
        """Defined right in a class body (a function nested in a method is a plain function)."""
        frame = self.index.frame.get(func)
        return frame is not None and frame.kind == CLASS

    def lineage(self, cls: ast.AST) -> list[ast.AST]:
        """``cls`` and its base classes that this file defines, nearest first (as method resolution reads them)."""
        out: list[ast.AST] = []
        todo = [cls]
        while todo:
            c = todo.pop(0)
            if c not in out:
                out.append(c)
                todo += self._bases(c)
        return out

    def _methods(self, cls: ast.AST, name: str) -> list[ast.AST]:
        """``name`` of an in-file class, or of its in-file base classes."""
        for c in self.lineage(cls):
            own = [f for f in self.functions.get(name, []) if self.class_of(f) is c]
            if own:
                return own
        return []

    def _instance_class(self, key: str, at: ast.AST) -> ast.AST | None:
        """The in-file class whose instance ``key`` holds (``x = Cls(...)``), if the binding says so."""
        for _ in range(3):  # (``model = RNN(...)``, then ``model = model.to(device)``: the same instance)
            b = self.bindings.at(key, at)
            value = b.value if b is not None and not b.is_param and b.index is None else None
            value = strip_methods(value, PLACEMENT_METHODS) if value is not None else None  # ``Transcriber().to(dev)``
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
                return self.classes.get(value.func.id)
            if value is None or dotted(value) != key:
                return None
            at = b.node  # type: ignore[union-attr]
        return None

    def _element_class(self, key: str, at: ast.AST) -> ast.AST | object | None:
        """The in-file class of the elements of the list ``key`` holds (``[Cls(...) for _ in ...]``,
        ``[Cls(a), Cls(b)]``, ``nn.ModuleList([...])``), if the binding says so."""
        b = self.bindings.at(key, at)
        value = b.value if b is not None and not b.is_param and b.index is None else None
        if isinstance(value, ast.Call) and value.args and (dotted(value.func) or "").endswith(("ModuleList", "list")):
            value = value.args[0]
        elements = [value.elt] if isinstance(value, (ast.ListComp, ast.GeneratorExp)) else \
            list(value.elts) if isinstance(value, (ast.List, ast.Tuple)) else []
        if not elements or not all(isinstance(e, ast.Call) and isinstance(e.func, ast.Name) for e in elements):
            return None
        names = {e.func.id for e in elements}  # type: ignore[attr-defined]
        if not names & (self.classes.keys() | self.functions.keys()):
            return _ELSEWHERE  # instances of a class of another module (``[MovingAverage(...) for _ in envs]``)
        classes = {self.classes.get(n) for n in names}
        return classes.pop() if len(classes) == 1 and None not in classes else None

    def _holds_plain_values(self, key: str, at: ast.AST) -> bool:
        """``key`` is bound to a list or dict display of no calls (``grads = [{} for _ in envs]``): its elements
        are plain values, whose methods are no in-file class's."""
        b = self.bindings.at(key, at)
        value = b.value if b is not None and not b.is_param and b.index is None else None
        if isinstance(value, (ast.ListComp, ast.GeneratorExp)):
            value = value.elt
        if isinstance(value, (ast.List, ast.Tuple, ast.Set)):
            return all(isinstance(e, (ast.Constant, ast.Dict, ast.List)) for e in value.elts)
        return isinstance(value, (ast.Dict, ast.DictComp, ast.Constant))

    def external_of(self, call: ast.Call) -> object | None:
        """The summary of a function in another module of the project that ``call`` runs, or None."""
        if self.external is None:
            return None
        if call in self._externals:
            return self._externals[call]
        found = None if self.resolve(call) or not isinstance(call.func, (ast.Name, ast.Attribute)) else self.external(call)
        self._externals[call] = found
        return found

    def sites(self, func: ast.AST) -> list[ast.Call]:
        """Calls in the file that may run ``func`` (see ``resolve``)."""
        if self._sites is None:
            out: dict[ast.AST, list[ast.Call]] = {}
            for node in self.calls:
                for f in self.resolve(node):
                    out.setdefault(f, []).append(node)
            self._sites = out
        return self._sites.get(func, [])

    def local_nodes(self, region: ast.AST) -> list[ast.AST]:
        """The nodes below ``region`` in its own body: nested functions, lambdas and classes excluded
        (for a function, its body only: not its decorators or defaults)."""
        index = self.index
        if isinstance(region, _SCOPES):
            body = region.body if isinstance(region.body, list) else [region.body]  # type: ignore[attr-defined]
            return index.local(index.pos[body[0]], index.end(body[-1])) if body else []
        return index.local(index.pos[region] + 1, index.end(region))

    def reachable(self, func: ast.AST) -> list[ast.AST]:
        """``func`` and every in-file function it may call, transitively, in discovery order."""
        hit = self._reach.get(func)
        if hit is not None:
            return hit
        out: list[ast.AST] = [func]
        seen = {func}
        i = 0
        while i < len(out):
            for node in self.local_nodes(out[i]):
                if isinstance(node, ast.Call):
                    for f in self.resolve(node):
                        if f not in seen:
                            seen.add(f)
                            out.append(f)
            i += 1
        self._reach[func] = out
        return out

    # ---- effects ---------------------------------------------------------------------------------------
    def is_backward_call(self, node: ast.AST) -> bool:
        if not isinstance(node, ast.Call):
            return False
        if method_name(node) == "backward":
            return len(node.args) <= 2 or isinstance(node.func.value, ast.Name) and node.func.value.id == "self"  # type: ignore[attr-defined]
            # (``wkv_cuda.backward(B, T, C, w, u, k, v, gy, gw, gu)``: a kernel's op; ``self.backward(x, y, probas)``:
            # a model's own gradients, computed by hand for its update)
        func = node.func
        if isinstance(func, ast.Name) and "scal" in func.id and node.args and self._loss_scaler(func, node):
            return True  # ``loss_scaler(loss, optimizer, parameters=...)``: timm's NativeScaler runs the backward
        return (self.names.call_name(node) or "") in ("torch.autograd.backward", "torch.autograd.grad")

    def _loss_scaler(self, func: ast.Name, call: ast.Call) -> bool:
        """``func`` is a loss scaler object whose call backpropagates and steps (timm's ``NativeScaler``, BEiT's and
        MAE's ``NativeScalerWithGradNormCount``): named ``loss_scaler``, or made from such a class."""
        if func.id in ("loss_scaler", "scaler_loss", "amp_scaler") and len(call.args) >= 2:
            return True
        b = self.bindings.at(func.id, call)
        made = b.value if b is not None and not b.is_param else None
        return isinstance(made, ast.Call) and (dotted(made.func) or "").rsplit(".", 1)[-1].startswith("NativeScaler")

    def mode_call(self, call: ast.AST) -> str | None:
        """"train" | "eval" | None for ``m.train()``/``m.eval()``/``m.train(False)`` on a model."""
        meth = method_name(call)
        if meth not in ("train", "eval") or not isinstance(call, ast.Call):
            return None
        key = dotted(call.func.value) or ""  # type: ignore[union-attr]
        if "trainer" in key.lower() or self.kinds.kind_of(key, call) not in (None, "model", "wrapper"):
            return None
        if meth == "eval":
            return "eval" if not call.args else None
        kw = keyword(call, "mode")
        arg = call.args[0] if call.args else (kw.value if kw else None)
        if arg is None or (isinstance(arg, ast.Constant) and arg.value is True):
            return "train"
        return "eval" if is_false(arg) else None

    def is_optimizer_step(self, node: ast.AST) -> bool:
        if not isinstance(node, ast.Call) or method_name(node) != "step":
            return False
        key = dotted(node.func.value) or ""  # type: ignore[attr-defined]
        kind = self.kinds.kind_of(key, node) if key else None
        if kind in ("optimizer", "scaler"):
            return True
        return kind is None and "opt" in key.rsplit(".", 1)[-1].lower()

    def zeroes_grads(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Call) and method_name(node) in ("zero_grad", "zero_grad_"):
            return True
        if isinstance(node, ast.Assign):  # p.grad = None
            return any(isinstance(t, ast.Attribute) and t.attr == "grad" for t in node.targets)
        if isinstance(node, ast.Call) and method_name(node) in ("zero_", "fill_", "detach_"):
            return "grad" in (dotted(node.func.value) or "")  # type: ignore[attr-defined]
        return False

    def _closure_stepped(self, call: ast.Call) -> list[ast.AST]:
        """``optimizer.step(closure)`` of a ``def closure():`` written in the same function: the optimizer runs it
        (L-BFGS, a physics-informed network's training step), so its backward is the step's."""
        if not (call.args and isinstance(arg := call.args[0], ast.Name) and method_name(call) == "step"
                and self.is_optimizer_step(call)):
            return []
        here = self.index.frame[call].function
        return [f for f in self.functions.get(arg.id, ()) if self.index.frame[f].function is here and here is not None]

    def node_effects(self, node: ast.AST) -> Iterable[str]:
        """The effects of one node by itself (not of the functions it calls)."""
        if isinstance(node, ast.Assign):
            if self.zeroes_grads(node):
                yield "zero_grad"
            return
        if isinstance(node, ast.comprehension):
            if self._indexes_with_items(node):
                yield "sync"  # ``[chars[i] for i in text_index[row, :]]``: each element read to index with
                yield "read"
            return
        if isinstance(node, ast.Compare):
            if self._compares_items(node):
                yield "sync"  # ``if t[i] != 0`` on a tensor: Python asks for one element, a read each time
                yield "read"
            return
        if not isinstance(node, ast.Call):
            return
        func = node.func
        if isinstance(func, ast.Attribute):
            if func.attr not in _EFFECT_WORDS:
                return  # most calls (``torch.cat``, ``self.conv1(x)``): no effect, no name to resolve
        elif not isinstance(func, ast.Name) or (func.id not in _EFFECT_WORDS and func.id not in self.names.imports):
            return  # (an imported name may be ``torch.save`` under another name)
        meth = method_name(node)
        if self.is_backward_call(node):
            yield "backward"
        elif meth == "step" and self.is_optimizer_step(node):
            yield "step"
        elif self.zeroes_grads(node):
            yield "zero_grad"
        elif meth == "set_epoch":
            yield "set_epoch"
        elif meth in ("train", "eval"):
            mode = self.mode_call(node)
            if mode:
                yield mode
        elif meth == "empty_cache":
            yield "empty_cache"
        elif meth == "set_device" and (self.names.call_name(node) or "").endswith("cuda.set_device"):
            yield "set_device"
        elif meth in ("item", "tolist", "cpu") and not node.args:
            yield "sync"  # reads a tensor back to the host (a sync when it lives on a GPU)
            if meth == "item":
                yield "read"
        q = self.names.call_name(node) or ""
        if q in SAVERS or meth in ("save_pretrained", "save_state", "save_model"):
            yield "save"

    def _compares_items(self, node: ast.Compare) -> bool:
        """``t[i] != 0`` with ``t`` a parameter or a row of one (``t = text_index[index, :]``): a decoder walking
        its input element by element. (A call site that hands it a device tensor reads it back item by item.)"""
        operands = [node.left, *node.comparators]
        if not any(isinstance(o, ast.Constant) and type(o.value) is int for o in operands):
            return False
        for o in operands:
            if isinstance(o, ast.Subscript) and isinstance(o.value, ast.Name) and isinstance(o.slice, ast.Name):
                if self._param_items(o.value, node):
                    return True
                b = self.bindings.at(o.value.id, node)  # ``t = text_index[index, :]`` first
                if b is not None and b.value is not None and not b.is_param and self._param_items(b.value, b.node):
                    return True
        return False

    def _param_items(self, expr: ast.AST, at: ast.AST) -> bool:
        """``expr`` is a parameter or a row of one (``text_index[index, :]``)."""
        if isinstance(expr, ast.Subscript):
            expr = expr.value
        if not isinstance(expr, ast.Name):
            return False
        b = self.bindings.at(expr.id, at)
        return b is not None and b.is_param

    def _indexes_with_items(self, gen: ast.comprehension) -> bool:
        comp = self.index.parent.get(gen)
        elt = getattr(comp, "elt", None)
        if elt is None or not isinstance(gen.target, ast.Name) or not self._param_items(gen.iter, gen):
            return False
        name = gen.target.id
        return any(isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Name) and n.slice.id == name
                   for n in self.index.subtree(elt))

    def effects(self, func: ast.AST, deep: bool = False) -> frozenset[str]:
        """What running ``func`` may do: its own nodes' effects and those of every function it calls in
        this file; with ``deep``, also of the functions of other modules of the project it calls."""
        memo = self._deep if deep else self._effects
        hit = memo.get(func)
        if hit is not None:
            return hit
        busy = (func, deep)
        if busy in self._busy:
            return frozenset()
        self._busy.add(busy)
        try:
            found = self.region_effects(self.local_nodes(func), deep)
        finally:
            self._busy.discard(busy)
        memo[func] = found
        return found

    def region_effects(self, nodes: Iterable[ast.AST], deep: bool = False) -> frozenset[str]:
        """The effects of running these nodes, through every call among them (see ``effects``)."""
        out: set[str] = set()
        for node in nodes:
            if isinstance(node, _EFFECT_NODES):  # (the others have no effect of their own: no generator for them)
                out.update(self.node_effects(node))
            if isinstance(node, ast.Call):
                for f in self.resolve(node):
                    out |= self.effects(f, deep)
                for f in self._closure_stepped(node):
                    out |= self.effects(f, deep)
                if deep and self.external is not None:
                    ext = self.external_of(node)
                    if ext is not None:
                        out |= getattr(ext, "effects", frozenset())
        return frozenset(out)
