"""Stage 4 rules, inference: forwards outside evaluation loops that run with autograd on (TD401): a held-out
tensor's forward, an inference helper's (predict, sample, generate, evaluate...), and a model's forwards after its
``.eval()`` once nothing after it trains (``loop.py`` judges the evaluation loops themselves)."""

from __future__ import annotations

import ast

from torchdoctor.check.astutil import PLACEMENT_METHODS, call_argument, dotted, func_params, method_name, strip_methods
from torchdoctor.check.context import Context
from torchdoctor.check.patterns import lazy
from torchdoctor.check.registry import rule
from torchdoctor.check.semantic import flow, program
from torchdoctor.check.rules.loop import training_branch, volatile_note
from torchdoctor.check.semantic.call_records import INFERENCE_NAME
from torchdoctor.check.semantic.forwards import network_methods
from torchdoctor.check.semantic.frozen import built_without_grad, calls_a_frozen_model, methods_without_grad, \
    model_forward_records_nothing, quiet_self_calls
from torchdoctor.check.semantic.models import construction, model_has_no_parameters, submodule_names


# a held-out tensor: ``test_x``, ``x_test``, ``val_data``, ``test_images[:10]`` (not a loader's batch)
_HELDOUT = lazy(r"(?i)^((test|val|valid|validation|holdout|dev)_?(x|data|inputs?|images?|imgs|features|set|tokens|ids)"
                r"|(x|inputs?|images?|imgs|data)_?(test|val|valid|holdout))(_[a-z0-9]{1,2})?$")
# (``imgs_val_A``, ``imgs_val_lr``: one side of a paired set, a resolution)


def _heldout_arg(sem, call: ast.Call) -> str | None:
    for arg in call.args[:1]:
        base = strip_methods(arg, _AS_IS, subscripts=True)  # ``net(test_x.cuda())``, ``rnn(test_x[:10].view(-1, 28))``
        if isinstance(base, ast.Name) and _HELDOUT.match(base.id):
            return base.id
    return None


_AS_IS = frozenset({"to", "cuda", "view", "reshape", "unsqueeze", "squeeze", "float", "half", "permute", "flatten"})


@rule("TD401", ast.Module)
def heldout_forward(node: ast.AST, ctx: Context) -> None:
    """``if step % 50 == 0: test_output = cnn(test_x)`` in a training loop, or ``cnn(test_x[:10])`` once training
    is done: an evaluation on a held-out tensor (no loader, so no evaluation loop) with autograd on, whose result
    is never backpropagated. (In an evaluation loop the loop rule reports it.)"""
    sem = ctx.semantic
    if not any(_HELDOUT.match(key) for key in (*sem.bindings.by_key, *sem.names.from_imports)):
        return  # (no name the file binds or imports is a held-out set's: no call to look at)
    for call in sem.of_type(ast.Call):
        if not call.args or _heldout_arg(sem, call) is None or flow.consumer_kind(sem, call) != "model":  # type: ignore[attr-defined]
            continue
        if sem.under_no_grad(call) or sem.enclosing_loop(call, "eval") is not None or program.in_test(sem, call):
            continue
        if sem.feeds_backward(call) or _untrained_instance(sem, call) or _synthetic_probe(sem, call) \
                or _model_of_plain_tensors(sem, call) or _shape_only(sem, call) or _unit_test(sem, call):
            continue  # (``out = model(test_input); print(out.shape)``: a demo of the output's shape)
        ctx.report("TD401", call, f"evaluation forward `{ctx.name(call.func)}(...)` on held-out "  # type: ignore[attr-defined]
                   f"`{_heldout_arg(sem, call)}` runs with autograd on: it builds a graph it never uses"  # type: ignore[arg-type]
                   f"{volatile_note(ctx, call)}",
                   fix="run the evaluation under `with torch.no_grad():` (or `torch.inference_mode()`)")


def _graph_drawn(ctx: Context, call: ast.Call) -> bool:
    """``out = net(probe); make_dot(out.mean(), params=...)``: torchviz draws the recorded graph, which is the point."""
    sem = ctx.semantic
    stmt = sem.parent(call)
    names = {t.id for t in stmt.targets if isinstance(t, ast.Name)} if isinstance(stmt, ast.Assign) and stmt.value is call \
        else set()
    for draw in sem.calls_named("make_dot", "make_dot_from_trace"):
        if any(isinstance(n, ast.Name) and n.id in names and sem.binding_at(n.id, n) is not None
               and sem.binding_at(n.id, n).node is stmt for n in sem.subtree(draw)) or any(  # type: ignore[union-attr]
                a is call or sem.contains(a, call) for a in draw.args):
            return True
    return False


def _untrained_instance(sem, call: ast.Call) -> bool:
    """``test_rnn = RNN(1, 10, 2); out, h = test_rnn(test_input, None); print(out.size())``: a model made only to look
    at its output shapes (a tutorial's first cell); nothing trains or loads it, nothing else is handed it, so there is
    no held-out evaluation to speak of."""
    if not isinstance(call.func, ast.Name):
        return False
    name = call.func.id
    bindings = sem.bindings_of(name)
    if not bindings or not all(isinstance(b.value, ast.Call) and sem.call_kind(b.value, b.node) == "model"
                               and (method_name(b.value) is None or (sem.call_name(b.value) or "").startswith("torch.nn."))
                               for b in bindings):  # ``RNN(...)``, ``nn.RNN(...)``: made, not moved or loaded
        return False
    for read in sem.reads_of(name):
        up = sem.parent(read)
        if isinstance(up, ast.Call) and up.func is read:
            continue  # a forward
        if isinstance(up, ast.Attribute) and up.attr in ("eval", "to", "cuda", "cpu", "float", "double"):
            continue
        return False  # ``.parameters()``, ``.load_state_dict()``, ``train(test_rnn, ...)``: trained or loaded
    return True


_GRAPH_WORDS = lazy(r"requires_grad|Parameter|\bnn\.|torch\.nn|autograd")


def _model_of_plain_tensors(sem, call: ast.Call) -> bool:
    """``model = Adaline1(2); ...; model.forward(X_test)`` where ``class Adaline1:`` (no ``nn.Module``) keeps its
    weights as ``torch.zeros(...)`` and updates them by hand: nothing requires grad, no graph is recorded. The same
    class with ``requires_grad=True`` weights (or any ``nn`` layer) records one."""
    target = call.func.value if method_name(call) == "forward" else call.func  # type: ignore[attr-defined]
    b = sem.binding_at(target.id, call) if isinstance(target, ast.Name) else None
    made = b.value if b is not None and not b.is_param and b.index is None else None
    name = sem.call_name(made) if isinstance(made, ast.Call) else None
    cls = sem.calls_index.classes.get(name or "")
    if cls is None or name in sem.module_classes or any(dotted(base) not in (None, "object") for base in cls.bases):
        return False
    if _GRAPH_WORDS.search(sem.segment(cls)):
        return False
    return not any(isinstance(n, ast.Attribute) and n.attr in ("requires_grad", "requires_grad_")
                   and (dotted(n.value) or "").startswith(target.id + ".") for n in sem.of_type(ast.Attribute))


_PROBES = frozenset({"zeros", "ones", "empty", "full", "zeros_like", "ones_like"})  # (random data may be a made-up test set)


def _input_maker(sem, call: ast.Call) -> tuple[ast.AST | None, str]:
    """The call that made the forward's first argument, and its name (``test_x = Variable(torch.zeros(1, 3, 32,
    32)).to(dev)``: ``torch.zeros(...)``), when a binding of this file made it; else (None, "")."""
    base = strip_methods(call.args[0], _AS_IS, subscripts=True)
    b = sem.binding_at(base.id, call) if isinstance(base, ast.Name) else None
    value = b.value if b is not None and not b.is_param else None
    while isinstance(value, ast.Call) and (sem.call_name(value) or "") in ("torch.autograd.Variable", "Variable") and value.args:
        value = value.args[0]  # ``Variable(torch.zeros(1, 3, 256, 256))``
    value = strip_methods(value, PLACEMENT_METHODS) if value is not None else None  # ``torch.Tensor(2, 3).to(dev)``
    return (value, sem.call_name(value) or "") if isinstance(value, ast.Call) else (None, "")


def _synthetic_probe(sem, call: ast.Call) -> bool:
    """``test_x = torch.zeros(1, 3, 32, 32); print(net(test_x).shape)``: a made-up tensor run through the model to
    look at the output shape; held-out data is not made by ``torch.zeros``."""
    value, name = _input_maker(sem, call)
    if name in ("torch.Tensor", "torch.FloatTensor") and value.args and all(  # type: ignore[union-attr]
            isinstance(a, ast.Constant) and type(a.value) is int for a in value.args):  # type: ignore[union-attr]
        return True  # ``torch.Tensor(2, 3, 16, 16)``: an uninitialised tensor of that shape, like ``torch.empty``
    return name.startswith("torch.") and name.rsplit(".", 1)[-1] in _PROBES


def _unit_test(sem, call: ast.Call) -> bool:
    """``def test_gen_block(i, o): block = get_block(i, o); x = torch.randn(n, i); out = block(x); assert ...``: a
    unit test (a course notebook's), named so and asserting on the output of a forward over random data it made
    itself: no held-out evaluation."""
    func = sem.function_of(call)
    if func is None:
        return _checked_once_at_top_level(sem, call)
    name = _input_maker(sem, call)[1]
    return name.startswith("torch.") and name.rsplit(".", 1)[-1] in _RANDOM and func.name.startswith("test_") and any(  # type: ignore[attr-defined]
        isinstance(n, ast.Assert) and sem.function_of(n) is func for n in sem.of_type(ast.Assert))


_RANDOM = frozenset({"randn", "rand", "randint", "randn_like", "rand_like"})
_METADATA = frozenset({"shape", "size", "device", "dtype", "ndim"})


def _checked_once_at_top_level(sem, call: ast.Call) -> bool:  # type: ignore[no-untyped-def]
    """A notebook cell's check of an architecture: ``test_image = torch.randint(0, 256, (3, 100, 100)).to(device)``,
    ``test_out = net(test_image.unsqueeze(0))``, then ``test.assertLess(torch.norm(test_out - expected), 1e-5)`` (or
    a print of it): outside any loop, a random input read by such forwards only (moved again for the next cell's,
    ``test_image = test_image.to(device)``), not a toy test set, whose targets are made from it."""
    base = strip_methods(call.args[0], _AS_IS, subscripts=True)
    if not isinstance(base, ast.Name) or sem.loops_around(call):
        return False
    made, value = sem.binding_before_self_moves(base.id, call, _AS_IS)  # (``test_image = test_image.to(device)`` in
    # the next cell: the same random image)
    if not (isinstance(value, ast.Call) and (sem.call_name(value) or "").startswith("torch.")
            and (sem.call_name(value) or "").rsplit(".", 1)[-1] in _RANDOM) or sem.loops_around(made.node):
        return False
    return _untrained_since_built(sem, call) and _read_by_forwards_only(sem, base.id, made, 0)


def _untrained_since_built(sem, call: ast.Call) -> bool:  # type: ignore[no-untyped-def]
    """The model ``call`` runs was built (then maybe moved: ``net = net.to(device)``) with no backward or optimizer
    step between its construction and this forward: a freshly built network checked, not a trained one evaluated."""
    if not isinstance(call.func, ast.Name):
        return False
    b, value = sem.binding_before_self_moves(call.func.id, call, _AS_MOVED)
    if not isinstance(value, ast.Call):
        return False
    start, end = sem.index.pos.get(b.node, -1), sem.index.pos.get(call, -1)
    return not any(start < sem.index.pos.get(n, -1) < end for n in sem.calls_named("backward", "step"))


def _read_by_forwards_only(sem, name: str, made, depth: int) -> bool:  # type: ignore[no-untyped-def]
    """Every read of the binding ``made`` of ``name`` is an argument of a forward outside loops, a look at its metadata
    (``test_image.device``), or the move of a rebinding (``test_image = test_image.to(device)``) read so in turn."""
    for r in sem.reads_of(name):
        if sem.binding_at(name, r) is not made:
            continue
        up = sem.parent(r)
        if isinstance(up, ast.Attribute) and up.attr in _METADATA:
            continue
        stmt = sem.statement_of(r)
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                and stmt.targets[0].id == name and isinstance(strip_methods(stmt.value, _AS_IS), ast.Name):
            again = next((b for b in sem.bindings_of(name) if b.node is stmt), None)
            if depth < 3 and again is not None and again is not made and _read_by_forwards_only(sem, name, again, depth + 1):
                continue
            return False
        outer = next((c for c in sem.ancestors(r) if isinstance(c, ast.Call) and c.args
                      and strip_methods(c.args[0], _AS_IS, subscripts=True) is r), None)
        if outer is None or sem.loops_around(outer) or flow.consumer_kind(sem, outer) != "model":
            return False
    return True


def _returns_a_log_prob(sem, func: ast.AST, nodes: list[ast.AST]) -> bool:  # type: ignore[no-untyped-def]
    """Some ``return`` of ``func`` hands back a distribution's ``log_prob(...)`` (or a name bound to one in it): the
    graph of the forward is what a policy gradient backpropagates."""
    for ret in nodes:
        if not isinstance(ret, ast.Return) or ret.value is None:
            continue
        for value in ret.value.elts if isinstance(ret.value, ast.Tuple) else [ret.value]:
            if isinstance(value, ast.Name) and (b := sem.binding_at(value.id, ret)) is not None and not b.is_param \
                    and b.index is None and b.value is not None:
                value = b.value
            if isinstance(value, ast.Call) and method_name(value) == "log_prob":
                return True
    return False


@rule("TD401", ast.FunctionDef)
def inference_helper_with_autograd(func: ast.AST, ctx: Context) -> None:
    """``def predict_sentiment(text, model, ...): ... prediction = model(tensor)``: an inference helper (named so,
    training nothing) whose forward runs with autograd on, unless it is decorated with no_grad or every call of it
    in the file is under no_grad."""
    sem = ctx.semantic
    name = func.name  # type: ignore[attr-defined]
    cls = sem.class_of(func)  # a method of an agent or a trainer counts; one of a model class is its own API
    acting = bool(_ACTING.match(name)) and _returns_host_values(sem, func)
    if not (INFERENCE_NAME.match(name) or acting) \
            or name in ("predict_step", "validation_step", "test_step") \
            or (cls is not None and (cls.name in sem.module_classes or name == "forward")) \
            or program.in_test(sem, func) or name in ("evaluate_actions", "evaluate_action"):  # type: ignore[attr-defined]
        return  # (PPO's ``evaluate_actions``: the log-probabilities and values of the actions taken, for the loss;
        # ``predict_step``: a framework's hook, which its loop runs without autograd, as Lightning's does)
    if any(sem.guards.grad_call(d) in ("off", "maybe") for d in func.decorator_list):  # type: ignore[attr-defined]
        return
    outer = next((a for a in sem.ancestors(func) if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if outer is not None and not INFERENCE_NAME.match(outer.name):
        return  # ``def inference(model, ...)`` nested in NeRF's ``render_rays``: a step of that function, which trains
    nodes = sem.local_nodes(func)
    if "backward" in sem.region_effects(nodes) or "step" in sem.region_effects(nodes):
        return
    if any(isinstance(n, ast.Call) and sem.mode_call(n) == "eval" for n in nodes):
        return  # (its forwards after the ``.eval()`` are reported as such)
    sites = sem.call_sites(func)
    if any(sem.feeds_backward(c) for c in sites):
        return  # (``act = self.evaluate(obs)`` then ``loss.backward()``: SAC's reparameterised sample trains)
    if _differentiates(ctx, nodes) or any(_hands_an_input_asking_for_gradients(sem, site) for site in sites):
        return  # (``u = model(x); res = model.equation(x, u)``, a residual of du/dx: the graph is what it needs)
    if _returns_a_log_prob(sem, func, nodes):
        return  # (a policy's ``sample(state)`` returning ``action.item(), dist.log_prob(action)``: REINFORCE collects the
        # log-probabilities and backpropagates through them in ``learn``)
    if cls is not None and not acting and not _result_left_unused(sem, func, cls, sites) \
            and _training_hook(sem, func, cls, sites):
        return  # (a learner's ``predict()`` keeping ``self.preds``, then ``self.get_loss(); self.backward()``: the
        # training forward of its batch method; not an agent's ``_act()``, whose host action carries no graph)
    if sites and all((c := sem.class_of(s)) is not None and c.name in sem.module_classes for s in sites):  # type: ignore[attr-defined]
        return  # a model's own computation (Transformer-XL's ``sample_logits``, its sampled-softmax loss in ``forward``)
    found = []
    for call in nodes:
        if isinstance(call, ast.Call) and flow.consumer_kind(sem, call) == "model" and not sem.under_no_grad(call) \
                and sem.enclosing_loop(call, "eval") is None:
            target = call.func.value if method_name(call) == "forward" else call.func  # type: ignore[union-attr]
            if sem.expr_kind(target, call) not in ("model", "wrapper"):
                continue
            b = sem.binding_at(dotted(target) or "", call)
            if b is not None and b.node is not func and sem.scope_of(b.node) is func:
                continue  # ``up = nn.Upsample(...)`` made here: a layer used as a function, not the model
            found.append(call)
    helpers = [call for call in nodes if isinstance(call, ast.Call) and not sem.under_no_grad(call)
               and sem.enclosing_loop(call, "eval") is None and (helper := _shared_forward_helper(ctx, call)) is not None
               and helper is not func]
    if not found and not helpers or _callers_without_grad(ctx, func) \
            or cls is not None and not sites and _base_calls_without_grad(ctx, cls, name):
        return  # every caller runs it under no_grad, here or in another module (facenet's MTCNN.detect -> detect_face)
        # (asked last: it may read the other modules)
    if not sites and sem.project is not None and sem.project.callers_train_through(sem, func):  # type: ignore[attr-defined]
        return  # (``outputs = evaluate_standard(model, P, ...)`` in another module's training loop, then its loss's
        # backward: the helper is that training's forward too, named for its other use)
    for call in found:
        _report_inference(ctx, call, f" (in `{name}()`, which trains nothing)")
    for call in helpers:  # (``action = self.select_action(state)`` of an agent's ``test()``: the helper training uses)
        ctx.report("TD401", call, f"`{ctx.name(call.func)}(...)` runs the model with autograd on (in `{name}()`, which "
                   "trains nothing): it builds a graph it never uses",
                   fix="run it under `with torch.no_grad():` (or `torch.inference_mode()`)")


def _result_left_unused(sem, func: ast.AST, cls: ast.AST, sites: list[ast.Call]) -> bool:  # type: ignore[no-untyped-def]
    """``self.score_model(epoch)`` in the training method: it returns nothing, each call is a statement of its own,
    and what it keeps on ``self`` (``loss, self.train_z = self.model(...)``) reaches no method of the class that
    backpropagates, directly or through what the methods reading it keep in turn: its forward's graph reaches no
    backward."""
    if not sites or any(r.value is not None for r in sem.kinds.returns_of(func)) \
            or not all(isinstance(sem.parent(s), ast.Expr) for s in sites):
        return False
    def kept_by(f: ast.AST) -> set[str]:
        return {d for n in sem.local_nodes(f) if isinstance(n, ast.Assign) for t in n.targets
                for e in (t.elts if isinstance(t, ast.Tuple) else [t]) if (d := dotted(e)) is not None and d.startswith("self.")}

    methods = [f for c in sem.calls_index.lineage(cls) for f in c.body  # type: ignore[attr-defined]
               if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f is not func]
    tainted, grown = kept_by(func), True
    while grown:  # (``self.preds`` read by ``get_loss``, which keeps ``self.loss``, which ``backward()`` reads)
        grown = False
        for f in methods:
            if not any(isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load) and dotted(n) in tainted
                       for n in sem.local_nodes(f)):
                continue
            if "backward" in sem.effects(f):
                return False
            more = kept_by(f) - tainted
            if more:
                tainted |= more
                grown = True
    return True


_ACTING = lazy(r"(?i)^_*((get|select|choose|take|pick)_actions?|act)$")  # (an agent's acting step, on every environment
# step; a private one too: ``_act(state, eps)``)
_TO_HOST = frozenset({"item", "numpy", "tolist"})


def _returns_host_values(sem, func: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """Every ``return`` of an agent's ``get_action(state)`` hands back host values (``action.cpu().detach().numpy()``,
    ``probs.sample().item()``, or a helper of such: ``self.rescale_action(action)``): no tensor, and so no graph,
    leaves it (a REINFORCE ``select_action`` that keeps its log-probability for the loss hands one back, or stores it)."""
    def host(value: ast.AST | None, at: ast.AST, depth: int = 0) -> bool:
        if value is None or isinstance(value, ast.Constant):
            return True
        if isinstance(value, ast.Call) and (dotted(value.func) or "").endswith("action_space.sample"):
            return True  # (``return self.env.action_space.sample()``: gym's random action, a host value)
        if isinstance(value, ast.Tuple):
            return all(host(e, at, depth) for e in value.elts)
        cur = value
        while isinstance(cur, (ast.Call, ast.Subscript, ast.Attribute)):
            if isinstance(cur, ast.Call) and isinstance(cur.func, ast.Attribute) and cur.func.attr in _TO_HOST:
                return True
            cur = cur.func if isinstance(cur, ast.Call) else cur.value
            if isinstance(cur, ast.Attribute) and isinstance(cur.value, ast.Name) and cur.value.id == "self":
                break
        if isinstance(value, ast.Call) and depth < 2 and value.args and not value.keywords \
                and all(host(a, at, depth + 1) for a in value.args):
            return (dotted(value.func) or "").startswith(("self.", "np.", "numpy."))  # ``self.rescale_action(action)``
        if isinstance(value, ast.Name) and depth < 3:
            b = sem.binding_at(value.id, at)
            return b is not None and not b.is_param and b.index is None and sem.scope_of(b.node) is func \
                and host(b.value, b.node, depth + 1)
        return False

    returns = sem.kinds.returns_of(func)
    stores = any(isinstance(n, (ast.Assign, ast.AugAssign)) and any(
        isinstance(t, (ast.Attribute, ast.Subscript)) for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))
        or isinstance(n, ast.Call) and method_name(n) in ("append", "extend", "insert", "put", "push")
        for n in sem.local_nodes(func))
    return bool(returns) and not stores and all(host(r.value, r) for r in returns)


_TEST_FLAGS = {"test": True, "is_test": True, "eval": True, "evaluate": True, "inference": True, "training": False,
               "is_training": False, "train": False, "is_train": False}


@rule("TD401", keywords=tuple(_TEST_FLAGS))
def forward_told_to_test(node: ast.AST, ctx: Context) -> None:
    """``preds = model(ids, test=True)`` (or ``training=False``): a forward the caller asks for its test branch, run
    with autograd on and fed to no backward; it records a graph it never uses."""
    assert isinstance(node, ast.Call)
    told = [k for k in node.keywords if k.arg in _TEST_FLAGS and isinstance(k.value, ast.Constant)
            and k.value.value is _TEST_FLAGS[k.arg]]
    sem = ctx.semantic
    if not told or flow.consumer_kind(sem, node) != "model" or method_name(node) not in (None, "forward") \
            or any(q.split(".")[0] in ("tensorflow", "keras", "jax", "flax") for q in sem.imports.values()):
        return  # (Keras's ``model(x, training=False)`` is no torch forward)
    target = node.func.value if method_name(node) == "forward" else node.func  # type: ignore[attr-defined]
    if sem.expr_kind(target, node) not in ("model", "wrapper") or sem.under_no_grad(node) or sem.feeds_backward(node) \
            or not sem.loops_around(node):
        return  # (``print(noisy_layer(x, training=False))`` once, in a demo: no evaluation pass)
    func = sem.function_of(node)
    if func is not None and (sem.class_of(func) is not None and sem.class_of(func).name in sem.module_classes
                             or any(sem.guards.grad_call(d) in ("off", "maybe") for d in func.decorator_list)  # type: ignore[attr-defined]
                             or _callers_without_grad(ctx, func)):
        return  # (a model's own forward asking a part for its test branch: the caller's mode decides)
    _report_inference(ctx, node, f" (told `{told[0].arg}={told[0].value.value}`)")  # type: ignore[attr-defined]


def _training_hook(sem, func: ast.AST, cls: ast.AST, sites: list[ast.Call]) -> bool:  # type: ignore[no-untyped-def]
    """``func`` (``predict``) is a step hook of a learner or a callback: a method of the class or of a base that
    calls it also runs ``backward`` (``_one_batch``: ``self.predict(); self.get_loss(); self.backward()``), or the
    class's lineage defines the other hooks of such a step (``get_loss``, ``backward``), which a dispatcher runs by
    name (``getattr(cb, "predict")(learn)``)."""
    lineage = sem.calls_index.lineage(cls)
    for c in sites:
        caller = sem.function_of(c)
        if caller is not None and caller is not func and (owner := sem.class_of(caller)) is not None \
                and (owner in lineage or cls in sem.calls_index.lineage(owner)) and "backward" in sem.effects(caller, True):
            return True
    hooks = {f.name: f for c in lineage for f in c.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}  # type: ignore[attr-defined]
    if {"get_loss", "backward"} <= set(hooks):
        return True
    kept = {d for n in sem.local_nodes(func) if isinstance(n, ast.Assign) for t in n.targets
            if (d := dotted(t)) is not None and d.startswith("self.")}  # (``self.learn.preds = self.learn.model(x)``)
    loss = hooks.get("get_loss")
    return bool(kept) and loss is not None and any(
        isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load) and dotted(n) in kept for n in sem.local_nodes(loss))
    # (a callback's ``get_loss`` that reads what its ``predict`` kept: the two hooks of one training step)


def _shared_forward_helper(ctx: Context, call: ast.Call) -> ast.AST | None:
    """The function of this file ``call`` runs, when it runs a model with autograd on, unguarded, trains nothing
    and is no inference function itself (which is reported on its own): ``def select_action(self, state): s =
    torch.FloatTensor(state).to(self.device); return self.actor(s).detach().cpu().numpy()``, which training calls too."""
    sem = ctx.semantic
    funcs = sem.resolve(call)
    if len(funcs) != 1 or not isinstance(helper := funcs[0], ast.FunctionDef) or INFERENCE_NAME.match(helper.name) \
            or helper.name == "forward" or (cls := sem.class_of(helper)) is not None and cls.name in sem.module_classes:
        return None
    if any(sem.guards.grad_call(d) in ("off", "maybe") for d in helper.decorator_list):
        return None
    if isinstance(call.func, ast.Name) and (b := sem.binding_at(call.func.id, call)) is not None and b.node is not helper:
        return None  # (``[model(x) for model in sampled]``: the comprehension's ``model``, not ``def model``)
    nodes = sem.local_nodes(helper)
    if {"backward", "step"} & sem.region_effects(nodes) or any(isinstance(n, ast.Call) and sem.mode_call(n) for n in nodes):
        return None
    forwards = [n for n in nodes if isinstance(n, ast.Call) and (n.args or n.keywords) and flow.consumer_kind(sem, n) == "model"
                and sem.expr_kind(n.func.value if method_name(n) == "forward" else n.func, n) in ("model", "wrapper")
                and not model_has_no_parameters(sem, n.func, n)]
    # (``lifted_module()`` of a Bayesian guide: samples a network's weights, runs it on no input; ``softplus(s)`` of
    # ``softplus = nn.Softplus()``: a layer with no parameter records no graph of its own)
    if not any(not (sem.under_no_grad(n) or sem.loops_around(n)
                    or any("training" in sem.segment(t) for t, _ in sem.guards.branch_tests(n))) for n in forwards):
        return None  # (each forward under no_grad, in a loop of its own or run ``if self.training:``: no shared pass)
    if any(calls_a_frozen_model(sem, n) for n in forwards):
        return None
    return helper


_INFERENCE_METHODS = ("predict", "prediction", "inference", "infer", "sample", "generate", "forward")


@rule("TD401", calls=("eval", "train", "predict", "prediction", "inference", "infer", "generate", "sample"))
def inference_with_autograd(node: ast.AST, ctx: Context) -> None:
    """Forwards outside evaluation loops: after ``model.eval()`` in a function (or script) that trains
    nothing (``sample_images()``, an inference script), or through a model method named
    ``predict``/``inference``; the loop rule above covers evaluation loops."""
    sem = ctx.semantic
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return  # Python's own eval(...)
    if sem.mode_call(node) == "eval":
        if _handed_out_closure(sem, node) or _summary_helper(sem, node):
            return
        key = dotted(node.func.value) or _assigned_name(sem, node)
        said = "eval()" if node.func.attr == "eval" else "train(False)"
        forwards = _forwards_after_eval(ctx, node, key) if key else []
        if forwards and _every_path_without_grad(ctx, node):
            return  # (asked last: it may read the other modules)
        for call in forwards:
            _report_inference(ctx, call, f" (after `{key}.{said}`)")
        for site, name in _eval_mode_callers(ctx, node, key) if key else []:
            for call in _forwards_after_eval(ctx, site, name):
                _report_inference(ctx, call, f" (`{ctx.name(site.func)}()` put it in eval mode)")
    elif node.func.attr in ("predict", "prediction", "inference", "infer") and _inference_call(ctx, node) \
            and not _estimator(ctx, node.func.value, node) and not _framework_object(ctx, node.func.value, node):
        _report_inference(ctx, node, "")
    elif node.func.attr in ("generate", "sample") and _own_sampler(ctx, node) and _inference_call(ctx, node) \
            and not ctx.semantic.feeds_backward(node, through_detach=False) \
            and not _handed_back_to_training(ctx, node):  # (SAC's policy sample: its update)
        _report_inference(ctx, node, "")  # ``x = model.generate(label, shape)``: its loop of forwards records graphs


def _handed_back_to_training(ctx: Context, node: ast.Call) -> bool:
    """``policy_loss, entropies = self.calc_policy_loss(batch, weights)`` of the function around ``node``, then
    ``update_params(self.policy_optim, self.policy, policy_loss)``, a helper (here or in another module) that
    backpropagates what it is handed: the sample is the policy loss's training forward (SAC's ``learn``)."""
    sem = ctx.semantic
    func = sem.function_of(node)
    for site in sem.call_sites(func) if func is not None else []:
        stmt = sem.parent(site)
        if not (isinstance(stmt, ast.Assign) and stmt.value is site):
            continue
        names = {n.id for t in stmt.targets for n in sem.subtree(t) if isinstance(n, ast.Name)}
        for name in names:
            for r in sem.reads_of(name):
                call = sem.parent(r)
                if isinstance(call, ast.Call) and r in call.args and (b := sem.binding_at(name, r)) is not None \
                        and b.node is stmt and "backward" in sem.region_effects([call], deep=True):
                    return True
    return False


_SUMMARY_FUNC = lazy(r"(?i)summary|flops|macs|profil|complexity|count")


def _summary_helper(sem, node: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """A model summary or a FLOPs/activation count (``get_model_flops``, ``get_model_summary``): one forward on a
    dummy input for its hooks to record shapes or operations, like a shape probe."""
    func = sem.function_of(node)
    up = sem.parent(node)  # (``activation_model.eval().start_activation_count()``)
    if isinstance(up, ast.Attribute) and _SUMMARY_FUNC.search(up.attr):
        return True
    return func is not None and bool(_SUMMARY_FUNC.search(func.name)) and any(  # (its hooks record the layers: not a
        isinstance(n, ast.Call) and method_name(n) in ("register_forward_hook", "register_forward_pre_hook")  # TensorBoard
        for n in sem.subtree(func))  # summary of the losses, which a forward computes for real)


def _handed_out_closure(sem, node: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``def get_model_fn(model, train): def model_fn(x, t): model.eval(); return model(x, t); return model_fn``: the
    function handed out runs in its caller's grad mode (sampling under no_grad, a likelihood under enable_grad)."""
    func = sem.function_of(node)
    outer = sem.function_of(func) if func is not None else None
    return outer is not None and any(isinstance(r.value, ast.Name) and r.value.id == func.name  # type: ignore[union-attr]
                                     for r in sem.kinds.returns_of(outer))


def _handed_back_in_eval_mode(ctx: Context, eval_call: ast.Call, key: str) -> list[tuple[ast.Call, str]]:
    """``def build_classifier(path): clf = ...; clf.eval(); return clf`` and ``classifier = build_classifier(p)``: the
    calls of this file that bind the model a loader helper put in eval mode, with the name they bind it to."""
    sem = ctx.semantic
    func = sem.function_of(eval_call)
    if func is None or "." in key or sem.class_of(func) is not None or not any(
            isinstance(r.value, ast.Name) and r.value.id == key for r in sem.kinds.returns_of(func)):
        return []
    out = []
    for site in sem.call_sites(func):
        stmt = sem.parent(site)
        if isinstance(stmt, ast.Assign) and stmt.value is site and len(stmt.targets) == 1 \
                and isinstance(stmt.targets[0], ast.Name):
            out.append((site, stmt.targets[0].id))
    return out


def _eval_mode_callers(ctx: Context, eval_call: ast.Call, key: str) -> list[tuple[ast.Call, str]]:
    """The calls after which the model ``key`` is in eval mode in the caller's hands, with the name it has there:
    handed back (``clf = build_classifier(p)``) or left so (``train(model, 20)``), and one call further out
    (``model = train(data)``, whose ``eval_epoch(model, data)`` puts it in eval mode last)."""
    out = _handed_back_in_eval_mode(ctx, eval_call, key) + _left_in_eval_mode(ctx, eval_call, key)
    sem = ctx.semantic
    for site, name in list(out):
        func = sem.function_of(site)
        if func is None or _mode_set_later(sem, func, name, site):  # (put back in train mode further down)
            continue
        out += _handed_back_in_eval_mode(ctx, site, name) + _left_in_eval_mode(ctx, site, name)
    return out


def _mode_set_later(sem, func: ast.AST, key: str, after: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``func`` calls ``key.train()``/``key.eval()`` after ``after`` in its own body."""
    return any(isinstance(n, ast.Call) and sem.mode_call(n) is not None and isinstance(n.func, ast.Attribute)
               and dotted(n.func.value) == key and (n.lineno, n.col_offset) > (after.lineno, after.col_offset)  # type: ignore[attr-defined]
               for n in sem.local_nodes(func))


def _left_in_eval_mode(ctx: Context, eval_call: ast.Call, key: str) -> list[tuple[ast.Call, str]]:
    """``def train(model, epochs): for ep in ...: model.train(); ...; model.eval(); validate(model)``, its last mode
    call on the parameter an ``.eval()``, and ``train(net, 20)`` in this file: the calls, with the names they hand it
    (the model stays in eval mode after them: a forward over the test set next is an inference)."""
    sem = ctx.semantic
    func = sem.function_of(eval_call)
    if func is None or "." in key or sem.class_of(func) is not None or sem.function_of(func) is not None:
        return []
    params = func_params(func)  # type: ignore[arg-type]
    b = sem.binding_at(key, eval_call)
    if key not in params or b is None or not b.is_param or b.node is not func:
        return []
    if _mode_set_later(sem, func, key, eval_call) or any(isinstance(r.value, ast.Name) and r.value.id == key
                                                       for r in sem.kinds.returns_of(func)):
        return []  # (put back in train mode after; handed back: ``_handed_back_in_eval_mode``)
    out = []
    for site in sem.call_sites(func):
        if isinstance(up := sem.parent(site), ast.Expr) or isinstance(up, ast.Assign) and up.value is site:
            given = call_argument(site, func, key)  # type: ignore[arg-type]
            if isinstance(given, ast.Name):
                out.append((site, given.id))
    return out


def _estimator(ctx: Context, recv: ast.AST, at: ast.AST) -> bool:
    """``model.fit(x_train.numpy(), y_train.numpy())`` in the same function: a scikit-learn-style estimator
    (CatBoost, XGBoost...), whose ``predict`` is no torch forward."""
    sem = ctx.semantic
    key, func = dotted(recv), sem.function_of(at)
    return bool(key) and any(isinstance(c.func, ast.Attribute) and dotted(c.func.value) == key
                             and sem.function_of(c) is func for c in sem.calls_named("fit"))


def _own_sampler(ctx: Context, call: ast.Call) -> bool:
    """``model.generate(label, shape=...)`` of ``model = GatedPixelCNN(...)``, a model class of the project whose
    ``generate`` runs its layers (``logits = self.forward(x, label)`` for every pixel) and turns autograd off nowhere."""
    sem = ctx.semantic
    made = construction(sem, call.func.value, call)  # type: ignore[attr-defined]
    if not isinstance(made, ast.Call) or _fresh_in_a_demo(sem, call, made):
        return False
    method = call.func.attr  # type: ignore[attr-defined]
    cls = sem.calls_index.classes.get(sem.call_name(made) or "")
    if cls is not None:
        return (sem.call_name(made) or "") in sem.module_classes and method in network_methods(sem, cls) \
            and method not in methods_without_grad(sem, cls)
    written = dotted(made.func)
    return sem.project is not None and bool(written) \
        and method in sem.project.class_network_methods(sem, written) \
        and method not in sem.project.class_quiet_methods(sem, written)  # type: ignore[attr-defined]


def _fresh_in_a_demo(sem, call: ast.Call, made: ast.Call) -> bool:  # type: ignore[no-untyped-def]
    """``def test_joint_dist(...): p = JointDistribution(...); z, x = p.sample((2,)); print(x)``: a model built in the
    same function, which neither trains nor loads it there: a demo of the untrained model's shapes, no inference."""
    func = sem.function_of(call)
    recv = call.func.value  # type: ignore[attr-defined]
    b = sem.binding_at(recv.id, call) if isinstance(recv, ast.Name) else None
    if func is None or b is None or b.is_param or b.value is not made or sem.function_of(b.node) is not func:
        return False  # (``_, model = self.get_model(path)``: a helper's, loaded there)
    return not any(isinstance(n, ast.Call) and method_name(n) in ("load_state_dict", "load", "backward", "step", "fit")
                   for n in sem.local_nodes(func))


# Training frameworks whose model object wraps a network and runs its own prediction loop (Poutyne's
# ``Model.predict`` puts it in eval mode under ``no_grad``; skorch, fastai and Lightning do the same; the others are
# no torch at all).
_FRAMEWORKS = ("poutyne.", "skorch.", "fastai.", "pytorch_lightning.", "lightning.", "keras.", "tensorflow.",
               "sklearn.", "xgboost.", "lightgbm.", "catboost.")


def _framework_object(ctx: Context, recv: ast.AST, at: ast.AST) -> bool:
    """``model = pt.Model(network, optimizer, loss)`` (Poutyne), ``NeuralNetClassifier(module)`` (skorch), or a helper
    of the project that returns one (``model = get_model(net)``, whose ``model = pt.Model(...)`` it returns): a
    framework's wrapper, whose ``predict`` turns autograd off itself."""
    sem = ctx.semantic
    b = sem.binding_at(dotted(recv) or "", at)
    value = b.value if b is not None and not b.is_param and b.index is None else None
    if not isinstance(value, ast.Call):
        return False
    if (sem.call_name(value) or "").startswith(_FRAMEWORKS):
        return True
    written = dotted(value.func)
    origin = sem.project.returned_library_object(sem, written) if sem.project is not None and written else None
    return origin is not None and origin.startswith(_FRAMEWORKS)


_AS_MOVED = frozenset({"to", "cuda", "half", "float", "requires_grad_"})


def _assigned_name(sem, call: ast.Call) -> str | None:
    """``encoder = EncoderCNN(size).eval()`` (or ``.eval().to(device)``): the name the eval-mode model is bound to."""
    parent = sem.parent(call)
    while isinstance(parent, ast.Attribute) and parent.attr in _AS_MOVED and isinstance(up := sem.parent(parent), ast.Call) \
            and up.func is parent:
        parent = sem.parent(up)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
        return dotted(parent.targets[0])
    return None


def _forwards_after_eval(ctx: Context, eval_call: ast.Call, key: str) -> list[ast.Call]:
    """Calls of the model ``key`` after its ``.eval()`` in the same body, up to a ``key.train()``, while the
    body backpropagates nothing from the ``.eval()`` to that point (a training step with a BatchNorm frozen is not
    inference; a validation pass at the end of a function that trained first is: pygcn's ``train(epoch)``, a GAN's
    ``G.eval(); samples.append(G(fixed_z))`` at the end of each epoch)."""
    sem = ctx.semantic
    scope = sem.scope_of(eval_call)
    nodes = sem.local_nodes(scope) if not isinstance(scope, ast.Module) else sem.body(scope)
    start = (eval_call.lineno, eval_call.col_offset)  # type: ignore[attr-defined]
    region = [n for n in nodes if (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)) > start]
    end = next((n for n in region if isinstance(n, ast.Call) and sem.mode_call(n) == "train"
                and isinstance(n.func, ast.Attribute) and dotted(n.func.value) == key), None)
    if end is not None:
        region = [n for n in region if (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)) < (end.lineno, end.col_offset)]
    if "backward" in sem.region_effects(region) or "step" in sem.region_effects(region) or _differentiates(ctx, region):
        return []  # its eval-mode forwards may feed training
    out = []
    keys = {key} | {n.targets[0].id for n in nodes if isinstance(n, ast.Assign) and len(n.targets) == 1  # ``full = model``
                    and isinstance(n.targets[0], ast.Name) and dotted(n.value) == key}  # type: ignore[attr-defined]
    inside = {id(n) for n in region}
    for call in region:
        if not isinstance(call, ast.Call):
            continue
        func = call.func
        target = func.value if isinstance(func, ast.Attribute) and func.attr in _INFERENCE_METHODS else func
        if (dotted(target) in keys and _inference_call(ctx, call, evaluated=True) or _feature_method(ctx, call, keys)) \
                and not sem.feeds_backward(call) and not _rebound_since(ctx, dotted(target) or "", eval_call, call) \
                and not _shape_only(sem, call):
            out.append(call)
        elif funcs := _helpers_run_only_here(ctx, call, inside):  # ``out, y = self.score_part(k)`` after ``self.net.eval()``
            out += [n for f in funcs for n in sem.local_nodes(f) if isinstance(n, ast.Call) and (
                dotted(n.func) in keys and _inference_call(ctx, n, evaluated=True) or _feature_method(ctx, n, keys))
                and not sem.feeds_backward(n) and not training_branch(sem, n, f)]
        elif isinstance(func, ast.Attribute) and dotted(func.value) == key and _submodule(ctx, key, func.attr, call) \
                and not sem.under_no_grad(call) and not sem.feeds_backward(call) \
                and sem.enclosing_loop(call, "train") is None and sem.enclosing_loop(call, "eval") is None:
            out.append(call)  # ``drawn = model.decoder(noise)``: a submodule of the model put in eval mode
    return out


_SHAPES = frozenset({"shape", "size", "dtype", "ndim", "dim"})


def _shape_only(sem, call: ast.Call) -> bool:
    """``result = model(dummy_x); assert result.shape == (5, 1000)``: a forward run to look at the output's shape
    (every read of what it gives is ``.shape``/``.size()``), not an inference whose values are used."""
    up = sem.parent(call)
    if isinstance(up, ast.Attribute):
        return up.attr in _SHAPES
    if not (isinstance(up, ast.Assign) and len(up.targets) == 1):
        return False
    target = up.targets[0]  # (``out, out16, out32 = net(x); print(out.shape)``: each element, the same)
    names = [target] if isinstance(target, ast.Name) else target.elts if isinstance(target, ast.Tuple) else []
    if not names or not all(isinstance(n, ast.Name) for n in names):
        return False
    reads = [r for n in names for r in sem.reads_of(n.id) if sem.binding_at(n.id, r) is not None  # type: ignore[attr-defined]
             and sem.binding_at(n.id, r).node is up]  # type: ignore[attr-defined]
    return bool(reads) and all(_shape_read(sem, r) for r in reads)


def _shape_read(sem, read: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``out.shape``, ``out[-1].size()``: the read looks at the shape of the value or of one of its elements."""
    up = sem.parent(read)
    while isinstance(up, ast.Subscript) and up.value is read:
        read, up = up, sem.parent(up)
    if isinstance(up, ast.Attribute) and up.attr == "keys" and isinstance(call := sem.parent(up), ast.Call) \
            and call.func is up and not call.args:
        read, up = call, sem.parent(call)  # ``out.keys()``
    if isinstance(up, ast.Call) and isinstance(up.func, ast.Name) and up.func.id in ("sorted", "len", "list") \
            and up.args == [read] or isinstance(up, ast.For) and up.iter is read:
        return True  # ``for name in sorted(result): print(name, result[name].shape)``: the keys, then the shapes
    if isinstance(up, ast.comprehension) and up.iter is read and isinstance(up.target, ast.Name):
        comp = sem.parent(up)  # ``[f.shape[1] for f in feat_t[1:-1]]``: the shape of each element
        reads = [n for n in sem.subtree(comp) if isinstance(n, ast.Name) and n.id == up.target.id
                 and isinstance(n.ctx, ast.Load)]
        return bool(reads) and all(_shape_read(sem, n) for n in reads)
    return isinstance(up, ast.Attribute) and up.attr in _SHAPES


def _helpers_run_only_here(ctx: Context, call: ast.Call, inside: set[int]) -> list[ast.AST]:
    """The functions of this file ``call`` runs (a trainer's ``score_part``) when every call of them is in ``region``
    (after the ``.eval()``, before anything backpropagates) and they neither backpropagate nor step: their forwards
    of the evaluated model are inferences too. A helper training shares is judged by the loop rule at its call."""
    sem = ctx.semantic
    funcs = sem.resolve(call)
    if not funcs or any(f.name == "__init__" or not all(id(site) in inside for site in sem.call_sites(f))  # type: ignore[attr-defined]
                        for f in funcs) or any(
            sem.guards.grad_call(d) in ("off", "maybe") for f in funcs for d in f.decorator_list):  # type: ignore[attr-defined]
        return []
    for f in funcs:
        effects = sem.region_effects(sem.local_nodes(f))
        if "backward" in effects or "step" in effects:
            return []
    return funcs


def _rebound_since(ctx: Context, key: str, eval_call: ast.AST, call: ast.AST) -> bool:
    """``enc.eval(); ...; enc = nn.Sequential(...)``: the name holds a fresh module, in training mode, by ``call``."""
    sem = ctx.semantic
    if "." in key:
        return False
    b = sem.binding_at(key, call)
    for _ in range(4):  # (``encoder = encoder.to(device)``: the same module, moved)
        value = b.value if b is not None and not b.is_param else None
        while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in _AS_MOVED | {
                "eval", "train", "float", "half"}:
            value = value.func.value
        if not (isinstance(value, ast.Name) and value.id == key):
            break
        b = sem.binding_at(key, value)
    return b is not None and b is not sem.binding_at(key, eval_call) and not sem.contains(b.node, eval_call) \
        and b.pos > (eval_call.lineno, eval_call.col_offset)  # type: ignore[attr-defined]


_FEATURE_METHOD = lazy(r"(?i)^(extract|encode|embed|forward_|get_feat)|feature")


_PARTS_GETTER = lazy(r"(?i)(modules|layers|params|parameters|channels|dims?|names)$")  # ``get_feat_modules()``: parts, no forward


def _feature_method(ctx: Context, call: ast.Call, keys: set[str]) -> bool:
    """``self.model.extract_feature(data)`` of the model put in eval mode: a forward through another method, run with
    autograd on (not under no_grad, in no training or evaluation loop). A method of this file is judged by its body
    (it may turn autograd off itself); a model's own code runs in its caller's grad mode."""
    sem = ctx.semantic
    func = call.func
    return isinstance(func, ast.Attribute) and dotted(func.value) in keys and bool(_FEATURE_METHOD.search(func.attr)) \
        and bool(call.args or call.keywords) and not _PARTS_GETTER.search(func.attr) \
        and not sem.functions.get(func.attr) and ((cls := sem.class_of(call)) is None or cls.name not in sem.module_classes) \
        and sem.expr_kind(func.value, call) in ("model", "wrapper") and not sem.under_no_grad(call) \
        and sem.enclosing_loop(call, "train") is None and sem.enclosing_loop(call, "eval") is None


def _submodule(ctx: Context, key: str, attr: str, at: ast.AST) -> bool:
    """``attr`` is a submodule of the model ``key``, whose class here sets ``self.attr = nn.Linear(...)``."""
    sem = ctx.semantic
    made = construction(sem, ast.Name(id=key, ctx=ast.Load()), at) if "." not in key else None
    cls = sem.calls_index.classes.get(sem.call_name(made) or "") if made is not None else None
    if cls is None:  # (a model class of another module: ``model = VAE(...).cuda()``, then ``model.decoder(z)``)
        written = dotted(made.func) if isinstance(made, ast.Call) else None
        return sem.project is not None and bool(written) and attr in sem.project.class_submodules(sem, written)  # type: ignore[attr-defined]
    return attr in submodule_names(sem, cls)


def _differentiates(ctx: Context, nodes: list[ast.AST]) -> bool:
    """``torch.autograd.grad`` among these nodes or in a function of this file they call (a Hessian-vector
    product, a gradient penalty): the eval-mode forward's graph is used. So is it by ``model.equation(x, u)``, a
    method of a class of this file that the call names (its object a parameter: not resolved), which takes
    ``gradients(u, x)`` of the output with respect to the input (a physics-informed network's residual)."""
    sem = ctx.semantic
    calls = [n for n in nodes if isinstance(n, ast.Call)]
    called = [f for c in calls for f in sem.resolve(c)]
    called += [f for c in calls if isinstance(c.func, ast.Attribute) and not sem.resolve(c)
               for f in sem.functions.get(c.func.attr, ()) if sem.class_of(f) is not None]
    for call in calls + [n for f in called for n in sem.local_nodes(f) if isinstance(n, ast.Call)]:
        if ctx.call_name(call) in ("torch.autograd.grad", "torch.autograd.functional.hvp", "torch.autograd.functional.vjp") \
                or isinstance(call.func, ast.Name) and _GRADIENT_OF.match(call.func.id) and len(call.args) >= 2:
            return True
    return False


def _hands_an_input_asking_for_gradients(sem, call: ast.Call) -> bool:  # type: ignore[no-untyped-def]
    """``x.requires_grad_(True)`` (or ``x.requires_grad = True``) before ``inference(x, net)``: the caller wants
    gradients with respect to what it hands over (a physics-informed network's residual), which needs the graph."""
    names = {a.id for a in call.args if isinstance(a, ast.Name)}
    if not names:
        return False
    for n in sem.local_nodes(sem.scope_of(call)):
        if getattr(n, "lineno", 0) > call.lineno:
            continue
        if isinstance(n, ast.Call) and method_name(n) == "requires_grad_" and isinstance(n.func.value, ast.Name) \
                and n.func.value.id in names and not (n.args and isinstance(n.args[0], ast.Constant) and not n.args[0].value) \
                or isinstance(n, ast.Assign) and isinstance(t := n.targets[0], ast.Attribute) and t.attr == "requires_grad" \
                and isinstance(t.value, ast.Name) and t.value.id in names and isinstance(n.value, ast.Constant) and n.value.value is True:
            return True
    return False


_GRADIENT_OF = lazy(r"(?i)^(gradients?|grad|jacobian|hessian|laplacian|divergence)$")  # ``gradients(u, x)``: du/dx


def _inference_call(ctx: Context, call: ast.Call, evaluated: bool = False) -> bool:
    """Not under no_grad, not in a training loop nor in an evaluation loop (reported by the loop rule), and
    not a method of this file's classes that turns autograd off itself."""
    sem = ctx.semantic
    train = sem.enclosing_loop(call, "train")
    if sem.under_no_grad(call) or train is not None and not (evaluated and sem.under_step_guard(call, train)) or \
            sem.enclosing_loop(call, "eval") is not None:
        return False  # (after ``model.eval()`` in a training loop's ``if b % 100 == 0:`` block: a periodic evaluation)
    cls = sem.class_of(call)
    target = call.func.value if isinstance(call.func, ast.Attribute) and call.func.attr in _INFERENCE_METHODS \
        else call.func  # (``model.predict(x)``: the model; ``self.model(x)``: the attribute called)
    if cls is not None and cls.name in sem.module_classes:  # type: ignore[attr-defined]
        # a module's own method runs in its caller's grad mode (the caller's call is judged), unless it puts itself
        # in eval mode to serve a prediction: ``def infer(self, feats): self.eval(); ... self.forward(x)``
        func = sem.function_of(call)
        return evaluated and isinstance(target, ast.Name) and target.id == "self" and func is not None \
            and func.name != "forward" and not _callers_without_grad(ctx, func)  # type: ignore[attr-defined]
    if isinstance(call.func, ast.Attribute) and call.func.attr != "forward":
        funcs = sem.functions.get(call.func.attr, [])
        made = construction(sem, target, call) if len(funcs) > 1 else None
        cls_of_target = sem.calls_index.classes.get(sem.call_name(made) or "") if made is not None else None
        if cls_of_target is not None:  # (``plain.predict(x)`` of ``plain = Plain()``: Plain's own method only)
            funcs = [f for f in funcs if sem.class_of(f) is cls_of_target] or funcs
        for funcs in [funcs]:
            for f in funcs:
                if sem.class_of(f) is not None and (any(sem.guards.grad_call(d) in ("off", "maybe") for d in f.decorator_list)  # type: ignore[attr-defined]
                                                    or _forwards_under_no_grad(sem, f)):
                    return False
        if call.func.attr in ("sample", "generate") and not _own_sampler(ctx, call) \
                and not any(sem.class_of(f) is not None for f in sem.functions.get(call.func.attr, [])):
            return False  # a library's sampling method (often under no_grad itself): not judged (a function of the
            # file named so is no method of the model)
    if evaluated and (_loaded_module(ctx, target, call) or _built_evaluated_and_moved(ctx, target, call)
                      or _kept_moved(ctx, target, call)):
        return True
    if sem.expr_kind(target, call) not in ("model", "wrapper"):
        return False
    # a PyTorch module: built from torch.nn / a module class / a model library, or a module's own part
    # (a Keras or CoreML model has a predict() too)
    if construction(sem, target, call) is not None:
        return True
    b = sem.binding_at(dotted(target) or "", call)  # a parameter annotated with a module class, or that every caller
    # here hands a model, or (after its ``.eval()``) that this file puts in evaluation mode: ``detector.eval()``
    return b is not None and b.is_param and (sem.kinds.binding_kind(b) == "model"
                                             or evaluated and b.key in sem.bindings.param_receivers)


def _every_path_without_grad(ctx: Context, node: ast.AST) -> bool:
    """The function around ``node`` runs without autograd on every path that reaches it: each call site here is in a
    ``no_grad`` region or in a function reached that way, and a function no call here reaches is called under
    ``no_grad`` in the other modules (``forward_pass(net, x)`` of ``@torch.no_grad() def beam(...)`` elsewhere)."""
    sem = ctx.semantic
    func = sem.function_of(node)
    if func is None or sem.grad_mode(node) == "off" or sem.project is None:
        return False
    return _paths_without_grad(ctx, func, 0, set())


def _paths_without_grad(ctx: Context, func: ast.AST, depth: int, seen: set[ast.AST]) -> bool:
    sem = ctx.semantic
    if sem.class_of(func) is not None:  # a method: its calls through objects of its class, made in other modules
        return depth == 0 and not sem.call_sites(func) and sem.called_elsewhere_without_grad(func, by_class=True)
        # (``extractor(sents)`` of ``Extractor.__call__``, always under ``with torch.no_grad():`` in decode scripts)
    if depth > 3 or func in seen:
        return False
    seen.add(func)
    sites = sem.call_sites(func)
    if not sites:
        return sem.called_elsewhere_without_grad(func)
    return all(sem.grad_mode(s) == "off" or (outer := sem.function_of(s)) is not None and not sem.under_no_grad(s)
               and _paths_without_grad(ctx, outer, depth + 1, seen) for s in sites)


def _base_calls_without_grad(ctx: Context, cls: ast.AST, method: str) -> bool:
    """``method`` overrides one that a base class (of this file or of another module of the project) calls only with
    autograd off: lingua's ``generate_next_token`` of a generator whose base runs it from ``@torch.inference_mode()
    def generate``; a trainer's ``validate_on_batch``, called by the base's ``validate`` under ``torch.no_grad()``."""
    sem = ctx.semantic
    for base in cls.bases:  # type: ignore[attr-defined]
        written = dotted(base)
        if not written:
            continue
        here = sem.calls_index.classes.get(sem.names.qualname(base) or written)
        if here is not None:
            if method in quiet_self_calls(sem, here):
                return True
        elif sem.project is not None and sem.project.calls_without_grad(sem, written, method):  # type: ignore[attr-defined]
            return True
    return False


def _callers_without_grad(ctx: Context, func: ast.AST, depth: int = 0) -> bool:
    """Every call of the function (a method: through objects of its class) runs without autograd: in this file, or,
    when it has none here, in the other modules of the project (``self.critic.estimate(obs)`` of an agent, reached
    under ``torch.no_grad()``); a call here in a function whose own callers all run without it counts too, two
    levels up (``self.inference(model, img)`` in ``multi_scale_inference``, which ``testval`` calls under no_grad)."""
    sem = ctx.semantic
    sites = [s for s in sem.call_sites(func) if not sem.contains(func, s)]  # (its own recursive calls, or another
    # class's method of its name called inside it: their grad mode is the one it is called in)
    if sites:
        return all(sem.under_no_grad(s) or depth < 2 and (outer := sem.function_of(s)) is not None and outer is not func
                   and not any(sem.guards.grad_call(d) == "on" for d in outer.decorator_list)  # type: ignore[attr-defined]
                   and _callers_without_grad(ctx, outer, depth + 1) for s in sites)
    return sem.called_elsewhere_without_grad(func, by_class=sem.class_of(func) is not None)


_NOT_FORWARDS = frozenset({"eval", "train", "parameters", "named_parameters", "modules", "children", "to", "cuda", "cpu",
                           "state_dict", "zero_grad", "register_buffer", "apply", "half", "float", "requires_grad_"})


def _forwards_under_no_grad(sem, func: ast.AST, depth: int = 0) -> bool:  # type: ignore[no-untyped-def]
    """``def predict(self, ids): ... with torch.no_grad(): logits = self.forward(x)``: every call the method makes of
    the module or its parts (``self(...)``, ``self.forward(...)``, ``self.decoder(...)``) runs with autograd off."""
    calls = [n for n in sem.local_nodes(func) if isinstance(n, ast.Call) and (
        isinstance(n.func, ast.Name) and n.func.id == "self" or isinstance(n.func, ast.Attribute)
        and isinstance(n.func.value, ast.Name) and n.func.value.id == "self" and n.func.attr not in _NOT_FORWARDS)]
    if not calls:
        return False
    cls = sem.class_of(func)
    methods = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)} if cls is not None else {}  # type: ignore[attr-defined]
    return all(sem.under_no_grad(n) or depth < 2 and isinstance(n.func, ast.Attribute) and (own := methods.get(
        n.func.attr)) is not None and own is not func and _forwards_under_no_grad(sem, own, depth + 1) for n in calls)
    # (``def sample(self, x): return self._sample(x)``, whose ``_sample`` runs ``self(...)`` under no_grad)


def _loaded_module(ctx: Context, target: ast.AST, at: ast.AST) -> bool:
    """``net = ckpt["model"].half().to(device)`` with ``ckpt = torch.load(...)``, then ``net.eval()``: a module
    unpickled from a checkpoint (its class is nowhere in sight, but it was put in eval mode and moved, or brought to the
    host: ``model = ckpt["model"].cpu()``)."""
    sem = ctx.semantic
    node: ast.AST | None = target
    for _ in range(6):  # (``w = torch.load(p)``, ``model = w["model"]``, ``model = model.half().to(device)``)
        while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "to", "cuda", "cpu", "half", "float", "double", "eval", "fuse"):
            node = node.func.value
        if isinstance(node, ast.Subscript):
            node = node.value
        if isinstance(node, ast.Call):
            return ctx.call_name(node) == "torch.load"
        key = dotted(node) if node is not None else None
        b = sem.binding_at(key, at) if key else None
        if b is None or b.is_param or b.index is not None or b.value is None:
            return False
        node, at = b.value, b.node
    return False


def _kept_moved(ctx: Context, target: ast.AST, at: ast.AST) -> bool:
    """``self.model = model.to(self.device)`` in a trainer's ``__init__``, put in eval mode by the method that runs
    it: a torch module (a Keras model has ``predict`` too, but no ``.to(device)``)."""
    b = ctx.semantic.binding_at(dotted(target) or "", at)
    value = b.value if b is not None and not b.is_param and b.index is None else None
    return isinstance(value, ast.Call) and method_name(value) in ("to", "cuda") and ctx.semantic.is_device_move(value) \
        and ctx.semantic.expr_kind(value.func.value, b.node) in ("model", "wrapper")  # type: ignore[attr-defined, union-attr]


def _built_evaluated_and_moved(ctx: Context, target: ast.AST, at: ast.AST) -> bool:
    """``resnet = InceptionResnetV1(pretrained="vggface2").eval().to(device)``: a class of a model library, made, put
    in eval mode and moved in one expression: a module, though its class is not in sight."""
    b = ctx.semantic.binding_at(dotted(target) or "", at)
    node = b.value if b is not None and not b.is_param and b.index is None else None
    methods = set()
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _AS_MOVED | {"eval"}:
        methods.add(node.func.attr)
        node = node.func.value
    name = (dotted(node.func) or "").rsplit(".", 1)[-1] if isinstance(node, ast.Call) else ""
    return "eval" in methods and bool(methods & {"to", "cuda"}) and name[:1].isupper()


def _report_inference(ctx: Context, call: ast.Call, why: str) -> None:
    model = call.func.value if isinstance(call.func, ast.Attribute) and call.func.attr in _INFERENCE_METHODS else call.func
    method = call.func.attr if model is not call.func else "forward"  # type: ignore[attr-defined]
    if calls_a_frozen_model(ctx.semantic, call) or model_has_no_parameters(ctx.semantic, model, call) \
            or model_forward_records_nothing(ctx.semantic, model, call, method) \
            or method == "forward" and built_without_grad(ctx.semantic, call):
        return  # every parameter was set ``requires_grad = False``, or there is none, or forward turns autograd off
        # (as built: ``YOLOv3(..., trainable=False)``, whose forward returns ``self.inference(x)``, a no-grad method)
    if _graph_drawn(ctx, call):
        return
    name = ctx.name(call.func)
    ctx.report("TD401", call, f"inference forward `{name}(...)` runs with autograd on{why}: it builds a graph it never "
               f"uses{volatile_note(ctx, call)}",
               fix="run it under `with torch.no_grad():` (or `torch.inference_mode()`)")
