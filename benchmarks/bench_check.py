"""How fast is ``torchdoctor check``? Ratios measured side by side in one run, interleaved, with the spread.

The corpus is real PyTorch code brought in with ``--corpus DIR`` (repeatable: every *.py under each
DIR, as ``check`` discovers them), else this repository's examples and checker corpus. Figures:

  (a) CPU of ``check --jobs 1`` over the CPU of a bare ``ast.parse`` of the same files, each in its own
      process, alternating, ``--rounds`` times: median ratio and [min, max]            (target <= 3)
  (b) peak memory (max RSS) of that check over the parse's                            (target <= 2)
  (c) wall of ``check`` (default jobs) over ``check --jobs 1`` on the first 300 files   (target <= 1)
  (d) one small file: ``check one.py`` over ``python -c pass``, in ms                   (target <= 60 ms)
  (e) TorchFix on the same files, when it is installed: its CPU over check's           (goal >= 80x)
  (f) with ``--stdlib``: the standard library with the torch gate off (every file analysed as PyTorch
      code): internal errors and findings must be 0.
  (g) how many parses ``check --jobs 1`` makes of the files (each once is the floor: a module the project index
      reads for another file's questions is kept for its own check when it comes soon enough).

With ``--compare-src DIR`` (another checkout's ``src``, e.g. the commit before a change), (a), (b) and (d)
also run that tree's checker in the same rounds, interleaved, and print its figures beside this one's.

Usage: python benchmarks/bench_check.py --corpus /path/to/repos [--rounds 5] [--stdlib] [--compare-src DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
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


PARSE_COUNT = r"""
import sys
import torchdoctor.check.engine as engine
import torchdoctor.check.runner as runner
from torchdoctor.check.runner import check_files
from torchdoctor.config import Settings
count = [0]
real = engine.parse
def counted(text, path):
    count[0] += 1
    return real(text, path)
engine.parse = runner.parse = counted
check_files(open(sys.argv[1]).read().splitlines(), Settings(), jobs=1)
print(count[0])
"""


def discover(roots: list[str]) -> list[str]:
    sys.path.insert(0, str(ROOT / "src"))
    from torchdoctor.check.discovery import discover as find
    from torchdoctor.config import Settings

    files: list[str] = []
    for r in roots:
        files += [f for f in find([r], Settings(root=r)).files if f.endswith(".py")]
    return files


def measure(cmd: list[str], src: str | None = None) -> tuple[float, float, int, subprocess.CompletedProcess]:
    """Wall seconds, and this child's own CPU seconds and peak RSS (KiB) from ``wait4``; ``src``: the
    checker's source tree to import (else whatever this process's PYTHONPATH gives)."""
    env = None if src is None else {**os.environ, "PYTHONPATH": src}
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out = bytearray()
    err = bytearray()
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, out)  # type: ignore[arg-type]
    sel.register(proc.stderr, selectors.EVENT_READ, err)  # type: ignore[arg-type]
    while sel.get_map():
        for key, _ in sel.select(timeout=3600):
            chunk = os.read(key.fd, 1 << 16)
            if chunk:
                key.data.extend(chunk)
            else:
                sel.unregister(key.fileobj)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    done = subprocess.CompletedProcess(cmd, code, out.decode(errors="replace"), err.decode(errors="replace"))
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss, done


def check_cmd(listfile: str, *extra: str) -> list[str]:
    files = Path(listfile).read_text().splitlines()
    return [sys.executable, "-m", "torchdoctor", "check", "--isolated", "--exit-zero", *extra, *files]


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):6.2f}  [min {min(values):6.2f}, max {max(values):6.2f}]"


def cpu_and_memory(listfile: str, rounds: int, trees: list[tuple[str, str | None]]) -> None:
    parse = [sys.executable, "-c", PARSE_ONLY, listfile]
    check = check_cmd(listfile, "--jobs", "1", "--output-format", "json", "-o", os.devnull)
    parse_cpu: list[float] = []
    cpu_ratio: dict[str, list[float]] = {name: [] for name, _ in trees}
    rss_ratio: dict[str, list[float]] = {name: [] for name, _ in trees}
    check_cpu: dict[str, list[float]] = {name: [] for name, _ in trees}
    for _ in range(rounds):  # alternate, so that load changes hit both sides alike
        _, pc, pr, _ = measure(parse)
        parse_cpu.append(pc)
        for name, src in trees:
            _, cc, cr, done = measure(check, src)
            if done.returncode != 0:  # --exit-zero: any other code is a failure (a missing package exits 1)
                sys.exit(f"check ({name}) failed ({done.returncode}):\n{done.stderr[-2000:]}")
            cpu_ratio[name].append(cc / pc)
            rss_ratio[name].append(cr / pr)
            check_cpu[name].append(cc)
    for name, _ in trees:
        tag = _tag(name, trees)
        print(f"    ast.parse cpu s {spread(parse_cpu)};  check -j1{tag} cpu s {spread(check_cpu[name])}")
        print(f"(a) cpu ratio check -j1{tag} / parse:      {spread(cpu_ratio[name])}   (target <= 3)")
        print(f"(b) peak RSS ratio check -j1{tag} / parse: {spread(rss_ratio[name])}   (target <= 2)")


def _tag(name: str, trees: list[tuple[str, str | None]]) -> str:
    return "" if len(trees) == 1 else f" [{name}]"


def parallel(files: list[str], tmp: str, rounds: int) -> None:
    listfile = os.path.join(tmp, "first300.txt")
    Path(listfile).write_text("\n".join(files[:300]))
    ratios = []
    for _ in range(rounds):
        w1, _, _, _ = measure(check_cmd(listfile, "--jobs", "1", "-o", os.devnull))
        wd, _, _, _ = measure(check_cmd(listfile, "-o", os.devnull))
        ratios.append(wd / w1)
    print(f"(c) wall ratio check (default jobs, {os.cpu_count()} CPUs) / -j1 on {min(300, len(files))} files: "
          f"{spread(ratios)}   (target <= 1)")


def startup(tmp: str, rounds: int, trees: list[tuple[str, str | None]]) -> None:
    small = os.path.join(tmp, "one.py")
    Path(small).write_text("import torch\nmodel = torch.nn.Linear(2, 2)\nx = model(torch.ones(1, 2))\n")
    check = [sys.executable, "-m", "torchdoctor", "check", "--isolated", "--exit-zero", small]
    for name, src in trees:
        *_, done = measure(check, src)  # once untimed: the package's bytecode is cached, as after any pip install
        if done.returncode != 0:  # --exit-zero: a failure only (a missing package exits 1)
            sys.exit(f"check ({name}) of one small file failed ({done.returncode}):\n{done.stderr[-2000:]}")
    over: dict[str, list[float]] = {name: [] for name, _ in trees}
    ratio: dict[str, list[float]] = {name: [] for name, _ in trees}
    for _ in range(rounds * 3):
        for name, src in trees:
            base, _, _, _ = measure([sys.executable, "-c", "pass"], src)
            one, _, _, _ = measure(check, src)
            over[name].append((one - base) * 1000)
            ratio[name].append(one / base)
    for name, _ in trees:
        print(f"(d) check{_tag(name, trees)} one small file over `python -c pass`, ms: {spread(over[name])}   "
              f"(target <= 60); as a ratio of `python -c pass`: {spread(ratio[name])}")


def torchfix(files: list[str], listfile: str) -> None:
    exe = shutil.which("torchfix")
    if not exe:
        print("(e) torchfix is not installed (pip install torchfix): skipped")
        return
    _, tc, _, _ = measure([exe, *files])
    _, cc, _, done = measure(check_cmd(listfile, "--jobs", "1", "-o", os.devnull))
    if done.returncode != 0:
        sys.exit(f"check for (e) failed ({done.returncode}):\n{done.stderr[-2000:]}")
    print(f"(e) torchfix cpu {tc:.2f} s / check -j1 cpu {cc:.2f} s = {tc / cc:.1f}x   (goal >= 80x)")


def stdlib(tmp: str) -> None:
    files = discover([sysconfig.get_paths()["stdlib"]])
    listfile = os.path.join(tmp, "stdlib.txt")
    Path(listfile).write_text("\n".join(files))
    report = os.path.join(tmp, "stdlib.json")
    _, cpu, _, done = measure(check_cmd(listfile, "--jobs", "1", "--no-torch-gate", "--output-format", "json",
                                        "-o", report))
    found = json.loads(Path(report).read_text()) if os.path.exists(report) else []
    print(f"(f) stdlib, gate off: {len(files)} files, cpu {cpu:.1f} s, internal errors "
          f"{done.stderr.count('internal error')}, findings {len(found)}")


def parses(listfile: str, trees: list[tuple[str, str | None]]) -> None:
    n = len(Path(listfile).read_text().splitlines())
    for name, src in trees:
        _, _, _, done = measure([sys.executable, "-c", PARSE_COUNT, listfile], src)
        counted = done.stdout.strip().splitlines()[-1] if done.returncode == 0 and done.stdout.strip() else "?"
        print(f"(g) parses by check -j1{_tag(name, trees)}: {counted} of {n} files (each once is the floor)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", action="append", default=[], metavar="DIR", help="real PyTorch code (repeatable)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds per figure (default 5)")
    ap.add_argument("--stdlib", action="store_true", help="also run (f) on the standard library")
    ap.add_argument("--compare-src", action="append", default=[], metavar="DIR",
                    help="another source tree's checker, measured in the same rounds for (a), (b), (d) (repeatable)")
    args = ap.parse_args()
    # Bytecode as users have it (pip writes .pyc files); a container's PYTHONDONTWRITEBYTECODE=1 would make
    # every run compile the package afresh and charge that to the checker.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    roots = args.corpus or [str(ROOT / "examples"), str(ROOT / "tests" / "check" / "corpus")]
    files = discover(roots)
    lines = sum(Path(f).read_bytes().count(b"\n") for f in files)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    print(f"commit {commit.strip() or '?'}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}; corpus {', '.join(roots)}: {len(files)} files, {lines} lines")
    for d in args.compare_src:  # a folder without the package would silently measure this tree twice
        if not os.path.isfile(os.path.join(d, "torchdoctor", "__init__.py")):
            ap.error(f"--compare-src {d}: no torchdoctor/__init__.py there (give the checkout's src folder)")
    with tempfile.TemporaryDirectory() as tmp:
        listfile = os.path.join(tmp, "files.txt")
        Path(listfile).write_text("\n".join(files))
        trees = [("this", None)] + [(d, os.path.abspath(d)) for d in args.compare_src]
        cpu_and_memory(listfile, args.rounds, trees)
        parses(listfile, trees)
        parallel(files, tmp, args.rounds)
        startup(tmp, args.rounds, trees)
        torchfix(files, listfile)
        if args.stdlib:
            stdlib(tmp)


if __name__ == "__main__":
    main()
