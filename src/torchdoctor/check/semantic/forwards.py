"""What a function or a module class's ``forward`` does with its inputs: the ones it moves to the device itself (a
diffusion imputer's ``forward(batch)`` hands the batch to ``self.process_data``, which moves each element with
``batch["x"].to(self.device)``; ``def cuda_variable(t): return Variable(t.cuda()) if use_cuda else Variable(t)``),
and the methods that run the layers (a forward by another name); and the methods a ``forward`` calls, which run on
every forward too (``reached_from_forward``)."""

from __future__ import annotations

import ast

from torchdoctor.check.astutil import root_name
from torchdoctor.check.semantic.model import SemanticModel

__all__ = ["NOT_FORWARDS", "forward_moved_params", "moved_params", "network_methods"]

# Methods of ``nn.Module`` that hand the model on, set it up or read it: never a forward by another name
NOT_FORWARDS = frozenset({"forward", "train", "eval", "to", "cuda", "cpu", "parameters", "state_dict", "apply",
                           "zero_grad", "load_state_dict", "named_parameters", "modules", "children"})


def forward_moved_params(sem: SemanticModel, cls: ast.AST, moves: bool = True) -> frozenset[int]:
    """Positions (after ``self``) of the ``forward`` parameters whose device does not matter to the caller: those
    ``forward`` moves to a device itself, or hands to a method of the class that does (the class's own methods, and
    those of its bases in this file: a base's forward calls ``self.process_data(batch)``, which the subclass defines),
    and those it never reads (``def forward(self, x, x_len, y_in, y_target, y_len)`` reading no ``y_target``).
    ``moves``: the module moves anything at all (else only the unread ones are looked for)."""
    methods = _methods(sem, cls)
    forward = methods.get("forward")
    if forward is None:
        return frozenset()
    params = _positional(forward)
    read = {n.id for n in sem.subtree(forward) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return frozenset(i for i, p in enumerate(params) if p not in read or moves and _moves_param(sem, forward, p, methods, 0))


def _methods(sem: SemanticModel, cls: ast.AST) -> dict[str, ast.AST]:
    """The methods of ``cls`` and of its bases defined in this file, a subclass's overriding its base's."""
    classes = {c.name: c for c in sem.of_type(ast.ClassDef)}  # type: ignore[attr-defined]
    chain, todo = [], [cls]
    while todo and len(chain) < 8:
        c = todo.pop(0)
        chain.append(c)
        todo += [classes[b.id] for b in c.bases if isinstance(b, ast.Name) and b.id in classes  # type: ignore[attr-defined]
                 and classes[b.id] not in chain]
    out: dict[str, ast.AST] = {}
    for c in reversed(chain):
        out.update({f.name: f for f in c.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))})  # type: ignore[attr-defined]
    return out


def _moves_param(sem: SemanticModel, func: ast.AST, param: str, methods: dict[str, ast.AST], depth: int) -> bool:
    for n in sem.local_nodes(func):
        if not isinstance(n, ast.Call):
            continue
        if sem.is_device_move(n) and isinstance(n.func, ast.Attribute) and root_name(n.func.value) == param \
                and (b := sem.binding_at(param, n)) is not None and (b.is_param or b.value is not None and any(
                    isinstance(m, ast.Name) and m.id == param for m in sem.subtree(b.value))):
            return True  # ``batch["x"].to(self.device)``, ``x = x.cuda()``; also after ``target = pad(target, pd)``
        if depth == 0 and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) \
                and n.func.value.id == "self" and (method := methods.get(n.func.attr)) is not None and method is not func:
            inner = _positional(method)
            for i, a in enumerate(n.args):
                if isinstance(a, ast.Name) and a.id == param and i < len(inner) \
                        and _moves_param(sem, method, inner[i], methods, depth + 1):
                    return True  # ``self.process_data(batch)``
    return False


def _positional(func: ast.AST) -> list[str]:
    """The positional parameters of a method after ``self``."""
    return [a.arg for a in func.args.posonlyargs + func.args.args][1:]  # type: ignore[attr-defined]


def network_methods(sem: SemanticModel, cls: ast.AST) -> frozenset[str]:
    """The methods of the module class ``cls`` (and of its bases in this file) that run its layers: ``self.body(x)``,
    ``self(x)``, ``self.forward(x)`` (``def process(self, x): out = self.generator(x); ...``): a forward by another
    name (``forward`` itself is the model's call)."""
    methods = _methods(sem, cls)
    return frozenset(name for name, f in methods.items() if name not in NOT_FORWARDS and not name.startswith("__")
                     and any(isinstance(n, ast.Call) and _runs_a_layer(sem, n) for n in sem.local_nodes(f)))


def _runs_a_layer(sem: SemanticModel, n: ast.Call) -> bool:
    func = n.func
    if isinstance(func, ast.Name):
        return func.id == "self"
    return isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self" \
        and (func.attr == "forward" or sem.kinds.kind_of(f"self.{func.attr}", n) == "model")


def moved_params(sem: SemanticModel, func: ast.AST) -> tuple[tuple[str, str], ...]:
    """(parameter, device) for each parameter of ``func`` that it moves to a device (``t.cuda()``, ``x.to(dev)``), in
    some branch at least (``if torch.cuda.is_available(): t = t.cuda()``): a helper handed a tensor puts it there."""
    out: dict[str, str] = {}
    params = [a.arg for a in func.args.posonlyargs + func.args.args]  # type: ignore[attr-defined]
    for n in sem.local_nodes(func):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) \
                and n.func.value.id in params and n.func.value.id not in out and (dev := sem.move_device(n)) \
                and dev.strip("'\"") != "cpu" and (b := sem.binding_at(n.func.value.id, n)) is not None and b.is_param:
            out[n.func.value.id] = dev
    return tuple(out.items())


def reached_from_forward(sem, func: ast.AST, cls: ast.AST, depth: int = 0) -> bool:  # type: ignore[no-untyped-def]
    """A method of a module class that its ``forward`` calls (``self._lag_index(x)``, maybe through another such
    method, or the forward of a base or a subclass of this file), or picks to call (``loss_func = self.calc_loss if
    is_train else self.calc_loss_valid``): it runs on every forward too, whatever else calls it (an ``evaluate`` method)."""
    name = func.name  # type: ignore[attr-defined]
    if depth > 2 or name.startswith("__"):
        return False
    if depth == 0:
        return sem.cached(("reached_from_forward", func), lambda: _reached_from_forward(sem, func, cls, name, 0))
    return _reached_from_forward(sem, func, cls, name, depth)


def _reached_from_forward(sem, func: ast.AST, cls: ast.AST, name: str, depth: int) -> bool:  # type: ignore[no-untyped-def]
    bases = {b.id for b in cls.bases if isinstance(b, ast.Name)}  # type: ignore[attr-defined]
    classes = {cls, *(c for c in sem.of_type(ast.ClassDef) if c.name in bases or any(  # type: ignore[attr-defined]
        isinstance(b, ast.Name) and b.id == cls.name for b in c.bases))}  # type: ignore[attr-defined]
    # (a base's forward calls ``self.process_data(batch)``, which the subclass defines)
    uses = [r for r in sem.self_reads(name) if sem.class_of(r) in classes]
    callers = {sem.function_of(r) for r in uses}
    return any(f is not None and f is not func and (f.name == "forward" or reached_from_forward(  # type: ignore[attr-defined]
        sem, f, sem.class_of(f), depth + 1)) for f in callers)
