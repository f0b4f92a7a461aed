"""Stage 4 rules: train/eval modes, no_grad, zero_grad and loss handling."""

from __future__ import annotations

import ast

from torchdoctor.check.astutil import call_argument, dotted, keyword, method_name, strip_methods
from torchdoctor.check.context import Context
from torchdoctor.check.patterns import lazy
from torchdoctor.check.registry import rule
from torchdoctor.check.semantic import flow, program
from torchdoctor.check.semantic.models import construction, first_input_device, has_dropout_or_bn

_LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


# ---- TD401 / TD402: evaluation forward passes ---------------------------------------------
def _eval_forwards(ctx: Context, loop: ast.AST) -> list[ast.Call]:
    """The model calls an evaluation loop makes itself (not a nested evaluation loop's, not a submodule's)."""
    sem = ctx.semantic
    if sem.loop_kind(loop) != "eval":
        return []
    out = []
    for node in sem.body(loop):
        if not isinstance(node, ast.Call) or flow.consumer_kind(sem, node) != "model":
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            cls = sem.class_of(node)
            if cls is not None and cls.name in sem.module_classes:
                continue  # a submodule inside forward()
        if sem.enclosing_loop(node, "eval") is loop:
            out.append(node)
    return out


@rule("TD401", *_LOOPS)
def eval_with_autograd(loop: ast.AST, ctx: Context) -> None:
    """Evaluation forward pass with autograd on."""
    forwards = _eval_forwards(ctx, loop)
    for node in forwards:
        if ctx.semantic.under_no_grad(node):
            continue
        name = ctx.name(node.func)
        ctx.report("TD401", node, f"evaluation forward `{name}(...)` runs with autograd on: it builds a graph it never uses",
                   fix="wrap the evaluation loop in `with torch.no_grad():` (or `torch.inference_mode()`)")
    if not forwards:
        for call, helper in _eval_helper_forwards(ctx, loop):
            ctx.report("TD401", call, f"evaluation forward through `{ctx.name(call.func)}(...)` (which calls the model in "
                       f"`{helper}`) runs with autograd on: it builds a graph it never uses",
                       fix="wrap the evaluation loop in `with torch.no_grad():` (or `torch.inference_mode()`)")


def _eval_helper_forwards(ctx: Context, loop: ast.AST) -> list[tuple[ast.Call, str]]:
    """An evaluation loop that runs its model through a method or function of this file, shared with training
    (``pred = self._process_one_batch(batch)`` after ``self.model.eval()``), with autograd on in both."""
    sem = ctx.semantic
    if sem.loop_kind(loop) != "eval":
        return []
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
               for n in sem.local_nodes(helper)):
            out.append((node, helper.name))  # type: ignore[attr-defined]
    return out


# a held-out tensor: ``test_x``, ``x_test``, ``val_data``, ``test_images[:10]`` (not a loader's batch)
_HELDOUT = lazy(r"(?i)^((test|val|valid|validation|holdout|dev)_?(x|data|inputs?|images?|imgs|features|set|tokens|ids)"
                r"|(x|inputs?|images?|data)_?(test|val|valid|holdout))$")


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
    for call in sem.of_type(ast.Call):
        if not call.args or _heldout_arg(sem, call) is None or flow.consumer_kind(sem, call) != "model":  # type: ignore[attr-defined]
            continue
        if sem.under_no_grad(call) or sem.enclosing_loop(call, "eval") is not None or program.in_test(sem, call):
            continue
        if sem.feeds_backward(call) or _untrained_instance(sem, call) or _synthetic_probe(sem, call):
            continue
        ctx.report("TD401", call, f"evaluation forward `{ctx.name(call.func)}(...)` on held-out "  # type: ignore[attr-defined]
                   f"`{_heldout_arg(sem, call)}` runs with autograd on: it builds a graph it never uses",  # type: ignore[arg-type]
                   fix="run the evaluation under `with torch.no_grad():` (or `torch.inference_mode()`)")


def _untrained_instance(sem, call: ast.Call) -> bool:
    """``test_rnn = RNN(1, 10, 2); out, h = test_rnn(test_input, None); print(out.size())``: a model made only to look
    at its output shapes (a tutorial's first cell); nothing trains or loads it, nothing else is handed it, so there is
    no held-out evaluation to speak of."""
    if not isinstance(call.func, ast.Name):
        return False
    name = call.func.id
    bindings = sem.bindings_of(name)
    if not bindings or not all(isinstance(b.value, ast.Call) and sem.call_kind(b.value, b.node) == "model"
                               and method_name(b.value) is None for b in bindings):
        return False
    for read in sem.reads_of(name):
        up = sem.parent(read)
        if isinstance(up, ast.Call) and up.func is read:
            continue  # a forward
        if isinstance(up, ast.Attribute) and up.attr in ("eval", "to", "cuda", "cpu", "float", "double"):
            continue
        return False  # ``.parameters()``, ``.load_state_dict()``, ``train(test_rnn, ...)``: trained or loaded
    return True


_PROBES = frozenset({"zeros", "ones", "empty", "full", "zeros_like", "ones_like"})  # (random data may be a made-up test set)


def _synthetic_probe(sem, call: ast.Call) -> bool:
    """``test_x = torch.zeros(1, 3, 32, 32); print(net(test_x).shape)``: a made-up tensor run through the model to
    look at the output shape; held-out data is not made by ``torch.zeros``."""
    base = strip_methods(call.args[0], _AS_IS, subscripts=True)
    b = sem.binding_at(base.id, call) if isinstance(base, ast.Name) else None
    value = b.value if b is not None and not b.is_param else None
    while isinstance(value, ast.Call) and (sem.call_name(value) or "") in ("torch.autograd.Variable", "Variable") and value.args:
        value = value.args[0]  # ``Variable(torch.zeros(1, 3, 256, 256))``
    name = sem.call_name(value) or "" if isinstance(value, ast.Call) else ""
    return name.startswith("torch.") and name.rsplit(".", 1)[-1] in _PROBES


_INFERENCE_FUNC = lazy(r"(?i)^(predict|infer|inference|detect|classify|recogni[sz]e|evaluate|validate|sample|generate|translate)(_|$)")


@rule("TD401", ast.FunctionDef)
def inference_helper_with_autograd(func: ast.AST, ctx: Context) -> None:
    """``def predict_sentiment(text, model, ...): ... prediction = model(tensor)``: an inference helper (named so,
    training nothing) whose forward runs with autograd on, unless it is decorated with no_grad or every call of it
    in the file is under no_grad."""
    sem = ctx.semantic
    name = func.name  # type: ignore[attr-defined]
    if not _INFERENCE_FUNC.match(name) or sem.class_of(func) is not None or program.in_test(sem, func):
        return
    if any(sem.guards.grad_call(d) in ("off", "maybe") for d in func.decorator_list):  # type: ignore[attr-defined]
        return
    nodes = sem.local_nodes(func)
    if "backward" in sem.region_effects(nodes) or "step" in sem.region_effects(nodes):
        return
    if any(isinstance(n, ast.Call) and sem.mode_call(n) == "eval" for n in nodes):
        return  # (its forwards after the ``.eval()`` are reported as such)
    sites = sem.call_sites(func)
    if sites and all(sem.under_no_grad(c) for c in sites):
        return
    if not sites and sem.project is not None and sem.project.callers_grad_mode(sem, func) == "off":
        return  # every caller in another module runs it under no_grad (facenet's MTCNN.detect -> detect_face)
    for call in nodes:
        if isinstance(call, ast.Call) and flow.consumer_kind(sem, call) == "model" and not sem.under_no_grad(call) \
                and sem.enclosing_loop(call, "eval") is None:
            target = call.func.value if method_name(call) == "forward" else call.func  # type: ignore[union-attr]
            if sem.expr_kind(target, call) not in ("model", "wrapper"):
                continue
            b = sem.binding_at(dotted(target) or "", call)
            if b is not None and b.node is not func and sem.scope_of(b.node) is func:
                continue  # ``up = nn.Upsample(...)`` made here: a layer used as a function, not the model
            _report_inference(ctx, call, f" (in `{name}()`, which trains nothing)")


_INFERENCE_METHODS = ("predict", "inference", "infer", "sample", "forward")


@rule("TD401", calls=("eval", "predict", "inference", "infer"))
def inference_with_autograd(node: ast.AST, ctx: Context) -> None:
    """Forwards outside evaluation loops: after ``model.eval()`` in a function (or script) that trains
    nothing (``sample_images()``, an inference script), or through a model method named
    ``predict``/``inference``; the loop rule above covers evaluation loops."""
    sem = ctx.semantic
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return  # Python's own eval(...)
    if sem.mode_call(node) == "eval":
        key = dotted(node.func.value) or _assigned_name(sem, node)
        for call in _forwards_after_eval(ctx, node, key) if key else []:
            _report_inference(ctx, call, f" (after `{key}.eval()`)")
    elif node.func.attr in ("predict", "inference", "infer") and _inference_call(ctx, node):
        _report_inference(ctx, node, "")


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
    for call in region:
        if not isinstance(call, ast.Call):
            continue
        func = call.func
        target = func.value if isinstance(func, ast.Attribute) and func.attr in _INFERENCE_METHODS else func
        if dotted(target) == key and _inference_call(ctx, call, evaluated=True) and not sem.feeds_backward(call):
            out.append(call)
        elif isinstance(func, ast.Attribute) and dotted(func.value) == key and _submodule(ctx, key, func.attr, call) \
                and not sem.under_no_grad(call) and not sem.feeds_backward(call) \
                and sem.enclosing_loop(call, "train") is None and sem.enclosing_loop(call, "eval") is None:
            out.append(call)  # ``drawn = model.decoder(noise)``: a submodule of the model put in eval mode
    return out


def _submodule(ctx: Context, key: str, attr: str, at: ast.AST) -> bool:
    """``attr`` is a submodule of the model ``key``, whose class here sets ``self.attr = nn.Linear(...)``."""
    sem = ctx.semantic
    made = construction(sem, ast.Name(id=key, ctx=ast.Load()), at) if "." not in key else None
    cls = sem.calls_index.classes.get(sem.call_name(made) or "") if made is not None else None
    if cls is None:
        return False
    for n in sem.subtree(cls):
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == attr and dotted(t.value) == "self"
                                             for t in n.targets) and isinstance(n.value, ast.Call):
            return sem.call_kind(n.value, n) == "model" or (sem.call_name(n.value) or "").startswith("torch.nn.")
    return False


def _differentiates(ctx: Context, nodes: list[ast.AST]) -> bool:
    """``torch.autograd.grad`` among these nodes or in a function of this file they call (a Hessian-vector
    product, a gradient penalty): the eval-mode forward's graph is used."""
    sem = ctx.semantic
    calls = [n for n in nodes if isinstance(n, ast.Call)]
    for call in calls + [n for c in calls for f in sem.resolve(c) for n in sem.local_nodes(f) if isinstance(n, ast.Call)]:
        if ctx.call_name(call) in ("torch.autograd.grad", "torch.autograd.functional.hvp", "torch.autograd.functional.vjp"):
            return True
    return False


def _inference_call(ctx: Context, call: ast.Call, evaluated: bool = False) -> bool:
    """Not under no_grad, not in a training loop nor in an evaluation loop (reported by the loop rule), and
    not a method of this file's classes that turns autograd off itself."""
    sem = ctx.semantic
    if sem.under_no_grad(call) or sem.enclosing_loop(call, "train") is not None or \
            sem.enclosing_loop(call, "eval") is not None:
        return False
    cls = sem.class_of(call)
    if cls is not None and cls.name in sem.module_classes:  # type: ignore[attr-defined]
        return False  # a module's own method runs in its caller's grad mode: the caller's call is judged
    if isinstance(call.func, ast.Attribute) and call.func.attr != "forward":
        for funcs in [sem.functions.get(call.func.attr, [])]:
            for f in funcs:
                if sem.class_of(f) is not None and any(sem.guards.grad_call(d) in ("off", "maybe") for d in f.decorator_list):  # type: ignore[attr-defined]
                    return False
        if call.func.attr in ("sample", "generate") and not sem.functions.get(call.func.attr):
            return False  # a library's sampling method (often under no_grad itself): not judged
    target = call.func.value if isinstance(call.func, ast.Attribute) else call.func
    if evaluated and (_loaded_module(ctx, target, call) or _built_evaluated_and_moved(ctx, target, call)):
        return True
    if sem.expr_kind(target, call) not in ("model", "wrapper"):
        return False
    # a PyTorch module: built from torch.nn / a module class / a model library, or a module's own part
    # (a Keras or CoreML model has a predict() too)
    if construction(sem, target, call) is not None:
        return True
    b = sem.binding_at(dotted(target) or "", call)  # a parameter annotated with a module class
    return b is not None and b.is_param and b.value is not None and sem.kinds.binding_kind(b) == "model"


def _loaded_module(ctx: Context, target: ast.AST, at: ast.AST) -> bool:
    """``net = ckpt["model"].half().to(device)`` with ``ckpt = torch.load(...)``, then ``net.eval()``: a module
    unpickled from a checkpoint (its class is nowhere in sight, but it was put in eval mode and moved)."""
    sem = ctx.semantic
    node: ast.AST | None = target
    for _ in range(6):  # (``w = torch.load(p)``, ``model = w["model"]``, ``model = model.half().to(device)``)
        while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "to", "cuda", "half", "float", "eval", "fuse"):
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
    name = ctx.name(call.func)
    ctx.report("TD401", call, f"inference forward `{name}(...)` runs with autograd on{why}: it builds a graph it never uses",
               fix="run it under `with torch.no_grad():` (or `torch.inference_mode()`)")


@rule("TD402", *_LOOPS)
def eval_in_train_mode(loop: ast.AST, ctx: Context) -> None:
    """Evaluation with the model still in training mode."""
    sem = ctx.semantic
    forwards = _eval_forwards(ctx, loop)
    if not forwards or _eval_mode_set(ctx, loop):
        return
    for node in forwards:
        func = node.func.value if method_name(node) == "forward" else node.func  # type: ignore[union-attr]
        if has_dropout_or_bn(sem, func, node) is not True or _loaded_in_eval_mode(ctx, func, loop) \
                or sem.guards.on_cpu_branch(node) or _eval_just_before(ctx, loop, node, func):
            continue
        name = ctx.name(func)
        ctx.report("TD402", node, f"`{name}` evaluates in training mode: dropout/batch-norm stay active (no `{name}.eval()`)",
                   fix=f"call `{name}.eval()` before the evaluation loop (and `{name}.train()` before training again)")


def _eval_just_before(ctx: Context, loop: ast.AST, forward: ast.AST, model: ast.AST) -> bool:
    """``for x, y in batches: model.eval(); out = model(x); model.train()``: put in eval mode in the pass itself,
    before the forward."""
    sem, key = ctx.semantic, dotted(model)
    return key is not None and any(
        isinstance(n, ast.Call) and sem.mode_call(n) == "eval" and dotted(n.func.value) == key  # type: ignore[attr-defined]
        and (n.lineno, n.col_offset) < (forward.lineno, forward.col_offset) for n in sem.body(loop))  # type: ignore[attr-defined]


def _loaded_in_eval_mode(ctx: Context, func: ast.AST, loop: ast.AST) -> bool:
    """``model = GPT2LMHeadModel.from_pretrained(name)``: Hugging Face hands the model back in eval mode,
    and nothing in the loop's function switches it to training."""
    sem = ctx.semantic
    key = dotted(func)
    b = sem.binding_at(key, loop) if key else None
    if b is None or b.value is None or b.is_param or not any(
            isinstance(n, ast.Call) and method_name(n) == "from_pretrained" for n in sem.subtree(b.value)):
        return False
    return not _mode_calls(ctx, sem.scope_of(loop), "train")


def _eval_mode_set(ctx: Context, loop: ast.AST) -> bool:
    """An eval-mode call in the loop's function that can run before it, or in a function calling it
    (in this file or, through the project index, in another)."""
    sem = ctx.semantic
    scope = sem.scope_of(loop)
    if any(_reaches(ctx, n, loop) for n in _mode_calls(ctx, scope, "eval")):
        return True
    seen: set[int] = set()
    todo = [scope]
    while todo:
        f = todo.pop()
        if id(f) in seen or not isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        seen.add(id(f))
        for site in sem.call_sites(f):
            caller = sem.scope_of(site)
            if _mode_calls(ctx, caller, "eval"):
                return True
            todo.append(caller)
        if sem.project is not None and sem.class_of(f) is None and \
                sem.project.callers_effect(sem, f, "eval"):  # type: ignore[attr-defined]
            return True
    return False


def _mode_calls(ctx: Context, scope: ast.AST, mode: str) -> list[ast.Call]:
    sem = ctx.semantic
    return [n for n in sem.calls_named(mode) if sem.scope_of(n) is scope and sem.mode_call(n) == mode]


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
    if not loops or any("train" in _loop_effects(ctx, loop, deep=True) for loop in loops) or _given_a_fresh_copy(ctx, recv, node):
        return
    name = ctx.name(recv)
    ctx.report("TD403", node, f"`{name}.eval()` is never undone: the next training pass runs in eval mode "
               "(no `.train()` in the loop)", fix=f"call `{name}.train()` at the start of each epoch")


def _loop_effects(ctx: Context, loop: ast.AST, deep: bool = False) -> frozenset[str]:
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


def _training_loops_around(ctx: Context, node: ast.AST) -> list[ast.AST]:
    """The innermost loops that train and run ``node`` (directly, or through the function holding it)."""
    sem = ctx.semantic
    out: list[ast.AST] = []
    todo: list[tuple[ast.AST, int]] = [(node, 0)]
    while todo:
        site, depth = todo.pop()
        loop = next((a for a in sem.loops_around(site) if "backward" in _loop_effects(ctx, a)), None)
        if loop is not None:
            out.append(loop)
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
    effects = _loop_effects(ctx, node)
    if not {"backward", "step"} <= effects or "zero_grad" in effects or "zero_grad" in _loop_effects(ctx, node, deep=True):
        return
    if _fresh_autograd_context(ctx, node):
        return
    body = sem.body(node)
    inner = [n for n in body if isinstance(n, (ast.For, ast.AsyncFor, ast.While))]
    if any({"backward", "step"} <= _loop_effects(ctx, i) for i in inner):
        return  # the inner loop is the one that trains
    backward = next((n for n in body if sem.is_backward_call(n)), None)
    step = next((n for n in body if sem.is_optimizer_step(n)), None)
    what = f"`{ctx.name(backward)}` and `{ctx.name(step)}`" if backward is not None and step is not None \
        else "backward() and an optimizer step (through the functions it calls)"
    ctx.report("TD404", node, f"this loop calls {what} but never `zero_grad()`: gradients add up across steps",
               fix="call `optimizer.zero_grad()` once per step (or every k steps when accumulating gradients)")


def _fresh_autograd_context(ctx: Context, loop: ast.AST) -> bool:
    """``with dist_autograd.context() as ctx_id:`` per step: distributed autograd keeps each step's
    gradients in that fresh context, so there is nothing to zero."""
    sem = ctx.semantic
    return program.is_rpc_program(sem) and any(
        (sem.call_name(n) or "").endswith("autograd.context") for n in sem.calls_named("context") if sem.contains(loop, n))


# ---- TD405 -----------------------------------------------------------------------------------
@rule("TD405", ast.AugAssign)
def loss_accumulated(node: ast.AST, ctx: Context) -> None:
    """A loss tensor summed across steps without .item()/.detach()."""
    assert isinstance(node, ast.AugAssign)
    if isinstance(node.op, ast.Add):
        _loss_graph_kept(ctx, node, node.target, node.value)


@rule("TD405", calls=("append", "extend"))
def loss_collected(node: ast.AST, ctx: Context) -> None:
    """A loss tensor appended to a list across steps without .item()/.detach()."""
    assert isinstance(node, ast.Call)
    if len(node.args) == 1 and isinstance(node.func, ast.Attribute):
        _loss_graph_kept(ctx, node, node.func.value, node.args[0])


def _loss_graph_kept(ctx: Context, node: ast.AST, acc: ast.AST, value: ast.AST) -> None:
    sem = ctx.semantic
    loop = sem.enclosing_loop(node, "batch")
    # a training or evaluation loop: its steps are optimizer steps or batches; a loop over one step's
    # micro-batches that backpropagates once after it keeps only that step's graph
    if loop is None or sem.loop_kind(loop) not in ("train", "eval") or sem.under_no_grad(node) \
            or not _is_loss_tensor(ctx, value, node, 0):
        return
    acc_key = dotted(acc.value if isinstance(acc, ast.Subscript) else acc)
    if acc_key is None or _bound_in(ctx, acc_key, loop, node) or _backpropagated(ctx, acc_key, node):
        return
    text = ctx.name(value)
    ctx.report("TD405", node, f"`{ctx.name(acc)}` accumulates the loss tensor `{text}`: every step's graph stays alive",
               fix=f"accumulate `{text}.item()` (or `{text}.detach()`)")


def _is_loss_tensor(ctx: Context, expr: ast.AST, at: ast.AST, depth: int) -> bool:
    sem = ctx.semantic
    if depth > 5:
        return False
    if isinstance(expr, ast.BinOp):
        return _is_loss_tensor(ctx, expr.left, at, depth + 1) or _is_loss_tensor(ctx, expr.right, at, depth + 1)
    if isinstance(expr, ast.Call):
        if method_name(expr) in ("mean", "sum", "cpu", "clone") and not expr.args:
            return _is_loss_tensor(ctx, expr.func.value, at, depth + 1)  # type: ignore[attr-defined]
        # ``criterion(pred.detach().cpu(), true.detach().cpu())``: a loss of detached copies has no graph
        return flow.consumer_kind(sem, expr) == "loss" and not (expr.args and all(_detached(a) for a in expr.args))
    if isinstance(expr, ast.Attribute):
        if expr.attr != "loss":
            return False
        base = sem.binding_at(expr.value.id, at) if isinstance(expr.value, ast.Name) else None
        return base is None or not sem.under_no_grad(base.node)  # ``outputs.loss`` of a no_grad forward: no graph
    if isinstance(expr, ast.Subscript):
        return isinstance(expr.slice, ast.Constant) and expr.slice.value == "loss"
    if not isinstance(expr, ast.Name):
        return False
    b = sem.binding_at(expr.id, at)
    if b is None or b.value is None or b.is_param:
        return False
    if sem.under_no_grad(b.node):
        return False  # computed under no_grad: no graph to keep alive
    if b.index is not None:  # logits, loss = model(x, y)
        return "loss" in expr.id.lower() and isinstance(b.value, ast.Call) and flow.consumer_kind(sem, b.value) == "model"
    return _is_loss_tensor(ctx, b.value, b.node, depth + 1)


def _detached(expr: ast.AST) -> bool:
    """``pred.detach().cpu()``, ``out.data``: a value cut from the graph by a method or attribute of its chain."""
    while isinstance(expr, (ast.Call, ast.Attribute, ast.Subscript)):
        if isinstance(expr, ast.Attribute) and expr.attr in ("detach", "data"):
            return True
        expr = expr.func if isinstance(expr, ast.Call) else expr.value
    return False


def _bound_in(ctx: Context, key: str, loop: ast.AST, node: ast.AST) -> bool:
    """The accumulator is (re)set inside the loop: it does not live across steps."""
    for n in ctx.semantic.body(loop):
        if isinstance(n, (ast.Assign, ast.AnnAssign)) and n is not node:
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            if any(dotted(t) == key for t in targets):
                return True
    return False


def _backpropagated(ctx: Context, key: str, node: ast.AST) -> bool:
    """``total = total + ...; total.backward()`` sums losses on purpose."""
    sem = ctx.semantic
    scope = sem.scope_of(node)
    if isinstance(scope, ast.Lambda):
        return False
    keys = {key}
    for n in sem.local_nodes(scope):  # ``loss = losses[i]`` / ``for loss in losses:``: the kept losses, one by one
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Subscript) and dotted(n.value.value) == key:
            keys.update(d for t in n.targets if (d := dotted(t)))
        elif isinstance(n, (ast.For, ast.AsyncFor)) and dotted(n.iter) == key and dotted(n.target):
            keys.add(dotted(n.target))  # type: ignore[arg-type]
    for n in sem.local_nodes(scope):
        if sem.is_backward_call(n) and keys & {dotted(x) for x in sem.subtree(n)}:
            return True  # (backpropagated later: the graphs are kept on purpose)
        if isinstance(n, ast.Call) and (ctx.call_name(n) or "") in ("torch.stack", "torch.cat", "sum"):
            if any(dotted(a) == key for a in n.args) and _feeds_backward(ctx, n):
                return True
    return False


def _feeds_backward(ctx: Context, call: ast.Call) -> bool:
    sem = ctx.semantic
    for a in sem.ancestors(call):
        if isinstance(a, ast.Call) and sem.is_backward_call(a):
            return True
        if isinstance(a, ast.stmt):
            return isinstance(a, ast.Assign) and any(
                sem.is_backward_call(n) and dotted(getattr(n.func, "value", None)) in {dotted(t) for t in a.targets}
                for n in sem.calls_named("backward") if sem.scope_of(n) is sem.scope_of(a))
    return False


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
    if not held or _loss_moved(ctx, node):
        return
    device = first_input_device(sem)
    if device is None:
        return
    arg, value = held[0]
    ctx.report("TD406", node, f"`{last}` holds `{arg}={ctx.name(value)}` on the CPU while its inputs are on `{device}`",
               fix=f"create the weight on the device (`{ctx.name(value)}.to({device})`) or move the loss with `.to({device})`")


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
    if sem.is_backward_call(node) and sem.under_no_grad(node, strict=True):
        ctx.report("TD407", node, f"`{ctx.name(node)}` runs under no_grad/inference_mode: the loss has no graph "
                   "and backward() raises", fix="move the forward pass and backward() out of the no_grad block")
