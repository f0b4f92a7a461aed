"""Where a module lives, as far as the file shows: moved back to the host before a call
(``moved_to_host_before``), never moved at all (``never_moved``: a demo layer, an ensemble's torch member), and
loops whose every model is such a module (``cpu_only_loop``: a CPU phase of a tutorial)."""

from __future__ import annotations

import ast

from torchdoctor.check.astutil import call_argument, dotted, method_name
from torchdoctor.check.semantic import flow, program
from torchdoctor.check.semantic.bindings import Binding
from torchdoctor.check.semantic.model import SemanticModel
from torchdoctor.check.semantic.models import RETURNS_SELF, moved_keys

__all__ = ["moved_to_host_before", "never_moved", "cpu_only_loop"]


def _host_target(sem: SemanticModel, call: ast.Call) -> bool:
    if method_name(call) == "cpu" and not call.args:
        return True
    target = (sem.move_device(call) or "").strip("'\"").replace(" ", "")
    return target == "cpu" or target in ("torch.device('cpu')", 'torch.device("cpu")')




def _module_moves(sem: SemanticModel, key: str, scope: ast.AST) -> list[tuple[ast.stmt, ast.Call]]:
    """``key.to(d)`` / ``key.cuda()`` / ``key.cpu()`` written as a statement (a module moves in place), or
    rebinding ``key`` (``key = key.to(d)``), in ``scope``, in source order."""
    out = []
    for c in sem.calls_named("to", "cuda", "cpu"):
        if not isinstance(c.func, ast.Attribute) or sem.scope_of(c) is not scope:
            continue
        base = c.func.value  # (``model.eval().cpu()``: eval() hands back the module itself)
        while isinstance(base, ast.Call) and method_name(base) in RETURNS_SELF and isinstance(base.func, ast.Attribute):
            base = base.func.value
        if dotted(base) != key or not (method_name(c) == "cpu" or sem.is_device_move(c)):
            continue
        stmt = sem.parent(c)  # (a module moves in place: ``cpu_net = learner.model.eval().cpu()`` moves it too)
        if isinstance(stmt, ast.Expr) or isinstance(stmt, ast.Assign) and stmt.value is c:
            out.append((stmt, c))
    return sorted(out, key=lambda sc: (sc[0].lineno, sc[0].col_offset))


def moved_to_host_before(sem: SemanticModel, key: str, at: ast.AST) -> bool:
    """The module ``key`` was last moved to the CPU before ``at`` (``model.to("cpu")``, ``model.cpu()``), by a
    statement of a block that holds ``at``, in the same scope; no other move of it comes between, nor
    later in a loop around ``at`` (the next turn would meet it moved)."""
    moves = _module_moves(sem, key, sem.scope_of(at))
    if not moves:
        return False
    pos = (at.lineno, at.col_offset)  # type: ignore[attr-defined]
    before = [(s, c) for s, c in moves if (s.lineno, s.col_offset) < pos]
    if not before:
        return False
    stmt, call = before[-1]
    if not (_host_target(sem, call) and any(a is sem.parent(stmt) for a in sem.ancestors(at))) \
            or sem.in_other_branch(stmt, at):
        return False
    loops = [a for a in sem.ancestors(at) if isinstance(a, (ast.For, ast.AsyncFor, ast.While))]
    return not any(sem.contains(loop, s) and not _host_target(sem, c) for s, c in moves for loop in loops)


_MOVES = frozenset({"to", "cuda", "apply", "_apply", "half", "type"})
_LOOKS = frozenset({"isinstance", "print", "type", "str", "repr", "id", "hasattr", "getattr"})
_LOOKING_METHODS = frozenset({"add_graph", "watch"})  # ``writer.add_graph(model, images)``, ``wandb.watch(model)``


def never_moved(sem: SemanticModel, key: str, at: ast.AST | None = None, upto: int | None = None) -> bool:
    """``up = nn.ConvTranspose2d(3, 3, 4, 2, 1)`` made here (every binding of ``key`` a model construction with no
    move in its chain) and only ever called or given weights afterwards: nothing moves it, and nothing is handed it
    (``accelerator.prepare(model)``, ``train(model)`` may move it), so it and its outputs stay on the CPU."""
    reaching = sem.binding_at(key, at) if at is not None else None
    bound = [reaching] if reaching is not None else [] if at is not None else sem.bindings_of(key)
    if not bound or program.default_device_set(sem):
        return False
    if reaching is not None and any(_other_branch(sem, b.node, reaching.node) for b in sem.bindings_of(key)
                                    if b is not reaching and not b.is_param):
        return False  # ``if cuda: net = Net().cuda()`` / ``else: net = Net()``: the other branch reaches the call too
    for b in bound:
        value = b.value
        if value is None and not b.is_param and (made := _listed_models(sem, b)) is not None:
            if not all(_unmoved_construction(sem, v, b.node) for v in made):
                return False
            continue
        if not b.is_param and isinstance(value, ast.Call) and b.index is not None:
            made = _returned_model_at(sem, value, b.index)
            if made is None or not _unmoved_construction(sem, made, made):
                return False
            continue  # ``model, opt = get_model()`` of ``model = Net(); return model, optim.SGD(...)``
        if b.is_param or not isinstance(value, ast.Call) or sem.call_kind(value, b.node) != "model":
            return False
        if not _unmoved_construction(sem, value, b.node):
            return False
    reads = sem.reads_of(key)
    if reaching is not None:  # (``model`` made again, and moved, cells later: only this binding's reads count)
        reads = [r for r in reads if sem.binding_at(key, r) is reaching]
    if upto is not None:  # (a script's loop: what happens to the model after it does not change its steps)
        reads = [r for r in reads if sem.index.pos.get(r, upto) < upto]
    return _stays(sem, key, reads, 0)


def _other_branch(sem: SemanticModel, one: ast.AST, other: ast.AST) -> bool:
    """``one`` and ``other`` sit in the two branches of one ``if`` (``body`` and ``orelse``)."""
    for up in sem.ancestors(one):
        if isinstance(up, ast.If) and sem.contains(up, other):
            in_body = any(sem.contains(s, one) for s in up.body)
            return in_body != any(sem.contains(s, other) for s in up.body) and \
                any(sem.contains(s, one) or sem.contains(s, other) for s in up.orelse)
    return False


def _unmoved_construction(sem: SemanticModel, value: ast.Call, at: ast.AST) -> bool:
    """A model construction with no move in its chain that holds no model made before."""
    if any(isinstance(a, (ast.Name, ast.Attribute)) and sem.expr_kind(a, at) in ("model", "wrapper")
           for a in [*value.args, *(k.value for k in value.keywords)]):
        return False  # ``AutoregressiveWrapper(model)``: it holds a model made before, which may well be moved
    node: ast.AST = value
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr in _MOVES and not _to_the_cpu(sem, node):
            return False  # (``Net(...).to("cpu")``, a tutorial's CPU phase said out loud: still on the CPU)
        node = node.func.value
    return not (isinstance(node, (ast.Name, ast.Attribute)) and sem.expr_kind(node, at) in ("model", "wrapper"))
    # (``model = model.train()``: the model made before, maybe moved, no construction; ``nn.Embedding.from_pretrained``
    # is one)


def _returned_model_at(sem: SemanticModel, call: ast.Call, index: int) -> ast.Call | None:
    """The model construction that element ``index`` of every ``return`` of the function of this file ``call`` runs
    hands back (``return model, optim.SGD(...)`` after ``model = Mnist_Logistic()``), else None."""
    funcs = sem.resolve(call)
    made = None
    for func in funcs if len(funcs) == 1 else ():
        for ret in sem.kinds.returns_of(func):
            value = ret.value
            if not (isinstance(value, ast.Tuple) and index < len(value.elts)):
                return None
            elt = value.elts[index]
            if isinstance(elt, ast.Name):
                b = sem.binding_at(elt.id, ret)
                elt = b.value if b is not None and not b.is_param and b.index is None else None
            if not isinstance(elt, ast.Call) or sem.call_kind(elt, ret) != "model":
                return None
            made = elt
    return made


def _to_the_cpu(sem: SemanticModel, call: ast.Call) -> bool:
    """``.to("cpu")`` (or ``.to(torch.device("cpu"))``, ``.to(dev)`` of a name that is the CPU wherever bound, or
    every call hands it), or ``.to(self.device)`` where every binding of ``self.device`` is the CPU."""
    arg = call.args[0] if method_name(call) == "to" and len(call.args) == 1 and not call.keywords else None
    if isinstance(arg, ast.Call) and dotted(arg.func) in ("torch.device", "device") and len(arg.args) == 1:
        arg = arg.args[0]
    if arg is not None and (isinstance(arg, ast.Constant) and arg.value == "cpu" or program.cpu_name(sem, arg)):
        return True
    device = sem.move_device(call) or ""  # (``self.device`` and ``.to(device=...)``: its bindings)
    if device.strip("'\"") == "cpu":
        return True
    if not all(part.isidentifier() for part in device.split(".")) or device.count(".") > 1:
        return False
    bound = sem.bindings_of(device)
    return bool(bound) and all(not b.is_param and b.value is not None and b.index is None
                               and program.cpu_device_value(sem, b.value) for b in bound)


def _brought_to_the_cpu(sem: SemanticModel, key: str, loop: ast.AST) -> bool:
    """``model = model.to(cpu)`` (or ``.cpu()``) just before the loop, in the block around it: a validation pass every
    150 steps that brings the model to the host, runs there, and moves it back after (``model = model.to(gpu)``)."""
    b = sem.binding_at(key, loop)
    value = b.value if b is not None and not b.is_param and b.index is None else None
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and dotted(value.func.value) == key
            and (value.func.attr == "cpu" and not value.args or sem.is_device_move(value) and _to_the_cpu(sem, value))):
        return False
    block = sem.index.block_of(b.node)  # type: ignore[union-attr]
    return block is not None and any(x is loop or sem.contains(x, loop) for x in block)


def _listed_models(sem: SemanticModel, b: Binding) -> list[ast.Call] | None:
    """``for j, model in enumerate(models)`` over ``models = [build_ann(...), KNeighborsClassifier(...)]``: the
    torch models the list builds (other elements, a scikit-learn estimator, are no torch module), else None."""
    loop = sem.parent(b.node)
    if not isinstance(loop, (ast.For, ast.AsyncFor)) or loop.target is not b.node:
        return None
    it = loop.iter
    if isinstance(loop.target, ast.Tuple):
        if not (len(loop.target.elts) == 2 and isinstance(e := loop.target.elts[1], ast.Name) and e.id == b.key
                and isinstance(it, ast.Call) and dotted(it.func) == "enumerate" and it.args):
            return None
        it = it.args[0]
    elif not isinstance(loop.target, ast.Name):
        return None
    if isinstance(it, ast.Name):
        bound = sem.binding_at(it.id, loop)
        it = bound.value if bound is not None and bound.index is None and not bound.is_param else None
    if not isinstance(it, (ast.List, ast.Tuple)) or not all(isinstance(e, ast.Call) for e in it.elts):
        return None
    made = [e for e in it.elts if sem.call_kind(e, loop) == "model"]  # type: ignore[arg-type]
    rest = [e for e in it.elts if sem.call_kind(e, loop) != "model"]  # type: ignore[arg-type]
    if not made or any((sem.call_name(e) or "").startswith("torch.") for e in rest):
        return None
    return made  # type: ignore[return-value]


def _stays(sem: SemanticModel, key: str, reads: list[ast.AST], depth: int) -> bool:
    """Every read is a forward, a parameter read or set, or an argument of a function of this file that does the
    same with it (``fit(cpu_net, loader, ...)`` whose ``net`` is only called)."""
    for read in reads:
        up = sem.parent(read)
        if isinstance(up, ast.Call) and (up.func is read or dotted(up.func) in _LOOKS or isinstance(up.func, ast.Attribute)
                                         and up.func.attr in _LOOKING_METHODS):
            continue  # a forward; ``isinstance(model, nn.Module)``, ``print(model)``, a graph traced for TensorBoard
        if isinstance(up, ast.Attribute) and up.attr not in _MOVES \
                and not (isinstance(call := sem.parent(up), ast.Call) and call.func is up and up.attr in _MOVES):
            continue  # ``up.weight.data = ...``, ``lin.parameters()``: read or set, not moved
        if isinstance(up, ast.Expr) or isinstance(up, ast.Tuple) and isinstance(sem.parent(up), ast.Expr):
            continue  # ``conv2d`` alone on a notebook cell's last line: displayed, not moved
        keyword = up.arg if isinstance(up, ast.keyword) else None  # ``training_loop(model=model, ...)``
        call = sem.parent(up) if keyword is not None else up
        if isinstance(call, ast.Call) and (keyword is not None or read in call.args) and depth < 2 \
                and (funcs := sem.resolve(call)):
            for func in funcs:
                params = [a.arg for a in func.args.posonlyargs + func.args.args + func.args.kwonlyargs]  # type: ignore[attr-defined]
                param = keyword if keyword is not None else \
                    params[call.args.index(read)] if call.args.index(read) < len(params) else None  # type: ignore[arg-type]
                if param not in params:
                    return False
                inner = [r for r in sem.reads_of(param) if sem.function_of(r) is func]  # type: ignore[arg-type]
                if not _stays(sem, param, inner, depth + 1):  # type: ignore[arg-type]
                    return False
            continue
        return False
    return True


def _builds(node: ast.Assign, key: str) -> bool:
    """``node`` assigns ``key`` a value it makes (``self.disc = Disc()``, ``self.g, self.d = G(), D()``), not one
    handed in (``self.policy, self.opt = policy, Adam(...)``: the policy is the caller's, moved or not)."""
    for t in node.targets:
        if isinstance(t, ast.Tuple) and isinstance(node.value, ast.Tuple) and len(t.elts) == len(node.value.elts):
            if any(dotted(e) == key and isinstance(v, ast.Call) for e, v in zip(t.elts, node.value.elts)):
                return True
        elif isinstance(t, ast.Tuple):
            if any(dotted(e) == key for e in t.elts) and isinstance(node.value, ast.Call):
                return True
        elif dotted(t) == key and isinstance(node.value, ast.Call):
            return True
    return False


def _attribute_never_moved(sem: SemanticModel, func: ast.AST, attr: str) -> bool:
    """``self.<attr>`` of the class around ``func`` is never moved: the class moves nothing (no ``self.to(...)``, no
    ``nn.Linear(3, 1).to(dev)`` built in), no ``.<attr>`` and no instance of the class is moved anywhere in the
    file, and ``__init__`` builds it there."""
    cls = sem.class_of(func)
    if cls is None:
        return False
    moved = moved_keys(sem)
    if attr in moved:
        return False
    init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)  # type: ignore[attr-defined]
    if init is None or not any(isinstance(n, ast.Assign) and _builds(n, f"self.{attr}") for n in sem.local_nodes(init)):
        return False
    if any(isinstance(n, ast.Call) and sem.is_device_move(n) for n in sem.subtree(cls)):
        return False  # (``self.actor = nn.Linear(3, 1).to(dev)``: the class moves what it builds)
    instances = {(dotted(t) or "").rsplit(".", 1)[-1] for n in sem.of_type(ast.Assign) if isinstance(n.value, ast.Call)
                 and (dotted(n.value.func) or "").rsplit(".", 1)[-1] == cls.name for t in n.targets}  # type: ignore[attr-defined]
    return not (instances & moved)


def _objects_never_moved(sem: SemanticModel, cls: ast.AST | None) -> bool:
    """Every object of the module class ``cls`` is made in this file and never moved: its method is called on it
    at once (``Small().fit(loader, 5)``), or it is bound to a name nothing moves; no other module makes one."""
    if cls is None or cls.name not in sem.module_classes:  # type: ignore[attr-defined]
        return False
    pos = sem.index.pos
    rebound = [i for i in sem.of_type(ast.Import, ast.ImportFrom) if pos.get(i, 0) > pos.get(cls, 0) and any(
        (a.asname or a.name.split(".")[0]) == cls.name for a in i.names)]  # type: ignore[attr-defined]
    # (a later notebook cell's ``from torch_geometric.nn import GraphSAGE``: calls after it make that class)
    sites = [c for c in sem.calls if isinstance(c.func, ast.Name) and c.func.id == cls.name  # type: ignore[attr-defined]
             and not any(pos.get(i, 0) < pos.get(c, 0) for i in rebound)]
    if not sites or sem.project is not None and sem.project.has_callers(sem, cls):  # type: ignore[attr-defined]
        return False
    for site in sites:
        up = sem.parent(site)
        if isinstance(up, ast.Attribute) and up.value is site and up.attr not in ("to", "cuda") \
                and isinstance(call := sem.parent(up), ast.Call) and call.func is up:
            continue
        if not (isinstance(up, ast.Assign) and len(up.targets) == 1 and isinstance(name := up.targets[0], ast.Name)
                and len(sem.bindings_of(name.id)) == 1 and not program.default_device_set(sem)
                and _stays(sem, name.id, sem.reads_of(name.id), 0)):
            return False  # (``graphsage = GraphSAGE(...)`` only called, fitted and printed; asked as never_moved does,
            # of this class whatever the name's kind: a later cell may import another class of that name)
    return True


def cpu_only_loop(sem: SemanticModel, loop: ast.AST) -> bool:
    """A loop that moves to the CPU alone (``.to(self.device)`` of a trainer whose device is the CPU), or that moves
    nothing and whose every model is a module nothing moves (``never_moved``): made here, or a
    parameter of the loop's function that every call passes such a module (a tutorial's CPU phase: ``fit(cpu_net,
    cpu_loader, ...)`` before it picks a device and defines ``fit`` again for the GPU)."""
    def compute() -> bool:
        func = sem.function_of(loop)
        body = sem.body(loop)
        moves = [n for n in body if isinstance(n, ast.Call) and sem.is_device_move(n)]
        if moves and all(_to_the_cpu(sem, m) for m in moves):
            return True  # ``data = data.to(self.device)`` with ``self.device = torch.device("cpu")`` only: a CPU trainer
        if moves or any(
                isinstance(n, ast.Lambda) and any(isinstance(m, ast.Call) and sem.is_device_move(m) for m in sem.subtree(n))
                for n in sem.subtree(loop)):
            return False  # (``x, y = map(lambda t: t.to(device), batch)``: moved by a lambda the loop runs)
        if func is None:  # a script's (a notebook's) loop: the models as they are when it runs
            end = sem.index.end(loop)
            calls = [n for n in body if isinstance(n, ast.Call) and flow.consumer_kind(sem, n) == "model"]
            return bool(calls) and all(isinstance(c.func, ast.Name) and (never_moved(sem, c.func.id, c, end)
                                                                         or _brought_to_the_cpu(sem, c.func.id, loop))
                                       for c in calls)
        models = [n for n in body if isinstance(n, ast.Call) and flow.consumer_kind(sem, n) == "model"]
        if not models:
            return False
        for call in models:
            key = dotted(call.func)
            if key and key.startswith("self.") and key.count(".") == 1 and _attribute_never_moved(sem, func, key[5:]):
                continue  # ``self.disc(real)`` of a plain class whose parts nothing moves (a notebook's CPU GAN)
            if key == "self" and _objects_never_moved(sem, sem.class_of(func)):
                continue  # ``out = self(x)`` in ``Small.fit``, of ``Small().fit(loader, 5)``: a CPU model fitting itself
            b = sem.binding_at(key, call) if key and "." not in key else None
            if b is None:
                return False
            if b.is_param and b.node is func:
                sites = sem.call_sites(func)
                args = [call_argument(site, func, key) for site in sites]  # type: ignore[arg-type]
                if not sites or not all(isinstance(a, ast.Name) and never_moved(sem, a.id, site)
                                        for a, site in zip(args, sites)):
                    return False
            elif sem.scope_of(b.node) is not func or not (never_moved(sem, key, call)  # type: ignore[arg-type]
                                                          or _brought_to_the_cpu(sem, key, loop)):  # type: ignore[arg-type]
                return False
        return True

    return sem.cached(("cpu_only_loop", loop), compute)  # type: ignore[no-any-return]
