"""GPU-only checks: decisions fed with injected readings, and real CPU loops under a scripted probe."""

from __future__ import annotations

import sys

import torch

import torchdoctor
from torchdoctor.findings import Location
from torchdoctor.runtime.checks import gpu
from torchdoctor.runtime.probe import DeviceProbe
from tests.runtime.loops import setup, train_epoch

MiB = 1 << 20


class ScriptedProbe(DeviceProbe):
    """Pretends the CPU is a CUDA device with the given readings; syncs are `.item()` calls."""

    def __init__(self, *, accelerator="cpu", cuda=False, capability=(8, 0), memory=None, capacity=80_000 * MiB):
        self.accelerator = accelerator
        self._cuda, self._cap, self._memory, self._capacity = cuda, capability, list(memory or []), capacity
        self._saved = None

    def cuda_available(self):
        return self._cuda

    def capability(self):
        return self._cap

    def memory_allocated(self):
        return self._memory.pop(0) if self._memory else None

    def memory_capacity(self):
        return self._capacity

    def peak_and_reset(self):
        return 40_000 * MiB

    def start_sync_watch(self, sink):
        self._saved = torch.Tensor.item

        def item(t):
            sink(sys._getframe(1))
            return self._saved(t)

        torch.Tensor.item = item

    def stop_sync_watch(self):
        if self._saved is not None:
            torch.Tensor.item = self._saved


def _train(probe, epochs=2, autocast=False):
    model, opt, train, _ = setup(dropout=False)
    with torchdoctor.watch(probe=probe, environment=False) as s:
        for _ in range(epochs):
            train_epoch(model, opt, train)  # calls loss.item() every step
    return sorted(f.code for f in s.findings), s


def test_gpu_available_but_model_on_cpu_is_td103():
    codes, _ = _train(ScriptedProbe(accelerator="cuda", cuda=True))
    assert codes == ["TD103"]


def test_syncs_every_step_and_fp32_without_autocast_on_a_gpu():
    codes, s = _train(ScriptedProbe(memory=[100 * MiB] * 16))
    assert codes == ["TD603", "TD608"]
    sync = next(f for f in s.findings if f.code == "TD603")
    assert sync.location.path.endswith("loops.py")  # the user's `loss.item()` line, not torch's


def test_memory_growing_every_step_is_td607():
    codes, _ = _train(ScriptedProbe(capability=(6, 1), memory=[100 * MiB + i * 16 * MiB for i in range(16)]))
    assert codes == ["TD603", "TD607"]


def test_memory_near_capacity_is_td609():
    codes, _ = _train(ScriptedProbe(capability=(6, 1), capacity=41_000 * MiB))
    assert "TD609" in codes


def test_pure_decisions_and_their_quiet_cases():
    assert gpu.memory_leak([100 * MiB] * 20) is None
    assert gpu.memory_leak([100 * MiB + (i % 2) * MiB for i in range(20)]) is None
    assert gpu.memory_leak([100 * MiB + i * 4 * MiB for i in range(20)]) is not None
    assert gpu.memory_fit(50, 100, 10) is None and gpu.memory_fit(96, 100, 10) == "high"
    assert gpu.memory_fit(5, 100, 10) is None and gpu.memory_fit(5, 100, 100) == "low"
    assert gpu.amp_missing((8, 0), 0, 20, True) and not gpu.amp_missing((6, 1), 0, 20, True)
    assert not gpu.amp_missing((8, 0), 3, 20, True) and not gpu.amp_missing((8, 0), 0, 20, False)
    loc, guarded = Location("t.py", 3), Location("t.py", 9)
    assert gpu.syncs_every_step({loc: set(range(20)), guarded: {0, 10}}, 20) == [loc]
    assert gpu.gpu_unused(True, {"cpu"}, 5) and not gpu.gpu_unused(True, {"cuda"}, 5) and not gpu.gpu_unused(False, {"cpu"}, 5)


def test_environment_errors_are_reported_at_start_up(monkeypatch):
    from torchdoctor.findings import Finding
    from torchdoctor.runtime.checks import env

    monkeypatch.setattr(env, "_cache", [Finding("TD010", "CUDA_VISIBLE_DEVICES hides every GPU")])
    with torchdoctor.watch() as s:
        pass
    assert [f.code for f in s.findings] == ["TD010"]
