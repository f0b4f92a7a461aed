"""strategy="fsdp" on 2 gloo ranks: sharded training, sharded step checkpoints, resume, and a gather on one process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from torchdoctor.train import checkpoint
from tests.train.fsdp_worker import Blocks
from tests.train.launch import torchrun

WORKER = Path(__file__).with_name("fsdp_worker.py")


@pytest.mark.slow
def test_fsdp_trains_sharded_resumes_mid_epoch_and_gathers_into_a_plain_model(tmp_path: Path) -> None:
    (done,) = torchrun(["--nproc-per-node=2"], [str(WORKER), str(tmp_path)])
    assert done.returncode == 0, done.stderr[-4000:]
    reports = [json.loads((tmp_path / f"report-{rank}.json").read_text()) for rank in (0, 1)]
    assert reports[0]["param"] == "DTensor"  # the parameters really were sharded
    assert reports[0]["straight"] == reports[1]["straight"]  # metrics averaged over both ranks
    # Interrupted at step 7: the newest checkpoint is the sharded one of step 5, one folder, a part per rank.
    assert reports[0]["newest"] == ["epoch-0001", "epoch-0002-step-00000005", "metrics.csv"]
    step5 = sorted(p.name for p in (tmp_path / "run" / "epoch-0002-step-00000005").iterdir())
    assert step5 == [".metadata", "__0_0.distcp", "__1_0.distcp", "torchdoctor.pt"]
    assert done.stderr.count("resuming from") == 1 and "epoch 1 + 1 batches, step 5" in done.stderr

    assert reports[0]["resumed"] == reports[0]["straight"]  # bit-identical metrics after the resume
    resumed = torch.load(tmp_path / "weights-resumed.pt", map_location="cpu", weights_only=True)
    straight = torch.load(tmp_path / "weights-straight.pt", map_location="cpu", weights_only=True)
    assert all(torch.equal(resumed[k], straight[k]) for k in straight)

    # One process, no process group: the newest sharded checkpoint gathered into a plain model.
    latest = checkpoint.latest(tmp_path / "run")
    assert latest is not None and latest.name == "epoch-0002"
    plain = Blocks()
    info = checkpoint.load(latest, plain)
    assert (info.epoch, info.step) == (2, 8)
    assert all(torch.equal(plain.state_dict()[k], resumed[k]) for k in resumed)
    # keep_last=3 counts both kinds; no partial folder is left behind.
    names = sorted(p.name for p in (tmp_path / "run").iterdir())
    assert names == ["epoch-0001", "epoch-0002", "epoch-0002-step-00000005", "metrics.csv"]
