"""Stage 3 rules for tensors created inside a training or evaluation loop or ``forward()``: left on the
CPU and mixed with device tensors (TD303, an error), or copied to the device each step (TD611, a cost)."""

from __future__ import annotations

import ast

from torchdoctor.check.astutil import DTYPE_NAMES, FACTORIES, call_argument, dotted, has_kwargs, keyword, method_name, root_name, \
    param_default, strip_methods
from torchdoctor.check.context import Context
from torchdoctor.check.patterns import lazy
from torchdoctor.check.registry import rule
from torchdoctor.check.rules.bounded import branch_no_caller_chooses, branch_no_caller_takes, made_once
from torchdoctor.check.rules.factory_regions import model_loop, project_step_caller, step_helper
from torchdoctor.check.rules.factory_regions import region as region_of
from torchdoctor.check.rules.host_values import batch_on_device, made_on_host
from torchdoctor.check.semantic import flow, program
from torchdoctor.check.semantic.forwards import moved_params
from torchdoctor.check.semantic.models import LEGACY_DTYPES, LEGACY_TENSORS, model_is_stateless
from torchdoctor.check.semantic.placement import cpu_only_loop
from torchdoctor.check.semantic.summary import returns_from_numpy

_LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


# ---- TD303 ----------------------------------------------------------------------------
@rule("TD303", calls=tuple(sorted(FACTORIES)))
def tensor_created_on_cpu(node: ast.AST, ctx: Context) -> None:
    """A tensor factory without device= inside the loop or forward(), combined with device tensors."""
    assert isinstance(node, ast.Call)
    q = ctx.call_name(node) or ""
    if not q.startswith("torch.") or q.count(".") != 1 or q.split(".")[1] not in FACTORIES:
        return
    sem = ctx.semantic
    if keyword(node, "device") or has_kwargs(node) or _follows_its_inputs(node, q) or _scalar_tensor(node) \
            or _zero_sized(node, q):
        return
    region = region_of(ctx, node)  # (before the dear question whether the module runs on an accelerator)
    if region is None or not program.runs_on_accelerator(sem) or program.is_rpc_program(sem) \
            or sem.guards.on_cpu_branch(node) or branch_no_caller_takes(ctx, node) or branch_no_caller_chooses(ctx, node):
        return  # (RPC programs build CPU tensors on purpose: RPC sends them between processes)
    if isinstance(region, _LOOPS) and cpu_only_loop(sem, region) or _in_an_inner_cpu_loop(sem, node, region):
        return  # (every model of the loop is one nothing moves: an ensemble's torch member next to scikit-learn's)
    parent = sem.parent(node)
    if isinstance(parent, ast.Attribute) and parent.attr in ("to", "cuda", "new_tensor", "pin_memory", "type_as") \
            or _moved_at_once(ctx, node) is not None:
        return  # (moved in the same expression, maybe after a reshape: TD611's case; ``.type_as(labels)`` casts it to
        # the type of a tensor, its device included)
    seeds = _region_seeds(ctx, region)
    hot = flow.device_names(ctx.semantic, region, seeds)
    partner = _combined_with(ctx, node, hot, region)
    if partner is None:
        return
    ctx.report("TD303", node, f"`{ctx.name(node, 60)}` is created on the CPU and combined with device tensor "
               f"`{partner}`", fix=f"create it on the same device: `{ctx.name(node.func)}(..., device={partner}.device)`")


def _in_an_inner_cpu_loop(sem, node: ast.AST, region: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``model = model.to(cpu)``, then a validation loop inside the training loop: the tensor is made where that
    inner loop runs its model, on the host (``placement.cpu_only_loop``)."""
    for loop in sem.loops_around(node):
        if loop is region:
            return False
        if isinstance(loop, (ast.For, ast.AsyncFor, ast.While)) and cpu_only_loop(sem, loop):
            return True
    return False


# ---- TD611 ----------------------------------------------------------------------------
# Factories that make their own values (no host data to copy): made on the device, nothing crosses the bus.
_MAKERS = frozenset({"zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm", "arange", "range", "linspace",
                     "logspace", "eye", "normal", "hann_window", "hamming_window", "blackman_window", "bartlett_window",
                     "kaiser_window"})
_CASTS = frozenset({"float", "long", "half", "double", "int", "bool", "bfloat16"})
_MASK_OPS = frozenset({"torch.triu", "torch.tril", "torch.diag", "torch.diag_embed", "torch.flip", "torch.roll"})
_OPTIONS_DEVICE = lazy(r"^self\.(args|opt|opts|config|cfg|conf|hparams|hp|params|options|settings)\.device$")
_EINOPS = frozenset({"einops.rearrange", "einops.repeat"})  # (``rearrange(torch.arange(t), "t -> () t")``: a reshape)
_RESHAPES = frozenset({"view", "reshape", "unsqueeze", "squeeze", "expand", "repeat", "flatten", "permute", "transpose",
                       "t", "contiguous"})


_LEGACY_WRAPS = frozenset({"torch.Tensor", "torch.FloatTensor", "torch.LongTensor", "torch.DoubleTensor"})


def _sizes_only(call: ast.Call, sem=None) -> bool:  # type: ignore[no-untyped-def]
    """``torch.FloatTensor(b, n)``: a legacy constructor given sizes (an allocation, like ``torch.empty``), not
    data (``torch.FloatTensor([0.5, 0.5])``, ``torch.LongTensor(ids)`` of a list); one size only when it is surely an
    int (``torch.Tensor(x.size(0))``, a literal, a name bound to ``data.shape[0]``: ``sem`` follows the name)."""
    def size(a: ast.AST) -> bool:
        if isinstance(a, ast.Constant):
            return type(a.value) is int
        if isinstance(a, ast.BinOp):
            return size(a.left) and size(a.right)
        if isinstance(a, ast.Subscript):  # ``x.shape[0]``
            return isinstance(a.value, ast.Attribute) and a.value.attr == "shape"
        if isinstance(a, ast.Call):  # ``x.size(0)``, ``len(seq)``; alone, ``x.data.size()``: a whole shape
            return method_name(a) == "size" and (bool(a.args) or len(call.args) == 1) \
                or isinstance(a.func, ast.Name) and a.func.id in ("len", "int")
        return isinstance(a, (ast.Attribute, ast.Name))  # ``self.hidden``, ``b`` (two or more: sizes, not data)

    def one_size(a: ast.AST, at: ast.AST, depth: int = 0) -> bool:  # ``torch.Tensor(x.size(0))``, ``torch.Tensor(n)``
        if depth > 4:  # of ``n = data.shape[0]``
            return False
        if isinstance(a, ast.Name) and sem is not None and (b := sem.binding_at(a.id, at)) is not None \
                and not b.is_param and b.index is None and b.value is not None and b.node is not at:
            a, at = b.value, b.node
        if isinstance(a, ast.BinOp):  # (``1 - done`` of an array is data: every operand must be an int)
            return one_size(a.left, at, depth + 1) and one_size(a.right, at, depth + 1)
        return not isinstance(a, (ast.Attribute, ast.Name)) and size(a)

    if call.keywords:
        return False
    if len(call.args) == 1 and isinstance(star := call.args[0], ast.Starred):  # ``torch.FloatTensor(*x.shape)``
        return isinstance(star.value, ast.Attribute) and star.value.attr == "shape" \
            or isinstance(star.value, ast.Call) and method_name(star.value) == "size" and not star.value.args
    return len(call.args) >= 2 and all(size(a) for a in call.args) or len(call.args) == 1 and one_size(call.args[0], call)


def _counting(call: ast.Call) -> bool:
    """``torch.LongTensor(range(n))`` (or of ``list(range(n))``): ``torch.arange(n)`` built on the host."""
    arg = call.args[0] if len(call.args) == 1 and not call.keywords else None
    if isinstance(arg, ast.Call) and (isinstance(arg.func, ast.Name) and arg.func.id == "list"
                                      or dotted(arg.func) in ("np.array", "numpy.array", "np.asarray")) and len(arg.args) == 1:
        arg = arg.args[0]  # (``list(range(n))``, ``np.array(range(i, j))``: the same count)
    return isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == "range"


@rule("TD611", calls=tuple(sorted(_MAKERS | LEGACY_TENSORS | {"tensor", "as_tensor"})))
def tensor_made_then_moved(node: ast.AST, ctx: Context) -> None:
    """``torch.randn(b, k).cuda()`` in a training or evaluation loop, or in forward(): made on the CPU and
    copied to the device at once, on every step (TD303 is the case where it is not moved at all)."""
    assert isinstance(node, ast.Call)
    q = ctx.call_name(node) or ""
    counting = q.split(".")[-1] in (*LEGACY_TENSORS, "tensor", "as_tensor") and _counting(node)
    constant = q.split(".")[-1] in (*LEGACY_TENSORS, "tensor") and _constant_data(ctx, node)
    if not q.startswith("torch.") or q.count(".") != 1 or q.split(".")[1] not in _MAKERS and not (
            q.split(".")[1] in LEGACY_TENSORS and (_sizes_only(node, ctx.semantic) or counting)) and not counting \
            and not constant:
        return  # (``torch.as_tensor(range(a, b))``: a count, like ``torch.LongTensor(range(n))``)
    if keyword(node, "device") or keyword(node, "generator") or keyword(node, "out") or has_kwargs(node):
        return  # (a CPU generator makes the same numbers on any machine: a deliberate CPU draw)
    if _zero_sized(node, q):
        return  # ``torch.empty(0).to(x.device)``, a seed for ``torch.cat``: no byte crosses the bus
    sem = ctx.semantic
    region, caller = region_of(ctx, node) or model_loop(ctx, node), None
    if region is None and (helper := step_helper(ctx, node)) is not None:
        region, caller = helper
    elsewhere = project_step_caller(ctx, node) if region is None else None
    if elsewhere is not None:  # ``to_matrix(net(x))`` in another module's batch loop: a helper of this module
        region = sem.function_of(node)
    if region is None:
        return
    move, helper = _moved_at_once(ctx, node) or _moved_next(ctx, node, region) or _attribute_moved_next(ctx, node), None
    if move is None and (found := _moved_by_helper(ctx, node)) is not None:
        move, helper = found  # ``cuda_variable(torch.zeros(n, 1))``: a helper that moves what it is handed
    if move is None:
        move = _moved_by_every_caller(ctx, node)  # ``return 2 * torch.rand(b, d) - 1``, ``sample_noise(b, d).to(dev)``
    if move is None:
        return
    device = helper or _move_target(sem, move)
    last = device.rsplit(".", 1)[-1] if device is not None else ""
    if device is None or device.strip("'\"").startswith("cpu") or flow.is_cpu_name(last) and not _GPU_WORD.search(last) \
            or _device_of_host_batch(ctx, move):  # (``.to(self.gpu_id)``: a GPU index, though named as an id)
        return
    if isinstance(region, _LOOPS) and sem.under_step_guard(node, region):
        # (``if i % GENERATE_EVERY == 0:``: a copy every N steps costs nothing worth telling, unless a sampling loop
        # inside that guard makes one per pass: ``for _ in range(gen_i): g(torch.randn(n, k).cuda())``)
        inner = model_loop(ctx, node)
        if inner is None or inner is region or not sem.contains(region, inner) or sem.under_step_guard(node, inner):
            return
        region = inner
    if branch_no_caller_takes(ctx, node) or branch_no_caller_chooses(ctx, node) or sem.guards.on_cpu_branch(node) or program.is_rpc_program(sem) \
            or made_once(ctx, node, region) or _nan_fallback(ctx, node, region) \
            or sem.in_handler(node, region):  # (``except RuntimeError: return torch.rand(...).to(dev)``: a fallback)
        return
    how = "cuda" if helper == "cuda" else "to" if helper else method_name(move)
    if how != "cuda" and not program.runs_on_accelerator(sem) and not (
            caller is None and isinstance(region, (ast.FunctionDef, ast.AsyncFunctionDef))
            and (device.endswith((".device", ".device()")) and (not device.startswith("self.") or device.count(".") >= 2
                                                 and not _OPTIONS_DEVICE.match(device))
                 or device == "self.device" and _weights_device_property(sem, region)
                 or _input_device_alias(ctx, move, region)
                 or region.name == "__init__" and (b := sem.binding_at(device, move)) is not None and b.is_param)):
        return  # (a module's forward moving to its input's device is written for any device: the driver's GPU too; so
        # is a mask class's ``__init__`` a forward builds with ``device=queries.device``)
    made = ctx.name(node, 60)
    maker, dev = f"{ctx.name(node.func)}(...", device if how in ("to", "type_as") else "..."
    if how == "to" and move.args and isinstance(move.args[0], ast.Name) and device == f"{move.args[0].id}.device":
        dev = f"{device}, dtype={move.args[0].id}.dtype"  # (``.to(h)`` casts to ``h``'s dtype too)
    if constant:  # ``torch.LongTensor([[SOS_token] * b])``: the same numbers each step, made where they are used
        dtype = LEGACY_DTYPES.get(q.split(".")[1])
        maker = f"torch.tensor({ctx.name(node.args[0], 40)}" + (f", dtype=torch.{dtype}" if dtype else "")
    elif counting:  # (a legacy constructor takes no device: its arange does)
        rng = node.args[0] if dotted(node.args[0].func) == "range" else node.args[0].args[0]  # type: ignore[attr-defined]
        maker = f"torch.arange({', '.join(ctx.name(a) for a in rng.args)}"  # type: ignore[attr-defined]
    elif q.split(".")[1] in LEGACY_TENSORS:  # (``torch.FloatTensor(1, device=...)`` raises: a legacy constructor
        dtype = LEGACY_DTYPES.get(q.split(".")[1])  # makes CPU tensors only; ``torch.empty`` takes the device)
        maker = f"torch.empty({', '.join(ctx.name(a) for a in node.args)}" + (f", dtype=torch.{dtype}" if dtype else "")
    mover = f"`{ctx.name(move.func)}()`" if helper else f"`.{how}()`"
    there = f"`{maker}, device={dev})`" if how in ("to", "type_as") else \
        f"`{maker}, device=...)` with the device {mover} moves it to"
    owner = sem.class_of(region) if isinstance(region, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
    where = elsewhere or ("the loop" if isinstance(region, _LOOPS) else "forward()" if caller is None and
                          region.name == "forward" else f"`{owner.name}(...)`, which forward() builds"  # type: ignore[union-attr]
                          if caller is None and region.name == "__init__" and owner is not None
                          else f"`{region.name}()`, which forward() calls" if caller is None
                          else f"the loop at line {caller.lineno}, through `{region.name}`")  # type: ignore[attr-defined]
    ctx.report("TD611", node, f"`{made}` is made on the CPU and copied to the device by {mover} on "
               f"every step of {where}: an allocation and a host-to-device copy each time",
               fix=f"make it there: {there}")


_CONSTANT_NAME = lazy(r"^[A-Z][A-Z0-9_]*$|^\w+_(token|TOKEN|idx|IDX|id|ID)$")


def _constant_data(ctx: Context, call: ast.Call) -> bool:
    """``torch.LongTensor([[SOS_token for _ in range(b)]])``, ``torch.tensor([0.5, 0.5])``: a tensor of the same
    numbers on every call (literals, or constants: ``PAD_IDX``, ``SOS_token``), repeated by ``[c] * n`` or a
    comprehension at most. Data a step reads (a label, a batch's list) is not; nor is a bare number, which a legacy
    constructor takes for a size."""
    if len(call.args) != 1 or call.keywords and not all(k.arg == "dtype" for k in call.keywords) \
            or not isinstance(call.args[0], (ast.List, ast.Tuple, ast.ListComp, ast.BinOp)):
        return False
    return _constant_numbers(ctx.semantic, call.args[0], 0)


def _constant_numbers(sem, e: ast.AST, depth: int) -> bool:  # type: ignore[no-untyped-def]
    """(``_constant_data``'s test of one expression: a module function, no closure that would keep the model alive.)"""
    if depth > 4:
        return False
    if isinstance(e, ast.Constant):
        return type(e.value) in (int, float, bool)
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        return _constant_numbers(sem, e.operand, depth + 1)
    if isinstance(e, ast.Name):
        bound = sem.bindings_of(e.id)
        return bool(_CONSTANT_NAME.match(e.id)) and (not bound or all(
            isinstance(b.value, ast.Constant) and sem.frame(b.node).kind == "module" for b in bound))
    if isinstance(e, (ast.List, ast.Tuple)):
        return bool(e.elts) and all(_constant_numbers(sem, x, depth + 1) for x in e.elts)
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Mult):  # ``[SOS] * batch_size``
        return isinstance(e.left, ast.List) and _constant_numbers(sem, e.left, depth + 1)
    if isinstance(e, ast.ListComp) and len(e.generators) == 1:  # ``[SOS for _ in range(b)]``
        return _constant_numbers(sem, e.elt, depth + 1)
    return False


def _weights_device_property(sem, func: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``self.device`` in a method of a module class that never sets it: the framework's property, the device of the
    module's own weights (a Hugging Face ``PreTrainedModel``'s, a Lightning module's), like ``next(self.parameters())
    .device``. (One the class sets, ``self.device = device``, is whatever its callers chose.)"""
    cls = sem.class_of(func)
    if cls is None or cls.name not in sem.module_classes:
        return False
    return not any(n.attr == "device" and isinstance(n.value, ast.Name) and n.value.id == "self"
                   and not isinstance(n.ctx, ast.Load) and sem.class_of(n) is cls for n in sem.of_type(ast.Attribute))


_NAN_TESTS = frozenset({"torch.isnan", "torch.isinf", "torch.isfinite", "math.isnan", "math.isinf", "numpy.isnan"})


def _nan_fallback(ctx: Context, node: ast.AST, region: ast.AST) -> bool:
    """``if torch.isnan(self.K).any(): self.K = torch.eye(n).to(self.K.device)``: a fallback for a step that went
    wrong, not the work of every step."""
    sem = ctx.semantic
    child = node
    for up in sem.ancestors(node):
        if up is region:
            return False
        if isinstance(up, ast.If) and any(s is child for s in up.body) and any(
                isinstance(c, ast.Call) and (ctx.call_name(c) or "") in _NAN_TESTS for c in sem.subtree(up.test)):
            return True
        child = up
    return False


_GPU_WORD = lazy(r"(?i)gpu|cuda|rank|dev")
_DEVICE_WORD = lazy(r"(?i)dev|gpu|cuda|cpu|rank")


def _input_device_alias(ctx: Context, move: ast.Call, func: ast.AST) -> bool:
    """The move's device is a name the function bound to a tensor's device before it (``dev = seq.device``,
    ``self.device = x.device`` in ``forward``, ``device = next(self.parameters()).device``): the input's (or the
    module's own) device, as ``.to(seq.device)`` is."""
    sem = ctx.semantic
    arg = move.args[0] if move.args and method_name(move) == "to" else None
    key = dotted(arg) if isinstance(arg, (ast.Name, ast.Attribute)) else None
    if not key or key.endswith(".device") and not key.startswith("self."):
        return False  # (``.to(seq.device)`` itself: asked before)
    b = sem.binding_at(key, move) if isinstance(arg, ast.Name) else None
    if b is not None and b.is_param and b.node is func and key != "self" and not _DEVICE_WORD.search(key):
        return True  # ``.to(x)`` of the input ``x``: its device (and dtype)
    for node in sem.local_nodes(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and dotted(node.targets[0]) == key \
                and node.lineno <= move.lineno and isinstance(node.value, ast.Attribute) and node.value.attr == "device" \
                and (isinstance(node.value.value, ast.Name) and node.value.value.id != "self"
                     or _first_parameter(node.value.value)):
            return True  # (``device = next(self.parameters()).device``: where the module's own weights are)
    return False


def _first_parameter(expr: ast.AST) -> bool:
    """``next(self.parameters())`` (or of ``buffers()``): a tensor of the module itself."""
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "next" and len(expr.args) == 1 \
        and isinstance(arg := expr.args[0], ast.Call) and isinstance(arg.func, ast.Attribute) \
        and arg.func.attr in ("parameters", "buffers") and isinstance(arg.func.value, ast.Name) and arg.func.value.id == "self"


def _follows_its_inputs(call: ast.Call, name: str) -> bool:
    """``torch.normal(mean=mu, std=sigma)`` without a size, ``torch.bernoulli(probs)``: drawn from tensors, on
    their device (a mean made on the GPU gives GPU noise); only ``torch.normal(0.0, 1.0, size=...)`` makes its own.
    (TD611 still tells ``torch.normal(mu, sigma).to(dev)``: a move written there says the draw is on the host.)"""
    if name == "torch.bernoulli":
        return True
    return name == "torch.normal" and len(call.args) < 3 and keyword(call, "size") is None


def _device_of_host_batch(ctx: Context, move: ast.Call) -> bool:
    """``.to(future.device)`` where ``future`` is a batch element the loop has not moved (``future =
    future.float()`` keeps it on the host): a copy from the host to the host, which copies nothing."""
    sem = ctx.semantic
    arg = move.args[0] if move.args and method_name(move) == "to" else None
    if not (isinstance(arg, ast.Attribute) and arg.attr == "device" and isinstance(arg.value, ast.Name)):
        return False
    loop = sem.enclosing_loop(move, "batch")
    return loop is not None and arg.value.id in sem.batch_vars(loop) and not batch_on_device(ctx, arg.value.id, move, loop)


def _zero_sized(call: ast.Call, name: str) -> bool:
    """A size with a literal 0 in it (``torch.empty(0)``, ``torch.zeros((0, d))``): a tensor with no elements. Only
    the factories whose arguments are the size (``torch.arange(0, n)`` starts at 0)."""
    if name not in ("torch.zeros", "torch.ones", "torch.empty", "torch.rand", "torch.randn", "torch.full"):
        return False
    sizes = call.args[:1] if name == "torch.full" else list(call.args)
    if len(sizes) == 1 and isinstance(sizes[0], (ast.Tuple, ast.List)):
        sizes = list(sizes[0].elts)
    return any(isinstance(a, ast.Constant) and type(a.value) is int and a.value == 0 for a in sizes)


def _moved_next(ctx: Context, node: ast.Call, region: ast.AST) -> ast.Call | None:
    """``z = torch.rand(b, k)`` whose next use, in the same loop or forward(), moves it: ``z = z.cuda()``,
    ``x, z = x.cuda(), z.cuda()`` (also under ``if self.gpu_mode:``)."""
    sem = ctx.semantic
    parent = sem.parent(_host_made(ctx, node))  # (``eye = torch.eye(8)[None]``, ``z = (torch.rand(b, k) - 0.5) / 0.5``)
    if not isinstance(parent, ast.Assign) or not all(isinstance(t, ast.Name) for t in parent.targets):
        return None
    for target in parent.targets[1:]:  # ``h0 = c0 = torch.zeros(1, b, h)``: either name's move moves it
        move = _moved_next_as(ctx, parent, target.id, region)  # type: ignore[attr-defined]
        if move is not None:
            return move
    return _moved_next_as(ctx, parent, parent.targets[0].id, region)  # type: ignore[attr-defined]


def _moved_next_as(ctx: Context, parent: ast.Assign, name: str, region: ast.AST) -> ast.Call | None:
    sem = ctx.semantic
    end = (parent.end_lineno or parent.lineno, parent.end_col_offset or 0)
    hops = 0
    for use in sem.body(region):
        if isinstance(use, ast.Name) and use.id == name and (use.lineno, use.col_offset) > end:
            up = sem.parent(use)
            if isinstance(up, ast.Subscript) and up.value is use and isinstance(up.ctx, ast.Store):
                if _number(getattr(sem.parent(up), "value", None)):
                    continue  # ``stop[j, :n] = 0``: marked in place on the host first, with numbers
                return None  # ``grid[row, :n] = torch.LongTensor(s)``: host data, which must cross the bus anyway
            if isinstance(up := sem.parent(use), ast.Attribute) and up.attr in _FILLS \
                    and isinstance(fill := sem.parent(up), ast.Call) and fill.func is up \
                    and isinstance(sem.parent(fill), ast.Expr) and hops < 3:
                hops += 1  # ``label_logits.zero_()``: filled in place on the host, then moved
                end = (fill.end_lineno or fill.lineno, fill.end_col_offset or 0)
                continue
            again = _rebound_reshaped(sem, use, name)
            if again is not None and hops < 3:  # ``rng = rng.unsqueeze(0).expand(b, n)``: still the host tensor
                hops += 1
                end = (again.end_lineno or again.lineno, again.end_col_offset or 0)
                continue
            if (use.lineno, use.col_offset) <= end:
                continue
            if not isinstance(use.ctx, ast.Load) and sem.in_other_branch(use, parent):
                continue  # ``if bi: h0 = torch.zeros(2, b, h)`` / ``else: h0 = torch.zeros(1, b, h)``: the other arm's
            if not isinstance(use.ctx, ast.Load):
                stmt = sem.statement_of(use)
                if isinstance(stmt, ast.Assign) and any(isinstance(n, ast.Name) and n.id == name and
                                                        isinstance(n.ctx, ast.Load) for n in sem.subtree(stmt.value)):
                    continue  # ``x, z = x.cuda(), z.cuda()``: the value, read first, comes next
                return None  # rebound before any use
            move = _move_through_methods(sem, use)
            if move is not None and _read_on_the_host_too(sem, name, use, region):
                return None  # ``net(x, t.to(dev))`` then ``host_update(x, t, eps)``: the host needs it as well
            return move
    return None


def _attribute_moved_next(ctx: Context, node: ast.Call) -> ast.Call | None:
    """``self.h0 = torch.zeros(2, b, h)``, then ``self.h0 = self.h0.cuda()`` (under ``if torch.cuda.is_available():``
    or not) as the next thing the function does with that attribute: the move of the host tensor."""
    sem = ctx.semantic
    made = sem.parent(_host_made(ctx, node))
    func = sem.function_of(node)
    if func is None or not (isinstance(made, ast.Assign) and len(made.targets) == 1
                            and isinstance(made.targets[0], ast.Attribute) and (key := dotted(made.targets[0]))
                            and key.startswith("self.") and key.count(".") == 1):
        return None
    end = (made.end_lineno or made.lineno, made.end_col_offset or 0)
    for n in sem.local_nodes(func):
        if not (isinstance(n, ast.Attribute) and dotted(n) == key) or (n.lineno, n.col_offset) <= end:
            continue
        if isinstance(n.ctx, ast.Store):  # (the target comes before the value it is given)
            stmt, n = sem.parent(n), None
            value = stmt.value if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in ("cuda", "to") \
                    and dotted(value.func.value) == key:
                return value  # ``self.h0 = self.h0.cuda()``
        return None  # (read, or rebound, before any move: the host tensor is used as it is)
    return None


def _on_the_host(method: str, call: ast.Call) -> bool:
    """A method that leaves a host tensor on the host: a cast without arguments, a reshape, an in-place fill."""
    return method in _CASTS and not call.args or method in _RESHAPES or method in _FILLS \
        or method in ("detach", "clone", "contiguous") and not call.args  # (``Variable(...).detach().cuda()``)


def _number(expr: ast.AST | None) -> bool:
    if isinstance(expr, ast.UnaryOp):
        expr = expr.operand
    return isinstance(expr, ast.Constant) and type(expr.value) in (int, float, bool)


def _rebound_reshaped(sem, use: ast.Name, name: str) -> ast.Assign | None:  # type: ignore[no-untyped-def]
    """The statement ``name = name.unsqueeze(0).expand(b, n)`` (casts, reshapes, fills) that ``use`` starts: the name
    still holds the host tensor after it."""
    cur: ast.AST = use
    while True:
        up = sem.parent(cur)
        if isinstance(up, ast.Compare) and up.left is cur and len(up.comparators) == 1 and _host_number(up.comparators[0]):
            cur = up  # ``mask = (mask == 0).unsqueeze(1)``: a mask cut on the host (SASRec's causal mask)
            continue
        if isinstance(up, ast.BinOp) and _host_number(up.right if up.left is cur else up.left):
            cur = up  # ``fake = (fake + 1) % 2``: arithmetic with numbers, on the host
            continue
        if isinstance(up, ast.Attribute) and isinstance(call := sem.parent(up), ast.Call) and call.func is up \
                and _on_the_host(up.attr, call):
            cur = call
            continue
        break
    stmt = sem.parent(cur)
    return stmt if cur is not use and isinstance(stmt, ast.Assign) and stmt.value is cur and len(stmt.targets) == 1 \
        and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id == name else None


def _read_on_the_host_too(sem, name: str, moved: ast.Name, region: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """A later read of ``name`` in the region, before it is rebound, that moves nothing: the host copy is used."""
    stmt = sem.statement_of(moved)
    if isinstance(stmt, ast.Assign) and any(isinstance(n, ast.Name) and n.id == name for t in stmt.targets
                                            for n in sem.subtree(t)):
        return False  # ``x = x.cuda()``: the name holds the copy from here on
    for use in sem.body(region):
        if not (isinstance(use, ast.Name) and use.id == name) or use is moved \
                or (use.lineno, use.col_offset) <= (moved.lineno, moved.col_offset):
            continue
        if not isinstance(use.ctx, ast.Load):
            return False
        if _move_through_methods(sem, use) is None and not _other_side(sem, use, moved):
            return True
    return False


def _other_side(sem, a: ast.AST, b: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``a`` and ``b`` sit on the two sides of one conditional (``noise.cuda() if use_cuda else noise.cpu()``, or
    the two branches of an ``if``): never both run."""
    if sem.in_other_branch(a, b):
        return True
    if isinstance(ret := sem.statement_of(b), ast.Return) and isinstance(branch := sem.parent(ret), ast.If) \
            and ret in branch.body and not branch.orelse and not sem.contains(branch, a):
        return True  # ``if use_cuda: return h0.cuda()`` then ``return h0``: only when the branch is not taken
    for up in sem.ancestors(a):
        if isinstance(up, ast.IfExp):
            sides = (up.body, up.orelse)
            return any(sem.contains(x, a) for x in sides) and any(sem.contains(x, b) for x in sides) and \
                not any(sem.contains(x, a) and sem.contains(x, b) for x in sides)
        if isinstance(up, ast.stmt):
            return False
    return False


def _moved_at_once(ctx: Context, node: ast.Call) -> ast.Call | None:
    """The ``.to(device)`` / ``.cuda()`` applied to the factory's result in the same expression: directly,
    after a cast (``.float()``, ``.type_as(x)``), a reshape (``.view(-1, 1)``, ``.expand_as(x)``), an in-place fill
    (``.random_(10)``) or a scaling by a number, or through ``Variable(...)``."""
    top = _host_made(ctx, node)
    up = ctx.semantic.parent(top)
    call = ctx.semantic.parent(up) if isinstance(up, ast.Attribute) and up.attr in ("to", "cuda", "type_as", "type") else None
    return call if isinstance(call, ast.Call) and call.func is up and _move_target(ctx.semantic, call) is not None else None


def _moved_by_every_caller(ctx: Context, node: ast.Call) -> ast.Call | None:
    """``def sample_noise(b, d): return 2 * torch.rand(b, d) - 1`` (or such a method of a plain class), whose every call
    in the file moves what it returns (``sample_noise(16, 8).type(dtype)``): made on the host by the helper, copied by
    its callers."""
    sem = ctx.semantic
    ret = sem.parent(_host_made(ctx, node))
    func = sem.function_of(node)
    if not isinstance(ret, ast.Return) or func is None or (cls := sem.class_of(func)) is not None and (
            func.name.startswith("__") or func.name == "forward"):
        return None  # (a plain class's method: ``sched.sample_timesteps(n).to(device)`` of ``return torch.randint(...)``)
    sites = sem.call_sites(func)
    if cls is not None and cls.name in sem.module_classes and any(sem.class_of(s) is cls for s in sites):
        return None  # (a network's method its own forward runs: the forward rules' business; one the training loop
        # calls on the model, ``h = rec.initHidden().to(device)`` every iteration, is the loop's)
    moves = [_move_through_methods(sem, site) for site in sites]
    return moves[0] if sites and all(m is not None for m in moves) else None


def _moved_by_helper(ctx: Context, node: ast.Call) -> tuple[ast.Call, str] | None:
    """``cuda_variable(torch.zeros(n, 1))``, ``label2onehot(torch.zeros(b, c))``: the factory's result handed to a
    function (of this file or of another module of the project) that moves that parameter to a device (``t.cuda()``
    when CUDA is available): the helper's call and the device."""
    sem = ctx.semantic
    top = _host_made(ctx, node)
    call = sem.parent(top)
    if not isinstance(call, ast.Call) or not isinstance(call.func, (ast.Name, ast.Attribute)) \
            or not any(a is top for a in call.args):
        return None
    at = next(i for i, a in enumerate(call.args) if a is top)
    funcs = sem.resolve(call) if isinstance(call.func, ast.Name) else []
    if len(funcs) == 1:
        params = [a.arg for a in funcs[0].args.posonlyargs + funcs[0].args.args]  # type: ignore[attr-defined]
        moves = dict(moved_params(sem, funcs[0]))
    elif not funcs and (summary := sem.external(call)) is not None and getattr(summary, "moves", None):
        params, moves = list(summary.params), dict(summary.moves)  # type: ignore[attr-defined]
    else:
        return None
    dev = moves.get(params[at]) if at < len(params) else None
    return (call, dev) if dev else None


def _move_target(sem, call: ast.Call) -> str | None:  # type: ignore[no-untyped-def]
    """Where a move sends a tensor (``sem.move_device``), and for ``t.type_as(ref)`` the device of ``ref``
    (``ref.device``): a cast to the type of a tensor moves to its device too (a CUDA ``ref``: a copy to the GPU)."""
    if method_name(call) == "type_as":
        return f"{sem.segment(call.args[0])}.device" if len(call.args) == 1 and not call.keywords \
            and isinstance(call.args[0], (ast.Name, ast.Attribute)) and not _host_bound(sem, call.args[0], call) else None
    if method_name(call) == "type":  # ``.type(ref.type())``: cast to the type of ``ref``, on its device
        ref = _type_of(call.args[0]) if len(call.args) == 1 else None
        return f"{sem.segment(ref)}.device" if ref is not None else sem.move_device(call)  # (``.type(Tensor)`` of
        # ``Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor``: "cuda")
    if method_name(call) == "to" and len(call.args) == 1 and not call.keywords and isinstance(ref := call.args[0], ast.Name) \
            and sem.kind_of(ref.id, call) == "tensor" and not _host_bound(sem, ref, call):
        return f"{ref.id}.device"  # ``torch.zeros(n, 1).to(h)``: to the device (and dtype) of ``h``
    return sem.move_device(call)


_FROM_HOST = frozenset({"torch.from_numpy", "torch.tensor", "torch.as_tensor", "torch.Tensor", "torch.FloatTensor"})


def _host_bound(sem, ref: ast.AST, at: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``img`` of ``.type_as(img)`` where ``img = torch.from_numpy(a).unsqueeze(0)``, bound just before and moved
    by nothing in its value: a host tensor, so the cast copies to no device."""
    if not isinstance(ref, ast.Name) or (b := sem.binding_at(ref.id, at)) is None or b.is_param or b.index is not None \
            or b.value is None:
        return False
    root = b.value
    while isinstance(root, ast.Call) and isinstance(root.func, ast.Attribute) and sem.qualname(root.func) is None:
        if root.func.attr in ("to", "cuda", "type_as", "type", "pin_memory") or keyword(root, "device") is not None:
            return False
        root = root.func.value
    if not isinstance(root, ast.Call):
        return False
    if sem.qualname(root.func) in _FROM_HOST:
        return keyword(root, "device") is None
    if funcs := sem.resolve(root):  # ``img = util.single2tensor4(img)``: a helper that hands back ``torch.from_numpy``
        return all(returns_from_numpy(sem, f) for f in funcs)
    return getattr(sem.external(root), "returns", None) == "host"


_ELEMENTWISE = frozenset({"torch.exp", "torch.log", "torch.sqrt", "torch.rsqrt", "torch.sin", "torch.cos", "torch.pow",
                          "torch.abs", "torch.sigmoid", "torch.tanh", "torch.exp2", "torch.log2", "torch.log10",
                          "torch.floor", "torch.ceil", "torch.round", "torch.clamp", "torch.reciprocal"})


def _host_number(expr: ast.AST) -> bool:
    """A Python number: a constant, a name, ``math.log(10000)``, ``dim // 2``, ``-x``, ``len(xs)``."""
    if isinstance(expr, (ast.Constant, ast.Name)):
        return True
    if isinstance(expr, ast.UnaryOp):
        return _host_number(expr.operand)
    if isinstance(expr, ast.BinOp):
        return _host_number(expr.left) and _host_number(expr.right)
    if isinstance(expr, ast.Call):  # (``gt.size(1)``, ``x.dim()``: a shape is a Python int)
        name = dotted(expr.func) or ""
        return (name.startswith("math.") or name in ("len", "int", "float") or method_name(expr) in ("size", "dim", "numel")
                or name.rsplit(".", 1)[-1] in ("get_rank", "get_world_size")) and all(map(_host_number, expr.args))
        # (``n * dist.get_rank()``: a process's offset in a gathered batch)
    if isinstance(expr, ast.Subscript):  # ``x.shape[1]``
        return isinstance(expr.value, ast.Attribute) and expr.value.attr == "shape" and _host_number(expr.slice)
    return False


_FILLS = frozenset({"random_", "fill_", "normal_", "uniform_", "zero_", "bernoulli_", "exponential_", "geometric_",
                    "cauchy_", "log_normal_", "fill_diagonal_"})


def _host_made(ctx: Context, node: ast.Call) -> ast.AST:
    """The largest expression around the factory call that is still made on the host from it: through casts,
    reshapes, in-place fills, masks and subscripts, arithmetic with numbers or other host factories."""
    sem = ctx.semantic
    cur: ast.AST = node
    for _ in range(12):
        up = sem.parent(cur)
        if isinstance(up, ast.Call) and cur in up.args[:1] and ((dotted(up.func) or "").rsplit(".", 1)[-1] == "Variable"
                                                                 or model_is_stateless(sem, up.func, up)
                                                                 or len(up.args) == 1 and not up.keywords and
                                                                 (ctx.call_name(up) or "") in _LEGACY_WRAPS):
            cur = up  # ``Variable(...)``; ``drop(torch.ones(x.shape))`` through a module that holds nothing;
            continue  # ``torch.Tensor(torch.zeros(b, n))``: the same host tensor
        if isinstance(up, ast.Call) and up.args[:1] == [cur] and (ctx.call_name(up) or "") in _KEEP_PLACE:
            cur = up  # ``torch.diag(torch.ones(n))``: a torch function of the host tensor, a host tensor
            continue
        if isinstance(up, ast.BinOp) and _host_number(up.right if up.left is cur else up.left):
            cur = up  # ``(torch.ones(b, l) / l).to(x.device)``: scaled by a number on the host first
            continue  # (``-math.log(10000) * torch.arange(half) / half``)
        if isinstance(up, ast.UnaryOp) and isinstance(up.op, ast.USub):
            cur = up
            continue
        if isinstance(up, ast.Compare) and up.left is cur and len(up.comparators) == 1 \
                and (_host_number(up.comparators[0]) or isinstance(up.comparators[0], ast.Attribute)):
            cur = up  # ``(torch.rand(b, n) < p).to(x.device)``: a mask drawn and cut on the host
            continue
        if isinstance(up, ast.BinOp) and up.left is cur and _host_factory(ctx, up.right):
            cur = up  # ``(torch.ones(k, k) - torch.eye(k)).to(dev)``: two host factories combined, then moved
            continue
        if isinstance(up, ast.Call) and up.args[:1] == [cur] and (ctx.call_name(up) or "") in _ELEMENTWISE and all(
                _host_number(a) or _host_factory(ctx, strip_methods(a, _CASTS)) for a in up.args[1:]):
            cur = up  # ``torch.exp(-c * torch.arange(half) / half)``, ``torch.pow(0.4 * torch.ones(n), torch.arange(n))``
            continue
        if isinstance(up, ast.Subscript) and up.value is cur or isinstance(up, ast.Call) and up.args[:1] == [cur] \
                and ((ctx.call_name(up) or "") in _MASK_OPS or (ctx.call_name(up) or "") in _EINOPS):
            cur = up  # ``torch.triu(torch.ones(n, n), diagonal=1)[..., None].to(dev)``: a mask cut on the host first
            continue
        if isinstance(up, (ast.Tuple, ast.List)) and up.elts[:1] == [cur] and isinstance(joined := sem.parent(up), ast.Call) \
                and joined.args[:1] == [up] and (ctx.call_name(joined) or "") in ("torch.cat", "torch.stack", "torch.concat") \
                and all(_host_factory(ctx, strip_methods(e, _CASTS)) for e in up.elts[1:]):
            cur = joined  # ``torch.cat((torch.arange(0, m), torch.arange(-m, 0)), 0)``: host factories joined on the host
            continue  # (told once, at the first of them)
        if isinstance(up, (ast.ListComp, ast.GeneratorExp)) and up.elt is cur \
                and isinstance(joined := sem.parent(up), ast.Call) and joined.args[:1] == [up] \
                and (ctx.call_name(joined) or "") in ("torch.cat", "torch.stack", "torch.concat"):
            cur = joined  # ``torch.cat([torch.zeros(n).fill_(i) for i, n in enumerate(sizes)])``: parts made and joined
            continue  # on the host
        if isinstance(up, ast.Attribute) and up.attr in ("T", "mT", "data") and not (
                isinstance(sem.parent(up), ast.Call) and sem.parent(up).func is up):
            cur = up  # ``torch.arange(n).T.unsqueeze(1)``: the transpose of the host tensor
            continue
        if isinstance(up, ast.Attribute) and up.attr == "to" and isinstance(call := sem.parent(up), ast.Call) \
                and call.func is up and len(call.args) == 1 and not call.keywords and _dtype_only(call.args[0]):
            cur = call  # ``torch.zeros(n).to(t.dtype).to(t.device)``: a cast on the host, then the move
            continue
        if not isinstance(up, ast.Attribute) or up.attr in ("to", "cuda"):
            return cur
        call = sem.parent(up)
        if not isinstance(call, ast.Call) or call.func is not up:
            return cur
        if not (_on_the_host(up.attr, call) or up.attr == "expand_as" or _host_type_cast(sem, call)):
            return cur  # (``.type_as(ref)``: a move to ``ref``'s device, ``_moved_at_once``'s)
        cur = call
    return cur


def _dtype_only(arg: ast.AST) -> bool:
    """``t.dtype``, ``torch.float32``, ``torch.long``: a dtype, no device."""
    name = dotted(arg) or ""
    return name.endswith(".dtype") or name.startswith("torch.") and name.rsplit(".", 1)[-1] in DTYPE_NAMES


def _host_type_cast(sem, call: ast.Call) -> bool:  # type: ignore[no-untyped-def]
    """``.type(torch.ByteTensor)``: a cast to a host tensor type (or a dtype), made on the host."""
    return method_name(call) == "type" and len(call.args) == 1 and "cuda" not in sem.segment(call.args[0]) \
        and _type_of(call.args[0]) is None and not sem.cuda_tensor_type(call.args[0], call)


def _type_of(arg: ast.AST) -> ast.AST | None:
    """``ref`` of ``ref.type()``: the tensor whose type (device included) a ``.type(...)`` cast takes."""
    return arg.func.value if isinstance(arg, ast.Call) and method_name(arg) == "type" and not arg.args \
        and not arg.keywords and isinstance(arg.func.value, (ast.Name, ast.Attribute)) else None  # type: ignore[attr-defined]


def _host_factory(ctx: Context, expr: ast.AST) -> bool:
    """``torch.eye(k)``: a torch factory told no device."""
    q = ctx.call_name(expr) or "" if isinstance(expr, ast.Call) else ""
    return q.startswith("torch.") and q.count(".") == 1 and q.split(".")[1] in _MAKERS \
        and keyword(expr, "device") is None  # type: ignore[arg-type]


def _scalar_tensor(call: ast.Call) -> bool:
    """``torch.tensor(0.5)``: a 0-dim CPU tensor mixes with CUDA tensors without error."""
    if not call.args:
        return False
    name = dotted(call.func) or ""
    return name.endswith(("tensor", "as_tensor")) and _scalar_expr(call.args[0])


def _scalar_expr(arg: ast.AST) -> bool:
    """A number, a name, a module's constant (``torch.pi``) or arithmetic of those (``2.0 / torch.pi``: GPT-2's GELU)."""
    if isinstance(arg, ast.UnaryOp):
        return _scalar_expr(arg.operand)
    if isinstance(arg, ast.BinOp):
        return _scalar_expr(arg.left) and _scalar_expr(arg.right)
    if isinstance(arg, ast.Attribute):
        return (dotted(arg) or "").split(".")[0] in ("math", "torch", "np", "numpy")
    if isinstance(arg, ast.Call):  # ``-math.log(10000.0) / x.size(-1)``, ``float(n)``: numbers
        name = dotted(arg.func) or ""
        return (name.startswith("math.") or name in ("float", "int", "len") or method_name(arg) == "size" and bool(arg.args)) \
            and all(_scalar_expr(a) for a in arg.args) and not arg.keywords
    if isinstance(arg, ast.Subscript):  # ``x.shape[-1]``
        return isinstance(arg.value, ast.Attribute) and arg.value.attr == "shape"
    return isinstance(arg, ast.Name) or isinstance(arg, ast.Constant) and type(arg.value) in (int, float, bool)


def _region_seeds(ctx: Context, region: ast.AST) -> set[str]:
    if isinstance(region, _LOOPS):
        return set()
    return {a.arg for a in region.args.args[1:] if not flow.is_cpu_name(a.arg)  # type: ignore[attr-defined]
            and not _handed_numbers(ctx, region, a.arg) and not _said_to_be_a_number(ctx, region, a)
            and not _handed_host_copies(ctx, region, a.arg)}


def _handed_host_copies(ctx: Context, func: ast.AST, param: str) -> bool:
    """Every call of ``func`` in this file hands ``param`` a tensor on the host (YOLO's ``build_targets(pred_boxes,
    ...)`` after ``pred_boxes = convert2cpu(...).detach()``: targets built on the CPU on purpose)."""
    sites = ctx.semantic.call_sites(func)
    return bool(sites) and all((given := call_argument(site, func, param)) is not None  # type: ignore[arg-type]
                               and made_on_host(ctx, given, site) for site in sites)


_RATE_NAME = lazy(r"(?i)^(?:(?:keep|drop|dropout|mask|noise)_?(?:prob|rate|ratio|p)|p|prob|rate|ratio|dropout)$")


def _said_to_be_a_number(ctx: Context, func: ast.AST, param: ast.arg) -> bool:
    """The parameter is annotated ``float``/``int``, named as a rate (``keep_prob``, ``drop_rate``, ``p``), or its
    function compares it with a number literal (``if keep_rate == 1.0: return adj``): a rate or a count, not a tensor
    of the step."""
    if isinstance(param.annotation, ast.Name) and param.annotation.id in ("float", "int") \
            or _RATE_NAME.match(param.arg):
        return True
    return any(isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.ops[0], (ast.Eq, ast.NotEq))
               and isinstance(n.left, ast.Name) and n.left.id == param.arg and isinstance(c := n.comparators[0], ast.Constant)
               and type(c.value) is float for n in ctx.semantic.local_nodes(func))


def _handed_numbers(ctx: Context, func: ast.AST, param: str) -> bool:
    """Every call of ``func`` in this file hands ``param`` a Python number: a literal, or ``self.noobject_scale`` that
    the class sets to one (YOLOv4's ``build_targets(..., self.noobject_scale, ...)``)."""
    sem = ctx.semantic
    sites = sem.call_sites(func)
    if not sites:
        return False
    for site in sites:
        given = call_argument(site, func, param)  # type: ignore[arg-type]
        if given is None or not _number_expr(ctx, given, site, 0):
            return False
    return True


def _number_expr(ctx: Context, given: ast.AST, at: ast.AST, depth: int) -> bool:
    """``given`` is a Python number: a literal, a shape or count (``y.size(1)``, ``len(xs)``), a name or attribute bound
    to one (``self.noobject_scale = 5.0``; ``self.drop = drop`` of a parameter defaulting to ``0.25``), or arithmetic
    of such (``1.0 - self.drop``)."""
    sem = ctx.semantic
    if depth > 3:
        return False
    if isinstance(given, ast.UnaryOp):
        return _number_expr(ctx, given.operand, at, depth + 1)
    if isinstance(given, ast.BinOp):
        return _number_expr(ctx, given.left, at, depth + 1) and _number_expr(ctx, given.right, at, depth + 1)
    if isinstance(given, ast.Constant):
        return type(given.value) in (int, float)
    if isinstance(given, (ast.Call, ast.Subscript)):
        return _host_number(given)  # (``y.size(1)``, ``x.shape[0]``, ``len(xs)``: shapes and counts are Python ints)
    key = dotted(given) if isinstance(given, (ast.Name, ast.Attribute)) else None
    b = sem.binding_at(key, at) if key else None
    if b is None or b.index is not None:
        return False
    if b.is_param:
        default = param_default(b.node, key) if isinstance(b.node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None  # type: ignore[arg-type]
        return isinstance(default, ast.Constant) and type(default.value) in (int, float)
    return b.value is not None and _number_expr(ctx, b.value, b.node, depth + 1)


def _combined_with(ctx: Context, node: ast.AST, hot: set[str], region: ast.AST) -> str | None:
    """The device tensor a new CPU tensor meets in arithmetic, a torch op, or a model/loss call."""
    sem = ctx.semantic
    parent = sem.parent(node)
    targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target] if isinstance(parent, ast.AnnAssign) else []
    if len(targets) == 1 and isinstance(targets[0], ast.Name):
        name = targets[0].id
        for use in ctx.semantic.body(region):
            if isinstance(use, ast.Name) and use.id == name and isinstance(use.ctx, ast.Load) and use.lineno >= node.lineno:
                if (b := sem.binding_at(name, use)) is not None and b.node is not parent:
                    continue  # (``scores = copy_to(scores, gpu)`` rebound it: later uses are of the moved copy)
                if _moved_through_methods(sem, use):
                    return None  # ``z = z.view(4, 16).to(dev)``: moved before it meets anything (TD611's case)
                partner = _meets(ctx, use, hot - {name})
                if partner:
                    return partner
        return None
    return _meets(ctx, node, hot)


def _moved_through_methods(sem, use: ast.AST) -> bool:
    return _move_through_methods(sem, use) is not None


_KEEP_PLACE = frozenset({"torch.diag", "torch.diag_embed", "torch.unsqueeze", "torch.squeeze", "torch.flatten",
                         "torch.tril", "torch.triu", "torch.t", "torch.transpose", "torch.reshape", "torch.flip"})
# (torch functions of one tensor whose result is where that tensor is)


def _move_through_methods(sem, use: ast.AST) -> ast.Call | None:
    """The move ending a chain of methods on ``use``: ``z.to(dev)``, ``z.view(4, 16).float().to(dev)``, also through
    the legacy wrapper: ``Variable(z, requires_grad=False).to(dev)``."""
    cur = use
    if isinstance(wrap := sem.parent(use), ast.Call) and wrap.args[:1] == [use] \
            and ((dotted(wrap.func) or "").rsplit(".", 1)[-1] == "Variable" or (sem.call_name(wrap) or "") in _KEEP_PLACE):
        cur = wrap  # (``torch.unsqueeze(dg, 0).repeat(b, 1, 1).cuda()``: still the host tensor until the move)
    while isinstance(up := sem.parent(cur), ast.Attribute) and isinstance(call := sem.parent(up), ast.Call) \
            and call.func is up:
        if up.attr in ("to", "cuda", "type_as") or up.attr == "type" and _move_target(sem, call) is not None:
            return call if _move_target(sem, call) is not None else None
        if up.attr not in _CASTS and up.attr not in _RESHAPES and up.attr not in _FILLS and up.attr != "expand_as":
            return None
        cur = call
    return None


def _scatters(ctx: Context, call: ast.Call) -> bool:
    """A call of a model wrapped in ``nn.DataParallel``: it scatters every tensor argument to the GPUs itself."""
    sem = ctx.semantic
    key = dotted(call.func)
    b = sem.binding_at(key, call) if key else None
    return b is not None and isinstance(b.value, ast.Call) and \
        (sem.call_name(b.value) or "").rsplit(".", 1)[-1] in ("DataParallel", "DataParallelWithCallback")


_SCALAR_CALLS = {"int", "float", "bool", "len", "round", "abs", "max", "min"}
_SCALAR_METHODS = {"item", "tolist", "size", "numel", "dim", "ndimension"}


def _host_scalar(expr: ast.AST) -> bool:
    """``int(y[0])``, ``x.item()``, ``x.size(0)``, ``x.shape[1]``: a Python number, whatever ``x`` is."""
    if isinstance(expr, ast.Call):
        if isinstance(expr.func, ast.Name) and expr.func.id in _SCALAR_CALLS:
            return True
        return isinstance(expr.func, ast.Attribute) and expr.func.attr in _SCALAR_METHODS
    if isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Attribute):
        return expr.value.attr == "shape"
    return isinstance(expr, ast.Attribute) and expr.attr in ("shape", "ndim")


def _copied_to_host(sem, expr: ast.AST) -> bool:
    """``n_wins[:, None].to("cpu").to(torch.long)``, ``lengths.cpu().view(-1, 1)``: the chain's last move is to the
    CPU (what follows it only casts, reshapes or indexes the copy)."""
    cur = expr
    while True:
        if isinstance(cur, ast.Subscript):
            cur = cur.value
            continue
        if not (isinstance(cur, ast.Call) and isinstance(cur.func, ast.Attribute)):
            return False
        if cur.func.attr == "cpu":
            return True
        if sem.move_device(cur) is not None:  # (``.to("cpu")``, ``.to(torch.device("cpu"))``; not ``.cuda()``)
            dev = keyword(cur, "device")
            arg = dev.value if dev is not None else cur.args[0] if cur.args else None
            return arg is not None and program.cpu_device_value(sem, arg)
        if cur.func.attr not in _CASTS and cur.func.attr not in _RESHAPES and cur.func.attr not in ("to", "detach"):
            return False
        cur = cur.func.value


def _partner(ctx: Context, expr: ast.AST, hot: set[str]) -> str:
    """The device tensor ``expr`` mentions, by name: ``mask`` in ``torch.ones_like(mask)`` (not ``torch``)."""
    for n in ctx.semantic.subtree(expr):
        if (key := dotted(n)) is not None and key in hot:
            return key
    return root_name(expr) or ctx.name(expr)


def _meets(ctx: Context, expr: ast.AST, hot: set[str]) -> str | None:
    sem = ctx.semantic
    child = expr
    for a in sem.ancestors(expr):
        if isinstance(a, (ast.BinOp, ast.Compare)):
            if isinstance(a, ast.BinOp):
                others = [a.right] if child is a.left else [a.left]
            else:
                others = [a.left, *a.comparators]
            for o in others:
                if o is not child and not _host_scalar(o) and not _host_factory(ctx, o) \
                        and flow.mentions(ctx.semantic, o, hot) and not _number_expr(ctx, o, a, 0) \
                        and not _copied_to_host(sem, o):
                    # (``torch.rand(b) < self.drop_prob``: a number; ``torch.ones(n, n) - torch.eye(n, n)``: two host
                    # tensors, whatever sizes they are given)
                    return _partner(ctx, o, hot)
        elif isinstance(a, ast.Call):
            if child is a.func:
                child = a
                continue
            if flow.consumer_kind(ctx.semantic, a) and _scatters(ctx, a):
                return None  # ``wrapped(feats, torch.arange(n), refs)``: DataParallel scatters every input to the GPUs
            if flow.consumer_kind(ctx.semantic, a) or (ctx.call_name(a) or "").startswith("torch."):
                for o in list(a.args) + [k.value for k in a.keywords]:
                    if o is not child and flow.mentions(ctx.semantic, o, hot):
                        return _partner(ctx, o, hot)
                if flow.consumer_kind(ctx.semantic, a):
                    return ctx.name(a.func)
            if not (ctx.call_name(a) or "").startswith("torch."):
                return None
        elif isinstance(a, ast.AugAssign):  # counts[c] += (pred == c).sum()
            if child is a.target and flow.mentions(ctx.semantic, a.value, hot):
                return _partner(ctx, a.value, hot)
            return None
        elif isinstance(a, ast.Subscript) and child is a.slice or isinstance(a, ast.stmt):
            return None
        child = a
    return None
