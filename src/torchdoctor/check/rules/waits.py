"""The TD603 reads that ``steps.py`` leaves alone because they must happen or wait for nothing new: a flag the ranks
broadcast to stop together, an action a host environment needs to step, and a read after the step's own timing
``torch.cuda.synchronize()`` (``kept.py`` has the copies kept on the host)."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from torchdoctor.check.astutil import dotted, method_name, strip_views
from torchdoctor.check.patterns import lazy
from torchdoctor.check.rules.kept import bound_name, collected_on_host, reads_after
from torchdoctor.check.semantic.kinds import unwrap_iter

if TYPE_CHECKING:
    from torchdoctor.check.context import Context


_SIGNALS = frozenset({"broadcast", "all_reduce", "reduce"})


def stop_signal(ctx: Context, node: ast.Call, loop: ast.AST) -> bool:
    """``dist.broadcast(signal, src=0)`` then ``if signal.item() == 0: break``: a flag the ranks share to stop
    together (one rank ran out of data). The loop cannot go on without reading it."""
    sem = ctx.semantic
    recv = node.func.value  # type: ignore[attr-defined]
    if not isinstance(recv, ast.Name):
        return False
    test = sem.statement_of(node)
    if isinstance(test, ast.Assign) and len(test.targets) == 1 and isinstance(flag := test.targets[0], ast.Name) \
            and node in sem.subtree(test.value):
        # ``last_step = bool(flag.item())``, then ``if last_step: break``: the flag read once, tested just after
        after = (test.lineno, test.col_offset)
        test = next((s for s in sem.subtree(loop) if isinstance(s, ast.If) and (s.lineno, s.col_offset) > after
                     and any(isinstance(n, ast.Name) and n.id == flag.id for n in sem.subtree(s.test))
                     and any(isinstance(n, (ast.Break, ast.Return)) for b in s.body for n in sem.subtree(b))), None)
        if test is None:  # (``if last_step or step % every == 0: evaluate()`` first, ``if last_step: break`` later)
            return False
    elif not isinstance(test, ast.If) or not any(isinstance(n, (ast.Break, ast.Return)) for b in test.body
                                                 for n in sem.subtree(b)) or node not in sem.subtree(test.test):
        return False
    here = (node.lineno, node.col_offset)
    return any(isinstance(c, ast.Call) and method_name(c) in _SIGNALS and c.args and isinstance(c.args[0], ast.Name)
               and c.args[0].id == recv.id and (c.lineno, c.col_offset) < here
               and (ctx.call_name(c) or "").startswith("torch.distributed.") for c in sem.body(loop))


def decoding_stop(ctx: Context, node: ast.AST, stop: ast.AST | None = None) -> bool:
    """``if (seqs == eos).any(1).sum().item() == k: break`` in a loop (inside ``stop``, the step loop, if given)
    that does not train: a beam search or a sampler asks whether every sequence has ended, and cannot know when
    to stop without the read; a read in that leaving branch (``best = scores.argmax().item(); break``) runs once."""
    sem = ctx.semantic
    for loop in sem.loops_around(node):
        if loop is stop:
            return False
        if "backward" in sem.region_effects(sem.body(loop)):
            continue
        if sem.in_exit_branch(node, loop):
            return True
        st = sem.statement_of(node)
        if isinstance(st, ast.If) and st.body and isinstance(st.body[-1], (ast.Break, ast.Return)) \
                and sem.contains(st.test, node) and sem.contains(loop, st) or _sets_the_while_flag(sem, st, loop):
            return True
    func = sem.function_of(node)  # (``def bad(x): return torch.isnan(x).any().item() or ...``, called as the flag of
    if func is None or not isinstance(sem.statement_of(node), ast.Return):  # a redraw loop: ``redo = bad(y)``)
        return False
    sites = sem.call_sites(func)
    return bool(sites) and all((loop := next(iter(sem.loops_around(c)), None)) is not None
                               and _sets_the_while_flag(sem, sem.statement_of(c), loop) for c in sites)


def _sets_the_while_flag(sem, stmt: ast.AST, loop: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``redo = bad(y) if filter else False`` in ``while redo:``: the statement sets the flag the loop tests to go
    round again (a redraw until the sample is valid): the loop cannot go on without the read."""
    if not (isinstance(loop, ast.While) and isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name) and sem.contains(loop, stmt)):
        return False
    test = loop.test.operand if isinstance(loop.test, ast.UnaryOp) and isinstance(loop.test.op, ast.Not) else loop.test
    flags = test.values if isinstance(test, ast.BoolOp) else [test]  # (``while f0_invalid or energy_invalid:``)
    return any(isinstance(f, ast.Name) and f.id == stmt.targets[0].id for f in flags)


_NOT_ENVIRONMENTS = frozenset({"optimizer", "scheduler", "scaler", "model", "wrapper", "loader", "sampler"})


def env_action(ctx: Context, node: ast.Call, loop: ast.AST, depth: int = 0) -> bool:
    """``actions = q.argmax(1).cpu().numpy()`` then ``obs, reward, done, info = envs.step(actions)`` (or the copy
    written in the call): the action a simulator on the host needs to go on. A reinforcement-learning rollout cannot
    take its next step without it; the results the call hands back are what makes it an environment's step, not an
    optimizer's or a scheduler's (``scheduler.step(val_loss.item())`` hands back nothing)."""
    sem = ctx.semantic
    inner = next(iter(sem.loops_around(node)), None)
    if inner is not None and inner is not loop and stepped_with(ctx, node, sem.body(inner)):
        return True  # ``env.step(action.item())`` in an episode's ``while not done:`` of a ``train()`` the loop calls
    if not sem.contains(loop, node):  # ``def select_action(...): return q.argmax().cpu().numpy()``, whose calls in
        func = sem.function_of(node)  # the loop hand the action to ``env.step``
        if func is not None and stepped_with(ctx, node, sem.local_nodes(func)):
            return True  # ``action = int(q.argmax().item())``, then ``self.env.step(action)`` in the agent's own step
        sites = [c for c in sem.call_sites(func) if sem.contains(loop, c)] if func is not None else []
        if not sites and func is not None:  # ``out = self.policy.act(obs)`` in a runner's own rollout loop, which the
            # step loop reaches through ``runner.collect()``: judged in the loop around each call
            sites = sem.call_sites(func)
            if sites and _reaches_return(ctx, node) and all(  # ``self.env.step(self.strategy.select(net, s))`` in
                    stepped_with(ctx, c, _around(ctx, c)) for c in sites):
                return True  # the agent's step method, which the loop calls: the environment needs the action
            loops = [next(iter(sem.loops_around(c)), None) for c in sites]
            if not sites or not _reaches_return(ctx, node):
                return False
            if None not in loops:
                return all(env_action(ctx, c, around, depth + 1) for c, around in zip(sites, loops))  # type: ignore[arg-type]
            # a helper of a helper: ``return self._pick(values)`` in ``_act``, whose result the loop hands to env.step
            return depth < 3 and all(env_action(ctx, c, loop, depth + 1) for c in sites)
        acting = [c for c in sites if env_action(ctx, c, loop, depth + 1)]
        # (``if done: self._forward(obs)`` once an episode ends, its action dropped: no step of the loop)
        return bool(acting) and _reaches_return(ctx, node) and all(
            c in acting or _dropped_once_in_a_while(ctx, c, loop) for c in sites)
    return stepped_with(ctx, node, sem.body(loop))


def _around(ctx: Context, call: ast.AST) -> list[ast.AST]:
    """The nodes of the function around ``call``, or of the loop around it at module level."""
    sem = ctx.semantic
    func = sem.function_of(call)
    if func is not None:
        return sem.local_nodes(func)
    loop = next(iter(sem.loops_around(call)), None)
    return sem.body(loop) if loop is not None else []


def stepped_with(ctx: Context, node: ast.AST, region: list[ast.AST]) -> bool:
    """An environment's ``step`` in ``region`` is handed ``node`` (in its arguments, or through the name it is
    bound to, after it)."""
    sem = ctx.semantic
    stmt = sem.statement_of(node)
    bound = {n.id for t in stmt.targets for n in sem.subtree(t) if isinstance(n, ast.Name)} \
        if isinstance(stmt, ast.Assign) else set()
    if bound:  # (``a = agent.take_action(s)``, ``a_cont = dis_to_con(a, env, n)``, then ``env.step([a_cont])``)
        for n in region:
            if isinstance(n, ast.Assign) and (n.lineno, n.col_offset) > (stmt.lineno, stmt.col_offset) and any(
                    isinstance(m, ast.Name) and m.id in bound for m in sem.subtree(n.value)) \
                    and not (isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Attribute)
                             and n.value.func.attr == "step"):
                bound |= {m.id for t in n.targets for m in sem.subtree(t) if isinstance(m, ast.Name)}
    for call in region:
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "step"
                and (call.args or call.keywords)):
            continue
        used = sem.statement_of(call)
        if not (isinstance(used, ast.Assign) and used.value is call) or \
                sem.expr_kind(call.func.value, call) in _NOT_ENVIRONMENTS:
            continue
        args = [*call.args, *(k.value for k in call.keywords)]
        if any(sem.contains(a, node) for a in args):
            return True
        if bound and (call.lineno, call.col_offset) > (node.lineno, node.col_offset) and \
                any(isinstance(n, ast.Name) and n.id in bound for a in args for n in sem.subtree(a)):
            return True
    return False


def _dropped_once_in_a_while(ctx: Context, call: ast.Call, loop: ast.AST) -> bool:
    """``self._forward(obs)`` as a statement of its own (its result dropped) under an ``if`` of the loop."""
    sem = ctx.semantic
    stmt = sem.statement_of(call)
    if not (isinstance(stmt, ast.Expr) and stmt.value is call):
        return False
    for up in sem.ancestors(call):
        if up is loop:
            return False
        if isinstance(up, ast.If):
            return True
    return False


def _reaches_return(ctx: Context, node: ast.Call) -> bool:
    """The copy is what its function hands back: returned, or bound to a name that is returned (``action =
    q.argmax().cpu().numpy(); self.transition = [state, action]; return action``)."""
    sem = ctx.semantic
    stmt = sem.statement_of(node)
    if isinstance(stmt, ast.Return):
        return True
    name, func = bound_name(stmt), sem.function_of(node)
    if name is None or func is None:
        return False
    frontier, seen = [(name, stmt)], {name}
    for _ in range(6):  # (``q = net(s).cpu().numpy(); action = np.argmax(q); return action``: through a few names)
        following = []
        for key, at in frontier:
            for r in reads_after(ctx, key, at, func):  # type: ignore[arg-type]
                used = sem.statement_of(r)
                if isinstance(used, ast.Return):
                    return True
                if isinstance(used, ast.Assign) and (bound := bound_name(used)) is not None and bound not in seen:
                    seen.add(bound)
                    following.append((bound, used))
        frontier = following
    return False


CLOCKS = ("time.time", "time.perf_counter", "time.monotonic", "time.perf_counter_ns", "time.time_ns", "perf_counter",
          "timeit.default_timer")


SYNCHRONIZE = ("torch.cuda.synchronize", "torch.accelerator.synchronize")


def timer_call(call: ast.Call) -> bool:
    """``fw_timer.tic()``, ``timer.toc()``, ``self.timer.stop()``: a stopwatch object's reading."""
    return isinstance(call.func, ast.Attribute) and (call.func.attr in ("tic", "toc", "elapsed_time") or "timer" in (
        dotted(call.func.value) or "").lower())  # (``start.elapsed_time(end)`` of CUDA events: the GPU's own clock)


def _clock_call(ctx: Context, node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and ((ctx.call_name(node) or "") in CLOCKS or timer_call(node))


def timed_iteration(ctx: Context, loop: ast.AST) -> bool:
    """The loop iterates a generator that reads a clock after each ``yield``, timing every step: a
    ``metric_logger.log_every(loader, freq)`` (detr, DeiT, MAE, DINO), or a generator of this file that calls
    ``time.time()``; behind ``enumerate``/``tqdm`` too (MAE's ``enumerate(metric_logger.log_every(...))``)."""
    it = getattr(loop, "iter", None)
    return any(_timing_generator(ctx, i) for i in unwrap_iter(it)[0]) if it is not None else False


def _timing_generator(ctx: Context, it: ast.AST) -> bool:
    if not isinstance(it, ast.Call):
        return False
    if isinstance(it.func, ast.Attribute) and it.func.attr == "log_every":
        return True
    sem = ctx.semantic
    return any(any(isinstance(n, ast.Yield | ast.YieldFrom) for n in sem.local_nodes(f))
               and any(_clock_call(ctx, n) for n in sem.local_nodes(f)) for f in sem.resolve(it))


def read_again(ctx: Context, node: ast.AST, loop: ast.AST, entry: bool = False) -> bool:
    """``top.item()`` read again after ``if top.item() == eos: break`` (or ``history[i] = loss.item()`` after
    ``total = loss.item()``, ``"%.3f" % loss`` after ``writer.add_scalar("loss", loss, step)``), the same tensor, with
    nothing but host work between: the first read waited for the GPU; this one waits for nothing. GPU work behind a
    step guard between them (``if i % 1000 == 0: sample(model)``) runs on few steps: on the others, nothing is queued.
    A read of *another* tensor after a read of the step, with only host work between, waits for nothing either: the
    first read of the run is the one reported (it is where the GPU's queue drains)."""
    from torchdoctor.check.rules.host_values import sync_site  # (host_values' reads: asked of earlier statements)

    sem = ctx.semantic
    name = _read_tensor(node)
    bound = sem.binding_at(name, node) if name is not None else None
    if name is not None and bound is None:
        return False
    if name is None and not entry and not _read_of_a_view(node) and not _element_read(node) and not _formatting(sem, node) \
            and not _attribute_read(sem, node) \
            and not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print") and not (
            isinstance(node, (ast.Compare, ast.BoolOp, ast.UnaryOp)) and not any(isinstance(n, ast.BinOp) for n in sem.subtree(node))):
        return False  # (``if val_loss < best:``: a test of no one name, after another read all the same; ``entry``: the
        # call of a helper whose reads come before any GPU work of its own, ``drained_at_entry``)
    top: ast.AST = node
    first = True
    for up in sem.ancestors(node):  # each block around ``node``, inside out, up to the loop's body
        body = next((b for b in (getattr(up, "body", None), getattr(up, "orelse", None)) if isinstance(b, list)
                     and any(s is top for s in b)), None)
        if body is None:
            if up is loop:
                return False
            top = up
            continue
        head = top.test if isinstance(top, (ast.If, ast.While)) and sem.contains(top.test, node) else top
        # (``if acc: wandb.log(...)``: the body runs after the test reads)
        if first and not all(_queues_nothing(ctx, c) for c in sem.subtree(head) if isinstance(c, ast.Call) and c is not node
                             and not sem.contains(c, node)):  # (a call given the read runs after it: ``callback(loss.item())``)
            return False  # (``raw += [c.item() for c in confidence(net(x))]``: new GPU work in the statement itself)
        first = False
        k = next(n for n, st in enumerate(body) if st is top)
        for stmt in reversed(body[:k]):
            nodes = sem.subtree(stmt)
            if name is not None and any(_reads_name(c, name) and sem.binding_at(name, c) is bound
                                        and _runs_whenever(sem, c, stmt) for c in nodes):
                return True  # (an earlier read of the same tensor, the last GPU work before it already waited for)
            if isinstance(stmt, (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign)) and any(
                    isinstance(c, ast.Call) and _runs_whenever(sem, c, stmt) and (sync_site(ctx, c) is not None
                                                                                  and not _element_maybe_on_host(ctx, c)
                                                                                  or _logs_a_tensor(ctx, c))
                    or legacy_item(c) and _runs_whenever(sem, c, stmt) and not legacy_item_used_as_a_tensor(ctx, c)
                    for c in nodes):
                return True  # (an earlier read of another tensor of the step: the GPU was idle after it, and only
                # host work came since; that read is the one reported)
            if isinstance(stmt, ast.If) and any(
                    isinstance(c, ast.Call) and sync_site(ctx, c) is not None and not _element_maybe_on_host(ctx, c)
                    and _always_evaluated(sem, c, stmt.test) for c in sem.subtree(stmt.test)) and all(
                    _leaves(branch) or all(_queues_nothing(ctx, c) for s in branch for c in sem.subtree(s)
                                           if isinstance(c, ast.Call)) for branch in (stmt.body, stmt.orelse)):
                return True  # (``if is_nan.item() > 0: log(...); continue``: its test read the step, and what its
                # branches do before this read queues nothing, or leaves the pass)
            if isinstance(stmt, (ast.For, ast.AsyncFor)) and _reading_pass(ctx, stmt) and any(
                    isinstance(c, ast.Call) and sync_site(ctx, c) is not None for c in nodes):
                return True  # (``for cl_loss in cl_losses: total += cl_loss.item()``: a pass of reads just before)
            if isinstance(stmt, (ast.Expr, ast.Assign)) and isinstance(stmt.value, ast.Call) \
                    and any(_ends_with_a_read(ctx, f) for f in sem.resolve(stmt.value)):
                return True  # (``acc, val_loss = evaluate()``, whose last statements read back ``acc``: drained)
            if _drains(ctx, stmt) or isinstance(stmt, ast.If) and stmt.orelse and all(
                    _branch_drains(ctx, branch) for branch in (stmt.body, stmt.orelse)):
                return True  # (``parts = comm.all_gather(part)`` of another module, which reads back what it gathers;
                # ``if deep: ... iou = iou_score(outs[-1], y) else: ... iou = iou_score(out, y)``: on either branch;
                # ``if mode == "a": aux, acc = task_a(out) elif ...: ... else: raise``: every arm that goes on reads)
            if isinstance(stmt, (ast.Expr, ast.Assign)) and isinstance(stmt.value, ast.Call) and name is not None \
                    and _reads_in_another_module(ctx, stmt.value, name) and _runs_whenever(sem, stmt.value, stmt):
                return True  # (``meter.update(acc=acc)`` whose ``update`` calls ``.item()``: reported there)
            if isinstance(stmt, ast.If) and (sem.under_step_guard(stmt.body[0], loop) or _new_best_branch(stmt)):
                continue  # (work on every N-th step only, or when the score improves)
            if _drained(stmt):
                continue  # (``writer.add_scalar("parts", out.mean(), it)``: the GPU work it queues, it reads back)
            if _host_copies(stmt) and isinstance(loop, _LOOP_NODES) and sem.loop_kind(loop) == "eval" and all(
                    collected_on_host(ctx, c, loop) for c in _copies_of(stmt)):
                return True  # (``out = out.data.cpu().numpy()``: an evaluation's kept copy, which the rule does not
                # report, waited for the GPU; only host work since, so this read waits for nothing)
            if not all(_queues_nothing(ctx, c) for c in nodes if isinstance(c, ast.Call)) or _tensor_arithmetic(ctx, nodes):
                return False  # (``clip_coef = clip / (param_norm + 1e-6)``: arithmetic queued on the GPU)
        if up is loop:
            return False
        if isinstance(up, (ast.If, ast.While)) and name is not None and any(body is b for b in (up.body, up.orelse)) \
                and any(_reads_name(c, name) and sem.binding_at(name, c) is bound and _always_evaluated(sem, c, up.test)
                        for c in sem.subtree(up.test)):
            return True  # (``if d.item() not in seen: seen.add(d.item())``: the test read it just before; not ``if f1 >
            # best or loss.item() < low:``, whose read the ``or`` may skip)
        if isinstance(up, ast.If) and name is None and _element_read(node) and body is up.body \
                and isinstance(test := up.test, ast.Compare) and len(test.ops) == 1 \
                and any(sem.segment(side) == sem.segment(node.func.value)  # type: ignore[attr-defined]
                        for side in (test.left, *test.comparators)):
            return True  # (``if src[i] != prev: prev = src[i].item()``: the test compared that element just before; not
            # ``if isinstance(losses[i], dict): ... else: losses[i].item()``, nor a test in an ``or``)
        if isinstance(up, (ast.If, ast.While)) and not all(  # (``if self.after_iter_callback is not None:``: its test
                _queues_nothing(ctx, c) for c in sem.subtree(up.test) if isinstance(c, ast.Call)) \
                and not sem.guards.rank_test(up.test):  # queues nothing; nor does ``if dist.is_primary():``)
            return False
        if isinstance(up, (ast.For, ast.AsyncFor)) and _reading_pass(ctx, up):
            top = up  # (``for aux in aux_losses: total += aux.item()``: a pass of reads, nothing queued between them)
            continue
        if not isinstance(up, (ast.If, ast.With)):
            return False  # (out of a loop or a handler of its own: the earlier statements ran some passes ago)
        top = up
    return False


def _drains(ctx: Context, stmt: ast.AST) -> bool:
    """A call of another module's function that reads back all the GPU work it queued before it returns."""
    return isinstance(stmt, (ast.Expr, ast.Assign)) and isinstance(stmt.value, ast.Call) \
        and "drains" in getattr(ctx.semantic.external(stmt.value), "effects", ())


def drained_at_entry(ctx: Context, node: ast.AST, loop: ast.AST) -> bool:
    """A read in a helper that queues no GPU work before it (``def print_params(self, epoch): print(epoch,
    self.t.item())``), called in the loop right after a read (``l = train()``, whose last statement returns
    ``loss.item()``): at every call, the GPU is idle already; the read waits for nothing."""
    sem = ctx.semantic
    func = sem.function_of(node)
    if func is None or sem.contains(loop, node):
        return False
    stmt = next((a for a in (node, *sem.ancestors(node)) if sem.parent(a) is func and isinstance(a, ast.stmt)), None)
    body = getattr(func, "body", [])
    if stmt is None or not any(s is stmt for s in body):
        return False
    before = [n for s in body[:next(i for i, s in enumerate(body) if s is stmt)] for n in sem.subtree(s)]
    here = [c for c in sem.subtree(stmt) if c is not node and not sem.contains(c, node)]
    if not all(_queues_nothing(ctx, c) for c in before + here if isinstance(c, ast.Call)) \
            or _tensor_arithmetic(ctx, before + here):
        return False
    sites = [s for s in sem.call_sites(func) if sem.contains(loop, s)]
    return bool(sites) and all(read_again(ctx, s, loop, entry=True) for s in sites)


def _tensor_arithmetic(ctx: Context, nodes: list[ast.AST]) -> bool:
    """Some ``a + b`` among ``nodes`` works on a tensor (``param_norm + 1e-6``): new GPU work, no call needed."""
    from torchdoctor.check.rules.host_values import tensor_value

    return any(isinstance(n, ast.BinOp) and any(isinstance(side, (ast.Name, ast.Attribute)) and tensor_value(ctx, side, n)
                                                 for side in (n.left, n.right)) for n in nodes)


def _formatting(sem, node: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``"acc %.2f" % (100 * correct / n)``, ``f"{loss / n:.3f}"``: a tensor formatted into text, whatever expression
    holds it; after another read with only host work since, it waits for nothing."""
    up = sem.parent(node)
    return isinstance(node, ast.JoinedStr) or isinstance(up, ast.FormattedValue) or isinstance(up, ast.BinOp) \
        and isinstance(up.op, ast.Mod) and up.right is node and isinstance(up.left, ast.Constant) and isinstance(up.left.value, str)


def _read_of_a_view(node: ast.AST) -> bool:
    """``p.detach().cpu()``, ``out.data.cpu()``: a read of a name's view (no new GPU work), reported where another
    tensor's read came first all the same."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("cpu", "item", "tolist")):
        return False
    recv = strip_views(node.func.value)
    if isinstance(recv, ast.Subscript) and (isinstance(recv.slice, ast.Constant) and type(recv.slice.value) in (int, str)
                                            or _basic_slices(recv.slice)):
        recv = recv.value  # (``losses[1].cpu()`` of the tuple a step helper returned: an element it holds; ``idx[:, :5]``:
        # a view, no kernel; ``errors["mae"].cpu()``: a value a dict holds)
    return isinstance(recv, ast.Name)


_HOST_MAKERS = frozenset({"torch.zeros", "torch.ones", "torch.tensor", "torch.full", "torch.empty"})


def _element_maybe_on_host(ctx: Context, read: ast.Call) -> bool:
    """``losses[0].cpu()`` of ``losses = self.update_model()``, whose element 0 is ``actor_loss.data`` with ``actor_loss
    = torch.zeros(())`` on the steps that skip the actor's update: on those steps this read waits for nothing, so the
    next read is the one that waits."""
    sem = ctx.semantic
    recv = strip_views(read.func.value) if isinstance(read.func, ast.Attribute) else None
    if not (isinstance(recv, ast.Subscript) and isinstance(recv.value, ast.Name) and isinstance(recv.slice, ast.Constant)
            and type(index := recv.slice.value) is int):
        return False
    b = sem.binding_at(recv.value.id, read)
    if b is None or b.is_param or not isinstance(b.value, ast.Call):
        return False
    for func in sem.resolve(b.value):
        for value in sem.kinds.returned_values(func, index) or ():
            while isinstance(value, ast.Attribute) and value.attr == "data":
                value = value.value
            if isinstance(value, ast.Name) and any(
                    isinstance(e.value, ast.Call) and sem.call_name(e.value) in _HOST_MAKERS
                    and not any(k.arg == "device" for k in e.value.keywords)
                    for e in sem.bindings_of(value.id) if sem.scope_of(e.node) is func and not e.is_param):
                return True
    return False


def _host_batch_element(ctx: Context, name: ast.Name, at: ast.AST) -> bool:
    from torchdoctor.check.rules.host_values import batch_on_device

    sem = ctx.semantic
    loop = sem.enclosing_loop(at, "batch")
    return loop is not None and name.id in sem.batch_vars(loop) and not batch_on_device(ctx, name.id, at, loop)


def _basic_slices(index: ast.AST) -> bool:
    """``[:, :5]``, ``[1:-1]``: slices with literal or missing bounds (a view of the tensor: nothing queued)."""
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    return any(isinstance(p, ast.Slice) for p in parts) and all(
        isinstance(p, ast.Slice) and all(b is None or isinstance(b, ast.Constant) or isinstance(b, ast.UnaryOp)
                                         and isinstance(b.operand, ast.Constant) for b in (p.lower, p.upper, p.step))
        or isinstance(p, ast.Constant) and type(p.value) is int for p in parts)


def _strip_index(expr: ast.AST) -> ast.AST:
    """``gold.size()[0]`` -> ``gold.size()``."""
    return expr.value if isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Constant) else expr


def _reading_pass(ctx: Context, loop: ast.AST) -> bool:
    """A small inner loop over values the step already holds (``for aux in aux_losses:``, ``for k, v in
    losses.items():``) whose body queues no GPU work: its reads wait for what came before it, once."""
    it = loop.iter  # type: ignore[attr-defined]
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in ("items", "values", "keys"):
        it = it.func.value
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id in ("enumerate", "zip"):
        if not all(isinstance(a, (ast.Name, ast.Attribute)) for a in it.args):
            return False
    elif isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range":
        if not all(isinstance(a, (ast.Name, ast.Constant)) or isinstance(b := _strip_index(a), ast.Call) and (
                dotted(b.func) == "len" or method_name(b) == "size") for a in it.args):
            return False  # (``for j in range(len(gold)):``: over the rows of what the step holds)
    elif not isinstance(it, (ast.Name, ast.Attribute, ast.List, ast.Tuple, ast.Dict)):
        return False  # (``for k, v in {"loss": loss}.items():``: a literal of values the step holds)
    if ctx.semantic.loop_kind(loop) in ("train", "eval") or any(isinstance(n, ast.BinOp) for n in ctx.semantic.subtree(loop)):
        return False  # (a loop over batches: each pass queues its own work; ``(aux * 2).item()``: arithmetic queued)
    return all(_queues_nothing(ctx, c) for c in ctx.semantic.subtree(loop) if isinstance(c, ast.Call)
               and c is not it and not ctx.semantic.contains(loop.iter, c))  # type: ignore[attr-defined]


def _leaves(branch: list[ast.stmt]) -> bool:
    """The branch ends by leaving the pass (``continue``, ``break``, ``return``, ``raise``)."""
    return bool(branch) and isinstance(branch[-1], (ast.Continue, ast.Break, ast.Return, ast.Raise))


def _always_evaluated(sem, node: ast.AST, test: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``node`` runs whenever ``test`` is evaluated: not in a later operand of an ``and``/``or``, nor in a branch of a
    conditional expression."""
    child = node
    for up in sem.ancestors(node):
        if isinstance(up, ast.BoolOp) and up.values and child is not up.values[0] \
                or isinstance(up, ast.IfExp) and child is not up.test:
            return False
        if up is test:
            return True
        child = up
    return True


def _branch_drains(ctx: Context, branch: list[ast.stmt], depth: int = 0) -> bool:
    """The block ends with a statement that drains the GPU's queue (a read back, a call of a function of this file that
    ends with one), or leaves (``raise``), or is an ``if`` whose every arm does."""
    if not branch or depth > 4:
        return False
    last = branch[-1]
    if isinstance(last, (ast.Raise, ast.Continue, ast.Return)):
        return True
    if isinstance(last, ast.If):
        return bool(last.orelse) and _branch_drains(ctx, last.body, depth + 1) \
            and _branch_drains(ctx, last.orelse, depth + 1)
    if _drains(ctx, last):
        return True
    return isinstance(last, (ast.Expr, ast.Assign)) and isinstance(last.value, ast.Call) \
        and any(_ends_with_a_read(ctx, f) for f in ctx.semantic.resolve(last.value))


def _ends_with_a_read(ctx: Context, func: ast.AST, depth: int = 0) -> bool:
    """A function of this file whose body ends with a read back (``acc = (...).cpu().numpy(); return acc, val_loss``,
    ``return loss.item()``, or ``return crit(pred, y), accuracy(pred, y)`` of such a function last): every GPU work
    it queued, that read waited for; the GPU is idle when it returns."""
    from torchdoctor.check.rules.host_values import sync_site

    body = list(getattr(func, "body", None) or ())
    sem = ctx.semantic
    while body and isinstance(body[-1], ast.Return) and (body[-1].value is None or all(
            isinstance(n, (ast.Name, ast.Tuple, ast.Constant, ast.Load)) or isinstance(n, ast.Attribute) and n.attr == "data"
            for n in sem.subtree(body[-1].value))):
        body.pop()  # (``return acc, val_loss``, ``return loss.data``: names only, nothing queued)
    while len(body) > 1 and _host_work_after_a_read(ctx, body[-1]):
        body.pop()  # (``buffer.update_priorities(idx, prios)`` of ``prios = td.detach().cpu().numpy()``: host work)
    if not body or not isinstance(body[-1], (ast.Expr, ast.Assign, ast.Return)):
        return False
    last = body[-1]
    if any(isinstance(c, ast.Call) and _runs_whenever(sem, c, last) and sync_site(ctx, c) is not None
           for c in sem.subtree(last)):
        return True
    value = getattr(last, "value", None)
    if isinstance(value, ast.Tuple) and value.elts:
        value = value.elts[-1]  # (evaluated last)
    return depth < 2 and isinstance(value, ast.Call) and any(
        _ends_with_a_read(ctx, f, depth + 1) for f in sem.resolve(value) if f is not func)


def _host_work_after_a_read(ctx: Context, stmt: ast.AST) -> bool:
    """A statement at a step helper's end that queues nothing: a call handed host arrays (``self.memory.update_priorities(
    indices, prios)`` of ``prios = td.data.cpu().numpy()``), NumPy work (``demo_idxs = np.where(eps != 0.0)``), or an
    attribute of such (``n_demo = demo_idxs[0].size``), with no tensor arithmetic."""
    from torchdoctor.check.rules.host_values import made_on_host, sync_site

    sem = ctx.semantic
    if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Attribute) \
            and made_on_host(ctx, stmt.value, stmt) and not _tensor_arithmetic(ctx, list(sem.subtree(stmt.value))) \
            and not any(isinstance(c, ast.Call) and sync_site(ctx, c) is not None for c in sem.subtree(stmt.value)):
        return True  # (``indices = indices.view(bs, h, w)`` of ``values, indices = out.cpu().max(1)``: on the host)
    if isinstance(stmt, ast.Expr) and isinstance(call := stmt.value, ast.Call):
        args = [*call.args, *(k.value for k in call.keywords)]
        return bool(args) and all(isinstance(a, (ast.Name, ast.Attribute, ast.Constant)) for a in args) \
            and any(_host_copy_name(ctx, a, call) for a in args)
    if not isinstance(stmt, (ast.Assign, ast.AugAssign)) or not isinstance(stmt.value, (ast.Call, ast.Attribute, ast.Subscript,
                                                                                       ast.Name, ast.Constant)):
        return False
    if isinstance(stmt, ast.AugAssign) and not (isinstance(stmt.target, ast.Name) and _host_copy_name(ctx, stmt.target, stmt)):
        return False  # (``prios += eps`` of a host copy: NumPy's addition)
    calls = [n for n in sem.subtree(stmt.value) if isinstance(n, ast.Call)]
    return all((sem.qualname(c.func) or "").startswith("numpy.") for c in calls) and not _tensor_arithmetic(
        ctx, list(sem.subtree(stmt.value)))


def _reads_in_another_module(ctx: Context, call: ast.Call, name: str) -> bool:
    """``meter.update(acc=acc)`` of a method of another module that reads its tensors back (``v.item()``), given
    ``name`` itself: that read waited for the GPU."""
    ext = ctx.semantic.external(call)
    effects = getattr(ext, "effects", ())
    return ext is not None and "sync" in effects and "read" in effects and not getattr(ext, "one_step", False) \
        and any(isinstance(a, ast.Name) and a.id == name for a in [*call.args, *(k.value for k in call.keywords)])


def _drained(stmt: ast.AST) -> bool:
    """A statement whose last step reads a value back (``writer.add_scalar(tag, out.mean(), it)``, ``acc =
    (pred == y).float().mean().item()``): whatever GPU work it queues, its read waits for; the GPU is idle after it."""
    value = stmt.value if isinstance(stmt, (ast.Expr, ast.Assign, ast.AugAssign)) else None
    if not isinstance(value, ast.Call):
        return False
    if isinstance(value.func, ast.Attribute) and value.func.attr in _LOGGED:
        return len(value.args) > 1
    if isinstance(value.func, ast.Attribute) and value.func.attr in ("item", "tolist") and not value.args:
        return True
    return isinstance(value.func, ast.Name) and value.func.id in ("float", "int") and len(value.args) == 1


_LOOP_NODES = (ast.For, ast.AsyncFor, ast.While)


def _host_copy_name(ctx: Context, arg: ast.AST, at: ast.AST) -> bool:
    """``out`` bound to ``out.data.cpu().numpy()`` (or unpacked from a tuple of such copies), or to what a NumPy
    function made: a host array."""
    if not isinstance(arg, ast.Name):
        return isinstance(arg, ast.Constant)
    sem = ctx.semantic
    b = sem.binding_at(arg.id, at)
    if b is None or b.is_param or b.value is None:
        return False
    if isinstance(b.value, ast.Call) and b.index is not None:  # ``loss, hits = train_batch(x, y)`` of a helper here
        funcs = [f for f in sem.resolve(b.value) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
        returns = [r for f in funcs for r in sem.local_nodes(f) if isinstance(r, ast.Return)]
        return bool(returns) and all(isinstance(r.value, ast.Tuple) and b.index < len(r.value.elts)
                                     and _host_copy_expr(r.value.elts[b.index]) for r in returns)
        # (``return loss.detach(), (out.argmax(1) == y).cpu().numpy()``: the second item is a host array)
    value = b.value.elts[b.index] if isinstance(b.value, ast.Tuple) and b.index is not None \
        and b.index < len(b.value.elts) else b.value
    return _host_copy_expr(value) or b.index is None and isinstance(value, ast.Call) \
        and (sem.call_name(value) or "").startswith("numpy.")  # (``gt = np.asarray(labels.cpu()[0].numpy())``)


def _host_copy_expr(value: ast.AST) -> bool:
    """``out.data.cpu().numpy()`` (perhaps reshaped after: ``.squeeze()``): a copy on the host."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
            and value.func.attr in ("squeeze", "reshape", "flatten", "ravel", "astype", "copy"):
        value = value.func.value  # (``td.data.cpu().numpy().squeeze()``: NumPy's reshaping of the copy)
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
        and value.func.attr in ("cpu", "numpy", "tolist")


def _logs_a_tensor(ctx: Context, call: ast.Call) -> bool:
    """``writer.add_scalar(tag, size_loss, epoch)`` of a tensor (not of a Python number: ``lr_``): TensorBoard copies it
    to the host."""
    from torchdoctor.check.rules.host_values import tensor_value

    return isinstance(call.func, ast.Attribute) and call.func.attr in _LOGGED and len(call.args) > 1 \
        and isinstance(call.args[1], (ast.Name, ast.Attribute)) and tensor_value(ctx, call.args[1], call)


def _new_best_branch(stmt: ast.If) -> bool:
    """``if max_acc < acc: max_acc = acc; ...; evaluate on the test set``: a branch taken when the score improves,
    which the branch records as the new best. Its GPU work (a test pass, a checkpoint) runs on few steps; on the
    others, nothing is queued before the next read."""
    test = stmt.test
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Lt, ast.Gt, ast.LtE, ast.GtE))):
        return False
    sides = {dotted(x) for x in (test.left, test.comparators[0]) if isinstance(x, (ast.Name, ast.Attribute))}
    return len(sides) == 2 and any(isinstance(s, ast.Assign) and len(s.targets) == 1 and dotted(s.targets[0]) in sides
                                   and isinstance(s.value, (ast.Name, ast.Attribute)) and dotted(s.value) in sides
                                   for s in stmt.body)


def _host_copies(stmt: ast.AST) -> bool:
    """``out = out.data.cpu().numpy()``, ``out, y = out.cpu().numpy(), y.cpu().numpy()``: the statement copies values
    to the host (each copy waits for the GPU work queued before it)."""
    if not isinstance(stmt, ast.Assign):
        return False
    values = stmt.value.elts if isinstance(stmt.value, ast.Tuple) else [stmt.value]
    return bool(values) and all(isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute)
                                and v.func.attr in ("cpu", "numpy", "tolist") for v in values)


def _copies_of(stmt: ast.Assign) -> list[ast.Call]:
    """The ``.cpu()`` calls of a host-copy statement (``_host_copies``)."""
    values = stmt.value.elts if isinstance(stmt.value, ast.Tuple) else [stmt.value]
    out = []
    for v in values:
        while isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr != "cpu":
            v = v.func.value
        if isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute):
            out.append(v)
    return out


def _element_read(node: ast.AST) -> bool:
    """``pred[j].item()``: a read of one element of a tensor the step holds."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("item", "tolist") \
        and isinstance(node.func.value, ast.Subscript) and isinstance(node.func.value.value, ast.Name)


def _attribute_read(sem, node: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``model.angle_loss_write.item()``, ``net.iou_loss.data.cpu()``: a read of a tensor a model holds (a loss part its
    forward kept), not of a name; after a read of the step, with only host work between, it waits for nothing either."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.args
            and node.func.attr in ("item", "tolist", "cpu")):
        return False
    recv = node.func.value
    if isinstance(recv, ast.Attribute) and recv.attr == "data":
        recv = recv.value
    return isinstance(recv, ast.Attribute) and isinstance(recv.value, ast.Name) \
        and sem.expr_kind(recv.value, node) in ("model", "wrapper")


def legacy_item(node: ast.AST) -> bool:
    """``loss.data[0]``: PyTorch 0.3's ``loss.item()``."""
    return isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "data" \
        and isinstance(node.value.value, (ast.Name, ast.Call)) and isinstance(node.slice, ast.Constant) \
        and node.slice.value == 0


def legacy_item_used_as_a_tensor(ctx: Context, node: ast.AST) -> bool:
    """``x.data[0]`` whose value goes on as a tensor: compared with another such subscript, handed to a torch
    function, or asked its size (``torch.eq(pred.data[0], target.data[0])``, ``pred.data[0].size()``): the first
    element of a batch, a view on the device, not PyTorch 0.3's read of a 0-dim loss."""
    sem = ctx.semantic
    up = sem.parent(node)
    if isinstance(up, ast.Compare) and len(up.comparators) == 1:
        other = up.comparators[0] if up.left is node else up.left
        if isinstance(other, ast.Subscript) and legacy_item(other):
            up = sem.parent(up)  # (``pred.data[0] == target.data[0]``: what the comparison goes on to)
            if isinstance(up, ast.Call) and (ctx.call_name(up) or "").startswith("torch."):
                return True
            return False
    if isinstance(up, ast.Attribute) and up.attr in ("size", "shape", "dim", "numel"):
        return True
    return isinstance(up, ast.Call) and node in up.args and (ctx.call_name(up) or "").startswith("torch.") \
        and (ctx.call_name(up) or "").rsplit(".", 1)[-1] not in ("save", "tensor", "Tensor", "FloatTensor")


def _read_tensor(node: ast.AST) -> str | None:
    """The tensor name a reported read reads: ``loss`` of ``loss.item()``, ``float(loss)``, ``writer.add_scalar("l",
    loss)``, of the name itself (a ``%``-formatted value, a test), or of an f-string's one formatted name."""
    if isinstance(node, ast.Name):
        return node.id
    if legacy_item(node) and isinstance(node.value.value, ast.Name):  # type: ignore[attr-defined]
        return node.value.value.id  # type: ignore[attr-defined]
    if isinstance(node, ast.JoinedStr):
        values = [v.value for v in node.values if isinstance(v, ast.FormattedValue)]
        return values[0].id if len(values) == 1 and isinstance(values[0], ast.Name) else None
    if not isinstance(node, ast.Call):
        return None
    read = node.args[1] if len(node.args) > 1 else node.func.value if isinstance(node.func, ast.Attribute) \
        else node.args[0] if node.args else None  # (what ``add_scalar``, a method, or ``float()`` reads)
    if isinstance(read, ast.Dict) and len(read.values) == 1:
        read = read.values[0]  # ``writer.add_scalars("Loss", {"train": loss}, step)``
    return read.id if isinstance(read, ast.Name) and _reads_name(node, read.id) else None


def _reads_name(node: ast.AST, name: str) -> bool:
    """``name.item()``/``.tolist()``/``.cpu()``, ``float(name)``/``int(name)``, ``writer.add_scalar(tag, name)``, ``"%.3f" %
    name``, ``f"{name}"``: a read of the tensor ``name``."""
    if isinstance(node, ast.BinOp):
        if not isinstance(node.op, ast.Mod) or not (isinstance(node.left, ast.Constant) and isinstance(node.left.value, str)):
            return False
        values = node.right.elts if isinstance(node.right, ast.Tuple) else [node.right]
        return any(isinstance(v, ast.Name) and v.id == name for v in values)
    if isinstance(node, ast.FormattedValue):
        return isinstance(node.value, ast.Name) and node.value.id == name
    if isinstance(node, ast.Slice):  # ``pred[:n]``: Python asks ``n`` for its index value
        return any(isinstance(b, ast.Name) and b.id == name for b in (node.lower, node.upper))
    if not isinstance(node, ast.Call):
        return False
    if isinstance(node.func, ast.Attribute) and node.func.attr in _LOGGED:
        logged = node.args[1] if len(node.args) > 1 else None
        values = logged.values if isinstance(logged, ast.Dict) and node.func.attr == "add_scalars" else [logged]
        return any(isinstance(v, ast.Name) and v.id == name for v in values)
    if isinstance(node.func, ast.Attribute) and node.func.attr in _READS and not node.args:
        return isinstance(node.func.value, ast.Name) and node.func.value.id == name
    return isinstance(node.func, ast.Name) and node.func.id in ("float", "int") and len(node.args) == 1 \
        and isinstance(node.args[0], ast.Name) and node.args[0].id == name


_READS = ("item", "tolist", "cpu")
_LOGGED = ("add_scalar", "add_scalars")  # (TensorBoard copies the value to the host)


def _runs_whenever(sem, call: ast.AST, stmt: ast.stmt) -> bool:  # type: ignore[no-untyped-def]
    """``call`` runs whenever ``stmt`` does: not in a branch, loop or comprehension of it (``if batch_idx % 50 == 0:
    print(loss.item())`` reads only now and then), though it may be the test of an ``if`` statement."""
    if isinstance(stmt, ast.If) and not sem.contains(stmt.test, call) and stmt.test is not call:
        return False
    for up in sem.ancestors(call):
        if up is stmt:
            return True
        if isinstance(up, (ast.ListComp, ast.SetComp, ast.DictComp)) and (_over_a_filled_literal(sem, up)
                                                                          or _over_parameters(up)):
            continue  # (``{k: f"{metrics[k].cpu()}" for k in metrics}`` of ``metrics = {"acc": ...}``: runs; so does
            # ``[p.grad.norm().item() ** 2 for p in model.parameters() if p.grad is not None]`` after a backward)
        if isinstance(up, (ast.If, ast.IfExp, ast.For, ast.AsyncFor, ast.While, ast.Try, ast.BoolOp, ast.ListComp,
                           ast.GeneratorExp, ast.SetComp, ast.DictComp, ast.Lambda)):
            return False
    return False


def _over_parameters(comp: ast.AST) -> bool:
    """The comprehension's one generator walks a model's ``parameters()`` (keeping those with a gradient, or that
    require one): a model has some, so its body runs."""
    gens = getattr(comp, "generators", [])
    if len(gens) != 1 or not isinstance(it := gens[0].iter, ast.Call) or not isinstance(it.func, ast.Attribute) \
            or it.func.attr != "parameters" or not isinstance(target := gens[0].target, ast.Name):
        return False
    return all(dotted(c.left if isinstance(c, ast.Compare) else c) in (f"{target.id}.grad", f"{target.id}.requires_grad")
               for c in gens[0].ifs)


def _over_a_filled_literal(sem, comp: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """The comprehension's one generator walks a name bound (once, in its scope) to a dict, list or tuple literal with
    items, and filters nothing: its body runs."""
    gens = getattr(comp, "generators", [])
    if len(gens) != 1 or gens[0].ifs or not isinstance(it := gens[0].iter, ast.Name):
        return False
    bound = sem.bindings_of(it.id)
    return len(bound) == 1 and isinstance(v := bound[0].value, (ast.Dict, ast.List, ast.Tuple)) \
        and bool(v.keys if isinstance(v, ast.Dict) else v.elts)


def after_timing_sync(ctx: Context, node: ast.AST, loop: ast.AST) -> bool:
    """``node`` reads after the step's own timing ``torch.cuda.synchronize()`` (a clock read in the loop beside
    it: the sync TD603 leaves alone), earlier in the loop's body, with no call but clock reads between: the GPU is
    idle by then, so the read waits for nothing (``synchronize(); t1 = time.time(); print(loss.item(), t1 - t0)``)."""
    sem = ctx.semantic
    body = getattr(loop, "body", [])
    top = node
    while (up := sem.parent(top)) is not None and up is not loop:
        top = up
    if up is None or not any(b is top for b in body):
        return False
    region = sem.body(loop)
    before = body[:[i for i, b in enumerate(body) if b is top][0]]
    timed = any(isinstance(b, (ast.With, ast.AsyncWith)) and _syncs_on_exit(ctx, b) for b in before)
    if not timed and not any(_clock_call(ctx, n) for n in region) and not timed_iteration(ctx, loop):
        return False
    for stmt in reversed(before):
        if timed and isinstance(stmt, (ast.With, ast.AsyncWith)) and _syncs_on_exit(ctx, stmt):
            return True  # ``with timers["update"]: optimizer.step()``, whose ``__exit__`` synchronises: the GPU is idle
        calls = [n for n in sem.subtree(stmt) if isinstance(n, ast.Call)]
        if any(_synchronize(ctx, c) for c in calls):
            return all(_synchronize(ctx, c) or _clock_call(ctx, c) for c in calls)
        if not all(_clock_call(ctx, c) or _queues_nothing(ctx, c) for c in calls):
            return False  # work queued after the sync (or none there): the read may wait for it
    return False


def _synchronize(ctx: Context, call: ast.Call) -> bool:
    """``torch.cuda.synchronize()``, or a name bound to it (``synchronize = torch.cuda.synchronize if device_type ==
    "cuda" else lambda: None``, then ``synchronize()``)."""
    if (ctx.call_name(call) or "") in SYNCHRONIZE:
        return True
    sem = ctx.semantic
    if not isinstance(call.func, ast.Name) or (b := sem.binding_at(call.func.id, call)) is None or b.is_param:
        return False
    value = b.value
    options = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
    return any(isinstance(o, (ast.Name, ast.Attribute)) and (sem.qualname(o) or "") in SYNCHRONIZE for o in options)


def _syncs_on_exit(ctx: Context, stmt: ast.With | ast.AsyncWith) -> bool:
    """A context manager of a class of this file whose ``__exit__`` synchronises the device, itself or through an
    attribute its ``__init__`` binds to a lambda that does (``self.synchronize = lambda: torch.cuda.synchronize(dev)``):
    ``with timers["forward"]:`` of ``timers = {k: LocalTimer(device) for k in (...)}``."""
    sem = ctx.semantic
    for item in stmt.items:
        made: ast.AST | None = item.context_expr
        for _ in range(3):
            if isinstance(made, ast.Subscript):
                made = made.value
            if isinstance(made, ast.Name) and (b := sem.binding_at(made.id, stmt)) is not None and not b.is_param:
                made = b.value
            if isinstance(made, (ast.DictComp, ast.Dict)):
                made = made.value if isinstance(made, ast.DictComp) else (made.values[0] if made.values else None)
            elif isinstance(made, (ast.ListComp, ast.GeneratorExp)):
                made = made.elt
        cls = sem.calls_index.classes.get(ctx.call_name(made) or "") if isinstance(made, ast.Call) else None
        if cls is None:
            continue
        lambdas = {t.attr for n in ast.walk(cls) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Lambda)
                   and any((ctx.call_name(c) or "") in SYNCHRONIZE for c in ast.walk(n.value) if isinstance(c, ast.Call))
                   for t in n.targets if isinstance(t, ast.Attribute) and dotted(t.value) == "self"}
        for f in cls.body:  # type: ignore[attr-defined]
            if isinstance(f, ast.FunctionDef) and f.name in ("__exit__", "__aexit__") and any(
                    isinstance(c, ast.Call) and ((ctx.call_name(c) or "") in SYNCHRONIZE or isinstance(c.func, ast.Attribute)
                                                 and dotted(c.func.value) == "self" and c.func.attr in lambdas)
                    for c in ast.walk(f)):
                return True
    return False


_HOST_ONLY = frozenset({"item", "tolist", "cpu", "numpy", "detach", "state_dict", "items", "keys", "values", "size", "dim", "numel", "nelement", "ndimension", "len",
                        "isinstance", "hasattr", "getattr", "callable", "float", "int", "print", "append", "format", "add_scalar", "add_scalars",
                        "set_postfix", "set_postfix_str", "set_description", "info", "debug", "warning",
                        "setdefault", "extend", "pop", "insert", "clear", "appendleft", "popleft"})
# (``metrics.setdefault(k, []).append(v.item())``, ``if len(accs) > 100: accs.pop(0)``: containers; a tensor has no ``pop``)
# (TensorBoard's writer; ``.cpu()``/``.numpy()``: copies to the host, GPU work only as reads)


_METER = lazy(r"(?i)meter|logger|avg|average|stat|writer")
_PROGRESS_BAR = lazy(r"(?i)^(pbar|p_bar|prog_bar|progress_bar|progressbar|bar)$")  # (``pbar(step=step, info=info)``: a
# progress bar drawn on the host, of the numbers it is handed)
_LOGGING_RECEIVER = lazy(r"(?i)wandb|logger|writer")  # ``wandb_logger._wandb.log({...})``: a logging call


def _queues_nothing(ctx: Context, call: ast.Call) -> bool:
    """A call that puts no work on the GPU: another read (``loss.item()``), a shape, a host meter's update
    (``loss_meter.update(loss.item(), n)``, ``meters[0].update(...)``, timm's ``losses_m = AverageMeter()``), a
    print. Between a timing sync and a read, it leaves the GPU idle."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if name in _HOST_ONLY or isinstance(func, ast.Name) and name in ("min", "max", "round", "enumerate", "zip", "range") \
            or _clock_call(ctx, call) or _PROGRESS_BAR.match(name or ""):
        return True  # (Python's ``min(min_lr, group["lr"])``; not ``loss.max()``, a reduction queued on the GPU)
    if (ctx.call_name(call) or "").startswith(("numpy.", "math.")):
        return True  # (``np.isnan(v.item())``, ``np.mean(lens)``: host arithmetic; a device tensor handed in is a read)
    if isinstance(func, ast.Name) and call.args and not call.keywords and all(_host_copy_name(ctx, a, call)
                                                                               for a in call.args):
        return True  # ``accuracy(out, y)`` of ``out = out.data.cpu().numpy()``: host arrays, no GPU work to queue
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and (
            _host_batch_element(ctx, func.value, call) or _host_copy_name(ctx, func.value, call)):
        return True  # ``y.view(-1, 1)`` of a batch element the loop never moved, ``hits.mean()`` of a host copy: the
        # host's work
    if isinstance(func, ast.Attribute) and _LOGGING_RECEIVER.search(dotted(func.value) or "") \
            and (name in ("log", "set_step") or name.startswith(("log", "record", "dump"))):
        return True  # (``logger.logkv_mean(k, v.mean().item())``: a logger's own bookkeeping; what it is handed it reads)
    if name != "update" or not isinstance(func, ast.Attribute):
        return False
    from torchdoctor.check.rules.host_values import tensor_value

    effects = _update_effects(ctx, call)
    if effects is not None and not effects & {"sync", "read"} and any(
            isinstance(a, (ast.Name, ast.Attribute)) and tensor_value(ctx, a, call)
            for a in [*call.args, *(k.value for k in call.keywords)]):
        return False  # (``avg.update(rpn_cls_loss=rpn_cls_loss)`` of a meter whose ``update`` reads nothing back: it
        # adds the tensors up on the GPU)
    receiver = func.value.value if isinstance(func.value, ast.Subscript) else func.value
    key = dotted(receiver) or ""
    if _METER.search(key):
        return True
    b = ctx.semantic.binding_at(key, call) if key else None
    made = b.value if b is not None and not b.is_param else None
    return isinstance(made, ast.Call) and bool(_METER.search((dotted(made.func) or "").rsplit(".", 1)[-1]))


def _update_effects(ctx: Context, call: ast.Call) -> frozenset[str] | None:
    """The effects of the ``update`` method a meter's call runs, when its class is of this file or of another module
    of the project; None when unknown (a parameter's: a logger handed in)."""
    sem = ctx.semantic
    funcs = sem.resolve(call)
    if funcs:
        return frozenset().union(*(sem.effects(f) for f in funcs))
    summary = sem.external(call)
    return frozenset(getattr(summary, "effects", ())) if summary is not None else None
