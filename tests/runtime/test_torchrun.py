"""Under torchrun each rank audits itself and rank 0 prints one merged report, tagged by rank."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

PROGRAM = """
import os
import torch
import torch.distributed as dist
from torch import nn

dist.init_process_group("gloo")
rank = dist.get_rank()
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(6):
    if rank == 0 or step == 0:  # only rank 1 forgets to zero its gradients
        opt.zero_grad()
    nn.functional.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1)).backward()
    opt.step()
dist.destroy_process_group()
"""


def test_two_gloo_ranks_merge_into_one_report(tmp_path):
    script = tmp_path / "ddp_prog.py"
    script.write_text(PROGRAM)
    out = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone",
         "-m", "torchdoctor", "run", "--no-env", "--output-format", "json", "--output-file", str(out), str(script)],
        capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert [(f["code"], f["rank"]) for f in doc["findings"]] == [("TD404", 1)]
    assert doc["findings"][0]["message"].startswith("[rank 1]")
