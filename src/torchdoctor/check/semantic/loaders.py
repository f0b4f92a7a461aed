"""Where a DataLoader's batches go: to a model or a device (its pipeline matters), or nowhere that
the program shows (a loader only sharded and gathered in a test, never iterated, yielding prompts).

``feeds_device(sem, call)`` follows the loader from its construction: the names it is bound to,
``prepare``/``setup_dataloaders`` wrappers, the loops that iterate it, the functions of this file
it is handed to. A loader handed to code the file does not show (a Trainer, a ``train`` of
another module) is assumed to feed a model, as before; a loader that only loops that run no
model and move nothing iterate does not.
"""

from __future__ import annotations

import ast
import re

from torchdoctor.check.astutil import call_argument, dotted, keyword, method_name, param_default, string_value
from torchdoctor.check.patterns import lazy
from torchdoctor.check.semantic import flow
from torchdoctor.check.semantic.counts import few_passes
from torchdoctor.check.semantic.placement import cpu_only_loop
from torchdoctor.check.semantic.model import SemanticModel

__all__ = ["unpinned_returns", "feeds_device", "LOADER_NAMES", "only_python", "numpy_params", "dataset_yields_device_tensors", "class_yields_device_tensors", "class_yields_text",
           "builds_a_loader", "loader_init_passes"]

LOADER_NAMES = ("DataLoader", "StatefulDataLoader")
_WRAPPING = {"prepare", "setup_dataloaders", "prepare_data_loader", "DeviceLoader", "skip_first_batches",
             "setup", "prepare_dataloader"}
_NOT_FEEDING = {"len", "print", "isinstance", "type", "id", "repr", "str", "hasattr", "getattr", "setattr",
                "append", "extend", "add", "format", "log", "info", "debug", "warning"}
_STEPISH = lazy(r"(?i)train|eval|valid|test|step|fit|forward|predict|infer|run|loop|epoch|backward")
_MAX_DEPTH = 6  # (two per function the loader is handed to: a helper calling a helper is followed)


def feeds_device(sem: SemanticModel, call: ast.Call) -> bool:
    """The loader built by ``call`` delivers batches to a model, a device, or code we cannot see."""
    return sem.cached(("feeds_device", call), lambda: _feeds_value(sem, call, 0))  # type: ignore[no-any-return]


def _feeds_value(sem: SemanticModel, value: ast.AST, depth: int) -> bool:
    """Where the expression ``value`` (a loader) goes, from its parent upward."""
    if depth > _MAX_DEPTH:
        return True
    child, parent = value, sem.parent(value)
    if isinstance(parent, ast.keyword):  # ``fit(net, eval_loader=loader)``: the call it is given to
        parent = sem.parent(parent)
    while isinstance(parent, ast.Call) and child in parent.args and \
            (dotted(parent.func) or "").rsplit(".", 1)[-1] in ("enumerate", "tqdm", "iter", "zip", "cycle", "islice"):
        child, parent = parent, sem.parent(parent)  # a wrapper around the loader: follow the wrapper
    if isinstance(parent, ast.Call) and dotted(parent.func) == "next" and (
            isinstance(child, ast.Call) and dotted(child.func) == "iter" or isinstance(child, ast.Name) and depth > 0) \
            and all(few_passes(sem, a) for a in sem.ancestors(parent) if isinstance(a, (ast.For, ast.AsyncFor, ast.While))):
        return False  # ``xb, yb = next(iter(loader))`` (or ``it = iter(loader); first = next(it)``): one batch to look
        # at (or three, to plot), not a stream of steps
    if isinstance(parent, ast.Call) and dotted(parent.func) == "list" and parent.args == [child] \
            and isinstance(up := sem.parent(parent), ast.Subscript) and up.value is parent \
            and isinstance(up.slice, ast.Constant) and not sem.loops_around(parent):
        return False  # ``g, labels = list(loader)[0]``: one batch printed (a DGL lab), the loader never iterated again
    if isinstance(parent, (ast.For, ast.AsyncFor)) and child is parent.iter:
        return _loop_feeds(sem, parent, depth)
    if isinstance(parent, ast.comprehension) and child is parent.iter:
        return _loop_feeds(sem, sem.parent(parent), depth)  # type: ignore[arg-type]
    if isinstance(parent, (ast.Assign, ast.AnnAssign)):
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        keys = [d for t in targets if (d := dotted(t))]
        if not keys:
            return True  # unpacked into a structure: not followed
        return any(_key_feeds(sem, key, parent, depth) for key in keys)
    if isinstance(parent, ast.Call) and (child in parent.args or any(child is k.value for k in parent.keywords)):
        return _passed_feeds(sem, parent, child, depth)
    if isinstance(parent, ast.Expr) or isinstance(parent, (ast.Tuple, ast.List)) and isinstance(sem.parent(parent), ast.Expr):
        return False  # built and thrown away; ``train_dl, test_dl`` on a notebook cell's last line: displayed
    if isinstance(parent, (ast.Tuple, ast.List)) and isinstance(call := sem.parent(parent), ast.Call) \
            and parent in call.args and (found := _unpacked_by_callee(sem, call, parent, child)) is not None:
        key, unpacking = found  # ``train_epoch(model, [train_dl, eval_dl])``, whose ``train_loader, eval_loader =
        # loaders`` names each: that name's reads in that function
        func = sem.function_of(unpacking)
        return any(_feeds_value(sem, use, depth + 1) for use in sem.reads_of(key) if sem.function_of(use) is func
                   and (b := sem.binding_at(key, use)) is not None and b.node is unpacking)
    if isinstance(parent, (ast.Tuple, ast.List)) and (target := _loop_target_of(sem, parent, child)) is not None:
        loop, key = target  # ``for name, loader in [("train", train_loader), ("val", val_loader)]:``: ``loader``'s uses
        return any(_feeds_value(sem, use, depth + 1) for use in sem.reads_of(key) if sem.contains(loop, use))
    if isinstance(parent, ast.Attribute) and parent.value is child and parent.attr in ("next", "__next__") \
            and isinstance(call := sem.parent(parent), ast.Call) and call.func is parent and isinstance(child, ast.Name) \
            and depth > 0:  # ``labeled_iter.next()`` (Python 2's spelling, FixMatch's): ``next(labeled_iter)``
        return not all(few_passes(sem, a) for a in sem.ancestors(call) if isinstance(a, (ast.For, ast.AsyncFor, ast.While)))
    if isinstance(parent, ast.Attribute) and parent.value is child:
        return False  # ``loader.dataset``, ``loader.sampler.set_epoch(...)``: read, not iterated
    if isinstance(parent, ast.Tuple) and isinstance(ret := sem.parent(parent), ast.Return) \
            and (func := sem.function_of(ret)) is not None and (sites := sem.call_sites(func)):
        # ``return train, unused``, then ``train_loader, unused_loader = make_loaders(ds)``: follow its own name
        i = next(k for k, e in enumerate(parent.elts) if e is child)
        for site in sites:
            up = sem.parent(site)
            target = up.targets[0] if isinstance(up, ast.Assign) and len(up.targets) == 1 else None
            if not (isinstance(target, ast.Tuple) and len(target.elts) == len(parent.elts)
                    and (key := dotted(target.elts[i]))):
                return True  # (kept whole, or handed on: not followed)
            if _key_feeds(sem, key, up, depth + 1):
                return True
        # (a demo under ``__main__`` that never iterates them; the training script of another module may)
        return sem.project is not None and sem.project.has_callers(sem, func)  # type: ignore[attr-defined]
    if isinstance(parent, ast.Return) and (func := sem.function_of(parent)) is not None:
        # ``self._dataloader = self._setup_data(...)`` where _setup_data returns it: followed from its callers here
        sites = sem.call_sites(func)
        return not sites or any(_feeds_value(sem, site, depth + 1) for site in sites) or sem.project is not None \
            and (all(_self_test(sem, site) for site in sites)
                 or sem.project.has_callers(sem, func, by_class=sem.class_of(func) is not None))  # type: ignore[attr-defined]
        # (a self-test here only checks shapes; the training scripts of other modules call it too)
    return True  # returned from code no caller here shows, stored in a container, given to a keyword: not followed


def _loop_target_of(sem: SemanticModel, seq: ast.AST, item: ast.AST) -> tuple[ast.AST, str] | None:
    """The loop and the name its target gives ``item`` of a literal it iterates: ``loader`` for ``train_loader`` in
    ``for loader in [train_loader, val_loader]:`` and in ``for name, loader in [("train", train_loader), ...]:``."""
    up = sem.parent(seq)
    if isinstance(up, (ast.For, ast.AsyncFor)) and up.iter is seq:
        target = up.target
    elif isinstance(up, (ast.List, ast.Tuple)) and isinstance(loop := sem.parent(up), (ast.For, ast.AsyncFor)) \
            and loop.iter is up and isinstance(loop.target, ast.Tuple) and len(loop.target.elts) == len(seq.elts):  # type: ignore[attr-defined]
        up, target = loop, loop.target.elts[seq.elts.index(item)]  # type: ignore[attr-defined]
    else:
        return None
    key = dotted(target)
    return (up, key) if key else None


def _self_test(sem: SemanticModel, site: ast.AST) -> bool:
    """``site`` runs in the module's own self-test: a function named ``test...`` (``def test_generator():``), or the
    ``if __name__ == "__main__":`` block of a module that other modules import."""
    func = sem.function_of(site)
    if func is not None:
        return func.name.startswith("test")  # type: ignore[attr-defined]
    return any(isinstance(up, ast.If) and isinstance(up.test, ast.Compare) and dotted(up.test.left) == "__name__"
               for up in sem.ancestors(site))


def _unpacked_by_callee(sem: SemanticModel, call: ast.Call, seq: ast.AST, item: ast.AST) -> tuple[str, ast.AST] | None:
    """The name a function of this file gives ``item`` of the list or tuple ``seq`` it is handed, by unpacking its
    parameter (``train_loader, eval_loader = loaders``): that name and the unpacking statement."""
    funcs = sem.resolve(call)
    if len(funcs) != 1 or any(isinstance(e, ast.Starred) for e in seq.elts):  # type: ignore[attr-defined]
        return None
    func = funcs[0]
    params = [a.arg for a in func.args.posonlyargs + func.args.args]  # type: ignore[attr-defined]
    if params[:1] == ["self"] and isinstance(call.func, ast.Attribute):
        params = params[1:]
    i = call.args.index(seq)  # type: ignore[arg-type]
    if i >= len(params):
        return None
    for n in sem.local_nodes(func):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(t := n.targets[0], (ast.Tuple, ast.List)) \
                and isinstance(n.value, ast.Name) and n.value.id == params[i] and len(t.elts) == len(seq.elts):  # type: ignore[attr-defined]
            target = t.elts[seq.elts.index(item)]  # type: ignore[attr-defined]
            key = dotted(target)
            return (key, n) if key else None
    return None


def _key_feeds(sem: SemanticModel, key: str, bound: ast.AST, depth: int) -> bool:
    """A name (or ``self.x``) bound to the loader: does any of its uses feed? Unused: no; but an attribute of the
    object that this file never reads, named by a module that makes the object (``dataloader.data``), is read
    there: not followed."""
    reads = sem.reads_of(key)
    if not reads and key.startswith("self.") and (cls := sem.class_of(bound)) is not None and sem.project is not None:
        return sem.project.callers_mention(sem, cls, re.compile(rf"\.{re.escape(key[5:])}\b"))  # type: ignore[attr-defined]
    for use in reads:
        if not _same_binding(sem, key, bound, use):
            continue
        if _feeds_value(sem, use, depth + 1):
            return True
    return False


def _same_binding(sem: SemanticModel, key: str, bound: ast.AST, at: ast.AST) -> bool:
    if key.startswith("self."):
        return True  # an attribute of the object: any method may use it
    if isinstance(bound, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and not sem.contains(bound, at):
        return False  # a parameter is read inside its function (not in another ``def fit`` of the notebook)
    scope = sem.scope_of(bound)
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and not sem.contains(scope, at):
        return False  # a function's own ``data_iter = DataLoader(...)``: another function's ``data_iter`` is another
    b = sem.binding_at(key, at)
    if b is not None and b.is_param and b.node is not bound:
        return False  # another function's parameter of the same name (``def training_loop(..., train_loader)``)
    # the binding that reaches the use, or one in the other branch of an ``if`` (``dl = ...`` in both)
    if b is not None and b.node is not bound and isinstance(sem.scope_of(bound), ast.Module) and not b.is_param \
            and b.value is not None and sem.scope_of(b.node) is sem.scope_of(at) is not sem.scope_of(bound):
        return False  # a function's own ``loader = DataLoader(...)``, shadowing the script's loader of that name
    return b is None or b.node is bound or b.scope is not sem.scope_of(bound) or sem.in_other_branch(b.node, bound) \
        or _rebound_only_if(sem, b.node, bound, at)


def _rebound_only_if(sem: SemanticModel, rebinding: ast.AST, bound: ast.AST, at: ast.AST) -> bool:
    """``loader = DataLoader(ds, ...)``, then ``if opt.subset is not None: loader = DataLoader(small, ...)``, then the
    loop: the rebinding runs only when the test holds, so the first loader reaches the loop too (the default one)."""
    for up in sem.ancestors(rebinding):
        if isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.Module)):
            return False
        if isinstance(up, ast.If) and not sem.contains(up, at) and not sem.contains(up, bound):
            return sem.index.pos.get(bound, -1) < sem.index.pos[up]
    return False


def _passed_feeds(sem: SemanticModel, call: ast.Call, arg: ast.AST, depth: int) -> bool:
    name = (dotted(call.func) or "").rsplit(".", 1)[-1] if isinstance(call.func, (ast.Name, ast.Attribute)) else ""
    if name == "append" and isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name) \
            and call.args == [arg]:  # ``val_loaders.append(loader)``: followed where the list goes
        holder = call.func.value.id
        return any(_feeds_value(sem, use, depth + 1) for use in sem.reads_of(holder) if use is not call.func.value)
    if name in _NOT_FEEDING:
        return False
    if name in _WRAPPING:
        return _wrapped_feeds(sem, call, arg, depth)
    if name in ("list", "tuple") and isinstance(call.func, ast.Name):
        # its batches gathered: followed where the list goes (``list(dataloader)`` alone, run to skip a resumed
        # epoch's batches, feeds nothing)
        return _feeds_value(sem, call, depth + 1)
    funcs = sem.resolve(call)
    if funcs:
        return any(_param_feeds(sem, f, call, arg, depth) for f in funcs)
    return True  # a Trainer, a function of another module: it may well train on it


def _wrapped_feeds(sem: SemanticModel, call: ast.Call, arg: ast.AST, depth: int) -> bool:
    """``dl = accelerator.prepare(dl)`` / ``model, opt, dl = accelerator.prepare(model, opt, dl)``."""
    parent = sem.parent(call)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Tuple) \
            and arg in call.args:
        elts = parent.targets[0].elts
        i = call.args.index(arg)  # type: ignore[arg-type]
        key = dotted(elts[i]) if i < len(elts) else None
        return key is None or _key_feeds(sem, key, parent, depth + 1)
    return _feeds_value(sem, call, depth + 1)


def _param_feeds(sem: SemanticModel, func: ast.AST, call: ast.Call, arg: ast.AST, depth: int) -> bool:
    """The in-file function ``func`` receives the loader as a parameter: how does it use it?"""
    params = [a.arg for a in func.args.posonlyargs + func.args.args]  # type: ignore[attr-defined]
    if params[:1] == ["self"] and (isinstance(call.func, ast.Attribute) or func.name == "__init__"):  # type: ignore[attr-defined]
        params = params[1:]  # (``Trainer(model, train_data, ...)`` runs ``__init__(self, model, train_data, ...)``)
    kw = next((k.arg for k in call.keywords if k.value is arg), None)
    name = kw if kw is not None else (params[call.args.index(arg)] if arg in call.args and  # type: ignore[arg-type]
                                      call.args.index(arg) < len(params) else None)  # type: ignore[arg-type]
    if name is None:
        return True
    if _runs_on_its_cpu_default(func, call):
        return False
    return _key_feeds(sem, name, func, depth + 1) or _stored(sem, func, name)


def _runs_on_its_cpu_default(func: ast.AST, call: ast.Call) -> bool:
    """``fit(net, loader)`` of ``def fit(net, loader, device="cpu")``: the call leaves the function on its CPU
    default, so the loader's batches stay on the host there."""
    for param in ("device", "dev"):
        default = param_default(func, param)  # type: ignore[arg-type]
        if default is not None and (string_value(default) == "cpu" or isinstance(default, ast.Call) and len(
                default.args) == 1 and string_value(default.args[0]) == "cpu" and (dotted(default.func) or "").endswith(
                "device")):
            return call_argument(call, func, param) is None and not any(  # type: ignore[arg-type]
                isinstance(a, ast.Starred) for a in call.args) and not any(k.arg is None for k in call.keywords)
    return False


def _stored(sem: SemanticModel, func: ast.AST, name: str) -> bool:
    """``self.loader = loader`` in ``__init__``: the object keeps it for its own methods."""
    for node in sem.local_nodes(func):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id == name:
            return any((dotted(t) or "").startswith("self.") and _key_feeds(sem, dotted(t), node, _MAX_DEPTH)  # type: ignore[arg-type]
                       for t in node.targets)
    return False


def _loop_feeds(sem: SemanticModel, loop: ast.AST, depth: int) -> bool:
    """A loop over the loader runs a model or a loss, moves its batch, or calls a step of training; not one whose
    every batch is a few prompts handed to generation (``_generates``)."""
    body = getattr(loop, "body", None)
    if body and isinstance(body[-1], ast.Break):
        return False  # ``x = x.to(device); break``: a look at the first batch, not a stream of them
    info = sem.loop_info(loop)
    batch = set(info.batch_vars)
    if batch and _generates(sem, loop, batch) or cpu_only_loop(sem, loop):
        return False
    func = sem.function_of(loop)
    if func is not None and any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in sem.body(loop)):
        # ``def infiniteloop(dl): while True: for x, y in iter(dl): yield x``: its batches go where the generator goes
        sites = sem.call_sites(func)
        return not sites or any(_feeds_value(sem, site, depth + 1) for site in sites)
    moded: set[str] | None = None
    for node in sem.body(loop):
        if not isinstance(node, ast.Call):
            continue
        if flow.consumer_kind(sem, node) or sem.is_backward_call(node):
            return True
        if isinstance(node.func, ast.Name):  # ``segmenter(feed)`` after ``segmenter.eval()``: a model by its mode call
            if moded is None:
                scope = sem.scope_of(loop)
                moded = {dotted(n.func.value) or "" for n in sem.local_nodes(scope) if isinstance(n, ast.Call)
                         and isinstance(n.func, ast.Attribute) and not n.args and sem.mode_call(n) in ("eval", "train")}
            if node.func.id in moded:
                return True
        if sem.is_device_move(node) and (sem.move_device(node) or "").strip("'\"") != "cpu":
            return True
        if method_name(node) in ("train_step", "training_step", "validation_step", "test_step", "step"):
            return True
        funcs = sem.resolve(node)
        if batch and _batch_taken_as_numpy(sem, node, batch, funcs):
            continue  # ``test_single_volume(batch["image"], batch["label"], net)`` whose first line makes NumPy of them
        if funcs and any({"backward"} & sem.effects(f) or _calls_model(sem, f) for f in funcs):
            return True
        callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        passes_batch = any(flow.mentions(sem, a, batch) for a in node.args) if batch else False
        if not funcs and passes_batch and _STEPISH.search(callee or ""):
            return True
    return False


def _batch_taken_as_numpy(sem: SemanticModel, call: ast.Call, batch: set[str], funcs: list[ast.AST]) -> bool:
    """Every argument of ``call`` that holds the batch goes to a parameter the function (of this file, or of another
    module of the project) turns into a NumPy array at once: the batch never reaches the GPU as it is."""
    given = [i for i, a in enumerate(call.args) if flow.mentions(sem, a, batch)]
    if not given or any(isinstance(a, ast.Starred) for a in call.args):
        return False
    if funcs:
        if any(sem.class_of(f) is not None for f in funcs):
            return False  # (a method: its ``self`` shifts the positions)
        found = [(tuple(a.arg for a in f.args.args), numpy_params(f)) for f in funcs]  # type: ignore[attr-defined]
    elif sem.project is not None and (summary := sem.project.function_for(sem, call)) is not None \
            and "." not in summary.name:  # type: ignore[attr-defined]
        found = [(summary.params, summary.numpy_params)]
    else:
        return False
    return all(bool(numpy) and all(i < len(params) and params[i] in numpy for i in given) for params, numpy in found)


_GENERATION = lazy(r"(?i)(^|_)(generate|rollout)")


def _generates(sem: SemanticModel, loop: ast.AST, batch: set[str]) -> bool:
    """RL fine-tuning (PPO, GRPO): each batch (or what the loop takes from it: ``tokens = batch["tokens"]``) goes,
    at every iteration, to generation (``self.generate_trajectory_batched(tokens)``, ``rollout(...)``), whose
    token-by-token forward passes dwarf the copy of a few prompts: the loader's pipeline does not matter. A
    generation only on some steps (``if step % 100 == 0: model.generate(...)``) leaves the loop a training one."""
    names = set(batch)
    for node in sem.body(loop):
        if isinstance(node, ast.Assign) and flow.mentions(sem, node.value, names):
            names |= {n.id for t in node.targets for n in ([t] if isinstance(t, ast.Name) else getattr(t, "elts", []))
                      if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Call):
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if _GENERATION.search(callee or "") and any(flow.mentions(sem, a, names) for a in node.args) \
                    and _statement_in(sem, node, loop):
                return True
    return False


def _statement_in(sem: SemanticModel, node: ast.AST, loop: ast.AST) -> bool:
    """``node`` sits in a statement of the loop's own body, not under an ``if`` or a nested loop."""
    parent = sem.parent(node)
    while parent is not None and not isinstance(parent, ast.stmt):
        parent = sem.parent(parent)
    return parent is not None and sem.parent(parent) is loop


def _calls_model(sem: SemanticModel, func: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and flow.consumer_kind(sem, n) for n in sem.local_nodes(func))


def dataset_yields_device_tensors(sem: SemanticModel, dataset: ast.AST) -> bool:
    """``dataset`` is built from a class of this file whose ``__getitem__``/``__iter__`` returns tensors it
    moved to a device itself (``return seq.cuda()``): pinning would fail, workers cannot share them."""
    if not isinstance(dataset, ast.Call):
        return False
    if _transform_moves(sem, dataset):
        return True
    picked = _classes_held(sem, dataset.func, dataset)
    if picked:  # ``dataset = QM9Geomol`` / ``elif ...: dataset = GEOMDrugs`` and ``train = dataset(split="train")``
        return all(_class_yields_device(sem, c) for c in picked)
    return _class_yields_device(sem, dataset.func)


def _class_yields_device(sem: SemanticModel, written_node: ast.AST) -> bool:
    cls = sem.calls_index.classes.get(dotted(written_node) or "")
    if cls is None:  # a Dataset class of another module of the project (``from rows import Rows``)
        written = dotted(written_node)
        return bool(written) and sem.project is not None and sem.project.class_yields_device(sem, written)  # type: ignore[attr-defined]
    return class_yields_device_tensors(sem, cls)


def _classes_held(sem: SemanticModel, func: ast.AST, at: ast.AST) -> list[ast.AST]:
    """The classes a lower-case name holds when it is called (``dataset = SetA if a else SetB``, or bound in each arm
    of an if/elif chain): every binding of it in the function names a class (capitalised), or none is returned."""
    if not isinstance(func, ast.Name) or func.id[:1].isupper():
        return []
    scope = sem.scope_of(at)
    bound = [b for b in sem.bindings_of(func.id) if sem.scope_of(b.node) is scope]
    out: list[ast.AST] = []
    for b in bound:
        if b.is_param or b.index is not None or b.value is None:
            return []
        values = [b.value.body, b.value.orelse] if isinstance(b.value, ast.IfExp) else [b.value]
        for v in values:
            if not isinstance(v, (ast.Name, ast.Attribute)) or not (dotted(v) or "").rsplit(".", 1)[-1][:1].isupper():
                return []
            out.append(v)
    return out


_PYTHON_CALLS = frozenset({"zip", "list", "tuple", "sorted", "len", "max", "min", "range", "enumerate", "dict", "set", "map",
                           "filter", "sum", "any", "all", "isinstance", "str", "int", "float", "reversed"})
_PYTHON_METHODS = frozenset({"append", "extend", "split", "strip", "lower", "upper", "join", "keys", "values", "items", "get",
                             "sort", "pop", "insert", "replace", "format"})


def numpy_params(func: ast.AST) -> frozenset[str]:
    """The parameters the function's first statement turns into NumPy arrays: ``image, label =
    image.squeeze(0).cpu().numpy(), label.squeeze(0).cpu().numpy()`` (SSL4MIS's ``test_single_volume``)."""
    body = [s for s in func.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]  # type: ignore[attr-defined]
    first = body[0] if body else None
    if not (isinstance(first, ast.Assign) and len(first.targets) == 1):
        return frozenset()
    target, value = first.targets[0], first.value
    pairs = list(zip(target.elts, value.elts)) if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) \
        and len(target.elts) == len(value.elts) else [(target, value)]
    params = {a.arg for a in func.args.args}  # type: ignore[attr-defined]
    out = set()
    for t, v in pairs:
        methods = []
        while isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute):
            methods.append(v.func.attr)
            v = v.func.value
        if isinstance(t, ast.Name) and isinstance(v, ast.Name) and v.id == t.id in params and "numpy" in methods:
            out.add(t.id)
    return frozenset(out)


def only_python(sem: SemanticModel, func: ast.AST, depth: int = 0) -> bool:
    """A collate function that regroups its items with Python alone (``docs, sums = zip(*rows)``, list
    comprehensions, ``str.split``): it calls nothing else, so it makes no tensor; its batches hold what the dataset
    gave (``pin_memory`` pins tensors only)."""
    nodes = sem.local_nodes(func)
    if not any(isinstance(n, ast.Return) and n.value is not None for n in nodes):
        return False
    for n in nodes:
        if isinstance(n, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
        if isinstance(n, ast.Call) and not (isinstance(n.func, ast.Name) and n.func.id in _PYTHON_CALLS
                                            or isinstance(n.func, ast.Attribute) and n.func.attr in _PYTHON_METHODS
                                            or (sem.call_name(n) or "").startswith(_PYTHON_LIBRARIES)
                                            or depth < 1 and _python_helper(sem, n)):
            return False
    return True


def _python_helper(sem: SemanticModel, call: ast.Call) -> bool:
    """``tokenize(None)`` (a curried ``def tokenize(max_len, texts): return [t.lower().split() ...]``): a function of
    this file, or of the project, that works with Python alone."""
    if not isinstance(call.func, ast.Name):
        return False
    funcs = sem.bindings.functions.get(call.func.id)
    if funcs:
        return all(only_python(sem, f, 1) for f in funcs)
    if call.func.id in sem.names.from_imports and sem.project is not None:
        found = sem.project.function_for(sem, call)  # type: ignore[attr-defined]
        return getattr(found, "returns", None) == "python"
    return False


_PYTHON_LIBRARIES = ("itertools.", "functools.", "operator.", "collections.", "toolz.", "cytoolz.", "random.")


def class_collates_arrays(sem: SemanticModel, cls: ast.AST) -> bool:
    """The dataset class's ``collate_fn`` method (with the methods of the class it calls) makes no torch tensor:
    FastSpeech2's ``reprocess`` pads NumPy arrays, which the training loop turns into tensors after the loader.
    ``pin_memory`` pins tensors only: such batches have nothing to pin."""
    methods = {f.name: f for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}  # type: ignore[attr-defined]
    todo, seen = [methods["collate_fn"]] if "collate_fn" in methods else [], set()
    while todo:
        func = todo.pop()
        if id(func) in seen:
            continue
        seen.add(id(func))
        for n in sem.local_nodes(func):
            if isinstance(n, ast.Name) and n.id == "torch" or isinstance(n, ast.Attribute) and n.attr in (
                    "to", "cuda", "from_numpy", "tensor", "as_tensor", "stack", "cat", "default_collate"):
                return False  # (``torch.``, a move, or a tensor made by whatever name)
            if isinstance(n, ast.Call) and any(k.arg in ("tensor_type", "return_tensors") and isinstance(k.value, ast.Constant)
                                               and k.value.value == "pt" for k in n.keywords):
                return False  # (``BatchEncoding(inputs, tensor_type="pt")``, ``tokenizer.pad(..., return_tensors="pt")``)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) \
                    and n.func.value.id == "self" and n.func.attr in methods:
                todo.append(methods[n.func.attr])
            elif isinstance(n, ast.Call) and not isinstance(n.func, ast.Attribute) and dotted(n.func) not in _PLAIN_CALLS:
                if (sem.call_name(n) or "").startswith("torch") or "tensor" in (dotted(n.func) or "").lower() or \
                        not sem.resolve(n) and dotted(n.func) not in sem.names.from_imports:
                    return False  # (``pad_sequence``, ``to_tensor(...)``, or a call it cannot follow: may make tensors)
    return bool(seen)


_PLAIN_CALLS = frozenset({"len", "list", "tuple", "dict", "range", "zip", "enumerate", "max", "min", "sorted", "int",
                          "float", "str", "isinstance"})


def class_yields_device_tensors(sem: SemanticModel, cls: ast.AST) -> bool:
    """The dataset class ``cls``'s items are tensors it moved to a device itself (see
    ``dataset_yields_device_tensors``)."""
    methods: dict[str, ast.AST] = {}
    for c in sem.calls_index.lineage(cls)[:6]:  # (``class Crops(Base): pass`` inherits Base's ``__getitem__``)
        for f in c.body:  # type: ignore[attr-defined]
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                methods.setdefault(f.name, f)
    todo = [methods[n] for n in ("__getitem__", "__iter__", "__getitems__") if n in methods]
    seen: set[int] = set()
    read: set[str] = set()
    while todo and len(seen) < 12:  # the item methods, and what they call here: ``self.preprocess_input(img)``,
        item = todo.pop()  # ``preprocess_image(img)`` (a function of the file)
        if id(item) in seen:
            continue
        seen.add(id(item))
        for node in sem.local_nodes(item):
            if isinstance(node, ast.Call) and _moves_off_cpu(sem, node) and not _to_a_local_tensors_device(sem, node, item):
                return True  # (not ``mel_basis.to(y.device)`` of the item's own audio: it stays where ``y`` is)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                todo += [f for f in sem.resolve(node) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                read.add(node.attr)
                if node.attr in methods:
                    todo.append(methods[node.attr])
    init = methods.get("__init__")  # ``self.x = torch.tensor(x).float().to(device)``, read by ``__getitem__``
    return init is not None and any(
        isinstance(n, ast.Assign) and any(isinstance(t, ast.Attribute) and dotted(t.value) == "self" and t.attr in read
                                          for t in n.targets)
        and (sem.value_is_moved(n.value) or _made_with_a_device(sem, n.value)) for n in sem.local_nodes(init))


def _made_with_a_device(sem: SemanticModel, value: ast.AST) -> bool:
    """``torch.tensor(x, dtype=torch.float, device=dev)`` (through casts and reshapes): made on the device it is told,
    unless that is the CPU."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and not any(
            k.arg == "device" for k in value.keywords):
        value = value.func.value
    if not isinstance(value, ast.Call) or not (sem.call_name(value) or "").startswith("torch."):
        return False
    dev = next((k.value for k in value.keywords if k.arg == "device"), None)
    if isinstance(dev, ast.Name) and (b := sem.binding_at(dev.id, value)) is not None and not b.is_param \
            and b.value is not None:
        dev = b.value  # (``dev = "cuda"`` just before)
    return dev is not None and "cpu" not in sem.segment(dev).lower() and not (
        isinstance(dev, ast.Constant) and dev.value is None)


def builds_a_loader(sem: SemanticModel, cls: ast.AST) -> bool:
    """A subclass of a DataLoader whose ``__init__`` builds torch's (``super().__init__(dataset, ...)``) and that
    does not iterate its own way (no ``__iter__``: not a wrapper that moves each batch to a device)."""
    if not any((dotted(b) or "").rsplit(".", 1)[-1] == "DataLoader" for b in cls.bases):  # type: ignore[attr-defined]
        return False
    methods = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}  # type: ignore[attr-defined]
    init = methods.get("__init__")
    return "__iter__" not in methods and (init is None or any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "__init__"
        for n in sem.local_nodes(init)))


def loader_init_passes(sem: SemanticModel, cls: ast.AST) -> frozenset[str]:
    """The pipeline arguments a DataLoader subclass's ``__init__`` hands torch's with a value that turns them on
    (``super().__init__(ds, num_workers=num_workers, pin_memory=True)``; not ``num_workers=0``)."""
    init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)  # type: ignore[attr-defined]
    out = set()
    for n in sem.local_nodes(init) if init is not None else ():
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "__init__":
            out |= {k.arg for k in n.keywords if k.arg in ("num_workers", "pin_memory") and not (
                isinstance(k.value, ast.Constant) and k.value.value in (0, False, None))}
    return frozenset(out)  # type: ignore[arg-type]


def _to_a_local_tensors_device(sem: SemanticModel, node: ast.Call, func: ast.AST) -> bool:
    """``.to(y.device)`` where ``y`` is a parameter or a local of ``func`` (the item's own data, read on the host),
    not an attribute the dataset keeps (``self.device``, ``self.x.device``)."""
    target = node.args[0] if node.args and method_name(node) == "to" else None
    if not (isinstance(target, ast.Attribute) and target.attr == "device" and isinstance(target.value, ast.Name)):
        return False
    b = sem.binding_at(target.value.id, node)
    return b is not None and (b.node is func or sem.scope_of(b.node) is func)  # (a parameter's node is its function)


def _moves_off_cpu(sem: SemanticModel, node: ast.Call) -> bool:
    return sem.is_device_move(node) and (sem.move_device(node) or "").strip("'\"") != "cpu"


def _transform_moves(sem: SemanticModel, dataset: ast.Call) -> bool:
    """``datasets.MNIST(..., transform=img_transform)`` whose transform ends with ``transforms.Lambda(lambda x:
    x.to(device))``, or ``Rows(rows, MakeMask(device))`` handed an object of a class of this file whose ``__call__``
    makes part of each item on a device (``torch.ones(n, device=self.device)``): items come out on the device."""
    handed = [kw.value for kw in dataset.keywords if kw.arg in ("transform", "transforms")]
    handed += [a for a in dataset.args if isinstance(a, ast.Call)]
    for value in handed:
        if isinstance(value, ast.Name):
            b = sem.binding_at(value.id, dataset)
            value = b.value if b is not None and b.value is not None and not b.is_param else value
        if value in dataset.args and not _call_makes_on_device(sem, value):
            continue  # (a positional argument counts as an object of such a class only)
        if any(isinstance(n, ast.Call) and _moves_off_cpu(sem, n) for n in sem.subtree(value)) \
                or _call_makes_on_device(sem, value):
            return True
    return False


def _call_makes_on_device(sem: SemanticModel, value: ast.AST) -> bool:
    """``MakeMask(device)`` of a class of this file whose ``__call__`` moves what it makes, or makes it with a device
    that is not the CPU (``torch.ones(a.shape[0], device=self.device)``)."""
    cls = sem.calls_index.classes.get(dotted(value.func) or "") if isinstance(value, ast.Call) else None
    call = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__call__"), None) \
        if cls is not None else None  # type: ignore[attr-defined]
    if call is None:
        return False
    for n in sem.local_nodes(call):
        if not isinstance(n, ast.Call):
            continue
        dev = keyword(n, "device")
        if _moves_off_cpu(sem, n) or dev is not None and (sem.call_name(n) or "").startswith("torch.") \
                and string_value(dev.value) != "cpu" and not (isinstance(dev.value, ast.Constant) and dev.value.value is None):
            return True
    return False


_STR_METHODS = {"strip", "lstrip", "rstrip", "lower", "upper", "replace", "split", "title", "casefold"}
_TEXT_SOURCES = ("csv.reader", "open", "gzip.open", "bz2.open", "lzma.open", "io.open", "codecs.open")


def class_yields_text(sem: SemanticModel, cls: ast.AST) -> bool:
    """A Dataset class whose ``__getitem__`` only indexes lists of text read from a file (``return
    self.names[i], self.countries[i]`` with ``self.names = [row[0] for row in csv_rows]``): the default
    collate returns lists of strings, so there is nothing to pin. So does one that returns constants only (``return 0,
    0``: a loader that counts the passes of a loop fed from elsewhere)."""
    get = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__getitem__"), None)  # type: ignore[attr-defined]
    if get is None:
        return False
    nodes = sem.local_nodes(get)
    returns = [n for n in nodes if isinstance(n, ast.Return)]
    if not returns or any(isinstance(n, ast.Call) for n in nodes):
        return False
    if all(r.value is not None and all(isinstance(v, (ast.Constant, ast.JoinedStr)) for v in (
            r.value.elts if isinstance(r.value, ast.Tuple) else [r.value])) for r in returns):
        return True  # ``return 0, 0``: placeholder items that only count the passes (the batches come from elsewhere);
        # ``return f"x.{rank_id}.{step}"``: keys of tensors a database holds (the batches are lists of strings)
    for r in returns:
        values = r.value.elts if isinstance(r.value, ast.Tuple) else [r.value]
        if not all(isinstance(v, ast.Subscript) and _text_attr(sem, cls, dotted(v.value) or "", 0) for v in values):
            return False
    return True


def _text_attr(sem: SemanticModel, cls: ast.AST, key: str, depth: int) -> bool:
    """``self.<key>`` is only ever a list comprehension of text (see ``class_yields_text``)."""
    if not key.startswith("self.") or depth > 2:
        return False
    found = [b for b in sem.bindings_of(key) if sem.class_of(b.node) is cls]
    return bool(found) and all(isinstance(b.value, ast.ListComp) and _text_comp(sem, cls, b.value, b.node, depth)
                               for b in found)


def _text_comp(sem: SemanticModel, cls: ast.AST, comp: ast.ListComp, at: ast.AST, depth: int) -> bool:
    gen = comp.generators[0]
    if not isinstance(gen.target, ast.Name):
        return False
    elt = comp.elt
    while isinstance(elt, ast.Call) and isinstance(elt.func, ast.Attribute) and elt.func.attr in _STR_METHODS:
        elt = elt.func.value  # ``x.strip()``, ``x.lower().replace(" ", "")``
    if isinstance(elt, ast.Subscript):
        elt = elt.value  # ``row[0]``
    if not (isinstance(elt, ast.Name) and elt.id == gen.target.id):
        return False
    source = dotted(gen.iter) or ""
    if source.startswith("self."):
        return _text_attr(sem, cls, source, depth + 1)
    b = sem.binding_at(source, at) if isinstance(gen.iter, ast.Name) else None
    value = b.value if b is not None else None
    if isinstance(value, ast.Call) and (sem.call_name(value) or "") == "list" and value.args:
        value = value.args[0]  # ``rows = list(csv.reader(f))``
        if isinstance(value, ast.Name):  # ``reader = csv.reader(f); rows = list(reader)``
            inner = sem.binding_at(value.id, b.node)  # type: ignore[union-attr]
            value = inner.value if inner is not None else None
    # (``with gzip.open(path, "rt") as f:`` binds ``f`` to the open call: the loop reads the file's lines)
    return isinstance(value, ast.Call) and (sem.call_name(value) or "") in _TEXT_SOURCES


def spread_keys(sem: SemanticModel, call: ast.Call) -> frozenset[str] | None:
    """The keywords the ``**`` arguments of ``call`` can carry, when every one is known: a dict literal, a name bound
    only to dict literals (``kw = {}``, then ``kw = {"persistent_workers": True}`` on macOS), or the call of a function
    of this file or of another module of the project whose every return is one (3D-UNet's
    ``**os_dependent_dataloader_kwargs()``); None when any may carry anything (``**cfg.loader``, a parameter)."""
    out: set[str] = set()
    for kw in call.keywords:
        if kw.arg is None:
            keys = _dict_keys(sem, kw.value, call)
            if keys is None:
                return None
            out |= keys
    return frozenset(out)


def spread_value(sem: SemanticModel, call: ast.Call, key: str) -> ast.AST | None:
    """The value a ``**`` argument of ``call`` gives ``key`` when it is a dict literal, or a name bound once to one
    (``params = {"batch_size": 64, "num_workers": 0}``, then ``DataLoader(ds, **params)``); else None."""
    for kw in call.keywords:
        value = kw.value
        if kw.arg is not None:
            continue
        if isinstance(value, ast.Name):
            bound = sem.bindings_of(value.id)
            value = bound[0].value if len(bound) == 1 and not bound[0].is_param else None
        for arm in (value.body, value.orelse) if isinstance(value, ast.IfExp) else (value,):
            # (``**({"num_workers": 0, "pin_memory": True} if cuda else {})``: what the arm that holds the key gives)
            if isinstance(arm, ast.Dict):
                for k, v in zip(arm.keys, arm.values):
                    if k is not None and string_value(k) == key:
                        return v
    return None


def returned_keys(sem: SemanticModel, func: ast.AST) -> frozenset[str] | None:
    """The keys of the dicts every ``return`` of ``func`` hands back (see ``spread_keys``), else None."""
    returns = [n for n in sem.local_nodes(func) if isinstance(n, ast.Return)]
    out: set[str] = set()
    for r in returns:
        keys = _dict_keys(sem, r.value, r, calls=False) if r.value is not None else None
        if keys is None:
            return None
        out |= keys
    return frozenset(out) if returns else None


def _dict_keys(sem: SemanticModel, value: ast.AST, at: ast.AST, calls: bool = True) -> frozenset[str] | None:
    if isinstance(value, ast.IfExp):  # ``**({"num_workers": 4} if cuda else {})``: either arm's keys
        body, orelse = _dict_keys(sem, value.body, at, calls), _dict_keys(sem, value.orelse, at, calls)
        return None if body is None or orelse is None else body | orelse
    if isinstance(value, ast.Dict):
        keys = [string_value(k) if k is not None else None for k in value.keys]
        return None if any(k is None for k in keys) else frozenset(keys)  # type: ignore[arg-type]
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "dict" and not value.args:
        return None if any(k.arg is None for k in value.keywords) else frozenset(k.arg for k in value.keywords)  # type: ignore[misc]
    if isinstance(value, ast.Name):
        scope = sem.scope_of(at)
        bound = sem.bindings.in_scope(scope, value.id) if scope is not None else []
        if not bound or any(b.is_param or b.index is not None or b.value is None for b in bound):
            return None
        out: set[str] = set()
        for r in sem.reads_of(value.id):
            if sem.scope_of(r) is not scope or isinstance(sem.parent(r), (ast.keyword, ast.Return)):
                continue
            up = sem.parent(r)
            if isinstance(up, ast.Subscript) and up.value is r and isinstance(up.ctx, ast.Store) \
                    and (entry := string_value(up.slice)) is not None:
                out.add(entry)  # (``params["collate_fn"] = collate``: one more key, known)
                continue
            return None  # (``kw.update(...)``, ``kw[key] = ...``: unknown)
        for b in bound:
            keys = _dict_keys(sem, b.value, b.node, calls)  # type: ignore[arg-type]
            if keys is None:
                return None
            out |= keys
        return frozenset(out)
    if calls and isinstance(value, ast.Call) and not value.args and not value.keywords:
        local = sem.resolve(value)
        if len(local) == 1:
            return returned_keys(sem, local[0])
        summary = sem.project.function_for(sem, value) if sem.project is not None and not local else None  # type: ignore[attr-defined]
        return summary.keys if summary is not None else None
    return None


def unpinned_returns(sem: SemanticModel, func: ast.AST) -> frozenset[int]:
    """The torch DataLoaders ``func`` hands back made without pinned memory (no ``pin_memory=True``, no ``**``
    argument): ``-1`` when it returns one, else their positions in the tuple every ``return`` hands back
    (``return DataLoader(train, bs, shuffle=True), DataLoader(test, bs)``: {0, 1})."""
    returns = sem.kinds.returns_of(func)
    if not returns:
        return frozenset()
    found: set[int] | None = None
    for r in returns:
        value = r.value
        items = list(enumerate(value.elts)) if isinstance(value, ast.Tuple) else [(-1, value)]
        here = {i for i, v in items if _unpinned_loader(sem, v, r)}
        found = here if found is None else found & here
    return frozenset(found or ())


def _unpinned_loader(sem: SemanticModel, value: ast.AST | None, at: ast.AST) -> bool:
    if isinstance(value, ast.Name) and (b := sem.binding_at(value.id, at)) is not None and not b.is_param \
            and b.index is None:
        value = b.value
    if not isinstance(value, ast.Call):
        return False
    name = sem.call_name(value) or ""
    if not (name.startswith("torch.") and name.endswith(".DataLoader")) or any(k.arg is None for k in value.keywords):
        return False
    pin = next((k.value for k in value.keywords if k.arg == "pin_memory"), None)
    return pin is None or isinstance(pin, ast.Constant) and pin.value is False
