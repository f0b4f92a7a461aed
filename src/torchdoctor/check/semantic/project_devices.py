"""Where a program runs, asked of the other modules of the project: a device a project function may return as
CUDA (``torch.device(define_device(name))``), a trainer or a training function handed a model its caller moved to the GPU. (Asked by
``program.runs_on_accelerator`` after what the file itself shows.)"""

from __future__ import annotations

import ast

from torchdoctor.check.astutil import call_argument, dotted
from torchdoctor.check.patterns import lazy
from torchdoctor.check.semantic.model import SemanticModel

__all__ = ["runs_a_moved_model", "device_from_project_helper", "model_from_project_builder", "MOVE_CALLS"]

MOVE_CALLS = ("to", "cuda", "to_device", "move_to_device", "move_to", "send_to_device")


# methods of a kept model that do not run it
_NOT_A_RUN = frozenset({"parameters", "named_parameters", "buffers", "modules", "children", "named_modules",
                        "state_dict", "load_state_dict", "train", "eval", "to", "cuda", "cpu", "zero_grad",
                        "requires_grad_", "apply"})


def runs_a_moved_model(sem: SemanticModel) -> bool:
    """A trainer class of this file keeps the model its constructor is given (``self.model = model``) and runs it,
    and a caller in another module hands it a model it moved to the GPU: its batches go there too, moved by the
    class (``.to(self.device)`` of a config's device) or before they reach it."""
    trainers = {sem.class_of(c) for c in sem.calls_named("backward") if sem.is_backward_call(c)} - {None}
    for cls in trainers:  # (a class that backpropagates; it may move batches or be given them moved: PreSumm's)
        init = next((f for f in getattr(cls, "body", []) if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
        if init is None:
            continue
        params = {a.arg for a in init.args.args[1:]}
        kept = {t.attr: v.id for n in sem.local_nodes(init) if isinstance(n, ast.Assign)  # (``self.dmodel =
                for t in n.targets if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)  # wrap(model)`` too)
                and t.value.id == "self" and isinstance(v := n.value.args[0] if isinstance(n.value, ast.Call)
                                                        and n.value.args else n.value, ast.Name) and v.id in params}
        if not kept:  # (``self.model, self.opt = model, opt`` is a tuple: bound element by element below)
            kept = {t.attr: v.id for n in sem.local_nodes(init) if isinstance(n, ast.Assign)
                    for tt in n.targets if isinstance(tt, ast.Tuple) and isinstance(n.value, ast.Tuple)
                    for t, v in zip(tt.elts, n.value.elts) if isinstance(t, ast.Attribute) and isinstance(v, ast.Name)
                    and dotted(t.value) == "self" and v.id in params}
        run = {c.func.attr for c in sem.calls if isinstance(c.func, ast.Attribute) and dotted(c.func.value) == "self"
               and sem.class_of(c) is cls}
        run |= {c.func.value.attr for c in sem.calls if isinstance(c.func, ast.Attribute)  # type: ignore[attr-defined]
                and c.func.attr not in _NOT_A_RUN and isinstance(c.func.value, ast.Attribute)
                and dotted(c.func.value.value) == "self" and sem.class_of(c) is cls}
        # (``self.actor_critic.evaluate_actions(obs, ...)``: a method of the model it keeps, which runs it)
        for attr, param in kept.items():
            if attr in run and sem.project.passes_moved_model(sem, init, param):  # type: ignore[union-attr]
                return True
    return _loop_function_given_moved_model(sem)


def _loop_function_given_moved_model(sem: SemanticModel) -> bool:
    """A training (or evaluation) function (or method) of this file that calls the model it is given (``def
    train(model, loader, ...)``: ``loss = model(batch)``, then ``loss.backward()``; the model moves its batches itself;
    ``def evaluate(model, loader)`` with its evaluation loop), and a caller in another
    module hands it a model it moved to the GPU (``train(net.to(args.device), ...)`` with ``--device cuda:0``)."""
    anchors = [c for c in sem.calls_named("backward") if sem.is_backward_call(c)]
    anchors += [loop for loop in sem.loops if sem.loop_kind(loop) == "eval"]  # (``def evaluate(model, loader,
    seen: set[int] = set()  # loss_fn)``: an evaluation loop over the model it is handed, with nothing moved)
    for call in anchors:
        func = sem.function_of(call)
        if func is None or sem.function_of(func) is not None or id(func) in seen:
            continue  # (a method too: ``Trainer().train(model, opt)``, through objects of its class)
        seen.add(id(func))
        params = {a.arg for a in func.args.args}  # type: ignore[attr-defined]
        called = {c.func.id for c in sem.local_nodes(func) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
                  and c.func.id in params}
        if any(_handed_a_moved_model(sem, func, param, 0) for param in sorted(called)):
            return True
    return False


def _handed_a_moved_model(sem: SemanticModel, func: ast.AST, param: str, depth: int) -> bool:
    """A caller in another module hands ``param`` of ``func`` a model it moved, or (two levels up at most) a function of
    this file hands on its own parameter that such a caller gives it (``def train(self, model, opt):
    self.train_session(model, opt, session)``, after ``trainer.train(model.to(device), opt)`` elsewhere)."""
    if sem.project.passes_moved_model(sem, func, param, by_class=sem.class_of(func) is not None):  # type: ignore[union-attr]
        return True
    if depth >= 2:
        return False
    for site in sem.call_sites(func):
        arg = call_argument(site, func, param)  # type: ignore[arg-type]
        outer = sem.function_of(site)
        b = sem.binding_at(arg.id, site) if isinstance(arg, ast.Name) and outer is not None else None
        if b is not None and b.is_param and b.node is outer and _handed_a_moved_model(sem, outer, arg.id, depth + 1):
            return True
    return False


def model_from_project_builder(sem: SemanticModel, project: object) -> bool:
    """A model made by a builder function of another module of the project that returns it on the GPU (``model =
    build_model(params)`` whose every return is ``model.cuda()``): the program trains it there. Only calls named as
    builders are looked up (``build_``, ``get_``, ``create_``, ``make_``, ...): each lookup reads another module."""
    if project is None or not sem.of_type(ast.For, ast.While) or "step" not in sem.text.source \
            and "backward" not in sem.text.source:
        return False  # (only a program that trains or steps a trainer: a library's ``create_model`` callers are not)
    for up in sem.of_type(ast.Assign):
        call = up.value  # type: ignore[attr-defined]
        func = call.func if isinstance(call, ast.Call) else None
        last = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        if last is None or not _BUILDER.match(last) or sem.resolve(call):
            continue  # (a function of this file: its own moves are seen here)
        found = project.function_for(sem, call)  # type: ignore[attr-defined]
        if found is not None and getattr(found, "returns", None) == "cuda_model":
            return True
    return False


_BUILDER = lazy(r"(?i)^(build|get|create|make|load|init|setup|prepare|construct|define|new)_?(model|net|network)")


def device_from_project_helper(sem: SemanticModel) -> bool:
    """Work moved to a device that a function of another module of the project picks, and that function may
    return CUDA: ``self.device = torch.device(define_device(device_name))`` then ``.to(self.device)``."""
    for call in sem.calls_named(*MOVE_CALLS):
        arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "device"), None)
        key = dotted(arg) if isinstance(arg, (ast.Name, ast.Attribute)) else None
        if not key or not sem.is_device_move(call):
            continue
        for b in sem.bindings_of(key):
            value = b.value
            if isinstance(value, ast.Call) and (sem.call_name(value) or "") == "torch.device" and value.args:
                value = value.args[0]
            found = sem.project.function_for(sem, value) if isinstance(value, ast.Call) else None  # type: ignore[union-attr]
            if found is not None and getattr(found, "returns", None) == "device":
                return True
    return False
