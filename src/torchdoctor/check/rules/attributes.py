"""Stage 2 rules, module state: a plain tensor attribute of an ``nn.Module`` (TD203), which ``model.to(device)``
leaves behind and ``state_dict()`` leaves out."""

from __future__ import annotations

import ast

from torchdoctor.check.astutil import FACTORIES, dotted, keyword, method_name, param_default, string_value
from torchdoctor.check.context import Context
from torchdoctor.check.registry import rule
from torchdoctor.check.semantic import program


# ---- TD203 --------------------------------------------------------------------------------
@rule("TD203", ast.Assign)
def plain_tensor_attribute(node: ast.AST, ctx: Context) -> None:
    """Plain tensor attribute set in an nn.Module's __init__: it stays behind on model.to(device)."""
    assert isinstance(node, ast.Assign)
    if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Attribute):
        return
    target = node.targets[0]
    value = node.value
    if isinstance(value, ast.IfExp):  # ``self.mean = torch.tensor(mean).view(-1, 1, 1) if mean else None``
        value = value.body if isinstance(value.body, ast.Call) else value.orelse
    if not (isinstance(target.value, ast.Name) and target.value.id == "self" and isinstance(value, (ast.Call, ast.BinOp))):
        return
    sem = ctx.semantic
    func, cls = sem.function_of(node), sem.class_of(node)
    if func is None or func.name != "__init__" or cls is None or cls.name not in sem.module_classes:
        return
    if not _new_tensor(ctx, value, node, 0) or sem.value_is_moved(value) or _made_on_a_given_device(value) \
            or _cast_to_a_cuda_type(ctx, value, node) or _arithmetic_of_moved(sem, value):
        return  # (``self.scale = torch.sqrt(torch.FloatTensor([0.5])).to(device)``: on the device from the start)
    if isinstance(value, ast.Call) and (ctx.call_name(value) or "").rsplit(".", 1)[-1] == "Variable" and value.args \
            and (isinstance(value.args[0], ast.Name) and sem.is_moved(value.args[0].id, node)
                 or sem.value_is_moved(value.args[0])):
        return  # ``if torch.cuda.is_available(): mask = mask.cuda()``, then ``self.mask = Variable(mask)``; and
        # ``self.kernel = Variable(torch.zeros(c, 1, 2, 2).cuda())``: moved
    if any(b.node is not node and b.pos > (node.end_lineno or node.lineno, node.end_col_offset or 0)  # type: ignore[operator]
           and sem.function_of(b.node) is func and not sem.in_other_branch(b.node, node)
           for b in sem.bindings.in_scope(cls, f"self.{target.attr}")):
        return  # ``self.proj = torch.randn(m, d)`` then ``self.proj = nn.Parameter(...)``: a draft, rebound at once
    if _kept_on_the_host(ctx, cls, target.attr):
        return  # ``self.mask = mask[key].cpu().clone().detach()`` in another branch: the class keeps it on the host
    if _staging_buffer(ctx, cls, target.attr):
        return  # ``self.buffer.copy_(self.workbuffer, non_blocking=True)``: filled on the host, then copied over
    if _empty(ctx, value) and any(b.node is not node and sem.in_other_branch(b.node, node) and isinstance(b.value, ast.Call)
                                  and (ctx.call_name(b.value) or "").rsplit(".", 1)[-1] == "Parameter"
                                  for b in sem.bindings.in_scope(cls, f"self.{target.attr}")):
        return  # ``self.w1 = torch.empty(0)`` where the other branch makes ``nn.Parameter(...)``: a factor left out
    if _registered(ctx, cls, target.attr) or _moved_by_own_to(ctx, cls, target.attr) or not _used_later(ctx, cls, target.attr) \
            or _moved_at_every_use(ctx, cls, target.attr) or _host_bookkeeping(ctx, cls, target.attr) \
            or _iterated_into_arithmetic(ctx, cls, target.attr) or _only_into_numpy(ctx, cls, target.attr) \
            or _only_beside_host_copies(ctx, cls, target.attr) \
            or program.default_device_set(ctx.semantic):
        return  # (``torch.set_default_device(device)`` first: the tensor is made on the device)
    if _zero_dim(ctx, value, node) and _only_in_arithmetic(ctx, cls, target.attr):
        return  # a 0-dim CPU tensor combines with tensors of any device: ``y * self.scale`` runs on the GPU
    if _only_read_as_a_number(ctx, cls, target.attr):
        return  # ``float(self.n - 1)``, ``steps=self.n``: a count kept as a tensor, turned into a number where read
    call = ctx.segment(node.value)
    edits = ()
    if value is node.value and (not isinstance(value, ast.Call) or keyword(value, "requires_grad") is None) \
            and _after_super_init(ctx, func, node):
        edits = (ctx.replace_edit(node, f'self.register_buffer("{target.attr}", {call}, persistent=False)'),)
    ctx.report("TD203", node,
               f"`self.{target.attr}` in `{cls.name}.__init__` is a plain tensor: `model.to(device)` leaves it on the CPU",
               fix=f'register it: `self.register_buffer("{target.attr}", {ctx.name(value, 50)})` '
                   "(or wrap a learned value in nn.Parameter)",
               edits=edits)


def _kept_on_the_host(ctx: Context, cls: ast.AST, attr: str) -> bool:
    """Some binding of ``self.<attr>`` in the class copies to the host on purpose (``.cpu()``, ``.to("cpu")``): the
    author keeps the tensor there, not left behind by accident."""
    for b in ctx.semantic.bindings.in_scope(cls, f"self.{attr}"):
        node = b.value
        while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "cpu" and not node.args or node.func.attr == "to" and node.args \
                    and string_value(node.args[0]) == "cpu":
                return True
            node = node.func.value
    return False


def _staging_buffer(ctx: Context, cls: ast.AST, attr: str) -> bool:
    """``self.<attr>`` is what the class copies into another tensor (``self.buffer.copy_(self.workbuffer)``): a host
    staging buffer, filled there on purpose."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "copy_" and n.args
               and dotted(n.args[0]) == f"self.{attr}" and dotted(n.func.value) != f"self.{attr}"
               for n in ctx.semantic.subtree(cls))


def _empty(ctx: Context, value: ast.AST) -> bool:
    """``torch.empty(0)``, ``torch.zeros(0)``, ``torch.tensor([])``: a tensor of no element."""
    if not (isinstance(value, ast.Call) and len(value.args) == 1 and not value.keywords):
        return False
    name, arg = ctx.call_name(value) or "", value.args[0]
    return name in ("torch.empty", "torch.zeros", "torch.ones") and isinstance(arg, ast.Constant) and arg.value == 0 \
        or name in ("torch.tensor", "torch.Tensor", "torch.FloatTensor") and isinstance(arg, ast.List) and not arg.elts


def _arithmetic_of_moved(sem, value: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``torch.ones(n, n).cuda() - torch.eye(n).cuda()``, ``(1.0 / float(n)) * torch.tensor(ks).cuda()``, ``np.pi *
    torch.pow(2, torch.arange(k, device="cuda")).reshape(1, k)``: arithmetic of tensors on the device (and numbers),
    itself on the device."""
    return _device_or_number(sem, value) == "device"


_NUMBER_CALLS = frozenset({"float", "int", "math.sqrt", "math.log", "math.exp", "math.pi", "np.sqrt", "np.log", "len"})


def _device_or_number(sem, value: ast.AST, depth: int = 0) -> str | None:  # type: ignore[no-untyped-def]
    """"device" for a tensor on the device (moved, made with ``device=``, a torch function or arithmetic of such
    tensors and numbers), "number" for a Python number (a literal, ``float(n)``, ``np.pi``), else None."""
    if depth > 8:
        return None
    if isinstance(value, ast.Constant):
        return "number" if isinstance(value.value, (int, float)) and not isinstance(value.value, bool) else None
    if isinstance(value, ast.Attribute) and dotted(value) in ("np.pi", "math.pi", "numpy.pi", "np.e", "math.e"):
        return "number"
    if isinstance(value, ast.UnaryOp):
        return _device_or_number(sem, value.operand, depth + 1)
    if isinstance(value, ast.BinOp):
        sides = {_device_or_number(sem, value.left, depth + 1), _device_or_number(sem, value.right, depth + 1)}
        return None if None in sides else "device" if "device" in sides else "number"
    if not isinstance(value, ast.Call):
        return None
    if sem.value_is_moved(value) or _made_on_a_given_device(value):
        return "device"
    name = dotted(value.func) or ""
    if name in _NUMBER_CALLS:
        return "number"
    if isinstance(value.func, ast.Attribute) and value.func.attr in _SHAPING and not name.startswith(("torch.", "np.")):
        return "device" if _device_or_number(sem, value.func.value, depth + 1) == "device" else None
    if name.startswith("torch.") and name.count(".") == 1 and keyword(value, "device") is None:
        said = {_device_or_number(sem, a, depth + 1) for a in value.args}
        return "device" if "device" in said and None not in said else None  # ``torch.pow(2, on_gpu)``
    return None


_SHAPING = frozenset({"reshape", "view", "float", "double", "half", "long", "int", "unsqueeze", "squeeze", "t",
                      "transpose", "permute", "contiguous", "clone", "detach", "expand", "repeat", "flatten"})


def _made_on_a_given_device(value: ast.AST) -> bool:
    """``torch.tensor((scale,), device=device)``: made on the device the constructor is told (by its caller, which moves
    the module there too), not left on the CPU."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and keyword(value, "device") is None:
        value = value.func.value  # ``torch.zeros(n, device=dev).float()``
    dev = keyword(value, "device") if isinstance(value, ast.Call) else None
    return dev is not None and string_value(dev.value) != "cpu" and not (
        isinstance(dev.value, ast.Constant) and dev.value.value is None)


def _cast_to_a_cuda_type(ctx: Context, value: ast.AST, at: ast.AST) -> bool:
    """``torch.zeros(k).type(dtype)`` with ``dtype = torch.cuda.FloatTensor if use_cuda else torch.FloatTensor``: a cast
    to a CUDA tensor type when there is a GPU, a copy there (the type named in the call, or bound to a name before)."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr != "type":
        value = value.func.value
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and len(value.args) == 1):
        return False
    kind = value.args[0]
    if isinstance(kind, ast.Name) and (b := ctx.semantic.binding_at(kind.id, at)) is not None and b.value is not None:
        kind = b.value
    return "torch.cuda." in ctx.semantic.segment(kind)


def _moved_at_every_use(ctx: Context, cls: ast.ClassDef, attr: str) -> bool:
    """Every read of ``self.attr`` outside ``__init__`` moves it first: ``self.validation_z.type_as(weight)``,
    ``self.mean.to(x.device)``."""
    sem = ctx.semantic
    reads = _reads_after_init(sem, cls, attr)
    return bool(reads) and all(_moved_after_reshapes(sem, r) or _copy_moved(ctx, r) for r in reads)


def _reads_after_init(sem: object, cls: ast.ClassDef, attr: str) -> list[ast.AST]:
    """The reads of ``self.attr`` in the methods of ``cls`` other than ``__init__``."""
    return [r for r in sem.reads_of(f"self.{attr}") if sem.class_of(r) is cls  # type: ignore[attr-defined]
            and (f := sem.function_of(r)) is not None and f.name != "__init__"]  # type: ignore[attr-defined]


def _host_bookkeeping(ctx: Context, cls: ast.ClassDef, attr: str) -> bool:
    """Every read of ``self.attr`` outside ``__init__`` steers Python control flow: iterated (``for i, plain in
    enumerate(self.continuous_idx)``), or an element tested (``if self.continuous_idx[i] == 1:``); it never meets
    the inputs, so the CPU is the right place for it (tabnet's column mask)."""
    sem = ctx.semantic
    reads = _reads_after_init(sem, cls, attr)
    if not reads:
        return False
    for read in reads:
        up = sem.parent(read)
        counted = isinstance(up, ast.Call) and dotted(up.func) == "enumerate"
        if isinstance(up, ast.Call) and dotted(up.func) in ("enumerate", "zip") and read in up.args:
            up = sem.parent(up)
        if isinstance(up, ast.For) and read in sem.subtree(up.iter) and _items_only_tested(sem, up, counted):
            continue
        if isinstance(up, ast.Subscript) and up.value is read and isinstance(test := sem.parent(up), ast.Compare) \
                and isinstance(sem.parent(test), (ast.If, ast.IfExp)) and sem.parent(test).test is test:
            continue
        return False
    return True


def _only_into_numpy(ctx: Context, cls: ast.ClassDef, attr: str) -> bool:
    """Every read of ``self.attr`` outside ``__init__`` goes, through arithmetic, into a NumPy function
    (``np.sinc(2 * f * self.hsupp / sr)``): host math, which a GPU tensor would break; what meets the input is
    its result, moved there (``torch.Tensor(...).to(x.device)``)."""
    sem = ctx.semantic

    def into_numpy(read: ast.AST) -> bool:
        cur, up = read, sem.parent(read)
        while isinstance(up, (ast.BinOp, ast.UnaryOp)):
            cur, up = up, sem.parent(up)
        return isinstance(up, ast.Call) and cur in up.args and (ctx.call_name(up) or "").startswith(("numpy.", "np."))

    return _every_read(sem, cls, attr, into_numpy)


def _only_beside_host_copies(ctx: Context, cls: ast.ClassDef, attr: str) -> bool:
    """Every read of ``self.attr`` outside ``__init__`` is handed to a call beside a host copy (``bboxes_iou(
    truth_box.cpu(), self.ref_anchors)``, whose result goes to ``np.argmax``): kept on the host on purpose; registered
    as a buffer it would move with the model and meet the host copy on another device."""
    sem = ctx.semantic

    def beside_a_copy(read: ast.AST) -> bool:
        up = sem.parent(read)
        return isinstance(up, ast.Call) and read in up.args and any(
            a is not read and isinstance(a, ast.Call) and method_name(a) in ("cpu", "numpy") for a in up.args)

    return _every_read(sem, cls, attr, beside_a_copy)


def _every_read(sem, cls: ast.ClassDef, attr: str, test) -> bool:  # type: ignore[no-untyped-def]
    """``self.attr`` is read outside ``__init__``, and every such read passes ``test``."""
    reads = _reads_after_init(sem, cls, attr)
    return bool(reads) and all(test(r) for r in reads)


def _iterated_into_arithmetic(ctx: Context, cls: ast.ClassDef, attr: str) -> bool:
    """Every read of ``self.attr`` outside ``__init__`` iterates it, and its items only enter arithmetic (``for freq in
    self.freq_bands: out += [func(freq * x)]``): each item is a 0-dim tensor, which combines with tensors of any
    device."""
    sem = ctx.semantic
    reads = _reads_after_init(sem, cls, attr)
    if not reads:
        return False
    for read in reads:
        loop = sem.parent(read)
        if not (isinstance(loop, ast.For) and loop.iter is read and isinstance(loop.target, ast.Name)):
            return False
        item = loop.target.id
        uses = [n for stmt in loop.body for n in sem.subtree(stmt)
                if isinstance(n, ast.Name) and n.id == item and isinstance(n.ctx, ast.Load)]
        if not uses or not all(isinstance(sem.parent(n), ast.BinOp) for n in uses):
            return False
    return True


def _items_only_tested(sem: object, loop: ast.For, counted: bool) -> bool:
    """The items a loop takes only steer branches (``if is_continuous:``); an enumerate's counter aside."""
    target = loop.target.elts[1] if counted and isinstance(loop.target, ast.Tuple) and len(loop.target.elts) == 2 \
        else loop.target
    names = {n.id for n in sem.subtree(target) if isinstance(n, ast.Name)}  # type: ignore[attr-defined]
    uses = [n for stmt in loop.body for n in sem.subtree(stmt)  # type: ignore[attr-defined]
            if isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load)]
    return bool(uses) and all(isinstance(p := sem.parent(n), (ast.If, ast.IfExp)) and p.test is n  # type: ignore[attr-defined]
                              for n in uses)


_RESHAPED = frozenset({"repeat", "view", "reshape", "expand", "expand_as", "unsqueeze", "squeeze", "permute", "transpose", "float",
                       "long", "int", "clone", "detach", "contiguous", "flatten"})


def _moved_after_reshapes(sem: object, read: ast.AST) -> bool:
    """``self.mean.to(x.device)``, ``self.slots.repeat(b, 1).to(x.device)``, ``nn.Parameter(self.pe,
    requires_grad=False).to(self.device)``: moved as it is read."""
    cur = read
    if isinstance(wrap := sem.parent(read), ast.Call) and wrap.args and wrap.args[0] is read \
            and (dotted(wrap.func) or "").rsplit(".", 1)[-1] in ("Parameter", "Variable"):  # type: ignore[attr-defined]
        cur = wrap
    while isinstance(p := sem.parent(cur), ast.Subscript) and p.value is cur:  # type: ignore[attr-defined]
        cur = p  # ``self.freqs[None, :].to(x.device)``: a view of it, moved
    while isinstance(p := sem.parent(cur), ast.Attribute) and isinstance(call := sem.parent(p), ast.Call) \
            and call.func is p:  # type: ignore[attr-defined]
        if p.attr in ("to", "type_as", "cuda"):
            return True
        if p.attr == "type" and len(call.args) == 1 and isinstance(kind := call.args[0], ast.Call) \
                and isinstance(kind.func, ast.Attribute) and kind.func.attr == "type" and not kind.args:
            return True  # ``self.gain.expand_as(x).type(x.type())``: cast to the input's tensor type, a CUDA one on the GPU
        if p.attr not in _RESHAPED:
            return False
        cur = call
    return False


def _copy_moved(ctx: Context, read: ast.AST) -> bool:
    """``batchgrid[i] = self.grid`` (or ``g = self.grid.expand(...)``), then ``batchgrid = batchgrid.cuda()`` in the
    same method: what meets the input is a copy moved to its device."""
    sem = ctx.semantic
    up = sem.parent(read)
    if isinstance(up, ast.Attribute) and up.attr in ("size", "shape", "dim", "numel", "dtype", "ndim"):
        return True  # ``self.grid.size()``: its shape, wherever it lives
    stmt = sem.statement_of(read)
    func = sem.function_of(read)
    if not isinstance(stmt, ast.Assign) or func is None:
        return False
    names = {dotted(t.value if isinstance(t, ast.Subscript) else t) for t in stmt.targets} - {None}
    nodes = sem.local_nodes(func)
    names |= {dotted(n.func.value) for n in nodes if isinstance(n, ast.Call) and method_name(n) == "append"
              and len(n.args) == 1 and dotted(n.args[0]) in names and n.lineno > stmt.lineno} - {None}
    # (``anchor_wh = self.anchors[i].repeat(k, 1, 1)``, ``parts.append(anchor_wh)``, then ``torch.cat(parts).to(dev)``)
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("cuda", "to", "type_as")
               and n.lineno > stmt.lineno and (dotted(n.func.value) in names or _joins(n.func.value, names))
               for n in nodes)


def _joins(expr: ast.AST, names: set[str | None]) -> bool:
    """``torch.cat(parts, dim=0)`` (or ``stack``) of one of ``names``."""
    return isinstance(expr, ast.Call) and (dotted(expr.func) or "").rsplit(".", 1)[-1] in ("cat", "stack") \
        and bool(expr.args) and dotted(expr.args[0]) in names


_SCALAR_FACTORIES = ("torch.tensor", "torch.as_tensor", "torch.scalar_tensor")


def _zero_dim(ctx: Context, value: ast.AST, at: ast.AST) -> bool:
    """``torch.tensor(<a number>)``: a 0-dim tensor (``torch.tensor(0.5)``, ``torch.tensor(d ** -0.5)``,
    ``torch.tensor(temperature)`` of a parameter whose default is a number)."""
    return isinstance(value, ast.Call) and (ctx.call_name(value) or "") in _SCALAR_FACTORIES \
        and len(value.args) == 1 and _number(ctx, value.args[0], at)


def _number(ctx: Context, expr: ast.AST, at: ast.AST, literal: bool = True) -> bool:
    """A Python number: a literal, ``float()``/``int()``/``math.*()``, arithmetic of those with at least one
    literal among names, or (``literal=False``) a name; a parameter with a number default counts alone."""
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, (int, float)) and not isinstance(expr.value, bool)
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, (ast.USub, ast.UAdd)):
        return _number(ctx, expr.operand, at, literal)
    if isinstance(expr, ast.BinOp) and not isinstance(expr.op, ast.MatMult):
        sides = (expr.left, expr.right)
        return all(_number(ctx, e, at, False) for e in sides) and any(_number(ctx, e, at) for e in sides)
    if isinstance(expr, ast.Call):
        q = ctx.call_name(expr) or ""
        return q in ("float", "int") or q.startswith("math.")
    if isinstance(expr, ast.Name):
        if not literal:
            return True
        b = ctx.semantic.binding_at(expr.id, at)
        if b is None or not b.is_param or isinstance(b.node, ast.Lambda):
            return False
        default = param_default(b.node, expr.id)  # type: ignore[arg-type]
        return default is not None and _number(ctx, default, at) or _compared_with_a_number(ctx, b.node, expr.id)
    return False


def _compared_with_a_number(ctx: Context, func: ast.AST, param: str) -> bool:
    """``assert order > 1`` in the function: the parameter is compared with a number literal, so it is a number."""
    return any(isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.left, ast.Name) and n.left.id == param
               and isinstance(c := n.comparators[0], ast.Constant) and type(c.value) in (int, float)
               for n in ctx.semantic.local_nodes(func))


def _only_in_arithmetic(ctx: Context, cls: ast.ClassDef, attr: str) -> bool:
    """Every read of ``self.attr`` outside ``__init__`` is an operand of arithmetic or a comparison
    (``y * self.scale``, ``y /= self.t``), where a 0-dim CPU tensor meets a device tensor as a scalar; not an
    argument of a call, a receiver of a method, an index or an element of a list (``torch.stack``)."""
    sem = ctx.semantic
    reads = _reads_after_init(sem, cls, attr)
    return bool(reads) and all(isinstance(sem.parent(r), (ast.BinOp, ast.Compare))
                               or isinstance(p := sem.parent(r), ast.AugAssign) and p.value is r
                               or _read_as_a_number(sem, r) for r in reads)


def _only_read_as_a_number(ctx: Context, cls: ast.ClassDef, attr: str) -> bool:
    sem = ctx.semantic
    reads = _reads_after_init(sem, cls, attr)
    return bool(reads) and all(_read_as_a_number(sem, r) for r in reads)


def _read_as_a_number(sem: object, read: ast.AST) -> bool:
    """``float(self.n - 1)``, ``int(self.n)``, ``steps=self.n``: the 0-dim tensor is turned into a Python number."""
    cur = read
    while isinstance(up := sem.parent(cur), ast.BinOp):  # type: ignore[attr-defined]
        cur = up
    if isinstance(up, ast.Call) and dotted(up.func) in ("float", "int", "round") and cur in up.args:
        return True
    return isinstance(up, ast.keyword) and up.arg in ("steps", "num_samples", "n") and cur is read


# Attributes that frameworks read themselves and move as they need (Lightning's model summary input).
_FRAMEWORK_ATTRS = {"example_input_array"}


def _used_later(ctx: Context, cls: ast.ClassDef, attr: str) -> bool:
    """``self.attr`` is read by a method other than ``__init__`` (forward, a helper): a tensor only
    ``__init__`` uses, or one a framework reads, never meets the moved weights."""
    if attr in _FRAMEWORK_ATTRS:
        return False
    sem = ctx.semantic
    for b in sem.bindings.in_scope(cls, f"self.{attr}"):
        func = sem.function_of(b.node)
        if func is not None and func.name != "__init__":
            return False  # reassigned as the object runs (an environment's state): data, not module state
    for read in sem.reads_of(f"self.{attr}"):
        func = sem.function_of(read)
        if sem.class_of(read) is cls and func is not None and func.name != "__init__" and not _only_reset(sem, read):
            return True
    return False


_RESETS = frozenset({"zero_", "fill_", "uniform_", "normal_", "ones_"})


def _only_reset(sem, read: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``self.mean.zero_()`` as a statement of ``reset_parameters``: the tensor is filled again, its value not used
    (BatchNormSync's ``self.mean``/``self.std``, which its ``forward`` no longer passes anywhere)."""
    up = sem.parent(read)
    call = sem.parent(up) if isinstance(up, ast.Attribute) and up.attr in _RESETS else None
    return isinstance(call, ast.Call) and call.func is up and isinstance(sem.parent(call), ast.Expr)


_NOT_TENSORS = frozenset({"tolist", "item", "numpy", "size", "dim", "numel", "nelement", "element_size"})


def _new_tensor(ctx: Context, value: ast.AST, at: ast.AST, depth: int) -> bool:
    """A fresh plain tensor: ``torch.ones(...)``, ``torch.tril(torch.ones(...))``, ``pe.unsqueeze(0)`` of a local one,
    arithmetic with one (``betas * (1.0 - keep)``)."""
    if depth > 4:
        return False
    if isinstance(value, ast.Call):
        q = ctx.call_name(value) or ""
        if q.startswith("torch.") and q.count(".") == 1:  # torch.nn.Parameter, torch.nn.init.* are not plain
            if q.split(".")[1] in FACTORIES or q.endswith(("Tensor", "from_numpy")):
                return True
            return any(_new_tensor(ctx, a, at, depth + 1) for a in value.args)
        if q == "torch.autograd.Variable" and value.args:  # the legacy wrapper: still a plain tensor, unregistered
            return _new_tensor(ctx, value.args[0], at, depth + 1)
        recv = value.func.value if isinstance(value.func, ast.Attribute) else None
        if recv is None or (isinstance(recv, ast.Name) and recv.id in ctx.imports) or value.func.attr in _NOT_TENSORS:  # type: ignore[attr-defined]
            return False  # (``.tolist()``, ``.item()``: Python values)
        return _new_tensor(ctx, recv, at, depth + 1)  # pe.unsqueeze(0), mask.float()
    if isinstance(value, ast.Name):
        b = ctx.semantic.binding_at(value.id, at)
        if b is None or b.value is None or b.index is not None or b.is_param:
            return False
        return _new_tensor(ctx, b.value, b.node, depth + 1)
    if isinstance(value, ast.BinOp):  # ``betas * (1.0 - keep) / (2.0 - keep)`` of local tensors: a tensor too
        return _new_tensor(ctx, value.left, at, depth + 1) or _new_tensor(ctx, value.right, at, depth + 1)
    return False


def _registered(ctx: Context, cls: ast.ClassDef, attr: str) -> bool:
    sem = ctx.semantic
    for node in sem.calls_named("register_buffer", "register_parameter"):
        if node.args and sem.contains(cls, node):
            first = node.args[0]
            if isinstance(first, ast.Constant) and first.value == attr:
                return True
    return False


def _moved_by_own_to(ctx: Context, cls: ast.ClassDef, attr: str) -> bool:
    """The class overrides ``to``/``cuda``/``_apply`` and moves ``self.attr`` there itself."""
    for func in cls.body:
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) and func.name in ("to", "cuda", "_apply"):
            for node in ctx.semantic.subtree(func):
                if isinstance(node, ast.Assign) and any(dotted(t) == f"self.{attr}" for t in node.targets):
                    return True
    return False


def _after_super_init(ctx: Context, func: ast.AST, node: ast.AST) -> bool:
    for stmt in ctx.semantic.local_nodes(func):
        if getattr(stmt, "lineno", 10**9) >= node.lineno:  # type: ignore[attr-defined]
            break
        if isinstance(stmt, ast.Call) and method_name(stmt) == "__init__":
            return True
    return False
