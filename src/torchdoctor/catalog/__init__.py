"""The pitfall catalog: every code, its severity, stage, detectors and documentation.

The table below is the project's contract (codes are never renumbered), plus the codes
added since (TD104, TD307, TD610: errors first met as a message, see ``explain``; TD611: a
cost of TD303's shape, found on real code). Each rule's
prose (ruff's outline: what it does / why is this bad / example / use instead /
fix safety) lives in ``docs/<CODE>.md`` beside this file: one text that
``torchdoctor rules CODE`` prints, SARIF carries as help, and all three
detectors share, since most codes are found by more than one of them.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources

from torchdoctor.errors import UsageError
from torchdoctor.findings import Severity
from torchdoctor.record import FrozenRecord

__all__ = ["Rule", "RULES", "STAGES", "get_rule", "rule_doc", "select_codes"]

STAGES = {
    0: "environment",
    1: "device choice",
    2: "model",
    3: "data",
    4: "loop",
    5: "results",
    6: "performance",
    7: "distributed",
}


class Rule(FrozenRecord):
    __slots__ = ("code", "name", "severity", "detection", "title")
    code: str
    name: str  # kebab-case, as ruff names its rules
    severity: Severity
    detection: str  # "S", "R", "E", "S+R" ... : static checker, runtime auditor, environment doctor
    title: str

    def __init__(self, code: str, name: str, severity: Severity, detection: str, title: str) -> None:
        self._fill(code, name, severity, detection, title)

    @property
    def stage(self) -> int:
        return int(self.code[2])

    @property
    def stage_name(self) -> str:
        return STAGES[self.stage]

    @property
    def static(self) -> bool:
        return "S" in self.detection.split("+")

    @property
    def runtime(self) -> bool:
        return "R" in self.detection.split("+")

    @property
    def doc(self) -> str:
        return rule_doc(self.code)


E, W, I = Severity.ERROR, Severity.WARNING, Severity.INFO

_TABLE = (
    # 0: environment (the runtime auditor reports the errors among them at start-up)
    ("TD001", "torch-not-importable", E, "E", "PyTorch cannot be imported"),
    ("TD002", "cpu-only-build-with-gpu", E, "E", "CPU-only PyTorch build on a machine that has an NVIDIA GPU"),
    ("TD003", "driver-too-old", E, "E", "NVIDIA driver too old for the CUDA version this PyTorch was built with"),
    ("TD004", "minor-version-compatibility", I, "E", "driver older than the build's toolkit: runs only by CUDA minor-version compatibility"),
    ("TD005", "gpu-too-new-for-build", E, "E", "GPU newer than this build's kernels (no kernel image for its compute capability)"),
    ("TD006", "gpu-too-old-for-build", E, "E", "GPU older than this build supports (its architecture was dropped)"),
    ("TD007", "no-nvidia-driver", E, "E", "NVIDIA GPU present but no NVIDIA driver loaded"),
    ("TD008", "container-without-gpu", E, "E", "running in a container started without GPU access"),
    ("TD009", "no-gpu", I, "E", "no GPU at all: training will run on the CPU"),
    ("TD010", "cuda-visible-devices-hides-all", E, "E", "CUDA_VISIBLE_DEVICES hides every GPU"),
    ("TD011", "cuda-device-order", W, "E", "several different GPUs and no CUDA_DEVICE_ORDER=PCI_BUS_ID"),
    ("TD012", "driver-library-mismatch", E, "E", "driver/library version mismatch between kernel module and user-space driver"),
    ("TD013", "wsl-driver-problem", E, "E", "WSL: a Linux NVIDIA driver shadows the Windows one, or WSL 1"),
    ("TD014", "conflicting-torch-installs", E, "E", "conflicting installs: torch from pip and conda, or conda's cpuonly"),
    ("TD015", "wrong-gpu-vendor-build", E, "E", "ROCm build on an NVIDIA machine, or a CUDA build on an AMD one"),
    ("TD016", "macos-no-cuda", I, "E", "macOS: no CUDA; use MPS (not under Rosetta)"),
    ("TD017", "mig-without-instances", E, "E", "MIG enabled but no MIG instance visible"),
    ("TD018", "cuda-unknown-error", E, "E", "CUDA unknown error after suspend/resume (nvidia_uvm needs reloading)"),
    ("TD019", "libcuda-stub-on-path", E, "E", "the CUDA driver stub library is on the loader path"),
    ("TD020", "gpu-compute-mode-busy", E, "E", "GPU busy: exclusive-process or prohibited compute mode"),
    ("TD021", "gpu-failing", E, "E", "GPU lost or failing (Xid 79, uncorrectable ECC errors)"),
    ("TD022", "shm-too-small", W, "E", "shared memory (/dev/shm) too small for DataLoader workers"),
    ("TD023", "cuda-initialised-before-fork", E, "E", "CUDA initialised before a fork"),
    # 1: device choice
    ("TD101", "hardcoded-cuda", W, "S", "CUDA hard-coded with no is_available() fallback"),
    ("TD102", "cuda-call", I, "S", ".cuda() instead of .to(device)"),
    ("TD103", "gpu-unused", W, "R", "a GPU is available, yet the model trained on the CPU"),
    ("TD104", "device-index-out-of-range", E, "R", "device index beyond the GPUs this process sees (cuda:N, set_device, LOCAL_RANK)"),
    # 2: model
    ("TD201", "model-not-moved", E, "S+R", "model never moved to the device its inputs are moved to"),
    ("TD202", "model-split-across-devices", E, "R", "one model's parameters spread over several devices without model parallelism"),
    ("TD203", "tensor-attribute-not-buffer", E, "S+R", "plain tensor attribute in nn.Module.__init__ instead of a buffer or parameter"),
    ("TD204", "data-parallel", W, "S", "nn.DataParallel instead of DistributedDataParallel"),
    ("TD205", "wrapped-state-dict", W, "S+R", "state_dict() saved from a DataParallel/DDP/compiled wrapper"),
    # 3: data
    ("TD301", "discarded-to-result", E, "S", "result of tensor.to()/.cuda() discarded"),
    ("TD302", "batch-not-moved", E, "S+R", "batch element used without being moved to the model's device"),
    ("TD303", "tensor-created-on-cpu", E, "S+R", "tensor created in the loop without device= and combined with device tensors"),
    ("TD304", "no-pin-memory", W, "S+R", "DataLoader feeding a CUDA model without pin_memory=True"),
    ("TD305", "no-loader-workers", I, "S", "DataLoader with num_workers=0 in a CUDA training script"),
    ("TD306", "non-blocking-misuse", E, "S", "non_blocking=True copy read before synchronising, or from pageable memory"),
    ("TD307", "index-out-of-range-on-device", E, "R", "a label or index out of range in a GPU kernel ('device-side assert triggered')"),
    # 4: loop
    ("TD401", "eval-with-autograd", W, "S+R", "evaluation forward pass with autograd on"),
    ("TD402", "eval-in-train-mode", E, "S+R", "evaluation with the model still in training mode"),
    ("TD403", "train-in-eval-mode", E, "S+R", "training resumes in eval mode after validation"),
    ("TD404", "gradients-never-zeroed", E, "S+R", "backward() and step() in a loop with no zero_grad()"),
    ("TD405", "loss-graph-kept", W, "S+R", "loss tensor accumulated across steps without .item()/.detach()"),
    ("TD406", "loss-weight-not-moved", E, "S+R", "loss function holding tensors not moved to the device"),
    ("TD407", "backward-under-no-grad", E, "S", "backward() inside a no_grad()/inference_mode() block"),
    # 5: results, saving, loading
    ("TD501", "numpy-on-device-tensor", E, "S", ".numpy() on a tensor that may be on a GPU or require grad"),
    ("TD502", "load-without-map-location", W, "S", "torch.load without map_location"),
    ("TD503", "load-without-weights-only", W, "S", "torch.load without weights_only=True"),
    ("TD504", "whole-model-saved", W, "S", "whole model pickled instead of its state_dict()"),
    # 6: performance and memory
    ("TD601", "deprecated-amp-api", W, "S", "deprecated torch.cuda.amp / torch.cpu.amp API"),
    ("TD602", "empty-cache-in-loop", W, "S", "torch.cuda.empty_cache() inside the training loop"),
    ("TD603", "sync-every-step", I, "S+R", "host-device synchronisation every step"),
    ("TD604", "fp16-without-grad-scaler", E, "S", "float16 autocast with no GradScaler"),
    ("TD605", "grad-scaler-half-used", E, "S", "GradScaler used half-way"),
    ("TD606", "input-pipeline-bottleneck", W, "R", "waiting for the next batch takes more than 20 % of the step"),
    ("TD607", "device-memory-leak", W, "R", "device memory grows step after step"),
    ("TD608", "amp-not-used", I, "R", "AMP not used on a GPU with bf16/fp16 tensor cores"),
    ("TD609", "memory-use-off", I, "R", "device memory use far below capacity or within 5 % of it"),
    ("TD610", "device-out-of-memory", E, "R", "the device ran out of memory ('CUDA out of memory. Tried to allocate')"),
    ("TD611", "tensor-made-then-moved", I, "S", "tensor made on the CPU and copied to the device on every step"),
    # 7: multi-device and distributed
    ("TD701", "sampler-set-epoch-missing", E, "S+R", "DistributedSampler without set_epoch(epoch) in the epoch loop"),
    ("TD702", "sampler-and-shuffle", E, "S", "DataLoader given both sampler= and shuffle=True"),
    ("TD703", "no-rank-zero-guard", W, "S", "checkpoint saving in a DDP program with no rank-0 guard"),
    ("TD704", "nccl-hardcoded", I, "S", 'init_process_group("nccl") hard-coded'),
    ("TD705", "every-rank-on-gpu0", E, "S", "every rank on GPU 0: no set_device(local_rank) or indexed device"),
    ("TD706", "batchnorm-not-synced", I, "S", "BatchNorm in a DDP model without SyncBatchNorm"),
    ("TD707", "pipeline-stage-device-mismatch", E, "R", "a model-parallel stage receives its input on another device"),
)

RULES: dict[str, Rule] = {row[0]: Rule(*row) for row in _TABLE}


def get_rule(code: str) -> Rule:
    try:
        return RULES[code]
    except KeyError:
        raise UsageError(f"unknown rule code {code!r} (see `torchdoctor rules`)") from None


@lru_cache(maxsize=None)
def rule_doc(code: str) -> str:
    """The rule's documentation (Markdown, ruff's outline); empty if not written."""
    get_rule(code)
    try:
        return resources.files(__package__).joinpath("docs", f"{code}.md").read_text("utf-8")
    except (FileNotFoundError, OSError):
        return ""


_SELECTOR = re.compile(r"^(ALL|TD\d{0,3})$")


def select_codes(select: list[str] | None, ignore: list[str] | None) -> set[str]:
    """Codes enabled by ruff-style selectors: a code, a prefix (``TD3``) or ``ALL``.

    An unknown selector is a UsageError: a typo must not silently disable a rule.
    """

    def expand(selectors: list[str]) -> set[str]:
        out: set[str] = set()
        for raw in selectors:
            sel = raw.strip().upper()
            if not _SELECTOR.match(sel):
                raise UsageError(f"unknown rule selector {raw!r}: use a code (TD302), a prefix (TD3) or ALL")
            matched = set(RULES) if sel == "ALL" else {c for c in RULES if c.startswith(sel)}
            if not matched:
                raise UsageError(f"rule selector {raw!r} matches no rule (see `torchdoctor rules`)")
            out |= matched
        return out

    chosen = expand(select) if select else set(RULES)
    return chosen - expand(ignore or [])
