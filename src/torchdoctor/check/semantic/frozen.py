"""Models that record no graph when called: frozen before the call (``requires_grad_(False)``, a loop over
``parameters()``, every caller handing a frozen one, a class that freezes itself in ``__init__``,
``Embedding.from_pretrained``) or whose method turns autograd off itself (``@torch.no_grad() def forward``)."""

from __future__ import annotations

import ast

from torchdoctor.check.astutil import call_argument, dotted, is_false, is_true, method_name, param_default
from torchdoctor.check.semantic.model import SemanticModel
from torchdoctor.check.semantic.models import construction

__all__ = ["built_without_grad", "calls_a_frozen_model", "calls_a_quiet_method", "quiet_self_calls", "class_freezes_itself",
           "forward_quiet_unless", "frozen_as_built", "methods_without_grad", "model_forward_records_nothing",
           "flags_pick_a_branch_without_grad", "forward_flag_chain", "class_differentiates", "model_differentiates"]


def methods_without_grad(sem: SemanticModel, cls: ast.AST) -> frozenset[str]:
    """The module class's methods that turn autograd off themselves: decorated with ``torch.no_grad()`` (or
    ``inference_mode``), their body one ``with torch.no_grad():``, or ``return self.sample(...)`` of a method that is
    (a diffusion vocoder's ``forward`` that samples; a language model's ``@torch.inference_mode() def generate``):
    calling them records no graph."""
    methods = {f.name: f for f in getattr(cls, "body", ()) if isinstance(f, ast.FunctionDef)}
    plain = getattr(cls, "name", None) not in sem.module_classes and ("no_grad" in sem.text.source
                                                                      or "inference_mode" in sem.text.source)
    return frozenset(name for name, f in methods.items() if name != "__init__" and (
        _runs_without_grad(sem, f, methods, 0) or plain and _calls_its_model_without_grad(sem, f, methods)))


def forward_quiet_unless(sem: SemanticModel, cls: ast.AST) -> str | None:
    """``if not self.trainable: return self.inference(x)`` first in ``forward``, where ``inference`` turns autograd off
    itself (``@torch.no_grad()``) and ``__init__`` sets ``self.trainable = trainable`` from a parameter whose default
    is false: that parameter (a detector built for inference records no graph); else None."""
    methods = {f.name: f for f in getattr(cls, "body", ()) if isinstance(f, ast.FunctionDef)}
    forward, init = methods.get("forward"), methods.get("__init__")
    if forward is None or init is None:
        return None
    body = [s for s in forward.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    first = body[0] if body else None
    if not (isinstance(first, ast.If) and isinstance(first.test, ast.UnaryOp) and isinstance(first.test.op, ast.Not)
            and (flag := dotted(first.test.operand) or "").startswith("self.") and flag.count(".") == 1
            and isinstance(ret := first.body[-1], ast.Return) and isinstance(call := ret.value, ast.Call)
            and isinstance(call.func, ast.Attribute) and dotted(call.func.value) == "self"
            and (inner := methods.get(call.func.attr)) is not None and _runs_without_grad(sem, inner, methods, 1)):
        return None
    params = {a.arg for a in [*init.args.args[1:], *init.args.kwonlyargs]}
    for st in init.body:
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and dotted(st.targets[0]) == flag \
                and isinstance(st.value, ast.Name) and st.value.id in params and is_false(param_default(init, st.value.id)):
            return st.value.id
    return None


def built_without_grad(sem: SemanticModel, call: ast.Call) -> bool:
    """``net(x)`` of ``net = YOLOv3(device, trainable=False)`` (here, or handed by every call of the function around it
    in this file), a class whose forward runs a no-grad method unless built with its flag: autograd records nothing."""
    target = call.func
    if not isinstance(target, (ast.Name, ast.Attribute)) or not dotted(target):
        return False
    made = construction(sem, target, call)
    if made is not None:
        return _built_quiet(sem, made)
    func = sem.function_of(call)
    b = sem.binding_at(target.id, call) if isinstance(target, ast.Name) else None
    if func is None or b is None or not b.is_param or b.node is not func:
        return False
    sites = sem.call_sites(func)
    return bool(sites) and all(isinstance(arg := call_argument(site, func, target.id), (ast.Name, ast.Attribute))
                               and (made := construction(sem, arg, site)) is not None and _built_quiet(sem, made)
                               for site in sites)


def _built_quiet(sem: SemanticModel, made: ast.Call) -> bool:
    """``made`` builds a module class whose forward runs a no-grad method unless given its flag (``forward_quiet_unless``),
    and leaves the flag off."""
    return _as_built(sem, made, forward_quiet_unless, "class_quiet_unless")


def _as_built(sem: SemanticModel, made: ast.Call, how_of, asked: str) -> bool:  # type: ignore[no-untyped-def]
    """Whether ``made`` builds its module class in the state ``how_of(sem, cls)`` (a class of this file) or the
    project's answer ``asked`` (``class_frozen``, ``class_quiet_unless``: the deciding parameter and ``__init__``'s
    parameters, of a class of another module) describes, by ``frozen_as_built``."""
    name = sem.call_name(made) or ""
    cls = sem.calls_index.classes.get(name) if name in sem.module_classes else None
    if cls is not None:
        init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)  # type: ignore[attr-defined]
        params = [a.arg for a in init.args.args[1:]] if init is not None else None
        return frozen_as_built(how_of(sem, cls), made, params)
    written = dotted(made.func)
    if sem.project is None or not written:
        return False
    found = getattr(sem.project, asked)(sem, written)
    return found is not None and frozen_as_built(found[0], made, list(found[1]))


def quiet_self_calls(sem: SemanticModel, cls: ast.AST) -> frozenset[str]:
    """The methods ``cls``'s own code calls as ``self.m(...)`` only with autograd off (``@torch.inference_mode() def
    generate`` calling ``self.generate_next_token(tok)``): an override of ``m`` in a subclass records no graph."""
    seen: dict[str, bool] = {}
    for c in sem.subtree(cls):
        if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and isinstance(c.func.value, ast.Name) \
                and c.func.value.id == "self" and sem.class_of(c) is cls:
            seen[c.func.attr] = seen.get(c.func.attr, True) and sem.under_no_grad(c, strict=True)
    return frozenset(m for m, quiet in seen.items() if quiet)


def _calls_its_model_without_grad(sem: SemanticModel, func: ast.AST, methods: dict[str, ast.AST]) -> bool:
    """A method of a plain class that holds a model (``self.model = QAModel(cfg)`` of an inference helper) and calls it
    only under ``with torch.no_grad():``, tokenising before and decoding after: calling it records no graph."""
    inside = False
    for n in sem.subtree(func):
        if not isinstance(n, ast.Call) or not isinstance(n.func, ast.Attribute):
            continue
        key = dotted(n.func) if dotted(n.func.value) == "self" else dotted(n.func.value)
        if n.func.attr in methods and dotted(n.func.value) == "self":
            return False  # (another method of the class: it may call the model, outside the block)
        if key is None or not key.startswith("self.") or key.count(".") != 1 \
                or sem.kind_of(key, n) not in ("model", "wrapper"):
            continue
        if not sem.under_no_grad(n, strict=True):
            return False
        inside = True
    return inside


def _runs_without_grad(sem: SemanticModel, func: ast.AST, methods: dict[str, ast.AST], depth: int) -> bool:
    if any(sem.guards.grad_call(d) == "off" for d in func.decorator_list):  # type: ignore[attr-defined]
        return True
    body = [s for s in func.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]  # type: ignore[attr-defined]
    if len(body) > 1 and isinstance(body[-1], ast.Return) and isinstance(body[-2], ast.With) \
            and not any(isinstance(n, ast.Call) for n in sem.subtree(body[-1])):
        body = body[:-1]  # (``with torch.no_grad(): ... synth_x = self.decoder(h)`` then ``return synth_x``)
    if body and isinstance(body[-1], ast.With) and any(
            isinstance(item.context_expr, ast.Call) and sem.guards.grad_call(item.context_expr) == "off"
            for item in body[-1].items) and all(_lazy_setup(s) or _runs_no_network(sem, s, methods) for s in body[:-1]):
        return True  # (its body one ``with torch.no_grad():``, after a lazy load at most: a vocoder's forward)
    if depth == 0 and body and isinstance(body[-1], ast.Return) and isinstance(call := body[-1].value, ast.Call) \
            and isinstance(call.func, ast.Attribute) and dotted(call.func.value) == "self" \
            and (inner := methods.get(call.func.attr)) is not None \
            and all(_runs_no_network(sem, s, methods) for s in body[:-1]):
        return _runs_without_grad(sem, inner, methods, depth + 1)
    return False


def _lazy_setup(stmt: ast.AST) -> bool:
    """``if self.model is None: self.model, self.h = load_model(path)``: a first call's load, no forward."""
    return isinstance(stmt, ast.If) and not stmt.orelse and isinstance(test := stmt.test, ast.Compare) \
        and len(test.ops) == 1 and isinstance(test.ops[0], ast.Is) and isinstance(test.comparators[0], ast.Constant) \
        and test.comparators[0].value is None and dotted(test.left) is not None and (dotted(test.left) or "").startswith("self.") \
        and all(isinstance(s, (ast.Assign, ast.Expr)) and not (isinstance(s, ast.Assign) and isinstance(s.value, ast.Call)
                and dotted(s.value.func) in (dotted(test.left),)) for s in stmt.body)


def _runs_no_network(sem: SemanticModel, stmt: ast.AST, methods: dict[str, ast.AST]) -> bool:
    """A statement before ``return self.sample(...)`` that runs none of the model's layers: an ``assert``, an ``if``
    that only raises, or a call of a method of the class that calls no layer itself (``self._verify_schedule()``)."""
    if isinstance(stmt, ast.Assert):
        return True
    if isinstance(stmt, ast.If):
        return not stmt.orelse and all(isinstance(s, ast.Raise) for s in stmt.body)
    if not (isinstance(stmt, ast.Expr) and isinstance(call := stmt.value, ast.Call) and isinstance(call.func, ast.Attribute)
            and dotted(call.func.value) == "self" and (method := methods.get(call.func.attr)) is not None):
        return False
    return not any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and dotted(n.func.value) == "self"
                   and n.func.attr not in methods for n in sem.subtree(method))


def model_forward_records_nothing(sem: SemanticModel, expr: ast.AST, at: ast.AST, method: str = "forward") -> bool:
    """The model ``expr`` evaluates to is of a class (of this file or of another module of the project) whose
    ``method`` (``forward``: calling the model) turns autograd off itself (``methods_without_grad``)."""
    value = construction(sem, expr, at)
    if value is None and (value := _annotated_class(sem, expr, at)) is None:
        return False
    q = sem.call_name(value) or ""
    cls = sem.calls_index.classes.get(q)
    if cls is not None:
        return method in methods_without_grad(sem, cls)
    written = dotted(value.func)
    return bool(sem.project is not None and written and method in sem.project.class_quiet_methods(sem, written))  # type: ignore[attr-defined]


def flags_pick_a_branch_without_grad(sem: SemanticModel, call: ast.Call) -> bool:
    """``model.forward(data, predict=True)`` (or ``model.forward(data)``) where ``forward`` picks its branch by flag
    parameters (``if predict: with torch.no_grad(): ... return``, ``elif train: ...``, ``else: with torch.no_grad():
    ... return``) and the branch the call's flags (or their defaults) take runs under no_grad: QuantumDeepField's
    demo and tester. The class is the model's (of this file, or of another module of the project: its summary keeps
    the chain), or the one module class of the file whose ``forward`` branches so."""
    target = call.func.value if isinstance(call.func, ast.Attribute) and call.func.attr == "forward" else call.func
    made = construction(sem, target, call)
    if any(k.arg is None for k in call.keywords):
        return False
    cls = sem.calls_index.classes.get(sem.call_name(made) or "") if made is not None else None
    if made is not None and cls is None:
        written = dotted(made.func)
        chain = sem.project.class_flag_chain(sem, written) if written and sem.project is not None else None  # type: ignore[attr-defined]
        return chain is not None and _chain_takes_quiet(chain, call)
    keys = {k.arg for k in call.keywords}
    chains = [chain for c in ([cls] if cls is not None else [sem.calls_index.classes.get(n) for n in sem.module_classes])
              if c is not None for f in c.body if isinstance(f, ast.FunctionDef) and f.name == "forward"  # type: ignore[attr-defined]
              and keys <= {a.arg for a in [*f.args.args, *f.args.kwonlyargs]} and (chain := forward_flag_chain(sem, f))]
    return len(chains) == 1 and _chain_takes_quiet(chains[0], call)


def forward_flag_chain(sem: SemanticModel, forward: ast.AST) -> tuple[tuple[str | None, object, bool], ...] | None:
    """How ``forward`` picks its branch by flag parameters: ``(flag, ("default", value) of its constant default or
    None, the branch runs under no_grad and returns)`` for each ``if``/``elif``, then ``(None, None, quiet)`` for the
    ``else``; None unless its body is such a chain after statements that call nothing of the model."""
    if not isinstance(forward, ast.FunctionDef):
        return None
    body = [s for s in forward.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    for stmt in body:
        if isinstance(stmt, ast.If):
            break
        if any(isinstance(n, ast.Call) and (dotted(n.func) or "").startswith("self.") for n in sem.subtree(stmt)):
            return None  # (the model runs before the flags choose)
    else:
        return None
    params = {a.arg for a in [*forward.args.args, *forward.args.kwonlyargs]}
    chain: list[tuple[str | None, object, bool]] = []
    while True:
        test = stmt.test  # type: ignore[attr-defined]
        if not (isinstance(test, ast.Name) and test.id in params):
            return None
        default = param_default(forward, test.id)
        chain.append((test.id, ("default", default.value) if isinstance(default, ast.Constant) else None,
                      _quiet_branch(sem, stmt.body)))  # type: ignore[attr-defined]
        rest = stmt.orelse  # type: ignore[attr-defined]
        if len(rest) == 1 and isinstance(rest[0], ast.If):
            stmt = rest[0]
            continue
        if rest:
            chain.append((None, None, _quiet_branch(sem, rest)))
        return tuple(chain)


def _quiet_branch(sem: SemanticModel, branch: list[ast.stmt]) -> bool:
    """The branch is one ``with torch.no_grad():`` that returns."""
    return len(branch) == 1 and isinstance(w := branch[0], ast.With) \
        and any(sem.guards.grad_call(i.context_expr) == "off" for i in w.items if isinstance(i.context_expr, ast.Call)) \
        and bool(w.body) and isinstance(w.body[-1], ast.Return)


def _chain_takes_quiet(chain: tuple[tuple[str | None, object, bool], ...], call: ast.Call) -> bool:
    """The branch of ``chain`` that ``call``'s constant flags (or the flags' defaults) take runs under no_grad."""
    given = {k.arg: k.value for k in call.keywords}
    for flag, default, quiet in chain:
        if flag is None:
            return quiet
        value = given.get(flag)
        if value is not None and not isinstance(value, ast.Constant) or value is None and default is None:
            return False  # (a flag the call computes, or leaves to a default that is no constant)
        if (value.value if value is not None else default[1]):  # type: ignore[index,union-attr]
            return quiet
    return False  # (no ``else``: it falls through to the rest of the body)


_GRAD_CALLS = frozenset({"torch.autograd.grad", "torch.autograd.functional.jacobian", "torch.autograd.functional.hessian",
                         "torch.func.grad", "torch.func.vjp", "torch.func.jacrev"})


def class_differentiates(sem: SemanticModel, cls: ast.AST) -> bool:
    """Some method of the class takes gradients itself (``grads = autograd.grad(loss, fast_weights)`` in MAML's
    ``single_task_out``, which its ``forward`` runs for every task): its forward needs autograd on, evaluation too."""
    return any(isinstance(n, ast.Call) and (sem.call_name(n) or "") in _GRAD_CALLS for n in sem.subtree(cls))


def model_differentiates(sem: SemanticModel, expr: ast.AST, at: ast.AST) -> bool:
    """The model ``expr`` is of a module class (of this file, or of another module of the project) that takes gradients
    in its own methods (``class_differentiates``)."""
    made = construction(sem, expr, at)
    if made is None:
        return False
    cls = sem.calls_index.classes.get(sem.call_name(made) or "")
    if cls is not None:
        return class_differentiates(sem, cls)
    written = dotted(made.func)
    return bool(written and sem.project is not None and sem.project.class_differentiates(sem, written))  # type: ignore[attr-defined]


def calls_a_quiet_method(sem: SemanticModel, call: ast.Call) -> bool:
    """``inferencer.inference_model(q, c)`` where ``inferencer = InferenceModel(path)`` is an instance of a class (of this
    file or of another module of the project) whose ``inference_model`` runs its model under ``torch.no_grad()``."""
    func = call.func
    if not isinstance(func, ast.Attribute) or not isinstance(func.value, ast.Name):
        return False
    b = sem.binding_at(func.value.id, call)
    if b is None or b.is_param or b.index is not None or not isinstance(b.value, ast.Call):
        return False
    written = dotted(b.value.func)
    if not written or not written.rsplit(".", 1)[-1][:1].isupper():
        return False
    cls = sem.calls_index.classes.get(sem.call_name(b.value) or "")
    if cls is not None:
        return func.attr in methods_without_grad(sem, cls)
    return bool(sem.project is not None and func.attr in sem.project.class_quiet_methods(sem, written))  # type: ignore[attr-defined]


def _annotated_class(sem: SemanticModel, expr: ast.AST, at: ast.AST) -> ast.Call | None:
    """``model`` of ``def train(model: LanguageModel, ...)``: a call of the class it is annotated with, as if made
    there (its methods are the class's)."""
    b = sem.binding_at(expr.id, at) if isinstance(expr, ast.Name) else None
    if b is None or not b.is_param or not isinstance(b.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    arg = next((a for a in [*b.node.args.posonlyargs, *b.node.args.args, *b.node.args.kwonlyargs]
                if a.arg == expr.id), None)  # type: ignore[attr-defined]
    note = arg.annotation if arg is not None else None
    if not isinstance(note, (ast.Name, ast.Attribute)) or not (dotted(note) or "").rsplit(".", 1)[-1][:1].isupper():
        return None
    return ast.Call(func=note, args=[], keywords=[])


_FROZEN_BY_DEFAULT = ("torch.nn.Embedding.from_pretrained", "torch.nn.EmbeddingBag.from_pretrained")


def calls_a_frozen_model(sem: SemanticModel, call: ast.Call) -> bool:
    """``model(x)`` (or ``model.predict(x)``) after every parameter of ``model`` was frozen in this file
    (``for _, v in model.named_parameters(): v.requires_grad = False``, ``model.requires_grad_(False)``): with no
    leaf that requires grad, autograd records nothing."""
    func = call.func
    target = func.value if isinstance(func, ast.Attribute) and func.attr in ("predict", "inference", "infer", "forward") \
        else func
    key = dotted(target)
    if not key:
        return False
    made = construction(sem, target, call)
    if made is not None and (sem.call_name(made) or "") in _FROZEN_BY_DEFAULT and not any(
            k.arg == "freeze" and not is_true(k.value) for k in made.keywords):
        return True  # ``nn.Embedding.from_pretrained(vectors)``: ``freeze=True`` unless told otherwise
    if made is not None and _built_frozen(sem, made):
        return True  # ``InceptionV3([block])`` whose ``__init__`` freezes every parameter unless told otherwise
    if made is not None and (inner := _returned_construction(sem, made)) is not None and _built_frozen(sem, inner):
        return True  # ``net = prepare_model(device)`` of ``return Vgg16(requires_grad=False).to(device).eval()``
    here = (call.lineno, call.col_offset)

    def model_binding(at: ast.AST) -> object | None:  # through ``model = model.to(device)``: the same module
        b = sem.binding_at(key, at)
        for _ in range(4):
            value = b.value if b is not None and not b.is_param else None
            while isinstance(value, ast.Call) and method_name(value) in ("to", "cuda", "eval", "half", "float"):
                value = value.func.value  # type: ignore[attr-defined]
            if not (isinstance(value, ast.Name) and value.id == key):
                break
            b = sem.binding_at(key, value)
        return b

    bound = model_binding(call)

    def same_model(at: ast.AST) -> bool:  # the same binding of ``key`` (or, for ``self.net``, the same function)
        return model_binding(at) is bound if bound is not None else sem.function_of(at) is sem.function_of(call)

    for n in sem.calls_named("requires_grad_"):
        if isinstance(n.func, ast.Attribute) and dotted(n.func.value) == key and n.args and is_false(n.args[0]) \
                and (n.lineno, n.col_offset) < here and same_model(n):
            return True
    for loop in sem.of_type(ast.For):
        var = _parameter_loop_var(loop, key)
        if var is None or (loop.lineno, 0) >= here or not same_model(loop):  # type: ignore[attr-defined]
            continue
        if _sets_requires_grad_false(loop.body, var):  # type: ignore[attr-defined]
            return True
        if var and any(isinstance(st, ast.Expr) and isinstance(c := st.value, ast.Call) and method_name(c) == "requires_grad_"
                       and dotted(c.func.value) == var and c.args and is_false(c.args[0])  # type: ignore[attr-defined]
                       for st in loop.body) and not _unfrozen_between(sem, key, loop, here):  # type: ignore[attr-defined]
            return True  # ``for p in model.parameters(): p.requires_grad_(False)``
    for c in sem.calls:  # ``freeze_model(backbone)``: a function of the file that freezes what it is handed
        if isinstance(c.func, ast.Name) and c.args and dotted(c.args[0]) == key and (c.lineno, c.col_offset) < here \
                and same_model(c) and any(_freezes_its_argument(sem, f) for f in sem.resolve(c)):
            return True
    return _frozen_by_every_caller(sem, call, key)


def _returned_construction(sem: SemanticModel, call: ast.Call) -> ast.Call | None:
    """The model construction a function of this file returns, through moves and mode calls (``return
    Vgg16(requires_grad=False).to(device).eval()``), when its one ``return`` is that."""
    funcs = sem.resolve(call)
    if len(funcs) != 1:
        return None
    returns = [n for n in sem.local_nodes(funcs[0]) if isinstance(n, ast.Return) and n.value is not None]
    if len(returns) != 1:
        return None
    value = returns[0].value
    while isinstance(value, ast.Call) and method_name(value) in ("to", "cuda", "eval", "half", "float", "cpu"):
        value = value.func.value  # type: ignore[attr-defined]
    return value if isinstance(value, ast.Call) and isinstance(value.func, (ast.Name, ast.Attribute)) else None


def _freezes_its_argument(sem: SemanticModel, func: ast.AST) -> bool:
    """``def freeze_model(model): for p in model.parameters(): p.requires_grad = False`` (or ``requires_grad_(False)``,
    or ``model.requires_grad_(False)``)."""
    params = [a.arg for a in func.args.args]  # type: ignore[attr-defined]
    if not params:
        return False
    key = params[0]
    for n in sem.local_nodes(func):
        if isinstance(n, ast.Call) and method_name(n) == "requires_grad_" and dotted(n.func.value) == key \
                and n.args and is_false(n.args[0]):  # type: ignore[attr-defined]
            return True
        if isinstance(n, ast.For) and (var := _parameter_loop_var(n, key)) is not None \
                and _sets_requires_grad_false(n.body, var):
            return True
    return False


def _parameter_loop_var(loop: ast.AST, key: str) -> str | None:
    """``p`` of ``for p in key.parameters()`` (or ``for name, p in key.named_parameters()``)."""
    it = getattr(loop, "iter", None)
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute)
            and it.func.attr in ("parameters", "named_parameters") and dotted(it.func.value) == key):
        return None
    target = loop.target.elts[-1] if isinstance(loop.target, ast.Tuple) and loop.target.elts else loop.target  # type: ignore[attr-defined]
    return target.id if isinstance(target, ast.Name) else None


def _sets_requires_grad_false(body: list[ast.stmt], var: str) -> bool:
    """``var.requires_grad = False`` among the statements of ``body``."""
    return any(isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Attribute)
               and st.targets[0].attr == "requires_grad" and dotted(st.targets[0].value) == var
               and is_false(st.value) for st in body)


def _frozen_by_every_caller(sem: SemanticModel, call: ast.Call, key: str) -> bool:
    """``model`` is a parameter of a plain function whose every call in this file hands it a model frozen before
    the call (``det.requires_grad_(False)`` ... ``evaluate(det, images)``)."""
    func = sem.function_of(call)
    b = sem.binding_at(key, call)
    if func is None or b is None or not b.is_param or b.node is not func or sem.class_of(func) is not None:
        return False
    sites = sem.call_sites(func)
    if not sites:
        return False
    for site in sites:
        arg = call_argument(site, func, key) if not any(isinstance(a, ast.Starred) for a in site.args) else None  # type: ignore[arg-type]
        name = dotted(arg) if arg is not None else None
        before = (site.lineno, site.col_offset)
        if name is None or not any(
                isinstance(n.func, ast.Attribute) and dotted(n.func.value) == name and n.args and is_false(n.args[0])
                and (n.lineno, n.col_offset) < before and sem.scope_of(n) is sem.scope_of(site)
                for n in sem.calls_named("requires_grad_")) and not any(  # ``freeze_model(backbone)`` first
                isinstance(n.func, ast.Name) and n.args and dotted(n.args[0]) == name and (n.lineno, n.col_offset) < before
                and sem.scope_of(n) is sem.scope_of(site) and any(_freezes_its_argument(sem, f) for f in sem.resolve(n))
                for n in sem.calls):
            return False
    return True


def _unfrozen_between(sem: SemanticModel, key: str, start: ast.AST, here: tuple[int, int]) -> bool:
    """``for p in model.layer4.parameters(): p.requires_grad_(True)`` after the model was frozen whole: fine-tuning
    a part, whose forwards record a graph again."""
    begin = (start.lineno, start.col_offset)  # type: ignore[attr-defined]
    for n in sem.calls_named("requires_grad_"):
        if begin < (n.lineno, n.col_offset) < here and n.args and not is_false(n.args[0]):
            return True
    for st in sem.of_type(ast.Assign):
        if begin < (st.lineno, st.col_offset) < here and any(  # type: ignore[attr-defined]
                isinstance(t, ast.Attribute) and t.attr == "requires_grad" for t in st.targets) and is_true(st.value):  # type: ignore[attr-defined]
            return True
    return False


def class_freezes_itself(sem: SemanticModel, cls: ast.AST) -> str | None:
    """How the module class ``cls`` freezes every parameter in its own ``__init__`` (``for p in self.parameters():
    p.requires_grad = False``, ``self.requires_grad_(False)``): "" always, or the name of the ``__init__``
    parameter that decides, when its default is False (``def __init__(self, ..., requires_grad=False)``: an FID
    feature extractor, a perceptual-loss VGG); None when it does not."""
    init = next((f for f in getattr(cls, "body", ()) if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
    if init is None:
        return None

    def frozen_by(value: ast.AST) -> str | None:
        if is_false(value):
            return ""
        if isinstance(value, ast.Name) and is_false(param_default(init, value.id)) and not any(
                isinstance(n, ast.Name) and n.id == value.id and isinstance(n.ctx, ast.Store) for n in sem.subtree(init)):
            return value.id
        return None

    for node in sem.subtree(init):
        if isinstance(node, ast.Call) and method_name(node) == "requires_grad_" and dotted(node.func.value) == "self" \
                and node.args:  # type: ignore[attr-defined]
            found = frozen_by(node.args[0])
            if found is not None:
                return found
        if not (isinstance(node, ast.For) and isinstance(node.iter, ast.Call) and method_name(node.iter) in (
                "parameters", "named_parameters") and dotted(node.iter.func.value) == "self"):  # type: ignore[attr-defined]
            continue
        target = node.target.elts[-1] if isinstance(node.target, ast.Tuple) and node.target.elts else node.target
        var = target.id if isinstance(target, ast.Name) else None
        for st in node.body:
            if var and isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Attribute) \
                    and st.targets[0].attr == "requires_grad" and dotted(st.targets[0].value) == var:
                found = frozen_by(st.value)
                if found == "":
                    return _deciding_flag(sem, init, node)
                if found is not None:
                    return found
    return None


def _deciding_flag(sem: SemanticModel, init: ast.AST, loop: ast.AST) -> str | None:
    """The freezing loop runs always (""), or under ``if not requires_grad:`` of an ``__init__`` parameter defaulting
    to False (that parameter's name); under any other test, it cannot be told (None)."""
    tests = list(sem.guards.branch_tests(loop))
    if not tests:
        return ""
    if len(tests) == 1 and isinstance(test := tests[0][0], ast.Name) and not tests[0][1] \
            and is_false(param_default(init, test.id)):
        return test.id  # (``if not requires_grad:`` — branch_tests takes the ``not`` off: the loop runs where it is False)
    return None


def frozen_as_built(how: str | None, made: ast.Call, init_params: list[str] | None = None) -> bool:
    """A class that ``class_freezes_itself`` (``how``), built by ``made``: frozen unless the call passes the deciding
    parameter (by keyword, or so many arguments by position that it may be among them)."""
    if how is None:
        return False
    if how == "":
        return True
    given = next((k for k in made.keywords if k.arg == how), None)
    if given is not None:
        return is_false(given.value)  # (``Vgg16(requires_grad=False)``: told what the default says)
    if any(k.arg is None for k in made.keywords):
        return False
    position = init_params.index(how) if init_params and how in init_params else None
    return not any(isinstance(a, ast.Starred) for a in made.args) and (position is None and not made.args
                                                                      or position is not None and len(made.args) <= position)


def _built_frozen(sem: SemanticModel, made: ast.Call) -> bool:
    """``made`` builds a module class (of this file, or of another module of the project) that freezes itself."""
    return _as_built(sem, made, class_freezes_itself, "class_frozen")
