"""Programs that cannot run without an NVIDIA GPU whatever their device code says: they import a GPU-only library
(Transformer Engine, apex, flash-attn, Triton...), or the project's own kernels (a module a ``setup.py`` or an old
``build.py`` of the project compiles with ``CUDAExtension``/``create_extension``), themselves or through a module of
the project (``Project.imports_gpu_only_module``), not as an optional import; or that say so and stop without one
(``states_gpu_need``, ``refuses_cpu``). TD101 and TD704 ask; ``program`` re-exports."""

from __future__ import annotations

import ast
import functools
import os
import re

from torchdoctor.check.astutil import dotted, string_value
from torchdoctor.check.patterns import lazy
from torchdoctor.check.semantic.guards import EXITS
from torchdoctor.check.semantic.model import SemanticModel

__all__ = ["imports_gpu_only", "in_gpu_only_branch", "uses_gpu_only_library", "kernel_builders", "kernel_calls",
           "states_gpu_need", "refuses_cpu"]


def imports_gpu_only(sem: SemanticModel) -> bool:
    """The module itself imports a GPU-only library or one of the project's own CUDA extensions when it is imported
    (not in a function, which may never run; not as an optional import): what a module that imports it inherits
    (``Project.imports_gpu_only_module``)."""
    return any(not _optional_import(sem, imp) and sem.function_of(imp) is None for imp in _gpu_only_imports(sem)) \
        or _imports_own_extension(sem) or _compiles_kernel_on_import(sem) or _calls_own_builder(sem)


def _calls_own_builder(sem: SemanticModel) -> bool:
    """A module-level call of one of the module's own kernel builders (``kernel_builders``)."""
    builders = kernel_builders(sem)
    return bool(builders) and any(isinstance(c.func, ast.Name) and c.func.id in builders
                                  and not _main_block_or_optional(sem, c) for c in _module_level_calls(sem.tree))


def _compiles_kernel_on_import(sem: SemanticModel) -> bool:
    """``ext = load("warp", sources=[..., "warp_kernel.cu"])`` (``torch.utils.cpp_extension``) at module level, not
    in a ``try`` that goes on without it: importing the module compiles a CUDA kernel, which needs the CUDA
    toolkit, and the model built on it runs on an NVIDIA GPU only."""
    return any(sem.function_of(call) is None and _builds_cuda(call, call, sem)
               and not any(isinstance(a, ast.If) for a in sem.ancestors(call)) for call in _kernel_loads(sem))
    # (``if BASICSR_JIT == "True": ext = load(...)`` else a prebuilt, optional extension: compiled on request only)


def kernel_builders(sem: SemanticModel) -> frozenset[str]:
    """The module's functions that compile a CUDA kernel when called: a ``torch.utils.cpp_extension.load`` in them (in
    a helper nested inside too) and ``.cu`` sources named in them (``srcpath / "act_cuda.cu"``), not in a ``try``
    that goes on without it. A module that calls one when it is imported needs the CUDA toolkit and a GPU
    (``kernel_calls``, ``Project.imports_gpu_only_module``)."""
    out = set()
    for call in _kernel_loads(sem):
        outer = [a for a in sem.ancestors(call) if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef)]
        if outer and isinstance(sem.parent(outer[-1]), ast.Module) and _builds_cuda(call, outer[-1], sem):
            out.add(outer[-1].name)
    return frozenset(out)


def _kernel_loads(sem: SemanticModel) -> list[ast.Call]:
    """``torch.utils.cpp_extension.load``/``load_inline`` calls of the module, but those in a ``try`` that goes on
    without them."""
    if "cpp_extension" not in sem.text.source:
        return []
    return [call for call in sem.calls_named("load", "load_inline")
            if (sem.call_name(call) or "").startswith("torch.utils.cpp_extension.")
            and not any(isinstance(a, ast.Try) and _goes_on_without(a) for a in sem.ancestors(call))]


def _builds_cuda(call: ast.Call, where: ast.AST, sem: SemanticModel) -> bool:
    """The load compiles CUDA: ``cuda_sources=``, or ``.cu`` sources named in ``where`` (the call, or the function
    that holds it and builds the list of sources)."""
    return any(k.arg == "cuda_sources" for k in call.keywords) or any(
        (text := string_value(n)) is not None and text.endswith((".cu", ".cuh")) for n in sem.subtree(where))


def _goes_on_without(node: ast.Try) -> bool:
    """A handler of the ``try`` goes on (it does not end in ``raise``): the program runs without what the body does.
    (``if not getattr(builtins, "__SETUP__", False): raise ImportError(...)``, raising unless a setup script runs,
    ends in ``raise`` too.)"""
    return any(not (h.body and (isinstance(last := h.body[-1], ast.Raise) or isinstance(last, ast.If) and not last.orelse
                                and last.body and isinstance(last.body[-1], ast.Raise))) for h in node.handlers)


def kernel_calls(sem: SemanticModel) -> tuple[tuple[int, str, str], ...]:
    """The functions of other modules that the module calls when it is imported (at module level, outside a
    ``__main__`` block and a ``try`` that goes on without them), as (level, module, function): ``load.load()`` after
    ``from pkg.cuda import load`` is (0, "pkg.cuda.load", "load"). Asked about when the module itself names none of
    the GPU-only things (``kernel_builders``)."""
    out = []
    for call in _module_level_calls(sem.tree):
        func = call.func
        target = None
        if isinstance(func, ast.Name) and func.id in sem.names.from_imports:
            target = sem.names.from_imports[func.id]
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            alias = func.value.id
            if alias in sem.names.from_imports:  # ``from pkg.cuda import load``: a submodule
                level, module, name = sem.names.from_imports[alias]
                target = (level, f"{module}.{name}" if module else name, func.attr)
            elif alias in sem.names.imports:
                target = (0, sem.names.imports[alias], func.attr)
        if target is None or _main_block_or_optional(sem, call):
            continue
        out.append(target)
    return tuple(dict.fromkeys(out))


def _module_level_calls(tree: ast.AST) -> list[ast.Call]:
    """The calls a module makes as statements of its own when it runs (``ext = load.load()``, ``build()``), in its
    body and the blocks of its ``if``/``try``/``with`` statements: not in its functions and classes, nor nested in
    other expressions (a kernel is built by a statement that keeps it, or calls the builder alone)."""
    out, todo = [], list(getattr(tree, "body", ()))
    while todo:
        stmt = todo.pop()
        if isinstance(stmt, ast.Assign | ast.AnnAssign | ast.Expr) and isinstance(stmt.value, ast.Call):
            out.append(stmt.value)
        elif isinstance(stmt, ast.If | ast.Try | ast.With):
            todo.extend(stmt.body)
            todo.extend(getattr(stmt, "orelse", ()))
            for handler in getattr(stmt, "handlers", ()):
                todo.extend(handler.body)
    return out


def _main_block_or_optional(sem: SemanticModel, node: ast.AST) -> bool:
    for a in sem.ancestors(node):
        if isinstance(a, ast.If) and "__main__" in sem.segment(a.test):
            return True
        if isinstance(a, ast.Try) and _goes_on_without(a):
            return True
    return False


def _imports_own_extension(sem: SemanticModel) -> bool:
    """An import of a kernel module the project builds, not an optional one (``try: import fused_kernel`` whose
    ``except ImportError`` goes on without it)."""
    built = _own_cuda_extensions(os.path.dirname(os.path.abspath(sem.path)))
    if not built or not any(q.split(".")[0] in built or q in built for q in sem.imports.values()) and not any(
            level for level, _, _ in sem.names.from_imports.values()):  # (``from ._cuda_ext import f``: relative)
        return False
    for imp in sem.of_type(ast.Import, ast.ImportFrom):
        if any(n.split(".")[0] in built or n in built for n in _imported_names(imp)) and not _optional_import(sem, imp):  # type: ignore[arg-type]
            return True
    return False


def optional_imports(sem: SemanticModel) -> frozenset[str]:
    """The local names the module imports in a ``try`` whose handler goes on without them (Swin's ``try: from
    kernels.window_process... import WindowProcess`` / ``except: WindowProcess = None``)."""
    if "try" not in sem.text.source:
        return frozenset()
    return frozenset(name for imp in sem.of_type(ast.Import, ast.ImportFrom) if _optional_import(sem, imp)
                     for name in _local_names(imp))  # type: ignore[arg-type]


def _local_names(stmt: ast.Import | ast.ImportFrom) -> list[str]:
    return [a.asname or (a.name.split(".")[0] if isinstance(stmt, ast.Import) else a.name) for a in stmt.names]


def _optional_import(sem: SemanticModel, imp: ast.AST) -> bool:
    """In a ``try:`` with a handler that goes on (no ``raise``): the program runs without the module."""
    parent = sem.parent(imp)
    return isinstance(parent, ast.Try) and any(s is imp for s in parent.body) and _goes_on_without(parent)


# ``CUDAExtension("knn_cuda", ...)`` in a setup.py; ``create_extension('_ext.dcn_v2', ..., with_cuda=...)`` in the
# build.py of torch.utils.ffi (torch < 1.0)
_CUDA_EXTENSION = lazy(r"""(?:CUDAExtension|create_extension)\(\s*(?:name\s*=\s*)?['"]([\w.]+)['"]""")


@functools.lru_cache(maxsize=256)
def _own_cuda_extensions(folder: str, levels: int = 3) -> frozenset[str]:
    """The modules a ``setup.py`` builds with ``CUDAExtension`` (kernels compiled from ``.cu`` sources, with no
    CPU fallback; their full names and last parts): one in ``folder`` or a folder above it (``levels`` up), or
    in a folder below it, two levels down at most (``extension/propagation/setup.py``)."""
    names: set[str] = set()
    for path in _setup_files(folder, levels):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read(200_000)
        except OSError:
            continue
        if "CUDAExtension" in text or "create_extension" in text and "with_cuda" in text:
            for name in _CUDA_EXTENSION.findall(text):
                names.update((name, name.rsplit(".", 1)[-1]))
            for alias in _BUILDER_ALIAS.findall(text):  # ``extension = CUDAExtension`` then ``extension("_ext", ...)``
                if "CppExtension" not in text or _NO_CPU_BUILD.search(text):
                    for name in re.findall(rf"""\b{alias}\(\s*(?:name\s*=\s*)?['"]([\w.]+)['"]""", text):
                        names.update((name, name.rsplit(".", 1)[-1]))
    return frozenset(names)


# The builder chosen through a variable; with a ``CppExtension`` default, GPU-only when the other branch refuses
_BUILDER_ALIAS = lazy(r"(?m)^\s*(\w+)\s*=\s*CUDAExtension\s*$")
_NO_CPU_BUILD = lazy(r"else:\s*\n\s*raise\b")


_BUILD_SCRIPTS = ("setup.py", "build.py")


def _setup_files(folder: str, levels: int) -> list[str]:
    folders, up = [], folder
    for _ in range(levels):
        folders.append(up)
        parent = os.path.dirname(up)
        if parent == up:
            break
        up = parent
    for below in _subfolders(folder):
        folders.append(below)
        folders.extend(_subfolders(below))
    return [path for f in folders for name in _BUILD_SCRIPTS if os.path.isfile(path := os.path.join(f, name))]


def _subfolders(folder: str) -> list[str]:
    try:
        return [e.path for e in os.scandir(folder) if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")]
    except OSError:
        return []


_GPU_ONLY = ("transformer_engine", "msamp", "apex", "flash_attn", "xformers", "triton", "cupy", "pycuda",
             "tensorrt", "torch_tensorrt", "torch2trt", "nvidia.dali", "bitsandbytes", "deepspeed.ops", "mamba_ssm",
             "pointnet2_ops", "knn_cuda", "pointops", "chamfer_3D",  # (point-cloud ops, CUDA kernels only)
             "neural_renderer", "nvdiffrast",  # (mesh rasterizers, CUDA kernels only)
             "numba.cuda",  # (``@cuda.jit`` kernels)
             "pynvml",  # (NVIDIA's management library: ``nvmlInit()`` fails without an NVIDIA driver)
             "causal_conv1d", "selective_scan_cuda",  # (Mamba's kernels)
             "hqq_aten")  # (HQQ's ATen backend: a CUDAExtension of its kernels)


_GPU_ONLY_PREFIXES = tuple(lib + "." for lib in _GPU_ONLY)
_GPU_ONLY_NAMES = frozenset(_GPU_ONLY)


def _gpu_only_module(name: str, libs: tuple[str, ...] = _GPU_ONLY) -> bool:
    """``name`` is (a module of) a GPU-only library, or a compiled CUDA extension named so (``causal_conv1d_cuda``,
    ``emd_cuda``: a ``<name>_cuda`` module holds CUDA kernels only)."""
    if libs is _GPU_ONLY:
        return name in _GPU_ONLY_NAMES or name.startswith(_GPU_ONLY_PREFIXES) or name.endswith("_cuda")
    return any(name == lib or name.startswith(lib + ".") for lib in libs) or name.endswith("_cuda")


def in_gpu_only_branch(sem: SemanticModel, node: ast.AST) -> bool:
    """``node`` sits in a block that imports a GPU-only library before it (``if trt_file is not None:
    from torch2trt import TRTModule ... .cuda()``): that branch runs on an NVIDIA GPU only."""
    return any(isinstance(stmt, ast.Import | ast.ImportFrom) and _imports_gpu_only(stmt)
               for stmt in sem.index.earlier_statements(node))


def _imported_names(stmt: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules an import names: ``import a.b`` a.b; ``from ranker import knn_cuda`` ranker and ranker.knn_cuda
    (the name may be a submodule)."""
    if isinstance(stmt, ast.ImportFrom):
        return [stmt.module or "", *(f"{stmt.module}.{a.name}" if stmt.module else a.name for a in stmt.names)]
    return [a.name for a in stmt.names]


def _imports_gpu_only(stmt: ast.Import | ast.ImportFrom, libs: tuple[str, ...] = _GPU_ONLY) -> bool:
    return any(_gpu_only_module(n, libs) for n in _imported_names(stmt))


def uses_gpu_only_library(sem: SemanticModel, node: ast.AST | None = None) -> bool:
    """The program imports a library that runs on NVIDIA GPUs only (Transformer Engine, MS-AMP, apex,
    flash-attn, Triton kernels...), or asks a model for flash-attn (``attn_implementation="flash_attention_2"``):
    it cannot run on a CPU whatever its device code says. With ``node``: an import that has run when ``node``
    runs (a module-level import before it, as a notebook's later cell is not; one in ``node``'s function)."""
    if any(_gpu_only_module(q) for q in sem.imports.values()):
        if node is None or any(_imported_before(sem, imp, node) for imp in _gpu_only_imports(sem)):
            return True
    if _imports_own_extension(sem):
        return True  # the project's own kernels: ``CUDAExtension("knn_cuda", [...])`` in its setup.py
    if _compiles_kernel_on_import(sem) and (node is None or any(
            sem.function_of(c) is None and (sem.index.pos[c] < sem.index.pos[node] or sem.function_of(node) is not None
                                            and not sem.path.endswith(".ipynb")) for c in _kernel_loads(sem))):
        return True  # ``wkv_cuda = load(sources=["wkv_op.cpp", "wkv_cuda.cu"])`` here: what runs after it needs a GPU
        # (a function of a script runs after its module-level code; one of a notebook's earlier cell may run before)
    if sem.project is not None and sem.project.imports_gpu_only_module(sem):  # type: ignore[attr-defined]
        return True  # ``from gnn_reranking import rerank``, a module of the project that needs those kernels
    if "flash_attention_" in sem.text.source and any(
            k.arg in ("attn_implementation", "_attn_implementation") and (string_value(k.value) or "").startswith("flash_attention_")
            for arg in ("attn_implementation", "_attn_implementation")
            for c in sem.calls_with_keyword(arg) for k in c.keywords):
        return True
    return _quantized_with_bitsandbytes(sem)


def _quantized_with_bitsandbytes(sem: SemanticModel) -> bool:
    """``from_pretrained(..., load_in_4bit=True)`` or ``BitsAndBytesConfig(load_in_8bit=True)``: transformers loads the
    model through bitsandbytes' CUDA kernels (a notebook that never imports ``bitsandbytes`` itself)."""
    if "load_in_" not in sem.text.source:
        return False
    return any(k.arg in ("load_in_4bit", "load_in_8bit") and isinstance(k.value, ast.Constant) and k.value.value is True
               for arg in ("load_in_4bit", "load_in_8bit") for c in sem.calls_with_keyword(arg) for k in c.keywords)


def requires_gpu_only_library(sem: SemanticModel) -> bool:
    """The program imports a GPU-only library unconditionally: at module level, outside any ``if``/``try`` (or in a
    ``try`` whose ``except ImportError`` raises): ``from apex.parallel import DistributedDataParallel``. (An ``if
    args.fp16: from apex import amp`` is an option, not a need.)"""
    if any(isinstance(sem.parent(imp), ast.Module) or _required(sem, imp) for imp in _gpu_only_imports(sem)):
        return True
    return _imports_own_extension(sem) or _compiles_kernel_on_import(sem) or \
        sem.project is not None and sem.project.imports_gpu_only_module(sem)  # type: ignore[attr-defined]


def _gpu_only_imports(sem: SemanticModel) -> list[ast.AST]:
    return sem.cached("gpu_only_imports", lambda: [imp for imp in sem.of_type(ast.Import, ast.ImportFrom)  # type: ignore[no-any-return]
                                                   if _imports_gpu_only(imp, _GPU_ONLY)])  # type: ignore[arg-type]


def _imported_before(sem: SemanticModel, imp: ast.AST, node: ast.AST) -> bool:
    where = sem.function_of(imp)
    if where is None:
        return sem.index.pos[imp] < sem.index.pos[node] or sem.function_of(node) is not None or _required(sem, imp)
    if where is not sem.function_of(node):
        return False
    parent = sem.parent(imp)  # (``if trt_file is not None: from torch2trt import TRTModule``: that branch only)
    block = next((b for b in (getattr(parent, f, None) for f in ("body", "orelse", "finalbody"))
                  if isinstance(b, list) and any(s is imp for s in b)), None)
    return block is None or any(sem.contains(s, node) for s in block[next(i for i, s in enumerate(block) if s is imp) + 1:])


def _required(sem: SemanticModel, imp: ast.AST) -> bool:
    """A module-level import the program declares it cannot do without: in a ``try:`` whose ``except
    ImportError`` raises (``raise ImportError("Please install apex to run this example.")``)."""
    parent = sem.parent(imp)
    return isinstance(parent, ast.Try) and any(s is imp for s in parent.body) and any(
        (h.type is None or re.search(r"ImportError|ModuleNotFoundError|Exception", sem.segment(h.type)))
        and h.body and isinstance(h.body[-1], ast.Raise) for h in parent.handlers)


# ---- programs that say they need a GPU ---------------------------------------------------------------
_CUDA_PRESENT = ("torch.cuda.is_available", "torch.cuda.device_count")


def states_gpu_need(sem: SemanticModel, stmt: ast.AST) -> bool:
    """``stmt`` stops the program when there is no GPU: ``assert torch.cuda.is_available(), ...``,
    ``if not torch.cuda.is_available(): raise ...`` (or ``sys.exit``; ``if torch.cuda.device_count() < world:``),
    or an ``if``/``elif
    torch.cuda.is_available():`` whose ``else`` ends so (``else: print("no CPU training"); sys.exit(1)``)."""
    if isinstance(stmt, ast.Assert):
        return _asks_for_gpus(sem, stmt.test)
    if not isinstance(stmt, ast.If) or not _asks_for_gpus(sem, stmt.test):
        return False
    test = stmt.test  # (the branch taken without GPUs: ``not is_available()``, ``device_count() < world``)
    negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) or isinstance(test, ast.Compare) \
        and len(test.ops) == 1 and (isinstance(test.ops[0], (ast.Lt, ast.LtE, ast.Eq)) or isinstance(test.ops[0], ast.Is)
                                    and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is False)
    # (``if torch.cuda.is_available() is False: raise EnvironmentError(...)``: WZMIAOMIAO's launchers)
    return _stops(sem, stmt.body if negated else stmt.orelse)


def _asks_for_gpus(sem: SemanticModel, test: ast.AST) -> bool:
    """The test asks whether there are GPUs: ``torch.cuda.is_available()``, ``device_count()``, or a name bound to one
    (``ok = torch.cuda.is_available()``, then ``if not ok: raise ...``)."""
    for n in sem.subtree(test):
        if isinstance(n, ast.Call) and (sem.names.call_name(n) or "") in _CUDA_PRESENT:
            return True
        if isinstance(n, ast.Name) and (b := sem.bindings.at(n.id, n)) is not None and not b.is_param \
                and isinstance(b.value, ast.Call) and (sem.names.call_name(b.value) or "") in _CUDA_PRESENT:
            return True
    return False


def _stops(sem: SemanticModel, body: list[ast.stmt]) -> bool:
    last = body[-1] if body else None
    return isinstance(last, ast.Raise) or isinstance(last, ast.Expr) and isinstance(last.value, ast.Call) \
        and (sem.names.call_name(last.value) or dotted(last.value.func) or "") in EXITS


def refuses_cpu(sem: SemanticModel, func: ast.AST | None = None, at: ast.AST | None = None) -> bool:
    """The program says it needs a GPU and stops without one (``states_gpu_need``), or calls a function of
    another module of the project that does (DINO's ``utils.init_distributed_mode(args)``: "Does not support
    training without GPU", ``sys.exit(1)``). With ``func``: in that function's own body (asked for the project's
    summaries). With ``at``: where the stop covers ``at``: at module level (the ``__main__`` block), in the
    function of ``at``, in one that names it (``mp.spawn(run, ...)``, ``train(model, loader)``) or in one the
    module level calls (``main()``); a sibling worker's own check says nothing about ``at``'s."""
    source = sem.text.source
    if func is not None:
        return ("is_available" in source or "device_count" in source) and \
            any(states_gpu_need(sem, n) for n in sem.local_nodes(func) if isinstance(n, (ast.Assert, ast.If)))
    holders = dict(_cpu_refusals(sem))
    branch = holders.pop(_BRANCH, set())  # (a stop in one branch covers only what comes after it in that branch)
    if at is not None and branch and any(s in branch for s in sem.index.earlier_statements(at)):
        return True
    if not holders or at is None:
        return bool(holders)
    if None in holders:
        return True
    site = _outermost(sem, at)
    if site in holders and any(s in holders[site] for s in sem.index.earlier_statements(at)):
        return True  # (an earlier statement of a block around ``at``: not one after it, nor one in another branch)
    entries = _entry_points(sem)
    for holder in holders:
        if holder is site:
            continue
        if holder in entries:
            return True
        if site is not None and any(isinstance(n, ast.Name) and n.id == site.name  # type: ignore[attr-defined]
                                    for n in sem.subtree(holder)):
            return True
    return False


_BRANCH = ast.If()  # the key of the stops made inside an ``if`` of their function: they cover their branch only


def _in_a_branch(sem: SemanticModel, node: ast.AST) -> bool:
    """``node`` sits in an ``if`` of its function (or of the module; ``if __name__ == "__main__":`` aside): yolov7's
    ``if opt.local_rank != -1: assert torch.cuda.device_count() > opt.local_rank`` needs GPUs in DDP mode only."""
    for up in sem.ancestors(node):
        if isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return False
        if isinstance(up, ast.If) and node is not up and "__name__" not in sem.segment(up.test):
            return True
    return False


def _cpu_refusals(sem: SemanticModel) -> dict[ast.AST | None, set[ast.AST]]:
    """The functions (None: the module level) that stop without a GPU or call a project helper that does, each
    with the statements that do it."""

    def compute() -> dict[ast.AST | None, set[ast.AST]]:
        source = sem.text.source
        out: dict[ast.AST | None, set[ast.AST]] = {}
        if "is_available" in source or "device_count" in source:
            for t in (ast.Assert, ast.If):
                for n in sem.of_type(t):
                    if states_gpu_need(sem, n):
                        out.setdefault(_BRANCH if _in_a_branch(sem, n) else _outermost(sem, n), set()).add(n)
        for c in sem.calls:
            if (isinstance(c.func, ast.Attribute) and isinstance(c.func.value, ast.Name)
                    and c.func.value.id in sem.names.imports or isinstance(c.func, ast.Name)
                    and c.func.id in sem.names.from_imports) \
                    and "needs_gpu" in getattr(sem.external(c), "effects", ()):
                out.setdefault(_outermost(sem, c), set()).add(sem.statement_of(c))  # type: ignore[arg-type]
        return out

    return sem.cached("cpu_refusals", compute)  # type: ignore[no-any-return]


def _outermost(sem: SemanticModel, node: ast.AST) -> ast.AST | None:
    func = sem.function_of(node)
    while func is not None and (up := sem.function_of(func)) is not None:
        func = up
    return func


def _entry_points(sem: SemanticModel) -> set[ast.AST]:
    """The functions the module level calls by name (``main()`` under ``if __name__ == "__main__":``)."""
    return sem.cached("entry_points", lambda: {f for call in sem.calls if isinstance(call.func, ast.Name)  # type: ignore[no-any-return]
                                               and sem.function_of(call) is None
                                               for f in sem.resolve(call) if sem.function_of(f) is None})
