"""Reads that run a few times, not on every step: a loop that stops after a few examples, a loop over a few
constants that does not train, a branch capped by ``len(kept) < 5``, a batch-size retry, a first pass only.
TD603 (and TD602, through ``per_step_loop``) ask."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from torchdoctor.check.astutil import PLACEMENT_METHODS, call_argument, dotted, is_none, param_default, param_slot, strip_methods
from torchdoctor.check.patterns import lazy
from torchdoctor.check.semantic.counts import FEW, few_passes
from torchdoctor.check.semantic.call_records import chosen_value, set_once, string_choices
from torchdoctor.check.semantic.models import init_of

if TYPE_CHECKING:
    from torchdoctor.check.context import Context

KEPT = 100  # examples a capped list keeps (``if len(adv_examples) < 64:``): that many passes of its branch at most

__all__ = ["branch_no_caller_chooses", "branch_no_caller_takes", "made_once", "few_iterations", "few_in_range", "while_few_kept", "retry_loop", "first_pass_only", "last_pass_only"]



def few_iterations(ctx: Context, loop: ast.AST) -> bool:
    """``count += 1 ... if count == num_examples: break`` (or ``return``) with ``num_examples=2``, or ``for ix, batch
    in enumerate(loader): if ix == 3: break``: a look at a few batches."""
    sem = ctx.semantic
    if getattr(loop, "body", None) and isinstance(loop.body[-1], (ast.Break, ast.Return)):  # type: ignore[attr-defined]
        return True  # ``for x, y in loader: ...; break``: one pass, a smoke test of the first batch
    if isinstance(loop, ast.For) and isinstance(loop.iter, ast.Call) and dotted(loop.iter.func) == "range" \
            and len(loop.iter.args) == 1 and isinstance(c := loop.iter.args[0], ast.Constant) and c.value in (0, 1):
        return True  # ``for _ in range(1):``: a smoke test's one pass
    if isinstance(loop, ast.For) and _one_batch_loader(sem, loop.iter):
        return True  # ``DataLoader(holdout, batch_size=len(holdout))``: the whole set in one batch, one pass
    if isinstance(loop, ast.For) and isinstance(loop.iter, (ast.List, ast.Tuple)) and 0 < len(loop.iter.elts) <= 4 \
            and all(isinstance(e, ast.Constant) or isinstance(e, ast.Tuple) and e.elts and isinstance(e.elts[0], ast.Constant)
                    and isinstance(e.elts[0].value, str) for e in loop.iter.elts):
        return True  # ``for label, make in [("shallow", ...), ("deep", ...)]``: a pass for each of a few named items
    for stmt in sem.body(loop):
        if not (isinstance(stmt, ast.If) and any(isinstance(s, (ast.Break, ast.Return)) for s in stmt.body)):
            continue
        test = stmt.test
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.GtE, ast.Gt))
                and isinstance(test.left, ast.Name) and (test.left.id in sem.guards.counters()
                                                         or test.left.id == _enumerate_counter(loop, sem))):
            continue
        if _small_bound(ctx, test.comparators[0], stmt):
            return True
    return False


def _one_batch_loader(sem, it: ast.AST, depth: int = 0) -> bool:  # type: ignore[no-untyped-def]
    """``it`` (or a name bound to it, through ``enumerate``/``iter``/``tqdm``, or to what a function of the file
    returns) is a DataLoader whose ``batch_size`` is ``len()`` of its dataset, or of what the dataset was built from
    (``DataLoader(DS(val_images, val_targets), batch_size=len(val_images))``): the whole set in one batch."""
    index = None  # (the element of a tuple a function returns: ``val_dl, small_dl = get_data()``)
    for _ in range(8):
        if isinstance(it, ast.Call) and (dotted(it.func) or "").rsplit(".", 1)[-1] in ("enumerate", "iter", "tqdm") \
                and it.args:
            it = it.args[0]
            continue
        if isinstance(it, ast.Name):
            b = sem.binding_at(it.id, it)
            if b is not None and b.is_param and isinstance(b.node, (ast.FunctionDef, ast.AsyncFunctionDef)) and depth < 2:
                sites = sem.call_sites(b.node)  # ``def eval(net, loader)`` every call of which hands it such a loader
                return bool(sites) and all((arg := call_argument(site, b.node, it.id)) is not None
                                           and _one_batch_loader(sem, arg, depth + 1) for site in sites)
            it, index = (b.value, b.index) if b is not None and not b.is_param else (None, None)
            continue
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and (funcs := sem.resolve(it)) and len(funcs) == 1:
            returns = [n.value for n in sem.local_nodes(funcs[0]) if isinstance(n, ast.Return) and n.value is not None]
            it = returns[0] if len(returns) == 1 else None  # ``val_dl = get_data()``: what it returns
            if index is not None and isinstance(it, ast.Tuple):
                it = it.elts[index] if isinstance(index, int) and index < len(it.elts) else None
                index = None
            continue
        if index is not None:
            return False
        break
    if not (isinstance(it, ast.Call) and (dotted(it.func) or "").rsplit(".", 1)[-1] == "DataLoader"):
        return False
    data = it.args[0] if it.args else next((k.value for k in it.keywords if k.arg == "dataset"), None)
    size = it.args[1] if len(it.args) > 1 else next((k.value for k in it.keywords if k.arg == "batch_size"), None)
    made = data
    if isinstance(data, ast.Name) and (b := sem.binding_at(data.id, it)) is not None and not b.is_param:
        made = b.value
    if isinstance(made, ast.Call) and made.args and isinstance(made.args[0], (ast.List, ast.Tuple)) \
            and len(made.args[0].elts) == 1 and not any(isinstance(e, ast.Starred) for e in made.args[0].elts) \
            and (size is None or isinstance(size, ast.Constant) and size.value == 1) \
            and not any(k.arg in ("sampler", "batch_sampler") for k in it.keywords) and _counts_its_items(sem, made):
        return True  # ``DataLoader(InferenceDataset([test_data]), batch_size=1)``: a set of one item, one pass
    if data is None or not (isinstance(size, ast.Call) and isinstance(size.func, ast.Name) and size.func.id == "len"
                            and len(size.args) == 1 and dotted(size.args[0]) is not None):
        return False
    whole = dotted(size.args[0])
    if whole == dotted(data):
        return True
    return isinstance(made, ast.Call) and any(dotted(a) == whole for a in made.args[:1])


def _counts_its_items(sem, made: ast.Call) -> bool:  # type: ignore[no-untyped-def]
    """The Dataset class of this file that ``made`` builds says its length is ``len()`` of what it keeps (not a
    number of draws from one image: ``return self.n_iters``)."""
    cls = sem.calls_index.classes.get(dotted(made.func) or "")
    length = next((f for f in getattr(cls, "body", ()) if isinstance(f, ast.FunctionDef) and f.name == "__len__"), None)
    returns = [n for n in sem.local_nodes(length) if isinstance(n, ast.Return)] if length is not None else []
    return len(returns) == 1 and isinstance(v := returns[0].value, ast.Call) and isinstance(v.func, ast.Name) \
        and v.func.id == "len"


def _enumerate_counter(loop: ast.AST, sem: object = None) -> str | None:
    """``ix`` of ``for ix, batch in enumerate(loader)`` (counting from a constant; also through a progress bar:
    ``loop = tqdm(enumerate(dl), total=len(dl))``, ``for i, batch in loop:``): the loop's own pass counter."""
    if not (isinstance(loop, ast.For) and isinstance(loop.target, ast.Tuple) and loop.target.elts
            and isinstance(loop.target.elts[0], ast.Name)):
        return None
    it = loop.iter
    if isinstance(it, ast.Name) and sem is not None and (b := sem.binding_at(it.id, loop)) is not None \
            and not b.is_param and b.index is None and b.value is not None:  # type: ignore[attr-defined]
        it = b.value
    if isinstance(it, ast.Call) and (dotted(it.func) or "").rsplit(".", 1)[-1] in ("tqdm", "track") and it.args:
        it = it.args[0]
    if not (isinstance(it, ast.Call) and dotted(it.func) == "enumerate"):
        return None
    start = it.args[1] if len(it.args) > 1 else next((k.value for k in it.keywords if k.arg == "start"), None)
    return loop.target.elts[0].id if start is None or isinstance(start, ast.Constant) else None


def few_in_range(ctx: Context, loop: ast.AST) -> bool:
    """``for i in range(1, rows * cols + 1)`` with ``rows = cols = 2``, or over a few constants (``for seq_len in
    (256, 512, 1024)``), in a loop that does not train: a few images shown, a few lengths tried, not steps of a run
    (TD611 still counts a demo's few steps: its copies are what the demo shows)."""
    sem = ctx.semantic
    return (sem.loop_kind(loop) != "train" or _gradients_only(ctx, loop)) and few_passes(sem, loop)
    # (a loop that trains runs steps; one that only asks ``torch.autograd.grad`` checks gradients a few times)


def _gradients_only(ctx: Context, loop: ast.AST) -> bool:
    """The loop takes gradients (``torch.autograd.grad``, ``act.backward(...)``) and no optimizer step: a gradient
    check, or a few passes that optimise an input by hand (deep dream's ``x + step * x.grad``), not steps of a run."""
    sem = ctx.semantic
    calls = [n for n in sem.body(loop) if isinstance(n, ast.Call)]
    effects = sem.region_effects(sem.body(loop), deep=True)  # (``grad_cam(x)``, whose backward is its own)
    return (any(ctx.call_name(c) == "torch.autograd.grad" or isinstance(c.func, ast.Attribute)
                and c.func.attr == "backward" for c in calls) or "backward" in effects) and "step" not in effects


def while_few_kept(ctx: Context, node: ast.AST, loop: ast.AST) -> bool:
    """``if len(adv_examples) < 5: adv_examples.append((p.item(), x.cpu()))``: a branch that runs until a list it
    fills holds a few items, then never again; also the test's later operands (``if len(kept) < 5 and not (pred ==
    y).all():``: ``and`` evaluates them only while the list is short)."""
    for branch in _branches_around(ctx, node, loop):
        test = branch.test
        tests = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
        if any(_caps_a_list(ctx, t, branch) for t in tests):
            return True
    sem = ctx.semantic
    for parent in sem.ancestors(node):
        if parent is loop:
            break
        if isinstance(parent, ast.If) and isinstance(parent.test, ast.BoolOp) and isinstance(parent.test.op, ast.And) \
                and sem.index.contains(parent.test, node):
            for operand in parent.test.values:
                if sem.index.contains(operand, node):
                    break
                if _caps_a_list(ctx, operand, parent):
                    return True
    return False


def _branches_around(ctx: Context, node: ast.AST, loop: ast.AST) -> list[ast.If]:
    """The ``if`` blocks between ``node`` and ``loop`` whose body (not ``else``) holds ``node``, innermost first."""
    out, child = [], node
    for parent in ctx.semantic.ancestors(node):
        if parent is loop:
            break
        if isinstance(parent, ast.If) and child in parent.body:
            out.append(parent)
        child = parent
    return out


def _caps_a_list(ctx: Context, test: ast.AST, branch: ast.If) -> bool:
    """``len(kept) < 5`` where ``branch`` appends to ``kept`` (a cap up to KEPT: each pass keeps one item at least,
    so the branch runs that many times at most, whatever the length of the run)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Lt, ast.LtE))
            and isinstance(test.left, ast.Call) and dotted(test.left.func) == "len" and len(test.left.args) == 1):
        return False
    kept = dotted(test.left.args[0])
    return bool(kept) and _small_bound(ctx, test.comparators[0], branch, KEPT) and any(
        isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr in ("append", "extend", "add")
        and dotted(c.func.value) == kept for st in branch.body for c in ctx.semantic.subtree(st))


def _small_bound(ctx: Context, expr: ast.AST, at: ast.AST, few: int = FEW) -> bool:
    """A literal of at most ``few``, or a parameter whose default is one (``num_examples=2``)."""
    if isinstance(expr, ast.Constant):
        return type(expr.value) is int and expr.value <= few
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        value = set_once(ctx.semantic, dotted(expr))
        return isinstance(value, ast.Constant) and type(value.value) is int and value.value <= few
    if not isinstance(expr, ast.Name):
        return False
    b = ctx.semantic.binding_at(expr.id, at)
    func = ctx.semantic.function_of(at)
    if b is None or not b.is_param or func is None or b.node is not func:
        return False
    default = param_default(func, expr.id)  # type: ignore[arg-type]
    return isinstance(default, ast.Constant) and type(default.value) is int and default.value <= few


def retry_loop(ctx: Context, node: ast.AST, loop: ast.AST) -> bool:
    """``while batch_size: try: ... return bench.run() except RuntimeError: batch_size //= 2``: the loop
    goes round again only when its ``try`` fails (a batch-size retry), so ``node`` in that ``try`` runs once."""
    if not isinstance(loop, ast.While):
        return False
    sem = ctx.semantic
    for stmt in loop.body:
        if isinstance(stmt, ast.Try) and stmt.handlers and sem.index.contains(stmt, node) and (
                any(isinstance(s, (ast.Return, ast.Break)) for s in stmt.body) or _oom_search(sem, stmt, loop)):
            return True
    return False


def _oom_search(sem, stmt: ast.Try, loop: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``while lo <= hi: bs = (lo + hi) // 2; try: ... lo = bs + 1 except RuntimeError as e: if "out of memory" ...:
    hi = bs - 1``: a search for the largest batch that fits, one trial a pass (no optimizer steps), not training."""
    catches_oom = any("out of memory" in sem.segment(h).lower() or "OutOfMemory" in sem.segment(h) for h in stmt.handlers)
    return catches_oom and not any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "step"
                                   for n in sem.body(loop))


def first_pass_only(ctx: Context, node: ast.AST, loop: ast.AST) -> bool:
    """``if len(all_preds) == 0: all_preds.append(...)`` (else: ``np.append``): a branch for the loop's first
    pass, while a list the loop fills is still empty."""
    sem = ctx.semantic
    for branch in _branches_around(ctx, node, loop):
        test = branch.test
        if _first_steps_only(ctx, test, loop) or _filled_on_first_pass(ctx, test, branch, loop):
            return True
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq) and \
                isinstance(test.left, ast.Call) and dotted(test.left.func) == "len" and test.left.args and \
                isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value == 0:
            filled = dotted(test.left.args[0])
            return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "append"
                       and dotted(n.func.value) == filled for n in sem.body(loop))
    return False


def _filled_on_first_pass(ctx: Context, test: ast.AST, branch: ast.If, loop: ast.AST) -> bool:
    """``if loss_ema is None: loss_ema = loss.item()`` (else: ``0.9 * loss_ema + 0.1 * loss.item()``): the branch
    fills the name, and nothing in the loop sets it back to None, so it runs on the loop's first pass at most."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Is)
            and is_none(test.comparators[0]) and (name := dotted(test.left)) is not None):
        return False
    fills = [st for st in branch.body if isinstance(st, ast.Assign) and len(st.targets) == 1
             and dotted(st.targets[0]) == name and not is_none(st.value)]
    if not fills:
        return False
    for n in ctx.semantic.subtree(loop):
        target = n if isinstance(n, (ast.Name, ast.Attribute)) and not isinstance(n.ctx, ast.Load) else None
        if target is None or dotted(target) != name:
            continue
        stmt = ctx.semantic.parent(target)
        if not (isinstance(stmt, (ast.Assign, ast.AugAssign)) and stmt.value is not None and not is_none(stmt.value)):
            return False  # (set to None again, deleted, or bound by a loop or a ``with``: maybe None on a later pass)
    return True


_SHOWN = lazy(r"(?i)vis|show|plot|sample|image|log_first")


def _counted_up(sem, name: str, loop: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``id += 1`` on every pass of ``loop`` (at the top level of its body), and no other binding of ``name`` in
    it: a pass counter, as ``enumerate`` gives (``if id < showcase:`` holds on the first passes only)."""
    counts = [n for n in getattr(loop, "body", []) if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name) and n.target.id == name]
    if len(counts) != 1 or not isinstance(counts[0].op, ast.Add) or not (
            isinstance(c := counts[0].value, ast.Constant) and c.value == 1):
        return False
    return not any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) and n is not counts[0].target
                   for n in sem.subtree(loop))


def _first_steps_only(ctx: Context, test: ast.AST, loop: ast.AST) -> bool:
    """``if global_step < num_visualization_batches and ...:`` with ``global_step`` counted from the loop's own
    ``enumerate``, bounded by a few or by a number of samples to show: a branch for the first steps of the run, not
    for every step (a warm-up of many steps is not one)."""
    sem = ctx.semantic
    tests = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    counter = _enumerate_counter(loop, sem)
    for t in tests:
        if not (isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], (ast.Lt, ast.LtE))
                and isinstance(t.left, ast.Name)):
            continue
        bound = t.comparators[0]
        if not (_small_bound(ctx, bound, t) or _SHOWN.search((dotted(bound) or "").rsplit(".", 1)[-1])):
            continue
        if t.left.id == counter or _counted_up(sem, t.left.id, loop):
            return True
        b = sem.binding_at(t.left.id, t)
        if counter and b is not None and b.value is not None and sem.contains(loop, b.node) \
                and any(isinstance(n, ast.Name) and n.id == counter for n in sem.subtree(b.value)):
            return True  # ``global_step = epoch * len(loader) + i``
    return False


def last_pass_only(ctx: Context, node: ast.AST, loop: ast.AST) -> bool:
    """``if i == len(loader) - 1: summary = acc.item()`` (or the ``else`` of ``if i != len(loader) - 1:``, or
    ``i + 1 == len(loader)``) on the loop's own ``enumerate`` counter: a read on the last pass, once an epoch."""
    counter = _enumerate_counter(loop, ctx.semantic)
    if counter is None:
        return False
    child = node
    for parent in ctx.semantic.ancestors(node):
        if parent is loop:
            return False
        if isinstance(parent, ast.If) and child is not parent.test and _tests_last_pass(parent.test, counter) is not None:
            on_last = _tests_last_pass(parent.test, counter)
            if (child in parent.body) == on_last:
                return True
        child = parent
    return False


def _tests_last_pass(test: ast.AST, counter: str) -> bool | None:
    """True for ``i == len(x) - 1`` / ``i + 1 == len(x)``, False for ``!=``; None for any other test."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.NotEq))):
        return None
    sides = [test.left, test.comparators[0]]

    def is_len(e: ast.AST, minus: int) -> bool:  # ``len(x) - 1`` (minus 1) or ``len(x)`` (minus 0)
        if minus and isinstance(e, ast.BinOp) and isinstance(e.op, ast.Sub) and isinstance(e.right, ast.Constant) \
                and e.right.value == 1:
            e = e.left
        elif minus:
            return False
        return isinstance(e, ast.Call) and dotted(e.func) == "len"

    def is_counter(e: ast.AST, plus: int) -> bool:
        if plus and isinstance(e, ast.BinOp) and isinstance(e.op, ast.Add) and isinstance(e.right, ast.Constant) \
                and e.right.value == 1:
            e = e.left
        elif plus:
            return False
        return isinstance(e, ast.Name) and e.id == counter

    for a, b in (sides, sides[::-1]):
        if is_counter(a, 0) and is_len(b, 1) or is_counter(a, 1) and is_len(b, 0):
            return isinstance(test.ops[0], ast.Eq)
    return None


def branch_no_caller_chooses(ctx: Context, node: ast.AST) -> bool:
    """``node`` sits in the ``elif distance == "l_2":`` branch of a function whose every call (in this file, else in
    the other modules of the project) passes another string for ``distance`` (``distance="l_inf"``; the default's
    where none is passed; ``norm=args.norm`` of a notebook's ``args.norm = "l2"``): the branch never runs."""
    sem = ctx.semantic
    func = sem.function_of(node)
    if func is None:
        return False
    for test, holds in sem.guards.branch_tests(node):
        if isinstance(test, ast.Attribute) and isinstance(test.value, ast.Name) and test.value.id == "self":
            found = _constructor_param(ctx, func, test.attr)  # ``if self.add_zero_attn:`` of ``add_zero_attn=False``
            if found is not None and (chosen := _chosen_strings(ctx, *found)) \
                    and all(type(v) is bool for v in chosen) and holds not in chosen:
                return True
            continue
        if isinstance(test, ast.Name):  # ``if sample:`` of ``sample_sigmoid(y, sample=True)`` everywhere: the ``else``
            b = sem.binding_at(test.id, test)
            if b is not None and b.is_param and b.node is func and (chosen := _chosen_strings(ctx, func, test.id)) \
                    and all(type(v) is bool for v in chosen) and holds not in chosen:
                return True
            continue
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name)):
            continue
        op, right = test.ops[0], test.comparators[0]
        if isinstance(op, (ast.Eq, ast.NotEq)) and isinstance(right, ast.Constant) and isinstance(right.value, str) \
                and holds == isinstance(op, ast.Eq):
            wanted = {right.value}
        elif isinstance(op, ast.In) and holds and isinstance(right, (ast.Tuple, ast.List, ast.Set)) and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in right.elts):
            wanted = {e.value for e in right.elts}  # type: ignore[attr-defined]
        else:
            continue
        b = sem.binding_at(test.left.id, test)
        if b is None or not b.is_param or b.node is not func:
            continue
        chosen = _chosen_strings(ctx, func, test.left.id)
        if chosen and all(isinstance(v, str) for v in chosen) and not chosen & wanted:
            return True
    return False


def _constructor_param(ctx: Context, func: ast.AST, attr: str) -> tuple[ast.AST, str] | None:
    """(``__init__``, its parameter) when ``self.<attr>`` is set once in the class of ``func``, in its ``__init__``,
    straight from that parameter (``self.add_zero_attn = add_zero_attn``)."""
    sem = ctx.semantic
    cls = sem.class_of(func)
    if cls is None:
        return None
    stores = [n for n in ast.walk(cls) if isinstance(n, ast.Attribute) and n.attr == attr and isinstance(n.ctx, ast.Store)
              and isinstance(n.value, ast.Name) and n.value.id == "self"]
    if len(stores) != 1:
        return None
    stmt, init = sem.parent(stores[0]), sem.function_of(stores[0])
    value = stmt.value if isinstance(stmt, ast.Assign) and stmt.targets == [stores[0]] else None
    if isinstance(stmt, ast.Tuple) and isinstance(assign := sem.parent(stmt), ast.Assign) and assign.targets == [stmt] \
            and isinstance(assign.value, ast.Tuple) and len(assign.value.elts) == len(stmt.elts):
        value, stmt = assign.value.elts[stmt.elts.index(stores[0])], assign  # ``self.gr, self.autobalance = ..., autobalance``
    if not (isinstance(value, ast.Name) and init is not None and init.name == "__init__"  # type: ignore[attr-defined]
            and sem.class_of(init) is cls):
        return None
    b = sem.binding_at(value.id, stmt)
    return (init, value.id) if b is not None and b.is_param and b.node is init else None


def _chosen_strings(ctx: Context, func: ast.AST, param: str) -> frozenset[str | bool] | None:
    sem = ctx.semantic
    cls = sem.class_of(func)
    if func.name == "__init__" and cls is not None and sem.frame(cls).kind == "module":  # type: ignore[attr-defined]
        sites = sem.calls_named(cls.name)  # (``CGCN(feats, ..., is_word)``: the calls of a constructor are the class's)
    elif sem.frame(func).kind != "module":
        return None  # (a method's callers include instance calls, ``self.model(..., train=True)``, not all seen here)
    else:
        sites = sem.call_sites(func)
    elsewhere: frozenset[str | bool] | None = frozenset()
    if sem.project is not None and sem.project.has_callers(sem, func):  # type: ignore[attr-defined]
        elsewhere = sem.project.callers_choose(sem, func, param)  # type: ignore[attr-defined]
        if elsewhere is None:
            return None  # (``run_training(training_type=cfg.args.training_type)`` in another module: not known)
    if not sites:
        return elsewhere or None
    slot = param_slot(func, param)
    default = param_default(func, param)  # type: ignore[arg-type]
    out: set[str | bool] = set()
    for call in sites:
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            return None
        passed = any(k.arg == param for k in call.keywords) or slot is not None and int(slot[1:]) < len(call.args)
        value = chosen_value(string_choices(sem, call), passed, param, slot, default)
        if value is None:
            return None
        out.add(value)
    return frozenset(out) | elsewhere


# ---- branches no call takes, buffers made once (TD611, TD303) --------------------------------
_LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


def branch_no_caller_takes(ctx: Context, node: ast.AST) -> bool:
    """``if x_mask is not None: ... else: x_mask = torch.ones(b, 1, t).to(x.device)`` in a function whose
    ``x_mask=None`` every caller passes (here, or in the other modules of the project): the default's branch, which
    no step takes (glow-tts's ``commons.squeeze(x, x_mask, n_sqz)``); or ``if zero_triu:`` of a flag that defaults to
    False and that no call of the function passes (transformer-xl's ``_rel_shift``)."""
    sem = ctx.semantic
    func = sem.function_of(node)
    if func is None:
        return False
    for test, holds in sem.guards.branch_tests(node):
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name) \
                and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None \
                and isinstance(test.ops[0], (ast.Is, ast.IsNot)) and holds == isinstance(test.ops[0], ast.Is):
            param = test.left.id  # (the branch where ``param`` is None)
            if isinstance(default := param_default(func, param), ast.Constant) and default.value is None:
                sites = sem.call_sites(func) or _instance_sites(ctx, func)
                here = bool(sites) and all(_passed(s, func, param) for s in sites)
                return here or not sites and sem.project is not None and sem.project.callers_pass(  # type: ignore[attr-defined]
                    sem, func, param, every=True)
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name) \
                and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None \
                and isinstance(test.ops[0], (ast.Is, ast.IsNot)) and holds == isinstance(test.ops[0], ast.IsNot) \
                and _never_given(ctx, func, test.left.id):
            return True  # ``if length is not None:`` of ``forward(self, Q, length=None)`` that no call passes a length
        if isinstance(test, ast.Name) and holds and isinstance(default := param_default(func, test.id), ast.Constant) \
                and not default.value and (b := sem.binding_at(test.id, node)) is not None and b.is_param:
            sites = sem.call_sites(func)  # ``def _rel_shift(self, x, zero_triu=False)``, whose ``if zero_triu:`` no
            if sites and not any(_passed(s, func, test.id) for s in sites) and (  # call turns on
                    sem.project is None or sem.frame(func).kind != "module" or not sem.project.has_callers(sem, func)):  # type: ignore[attr-defined]
                return True
        if isinstance(test, ast.Attribute) and holds and isinstance(test.value, ast.Name) and test.value.id == "self" \
                and _set_false_once(ctx, func, test.attr):
            return True  # ``if self.individual:`` of a class whose ``__init__`` says ``self.individual = False``
    return False


def _set_false_once(ctx: Context, func: ast.AST, attr: str) -> bool:
    """``self.<attr>`` is set once in the module, in the ``__init__`` body of ``func``'s class, to a false constant
    (``self.individual = False``), or to a parameter of ``__init__`` that defaults to one and that no construction
    passes (``def __init__(self, configs, individual=False)``, built by a registry as ``Model(args)``), and nothing
    else in the module names the attribute: the branch it guards never runs (DLinear's per-channel layers). (An
    importer that sets it would have to name it: such code is rare; the finding is then missed, never made up.)"""
    sem = ctx.semantic
    cls = sem.class_of(func)
    init = init_of(cls) if cls is not None else None
    if init is None or f'"{attr}"' in sem.text.source or f"'{attr}'" in sem.text.source:
        return False  # (``setattr(self, "individual", ...)``, ``getattr(cfg, "individual")``)
    sets = [n for n in sem.of_type(ast.Attribute) if n.attr == attr and not isinstance(n.ctx, ast.Load)]
    if len(sets) != 1 or not isinstance(stmt := sem.parent(sets[0]), ast.Assign) or stmt not in init.body \
            or len(stmt.targets) != 1 or not isinstance(sets[0].value, ast.Name) or sets[0].value.id != "self":
        return False
    value = stmt.value
    if isinstance(value, ast.Name) and (b := sem.binding_at(value.id, value)) is not None and b.is_param \
            and b.node is init and isinstance(default := param_default(init, value.id), ast.Constant) and not default.value:
        return not any(_passed(c, init, value.id) for c in sem.call_sites(init)) and (
            sem.project is None or not sem.project.callers_pass(sem, init, value.id))  # type: ignore[attr-defined]
    return isinstance(value, ast.Constant) and not value.value


def _never_given(ctx: Context, func: ast.AST, param: str) -> bool:
    """``param`` defaults to None and no call of ``func`` passes it: in this file (a function's calls, or a module
    class's instances'), nor in the other modules of the project (a method's calls through objects of its class),
    and some call is known."""
    sem = ctx.semantic
    default = param_default(func, param)  # type: ignore[arg-type]
    if not (isinstance(default, ast.Constant) and default.value is None):
        return False
    sites = sem.call_sites(func) or _instance_sites(ctx, func)
    if any(_passed(s, func, param) for s in sites):
        return False
    method = sem.class_of(func) is not None
    if sem.project is None:
        return bool(sites)
    elsewhere = sem.project.has_callers(sem, func, by_class=method)  # type: ignore[attr-defined]
    return (bool(sites) or elsewhere) and not sem.project.callers_pass(sem, func, param, by_class=method)  # type: ignore[attr-defined]


def _passed(call: ast.Call, func: ast.AST, param: str) -> bool:
    """``call`` passes ``param`` of ``func`` (an instance call ``norm(x, mask)`` of a ``forward(self, x, x_mask)``
    passes no ``self``)."""
    if any(k.arg == param or k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
        return True
    names = [a.arg for a in func.args.posonlyargs + func.args.args]  # type: ignore[attr-defined]
    if names[:1] == ["self"]:
        names = names[1:]
    return param in names and names.index(param) < len(call.args)


def _instance_sites(ctx: Context, func: ast.AST) -> list[ast.Call]:
    """The calls of the instances of ``func``'s module class in this file (``norm = Norm(4).to(device)``, then
    ``norm(x, mask)``; ``self.norm = Norm(c)``, then ``self.norm(x, x_mask)``), when ``func`` is its ``forward``."""
    sem = ctx.semantic
    cls = sem.class_of(func)
    if func.name != "forward" or cls is None or cls.name not in sem.module_classes:  # type: ignore[attr-defined]
        return []
    keys = {dotted(t) for n in sem.of_type(ast.Assign) for t in n.targets  # type: ignore[attr-defined]
            if isinstance(made := strip_methods(n.value, PLACEMENT_METHODS), ast.Call)  # type: ignore[attr-defined]
            and (dotted(made.func) or "").rsplit(".", 1)[-1] == cls.name}  # type: ignore[attr-defined]
    return [call for call in sem.calls if dotted(call.func) in keys]


def made_once(ctx: Context, node: ast.Call, region: ast.AST) -> bool:
    """``if features is None: features = torch.zeros(n, d)`` in the loop: a buffer made on the first pass only; or
    ``if key not in hann_window: hann_window[key] = torch.hann_window(n).to(...)``: a cache, filled once a key; or
    a lazy initialiser (``if not self.ready: self._build(...)``, whose ``_build`` sets ``self.ready = True``)."""
    sem = ctx.semantic
    if _lazy_init(sem, node):
        return True
    stmt = sem.statement_of(node)
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(cache := stmt.targets[0], ast.Subscript):
        store = dotted(cache.value)
        for a in sem.ancestors(stmt):
            if a is region:
                break
            if isinstance(a, ast.If) and isinstance(a.test, ast.Compare) and len(a.test.ops) == 1 \
                    and isinstance(a.test.ops[0], ast.NotIn) and (dotted(a.test.comparators[0]) == store and store
                                                                  or sem.segment(a.test.left) == sem.segment(cache.slice)):
                return True  # (``if key not in mel_cache: ...; window_cache[key] = ...``: caches filled together)
    stmt = sem.statement_of(node)
    if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
        return False
    target = dotted(stmt.targets[0])
    if isinstance(stmt.targets[0], ast.Name) and not isinstance(region, _LOOPS):
        return False  # (``if x_mask is None: x_mask = torch.ones(...)`` in a forward: a default, made on every call)
    if isinstance(stmt.targets[0], ast.Attribute) and _reset_elsewhere(sem, stmt.targets[0].attr):
        return False  # (``self.prev_att = None`` in ``reset_mem()``, called before each batch: made every batch)
    for a in sem.ancestors(stmt):
        if a is region:
            return False
        if isinstance(a, ast.If) and any(stmt is n for b in a.body for n in sem.subtree(b)) and (
                _empty_test(a.test, target) or any(_empty_test(a.test, other) for other in _filled_with(sem, a.body, target))):
            return bool(target)  # (``if self.in_norm is None:`` around ``self.loop_index = ...`` and ``self.in_norm = ...``:
            # the branch fills the attribute it tests, together with this one)
    return False


def _filled_with(sem, body: list[ast.stmt], target: str | None) -> list[str]:  # type: ignore[no-untyped-def]
    """The attributes of the object (``self.in_norm``) that the statements of ``body`` fill with a computed value beside
    ``target``, which nothing else sets back to None (or False)."""
    if not target or not target.startswith("self."):
        return []
    out = []
    for st in body:
        for t in st.targets if isinstance(st, ast.Assign) else ():
            for e in t.elts if isinstance(t, ast.Tuple) else [t]:
                name = dotted(e)
                if isinstance(e, ast.Attribute) and name and name.startswith("self.") and name != target \
                        and not isinstance(st.value, ast.Constant) and not _reset_elsewhere(sem, e.attr) \
                        and not _reset_elsewhere(sem, e.attr, False):  # (a flag set True: ``_lazy_init``'s)
                    out.append(name)
    return out


def _lazy_init(sem, node: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``node`` runs only until a flag of the object turns True: under ``if not self.ready:`` whose body (or the method
    it calls there) sets ``self.ready = True``, a flag set False in ``__init__`` only."""
    def flag_of(test: ast.AST) -> str | None:
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Attribute) \
                and dotted(test.operand.value) == "self":
            return test.operand.attr
        return None

    def sets_true(scope: ast.AST, flag: str) -> bool:
        return any(isinstance(n, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == flag
                                                     and dotted(t.value) == "self" for t in n.targets)
                   and isinstance(n.value, ast.Constant) and n.value.value is True for n in sem.subtree(scope))

    def guarded(at: ast.AST, stop: ast.AST | None, sets: ast.AST | None) -> bool:
        child = at
        for a in sem.ancestors(at):
            if a is stop:
                return False
            if isinstance(a, ast.If) and any(child is b for b in a.body) and (flag := flag_of(a.test)) \
                    and sets_true(sets or a, flag) and not _reset_elsewhere(sem, flag, False):
                return True
            child = a
        return False

    func = sem.function_of(node)
    if func is None:
        return False
    if guarded(node, func, None):
        return True
    cls = sem.class_of(func)
    sites = [r for r in sem.self_reads(func.name) if sem.class_of(r) is cls] if cls is not None else []
    return bool(sites) and all(isinstance(call := sem.parent(r), ast.Call) and call.func is r
                               and guarded(call, sem.function_of(call), func) for r in sites)


def _reset_elsewhere(sem, attr: str, to: object = None) -> bool:  # type: ignore[no-untyped-def]
    """``self.<attr> = None`` (or ``to``: ``False`` for a flag) in a method other than ``__init__`` (or on another object
    of the file): the buffer is emptied again, the flag turned back off, between uses."""
    for node in sem.of_type(ast.Assign):
        for t in node.targets:  # type: ignore[attr-defined]
            if isinstance(t, ast.Attribute) and t.attr == attr and isinstance(v := node.value, ast.Constant) \
                    and v.value is to and getattr(sem.function_of(node), "name", "") != "__init__":  # type: ignore[attr-defined]
                return True
    return False


def _empty_test(test: ast.AST, target: str | None) -> bool:
    """``target is None``, ``not target``, ``not len(target)``, ``len(target) == 0``, ``target.numel() == 0`` (one of
    the operands of an ``and``/``or``): a test that holds until the body first fills ``target``."""
    if isinstance(test, ast.BoolOp):
        return any(_empty_test(v, target) for v in test.values)
    negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    if negated:
        test = test.operand  # type: ignore[attr-defined]
    if isinstance(test, ast.Call) and (isinstance(test.func, ast.Name) and test.func.id == "len" and test.args
                                       or isinstance(test.func, ast.Attribute) and test.func.attr == "numel"):
        subject = test.args[0] if isinstance(test.func, ast.Name) else test.func.value  # type: ignore[attr-defined]
        return negated and dotted(subject) == target
    if negated:
        return dotted(test) == target
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(c := test.comparators[0], ast.Constant):
        if isinstance(test.ops[0], (ast.Is, ast.Eq)) and c.value is None:
            return dotted(test.left) == target  # (``self.in_norm == None`` too: a tensor compared to None is False)
        if isinstance(test.ops[0], ast.Eq) and c.value == 0 and isinstance(left := test.left, ast.Call):
            return _empty_test(ast.UnaryOp(op=ast.Not(), operand=left), target)
    return False
