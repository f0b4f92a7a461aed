"""How fast is ``torchdoctor check``? Ratios measured side by side in one run, never absolute targets.

Corpus: the running interpreter's standard library (every *.py, site-packages
excluded) plus examples/ and tests/check/corpus/. Figures:

  (a) CPU time of `torchdoctor check --jobs 1` / CPU time of ast.parse alone   (target <= 1.5)
  (b) the same with the torch gate off: every file analysed as PyTorch code     (the honest analysis cost)
  (c) wall time of `torchdoctor check` (default jobs) / wall time of ast.parse  (target < 1)
  (d) import time of torchdoctor.check; start-up of `check --version` and of `check one_file.py`
      over `python -c pass`                                                     (target < 150 ms)
  (e) torchfix on the same corpus, when it is installed

Usage: python benchmarks/bench_check.py [--stride N] [--skip-ungated]
(--stride 4 checks every 4th file, for a quick run; the gate-off pass takes minutes on the full library.)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARSE_ONLY = r"""
import ast, sys, warnings
warnings.simplefilter("ignore")
for path in open(sys.argv[1]).read().splitlines():
    try:
        ast.parse(open(path, "rb").read(), path)
    except (SyntaxError, ValueError):
        pass
"""


def corpus(stride: int) -> list[str]:
    sys.path.insert(0, str(ROOT / "src"))
    from torchdoctor.check.discovery import discover
    from torchdoctor.config import Settings

    stdlib = sysconfig.get_paths()["stdlib"]
    roots = [stdlib] + [str(p) for p in (ROOT / "examples", ROOT / "tests" / "check" / "corpus") if p.is_dir()]
    files: list[str] = []
    for r in roots:
        files += discover([r], Settings(root=r)).files
    return files[::stride]


def timed(cmd: list[str], **kw) -> tuple[float, float, subprocess.CompletedProcess]:
    """Wall and CPU seconds (the child and all its workers) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc


def check_cmd(listfile: str, *extra: str) -> list[str]:
    files = Path(listfile).read_text().splitlines()
    return [sys.executable, "-m", "torchdoctor", "check", "--isolated", "--exit-zero", *extra, *files]


def best_of(cmd: list[str], n: int = 7) -> float:
    return min(timed(cmd)[0] for _ in range(n))


def import_time() -> float:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", "import torchdoctor.check"],
                          capture_output=True, text=True)
    lines = [ln for ln in proc.stderr.splitlines() if ln.rstrip().endswith("torchdoctor.check")]
    return int(lines[-1].split("|")[1]) / 1000 if lines else float("nan")


def startup(tmp: str) -> tuple[float, float, float]:
    small = os.path.join(tmp, "small.py")
    Path(small).write_text("import torch\nmodel = torch.nn.Linear(2, 2)\n")
    base = best_of([sys.executable, "-c", "pass"])
    version = best_of([sys.executable, "-m", "torchdoctor", "check", "--version"])
    one = best_of([sys.executable, "-m", "torchdoctor", "check", "--isolated", small])
    return base, version - base, one - base


def stdlib_findings(report: str, how: str = "gate on") -> None:
    data = json.loads(Path(report).read_text())
    stdlib = sysconfig.get_paths()["stdlib"]
    mine = [f for f in data if f["path"].startswith(stdlib)]
    print(f"\nfindings in the standard library ({how}): {len(mine)}")
    for f in mine[:60]:
        print(f"  {f['path'][len(stdlib) + 1:]}:{f['line']}:{f['column']}: {f['code']} {f['message']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stride", type=int, default=1, help="check every Nth file of the corpus")
    ap.add_argument("--skip-ungated", action="store_true", help="skip (b), the slow gate-off pass")
    args = ap.parse_args()
    files = corpus(args.stride)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    print(f"commit {commit.strip() or '?'}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
          f"{len(files)} files ({sum(os.path.getsize(f) for f in files) / 1e6:.1f} MB)")
    with tempfile.TemporaryDirectory() as tmp:
        listfile = os.path.join(tmp, "files.txt")
        Path(listfile).write_text("\n".join(files))
        report = os.path.join(tmp, "report.json")
        p_wall, p_cpu, _ = timed([sys.executable, "-c", PARSE_ONLY, listfile])
        print(f"ast.parse alone (1 process):            wall {p_wall:7.2f} s   cpu {p_cpu:7.2f} s")
        w, c, proc = timed(check_cmd(listfile, "--jobs", "1", "--output-format", "json", "-o", report))
        print(f"(a) check --jobs 1:                      wall {w:7.2f} s   cpu {c:7.2f} s   "
              f"cpu ratio {c / p_cpu:5.2f}  (target <= 1.5; exit {proc.returncode})")
        stdlib_findings(report)
        if not args.skip_ungated:
            w, c, proc = timed(check_cmd(listfile, "--jobs", "1", "--no-torch-gate", "--output-format", "json",
                                         "-o", report))
            internal = proc.stderr.count("internal error")
            print(f"(b) check --jobs 1, gate off:            wall {w:7.2f} s   cpu {c:7.2f} s   "
                  f"cpu ratio {c / p_cpu:5.2f}  (internal errors: {internal})")
            stdlib_findings(report, "gate off: every file analysed as PyTorch code")
        w, c, _ = timed(check_cmd(listfile, "-o", os.devnull))
        print(f"(c) check, default jobs:                 wall {w:7.2f} s   cpu {c:7.2f} s   "
              f"wall ratio {w / p_wall:5.2f}  (target < 1)")
        imp = import_time()
        base, version, one = startup(tmp)
        print(f"(d) import torchdoctor.check: {imp:.1f} ms; over `python -c pass` ({base * 1000:.0f} ms): "
              f"check --version +{version * 1000:.0f} ms, check one file +{one * 1000:.0f} ms  (target < 150 ms)")
        torchfix = shutil.which("torchfix")
        if torchfix:
            # torchfix skips files without "torch" unparsed (so it reports no syntax errors there).
            w, c, _ = timed([torchfix, *files])
            print(f"(e) torchfix:                            wall {w:7.2f} s   cpu {c:7.2f} s   "
                  f"cpu ratio {c / p_cpu:5.2f}")
            torch_files = [f for f in files if not f.startswith(sysconfig.get_paths()["stdlib"])]
            Path(listfile).write_text("\n".join(torch_files))
            w1, c1, _ = timed(check_cmd(listfile, "--jobs", "1", "-o", os.devnull))
            w2, c2, _ = timed([torchfix, *torch_files])
            print(f"    on the {len(torch_files)} PyTorch files only: torchdoctor cpu {c1:.2f} s, "
                  f"torchfix cpu {c2:.2f} s (ratio {c2 / c1:.1f}x)")
        else:
            print("(e) torchfix not installed (pip install torchfix) - skipped")


if __name__ == "__main__":
    main()
