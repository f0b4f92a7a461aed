"""What the frames around a node say: the grad mode, ``step % N`` guards, rank guards, device choices,
``except`` handlers and branches that leave the loop."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator

from torchdoctor.check.astutil import call_argument, dotted, int_literal
from torchdoctor.check.patterns import lazy
from torchdoctor.check.semantic.bindings import Bindings
from torchdoctor.check.semantic.device_choice import DeviceChoices
from torchdoctor.check.semantic.grad import GradModes
from torchdoctor.check.semantic.names import Names
from torchdoctor.check.semantic.walk import CLASS, EXCEPT, FUNCTION, IF, LAMBDA, LOOP, WITH, Frame, Index

__all__ = ["Guards", "RANKISH"]

RANKISH = lazy(
    r"(?i)(rank|is_main|main_process|is_master|is_world_master|master_process|is_primary|is_global_zero|"
    r"is_world_process_zero|is_local_main|local_master|is_chief|gpu_id\s*==\s*0|process_index(\(\))?\s*==\s*0|\bis_root\b|is_root_worker|is_root_process|is_rank_zero)"
)
_DATA_NAME = lazy(r"(?i)loader|\bdl\b|_dl\b|batch|data|set\b|samples|examples")  # what a loop's passes run over
_COUNTER = lazy(r"(?i)^(i|j|k|n|ni|it|idx|step|steps|iter|iters|iteration|batch_?(idx|id|i|num|index)?|"
                      r".*_(step|iter|idx))$")
_DISTRIBUTED_FLAG = lazy(r"(?i)(^|\.)(distributed|is_distributed|use_distributed|ddp|use_ddp|enable_fsdp|fsdp|use_fsdp|"
                         r"multiprocessing_distributed)$")
_RANK_DECORATOR = lazy(r"rank_zero|main_process|master_only|main_only|rank0_only|on_rank_0|master_process")
_DISTRIBUTED_WRAPPERS = {"FSDP", "FullyShardedDataParallel", "DDP", "DistributedDataParallel"}
# (a CPU flag too: ``if not args.cpu:``, ``use_cpu``, ``cpu_only``; not ``os.cpu_count()``)
EXITS = ("sys.exit", "exit", "quit", "os._exit")  # calls that end the program
# Rank 0 runs the block first while the others wait, then they find its result (a cache) in place.
_FIRST_CONTEXT = lazy(r"(?i)(zero_first|main_process_first|local_main_process_first|rank_zero_first)")
_VERSION_TEST = lazy(r"(?i)(version|TORCH_\w*(GREATER|LESS|GE|LT|_\d)|torch_\d|is_torch_\w+|hasattr\(\s*torch)")
_RANK_CALLS = {"int", "str", "get_rank", "get_local_rank", "getenv", "get", "get_node_local_rank", "local_rank"}


_WORLD_SIZE = lazy(r"(?i)(world_size|num_processes)")




_OPTIMIZERISH = lazy(r"(?i)opt|scaler")
_RANKISH = lazy(r"(?i)(global_|local_|world_|node_|proc_|process_)?rank|gpu|local_gpu|process_index")  # (``rank % ngpus``)


_MOD_FUNCTIONS = frozenset({"numpy.remainder", "numpy.mod", "numpy.fmod", "math.fmod", "operator.mod"})


class Guards(GradModes, DeviceChoices):
    def __init__(self, index: Index, names: Names, bindings: Bindings, segment: Callable[[ast.AST], str],
                 call_sites: Callable[[ast.AST], list[ast.Call]]) -> None:
        self.index = index
        self.names = names
        self.bindings = bindings
        self.segment = segment
        self.call_sites = call_sites
        self._busy: set[ast.AST] = set()
        self._mode_memo: dict[ast.AST, str] = {}
        self._aliases: set[str] | None = None
        self._counted: set[str] | None = None
        self._refused: set[str] | None = None
        self._one_process: set[ast.AST] | None = None
        self._grad_toggles: list[ast.AST] | None = None
        self.star_flag: Callable[[str], bool] | None = None  # a name another module sets to True, star-imported here
        self.true_option: Callable[[str], bool] | None = None  # an option a module importing this one makes always True

    def frame(self, node: ast.AST) -> Frame | None:
        return self.index.frame.get(node)

    # ---- step guards -----------------------------------------------------------------------------------
    def _test_memo(self, test: ast.AST, key: str, compute: Callable[[], bool]) -> bool:
        frame = self.index.frame[test]  # the frame the test sits in; memo per test node
        memo = frame.memo if frame.memo is not None else {}
        frame.memo = memo
        slot = (key, test)
        if slot not in memo:
            memo[slot] = compute()
        return memo[slot]

    def _has_mod(self, test: ast.AST) -> bool:
        """The test uses ``%``, itself or through a flag it reads (``g_regularize = i % 16 == 0``, then
        ``if g_regularize:``)."""
        return self._test_memo(test, "mod", lambda: self._mod_through(test, test, 0))

    def _mod_in(self, expr: ast.AST) -> bool:
        return self._mod_op(expr) or any(isinstance(n, ast.Call) and self._returns_mod(n) for n in self.index.subtree(expr))

    def _mod_through(self, expr: ast.AST, at: ast.AST, depth: int) -> bool:
        if self._mod_in(expr):
            return True
        for n in self.index.subtree(expr):
            if isinstance(n, ast.Name):
                b = self.bindings.at(n.id, at)
                if b is not None and b.value is not None and not b.is_param and b.node is not at \
                        and (self._mod_in(b.value) or depth < 2 and isinstance(b.value, (ast.BoolOp, ast.Compare, ast.Name))
                             and self._mod_through(b.value, b.node, depth + 1)):
                    return True  # (``print_step = print_step or early_print_step``: flags of flags)
                if b is not None and b.is_param and self._flag_of_callers(b.node, n.id, self._mod_in):
                    return True
        return False

    def _flag_of_callers(self, func: ast.AST, param: str, mod_in: Callable[[ast.AST], bool]) -> bool:
        """``if do_eval:`` on a parameter that every call of the function in this file passes a step test
        (``do_eval = i % every == 0``, then ``step(model, x, y, do_eval)``): the caller's guard, handed down."""
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
        sites = self.call_sites(func)
        if not sites:
            return False
        for site in sites:
            arg = call_argument(site, func, param)
            if arg is None:
                return False
            if isinstance(arg, ast.Name):
                if not self._set_on_guarded_steps(arg.id, site, mod_in):
                    return False
            elif not mod_in(arg):
                return False
        return True

    def _set_on_guarded_steps(self, name: str, site: ast.AST, mod_in: Callable[[ast.AST], bool]) -> bool:
        """Every binding of the flag ``name`` in the function of ``site`` is a step test (``do_eval = i % n == 0``),
        False, or True under an ``if`` that tests ``%`` (``do_eval = False``, then ``if step % every == 0: do_eval =
        True``)."""
        last = self.bindings.at(name, site)
        found = [b for b in self.bindings.by_key.get(name, []) if last is not None and b.scope is last.scope]
        if not found or any(b.is_param or b.value is None for b in found):
            return False
        guarded = False
        for b in found:
            value = b.value
            if isinstance(value, ast.Constant) and value.value in (False, None, 0):
                continue
            if isinstance(value, ast.Constant) and value.value is True:
                if not any(isinstance(up, ast.If) and mod_in(up.test) for up in self.index.ancestors(b.node)):
                    return False
            elif not mod_in(value):
                return False
            guarded = True
        return guarded

    def _returns_mod(self, call: ast.Call) -> bool:
        """``self.should_log_this_step()`` whose function of this file returns ``self.global_step % interval == 0``, or a
        name bound to it (``test = state.step % freq == 0; ...; return test``)."""
        func = call.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if name is None:
            return False
        defs = [f for f in self.index.by_type.get(ast.FunctionDef, ()) if f.name == name]  # type: ignore[attr-defined]
        return bool(defs) and all(any(isinstance(r, ast.Return) and r.value is not None and (
            self._mod_op(r.value) or isinstance(r.value, ast.Name) and self._bound_to_mod(f, r.value.id))
            for r in self.index.subtree(f)) for f in defs)

    def _bound_to_mod(self, func: ast.AST, name: str) -> bool:
        """``func`` binds ``name`` to a ``%`` test first (``test = step % freq == 0``, then ``test = test and ...``)."""
        assigns = [a for a in self.index.subtree(func) if isinstance(a, ast.Assign)
                   and any(isinstance(t, ast.Name) and t.id == name for t in a.targets)]
        return bool(assigns) and self._mod_op(assigns[0].value)

    def _mod_op(self, expr: ast.AST) -> bool:
        """``expr`` computes a ``%`` (``step % log_every == 0``)."""
        return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) and not isinstance(n.left, ast.JoinedStr)
                   and not (isinstance(n.left, ast.Constant) and isinstance(n.left.value, str))
                   and not _RANKISH.fullmatch((dotted(n.left) or "").rsplit(".", 1)[-1])
                   or isinstance(n, ast.Call) and len(n.args) == 2 and self.names.call_name(n) in _MOD_FUNCTIONS
                   and not _RANKISH.fullmatch((dotted(n.args[0]) or "").rsplit(".", 1)[-1])
                   for n in self.index.subtree(expr))  # (not ``"%s" % name``: a string formatted; not ``args.rank %
        # ngpus_per_node == 0``, the first process of each node: a rank test, on every step of that process;
        # ``np.remainder(num_iter, 10) == 0``: NumPy's spelling of ``%``)

    def _one_off(self, test: ast.AST) -> bool:
        """``i == 0`` / ``batch_idx == len(loader) - 1`` / ``step < 3``: a counter tested against a fixed value."""
        def compute() -> bool:
            for n in self.index.subtree(test):
                if not isinstance(n, ast.Compare) or len(n.ops) != 1 or not isinstance(n.ops[0], (ast.Eq, ast.Lt, ast.LtE)):
                    continue
                sides = [n.left, n.comparators[0]]
                names = [s.id if isinstance(s, ast.Name) else s.attr if isinstance(s, ast.Attribute) else "" for s in sides]
                fixed = [isinstance(s, ast.Constant) or (isinstance(s, ast.BinOp) and "len(" in self.segment(s)) for s in sides]
                if any(_COUNTER.match(name) or name in self.counters() for name in names if name) and any(fixed):
                    return True
            return False

        return self._test_memo(test, "one_off", compute)

    def _own_counter_fixed(self, test: ast.AST, loop: ast.AST | None) -> bool:
        """``if epoch == 0:`` in ``for epoch in range(201):``: the test fixes the counter of ``loop`` itself,
        whatever it is called, so what it holds runs on one pass."""
        if not isinstance(loop, (ast.For, ast.AsyncFor)) or not isinstance(it := loop.iter, ast.Call):
            return False
        target = loop.target
        if dotted(it.func) == "enumerate" and isinstance(target, ast.Tuple) and target.elts:
            target = target.elts[0]  # ``for i, batch in enumerate(loader)``: the index, not the batch
        elif dotted(it.func) != "range":
            return False
        own = {target.id} if isinstance(target, ast.Name) else set()
        iterated = dotted(it.args[0]) if dotted(it.func) == "enumerate" and it.args else None
        return any(isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.ops[0], ast.Eq)
                   and any(isinstance(s, ast.Name) and s.id in own for s in (n.left, n.comparators[0]))
                   and any(isinstance(s, ast.Constant) or self._fixed_in(s, loop, own) for s in (n.left, n.comparators[0]))
                   or self._first_passes(n, own, iterated) for n in self.index.subtree(test))

    def _fixed_in(self, expr: ast.AST, loop: ast.AST, own: set[str]) -> bool:
        """``sample_idx`` of ``if i == sample_idx:``, drawn before the loop (``sample_idx = randint(len(loader))``):
        a name or attribute the loop never rebinds, so the counter equals it on one pass."""
        name = dotted(expr) if isinstance(expr, (ast.Name, ast.Attribute)) else None
        if name is None or name in own:
            return False
        return not any(isinstance(n, (ast.Name, ast.Attribute)) and isinstance(n.ctx, ast.Store) and dotted(n) == name
                       for n in self.index.subtree(loop))

    @staticmethod
    def _first_passes(n: ast.AST, own: set[str], iterated: str | None) -> bool:
        """``if i < len(writers):`` on the loop's own counter: the first passes, one for each of a few things kept
        beside the loop (a writer per image shown), not every pass (the loader itself is not one of them)."""
        if not (isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.ops[0], ast.Lt | ast.LtE)
                and isinstance(n.left, ast.Name) and n.left.id in own):
            return False
        bound = n.comparators[0]
        if isinstance(bound, ast.Constant):
            return type(bound.value) is int and bound.value <= 16
        return isinstance(bound, ast.Call) and dotted(bound.func) == "len" and len(bound.args) == 1 \
            and (name := dotted(bound.args[0])) is not None and name != iterated and not _DATA_NAME.search(name)

    def _chosen_steps(self, test: ast.AST) -> bool:
        """``if step in np.linspace(0, total, 10, dtype=int):``, ``if i in report_at:``: a counter tested for
        membership in a set of chosen steps."""
        def compute() -> bool:
            return any(isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.ops[0], ast.In)
                       and isinstance(n.left, ast.Name) and (_COUNTER.match(n.left.id) or n.left.id in self.counters())
                       for n in self.index.subtree(test))

        return self._test_memo(test, "chosen", compute)

    def _throttle(self, if_node: ast.AST) -> bool:
        """``if now - last_log > log_every_s: ...; last_log = now``: a clock throttle whose body moves its own mark,
        so it runs once an interval, not once a step (vicreg's ``current_time - last_logging > args.log_freq_time``)."""
        def compute() -> bool:
            marks = {side.right.id for n in self.index.subtree(if_node.test)  # type: ignore[attr-defined]
                     if isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.ops[0], (ast.Gt, ast.GtE, ast.Lt, ast.LtE))
                     for side in (n.left, n.comparators[0])
                     if isinstance(side, ast.BinOp) and isinstance(side.op, ast.Sub) and isinstance(side.right, ast.Name)}
            return bool(marks) and any(isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id in marks for t in n.targets)
                                       for stmt in if_node.body for n in self.index.subtree(stmt))  # type: ignore[attr-defined]

        return self._test_memo(if_node.test, "throttle", compute)  # type: ignore[attr-defined]

    def _sampled(self, test: ast.AST) -> bool:
        """``if np.random.rand() < 0.1:`` (``random.random() < p``): a random draw against a probability below 1 runs
        the body on that share of the steps, like ``step % 10 == 0``."""
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Lt, ast.LtE))
                and isinstance(test.left, ast.Call)):
            return False
        q = self.names.call_name(test.left) or ""
        bound = test.comparators[0]
        return q in ("numpy.random.rand", "numpy.random.random", "random.random", "numpy.random.uniform") \
            and isinstance(bound, ast.Constant) and isinstance(bound.value, (int, float)) and 0 < bound.value < 1

    def _restarted_counter(self, if_node: ast.AST) -> bool:
        """``if seen >= eval_every: ...; seen = 0``: a threshold on a counter whose body restarts it runs once an
        interval, like a ``%`` test (a threshold that never restarts holds on every step from then on)."""
        def compute() -> bool:
            if not isinstance(if_node, ast.If):
                return False  # (``a if step >= n else b``: one expression, nothing restarted)
            counted = {side.id for n in self.index.subtree(if_node.test)  # type: ignore[attr-defined]
                       if isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.ops[0], (ast.Gt, ast.GtE))
                       for side in (n.left,) if isinstance(side, ast.Name)}
            return bool(counted) and any(
                isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and n.value.value == 0
                and any(isinstance(t, ast.Name) and t.id in counted for t in n.targets)
                or isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Sub) and isinstance(n.target, ast.Name)
                and n.target.id in counted
                for stmt in if_node.body for n in self.index.subtree(stmt))  # type: ignore[attr-defined]

        return self._test_memo(if_node.test, "restarted", compute)  # type: ignore[attr-defined]

    def counters(self) -> set[str]:
        """Names counted up by a constant (``num_total += 1``): counters, whatever they are called."""
        if self._counted is None:
            self._counted = {n.target.id for n in self.index.by_type.get(ast.AugAssign, ())  # type: ignore[attr-defined]
                             if isinstance(n.op, ast.Add) and isinstance(n.target, ast.Name)  # type: ignore[attr-defined]
                             and isinstance(n.value, ast.Constant) and type(n.value.value) is int}  # type: ignore[attr-defined]
        return self._counted

    def under_step_guard(self, node: ast.AST, loop: ast.AST | None = None) -> bool:
        """Inside an ``if`` whose test uses ``%`` (``step % log_every == 0``), in either branch, or in the
        body of one that runs on one step only (``if i == 0:``); up to the enclosing function, or, with
        ``loop``, up to that loop: a guard outside the batch loop (``if iterations % dev_every == 0:``
        around a whole validation pass), or one that tests the counter of an outer loop (``if fold == 0``),
        does not thin out the loop's steps."""
        frame = self.index.frame.get(node)
        while frame is not None and frame.kind not in (FUNCTION, LAMBDA, CLASS):
            if loop is not None and frame.kind == LOOP and frame.node is loop:
                return False
            if frame.kind == IF:
                test = frame.node.test  # type: ignore[attr-defined]
                if (self._has_mod(test) or (frame.branch == "body" and (self._one_off(test) or self._throttle(frame.node) or self._restarted_counter(frame.node)
                                                                         or self._first_fill(frame.node)
                                                                         or self._sampled(test)
                                                                         or self._chosen_steps(test)
                                                                         or self._own_counter_fixed(test, loop)
                                                                         or self._flag_of_guarded_steps(test, loop)))) and \
                        not (loop is not None and self._tests_outer_counter(test, loop)) and \
                        not self._accumulation_boundary(frame.node):
                    return True
            frame = frame.parent
        return False

    def _first_fill(self, if_node: ast.AST) -> bool:
        """``if name not in self.losses: self.losses[name] = losses[name].item()``: the body fills the key it tests,
        so it runs on a key's first pass only."""
        test = if_node.test  # type: ignore[attr-defined]
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.NotIn)):
            return False
        store, key = dotted(test.comparators[0]), self.segment(test.left)
        return bool(store) and any(isinstance(s, ast.Assign) and any(
            isinstance(t, ast.Subscript) and dotted(t.value) == store and self.segment(t.slice) == key for t in s.targets)
            for s in if_node.body)  # type: ignore[attr-defined]

    def _flag_of_guarded_steps(self, test: ast.AST, loop: ast.AST | None) -> bool:
        """``if plot:`` of a flag the function sets ``False`` and turns ``True`` only behind a step guard (``plot = False;
        if epoch % plot_freq == 0 and i == 0: plot = True``): its body runs on those steps only."""
        if not isinstance(test, ast.Name):
            return False
        scope = self.index.frame[test].scope
        bound = [b for b in self.bindings.by_key.get(test.id, []) if b.scope is scope]
        on = [b for b in bound if isinstance(b.value, ast.Constant) and b.value.value is True]
        return bool(on) and all(isinstance(b.value, ast.Constant) and b.value.value in (True, False) for b in bound) \
            and all(self.under_step_guard(b.node, loop) for b in on)

    def _accumulation_boundary(self, if_node: ast.AST) -> bool:
        """``if (idx + 1) % grad_accum == 0: optimizer.step()``: the test picks the micro-batch that ends a
        gradient accumulation, so what its body does runs at every optimizer step (every batch with the default
        of 1), unlike a logging guard's ``step % log_every == 0``. So does a DQN's ``if t > warmup and t % train_freq
        == 0: loss = update(batch)`` around a function of the file that steps the optimizer: every update's."""
        def is_step(n: ast.AST) -> bool:
            return isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "step" \
                and bool(_OPTIMIZERISH.search((dotted(n.func.value) or "").rsplit(".", 1)[-1]))

        def steps(nodes: list[ast.AST]) -> list[ast.AST]:
            out = []
            for stmt in nodes:
                for n in self.index.subtree(stmt):
                    if is_step(n):
                        out.append(n)
                    elif isinstance(n, ast.Call) and (func := self._own_function(n)) is not None:
                        out += [m for m in self.index.subtree(func) if is_step(m)]  # (a DQN's ``update(batch)``)
            return out

        def compute() -> bool:
            body = if_node.body  # type: ignore[attr-defined]
            inside = steps(body if isinstance(body, list) else [body])  # (``a if step % n == 0 else b``: one expression)
            if not inside:
                return False
            frame = self.index.frame.get(if_node)
            while frame is not None and frame.kind != LOOP:
                if frame.kind in (FUNCTION, LAMBDA, CLASS):
                    return True
                frame = frame.parent
            # every optimizer step of the loop is in here; a GAN's ``if i % n_critic == 0:`` around the generator's
            # step, next to the critic's step at every batch, is a periodic extra and still thins what it holds
            return frame is None or len(steps(frame.node.body)) == len(inside)  # type: ignore[attr-defined]

        return self._test_memo(if_node.test, "accumulation", compute)  # type: ignore[attr-defined]

    def _own_function(self, call: ast.Call) -> ast.AST | None:
        """The function of this file a call runs, by its name (``update(batch)``) or as a method of the class it
        sits in (``self._update_network(samples)``), when there is one such function."""
        if isinstance(call.func, ast.Name):
            defs = self.bindings.functions.get(call.func.id, ())
            return defs[0] if len(defs) == 1 else None
        if isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name) and call.func.value.id == "self":
            cls = self.index.frame[call].cls
            return next((f for f in getattr(cls, "body", ()) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                         and f.name == call.func.attr), None)
        return None

    def _tests_outer_counter(self, test: ast.AST, loop: ast.AST) -> bool:
        """Every counter the test reads is bound by a loop around ``loop`` (an outer loop's index)."""
        names = [n.id for n in self.index.subtree(test) if isinstance(n, ast.Name) and _COUNTER.match(n.id)]
        if not names:
            return False
        for name in names:
            b = self.bindings.at(name, test)
            owner = self.index.parent.get(b.node) if b is not None and b.value is None else None
            if not (isinstance(owner, (ast.For, ast.AsyncFor)) and owner is not loop and self.index.contains(owner, loop)):
                return False
        return True

    # ---- rank guards ---------------------------------------------------------------------------------------
    def rank_aliases(self) -> set[str]:
        """Names holding a rank under another name: ``self.gpu_id = int(os.environ["LOCAL_RANK"])``, or the
        first parameter of a function started by ``mp.spawn`` (its process index)."""
        if self._aliases is None:
            out: set[str] = set()
            for n in self.index.by_type.get(ast.Assign, ()):
                if self.is_rank_value(n.value) or self._rank_flag(n.value):  # type: ignore[attr-defined]
                    out.update(d for t in n.targets if (d := dotted(t)))  # type: ignore[attr-defined]
            for n in self.index.by_type.get(ast.Call, ()):
                if (self.names.call_name(n) or "").endswith("multiprocessing.spawn") and n.args:  # type: ignore[attr-defined]
                    for f in self.bindings.functions.get(dotted(n.args[0]) or "", []):  # type: ignore[attr-defined]
                        params = f.args.posonlyargs + f.args.args  # type: ignore[attr-defined]
                        if params:
                            out.add(params[0].arg)
            self._aliases = out
        return self._aliases

    def _rank_flag(self, value: ast.AST) -> bool:
        """A bool that holds a rank test: ``args.save_logs = args.logs and is_master(args)``,
        ``is_main = dist.get_rank() == 0``, ``master = is_main_process()``, ``self.can_save = self.is_main``."""
        if isinstance(value, ast.BoolOp) and isinstance(value.op, ast.And):
            return any(self._rank_flag(v) for v in value.values)
        if isinstance(value, ast.BoolOp) and isinstance(value.op, ast.Or):  # ``(not args.distributed) or rank == 0``
            return any(self._rank_flag(v) for v in value.values) and all(
                self._rank_flag(v) or _single_process_test(self.segment(v), v) for v in value.values)
        if isinstance(value, ast.IfExp):  # ``self.is_local_main if local_fs else self.is_main``
            return self._rank_flag(value.body) and self._rank_flag(value.orelse)
        if isinstance(value, (ast.Name, ast.Attribute)):
            return bool(RANKISH.search(dotted(value) or ""))
        if isinstance(value, ast.Compare):
            return bool(RANKISH.search(self.segment(value)))
        if isinstance(value, ast.Call):  # ``is_master(args)``; not ``DDP(model, device_ids=[rank])``
            return bool(RANKISH.search(dotted(value.func) or ""))
        return False

    def is_rank_value(self, value: ast.AST) -> bool:
        """``value`` is a rank itself (``int(os.environ["LOCAL_RANK"])``, ``dist.get_rank()``, ``args.local_rank``),
        not merely an expression that mentions one (``DDP(model, device_ids=[rank])`` is a model)."""
        if isinstance(value, ast.IfExp):
            return self.is_rank_value(value.body) or self.is_rank_value(value.orelse)
        if isinstance(value, ast.BinOp):
            return self.is_rank_value(value.left) or self.is_rank_value(value.right)
        if isinstance(value, ast.Call):
            last = (dotted(value.func) or "").rsplit(".", 1)[-1]
            if last not in _RANK_CALLS and "rank" not in last.lower():
                return False
        elif not isinstance(value, (ast.Name, ast.Attribute, ast.Subscript)):
            return False
        return bool(re.search(r"(?i)rank", self.segment(value)))

    def rank_test(self, test: ast.AST) -> bool:
        def compute() -> bool:
            if RANKISH.search(self.segment(test)):
                return True
            aliases = self.rank_aliases()
            return bool(aliases) and any(dotted(n) in aliases for n in self.index.subtree(test)
                                         if isinstance(n, (ast.Name, ast.Attribute)))

        return self._test_memo(test, "rank", compute)

    def under_rank_guard(self, node: ast.AST) -> bool:
        """Inside a rank test, after an early ``if rank != 0: return``, or in a ``@rank_zero_only`` function."""
        frame = self.index.frame.get(node)
        while frame is not None:
            if frame.kind == IF and self.rank_test(frame.node.test):  # type: ignore[attr-defined]
                return True
            if frame.kind == IF and self._one_process_branch(frame.node.test, frame.branch):  # type: ignore[attr-defined]
                return True
            if frame.kind == WITH and any(_FIRST_CONTEXT.search(self.segment(i.context_expr))
                                          for i in frame.node.items):  # type: ignore[attr-defined]
                return True  # ``with torch_distributed_zero_first(rank):`` / ``main_process_first()``
            if frame.kind == LOOP and isinstance(frame.node, ast.While) and self.rank_test(frame.node.test):
                return True
            if frame.kind == FUNCTION and self._rank_zero_function(frame.node, node):
                return True
            frame = frame.parent
        return self._asserted_one_process(node) or self.index.frame[node].function is None \
            and self._early_exit_on_rank(None, node)  # (a script's ``if local_rank > 0: continue``)

    def only_on_rank_zero(self, node: ast.AST) -> bool:
        """Stricter than ``under_rank_guard``: only the main process gets here, so what is made here exists on no
        other rank. The branch of a rank test that holds rank 0 (``if rank == 0:``, ``x if is_main else None``, the
        ``else`` of ``if rank != 0:``), a one-process branch, after ``if rank != 0: return``, in a ``@rank_zero_only``
        function; not a ``with zero_first(rank):`` block (every rank runs it, rank 0 first), nor the other branch."""
        frame = self.index.frame.get(node)
        while frame is not None:
            if frame.kind == IF and self.rank_test(frame.node.test):  # type: ignore[attr-defined]
                if self._rank_zero_branch(frame.node.test) == frame.branch:  # type: ignore[attr-defined]
                    return True
            elif frame.kind == IF and self._one_process_branch(frame.node.test, frame.branch):  # type: ignore[attr-defined]
                return True
            if frame.kind == FUNCTION and self._rank_zero_function(frame.node, node):
                return True
            frame = frame.parent
        return self._asserted_one_process(node) or self.index.frame[node].function is None \
            and self._early_exit_on_rank(None, node)  # (a script's ``if local_rank > 0: continue``)

    def _asserted_one_process(self, node: ast.AST) -> bool:
        """An earlier ``assert opt.local_rank == -1`` (``assert not args.distributed``, ``assert world_size == 1``,
        ``assert is_main_process()``) in a block around ``node``: a process of a distributed run stops there, so
        only a single process (or rank 0) gets past it."""
        if self._one_process is None:
            self._one_process = {a for a in self.index.by_type.get(ast.Assert, ())
                                 if self._one_process_test(a.test)}  # type: ignore[attr-defined]
        return bool(self._one_process) and any(s in self._one_process for s in self.index.earlier_statements(node))

    def _one_process_test(self, test: ast.AST) -> bool:
        """``test`` holds only on rank 0 or in a single process: ``rank == -1``, ``local_rank in (-1, 0)``,
        ``rank <= 0``, ``world_size == 1``, ``not args.distributed``, ``is_main_process()``; not a test that a
        distributed run passes too (``local_rank < torch.cuda.device_count()``, ``rank >= 0``)."""
        if isinstance(test, ast.BoolOp):  # ``rank == -1 and ...``; ``not args.distributed or world_size == 1``
            holds = [self._one_process_test(v) for v in test.values]
            return any(holds) if isinstance(test.op, ast.And) else all(holds)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = test.operand
            if isinstance(inner, ast.Call) and (dotted(inner.func) or "").endswith("is_initialized"):
                return True  # ``assert not dist.is_initialized()``
            return bool(_DISTRIBUTED_FLAG.search(dotted(inner) or ""))
        if isinstance(test, (ast.Name, ast.Attribute, ast.Call)):  # ``is_main_process()``, not ``args.local_rank``
            last = (dotted(test.func if isinstance(test, ast.Call) else test) or "").rsplit(".", 1)[-1]
            return bool(RANKISH.search(last)) and not last.lower().endswith("rank")
        if not isinstance(test, ast.Compare) or len(test.ops) != 1:
            return False
        op, left, right = test.ops[0], test.left, test.comparators[0]
        if int_literal(left) is not None:  # ``-1 == opt.local_rank``, ``1 >= world_size``
            left, right = right, left
            op = {ast.Lt: ast.Gt(), ast.LtE: ast.GtE(), ast.Gt: ast.Lt(), ast.GtE: ast.LtE()}.get(type(op), op)
        values = [int_literal(e) for e in right.elts] if isinstance(right, (ast.Tuple, ast.List, ast.Set)) else [int_literal(right)]
        if not values or None in values:
            return False
        sized = bool(_WORLD_SIZE.search(self.segment(left)))
        if not sized and not self.is_rank_value(left) and not RANKISH.search(dotted(left) or ""):
            return False
        top = 1 if sized else 0  # a world of one process; rank 0 (or -1, no process group)
        if isinstance(op, (ast.Eq, ast.In)):
            return all(-1 <= v <= top for v in values)  # type: ignore[operator]
        if isinstance(op, ast.LtE):
            return values[0] <= top  # type: ignore[operator]
        if isinstance(op, ast.Lt):
            return values[0] <= top + 1  # type: ignore[operator]
        return False

    def _rank_zero_function(self, func: ast.AST, node: ast.AST) -> bool:
        """``node`` runs on rank 0 only for ``func``'s sake: a ``@rank_zero_only`` decorator, or an early
        ``if rank != 0: return`` before it."""
        return any(_RANK_DECORATOR.search(self.segment(d)) for d in func.decorator_list) \
            or self._early_exit_on_rank(func, node)  # type: ignore[attr-defined]

    def _rank_zero_branch(self, test: ast.AST) -> str | None:
        """The branch of a rank test that rank 0 takes: "body" for ``rank == 0``, ``RANK in {-1, 0}``,
        ``is_main_process()``; "else" for ``rank != 0``, ``not is_master``; None when the test does not say."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self._rank_zero_branch(test.operand)
            return None if inner is None else "else" if inner == "body" else "body"
        if isinstance(test, ast.BoolOp):
            sides = {self._rank_zero_branch(v) for v in test.values if self.rank_test(v)}
            return "body" if isinstance(test.op, ast.And) and sides == {"body"} else None
        if isinstance(test, ast.Compare):
            if len(test.ops) != 1:
                return None
            op = test.ops[0]
            if isinstance(op, (ast.Eq, ast.In, ast.LtE, ast.Lt)):
                return "body"
            return "else" if isinstance(op, (ast.NotEq, ast.NotIn, ast.Gt, ast.GtE)) else None
        return "body" if isinstance(test, (ast.Name, ast.Attribute, ast.Call)) else None

    def _one_process_branch(self, test: ast.AST, branch: str | None) -> bool:
        """The branch a distributed-mode flag leaves to a single process: ``if not train_config.enable_fsdp:``,
        the ``else`` of ``if args.distributed:``; or the branch where a mode the process-group setup refuses is
        on (``if opt.evolve:``, the ``else`` of ``if not opt.evolve:``, see ``refused_flags``)."""
        negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
        inner = test.operand if negated else test  # type: ignore[attr-defined]
        if isinstance(inner, ast.Call) and dotted(inner.func) == "isinstance" and len(inner.args) == 2:
            wrappers = inner.args[1].elts if isinstance(inner.args[1], ast.Tuple) else [inner.args[1]]
            if all((dotted(w) or "").rsplit(".", 1)[-1] in _DISTRIBUTED_WRAPPERS for w in wrappers):
                return branch == ("body" if negated else "else")  # ``if isinstance(model, FSDP): ... else:``
            return False
        name = dotted(inner) or ""
        if name and name in self.refused_flags():
            return branch == ("else" if negated else "body")
        return bool(_DISTRIBUTED_FLAG.search(name)) and branch == ("body" if negated else "else")

    def refused_flags(self) -> set[str]:
        """Flags that the code starting the process group asserts off (``assert not opt.evolve`` in the block
        that calls ``init_process_group``): where one is on, the program runs as a single process."""
        if self._refused is None:
            out: set[str] = set()
            asserts = self.index.by_type.get(ast.Assert, ())
            if asserts:
                frame = self.index.frame
                inits = {(f.node, f.branch) for c in self.index.by_type.get(ast.Call, ())
                         if isinstance(c.func, (ast.Name, ast.Attribute))  # type: ignore[attr-defined]
                         and (c.func.id if isinstance(c.func, ast.Name) else c.func.attr) == "init_process_group"  # type: ignore[attr-defined]
                         and (f := frame[c]) is not None}
                for a in asserts:
                    test = a.test  # type: ignore[attr-defined]
                    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and (name := dotted(test.operand)) \
                            and (frame[a].node, frame[a].branch) in inits:
                        out.add(name)
            self._refused = out
        return self._refused

    def _early_exit_on_rank(self, func: ast.AST | None, node: ast.AST) -> bool:
        """An ``if not is_root: return`` before ``node`` in its function's body or in a block around it (``if
        local_rank > 0: continue`` in a script's epoch loop)."""
        return any(isinstance(stmt, ast.If) and self.rank_test(stmt.test) and bool(stmt.body)
                   and isinstance(stmt.body[-1], (ast.Return, ast.Continue, ast.Raise))
                   for stmt in self.index.earlier_statements(node, func))

    # ---- compatibility branches ------------------------------------------------------------------------------------
    def in_compat_branch(self, node: ast.AST) -> bool:
        """In code that exists for an older torch: a branch of a version test (``if TORCH_VERSION < (2, 4):``,
        ``is_torch_version("<", "2.6")``, ``hasattr(torch, "amp")``) or an ``except ImportError/AttributeError/
        TypeError`` fallback (``try: torch.load(f, weights_only=True) except TypeError: torch.load(f)``)."""
        frame = self.index.frame.get(node)
        while frame is not None:
            if frame.kind == IF and self._version_test(frame.node.test):  # type: ignore[attr-defined]
                return True
            if frame.kind == EXCEPT and self._fallback_handler(frame.node):
                return True
            frame = frame.parent
        return False

    def _version_test(self, test: ast.AST) -> bool:
        return self._test_memo(test, "version", lambda: bool(_VERSION_TEST.search(self.segment(test))))

    def _fallback_handler(self, handler: ast.AST) -> bool:
        caught = self.segment(getattr(handler, "type", None)) if getattr(handler, "type", None) is not None else ""
        return bool(re.search(r"ImportError|ModuleNotFoundError|AttributeError|TypeError", caught))

    # ---- device choice, handlers, exits -------------------------------------------------------------------------
    def branch_tests(self, node: ast.AST) -> Iterator[tuple[ast.AST, bool]]:
        """The tests of the ``if`` blocks (and ``a if test else b``) around ``node`` in its function, innermost first, a
        ``not`` taken off each,
        with whether ``node`` runs where that test is true (``if not flag:`` body, or ``else`` of ``if flag:``: no)."""
        child = node
        for parent in self.index.ancestors(node):
            if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                return
            if isinstance(parent, (ast.If, ast.IfExp)) and child is not parent.test:
                test, negated = parent.test, False
                if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                    test, negated = test.operand, True
                in_body = any(child is s for s in parent.body) if isinstance(parent, ast.If) else child is parent.body
                yield test, in_body != negated
            child = parent

    def in_handler(self, node: ast.AST, stop: ast.AST) -> bool:
        """Inside an ``except`` block below the frame of ``stop`` (OOM recovery runs rarely, not every step)."""
        frame = self.index.frame.get(node)
        while frame is not None and frame.node is not stop:
            if frame.kind == EXCEPT:
                return True
            frame = frame.parent
        return False

    def in_exit_branch(self, node: ast.AST, stop: ast.AST) -> bool:
        """In an ``if`` branch below ``stop`` that leaves the loop (``if not isfinite(loss.item()): sys.exit(1)``):
        it runs at most once, not every step."""
        frame = self.index.frame.get(node)
        while frame is not None and frame.node is not stop:
            if frame.kind == IF and isinstance(frame.node, ast.If):
                block = frame.node.body if frame.branch == "body" else frame.node.orelse
                if block and (self._leaves(block[-1]) or self._skips_on_error(block)):
                    return True
            frame = frame.parent
        return False

    def _skips_on_error(self, block: list[ast.stmt]) -> bool:
        """``logger.error(f"... {ids}"); continue``: a branch that reports bad data and skips the step (a batch with
        empty targets), not the path every step takes."""
        return isinstance(block[-1], ast.Continue) and any(
            isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and isinstance(st.value.func, ast.Attribute)
            and st.value.func.attr in ("error", "warning", "warn", "exception", "critical") for st in block[:-1])

    def _leaves(self, stmt: ast.stmt) -> bool:
        if isinstance(stmt, (ast.Raise, ast.Return, ast.Break)):
            return True
        return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and \
            (self.names.call_name(stmt.value) or dotted(stmt.value.func) or "") in EXITS

    def never_together(self, a: ast.AST, b: ast.AST) -> bool:
        """``a`` and ``b`` sit on opposite sides of one test, or of two tests of the same text (``if use_torch:
        acts = torch.empty(n)`` / ``else: acts = np.empty(n)``, later ``if use_torch: acts[i] = out``): a run takes
        one or the other (the flag is a setting, not rebound between them)."""
        if self.in_other_branch(a, b):
            return True
        sides = {self.segment(t): holds for t, holds in self.branch_tests(a)}
        return any(sides.get(self.segment(t), holds) != holds for t, holds in self.branch_tests(b))

    def in_other_branch(self, a: ast.AST, b: ast.AST) -> bool:
        """``a`` and ``b`` sit in the two exclusive branches of one ``if`` (AMP on / AMP off)."""
        fa = self.index.frame.get(a)
        branches = {}
        while fa is not None:
            if fa.kind == IF:
                branches[fa.node] = fa.branch
            fa = fa.parent
        fb = self.index.frame.get(b)
        while fb is not None:
            if fb.kind == IF and fb.node in branches and branches[fb.node] != fb.branch:
                return True
            fb = fb.parent
        return False


_NOT_DISTRIBUTED = lazy(r"(?i)distributed|\bddp\b|is_initialized|multiprocessing_distributed")
_ONE_PROCESS = lazy(r"(?i)(world_size|n_?gpus|num_gpus|n_procs|nprocs)\W*(==|<=)\s*1\b")


def _single_process_test(text: str, node: ast.AST) -> bool:
    """``not args.distributed``, ``not dist.is_initialized()``, ``world_size == 1``: true only when there is one
    process, so ``... or rank == 0`` still lets one process through."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return bool(_NOT_DISTRIBUTED.search(text))
    return isinstance(node, ast.Compare) and bool(_ONE_PROCESS.search(text))
