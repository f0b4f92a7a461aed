"""Stage 4 rules: train/eval modes, no_grad, zero_grad and loss handling (the evaluation loops' TD401 here; the
forwards outside them, in ``inference.py``)."""

from __future__ import annotations

import ast

from torchdoctor.check.astutil import call_argument, dotted, is_true, keyword, method_name, param_default
from torchdoctor.check.context import Context
from torchdoctor.check.registry import rule
from torchdoctor.check.rules.model import may_be_on_device
from torchdoctor.check.semantic import flow, program
from torchdoctor.check.semantic.forwards import NOT_FORWARDS, network_methods
from torchdoctor.check.semantic.frozen import built_without_grad, calls_a_frozen_model, calls_a_quiet_method, \
    flags_pick_a_branch_without_grad, model_differentiates, model_forward_records_nothing
from torchdoctor.check.semantic.models import DROPOUT_BN, class_has_dropout_or_bn, class_in_effect, construction, \
    first_input_device, has_dropout_or_bn, model_has_no_parameters

_LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


# ---- TD401 / TD402: evaluation forward passes ---------------------------------------------
def volatile_note(ctx: Context, call: ast.Call) -> str:
    """``; its input is `Variable(..., volatile=True)`, which turns autograd off only before PyTorch 0.4`` for a
    forward of PyTorch 0.3 code that meant to run without autograd; else "" (the finding holds on current PyTorch,
    where ``volatile`` does nothing, and the message says why the author may think otherwise)."""
    sem = ctx.semantic
    for arg in call.args[:1]:
        value = arg
        if isinstance(value, ast.Name) and (b := sem.binding_at(value.id, call)) is not None and not b.is_param \
                and b.index is None and b.value is not None:
            value = b.value
        if isinstance(value, ast.Call) and (ctx.call_name(value) or "").rsplit(".", 1)[-1] == "Variable" \
                and any(k.arg == "volatile" and is_true(k.value) for k in value.keywords):
            return "; its input is `Variable(..., volatile=True)`, which turns autograd off only before PyTorch 0.4"
    return ""


def _eval_forwards(ctx: Context, loop: ast.AST) -> list[ast.Call]:
    """The model calls an evaluation loop makes itself (not a nested evaluation loop's, not a submodule's)."""
    sem = ctx.semantic
    if sem.loop_kind(loop) != "eval":
        return []
    func = sem.function_of(loop)
    cls = sem.class_of(func) if func is not None else None
    if func is not None and func.name == "forward" and cls is not None and cls.name in sem.module_classes:  # type: ignore[attr-defined]
        return []  # (``[net(x) for net, x in zip(self.projs, (q, k, v))]`` in a model's own forward: its callers'
        # grad mode is the forward's)
    out = []
    for node in sem.body(loop):
        if not isinstance(node, ast.Call) or flow.consumer_kind(sem, node) != "model" and not _runs_the_network(ctx, node):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            cls = sem.class_of(node)
            if cls is not None and cls.name in sem.module_classes:
                continue  # a submodule inside forward()
        if sem.enclosing_loop(node, "eval") is loop:
            out.append(node)
    return out


def _runs_the_network(ctx: Context, call: ast.Call) -> bool:
    """``model.attribution(x)`` where the model's class (of this file, or of another module of the project) defines
    ``attribution`` to run its layers (``return self.body(x).softmax(-1)``): a forward by another name."""
    sem = ctx.semantic
    if not (isinstance(call.func, ast.Attribute) and isinstance(call.func.value, (ast.Name, ast.Attribute))) \
            or call.func.attr in NOT_FORWARDS:
        return False
    if sem.expr_kind(call.func.value, call) not in ("model", "wrapper"):
        return False
    made = construction(sem, call.func.value, call)
    if made is None:
        return False
    cls = sem.calls_index.classes.get(sem.call_name(made) or "")
    if cls is not None:
        return call.func.attr in network_methods(sem, cls)
    written = dotted(made.func)  # (``self.edge_model.process(images)`` of a model class of ``models.py``)
    return bool(written and sem.project is not None
                and call.func.attr in sem.project.class_network_methods(sem, written))  # type: ignore[attr-defined]


@rule("TD401", *_LOOPS)
def eval_with_autograd(loop: ast.AST, ctx: Context) -> None:
    """Evaluation forward pass with autograd on."""
    forwards = _eval_forwards(ctx, loop)
    if forwards and _callers_elsewhere_without_grad(ctx, loop):
        return
    for node in forwards:
        method = node.func.attr if isinstance(node.func, ast.Attribute) and ctx.semantic.expr_kind(
            node.func.value, node) in ("model", "wrapper") else "forward"
        model = node.func.value if method != "forward" or isinstance(node.func, ast.Attribute) \
            and node.func.attr == "forward" else node.func
        if ctx.semantic.under_no_grad(node) or calls_a_frozen_model(ctx.semantic, node) \
                or method == "forward" and built_without_grad(ctx.semantic, node) \
                or _input_asks_for_gradients(ctx, node, loop) \
                or model_has_no_parameters(ctx.semantic, model, node) \
                or model_forward_records_nothing(ctx.semantic, model, node, method) \
                or method == "forward" and (calls_a_quiet_method(ctx.semantic, node)
                                            or flags_pick_a_branch_without_grad(ctx.semantic, node)) \
                or model_differentiates(ctx.semantic, model, node):
            continue  # (a module with buffers only, ``Audio2Mel``: no parameter, no graph; a forward under no_grad)
        name = ctx.name(node.func)
        ctx.report("TD401", node, f"evaluation forward `{name}(...)` runs with autograd on: it builds a graph it never "
                   f"uses{volatile_note(ctx, node)}",
                   fix="wrap the evaluation loop in `with torch.no_grad():` (or `torch.inference_mode()`)")
    if not forwards:
        for call, helper in _eval_helper_forwards(ctx, loop):
            ctx.report("TD401", call, f"evaluation forward through `{ctx.name(call.func)}(...)` (which calls the model in "
                       f"`{helper}`) runs with autograd on: it builds a graph it never uses",
                       fix="wrap the evaluation loop in `with torch.no_grad():` (or `torch.inference_mode()`)")


def _input_asks_for_gradients(ctx: Context, node: ast.Call, loop: ast.AST) -> bool:
    """``img.requires_grad = True`` (or ``img.requires_grad_()``) before ``snet(img)`` in the loop: the evaluation takes
    gradients with respect to its input (a Sobolev distillation loss, a saliency map, an adversarial test), which
    needs the graph."""
    sem = ctx.semantic
    names = {a.id for a in node.args if isinstance(a, ast.Name)}
    if not names:
        return False
    for n in sem.body(loop):
        if sem.index.pos[n] >= sem.index.pos[node]:
            break
        if isinstance(n, ast.Assign) and isinstance(t := n.targets[0], ast.Attribute) and t.attr == "requires_grad" \
                and isinstance(t.value, ast.Name) and t.value.id in names and is_true(n.value) \
                or isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "requires_grad_" \
                and isinstance(n.func.value, ast.Name) and n.func.value.id in names \
                and not (n.args and isinstance(n.args[0], ast.Constant) and n.args[0].value is False):
            return True
    return False


def _callers_elsewhere_without_grad(ctx: Context, loop: ast.AST) -> bool:
    """The loop's function is called from other modules only, each time under ``torch.no_grad()``
    (``with torch.no_grad(): validate(hp, generator, loader)`` in the trainer)."""
    sem = ctx.semantic
    func = sem.function_of(loop)
    return func is not None and sem.called_elsewhere_without_grad(func)


def _eval_helper_forwards(ctx: Context, loop: ast.AST) -> list[tuple[ast.Call, str]]:
    """An evaluation loop that runs its model through a method or function of this file, shared with training
    (``pred = self._process_one_batch(batch)`` after ``self.model.eval()``), with autograd on in both."""
    sem = ctx.semantic
    if sem.loop_kind(loop) != "eval":
        return []
    func = sem.function_of(loop)
    cls = sem.class_of(func) if func is not None else None
    if func is not None and func.name == "forward" and cls is not None and cls.name in sem.module_classes:  # type: ignore[attr-defined]
        return []  # (``[net(x) for net, x in zip(self.projs, (q, k, v))]`` in a model's own forward: its callers'
        # grad mode is the forward's)
    out = []
    for node in sem.body(loop):
        if not isinstance(node, ast.Call) or sem.under_no_grad(node) or sem.enclosing_loop(node, "eval") is not loop:
            continue
        helpers = sem.resolve(node)
        if len(helpers) != 1:
            continue
        helper = helpers[0]
        cls = sem.class_of(helper)
        if cls is not None and cls.name in sem.module_classes:
            continue  # a model's own method: its calls are submodules
        if any(isinstance(n, ast.Call) and flow.consumer_kind(sem, n) == "model" and not sem.under_no_grad(n)
               and not training_branch(sem, n, helper) for n in sem.local_nodes(helper)):
            out.append((node, helper.name))  # type: ignore[attr-defined]
    return out


def training_branch(sem, node: ast.AST, func: ast.AST) -> bool:
    """``if model.training: out = model(x)`` (``else: with torch.no_grad(): out = model(x)``): the forward with
    autograd on runs only while the model trains."""
    child = node
    for up in sem.ancestors(node):
        if up is func:
            return False
        if isinstance(up, ast.If):
            test, negated = up.test, False
            if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                test, negated = test.operand, True
            if isinstance(test, ast.Attribute) and test.attr == "training":
                return any(child is s for s in (up.orelse if negated else up.body))
        child = up
    return False


@rule("TD402", *_LOOPS)
def eval_in_train_mode(loop: ast.AST, ctx: Context) -> None:
    """Evaluation with the model still in training mode."""
    sem = ctx.semantic
    forwards = _eval_forwards(ctx, loop)
    handed = [] if forwards else _models_run_by_helpers(ctx, loop)
    if not forwards and not handed or _eval_mode_set(ctx, loop):
        return
    for node in [*forwards, *(call for call, _ in handed)]:
        model = next((m for call, m in handed if call is node), None)
        func = model if model is not None else node.func.value if method_name(node) == "forward" \
            or _runs_the_network(ctx, node) else node.func  # type: ignore[union-attr]
        if has_dropout_or_bn(sem, func, node) is not True or _loaded_in_eval_mode(ctx, func, loop) \
                or sem.guards.on_cpu_branch(node) or _eval_just_before(ctx, loop, node, func) \
                or _dropout_left_off(ctx, func, node) or _bare_dropout(ctx, func, node):
            continue
        name = ctx.name(func)
        ctx.report("TD402", node, f"`{name}` evaluates in training mode: dropout/batch-norm stay active (no `{name}.eval()`)",
                   fix=f"call `{name}.eval()` before the evaluation loop (and `{name}.train()` before training again)")


def _models_run_by_helpers(ctx: Context, loop: ast.AST) -> list[tuple[ast.Call, ast.AST]]:
    """``test_loss = calc_loss(model, x, y)`` in an evaluation loop, of a function of this file that calls the model it
    is handed (``return mse_loss(model(x), y)``): the call and the model given."""
    sem = ctx.semantic
    if sem.loop_kind(loop) != "eval":
        return []
    out, moded = [], set()
    for node in sem.body(loop):
        if not isinstance(node, ast.Call) or sem.enclosing_loop(node, "eval") is not loop:
            continue
        helpers = sem.resolve(node)
        if len(helpers) != 1 or not isinstance(helper := helpers[0], ast.FunctionDef) or sem.class_of(helper) is not None:
            continue
        params = [a.arg for a in helper.args.posonlyargs + helper.args.args]
        for i, arg in enumerate(node.args):
            if i >= len(params) or not isinstance(arg, ast.Name) or sem.expr_kind(arg, node) not in ("model", "wrapper"):
                continue
            calls = [c for c in sem.local_nodes(helper) if isinstance(c, ast.Call)]
            if any(sem.mode_call(c) is not None and dotted(c.func.value) == params[i] for c in calls):  # type: ignore[attr-defined]
                moded.add(arg.id)  # (``def val_loss(x, y, model): model.eval(); ...``: the helper sets the mode itself,
                break  # for the other calls of the loop too)
            if any(isinstance(c.func, ast.Name) and c.func.id == params[i]
                   or method_name(c) == "forward" and dotted(c.func.value) == params[i] for c in calls):  # type: ignore[attr-defined]
                out.append((node, arg))
                break
    return [(node, arg) for node, arg in out if arg.id not in moded]  # type: ignore[attr-defined]


def _bare_dropout(ctx: Context, func: ast.AST, call: ast.Call) -> bool:
    """``noise = nn.Dropout(0.5)`` applied on its own (``noise(torch.ones(x.shape)) * x``): a dropout layer that is no
    part of a model, used to corrupt the inputs (a denoising autoencoder's test pass): its training mode is the point."""
    value = construction(ctx.semantic, func, call)
    return value is not None and (ctx.semantic.call_name(value) or "") in (
        "torch.nn.Dropout", "torch.nn.Dropout1d", "torch.nn.Dropout2d", "torch.nn.Dropout3d", "torch.nn.AlphaDropout")


def _dropout_left_off(ctx: Context, func: ast.AST, call: ast.Call) -> bool:
    """``def forward(self, x, is_training=False): ... if is_training: h = self.dropout(h)``, called as ``model(x)``: the
    class of this file applies its dropout only when the caller asks for it, and this call does not (it holds no
    batch-norm, whose statistics follow the mode whatever the call says)."""
    sem = ctx.semantic
    value = construction(sem, func, call)
    name = (sem.call_name(value) or "") if value is not None else ""
    cls = (class_in_effect(sem, name, value) or sem.calls_index.classes.get(name)) if name in sem.module_classes else None
    forward = next((f for f in getattr(cls, "body", ()) if isinstance(f, ast.FunctionDef) and f.name == "forward"), None)
    if cls is None or forward is None:
        return False
    positional = [*forward.args.posonlyargs, *forward.args.args]
    flags = {a.arg for a in [*positional, *forward.args.kwonlyargs]
             if isinstance(d := param_default(forward, a.arg), ast.Constant) and d.value in (False, None)}
    if not flags or any(dotted(b) in sem.module_classes for b in cls.bases):  # type: ignore[attr-defined]
        return False  # (a base class of the file may hold and apply dropout of its own)
    held = {t.attr for n in sem.subtree(cls) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
            and DROPOUT_BN.search(dotted(n.value.func) or "") for t in n.targets if isinstance(t, ast.Attribute)}
    for n in sem.subtree(cls):
        word = n.attr if isinstance(n, ast.Attribute) else n.id if isinstance(n, ast.Name) else ""
        if not word or not DROPOUT_BN.search(word) and word not in held:
            continue
        method = sem.function_of(n)
        if "orm" in word or method is None or method.name not in ("__init__", "forward"):  # type: ignore[attr-defined]
            return False  # batch-norm, or dropout used by another method
        if method is forward and not _under_flag(sem, n, flags):
            return False  # dropout the forward always applies
    if any(u != name and u in sem.module_classes and class_has_dropout_or_bn(sem, u)
           for u in (dotted(c.func) for c in sem.subtree(cls) if isinstance(c, ast.Call))):
        return False  # a submodule of the file that has dropout of its own
    index = {a.arg: i - 1 for i, a in enumerate(positional)}  # (``self`` is not passed)
    asked = [k.value for k in call.keywords if k.arg in flags] + \
        [a for f in flags if f in index and 0 <= index[f] < len(call.args) for a in [call.args[index[f]]]]
    return not any(k.arg is None for k in call.keywords) and not any(isinstance(a, ast.Starred) for a in call.args) \
        and all(isinstance(a, ast.Constant) and a.value in (False, None) for a in asked)


def _under_flag(sem, node: ast.AST, flags: set[str]) -> bool:  # type: ignore[no-untyped-def]
    """``node`` runs only in the body of an ``if flag:`` (``flag`` one of the forward's off-by-default parameters)."""
    child = node
    for up in sem.ancestors(node):
        if isinstance(up, ast.If) and isinstance(up.test, ast.Name) and up.test.id in flags and any(child is s for s in up.body):
            return True
        child = up
    return False


def _eval_just_before(ctx: Context, loop: ast.AST, forward: ast.AST, model: ast.AST) -> bool:
    """``for x, y in batches: model.eval(); out = model(x); model.train()``: put in eval mode in the pass itself,
    before the forward."""
    sem, key = ctx.semantic, dotted(model)
    return key is not None and any(
        isinstance(n, ast.Call) and sem.mode_call(n) == "eval" and dotted(n.func.value) == key  # type: ignore[attr-defined]
        and (n.lineno, n.col_offset) < (forward.lineno, forward.col_offset) for n in sem.body(loop))  # type: ignore[attr-defined]


def _loaded_in_eval_mode(ctx: Context, func: ast.AST, loop: ast.AST) -> bool:
    """``model = GPT2LMHeadModel.from_pretrained(name)``: Hugging Face hands the model back in eval mode (so does an
    in-file helper that returns ``net.eval()``), and nothing in the loop's function switches it to training."""
    sem = ctx.semantic
    key = dotted(func)
    b = sem.binding_at(key, loop) if key else None
    if b is None or b.value is None or b.is_param:
        return False
    if not any(isinstance(n, ast.Call) and method_name(n) == "from_pretrained" for n in sem.subtree(b.value)) \
            and not _handed_back_in_eval_mode(sem, b):
        return False
    return not _mode_calls(ctx, sem.scope_of(loop), "train")


def _handed_back_in_eval_mode(sem, b) -> bool:  # type: ignore[no-untyped-def]
    """``model, hist = fit(model, xs, ys)`` where every ``return`` of ``fit`` is ``net.eval(), hist``, or hands back a
    name the function put in eval mode and never back (``model.eval()`` then ``return rec_graph, model``)."""
    funcs = sem.resolve(b.value) if isinstance(b.value, ast.Call) else []
    values = [(f, sem.kinds.returned_values(f, b.index)) for f in funcs]

    def evaluated(f: ast.AST, x: ast.AST) -> bool:
        if isinstance(x, ast.Call) and sem.mode_call(x) == "eval":
            return True
        modes = [sem.mode_call(c) for c in sem.local_nodes(f) if isinstance(c, ast.Call) and isinstance(x, ast.Name)
                 and isinstance(c.func, ast.Attribute) and dotted(c.func.value) == x.id and sem.mode_call(c)]
        return bool(modes) and all(m == "eval" for m in modes)

    return bool(funcs) and all(v and all(evaluated(f, x) for x in v) for f, v in values)


def _eval_mode_set(ctx: Context, loop: ast.AST) -> bool:
    """An eval-mode call in the loop's function that can run before it, or in a function calling it
    (in this file or, through the project index, in another)."""
    sem = ctx.semantic
    scope = sem.scope_of(loop)
    if any(_reaches(ctx, n, loop) for n in _mode_calls(ctx, scope, "eval")):
        return True
    if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and dotted(n.func.value) == "self"
           and _reaches(ctx, n, loop) and any(_mode_calls(ctx, f, "eval") for f in sem.resolve(n) if f is not scope)
           for n in sem.local_nodes(scope)):
        return True  # (``self.set_mode(mode="evaluation")``, whose loop over ``self.model_dict`` calls ``model.eval()``:
        # a method of the object that holds the models; not a helper handed some other model)
    seen: set[int] = set()
    todo = [scope]
    while todo:
        f = todo.pop()
        if id(f) in seen or not isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        seen.add(id(f))
        for site in sem.call_sites(f):
            caller = sem.scope_of(site)
            if _mode_calls(ctx, caller, "eval") or any(
                    isinstance(a, ast.Name) and (b := sem.binding_at(a.id, site)) is not None and not b.is_param
                    and isinstance(b.value, ast.Call) and _handed_back_in_eval_mode(sem, b) for a in site.args):
                return True  # (``rec, model = load_model(args)``, which ends ``model.eval()``, then ``infer(loader, model)``)
            todo.append(caller)
        if sem.project is not None and sem.project.callers_effect(sem, f, "eval"):  # type: ignore[attr-defined]
            return True  # (a method too: ``learner.model.eval()`` then ``learner.infer(xs)`` in another module)
    return False


def _mode_calls(ctx: Context, scope: ast.AST, mode: str) -> list[ast.Call]:
    sem = ctx.semantic
    return [n for n in sem.calls_named("eval", "train") if sem.scope_of(n) is scope and sem.mode_call(n) == mode]
    # (``model.train(False)`` puts it in eval mode)


def _reaches(ctx: Context, call: ast.AST, loop: ast.AST) -> bool:
    """The mode call can run before ``loop``: earlier in the source, or in a loop around both
    (a final ``model.eval()`` for the test set does not cover the validation loop above it)."""
    if (call.lineno, call.col_offset) < (loop.lineno, loop.col_offset):  # type: ignore[attr-defined]
        return True
    sem = ctx.semantic
    around = set(sem.loops_around(loop))
    return any(a in around for a in sem.loops_around(call))


# ---- TD403 -----------------------------------------------------------------------------------
@rule("TD403", calls=("eval", "train"))
def eval_never_undone(node: ast.AST, ctx: Context) -> None:
    """model.eval() inside the epoch loop and model.train() never called again before training."""
    sem = ctx.semantic
    if sem.mode_call(node) != "eval":
        return
    recv = node.func.value  # type: ignore[attr-defined]
    if has_dropout_or_bn(sem, recv, node) is not True:
        return
    loops = _training_loops_around(ctx, node)
    if not loops or any("train" in loop_effects(ctx, loop, deep=True) or _on_last_pass(ctx, loop, site)
                        or _optimises_inputs_only(ctx, loop) or _single_pass(loop) for loop, site in loops) \
            or _given_a_fresh_copy(ctx, recv, node):
        return
    name = ctx.name(recv)
    ctx.report("TD403", node, f"`{name}.eval()` is never undone: the next training pass runs in eval mode "
               "(no `.train()` in the loop)", fix=f"call `{name}.train()` at the start of each epoch")


def _single_pass(loop: ast.AST) -> bool:
    """``for epoch in range(1):``: one pass, so no training pass follows the evaluation (a notebook's demo run)."""
    it = getattr(loop, "iter", None)
    return isinstance(it, ast.Call) and dotted(it.func) == "range" and len(it.args) == 1 \
        and isinstance(it.args[0], ast.Constant) and it.args[0].value == 1


def loop_effects(ctx: Context, loop: ast.AST, deep: bool = False) -> frozenset[str]:
    """What one pass of the loop does, through every function of this file it calls (``deep``: and of
    the project's other modules)."""
    sem = ctx.semantic
    return sem.cached(("loop_effects", loop, deep), lambda: sem.region_effects(sem.body(loop), deep))  # type: ignore[no-any-return]


def _given_a_fresh_copy(ctx: Context, recv: ast.AST, node: ast.AST) -> bool:
    """``def evaluate(model, ...): model.eval()`` whose every call passes a model made inside the loop that calls it
    (``eval_model = Yolov4(...); eval_model.load_state_dict(model.state_dict()); evaluate(eval_model, ...)``): the
    evaluation copy is put in eval mode, the model that trains never is."""
    sem = ctx.semantic
    func = sem.function_of(node)
    b = sem.binding_at(dotted(recv) or "", node) if isinstance(recv, ast.Name) else None
    if func is None or b is None or not b.is_param or b.node is not func:
        return False
    sites = sem.call_sites(func)
    for site in sites:
        arg = call_argument(site, func, recv.id)  # type: ignore[attr-defined]
        made = sem.binding_at(arg.id, site) if isinstance(arg, ast.Name) else None
        loop = next(iter(sem.loops_around(site)), None)
        if made is None or made.is_param or not isinstance(made.value, ast.Call) or loop is None \
                or not sem.contains(loop, made.node) or method_name(made.value) is not None \
                and ctx.call_name(made.value) != "copy.deepcopy":
            return False
    return bool(sites)


def _optimises_inputs_only(ctx: Context, loop: ast.AST) -> bool:
    """Every optimizer the loop steps was built on tensors, not on a model's parameters (``opt =
    torch.optim.SGD([delta], lr=0.1)``: an adversarial patch, a style-transfer image): the models stay frozen,
    in eval mode on purpose."""
    sem = ctx.semantic
    steps = [n for n in sem.body(loop) if isinstance(n, ast.Call) and sem.is_optimizer_step(n)]
    if not steps:  # ``for u in units: pics.append(dream(net, u))``: the steps of the function it calls
        steps = [n for c in sem.body(loop) if isinstance(c, ast.Call) for f in sem.resolve(c)
                 for n in sem.local_nodes(f) if isinstance(n, ast.Call) and sem.is_optimizer_step(n)]
    if not steps:
        return False
    for step in steps:
        recv = step.func.value if isinstance(step.func, ast.Attribute) else None
        b = sem.binding_at(recv.id, step) if isinstance(recv, ast.Name) else None
        made = b.value if b is not None and not b.is_param else None
        first = made.args[0] if isinstance(made, ast.Call) and made.args else None
        if not (isinstance(first, (ast.List, ast.Tuple)) and first.elts
                and all(isinstance(e, ast.Name) and sem.expr_kind(e, made) not in ("model", "wrapper") for e in first.elts)):
            return False
    return True


def _on_last_pass(ctx: Context, loop: ast.AST, site: ast.AST) -> bool:
    """``if i == len(steps) - 1: model.eval(); validate(...)`` (or a branch that ends with ``break``) inside a
    step loop whose enclosing epoch loop calls ``.train()`` again: no training step follows the evaluation."""
    sem = ctx.semantic
    outer = [a for a in sem.loops_around(loop) if a is not loop]
    if not any("train" in loop_effects(ctx, a, deep=True) for a in outer):
        return False
    targets = {n.id for n in sem.subtree(loop.target) if isinstance(n, ast.Name)} \
        if isinstance(loop, (ast.For, ast.AsyncFor)) else set()
    for branch in sem.ancestors(site):
        if branch is loop:
            return False
        if not isinstance(branch, ast.If) or not sem.contains(loop, branch):
            continue
        if isinstance(branch.body[-1], ast.Break) and any(sem.contains(s, site) for s in branch.body):
            return True
        test = branch.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
            sides = [test.left, test.comparators[0]]
            names = {n.id for side in sides for n in ast.walk(side) if isinstance(n, ast.Name)}
            if names & targets and any(isinstance(n, ast.Call) and dotted(n.func) == "len"
                                       for side in sides for n in ast.walk(side)):
                return True  # ``i == len(steps) - 1``, ``i + 1 == len(loader)``
    return False


def _training_loops_around(ctx: Context, node: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
    """The innermost loops that train and run ``node`` (directly, or through the function holding it), each with
    the statement in it that runs ``node`` (``node`` itself, or a call of its function)."""
    sem = ctx.semantic
    out: list[tuple[ast.AST, ast.AST]] = []
    todo: list[tuple[ast.AST, int]] = [(node, 0)]
    while todo:
        site, depth = todo.pop()  # (a loop that backpropagates but steps no optimizer reads gradients: a saliency map)
        loop = next((a for a in sem.loops_around(site) if {"backward", "step"} <= loop_effects(ctx, a, deep=True)),
                    None)
        if loop is not None:
            out.append((loop, site))
            continue
        func = sem.function_of(site)
        if func is not None and depth < 3:
            todo.extend((s, depth + 1) for s in sem.call_sites(func))
    return out


# ---- TD404 -----------------------------------------------------------------------------------
@rule("TD404", ast.For, ast.AsyncFor, ast.While)
def gradients_never_zeroed(node: ast.AST, ctx: Context) -> None:
    """backward() + step() in a loop with no zero_grad()."""
    sem = ctx.semantic
    effects = loop_effects(ctx, node)
    if not {"backward", "step"} <= effects or "zero_grad" in effects or "zero_grad" in loop_effects(ctx, node, deep=True):
        return
    if _fresh_autograd_context(ctx, node):
        return
    body = sem.body(node)
    inner = [n for n in body if isinstance(n, (ast.For, ast.AsyncFor, ast.While))]
    if any({"backward", "step"} <= loop_effects(ctx, i) for i in inner):
        return  # the inner loop is the one that trains
    backward = next((n for n in body if sem.is_backward_call(n)), None)
    step = next((n for n in body if sem.is_optimizer_step(n)), None)
    if step is not None and _fresh_parameters_each_pass(ctx, node, step):
        return
    what = f"`{ctx.name(backward)}` and `{ctx.name(step)}`" if backward is not None and step is not None \
        else "backward() and an optimizer step (through the functions it calls)"
    ctx.report("TD404", node, f"this loop calls {what} but never `zero_grad()`: gradients add up across steps",
               fix="call `optimizer.zero_grad()` once per step (or every k steps when accumulating gradients)")


@rule("TD404", ast.For, ast.AsyncFor, ast.While)
def optimizer_never_zeroed(node: ast.AST, ctx: Context) -> None:
    """Two optimizers stepped in one loop, where only one is zeroed: a GAN's ``optimizer_D.zero_grad();
    G_loss.backward(); optimizer_G.step()`` (``optimizer_D`` written for ``optimizer_G``) adds the generator's
    gradients up step after step. Only direct ``opt.zero_grad()`` calls count: where a model's ``zero_grad()``,
    ``p.grad = None``, a helper, or ``opt.zero_grad()`` of a loop over optimizers clears gradients, which ones is not
    said, and the loop is left alone. Reported at the loop, as TD404 is (the construct that lacks the zeroing)."""
    sem = ctx.semantic
    effects = loop_effects(ctx, node)
    if not {"backward", "step", "zero_grad"} <= effects:
        return
    body = sem.body(node)
    if any({"backward", "step"} <= loop_effects(ctx, i) for i in body if isinstance(i, (ast.For, ast.AsyncFor, ast.While))):
        return  # (an inner loop trains: it is judged itself)
    calls = [n for n in body if isinstance(n, ast.Call)]
    zeroes = [c for c in calls if method_name(c) == "zero_grad"]
    if not zeroes or "zero_grad" in sem.region_effects([n for n in body if n not in zeroes], deep=True):
        return  # (a helper zeroes, or ``param.grad = None``: which optimizer, the loop does not say)
    zeroed = set()
    for c in zeroes:
        recv = c.func.value  # type: ignore[attr-defined]
        key = dotted(recv)
        b = sem.binding_at(key, c) if key is not None and "." not in key else None
        if key is None or sem.expr_kind(recv, c) != "optimizer" or b is not None and b.value is None and not b.is_param:
            return  # (``netG.zero_grad()`` zeroes a model; ``opt.zero_grad()`` of a loop variable, any of several)
        zeroed.add(key)
    unzeroed = []
    for step in calls:
        if not sem.is_optimizer_step(step) or not isinstance(step.func, ast.Attribute):
            continue
        key = dotted(step.func.value)
        if key is not None and key not in zeroed and key not in unzeroed \
                and sem.expr_kind(step.func.value, step) == "optimizer":
            unzeroed.append(key)
    if unzeroed:
        steps = ", ".join(f"`{k}.step()`" for k in unzeroed)
        others = ", ".join(f"`{z}.zero_grad()`" for z in sorted(zeroed))
        ctx.report("TD404", node, f"this loop calls {steps} but never zeroes {'it' if len(unzeroed) == 1 else 'them'} "
                   f"({others} clears only its own parameters): gradients add up across steps",
                   fix=" and ".join(f"call `{k}.zero_grad()` before its backward()" for k in unzeroed))


def _fresh_parameters_each_pass(ctx: Context, loop: ast.AST, step: ast.AST) -> bool:
    """``for case in cases: gen = CopyGenerator(**case); ...; SGD(gen.parameters(), 1).step()`` (a test's parameter
    sweep): the optimizer and every name its parameters come from are made again on each pass, so no gradient
    outlives its pass."""
    sem = ctx.semantic
    opt = step.func.value if isinstance(step, ast.Call) and isinstance(step.func, ast.Attribute) else None  # type: ignore[attr-defined]
    b = sem.binding_at(opt.id, step) if isinstance(opt, ast.Name) else None
    made = b.value if b is not None and not b.is_param and b.index is None else None
    if not (isinstance(made, ast.Call) and made.args and (ctx.call_name(made) or "").startswith("torch.optim.")
            and sem.contains(loop, b.node)):  # type: ignore[union-attr]
        return False
    names = [n for n in sem.subtree(made.args[0]) if isinstance(n, ast.Name)]
    return bool(names) and all((nb := sem.binding_at(n.id, n)) is not None and not nb.is_param and sem.contains(loop, nb.node)
                               for n in names)


def _fresh_autograd_context(ctx: Context, loop: ast.AST) -> bool:
    """``with dist_autograd.context() as ctx_id:`` per step: distributed autograd keeps each step's
    gradients in that fresh context, so there is nothing to zero."""
    sem = ctx.semantic
    return program.is_rpc_program(sem) and any(
        (sem.call_name(n) or "").endswith("autograd.context") for n in sem.calls_named("context") if sem.contains(loop, n))


# ---- TD406 -----------------------------------------------------------------------------------
_WEIGHT_FIRST = ("CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss", "MultiLabelSoftMarginLoss")


@rule("TD406", calls=_WEIGHT_FIRST, keywords=("weight", "pos_weight"))
def loss_weights_on_cpu(node: ast.AST, ctx: Context) -> None:
    """Loss function holding tensors (weight=, pos_weight=) not moved to the device."""
    assert isinstance(node, ast.Call)
    sem = ctx.semantic
    if sem.call_kind(node, node) != "loss_fn" or not program.runs_on_accelerator(sem):
        return
    last = (ctx.call_name(node) or "").rsplit(".", 1)[-1]
    held = [(k.arg, k.value) for k in node.keywords if k.arg in ("weight", "pos_weight")]
    if node.args and last in _WEIGHT_FIRST:
        held.append(("weight", node.args[0]))
    held = [(arg, v) for arg, v in held if _cpu_tensor(ctx, v, node)]
    if not held or _loss_moved(ctx, node) or _only_given_host_values(ctx, node):
        return
    device = first_input_device(sem)
    if device is None:
        return
    arg, value = held[0]
    ctx.report("TD406", node, f"`{last}` holds `{arg}={ctx.name(value)}` on the CPU while its inputs are on `{device}`",
               fix=f"create the weight on the device (`{ctx.name(value)}.to({device})`) or move the loss with `.to({device})`")


def _only_given_host_values(ctx: Context, node: ast.Call) -> bool:
    """``loss_fn = nn.NLLLoss(weight=torch.tensor([1., 1., 2.]))`` then ``loss_fn(dummy_log_probs, dummy_labels)``
    only, on host tensors a book's cell made to show what the loss does: no device input ever meets the weight."""
    sem = ctx.semantic
    up = sem.parent(node)
    if not (isinstance(up, ast.Assign) and len(up.targets) == 1 and isinstance(name := up.targets[0], ast.Name)):
        return False
    uses = [r for r in sem.reads_of(name.id) if (b := sem.binding_at(name.id, r)) is not None and b.node is up]
    calls = [c for r in uses if isinstance(c := sem.parent(r), ast.Call) and c.func is r]
    return bool(uses) and len(calls) == len(uses) and not any(may_be_on_device(ctx, a, c) for c in calls for a in c.args)


def _cpu_tensor(ctx: Context, value: ast.AST, at: ast.AST, depth: int = 0) -> bool:
    sem = ctx.semantic
    if depth > 4:
        return False
    if isinstance(value, ast.Call):
        if sem.value_is_moved(value) or keyword(value, "device"):
            return False
        q = ctx.call_name(value) or ""
        if q.startswith("torch.") and (q.split(".")[1] in ("tensor", "as_tensor", "ones", "full", "from_numpy", "linspace")
                                       or q.endswith("Tensor")):
            return q.count(".") == 1 and not any(k.arg is None for k in value.keywords)
        if method_name(value) in ("float", "double", "long", "half") and isinstance(value.func, ast.Attribute):
            return _cpu_tensor(ctx, value.func.value, at, depth + 1)
        return False
    if not isinstance(value, ast.Name):
        return False
    b = sem.binding_at(value.id, at)
    if b is None or b.value is None or b.is_param or b.index is not None:
        return False
    return _cpu_tensor(ctx, b.value, b.node, depth + 1)


def _loss_moved(ctx: Context, call: ast.Call) -> bool:
    sem = ctx.semantic
    parent = sem.parent(call)
    if isinstance(parent, ast.Attribute) and parent.attr in ("to", "cuda"):
        return True
    if isinstance(parent, ast.Assign):
        keys = {dotted(t) for t in parent.targets}
        for n in sem.calls_named("to", "cuda"):
            if isinstance(n.func, ast.Attribute) and dotted(n.func.value) in keys:
                return True
        cls = sem.class_of(call)
        if cls is not None and cls.name in sem.module_classes and any((k or "").startswith("self.") for k in keys):  # type: ignore[attr-defined]
            return _owner_moved(ctx, cls)  # a submodule of a module class: it moves with its owner
    return False


def _owner_moved(ctx: Context, cls: ast.AST, depth: int = 0) -> bool:
    """Every instance of the module class ``cls`` made in this file is moved, or is a submodule of a module
    class whose instances are (none made here: its owner, in another file, is judged there)."""
    sem = ctx.semantic
    for made in sem.calls_named(cls.name):  # type: ignore[attr-defined]
        if not (isinstance(made.func, ast.Name) and made.func.id == cls.name):  # type: ignore[attr-defined]
            continue
        parent = sem.parent(made)
        if sem.value_is_moved(made) or isinstance(parent, ast.Attribute) and parent.attr in ("to", "cuda"):
            continue
        keys = {dotted(t) for t in parent.targets} if isinstance(parent, ast.Assign) else set()
        if any(isinstance(n.func, ast.Attribute) and dotted(n.func.value) in keys for n in sem.calls_named("to", "cuda")):
            continue
        owner = sem.class_of(made)
        if isinstance(parent, ast.Assign) and owner is not None and owner is not cls and owner.name in sem.module_classes \
                and depth < 3 and _owner_moved(ctx, owner, depth + 1):  # type: ignore[attr-defined]
            continue
        return False
    return True


# ---- TD407 -----------------------------------------------------------------------------------
@rule("TD407", calls=("backward",))
def backward_under_no_grad(node: ast.AST, ctx: Context) -> None:
    """backward() inside a no_grad()/inference_mode() block."""
    sem = ctx.semantic
    if sem.is_backward_call(node) and sem.under_no_grad(node, strict=True) and not _no_grad_callers_pass_no_optimizer(ctx, node):
        ctx.report("TD407", node, f"`{ctx.name(node)}` runs under no_grad/inference_mode: the loss has no graph "
                   "and backward() raises", fix="move the forward pass and backward() out of the no_grad block")


def _no_grad_callers_pass_no_optimizer(ctx: Context, node: ast.AST) -> bool:
    """``def batch_step(out, y, opt=None): ... if opt is not None: loss.backward()``, whose every call under
    ``no_grad`` (through ``run_pass(model, val_batches)``, whose own ``opt=None`` it hands on) passes no optimizer:
    the backward never runs there."""
    sem = ctx.semantic
    func = sem.function_of(node)
    flag = next((_none_test(sem, up, func) for up in sem.ancestors(node) if isinstance(up, ast.If)
                 and _none_test(sem, up, func) and any(sem.contains(s, node) for s in up.body)), None)
    return flag is not None and _none_at_no_grad_calls(ctx, func, flag, 0)


def _none_test(sem, branch: ast.If, func: ast.AST | None) -> str | None:  # type: ignore[no-untyped-def]
    """``if opt is not None:`` / ``if opt:`` on a parameter of ``func`` that defaults to None: its name."""
    test = branch.test
    name = test.left.id if isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and len(test.ops) == 1 \
        and isinstance(test.ops[0], ast.IsNot) and isinstance(test.comparators[0], ast.Constant) \
        and test.comparators[0].value is None else test.id if isinstance(test, ast.Name) else None
    if name is None or not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    default = param_default(func, name)
    return name if isinstance(default, ast.Constant) and default.value is None else None


def _none_at_no_grad_calls(ctx: Context, func: ast.AST, param: str, depth: int) -> bool:
    sem = ctx.semantic
    sites = sem.call_sites(func)
    if not sites or depth > 3:
        return False
    for site in sites:
        if not sem.under_no_grad(site, strict=True):
            continue  # (a training call: its backward runs with autograd on)
        given = call_argument(site, func, param)  # type: ignore[arg-type]
        if given is None or isinstance(given, ast.Constant) and given.value is None:
            continue
        caller = sem.function_of(site)
        b = sem.binding_at(given.id, site) if isinstance(given, ast.Name) else None
        default = param_default(caller, given.id) if b is not None and b.is_param and caller is not None else None  # type: ignore[union-attr, arg-type]
        if not (isinstance(default, ast.Constant) and default.value is None
                and _none_at_no_grad_calls(ctx, caller, given.id, depth + 1)):  # type: ignore[arg-type, union-attr]
            return False
    return True
