"""`torchdoctor run` under a 2-node torchrun launch: one report, printed once, merged over both nodes' ranks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.train.launch import torchrun

PROGRAM = """
import torch
import torch.distributed as dist
from torch import nn

dist.init_process_group("gloo")
rank = dist.get_rank()
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(6):
    if rank == 0 and step < 2 or step == 0:  # rank 1 (on the other node) never zeroes its gradients again
        opt.zero_grad()
    nn.functional.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1)).backward()
    opt.step()
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_two_nodes_one_rank_each_print_one_merged_report(tmp_path: Path) -> None:
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)

    def node(k: int) -> list[str]:
        out = tmp_path / f"report-node{k}.json"
        return ["-m", "torchdoctor", "run", "--no-env", "--output-format", "json", "--output-file", str(out), str(script)]

    launchers = torchrun(["--nproc-per-node=1"], node, nodes=2, cwd=tmp_path)
    for done in launchers:
        assert done.returncode == 0, done.stderr[-3000:]
    written = sorted(tmp_path.glob("report-node*.json"))
    assert len(written) == 1  # printed once, by global rank 0, whichever node the rendezvous gave it
    doc = json.loads(written[0].read_text())
    assert [(f["code"], f["rank"]) for f in doc["findings"]] == [("TD404", 0), ("TD404", 1)]
