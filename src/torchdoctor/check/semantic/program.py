"""What kind of program a file is: where it runs (an accelerator or the CPU), whether it checks for a
GPU, starts a process group, trains, talks RPC; and where it hard-codes a CUDA device."""

from __future__ import annotations

import ast
import functools
import os

from torchdoctor.check.astutil import call_argument, dotted, int_literal, keyword, method_name, string_value
from torchdoctor.check.patterns import lazy
from torchdoctor.check.semantic.cuda_sites import CUDA_DEVICE, CUDA_TEMPLATES, some_gpus
from torchdoctor.check.semantic.gpu_only import imports_gpu_only, in_gpu_only_branch, refuses_cpu, \
    requires_gpu_only_library, states_gpu_need, uses_gpu_only_library
from torchdoctor.check.semantic.model import SemanticModel
from torchdoctor.check.semantic.project_devices import MOVE_CALLS, device_from_project_helper, \
    model_from_project_builder, runs_a_moved_model
from torchdoctor.check.semantic.processes import is_ddp_program, is_rpc_program, names_process_group, \
    shuffling_samplers, single_process_world

__all__ = ["has_cuda_check", "is_ddp_program",
           "is_rpc_program", "names_process_group", "runs_on_accelerator", "places_cuda_work", "device_params", "in_test",
           "QUIET_IN_TESTS", "uses_gpu_only_library", "requires_gpu_only_library", "cpu_device_value", "subclass_of_an_accelerated_class", "in_gpu_only_branch", "gpu_only_test", "accelerator_api",
           "sets_device_through_helper", "imports_gpu_only", "single_process_world", "in_dead_branch",
           "states_gpu_need", "refuses_cpu", "shuffling_samplers"]

# Test code exercises a construct on purpose (a DataParallel wrapper under test, a loader that is only
# sharded, a tiny model on whatever device): these hints about speed, style and multi-GPU wiring are
# not about a training run there. Errors that break the test itself are still reported.
QUIET_IN_TESTS = frozenset({"TD102", "TD201", "TD204", "TD304", "TD305", "TD306", "TD401", "TD402", "TD502",
                            "TD602", "TD603", "TD604", "TD701", "TD703", "TD705", "TD706"})
_TESTS_DIR = lazy(r"(^|/)(tests?|testing|test_utils|unittests?)(/|$)")
_TEST_FILE = lazy(r"(^|/)(test_[^/]*|[^/]*_test|conftest|tests)\.py$")  # (``tests.py``: Django's, a chapter's pytest file)

# A device given as a process's GPU index: `.to(local_rank)`, `.cuda(args.gpu)`, `torch.device(rank)`.
_RANK_DEVICE = lazy(r"(?i)(^|[._])(local_rank|rank|gpu|gpu_id|gpus|device_id|local_gpu|cuda_device)$")
_DEVICE_PARAM = lazy(r"(?i)^(device|dev|.*_device)$")
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_MOVE_CALLS = MOVE_CALLS


def gpu_only_test(sem: SemanticModel, node: ast.AST) -> bool:
    """Test code marked to run only with a GPU: a decorator of its function or class that names CUDA or GPUs
    (``@pytest.mark.skipif(not torch.cuda.is_available(), ...)``, ``@_RunIf(min_cuda_gpus=1)``,
    ``@requires_cuda``), or a test file named for them (``test_cuda_vs_torch_model.py``, a script too)."""
    name = os.path.basename(sem.path)
    if _TEST_FILE.search(name) and _GPU_MARK.search(name):
        return True
    if not in_test(sem, node):
        return False
    for a in sem.ancestors(node):  # (a device inside a decorator: ``pytest.param(cuda, marks=RunIf(...))``)
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and any(
                _GPU_MARK.search(sem.segment(d)) for d in a.decorator_list):
            return True
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef)) and a.name.startswith("test") \
                and _GPU_MARK.search(a.name):
            return True  # ``def test_gpu_forward(self):`` beside ``test_cpu_forward``: a test named for the GPU
    if bool(_GPU_MARK.search(sem.text.source[:4000])) and "pytestmark" in sem.text.source[:4000]:
        return True
    func = sem.function_of(node)
    if func is not None and "device_ids" in sem.segment(func) and any(  # (a substring test first: most tests have none)
            isinstance(n, ast.keyword) and n.arg == "device_ids" and isinstance(n.value, (ast.List, ast.Tuple))
            and len(n.value.elts) > 1 for n in sem.subtree(func)):
        return True  # ``DataParallelWithCallback(sync_bn, device_ids=[0, 1])``: a test of two GPUs, none to fall back on
    if func is not None and "sync" in sem.segment(func).lower() and any(
            isinstance(n, ast.Call) and (dotted(n.func) or "").endswith("DataParallel") and n.args
            and "sync" in sem.segment(n.args[0]).lower() for n in sem.subtree(func)):
        return True  # ``DataParallel(SyncBN(8)).cuda()``, ``DataParallel(sync_bn)``: synchronised batch norm across GPUs
    return _beside_cuda_sources(os.path.dirname(os.path.abspath(sem.path)))


@functools.lru_cache(maxsize=256)
def _beside_cuda_sources(folder: str) -> bool:
    """The folder holds CUDA sources (``.cu``): its tests exercise a CUDA kernel built from them."""
    try:
        return any(name.endswith((".cu", ".cuh")) for name in os.listdir(folder))
    except OSError:
        return False


_GPU_MARK = lazy(r"(?i)cuda|gpu")


_GPU_INDEX = lazy(r"(?i)(^|_)gpus?(_ids?|_index|_num)?$")


def _gpu_index_test(sem: SemanticModel) -> bool:
    """``if self.gpu >= 0:``, ``torch.device("cpu") if gpu < 0 else ...``: a GPU index where -1 means the CPU,
    the program's own fallback (dgl-ke's ``gpu=-1``)."""
    for node in sem.of_type(ast.Compare):
        left, ops, right = node.left, node.ops, node.comparators  # type: ignore[attr-defined]
        if len(ops) != 1 or not isinstance(ops[0], (ast.Lt, ast.GtE, ast.Eq, ast.NotEq, ast.Gt, ast.LtE)):
            continue
        if int_literal(right[0]) not in (0, -1):
            continue
        name = (dotted(left) or "").rsplit(".", 1)[-1]
        if name and _GPU_INDEX.search(name) or _device_index(sem, left):
            return True
    return False


def _device_index(sem: SemanticModel, node: ast.AST) -> bool:
    """``t.get_device()`` (-1 for a CPU tensor), or a name assigned one (``idx = t.get_device()``)."""
    if isinstance(node, ast.Name) and "get_device" in sem.text.source:
        b = sem.binding_at(node.id, node)
        node = b.value if b is not None and b.value is not None and b.index is None else node
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get_device" \
        and not node.args


def has_cuda_check(sem: SemanticModel) -> bool:
    """The file asks whether a GPU exists somewhere (``is_available()``, ``device_count()``, ``torch.accelerator``)."""

    def compute() -> bool:
        source = sem.text.source
        if ("gpu" in source or "get_device" in source) and _gpu_index_test(sem):
            return True
        asks = "is_available" in source or "device_count" in source
        accelerator = "accelerator" in source and "torch" in source and any(  # (``torch.accelerator``, not
            q.startswith("torch.accelerator") for q in sem.imports.values()) or "torch.accelerator" in source  # Accelerate's)
        if not asks and not accelerator:
            return False
        for node in sem.of_type(ast.Attribute):
            if asks and node.attr in ("is_available", "device_count") and not _uncalled_test(sem, node):  # type: ignore[attr-defined]
                return True
            if accelerator and (sem.qualname(node) or "").startswith("torch.accelerator"):
                return True
        for node in sem.of_type(ast.Name):
            if asks and node.id in ("is_available", "device_count") or accelerator and \
                    (sem.imports.get(node.id) or "").startswith("torch.accelerator"):  # type: ignore[attr-defined]
                return True
        return False

    return sem.cached("has_cuda_check", compute)  # type: ignore[no-any-return]


def _uncalled_test(sem: SemanticModel, node: ast.AST) -> bool:
    """``if torch.cuda.is_available:`` (no call): the function object is always true, so the test asks nothing."""
    up = sem.parent(node)
    while isinstance(up, (ast.UnaryOp, ast.BoolOp)):
        node, up = up, sem.parent(up)
    return isinstance(up, (ast.If, ast.IfExp, ast.While, ast.Assert)) and up.test is node


def uncalled_cuda_test(sem: SemanticModel) -> ast.AST | None:
    """The first ``torch.cuda.is_available`` tested without a call (``if torch.cuda.is_available:``), if any."""
    if "is_available" not in sem.text.source:
        return None
    return next((n for n in sem.of_type(ast.Attribute) if n.attr == "is_available"  # type: ignore[attr-defined]
                 and _uncalled_test(sem, n)), None)


def _mentions_cuda(sem: SemanticModel) -> bool:
    source = sem.text.source
    cuda, accelerator, picks = "cuda" in source, "accelerator" in source, "pick_device" in source
    if not cuda and not accelerator and not picks:
        return False
    if cuda:  # (a CUDA device string, a ``.cuda()`` call: the text names it)
        for node in sem.of_type(ast.Constant):
            s = string_value(node)
            if s is not None and (CUDA_DEVICE.fullmatch(s.strip()) or s in CUDA_TEMPLATES or s == "cuda:" and (
                    isinstance(up := sem.parent(node), ast.BinOp) and up.left is node
                    or isinstance(up, ast.JoinedStr) and up.values[0] is node)):
                return True  # (``"cuda:" + str(args.dev)``, ``f"cuda:{args.gpu}"``: an indexed CUDA device)
        if any(method_name(c) == "cuda" for c in sem.calls_named("cuda")):
            return True
    prefixes = (("torch.cuda.",) if cuda else ()) + (("torch.accelerator",) if accelerator else ())
    for node in sem.of_type(ast.Attribute):
        q = sem.qualname(node) or ""
        if prefixes and q.startswith(prefixes) and q not in _SEEDING or picks and q.endswith("pick_device"):
            return True
    return False


_SEEDING = frozenset({"torch.cuda", "torch.cuda.manual_seed", "torch.cuda.manual_seed_all", "torch.cuda.seed",
                      "torch.cuda.seed_all"})  # (a seeding helper's ``torch.cuda.manual_seed(seed)`` places nothing)


def _places_work(sem: SemanticModel) -> bool:
    """Something is put on a device: a move, a ``device=`` argument, a default device.
    A file that only defines ``device`` and never uses it (a tutorial's last cell) runs on the CPU."""
    for call in sem.calls_named(*_MOVE_CALLS):
        target = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "device"), None)
        if sem.is_device_move(call) and (sem.move_device(call) or "").strip("'\"") != "cpu" \
                and not (method_name(call) == "to" and cpu_name(sem, target)):  # (``.cuda(dev)`` is CUDA, whatever dev)
            return True
    for arg in ("device", "device_ids", "map_location"):
        for call in sem.calls_with_keyword(arg):
            if any(k.arg == arg and string_value(k.value) != "cpu" and not cpu_name(sem, k.value) for k in call.keywords):
                return True
    if sem.calls_named("set_default_device", "prepare", "setup"):
        return True
    return any((sem.call_name(c) or "").endswith(("set_device", "pick_device"))
               for c in sem.calls_named("set_device", "pick_device"))


def uncalled_module_function(sem: SemanticModel, func: ast.AST | None) -> bool:
    """``func`` is a module-level function that no code calls or names: not its own module, and none of the modules of
    the project that import it (``Project.uncalled_helper``). Asked last by its users: it reads the importers."""
    return func is not None and sem.project is not None and sem.frame(func).kind == "module" \
        and not sem.call_sites(func) and not sem.reads_of(func.name) \
        and sem.project.uncalled_helper(sem, func)  # type: ignore[attr-defined]


def moves_to_cpu_name(sem: SemanticModel, call: ast.AST) -> bool:
    """``x.to(device)`` with ``device`` the CPU wherever it is bound (see ``cpu_name``)."""
    return isinstance(call, ast.Call) and method_name(call) == "to" and bool(call.args) and cpu_name(sem, call.args[0])


def cpu_name(sem: SemanticModel, arg: ast.AST | None, depth: int = 0) -> bool:
    """``net.to(dev)``, ``torch.randn(2, 3, device=dev)`` where every binding of ``dev`` is the CPU (``dev =
    torch.device('cpu')``: a notebook pinned to the CPU on purpose); or ``X.to(device)`` in ``def train(model,
    device, ...)`` whose every call passes such a name."""
    if not isinstance(arg, ast.Name):
        return False
    here = sem.binding_at(arg.id, arg)
    if here is not None and here.is_param and isinstance(here.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        sites = sem.call_sites(here.node) if depth < 3 else []
        given = [call_argument(s, here.node, arg.id) for s in sites]
        return bool(sites) and all(g is not None and (string_value(g) == "cpu" or cpu_name(sem, g, depth + 1))
                                   for g in given)
    values = [b.value for b in sem.bindings_of(arg.id) if not b.is_param]  # (a parameter of the name: its callers')
    if not values or any(v is None for v in values):
        return False
    for value in values:
        if isinstance(value, ast.Call) and sem.call_name(value) == "torch.device" and value.args:
            value = value.args[0]
        if string_value(value) != "cpu":
            return False
    return True


def default_device_set(sem: SemanticModel) -> bool:
    """``torch.set_default_device(device)`` at module level, to something other than the CPU: modules and
    tensors are made on that device, moved or not."""
    return any((sem.call_name(c) or "") == "torch.set_default_device" and sem.function_of(c) is None and c.args
               and (string_value(c.args[0]) or "cuda") != "cpu" for c in sem.calls_named("set_default_device"))


def places_cuda_work(sem: SemanticModel) -> bool:
    """The file itself names CUDA as a device and puts work on a device (the catalog's "CUDA program")."""
    return sem.cached("places_cuda_work", lambda: _mentions_cuda(sem) and _places_work(sem))  # type: ignore[no-any-return]


_LAUNCHERS = ("accelerate.Accelerator", "accelerate.PartialState", "lightning.Fabric", "lightning.fabric.Fabric",
              "lightning_fabric.Fabric", "lightning.pytorch.Trainer", "pytorch_lightning.Trainer", "lightning.Trainer")


def accelerator_api(sem: SemanticModel) -> bool:
    """HF Accelerate / Lightning Fabric place the model and batches on the accelerator themselves (and bind
    each process to its own GPU); a DeepSpeed engine (``deepspeed.initialize``) runs on its accelerator."""
    def compute() -> bool:
        if any(q.startswith(("accelerate.Accelerator", "accelerate.PartialState", "lightning.fabric",
                             "lightning.Fabric", "lightning_fabric", "deepspeed.accelerator")) for q in sem.imports.values()):
            return True  # (DeepSpeed: ``get_accelerator().device_name(rank)`` is the process's GPU)
        if any((sem.call_name(c) or "") == "deepspeed.initialize" for c in sem.calls_named("initialize")):
            return True
        if any((sem.call_name(c) or "") in _LAUNCHERS for c in sem.calls_named("Accelerator", "Fabric", "PartialState")):
            return True
        for node in sem.of_type(ast.Attribute):  # (a loop, not a generator: it sees every attribute of the file)
            if node.attr == "device" and (dotted(node.value) or "").rsplit(".", 1)[-1] in ("accelerator", "fabric"):  # type: ignore[attr-defined]
                return True
        return False

    return sem.cached("accelerator_api", compute)  # type: ignore[no-any-return]


_DEVICE_HELPERS = lazy(r"(?i)^(get_device|init_distributed_device|setup_device|init_device|setup_distributed|"
                             r"init_distributed_mode|get_local_device|prepare_device|set_device\w*)$")


_GPU_SETUP = lazy(r"(?i)^(setup|init|set_up|configure)_\w*gpus?$")


def sets_device_through_helper(sem: SemanticModel) -> bool:
    """A helper picks (and binds) this process's device: ``device = utils.init_distributed_device(args)``,
    ``self._device = training.get_device(cfg.device)``."""
    if any(_DEVICE_HELPERS.match(c.func.attr if isinstance(c.func, ast.Attribute) else getattr(c.func, "id", ""))
           for c in sem.calls_named("get_device", "init_distributed_device", "setup_device", "init_device",
                                    "setup_distributed", "init_distributed_mode", "get_local_device", "prepare_device")):
        return True
    if any((sem.call_name(c) or "").startswith(("mmcv.", "mmengine.")) for c in sem.calls_named("init_dist")):
        return True  # mmcv's / mmengine's init_dist calls torch.cuda.set_device(rank % num_gpus)
    if "_gpu" in sem.text.source and any(
            isinstance(n, ast.Assign) and isinstance(v := n.value, ast.Call) and (dotted(v.func) or "").split(".")[0] in (
                sem.names.from_imports.keys() | sem.names.imports.keys()) and _GPU_SETUP.match(
                v.func.attr if isinstance(v.func, ast.Attribute) else getattr(v.func, "id", "")) for n in sem.of_type(ast.Assign)):
        return True  # ``cfg = setup_cfg_gpu(cfg)``: a project helper that sets up the GPUs and the options' device
    # ``model.to(dist_util.dev())``: a helper module's device, handed straight to a move
    return any(isinstance(c.func, ast.Attribute) and isinstance(p := sem.parent(c), ast.Call) and c in p.args
               and sem.is_device_move(p) for c in sem.calls_named("dev"))


def _rank_indexed_moves(sem: SemanticModel) -> bool:
    """``.to(local_rank)``, ``.cuda(args.gpu)``, ``.to(0)``, ``device = 0`` then ``.to(device)``: a GPU index."""
    for call in sem.calls_named("to", "cuda"):
        arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "device"), None)
        if arg is None:
            continue
        if isinstance(arg, ast.Constant) and isinstance(arg.value, int) and not isinstance(arg.value, bool):
            return True
        name = dotted(arg) or ""
        if name and _RANK_DEVICE.search(name):
            return True
        if isinstance(arg, ast.Name):
            b = sem.binding_at(arg.id, call)
            if b is not None and isinstance(b.value, ast.Constant) and type(b.value.value) is int and not b.is_param:
                return True
    return False


def device_params(sem: SemanticModel) -> list[tuple[ast.AST, str]]:
    """(function, parameter) pairs of functions that move values to a device given as a parameter."""

    def compute() -> list[tuple[ast.AST, str]]:
        out = []
        made = [c for c in sem.calls_with_keyword("device") if (sem.call_name(c) or "").startswith("torch.")]
        for call in [*sem.calls_named(*_MOVE_CALLS), *made]:
            dev = sem.move_device(call) if call not in made else \
                dotted(next(k.value for k in call.keywords if k.arg == "device"))  # ``torch.zeros(1, device=device)``
            if not dev:
                continue
            func = sem.function_of(call)
            if func is None:
                continue
            if not _DEVICE_PARAM.match(dev.removeprefix("self.")):
                found = _carrier_param(sem, func, call, dev)  # ``x.to(self.args.device)``: the options object
                if found is not None and found not in out:
                    out.append(found)
                continue
            b = sem.binding_at(dev, call)
            if b is not None and b.is_param and b.node is func and (func, dev) not in out:
                out.append((func, dev))
            elif dev.startswith("self.") and (found := _constructor_param(sem, call, dev)) and found not in out:
                out.append(found)  # ``self.device = device`` in ``__init__``, then ``x.to(self.device)``
            elif b is not None and (found := _options_param(sem, func, b)) and found not in out:
                out.append(found)  # ``device = torch.device(args.device)``: the options object carries the device
        for funcs in sem.functions.values():  # ``train_one_epoch(model, loader, optimizer, device)`` whose loop
            for func in funcs:                # moves nothing itself: its caller put the model on that device
                params = [a.arg for a in func.args.posonlyargs + func.args.args]  # type: ignore[attr-defined]
                dev = next((p for p in params if p in ("device", "dev")), None)
                if dev is not None and (func, dev) not in out and any(
                        isinstance(n, _LOOPS) and sem.loop_kind(n) in ("train", "eval") for n in sem.local_nodes(func)):
                    out.append((func, dev))
        return out

    return sem.cached("device_params", compute)  # type: ignore[no-any-return]


def _options_param(sem: SemanticModel, func: ast.AST, b: object) -> tuple[ast.AST, str] | None:
    """(``func``, ``args``) for ``device = torch.device(args.device)`` / ``device = args.device``, ``args`` a parameter."""
    value = getattr(b, "value", None)
    if getattr(b, "is_param", True) or value is None:
        return None
    if isinstance(value, ast.Call) and (sem.call_name(value) or "") == "torch.device" and len(value.args) == 1:
        value = value.args[0]
    if not (isinstance(value, ast.Attribute) and value.attr == "device" and isinstance(value.value, ast.Name)):
        return None
    pb = sem.binding_at(value.value.id, b.node)  # type: ignore[attr-defined]
    return (func, value.value.id) if pb is not None and pb.is_param and pb.node is func else None


def _carrier_param(sem: SemanticModel, func: ast.AST, at: ast.AST, dev: str) -> tuple[ast.AST, str] | None:
    """(function, parameter) for a device read off an options object that a parameter brings: ``args.device``
    with ``args`` a parameter of ``func``, ``self.args.device`` with ``self.args`` set in ``__init__`` from a
    parameter or from ``kwargs['args']`` (SimCLR's trainer class)."""
    parts = dev.split(".")
    if parts[-1] != "device" or len(parts) not in (2, 3) or (len(parts) == 3) != (parts[0] == "self"):
        return None
    if len(parts) == 3:
        return _constructor_param(sem, at, f"self.{parts[1]}")
    b = sem.binding_at(parts[0], at)
    return (func, parts[0]) if b is not None and b.is_param and b.node is func else None


def _constructor_param(sem: SemanticModel, at: ast.AST, key: str) -> tuple[ast.AST, str] | None:
    """(``__init__``, its parameter) when ``self.x`` is set from a parameter of the class's ``__init__``, or from
    the ``**kwargs`` entry its caller names (``self.args = kwargs['args']``)."""
    cls = sem.class_of(at)
    for b in sem.bindings_of(key):
        func = sem.function_of(b.node)
        if func is None or func.name != "__init__" or sem.class_of(func) is not cls:
            continue
        value = b.value
        if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name) and \
                (entry := string_value(value.slice)) is not None and func.args.kwarg is not None and \
                func.args.kwarg.arg == value.value.id:  # type: ignore[attr-defined]
            return func, entry
        if not isinstance(value, ast.Name):
            continue
        pb = sem.binding_at(value.id, b.node)
        if pb is not None and pb.is_param and pb.node is func:
            return func, value.id
    return None


def _param_gets_accelerator(sem: SemanticModel, func: ast.AST, param: str, depth: int) -> bool:
    """A caller in another module passes an accelerator device for ``param``; or a function of this file
    passes its own device parameter on, and that one gets an accelerator (``test(device)`` calling
    ``test_epoch(model, device, loader)``)."""
    if sem.project.passes_accelerator(sem, func, param):  # type: ignore[union-attr]
        return True
    if depth >= 2:
        return False
    for site in sem.call_sites(func):
        arg = call_argument(site, func, param)  # type: ignore[arg-type]
        caller = sem.function_of(site)
        b = sem.binding_at(arg.id, site) if isinstance(arg, ast.Name) else None
        if caller is not None and b is not None and b.is_param and b.node is caller and \
                _param_gets_accelerator(sem, caller, arg.id, depth + 1):  # type: ignore[union-attr]
            return True
    return False


def runs_on_accelerator(sem: SemanticModel) -> bool:
    """The program can put work on an accelerator: it names CUDA and places work, it uses Accelerate or
    Fabric, it moves to a GPU index (a rank), or a function of it moves values to a ``device`` parameter
    that a caller elsewhere in the project passes an accelerator device."""

    def placed() -> bool:
        if places_cuda_work(sem) or accelerator_api(sem) or _rank_indexed_moves(sem) or sets_device_through_helper(sem) \
                or _cuda_tensor_types(sem) or _lightning_on_gpu(sem) or (_gpu_index_device(sem) and _places_work(sem)) \
                or _hands_cuda_to_the_project(sem):
            return True
        if sem.project is None:
            return False
        return any(_param_gets_accelerator(sem, func, param, 0) for func, param in device_params(sem)) or \
            config_module_device(sem, sem.project) or device_from_project_helper(sem) or runs_a_moved_model(sem) \
            or model_from_project_builder(sem, sem.project) or subclass_of_an_accelerated_class(sem, sem.project) \
            or makes_an_accelerated_trainer(sem, sem.project)

    def compute() -> bool:  # (the CPU-only tests last: most files place no work, and need none of them)
        return placed() and not (_lightning_on_cpu(sem) or _cuda_always_off(sem) or _devices_end_on_cpu(sem))

    return sem.cached("runs_on_accelerator", compute)  # type: ignore[no-any-return]


def makes_an_accelerated_trainer(sem: SemanticModel, project: object) -> bool:
    """``model = Ganomaly(opt, dataloader)`` then ``model.train()``: an object of a class of another module of the
    project that puts its work on an accelerator, made here and handed this file's data: the program trains there."""
    imported = sem.names.from_imports
    for call in sem.calls:
        func = call.func
        written = func.id if isinstance(func, ast.Name) else None
        if not (written and written in imported and written[:1].isupper() and any(
                isinstance(a, ast.Name) for a in [*call.args, *(k.value for k in call.keywords)])
                and isinstance(up := sem.parent(call), ast.Assign) and len(up.targets) == 1
                and isinstance(target := up.targets[0], ast.Name) and _runs_a_trainer(sem, target.id)):
            continue  # (cheap tests first: each lookup below may read another module)
        if not project.is_module_class(sem, written) and not project.inherits_module(sem, written) \
                and project.defined_on_accelerator(sem, written):  # type: ignore[attr-defined]
            return True  # (a model class is no trainer: a unit test builds one on the CPU)
    return False


_TRAINER_METHODS = frozenset({"train", "fit", "run", "train_model", "learn", "optimize", "update", "evaluate", "test",
                              "predict", "set_loaders", "train_epoch", "run_batch", "train_step", "trainer", "solve"})


def _runs_a_trainer(sem: SemanticModel, name: str) -> bool:
    """``model.train()``, ``sbs.set_loaders(...)``, ``solver.run_batch(batch)``: the object is run as a trainer."""
    return any(isinstance(p := sem.parent(r), ast.Attribute) and p.attr in _TRAINER_METHODS
               and isinstance(c := sem.parent(p), ast.Call) and c.func is p for r in sem.reads_of(name))


def subclass_of_an_accelerated_class(sem: SemanticModel, project: object) -> bool:
    """``class ImpressionRunner(BaseRunner)`` where ``BaseRunner``, of another module of the project, moves its model
    and batches to the GPU: the subclass's overrides run there too (ReChorus's runners)."""
    imported = sem.names.from_imports
    for cls in sem.of_type(ast.ClassDef):
        for base in cls.bases:  # type: ignore[attr-defined]
            written = dotted(base)
            if written and written.split(".")[0] in imported and written[:1].isupper() \
                    and project.defined_on_accelerator(sem, written):  # type: ignore[attr-defined]
                return True
    return False


def _gpu_index_device(sem: SemanticModel) -> bool:
    """``device = args.device if args.device >= 0 else "cpu"``: a GPU index chosen on the command line, -1 for the
    CPU (torch takes a bare index for ``cuda:<index>``): the program runs on a GPU when given one."""
    if "cpu" not in sem.text.source:
        return False
    for node in sem.of_type(ast.IfExp):
        test = node.test  # type: ignore[attr-defined]
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and int_literal(test.comparators[0]) in (0, -1)):
            continue
        index = dotted(test.left)
        for chosen, other in ((node.body, node.orelse), (node.orelse, node.body)):  # type: ignore[attr-defined]
            if index and dotted(chosen) == index and (string_value(other) == "cpu" or isinstance(other, ast.Call)
                                                       and other.args and string_value(other.args[0]) == "cpu"):
                return True
    return False


def _lightning_on_gpu(sem: SemanticModel) -> bool:
    """A Lightning ``Trainer``/``Fabric`` of the file is told to train on a GPU (``accelerator="gpu"``,
    ``gpus=1``): Lightning moves the model and each batch there."""
    return any(k.arg == "accelerator" and _names_a_gpu(k.value) or k.arg == "gpus" and some_gpus(k.value)
               for call in _lightning_launches(sem) for k in call.keywords)


def _names_a_gpu(value: ast.AST) -> bool:
    """``"gpu"``, ``"cuda"``, or a choice of one when there is a GPU: ``"gpu" if torch.cuda.is_available() else "cpu"``."""
    sides = (value.body, value.orelse) if isinstance(value, ast.IfExp) else (value,)
    return any(string_value(v) in ("gpu", "cuda") for v in sides)


def _lightning_launches(sem: SemanticModel) -> list[ast.Call]:
    """The file's Lightning ``Trainer(...)``/``Fabric(...)`` calls."""
    calls = sem.calls_named("Trainer", "Fabric")  # (an index lookup: cheaper than scanning the text for the names)
    return [c for c in calls if (sem.call_name(c) or "") in _LAUNCHERS] if calls else []


_NO_CUDA_FLAG = lazy(r"^--?(no[-_]?(cuda|gpu)|disable[-_]cuda|cpu)$")


def _cuda_always_off(sem: SemanticModel) -> bool:
    """``add_argument("--no-cuda", action="store_true", default=True)``: the flag is set whatever the command line
    says, so ``not args.no_cuda and torch.cuda.is_available()`` is always False: the program runs on the CPU."""
    if "store_true" not in sem.text.source:
        return False
    for call in sem.calls_named("add_argument"):
        if call.args and _NO_CUDA_FLAG.match(string_value(call.args[0]) or "") and any(
                k.arg == "action" and string_value(k.value) == "store_true" for k in call.keywords) and any(
                k.arg == "default" and isinstance(k.value, ast.Constant) and k.value.value is True for k in call.keywords):
            return True
    return False


def _devices_end_on_cpu(sem: SemanticModel) -> bool:
    """Every move and every ``device=`` argument of the file goes to a module-level device name whose last binding is
    the CPU: ``device = torch.device("cuda" if torch.cuda.is_available() else "cpu")`` then ``device = "cpu"`` (a
    tutorial forcing the CPU; a notebook that moves nothing itself and hands ``device=device`` to its helpers), or a
    choice gated by a flag set to False (``use_gpu = False``, ``"cuda" if avail and use_gpu else "cpu"``)."""
    source = sem.text.source
    if "cpu" not in source or ".cuda(" in source:
        return False
    moves = sem.device_moves()
    given = [k.value for c in sem.calls_with_keyword("device") for k in c.keywords
             if k.arg == "device" and isinstance(k.value, ast.Name)]
    if not moves and not given:
        return False
    names: dict[str, bool] = {}
    for value in given:  # (a notebook that moves nothing itself: ``Agent(env, net, device=device)``)
        if value.id not in names:
            names[value.id] = _ends_on_cpu(sem, value.id)
    for call in moves:
        dev = keyword(call, "device")
        arg = dev.value if dev else (call.args[0] if call.args else None)
        if arg is not None and string_value(arg) == "cpu":
            continue
        if not isinstance(arg, ast.Name) or method_name(call) != "to":
            return False
        if arg.id not in names:
            names[arg.id] = _ends_on_cpu(sem, arg.id)
        if not names[arg.id] and not _handed_the_cpu(sem, arg.id, call, 0):
            return False
    return bool(names) and not any(k.arg == "device" and not (isinstance(k.value, ast.Name) and names.get(k.value.id)
                                                              or string_value(k.value) == "cpu")
                                   for c in sem.calls_with_keyword("device") for k in c.keywords)


def _handed_the_cpu(sem: SemanticModel, name: str, at: ast.AST, depth: int) -> bool:
    """``name`` at ``at`` is a parameter that every call of its function in this file hands the CPU device: a
    module-level name whose binding reaching the call is the CPU (a notebook's ``device = torch.device('cuda')``
    cell, then ``device = torch.device('cpu')`` in the cell that trains), or a parameter handed it in turn."""
    b = sem.binding_at(name, at)
    if b is None or depth > 3:
        return False
    if not b.is_param:  # (a statement of the module's own body: under an ``if``, another branch may bind the GPU)
        return b.value is not None and b.index is None and sem.parent(b.node) is sem.index.tree \
            and cpu_device_value(sem, b.value)
    func = b.node
    sites = sem.call_sites(func) if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) else []
    for site in sites:
        given = call_argument(site, func, name)  # type: ignore[arg-type]
        if not (isinstance(given, ast.Name) and _handed_the_cpu(sem, given.id, site, depth + 1)
                or given is not None and string_value(given) == "cpu"):
            return False
    return bool(sites)


def _ends_on_cpu(sem: SemanticModel, name: str) -> bool:
    """``name`` is bound in one scope only (the module, or one function: ``main()``), and its last binding, a
    statement of that scope's own body (under no ``if``), is the CPU."""
    bindings = sem.bindings_of(name)
    if not bindings or any(b.is_param or b.value is None for b in bindings):
        return False
    scopes = {sem.function_of(b.node) for b in bindings}
    if len(scopes) != 1:
        return False
    last = max(bindings, key=lambda b: sem.index.pos.get(b.node, -1))
    return sem.parent(last.node) is (scopes.pop() or sem.index.tree) and cpu_device_value(sem, last.value)


def cpu_device_value(sem: SemanticModel, value: ast.AST) -> bool:
    """``"cpu"``, ``torch.device("cpu")``, or a choice whose GPU side is always off."""
    if string_value(value) == "cpu":
        return True
    if isinstance(value, ast.Call) and (sem.call_name(value) or "") == "torch.device" and len(value.args) == 1:
        return cpu_device_value(sem, value.args[0])
    if isinstance(value, ast.IfExp):  # ``"cuda" if torch.cuda.is_available() and use_gpu else "cpu"``
        test = value.test
        off = isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and any(_always_false(sem, v) for v in test.values)
        return off and cpu_device_value(sem, value.orelse) or _always_false(sem, test) and cpu_device_value(sem, value.orelse)
    return False


def _always_false(sem: SemanticModel, test: ast.AST) -> bool:
    """``False``, or a name bound only to ``False`` at module level (``use_gpu = False``)."""
    if isinstance(test, ast.Constant):
        return test.value is False
    if not isinstance(test, ast.Name):
        return False
    bindings = sem.bindings_of(test.id)
    return bool(bindings) and all(not b.is_param and isinstance(b.value, ast.Constant) and b.value.value is False
                                  for b in bindings)


def in_dead_branch(sem: SemanticModel, node: ast.AST) -> bool:
    """``node`` sits in the body of an ``if`` whose test is always False (``parallel = False``, ``if parallel:``)."""
    child = node
    for up in sem.ancestors(node):
        if isinstance(up, ast.If) and any(s is child for s in up.body) and _always_false(sem, up.test):
            return True
        child = up
    return False


def _lightning_on_cpu(sem: SemanticModel) -> bool:
    """Every Lightning ``Trainer``/``Fabric`` of the file is told ``accelerator="cpu"``: it trains on the CPU."""
    made = _lightning_launches(sem)
    return bool(made) and all(any(k.arg == "accelerator" and string_value(k.value) == "cpu" for k in c.keywords)
                              for c in made)


def config_module_device(sem: SemanticModel, project: object) -> bool:
    """Work placed on a device that a config module of the project sets (``import config as CFG`` and
    ``x.to(CFG.device)``, ``torch.device(config.DEVICE)`` with ``DEVICE = "cuda"`` there)."""
    heads = set(sem.names.imports) | set(sem.names.from_imports)
    for call in [*sem.calls_named(*_MOVE_CALLS, "device"), *sem.calls_with_keyword("device")]:
        if method_name(call) in _MOVE_CALLS and isinstance(call.func, ast.Attribute):
            arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "device"), None)
        elif (sem.call_name(call) or "") == "torch.device" and call.args:
            arg = call.args[0]
        else:
            arg = next((k.value for k in call.keywords if k.arg == "device"), None)
        if isinstance(arg, ast.Name) and (b := sem.binding_at(arg.id, call)) is not None and not b.is_param \
                and b.index is None and isinstance(b.value, ast.Attribute):
            arg = b.value  # ``device = Hyper.device_text2mel``, then ``.to(device)``
        written = dotted(arg) if isinstance(arg, ast.Attribute) else None
        if written and written.split(".")[0] in heads and project.cuda_setting(sem, written):  # type: ignore[attr-defined]
            return True
        if isinstance(arg, ast.Name) and (sem.names.star or arg.id in sem.names.from_imports) \
                and not sem.bindings_of(arg.id) \
                and project.cuda_setting(sem, arg.id):  # type: ignore[attr-defined]
            return True  # ``from textkit import *`` / ``from params import DEVICE``, whose ``DEVICE = torch.device("cuda"
            # if ...)``
        maker = _options_maker(sem, arg, call) if written and written.endswith(".device") else None
        if maker and maker.split(".")[0] in heads and project.cuda_setting(sem, maker):  # type: ignore[attr-defined]
            return True  # ``opt = OptInit().get_args()`` of a config module that sets ``args.device`` to CUDA
    return False


def _options_maker(sem: SemanticModel, arg: ast.AST, at: ast.AST) -> str | None:
    """``OptInit`` for ``opt.device`` where ``opt = OptInit().get_args()``, ``get_options`` for ``opt = get_options()``:
    the class or function (as written) that made the options object."""
    root = arg.value if isinstance(arg, ast.Attribute) else None  # type: ignore[attr-defined]
    b = sem.binding_at(root.id, at) if isinstance(root, ast.Name) else None
    value = b.value if b is not None and not b.is_param and b.index is None else None
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and isinstance(value.func.value, ast.Call):
        value = value.func.value  # ``OptInit().get_args()``
    return dotted(value.func) if isinstance(value, ast.Call) else None


def _cuda_tensor_types(sem: SemanticModel) -> bool:
    """The legacy CUDA tensor types: ``imgs.type(torch.cuda.FloatTensor)``, ``Tensor = torch.cuda.FloatTensor if ...``."""
    return "torch.cuda." in sem.text.source and any(
        (sem.qualname(n) or "").startswith("torch.cuda.") and n.attr.endswith("Tensor")  # type: ignore[attr-defined]
        for n in sem.of_type(ast.Attribute))


# ``TestLoader``, ``Test_model``, ``Test``: what pytest collects; not ``Tester`` (OpenKE's evaluation class)
_TEST_CLASS = lazy(r"^Test($|[A-Z0-9_])")


def _holds_tests(sem: SemanticModel) -> bool:
    """Something for a test runner to collect: a ``test*`` function neither the file nor another module of the
    project calls (a training script ``pmnist_test.py`` calls its ``test()`` evaluation after each epoch), a ``Test*`` class, pytest or
    unittest, or a script in a tests folder (an inference script ``esrgan/test_on_image.py`` with an argument
    parser is a program)."""
    if _TESTS_DIR.search(os.path.dirname(os.path.abspath(sem.path)).replace("\\", "/")):
        return True
    return any(f.name.startswith("test") and not sem.call_sites(f) and not (  # (NGCF's ``batch_test.test(model, ...)``,
        sem.project is not None and sem.project.has_callers(sem, f))  # type: ignore[attr-defined]  # called by main.py)
               for fs in sem.functions.values() for f in fs) or \
        any(_TEST_CLASS.match(c.name) for c in sem.of_type(ast.ClassDef)) or \
        any(q.split(".")[0] in ("pytest", "unittest") for q in sem.imports.values())  # type: ignore[attr-defined]


def in_test(sem: SemanticModel, node: ast.AST) -> bool:
    """``node`` is test code: a ``test_*.py``/``*_test.py``/``conftest.py``/``tests.py`` file holding tests, or a
    method of a ``Test*`` class or of a ``unittest.TestCase``. A ``def test(model, loader)`` in a training
    script is its evaluation, not a test."""
    if sem.cached("test_file", lambda: bool(_TEST_FILE.search(sem.path.replace("\\", "/"))) and _holds_tests(sem)):
        return True
    for frame in sem.frame(node).chain():
        if frame.kind == "class":
            cls = frame.node
            if _TEST_CLASS.match(cls.name) or any((dotted(b) or "").endswith("TestCase") for b in cls.bases):  # type: ignore[attr-defined]
                return True
    return False


def on_old_torch_branch(sem: SemanticModel, node: ast.AST) -> bool:
    """``node`` runs only on a torch older than 2.0: the body of ``if version.parse(torch.__version__) <
    version.parse("1.2.0"):`` (or the ``else`` of a ``>=`` test), a fallback no supported torch takes."""
    child = node
    for parent in sem.ancestors(node):
        if isinstance(parent, ast.If) and child is not parent.test:
            older = _old_torch_test(sem, parent.test)
            if older is not None and older == (child in parent.body):
                return True
        child = parent
    return False


def _old_torch_test(sem: SemanticModel, test: ast.AST) -> bool | None:
    """True for ``torch.__version__ < "1.2"`` (through ``version.parse``/``LooseVersion``), False for ``>=``; None
    for any other test, or a version of 2 or more. False too for ``int(version[0]) > 0 or int(version[2]) > 3`` with
    ``version = torch.__version__``: a test for a torch newer than 0.3, whose ``else`` is the old API's."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) and all(_newer_digit_test(sem, v) for v in test.values):
        return False
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Lt, ast.LtE, ast.GtE, ast.Gt))):
        return None
    if not any(isinstance(n, ast.Attribute) and n.attr == "__version__" and dotted(n.value) == "torch"
               for n in sem.subtree(test.left)):
        return None
    literal = next((n.value for n in sem.subtree(test.comparators[0]) if isinstance(n, ast.Constant)
                    and isinstance(n.value, str)), None)
    major = literal.split(".", 1)[0] if literal else ""
    if not (major.isdigit() and int(major) < 2):
        return None
    return isinstance(test.ops[0], (ast.Lt, ast.LtE))


def _newer_digit_test(sem: SemanticModel, test: ast.AST) -> bool:
    """``int(version[2]) > 3`` where ``version`` is bound to ``torch.__version__``."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Gt, ast.GtE))
            and isinstance(call := test.left, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "int"
            and len(call.args) == 1 and isinstance(sub := call.args[0], ast.Subscript) and isinstance(sub.value, ast.Name)):
        return False
    bound = sem.bindings_of(sub.value.id)
    return bool(bound) and all(b.value is not None and dotted(b.value) == "torch.__version__" for b in bound)


def chosen_cuda(sem: SemanticModel, arg: ast.AST, at: ast.AST) -> bool:
    """``arg`` is a name bound there to a CUDA device choice (``device = "cuda" if torch.cuda.is_available() else
    "cpu"``, ``device = torch.device("cuda:0")``, ``dev = "cuda"``): a module that places no work itself hands the
    device to the project's trainer, which does."""
    b = sem.binding_at(arg.id, at) if isinstance(arg, ast.Name) else None
    value = b.value if b is not None and not b.is_param and b.index is None else None
    return (isinstance(value, (ast.IfExp, ast.Constant)) or isinstance(value, ast.Call)
            and (sem.call_name(value) or "") == "torch.device") and names_cuda(sem, value)  # type: ignore[arg-type]


def names_cuda(sem: SemanticModel, value: ast.AST) -> bool:
    """A string of the expression names a CUDA device (``"cuda"``, ``"cuda:0"``, ``f"cuda:{rank}"``)."""
    return any(isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value.split(":")[0] == "cuda"
               for c in sem.subtree(value))


def _hands_cuda_to_the_project(sem: SemanticModel) -> bool:
    """``trainer = Trainer(model, opt, device)`` with ``device = "cuda" if torch.cuda.is_available() else "cpu"`` (or
    ``Trainer(model, torch.cuda.is_available())``): the program hands a CUDA choice to a class or function it imports
    (of the project, mostly), which places the work."""
    if "cuda" not in sem.text.source:
        return False
    imported = sem.names.from_imports
    for call in sem.calls:
        head = (dotted(call.func) or "").split(".")[0]
        if head in imported and not imported[head][1].startswith("torch") \
                and any(chosen_cuda(sem, a, call) or _cuda_availability(sem, a, call)
                        for a in (*call.args, *(k.value for k in call.keywords))):
            return True  # (read for the index, without the project: any imported callee but torch's)
    return False


def _cuda_availability(sem: SemanticModel, arg: ast.AST, at: ast.AST) -> bool:
    """``torch.cuda.is_available()`` handed on as a ``cuda`` flag (``Trainer(model, torch.cuda.is_available())``), or a
    name bound to it (``use_cuda = torch.cuda.is_available()``)."""
    if isinstance(arg, ast.Name) and (b := sem.binding_at(arg.id, at)) is not None and not b.is_param \
            and b.index is None:
        arg = b.value
    return isinstance(arg, ast.Call) and sem.call_name(arg) == "torch.cuda.is_available"
