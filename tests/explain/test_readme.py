"""The README's `torchdoctor explain` examples are what the command prints."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from tests.env.snapshots import gpu, h100
from torchdoctor.cli import main

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent


def _example(command: str) -> str:
    """The lines the README shows after ``$ <command>``, up to the next blank line or the end of the block."""
    readme = (ROOT / "README.md").read_text()
    m = re.search(rf"^\$ {re.escape(command)}\n(.*?)\n(?:\n|```)", readme, flags=re.M | re.S)
    assert m, f"README has no example for {command!r}"
    return m.group(1) + "\n"


def _run(argv, capsys, cwd) -> str:
    saved = os.getcwd()
    os.chdir(cwd)
    try:
        main(argv)
    finally:
        os.chdir(saved)
    return capsys.readouterr().out


def test_readme_facts_example(tmp_path, capsys):
    colleague = h100(torch_version="2.6.0+cu124", torch_cuda="12.4", arch_list=["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
                     gpus=[gpu(0, "NVIDIA GeForce RTX 5090", (12, 0), 32607)], driver_version="570.133.07", proc_driver_version="570.133.07",
                     nvml_lib_version="12.570.133.07", drv_cuda=12080, in_container=True, shm_bytes=64 * 2**20)
    (tmp_path / "colleague.json").write_text(json.dumps(colleague))
    command = ('torchdoctor explain --facts colleague.json "RuntimeError: CUDA error: no kernel image is available for execution on the device"')
    out = _run(["explain", "--facts", "colleague.json", "RuntimeError: CUDA error: no kernel image is available for execution on the device"], capsys, tmp_path)
    assert out == _example(command)


def test_readme_log_example(capsys):
    out = _run(["explain", "--no-probe", "--file", "train.log"], capsys, HERE)
    assert out == _example("torchdoctor explain --no-probe --file train.log")
