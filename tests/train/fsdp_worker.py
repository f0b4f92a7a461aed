"""Run by test_fsdp.py under torchrun (2 gloo ranks): fit() with strategy="fsdp" straight, interrupted, then resumed."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from torchdoctor.train import FitState, fit


class Blocks(nn.Module):
    """A model that exposes blocks (a ModuleList): each becomes its own FSDP unit."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Dropout(0.1)) for _ in range(2))
        self.head = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


class Crash(Exception):
    pass


class StopAt:
    def __init__(self, step: int | None) -> None:
        self.step = step

    def on_step_end(self, state: FitState) -> None:
        if state.step == self.step:
            raise Crash


def data() -> TensorDataset:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(96, 8, generator=gen)
    return TensorDataset(x, (x[:, 0] > 0).long() + (x[:, 1] > 1).long())


def train(ckpt: Path, stop_at: int | None = None) -> tuple[nn.Module, list[dict]]:  # type: ignore[type-arg]
    torch.manual_seed(0)
    model = Blocks()
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    history = fit(model, DataLoader(data(), batch_size=12, shuffle=True), loss_fn=nn.CrossEntropyLoss(), optimizer=opt,
                  epochs=2, val_loader=DataLoader(data(), batch_size=32), strategy="fsdp", checkpoint_dir=ckpt,
                  checkpoint_every=5, clip_grad_norm=1.0, callbacks=[StopAt(stop_at)], log_every=3, progress=False)  # fmt: skip
    return model, [{k: v for k, v in row.items() if k not in ("seconds", "samples_per_s")} for row in history.rows]


def full_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def main() -> None:
    if hasattr(signal, "alarm"):
        signal.alarm(400)  # never outlive the test: a rank orphaned by a killed launcher would wait for ever
    out = Path(sys.argv[1])
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo")  # the caller's group: fit() uses it and leaves it open
    try:
        model, rows = train(out / "straight")
        report = {"straight": rows, "param": type(next(model.parameters())).__name__}
        if rank == 0:
            torch.save(full_weights(model), out / "weights-straight.pt")
        else:
            full_weights(model)  # a collective: every rank takes part
        try:
            train(out / "run", stop_at=7)  # inside epoch 2 (4 steps per epoch and rank), after the step checkpoint at 5
        except Crash:
            report["newest"] = sorted(p.name for p in (out / "run").iterdir())
        torch.manual_seed(1000 + rank)  # the resumed run must not depend on the state the process is in
        model, report["resumed"] = train(out / "run")  # fresh model and optimizer, state from the checkpoint
        weights = full_weights(model)
        if rank == 0:
            torch.save(weights, out / "weights-resumed.pt")
        (out / f"report-{rank}.json").write_text(json.dumps(report))  # noqa: TD703 - one file per rank
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # Leave without finalising the interpreter. A sharded model keeps the gloo group alive after
    # destroy_process_group() (torch's DTensor caches hold the mesh, and the mesh and FSDP state hold the
    # group), so its worker threads outlive the script; one of them freeing the last collective's tensors
    # while Python finalises wants the GIL and aborts the rank ("terminate called without an active
    # exception", SIGABRT in ~AsyncAllgatherCoalescedWork under gdb), about one run in ten on a loaded
    # machine. Everything this worker reports is written and closed by now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
