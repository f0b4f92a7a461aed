"""Loops of a training program: batch loops, training, evaluation and epoch loops, and what they bind."""

from __future__ import annotations

import ast
from collections.abc import Callable

from torchdoctor.check.astutil import dotted, method_name, root_name, target_names
from torchdoctor.check.patterns import lazy
from torchdoctor.check.semantic.calls import Calls
from torchdoctor.check.semantic.guards import Guards
from torchdoctor.check.semantic.kinds import LOADERISH, QUEUE_NAME, Kinds, plain_values, unwrap_iter
from torchdoctor.check.semantic.walk import COMP, FUNCTION, LAMBDA, LOOP, Index

__all__ = ["LoopInfo", "Loops", "EVALISH", "EVAL_FUNC"]

_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_COMPS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
EVALISH = lazy(r"(?i)(val|valid|test|eval|dev\b|holdout)")
_LOSSISH = lazy(r"(?i)loss|criterion")
_DETACHED = frozenset({"cpu", "detach", "item", "numpy", "tolist"})
_ASKS_FOR_GRADIENTS = frozenset({"grad", "requires_grad", "requires_grad_", "grad_fn", "retain_grad", "zero_grad"})
EVAL_FUNC = lazy(r"(?i)(eval|valid|test|predict|infer|score|accuracy|(^|_)acc($|_))")  # (``compute_accuracy(model, loader)``)
# ``get_batch("train")``, ``next_batch()``, ``sample_batch()``, ``get_task_batch(...)`` (a few-shot task generator);
# not ``decay_batch_step(batch_size)``
_GETS_BATCH = lazy(r"(?i)^((get|next|sample|fetch|load|read|draw)_?([a-z]+_)?batch(es)?|batch)$")
_GETS_FRAME = lazy(r"(?i)^(next|read|get|grab)_?frames?$")  # ``frame = src.next_frame()``: a video, frame by frame
_ITERATOR_NAME = lazy(r"(?i)(^|[._])(train|dev|val|valid|test|eval|data|batch)_(iter|iterator)$")
_ITEM_GETTER = lazy(r"(?i)^(pull|get|load|read|fetch)_?(item|image|sample|example|anno)?$")
_DATASET_NAME = lazy(r"(?i)^(\w*_)?(dataset|ds|data_set)(_\w*)?$")
_STEPPISH = lazy(r"(?i)step|update|optimi[sz]e|learn|train")  # the methods of a trainer object looked up elsewhere
_TRAINISH = lazy(r"(?i)train|fit|epoch|eval|valid|test|step|loop|run|infer|predict")
_RUNS_THE_MODEL = lazy(r"(?i)loss|forward|predict|infer|encode|decode|generate|score|logits|embed")  # a model's methods
_LOADER_NAME = lazy(r"(?i)(^|_)(data)?loader$|^(\w+_)?dl$")  # a loop target named so is a loader, not a batch
_NOT_BATCH_NAMES = {"_", "i", "idx", "step", "batch_idx", "batch_i", "it", "iteration", "n", "k", "j"}


class LoopInfo:
    """What one loop or comprehension is (compared by identity)."""

    __slots__ = ("node", "is_batch", "loader", "batch_vars", "index_var", "has_backward", "kind")

    def __init__(self, node: ast.AST) -> None:
        self.node = node
        self.is_batch = False  # iterates batches of data
        self.loader: ast.AST | None = None  # the iterated loader expression, unwrapped
        self.batch_vars: list[str] = []  # names bound to batch data (target + unpacking)
        self.index_var: str | None = None  # enumerate's counter
        self.has_backward = False  # backward() in its body (nested loops included, same function)
        self.kind: str | None = None  # "train" | "eval" | "epoch" | None

    def __repr__(self) -> str:  # for debugging and test failures
        return f"<LoopInfo {self.kind} line {getattr(self.node, 'lineno', 0)}>"


def _over_a_range(loop: ast.For) -> bool:
    """``for i in range(...)`` (maybe through ``enumerate``/``tqdm``, or in another order: ``for i in
    list(reversed(range(len(data))))``)."""
    iters, _ = unwrap_iter(loop.iter)
    return bool(iters) and all(isinstance(r := _reordered(i), ast.Call) and (dotted(r.func) or "") == "range"
                               for i in iters)


def _reordered(it: ast.AST) -> ast.AST:
    while isinstance(it, ast.Call) and (dotted(it.func) or "") in ("list", "reversed", "sorted", "tuple") \
            and len(it.args) == 1:
        it = it.args[0]
    return it


class Loops:
    """Classifies every loop and comprehension of the file once."""

    def __init__(self, index: Index, kinds: Kinds, calls: Calls, guards: Guards,
                 segment: Callable[[ast.AST], str]) -> None:
        self.index = index
        self.kinds = kinds
        self.calls = calls
        self.guards = guards
        self.segment = segment
        self._modes: set[str] | None = None  # names put in train/eval mode (``_mode_receivers``)
        self.info: dict[ast.AST, LoopInfo] = {}
        self._holds: dict[ast.AST, bool] = {}
        self._trains: dict[ast.AST, bool] = {}  # function -> it (or a function it reaches) holds a training loop
        self._no_training: bool | None = None  # the file trains nothing at all (``_trains_nothing``)
        self._helpers: dict[str, bool] = {}  # module-level function name -> it makes CUDA tensors (``_moving_helper``)
        get = index.by_type.get
        loops = [n for t in _LOOPS for n in get(t, ())]
        loops.sort(key=index.pos.__getitem__)
        self.order = loops
        comps = [n for t in _COMPS for n in get(t, ())]
        comps.sort(key=index.pos.__getitem__)
        for loop in loops:
            self.info[loop] = self._describe(loop)
        for loop in loops:
            self._classify_train(loop)
        for comp in comps:
            self.info[comp] = self._describe_comp(comp)
        for loop in loops:
            self._classify_eval(loop)
        for comp in comps:
            if self.info[comp].is_batch:
                self._classify_comp(comp)
        for loop in loops:
            self._classify_epoch(loop)

    def get(self, loop: ast.AST) -> LoopInfo:
        return self.info[loop]

    # ---- description -----------------------------------------------------------------------------
    def _describe(self, loop: ast.AST) -> LoopInfo:
        info = LoopInfo(loop)
        body = self.index.body(loop)
        info.has_backward = any(isinstance(n, ast.Call) and self.calls.is_backward_call(n) for n in body)
        if isinstance(loop, ast.While):
            if not self._trains_over_a_loader(loop):
                self._describe_while(info, body)
        else:
            self._describe_for(info)
        if info.is_batch:
            info.batch_vars += self._derived_batch_vars(body, info.batch_vars)
        return info

    def _describe_for(self, info: LoopInfo) -> None:
        loop = info.node
        iters, counter = unwrap_iter(loop.iter)  # type: ignore[attr-defined]
        loaders = [it for it in iters if self._is_loader(it, loop)]
        if not loaders:
            # ``for k in range(eval_iters): X, Y = get_batch(split)``: steps that fetch their own batch
            # (not an epoch loop: there ``next(iter(test_loader))`` after its training loop peeks once an epoch)
            if _over_a_range(loop) and not self._trains_over_a_loader(loop):  # type: ignore[arg-type]
                self._describe_while(info, self.index.body(loop))
            elif len(iters) == 1 and isinstance(iters[0], (ast.Name, ast.Attribute, ast.Call, ast.Subscript)) \
                    and not (isinstance(iters[0], ast.Call) and (dotted(iters[0].func) or "") in ("range", "zip")) \
                    and self._moves_its_items(loop):
                loaders = iters  # ``for it, pack in enumerate(gen_val): xs = pack[0]; xs = xs.cuda(rank); net(xs)``;
                # ``for x, y in self.get_iterator(split)``, a generator method; ``for x, y in self.data[split]``
            if not loaders:
                return
        target = loop.target  # type: ignore[attr-defined]
        named = {n for n in target_names(target) if _LOADER_NAME.search(n)}
        if named and not any(isinstance(n, ast.Call) and dotted(n.func) == "next" and n.args and dotted(n.args[0]) in named
                             for n in self.index.body(loop)):
            return  # ``for tag, dataloader in dataloaders:``: loaders (with their names), not batches; but ``seq =
            # next(eval_dl)`` in each pass takes one batch of each
        info.is_batch = True
        info.loader = loaders[0]
        if counter and isinstance(target, ast.Tuple) and len(target.elts) == 2:
            info.index_var = target.elts[0].id if isinstance(target.elts[0], ast.Name) else None
            target = target.elts[1]
        if isinstance(target, ast.Tuple) and len(target.elts) == len(iters) > 1:  # ``zip(["train", "val"], loaders)``:
            target = ast.Tuple(elts=[t for t, it in zip(target.elts, iters) if not plain_values(it)])  # names, not batches
        info.batch_vars = [n for n in target_names(target) if n not in _NOT_BATCH_NAMES]

    def _describe_comp(self, comp: ast.AST) -> LoopInfo:
        info = LoopInfo(comp)
        gen = comp.generators[0]  # type: ignore[attr-defined]
        iters, counter = unwrap_iter(gen.iter)
        loaders = [it for it in iters if self._is_loader(it, comp)]
        if not loaders:
            return info
        info.is_batch, info.loader = True, loaders[0]
        info.has_backward = any(self.calls.is_backward_call(n) for n in self.index.body(comp))
        target = gen.target
        if counter and isinstance(target, ast.Tuple) and len(target.elts) == 2:
            info.index_var = target.elts[0].id if isinstance(target.elts[0], ast.Name) else None
            target = target.elts[1]
        info.batch_vars = [n for n in target_names(target) if n not in _NOT_BATCH_NAMES]
        return info

    def _describe_while(self, info: LoopInfo, body: list[ast.AST]) -> None:
        # ``while True: x, y = get_batch("train")`` / ``batch = next(it)`` / ``for i in range(len(dataset)):
        # data = dataset[i]`` (an evaluation over the dataset's items, one by one).
        for node in body:
            if not isinstance(node, ast.Assign):
                continue
            if isinstance(node.value, ast.Call):
                name = (dotted(node.value.func) or "").rsplit(".", 1)[-1]
                fetched = name in ("next", "__next__") or bool(_GETS_BATCH.search(name)) or bool(_GETS_FRAME.search(name))
                func = node.value.func  # ``img = dataset.pull_item(i)``: an item of the dataset, by index
                fetched = fetched or isinstance(func, ast.Attribute) and bool(_ITEM_GETTER.match(func.attr)) and \
                    bool(_DATASET_NAME.search((dotted(func.value) or "").rsplit(".", 1)[-1])) or \
                    isinstance(func, ast.Attribute) and func.attr == "get" and not node.value.args and \
                    bool(QUEUE_NAME.match((dotted(func.value) or "").rsplit(".", 1)[-1])) and \
                    self._moves_one_of(body, {n for t in node.targets for n in target_names(t)})
                # (a queue of batches a loader thread fills, moved to the device here; not A3C's queue of gradients)
                fetched = fetched or isinstance(func, ast.Attribute) and func.attr in ("to", "cuda") \
                    and isinstance(func.value, ast.Subscript) and isinstance(info.node, ast.For) \
                    and _over_a_range(info.node) and isinstance(func.value.slice, ast.Slice) \
                    and self._item_of_the_pass(info.node, func.value.slice)
                # (``x = test_data[i:i + bs].to(device)`` of ``for i in range(0, n, bs)``: a minibatch a pass moves)
            else:
                fetched = isinstance(node.value, ast.Subscript) and (bool(
                    _DATASET_NAME.search((dotted(node.value.value) or "").rsplit(".", 1)[-1])) and self._item_of_the_pass(
                    info.node, node.value.slice) or isinstance(
                    info.node, ast.For) and (isinstance(node.value.slice, ast.Name)  # ``sents, length, ... = data[i]``
                                             and node.value.slice.id in target_names(info.node.target)
                                             or isinstance(node.value.slice, ast.Slice) and _over_a_range(info.node)
                                             and self._item_of_the_pass(info.node, node.value.slice))
                    # of ``for i in range(len(data))`` (or ``x = test_data[i:i + bs]`` of ``range(0, n, bs)``),
                    and self._moves_one_of(body, {n for t in node.targets for n in target_names(t)}))  # then moved
            if fetched and self._peek_only_printed(node, body):
                continue  # (``b = next(iter(train_iter)); print(b.content)`` in a loop over k folds: a look, no step)
            if fetched:
                info.is_batch = True
                for t in node.targets:
                    info.batch_vars += [n for n in target_names(t) if n not in _NOT_BATCH_NAMES]

    def _peek_only_printed(self, stmt: ast.Assign, body: list[ast.AST]) -> bool:
        """``b = next(iter(loader))`` (a fresh iterator: its first batch) whose every read in the loop is printed."""
        value = stmt.value
        if not (isinstance(value, ast.Call) and dotted(value.func) == "next" and len(value.args) == 1
                and isinstance(value.args[0], ast.Call) and dotted(value.args[0].func) == "iter"):
            return False
        names = {n for t in stmt.targets for n in target_names(t)}
        reads = [n for n in body if isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load)]
        return bool(reads) and all(any(isinstance(up, ast.Call) and dotted(up.func) == "print"
                                       for up in self.index.ancestors(r)) for r in reads)

    def _item_of_the_pass(self, loop: ast.AST, key: ast.AST) -> bool:
        """``dataset[i]``, ``dataset[order[i]]``, ``data[i:i + bs]`` of ``for i in ...``: an item (or a minibatch) the
        pass picks by its own counter. Not ``dataset[test_mask.bool()]`` in a loop over cross-validation folds: a split
        of the data, by a mask the pass built."""
        if not isinstance(loop, (ast.For, ast.AsyncFor)):
            return True
        counters = set(target_names(loop.target))
        return any(isinstance(n, ast.Name) and n.id in counters for n in self.index.subtree(key))

    @staticmethod
    def _moves_one_of(body: list[ast.AST], names: set[str]) -> bool:
        """Some ``x.to(...)``/``x.cuda()`` in ``body`` moves one of ``names``."""
        return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("to", "cuda")
                   and isinstance(n.func.value, ast.Name) and n.func.value.id in names for n in body)

    def _trains_over_a_loader(self, loop: ast.AST) -> bool:
        """A loop inside ``loop`` iterates a loader and backpropagates: ``loop`` runs epochs. So does one around a
        ``while data is not None:`` loop that takes its batches from a prefetcher (``data = prefetcher.next()`` at its
        end), or around a ``for iteration in range(gen.num_iterations()):`` loop that takes them from an index
        generator (``idx = gen.next()``), and backpropagates."""
        return any((isinstance(n, (ast.For, ast.AsyncFor)) and any(self._is_loader(it, n) for it in unwrap_iter(n.iter)[0])
                    or isinstance(n, ast.While) and self._fetches_batches(n)
                    or isinstance(n, ast.For) and n is not loop and _over_a_range(n) and self._fetches_batches(n))
                   and any(isinstance(c, ast.Call) and self.calls.is_backward_call(c) for c in self.index.body(n))
                   for n in self.index.body(loop))

    def _fetches_batches(self, loop: ast.AST) -> bool:
        """The loop takes a batch each pass (``data = prefetcher.next()``, ``x, y = next(it)``)."""
        return any(isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
                   and ((name := (dotted(n.value.func) or "").rsplit(".", 1)[-1]) == "next" or _GETS_BATCH.search(name))
                   for n in self.index.body(loop))

    def _moves_its_items(self, loop: ast.AST) -> bool:
        """The loop moves what it iterates to a device (its target, or a part of it: ``xs = pack[0]``) and calls
        a model in the same pass: it iterates batches, whatever the iterable is called."""
        target = loop.target  # type: ignore[attr-defined]
        if isinstance(target, ast.Tuple) and len(target.elts) == 2 and isinstance(loop.iter, ast.Call) \
                and (dotted(loop.iter.func) or "") == "enumerate":  # type: ignore[attr-defined]
            target = target.elts[1]
        items = set(target_names(target))
        body = self.index.body(loop)
        moved = model = False
        for node in body:
            if isinstance(node, ast.Assign):
                values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]  # ``xs, ys = pack[0], pack[1]``
                if any(isinstance(v, (ast.Subscript, ast.Attribute)) and root_name(v) in items for v in values):
                    for t in node.targets:
                        items.update(target_names(t))
            elif isinstance(node, ast.Call):
                func = node.func
                if isinstance(func, ast.Attribute) and func.attr in ("cuda", "to") and root_name(func.value) in items:
                    moved = True
                elif isinstance(func, ast.Name) and any(root_name(a) in items for a in node.args) \
                        and self._moving_helper(func.id):
                    moved = True  # ``minbatch = get_variable(batch[0])``, a helper of this file that makes a CUDA tensor
                elif (key := dotted(func)) is not None and (self.kinds.kind_of(key, node) in ("model", "wrapper")
                                                            or key in self._mode_receivers()):
                    model = True
        return moved and model

    def _moving_helper(self, name: str) -> bool:
        """A function of this module named ``name`` that moves to CUDA or makes a CUDA tensor (``tensor =
        torch.cuda.LongTensor(x) if CUDA else torch.LongTensor(x)``). Memoised per name (asked per call in loops)."""
        found = self._helpers.get(name)
        if found is None:
            func = next((f for f in self.index.by_type.get(ast.FunctionDef, ())
                         if f.name == name and self.index.frame[f].kind == "module"), None)  # type: ignore[attr-defined]
            found = self._helpers[name] = func is not None and any(
                isinstance(n, ast.Call) and (isinstance(n.func, ast.Attribute) and n.func.attr == "cuda"
                                             or (dotted(n.func) or "").startswith("torch.cuda.")
                                             and (dotted(n.func) or "").endswith("Tensor"))
                for n in self.index.subtree(func))
        return found

    def _indexes_what_it_counts(self, it: ast.AST, loop: ast.AST) -> bool:
        """``for i in range(len(val_loaders)):`` whose body reads ``val_loaders[i]``: named like a loader but indexed
        item by item, so a list of loaders (a DataLoader takes no index), each handed on whole; whether the loop
        meets batches is the body's to say (``_describe_while``)."""
        if not (isinstance(it, ast.Call) and dotted(it.func) == "range" and len(it.args) == 1 and isinstance(
                loop, ast.For) and isinstance(loop.target, ast.Name)):
            return False
        counted = it.args[0]
        if not (isinstance(counted, ast.Call) and dotted(counted.func) == "len" and len(counted.args) == 1):
            return False
        seq, index = dotted(counted.args[0]), loop.target.id
        return seq is not None and bool(LOADERISH.search(seq)) and any(isinstance(n, ast.Subscript) and dotted(n.value) == seq and isinstance(
            n.slice, ast.Name) and n.slice.id == index for n in self.index.body(loop))

    def _mode_receivers(self) -> set[str]:
        """Names put in train or eval mode somewhere in the file (``detector.eval()``): modules, whatever their kind."""
        if self._modes is None:
            self._modes = {key for c in self.calls.named("train", "eval") if self.calls.mode_call(c) is not None
                           and (key := dotted(c.func.value)) is not None}  # type: ignore[attr-defined]
        return self._modes

    def _is_loader(self, it: ast.AST, loop: ast.AST) -> bool:
        if isinstance(it, (ast.List, ast.Tuple, ast.Set)) and all(isinstance(e, ast.Constant) for e in it.elts):
            return False  # ``for phase in ["train", "val"]``: phases, not batches
        if self._indexes_what_it_counts(it, loop):
            return False  # ``for i in range(len(val_loaders)): validate(val_loaders[i])``: a list's items
        key = dotted(it)
        if key and self.kinds.kind_of(key, loop) == "loader":
            return True
        if isinstance(it, ast.Subscript):  # dataloaders[phase]
            it = it.value
        text = self.segment(it)
        if isinstance(it, (ast.Name, ast.Attribute)) and _ITERATOR_NAME.search(text):
            return True  # torchtext's ``train_iter``/``dev_iter``, a ``data_iterator``
        if isinstance(it, (ast.Name, ast.Call)) and LOADERISH.search(text) or isinstance(it, ast.Attribute) \
                and LOADERISH.search(it.attr):  # (``test_loader.df.columns``, ``loader.dataset.imgs``: its parts)
            return not isinstance(it, ast.Call) or method_name(it) not in ("items", "keys", "values", "tolist")
        # ``for x, y in val_data:`` counts when the body runs a model on it, or moves what it yields to a device;
        # so does ``for batch in iterator:`` over a parameter of ``evaluate(model, iterator, criterion)``.
        return (bool(EVALISH.search(text)) or self._param_of_eval_function(it, loop) or _batch_generator(it)) and \
            (self._calls_model(loop) or self._moves_target(loop) or self._hands_items_to_a_mover(loop)) \
            and not self._around_a_loader_loop(loop)

    def _around_a_loader_loop(self, loop: ast.AST) -> bool:
        """``for task in tasks: ... for x, y in eval_loader:``: the model runs on the inner loop's batches; the outer
        loop iterates passes (ALBERT's evaluation tasks), not batches."""
        inner = [n for n in self.index.body(loop) if isinstance(n, (ast.For, ast.AsyncFor)) and n is not loop]
        if any(any((key := dotted(it)) is not None and self.kinds.kind_of(key, n) == "loader"
                   or isinstance(it, (ast.Name, ast.Attribute)) and bool(LOADERISH.search(self.segment(it)))
                   for it in unwrap_iter(n.iter)[0])  # (``for step, batch in enumerate(eval_dataloader):``)
               or self._moves_its_items(n) for n in inner):  # (``for p in parts: model(p.to(device))``)
            return True
        # (``for idx in idx_clusters: x = data.x[nodes[idx]].to(device); model(x)``: every model call and every move of
        # the pass is in an inner loop; not a batch moved first, then run a time step at a time)
        body = self.index.body(loop)
        calls = [n for n in body if isinstance(n, ast.Call) and (key := dotted(n.func)) is not None
                 and self.kinds.kind_of(key, n) in ("model", "wrapper")]
        moves = [n for n in body if isinstance(n, ast.Call) and method_name(n) in ("to", "cuda")]
        return bool(calls) and bool(moves) and bool(inner) and all(
            any(self.index.contains(i, c) for i in inner) for c in calls + moves)

    def _param_of_eval_function(self, it: ast.AST, loop: ast.AST) -> bool:
        func = self.index.frame[loop].function
        if func is None or not isinstance(it, ast.Name) or not EVAL_FUNC.search(func.name):  # type: ignore[attr-defined]
            return False
        b = self.kinds.bindings.at(it.id, loop)
        return b is not None and b.is_param and b.node is func

    def _moves_target(self, loop: ast.AST) -> bool:
        """``batch["x"].to(device)`` of the loop's own target: batches on their way to a device."""
        target = getattr(loop, "target", None)
        names = set(target_names(target)) if target is not None else set()
        for n in self.index.body(loop):
            if isinstance(n, ast.Call) and method_name(n) in ("to", "cuda") and isinstance(n.func, ast.Attribute):
                recv = n.func.value
                while isinstance(recv, (ast.Subscript, ast.Attribute)):
                    recv = recv.value
                if isinstance(recv, ast.Name) and recv.id in names:
                    return True
            # ``seq, target = map(lambda t: t.to(device), batch)``: every element moved through a lambda
            if isinstance(n, ast.Call) and dotted(n.func) == "map" and len(n.args) == 2 \
                    and isinstance(n.args[0], ast.Lambda) and isinstance(n.args[1], ast.Name) and n.args[1].id in names \
                    and any(isinstance(c, ast.Call) and method_name(c) in ("to", "cuda")
                            for c in self.index.subtree(n.args[0].body)):
                return True
        return False

    def _hands_items_to_a_mover(self, loop: ast.AST) -> bool:
        """``loss = self.test_step(batch)`` where the step, a function of this file, moves what it is handed
        (``clean = batch[0].to(self.gpu_id)``): the loop's items are batches on their way to a device."""
        names = set(target_names(getattr(loop, "target", None))) if getattr(loop, "target", None) is not None else set()
        for n in self.index.body(loop):
            if not isinstance(n, ast.Call) or not names:
                continue
            slots = [i for i, a in enumerate(n.args) if isinstance(a, ast.Name) and a.id in names]
            for func in self.calls.resolve(n) if slots else ():
                params = [a.arg for a in func.args.args]  # type: ignore[attr-defined]
                if params[:1] == ["self"] and isinstance(n.func, ast.Attribute):
                    params = params[1:]
                handed = {params[i] for i in slots if i < len(params)}
                if any(isinstance(c, ast.Call) and method_name(c) in ("to", "cuda") and root_name(c.func.value) in handed
                       for c in self.calls.local_nodes(func)):  # type: ignore[attr-defined]
                    return True
        return False

    def _calls_model(self, loop: ast.AST) -> bool:
        for n in self.index.body(loop):
            if isinstance(n, ast.Call):
                key = dotted(n.func)
                if key is not None and self.kinds.kind_of(key, n) in ("model", "wrapper"):
                    return True
                if isinstance(n.func, ast.Attribute) and _RUNS_THE_MODEL.search(n.func.attr) \
                        and (key := dotted(n.func.value)) is not None and self.kinds.kind_of(key, n) in ("model", "wrapper"):
                    return True  # ``model.eval_loss(x, y)``, ``model.module.predict(x)``: a method that runs it
        return False

    def _derived_batch_vars(self, body: list[ast.AST], roots: list[str]) -> list[str]:
        """Names unpacked from batch values in the body: ``x, y = batch``, ``ids = batch["input_ids"]``."""
        known = set(roots)
        out: list[str] = []
        for node in body:
            if isinstance(node, ast.Assign) and _reads_only_batch(node.value, known):
                for t in node.targets:
                    for name in target_names(t):
                        if name not in known and name not in _NOT_BATCH_NAMES:
                            known.add(name)
                            out.append(name)
        return out

    # ---- classification ---------------------------------------------------------------------------------
    def loops_around(self, node: ast.AST, same_unit: bool = True) -> list[ast.AST]:
        """The loops whose body holds ``node``, innermost first, up to its function (or module)."""
        out = []
        frame = self.index.frame.get(node)
        while frame is not None:
            if frame.kind == LOOP:
                out.append(frame.node)
            elif frame.kind in (FUNCTION, LAMBDA) and same_unit:
                break
            frame = frame.parent
        return out

    def _classify_train(self, loop: ast.AST) -> None:
        """A training loop is the innermost batch loop around a backward() (else the innermost loop); or a
        loop that calls a function of this file doing one whole step (backward and an optimizer step, no
        loop of its own that backpropagates): full-batch training, one step per iteration."""
        body = self.index.body(loop)
        for node in body:
            if not (isinstance(node, ast.Call) and (self.calls.is_backward_call(node) or self._backward_helper(node))):
                continue
            chain = self.loops_around(node)
            if loop not in chain:
                continue
            target = next((c for c in chain if self.info[c].is_batch), chain[0])
            if target is loop:
                self.info[loop].kind = "train"
                return
        if self.info[loop].is_batch or any(isinstance(n, _LOOPS) for n in body):
            return
        stepping = []
        for node in body:
            if isinstance(node, ast.Call):
                funcs = self.calls.resolve(node)
                for func in funcs:
                    if {"backward", "step"} <= self.calls.effects(func) and not self.loops_backward(func):
                        self.info[loop].kind = "train"
                        return
                if not funcs and isinstance(node.func, ast.Attribute) and _STEPPISH.search(node.func.attr):
                    stepping.append(node)
        for node in stepping:  # ``trainer.mlm_step(lang1, lang2)`` of a trainer object of another module, one step a call
            if getattr(self.calls.external_of(node), "one_step", False):
                self.info[loop].kind = "train"
                return

    def _backward_helper(self, call: ast.Call) -> bool:
        """``backward(loss, scaler)``, ``self._train_batch(X, y)``: a function (or a method of the class) of this
        file that backpropagates once (no loop of its own)."""
        if not (isinstance(call.func, ast.Name) or isinstance(call.func, ast.Attribute)
                and isinstance(call.func.value, ast.Name) and call.func.value.id == "self"):
            return False
        funcs = self.calls.resolve(call)
        return bool(funcs) and all("backward" in self.calls.effects(f) and not self.loops_backward(f)  # (``for p in
                                   for f in funcs)  # params: p.grad = None`` is fine)

    def loops_backward(self, func: ast.AST) -> bool:
        """Some loop in ``func`` (or the functions it calls) backpropagates, itself or through a function of this file
        it calls on each pass (``for ep in range(300): fit_step(net, opt, x, y)``): ``func`` runs many steps."""
        memo = self.__dict__.setdefault("_loops_backward_memo", {})
        if func not in memo:
            memo[func] = self._find_loop_backward(func)
        return memo[func]  # type: ignore[no-any-return]

    def _find_loop_backward(self, func: ast.AST) -> bool:
        for f in self.calls.reachable(func):
            for n in self.calls.local_nodes(f):
                if isinstance(n, _LOOPS) and (self.info[n].has_backward or any(
                        isinstance(c, ast.Call) and "backward" in self._called_effects(c) for c in self.index.body(n))):
                    return True
        return False

    def _called_effects(self, call: ast.Call) -> frozenset[str]:
        funcs = self.calls.resolve(call)
        return frozenset().union(*(self.calls.effects(f) for f in funcs)) if funcs else frozenset()

    def _classify_comp(self, comp: ast.AST) -> None:
        """Train when its result is backpropagated, else evaluation by the same signs as a loop."""
        info = self.info[comp]
        if info.has_backward or self.feeds_backward(comp):
            info.kind = "train"
        else:
            self._classify_eval(comp)

    def feeds_backward(self, expr: ast.AST, through_detach: bool = True) -> bool:
        """``expr``'s value reaches a ``backward()`` in its scope: ``loss = sum(crit(model(x), y) for ...)`` followed
        by ``loss.backward()`` (through assignments), or a backward in its own statement. ``through_detach=False``: a
        use through ``.detach()`` or ``.data`` cuts the path (a constant of the graph: SAC's detached value target)."""
        names_in = self._names_in if through_detach else self._attached_names_in
        stmt = next((a for a in self.index.ancestors(expr) if isinstance(a, ast.stmt)), None)
        if stmt is None:
            return False
        if not hasattr(stmt, "body") and any(self.calls.is_backward_call(n) for n in self.index.subtree(stmt)):
            return True
        scope = self.index.frame[expr].scope
        tainted = {n for t in getattr(stmt, "targets", [getattr(stmt, "target", None)]) if t is not None
                   for n in target_names(t)}
        after = (stmt.lineno, stmt.col_offset)
        for node in self.calls.local_nodes(scope):
            if not tainted or (getattr(node, "lineno", 0), getattr(node, "col_offset", 0)) <= after:
                continue
            if isinstance(node, (ast.Assign, ast.AugAssign)) and names_in(node.value) & tainted:
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                    tainted.update(target_names(t))
            elif self.calls.is_backward_call(node) and names_in(node) & tainted:
                return True
        kept = {key for t in getattr(stmt, "targets", ()) if isinstance(t, ast.Attribute)
                and (key := dotted(t) or "").startswith("self.")}
        cls = self.index.frame[expr].cls
        return bool(kept) and cls is not None and any(
            isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f is not scope and self._backpropagates(f, kept)
            for f in cls.body)  # type: ignore[attr-defined]

    def _backpropagates(self, func: ast.AST, kept: set[str]) -> bool:
        """A ``backward()`` of ``func`` reaches back to one of the attributes ``kept`` (``self.q = net(s)`` in
        ``targets()``, then ``loss = F.smooth_l1_loss(self.q, y)``; ``loss.backward()`` in a sibling ``update()``)."""
        tainted: set[str] = set()

        def reads(node: ast.AST) -> bool:
            return any(isinstance(n, ast.Name) and n.id in tainted or isinstance(n, ast.Attribute) and dotted(n) in kept
                       for n in self.index.subtree(node))

        for node in self.calls.local_nodes(func):
            if isinstance(node, (ast.Assign, ast.AugAssign)) and reads(node.value):
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                    tainted.update(target_names(t))
            elif self.calls.is_backward_call(node) and reads(node):
                return True
        return False

    def _names_in(self, node: ast.AST) -> set[str]:
        """``names_in`` from the index (no walk of its own)."""
        return {n.id for n in self.index.subtree(node) if isinstance(n, ast.Name)}

    def _attached_names_in(self, node: ast.AST) -> set[str]:
        """The names ``node`` reads other than through ``.detach()`` or ``.data``."""
        parent = self.index.parent
        return {n.id for n in self.index.subtree(node) if isinstance(n, ast.Name) and not (
            isinstance(p := parent.get(n), ast.Attribute) and p.attr in ("detach", "data"))}

    def _classify_eval(self, loop: ast.AST) -> None:
        info = self.info[loop]
        if not info.is_batch or info.has_backward or info.kind:
            return
        training = [a for a in self.loops_around(loop) if self.info[a].kind == "train"]
        if training and not self._evaluates_inside(loop, training[-1]):
            return  # teacher/EMA forwards inside training are not evaluation
        if self._steps_through_a_method(loop):
            info.kind = "train"  # (``seq2seq.train_model(data)`` of a model class of another module: a whole step)
            return
        func = self.index.frame[loop].function
        text = self.segment(info.loader) if info.loader is not None else ""
        if EVALISH.search(text) or (func is not None and EVAL_FUNC.search(func.name)):  # type: ignore[attr-defined]
            info.kind = "eval"
        elif self._after_eval_call(loop) or self.guards.grad_mode(loop) in ("off", "maybe") \
                or self._in_a_script_that_trains_nothing(loop):
            info.kind = "eval"

    def _steps_through_a_method(self, loop: ast.AST) -> bool:
        """The pass calls a method named for stepping (``train_model``, ``update``) that another module's summary
        says is one whole training step (backward and an optimizer step)."""
        return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and _STEPPISH.search(n.func.attr)
                   and not self.calls.resolve(n) and getattr(self.calls.external_of(n), "one_step", False)
                   for n in self.index.body(loop))

    def _in_a_script_that_trains_nothing(self, loop: ast.AST) -> bool:
        """``for name in files: out = net_g(load(name).to(device))`` in a script's own code (not a class's method) where
        nothing trains: no training loop, no ``backward()``, no optimizer step, no gradient asked for anywhere in the
        file (pix2pix's ``test.py``): every forward it runs is inference. Not a loop that computes a loss (another
        module may train on it) or keeps outputs with their graph in a list (a rollout whose log-probabilities a learner
        uses)."""
        if self.index.frame[loop].cls is not None or not self._calls_model(loop) or not self._trains_nothing():
            return False  # (``for b in range(n): amp = draw(1, dev)``: a solver generating data runs no model)
        for n in self.index.body(loop):
            if isinstance(n, ast.Name) and _LOSSISH.search(n.id) or isinstance(n, ast.Attribute) and _LOSSISH.search(n.attr):
                return False
            if isinstance(n, ast.Call) and method_name(n) in ("append", "extend") and not all(
                    isinstance(a, ast.Call) and method_name(a) in _DETACHED for a in n.args):
                return False  # (``log_probs.append(dist.log_prob(a))``; ``preds.append(out.cpu())`` keeps no graph)
        return True

    def _trains_nothing(self) -> bool:
        if self._no_training is None:
            calls = self.calls
            self._no_training = not any(info.kind == "train" for info in self.info.values()) \
                and not any(calls.is_backward_call(c) for c in calls.named("backward")) \
                and not any(calls.is_optimizer_step(c) for c in calls.named("step")) \
                and not any(n.attr in _ASKS_FOR_GRADIENTS for n in self.index.by_type.get(ast.Attribute, ())) \
                and not any(n.arg == "requires_grad" for n in self.index.by_type.get(ast.keyword, ())) \
                and not any(n.id == "autograd" for n in self.index.by_type.get(ast.Name, ()))
        return self._no_training

    def _evaluates_inside(self, loop: ast.AST, outer: ast.AST) -> bool:
        """A validation pass nested in the training loop (``if step % print_every == 0: net.eval(); for x, y in
        valid_loader: ...``): a loader named for evaluation, after an ``.eval()`` made inside the training loop or
        behind a step guard."""
        info = self.info[loop]
        text = self.segment(info.loader) if info.loader is not None else ""
        return bool(EVALISH.search(text)) and (self._after_eval_call(loop, within=outer)
                                               or self.guards.under_step_guard(loop, outer))
        # (or behind ``if step % print_every == 0:``, a pass over validation data with no ``.eval()``: TD402)

    def _after_eval_call(self, loop: ast.AST, within: ast.AST | None = None) -> bool:
        """A ``.eval()`` call earlier in the same function (and no ``.train()`` after it); with ``within``, one made
        inside that loop."""
        scope = self.index.frame[loop].scope
        here = (loop.lineno, loop.col_offset)  # type: ignore[attr-defined]
        last = None
        for node in self.calls.named("train", "eval"):
            if self.index.frame[node].scope is not scope or (node.lineno, node.col_offset) >= here:
                continue
            if within is not None and not self.index.contains(within, node):
                continue
            mode = self.calls.mode_call(node)
            if mode is not None and (last is None or (node.lineno, node.col_offset) > last[0]):
                last = ((node.lineno, node.col_offset), mode)
        return last is not None and last[1] == "eval"

    def _classify_epoch(self, loop: ast.AST) -> None:
        info = self.info[loop]
        if info.kind:
            return
        target = getattr(loop, "target", None)
        names = target_names(target) if target is not None else []
        if any("epoch" in n.lower() for n in names):
            info.kind = "epoch"
            return
        for node in self.index.body(loop):
            if isinstance(node, _LOOPS) and self.info[node].kind in ("train", "eval"):
                info.kind = "epoch"
                return
            if isinstance(node, ast.Call) and self.calls_training(node):
                info.kind = "epoch"
                return

    def calls_training(self, call: ast.Call) -> bool:
        """The call runs a function (of this file, or of the project) that holds a training or evaluation loop."""
        for func in self.calls.resolve(call):
            hit = self._trains.get(func)
            if hit is None:
                hit = self._trains[func] = any(isinstance(n, _LOOPS) and self.info[n].kind in ("train", "eval")
                                               for f in self.calls.reachable(func) for n in self.calls.local_nodes(f))
            if hit:
                return True
        callee = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
        if not _TRAINISH.search(callee):
            return False  # only a function named like a training or evaluation step is looked up elsewhere
        ext = self.calls.external_of(call)
        return bool(ext is not None and getattr(ext, "loops", False))

    # ---- queries ------------------------------------------------------------------------------------------
    def enclosing(self, node: ast.AST, kind: str | None = None) -> ast.AST | None:
        """Nearest loop around ``node`` in the same function (a comprehension over a loader counts:
        ``[model(x) for x in loader]``); ``kind`` in "train", "eval", "epoch", "batch"."""
        frame = self.index.frame.get(node)
        while frame is not None and frame.kind not in (FUNCTION, LAMBDA):
            if frame.kind in (LOOP, COMP):
                info = self.info.get(frame.node)
                if info is not None and (frame.kind == LOOP or info.is_batch):
                    if kind is None or info.kind == kind or \
                            (kind == "batch" and (info.is_batch or info.kind in ("train", "eval")
                                                  and not self._holds_a_loader_loop(frame.node))):
                        return frame.node
            frame = frame.parent
        return None


    def _holds_a_loader_loop(self, loop: ast.AST) -> bool:
        """``for ep in range(epochs): ... for xx, yy in train_loader: ...`` with a step of its own after the inner training
        loop (PDEBench's ``single`` branch): an epoch loop, whose own reads run once an epoch, not a batch loop. Likewise
        a loop of evaluation passes around a loader's (ALBERT's ``for eval_task in tasks:``)."""
        hit = self._holds.get(loop)
        if hit is None:
            outer = self.info.get(loop)
            evaluates = outer is not None and outer.kind == "eval"
            hit = self._holds[loop] = any(isinstance(n, _LOOPS) and n is not loop and (i := self.info.get(n)) is not None
                                          and i.is_batch and i.loader is not None and (i.has_backward or evaluates)
                                          for n in self.index.body(loop))  # (an inner loop that trains; or, in a loop
            # of evaluation passes, ``for task in tasks: ... for x, y in loader:``, one that evaluates)
        return hit


_BATCH_GENERATOR = lazy(r"(?i)^(iter(ate)?_?(data|batch(es)?|minibatch(es)?)|(get_|make_)?(mini)?batches)$")


def _batch_generator(it: ast.AST) -> bool:
    """``iter_data(X, Y, n_batch=...)``, ``iterate_minibatches(...)``: a generator of batches written by hand."""
    return isinstance(it, ast.Call) and bool(_BATCH_GENERATOR.match((dotted(it.func) or "").rsplit(".", 1)[-1]))


def _reads_only_batch(value: ast.AST, batch: set[str]) -> bool:
    """True for ``batch``, ``batch["x"]``, ``batch[0]``, ``batch.x`` and tuples of those (no calls)."""
    if isinstance(value, (ast.Tuple, ast.List)):
        return bool(value.elts) and all(_reads_only_batch(e, batch) for e in value.elts)
    node = value
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return isinstance(node, ast.Name) and node.id in batch
