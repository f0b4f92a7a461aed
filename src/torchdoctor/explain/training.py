"""Builders for messages a training run dies with: TD104 TD307 TD407 TD601 TD610 TD702 TD704 TD705."""

from __future__ import annotations

import re
from typing import Any

from torchdoctor.explain.common import Draft, at, plural

_INDEX_IN_SOURCE = re.compile(r"cuda:(\d+)|set_device\(\s*([\w.\[\]'\"]+)\s*\)|device\(\s*['\"]cuda['\"]\s*,\s*(\w+)\s*\)")


def invalid_ordinal(hit: Any, facts: Any) -> list[Draft]:
    asked = ""
    m = _INDEX_IN_SOURCE.search(hit.source or "")
    if m:
        asked = f" `{next(g for g in m.groups() if g is not None)}`"
    message = f"the program asks for a GPU index{asked} that does not exist among the GPUs this process sees: 'invalid device ordinal'{at(hit)}"
    if isinstance(facts, dict):
        seen = _visible(facts)
        if seen:
            message += f"; this machine shows {seen}"
    return [("TD104", message,
             "index GPUs from 0 within CUDA_VISIBLE_DEVICES (with CUDA_VISIBLE_DEVICES=3 the only GPU is cuda:0); under torchrun "
             "use --nproc_per_node <= the GPU count and torch.cuda.set_device(int(os.environ['LOCAL_RANK']))")]


def _visible(facts: dict[str, Any]) -> str:
    from torchdoctor.env.facts import Facts
    from torchdoctor.env.visible import visible_count

    f = Facts(facts)
    n = f.nvidia_count if f.nvidia_count is not None else f.int("device_count")
    if n is None:
        return ""
    cvd = f.cvd
    if cvd is None:
        return plural(n, "GPU")
    vis = visible_count(cvd, n, [g.uuid for g in f.gpus if g.uuid] or None)
    shown = "an unknown number of" if vis.count is None else str(vis.count)
    return f"{plural(n, 'GPU')}, {shown} of them visible with CUDA_VISIBLE_DEVICES={cvd!r}"


def sampler_and_shuffle(hit: Any, facts: Any) -> list[Draft]:
    if "batch_size, shuffle, sampler, and drop_last" in (hit.get("others") or ""):
        return [("TD702", f"DataLoader was given batch_sampler= together with batch_size, shuffle, sampler or drop_last{at(hit)}",
                 "give the batch_sampler alone: it decides batching and order (DataLoader(ds, batch_sampler=bs, num_workers=...))")]
    return [("TD702", f"DataLoader was given both sampler= and shuffle=True{at(hit)}",
             "drop shuffle=True: the sampler decides the order (DistributedSampler(ds, shuffle=True) with sampler.set_epoch(epoch) each epoch)")]


def backward_without_graph(hit: Any, facts: Any) -> list[Draft]:
    return [("TD407", f"backward() on a tensor that has no grad_fn (element {hit.get('element') or 0} of its inputs){at(hit)}: it was computed "
             "under torch.no_grad()/inference_mode(), detached from the graph (.item(), .detach(), .numpy(), torch.tensor(loss)), "
             "or no parameter it depends on requires grad",
             "compute the loss outside no_grad/inference_mode from the model's output tensors (not from .item() values), "
             "and check that the trained parameters have requires_grad=True; do not set loss.requires_grad = True, which trains nothing")]


def nccl_unavailable(hit: Any, facts: Any) -> list[Draft]:
    no_gpu = "no GPUs found" in hit.text
    why = ("ProcessGroupNCCL found no GPU in this process" if no_gpu
           else "this PyTorch has no NCCL (CPU builds, Windows and macOS have none)")
    if isinstance(facts, dict):
        from torchdoctor.env.facts import Facts

        f = Facts(facts)
        if f.platform in ("win32", "darwin"):
            why += f"; this machine runs {'Windows' if f.platform == 'win32' else 'macOS'}, where NCCL does not exist"
        elif no_gpu:
            from torchdoctor.explain.environment import why_no_gpu

            reason = why_no_gpu(facts)
            why += f"; on this machine {reason}" if reason else ""
    return [("TD704", f"init_process_group('nccl') cannot run here: {why}{at(hit)}",
             "choose the backend from the machine: init_process_group('nccl' if torch.cuda.is_available() else 'gloo') "
             "(gloo on CPU-only machines, Windows and macOS)")]


def nccl_duplicate_gpu(hit: Any, facts: Any) -> list[Draft]:
    ranks = sorted({int(r) for key in ("rank", "other") for r in hit.values.get(key, []) if r.isdigit()})
    return [("TD705", f"NCCL found {plural(len(ranks), 'rank')} ({', '.join(map(str, ranks))}) on the same GPU (CUDA device at PCI bus {hit.get('bus')}): "
             f"every rank uses one GPU{at(hit)}",
             "bind each process to its own GPU before init_process_group: torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) and "
             "device = torch.device('cuda', local_rank); do not give all ranks the same CUDA_VISIBLE_DEVICES")]


def deprecated_amp(hit: Any, facts: Any) -> list[Draft]:
    ns, api = hit.get("ns") or "cuda", hit.get("api") or "autocast"
    new = {"autocast": f"torch.amp.autocast('{ns}', ...)", "GradScaler": f"torch.amp.GradScaler('{ns}', ...)",
           "custom_fwd": f"torch.amp.custom_fwd(device_type='{ns}', ...)", "custom_bwd": f"torch.amp.custom_bwd(device_type='{ns}')"}[api]
    return [("TD601", f"`torch.{ns}.amp.{api}` is deprecated (a FutureWarning since torch 2.4){at(hit)}",
             f"use {new}; `torchdoctor check --fix` rewrites autocast and GradScaler calls")]


# What each kernel's assertion checks: (what was out of range, where it comes from, what to check).
_ASSERTIONS = (
    (re.compile(r"n_classes|n_class"), "a class label outside 0..num_classes-1 reached the loss (NLLLoss / CrossEntropyLoss)",
     "check labels.min() >= 0 and labels.max() < the model's number of outputs (1-based labels, -1 for 'unknown': use ignore_index=-1)"),
    (re.compile(r"srcIndex < srcSelectDimSize|index out of range in self"), "a token id or index >= num_embeddings reached nn.Embedding (index_select)",
     "check ids.max() < embedding.num_embeddings (vocabulary and tokenizer must match; padding id inside the table)"),
    (re.compile(r"input_val >= zero && input_val <= one"), "BCELoss received inputs outside [0, 1]",
     "apply torch.sigmoid first, or use nn.BCEWithLogitsLoss on the raw outputs"),
    (re.compile(r"idx_dim >= 0 && idx_dim < index_size|index out of bounds|-sizes\[i\] <= index"), "an index out of bounds reached gather/scatter or tensor indexing",
     "check the index tensor's range against the indexed dimension (x.shape[dim])"),
)


def index_out_of_range(hit: Any, facts: Any) -> list[Draft]:
    assertion = hit.get("assertion") or ""
    text = f"{assertion}\n{hit.text}"
    what, check = "a label or index was out of range in a GPU kernel", "check label and index ranges (labels < num_classes, ids < num_embeddings)"
    for pattern, this, how in _ASSERTIONS:
        if pattern.search(text):
            what, check = this, how
            break
    if hit.get("target") is not None:
        what = f"class label {hit.get('target')} is outside 0..num_classes-1 of the loss (NLLLoss / CrossEntropyLoss)"
    kernel = f" (`{hit.get('kernel')}`: `{assertion}`)" if hit.get("kernel") else ""
    on_device = "device-side assert triggered" in hit.text or kernel
    rerun = "rerun with CUDA_LAUNCH_BLOCKING=1 (or on the CPU) for the failing line: the traceback of an asynchronous CUDA error points later; " if on_device else ""
    return [("TD307", f"{what}{kernel}{at(hit)}", f"{rerun}{check}")]


_SIZE = r"\d+(?:\.\d+)? ?(?:[KMGT]i?B|bytes|B)"
_OOM_DETAILS = (
    re.compile(rf"GPU (?P<gpu>\d+) has a total capac(?:i)?ty of (?P<total>{_SIZE}) of which (?P<free>{_SIZE}) is free"),
    re.compile(rf"Of the allocated memory (?P<alloc>{_SIZE}) is allocated by PyTorch, and (?P<unalloc>{_SIZE}) is reserved by PyTorch but unallocated"),
    re.compile(rf"\(GPU (?P<gpu>\d+); (?P<total>{_SIZE}) total capacity; (?P<alloc>{_SIZE}) already allocated; (?P<free>{_SIZE}) free;"
               rf"(?: (?:(?P<reserved>{_SIZE}) reserved in total by PyTorch|(?P<cached>{_SIZE}) cached))?"),
    re.compile(rf"this process has (?P<this>{_SIZE}) memory in use"),
)
_PROCESS = re.compile(rf"Process (?P<pid>\d+) has (?P<used>{_SIZE}) memory in use")
_UNITS = {"b": 1, "bytes": 1, "kb": 1 << 10, "kib": 1 << 10, "mb": 1 << 20, "mib": 1 << 20, "gb": 1 << 30, "gib": 1 << 30, "tb": 1 << 40, "tib": 1 << 40}
GiB = 1 << 30


def to_bytes(size: str | None) -> int | None:
    """``"20.00 MiB"`` -> bytes; PyTorch writes binary units (its MB and GB are MiB and GiB too)."""
    if not size:
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?) ?([A-Za-z]+)", size.strip())
    if not m or m.group(2).lower() not in _UNITS:
        return None
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def out_of_memory(hit: Any, facts: Any) -> list[Draft]:
    if hit.get("mps_max"):
        return [("TD610", f"the Apple GPU (MPS) ran out of memory: tried to allocate {hit.get('req')} with {hit.get('mps_alloc')} allocated by MPS and "
                 f"{hit.get('mps_other')} by others, of {hit.get('mps_max')} allowed{at(hit)}",
                 "lower the batch size (gradient accumulation keeps the effective batch) or train in float16/bfloat16; "
                 "PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 lifts the limit but can freeze the machine")]
    d: dict[str, str] = {}
    for pattern in _OOM_DETAILS:
        m = pattern.search(hit.text)
        if m:
            d.update({k: v for k, v in m.groupdict().items() if v is not None})
    gpu = f"GPU {d['gpu']}" if "gpu" in d else "the GPU"
    gpu += _gpu_name(facts, d.get("gpu"))
    parts = [f"{gpu} ran out of memory"]
    if hit.get("req"):
        parts[0] += f": tried to allocate {hit.get('req')}" + (f" with {d['free']} free of {d['total']}" if "free" in d and "total" in d else "")
    req, total = to_bytes(hit.get("req")), to_bytes(d.get("total"))
    alloc = to_bytes(d.get("alloc"))
    unalloc = to_bytes(d.get("unalloc"))
    if unalloc is None and alloc is not None and to_bytes(d.get("reserved")) is not None:
        unalloc = max(to_bytes(d.get("reserved")) - alloc, 0)  # type: ignore[operator]
    if alloc is not None:
        parts.append(f"PyTorch holds {d['alloc']} allocated" + (f" and {_fmt(unalloc)} reserved but unallocated" if unalloc is not None else ""))
    others = _other_processes(hit.text, d, alloc, unalloc)
    if others:
        parts.append(f"other processes hold {_fmt(sum(b for _, b in others))} (pid {', '.join(p for p, _ in others)})")
    return [("TD610", "; ".join(parts) + at(hit), _oom_fix(req, total, unalloc, others))]


def _gpu_name(facts: Any, index: str | None) -> str:
    if not isinstance(facts, dict) or index is None:
        return ""
    from torchdoctor.env.facts import Facts

    for g in Facts(facts).gpus:
        if str(g.index) == index:
            return f" ({g.name}" + (f", {g.memory_mb / 1024:.0f} GiB" if g.memory_mb else "") + ")"
    return ""


def _other_processes(text: str, d: dict[str, str], alloc: int | None, unalloc: int | None) -> list[tuple[str, int]]:
    """Processes listed as holding the GPU other than this one (in a container this one is listed by pid too)."""
    listed = [(m.group("pid"), to_bytes(m.group("used")) or 0) for m in _PROCESS.finditer(text)]
    if "this" in d or not listed or alloc is None:
        return listed
    ours = alloc + (unalloc or 0)
    candidates = [i for i, (_, used) in enumerate(listed) if used >= ours * 0.95]
    if not candidates:
        return listed
    mine = min(candidates, key=lambda i: listed[i][1] - ours)
    return [p for i, p in enumerate(listed) if i != mine]


def _oom_fix(req: int | None, total: int | None, unalloc: int | None, others: list[tuple[str, int]]) -> str:
    if req and total and req > total:
        return ("one allocation is larger than the whole GPU: shrink what one step holds (batch size, sequence length, image size; "
                "gradient accumulation keeps the effective batch); no allocator setting helps")
    if others and total and sum(b for _, b in others) > max(GiB, total // 10):
        return "stop the other process or train on a free GPU (nvidia-smi shows who holds it; CUDA_VISIBLE_DEVICES picks another)"
    if unalloc and req and total and unalloc >= req and unalloc >= total // 20:
        return ("the cache is fragmented: start with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; "
                "if it still fails, lower the batch size or use activation checkpointing")
    return ("lower the batch size (gradient accumulation keeps the effective batch), train under bf16 autocast, use activation checkpointing "
            "(torch.utils.checkpoint) for deep models; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True when much is reserved but unallocated")


def _fmt(n: int | None) -> str:
    if n is None:
        return "?"
    return f"{n / GiB:.2f} GiB" if n >= GiB else f"{n / (1 << 20):.2f} MiB"
