"""Overhead of torchdoctor.watch(): step time with versus without, side by side, interleaved, with the spread.

Two workloads: a small CNN on synthetic 32x32 images (target: <= 1 % slower)
and a tiny MLP, whose steps are so short that the watch's fixed cost per step
shows (target: <= 5 us a step). Each repetition times the same batches plain
and watched, alternating which goes first, so that drift in the machine's
load hits both alike. Printed: the median over repetitions of watched/plain
and of the watch's cost per step in this thread's CPU time (less disturbed by
other processes than wall time), with the quartiles of the repetitions as the
spread, and the wall-time ratio beside it. Two untimed steps start each run,
plain and watched alike: a session's once-per-session work (reading the model,
finding the user's lines) is not a cost per step. For the tiny MLP the same
run is timed again in two windows (``WINDOWS``): the first figure holds a
session's beginning, whose steps the watch audits each (timeline.py), the
second the steps past it, where one in 30 or 31 is audited, the third those past
step 400 (one in 63 or 64), and the fourth the steady state past step 1000 (one in
125 or 126); each window is a whole
number of audit cycles long, so it holds its share of audited steps.

``--instructions`` adds a deterministic count beside the timed figures, which
on a loaded machine scatter by tens of microseconds: the same steps run under
valgrind's callgrind, which counts the instructions of the measured steps
only (collection is on only inside ``sys.call_tracing``, which runs them), plain and watched, each as the difference of a run of N steps and an
empty one. The extra instructions a step are turned into microseconds at the
plain step's own measured cost per instruction, timed natively in this run.
``--instructions`` also counts steps 3-22 of a session, each audited (a session's start).
``--bytecodes`` instead counts the Python bytecodes a tiny-MLP step runs, plain and watched, per function: exact
and quick, for finding where the watch's fixed cost goes (the C work it causes is not in it).
Usage: python benchmarks/bench_watch.py [--reps 21] [--steps 20] [--instructions] [--bytecodes]
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import torch
from torch import nn

import torchdoctor
from torchdoctor.runtime.timeline import AUDIT_GAPS

Batches = list[tuple[torch.Tensor, torch.Tensor]]


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 10))


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


# name: (model, input shape, classes)
WORKLOADS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...], int]] = {
    "cnn": (cnn, (32, 3, 32, 32), 10), "mlp": (mlp, (32, 16), 4)}


def train(model: nn.Module, opt: torch.optim.Optimizer, criterion: nn.Module, part: Batches) -> None:
    for x, y in part:
        opt.zero_grad(set_to_none=True)
        loss = criterion(model(x), y)
        loss.backward()
        opt.step()


def cycled(batches: Batches, n: int) -> Batches:
    return [batches[i % len(batches)] for i in range(n)]


def steps(model: nn.Module, batches: Batches, opt: torch.optim.Optimizer, warm: int = 2,
          later: bool = False) -> tuple[float, ...]:
    """(wall, thread CPU) seconds per step, after ``warm`` untimed steps (in a watch: its once-per-session work,
    such as reading the model and finding the user's lines, is not a cost per step). With ``later``, also the thread
    CPU a step in two windows of the same run (``WINDOWS``): past a session's beginning, whose steps the watch audits
    each, a whole number of the audit cycles of the steps after it, so that each window holds its share of audited
    steps whatever its phase."""
    criterion = nn.CrossEntropyLoss()
    train(model, opt, criterion, batches[:warm])
    t0, c0 = time.perf_counter(), time.thread_time()
    train(model, opt, criterion, batches)
    first = ((time.perf_counter() - t0) / len(batches), (time.thread_time() - c0) / len(batches))
    if not later:
        return first
    done, out = warm + len(batches), []
    for start, length in WINDOWS:
        train(model, opt, criterion, cycled(batches, start - done))
        part = cycled(batches, length)
        c0 = time.thread_time()
        train(model, opt, criterion, part)
        out.append((time.thread_time() - c0) / length)
        done = start + length
    return *first, *out


def watched_steps(model: nn.Module, batches: Batches, opt: torch.optim.Optimizer, later: bool = False) -> tuple[float, ...]:
    with torchdoctor.watch(environment=False):
        return steps(model, batches, opt, later=later)


def workload(name: str, n: int) -> tuple[nn.Module, torch.optim.Optimizer, Batches]:
    make, shape, classes = WORKLOADS[name]
    torch.manual_seed(0)
    model = make()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    return model, opt, [(torch.randn(*shape), torch.randint(0, classes, (shape[0],))) for _ in range(n)]


def measure(name: str, reps: int, n: int, later: bool = False) -> dict[str, list[float]]:
    """Per repetition: watched/plain (wall, CPU) and the watch's CPU microseconds per step (with ``later``, also
    those of the steps past a session's beginning: ``steps``)."""
    model, opt, batches = workload(name, n)
    steps(model, batches, opt)  # warm-up, both ways
    watched_steps(model, batches, opt)
    out: dict[str, list[float]] = {"wall": [], "cpu": [], "extra_us": [], "plain_us": [], "later_us": [], "middle_us": [],
                                   "steady_us": []}
    for rep in range(reps):
        if rep % 2 == 0:
            plain, watched = steps(model, batches, opt, later=later), watched_steps(model, batches, opt, later)
        else:
            watched, plain = watched_steps(model, batches, opt, later), steps(model, batches, opt, later=later)
        out["wall"].append(watched[0] / plain[0])
        out["cpu"].append(watched[1] / plain[1])
        out["extra_us"].append((watched[1] - plain[1]) * 1e6)
        out["plain_us"].append(plain[1] * 1e6)
        if later:
            out["later_us"].append((watched[2] - plain[2]) * 1e6)
            out["middle_us"].append((watched[3] - plain[3]) * 1e6)
            out["steady_us"].append((watched[4] - plain[4]) * 1e6)
    return out


def spread(values: list[float]) -> tuple[float, float, float]:
    """(median, first quartile, third quartile)."""
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return median, q1, q3


def line(name: str, r: dict[str, list[float]], *, ratio_target: float | None = None, us_target: float | None = None) -> str:
    cpu, cpu_lo, cpu_hi = spread(r["cpu"])
    extra, extra_lo, extra_hi = spread(r["extra_us"])
    wall = statistics.median(r["wall"])
    parts = [f"{name}: watched/plain CPU time {cpu:.3f} ({(cpu - 1) * 100:+.1f} %, quartiles {(cpu_lo - 1) * 100:+.1f} .. "
             f"{(cpu_hi - 1) * 100:+.1f} %" + (f"; target <= +{ratio_target:g} %" if ratio_target is not None else "") + ")",
             f"watch {extra:+.1f} us a step (quartiles {extra_lo:+.1f} .. {extra_hi:+.1f} us"
             + (f"; target <= {us_target:g} us" if us_target is not None else "") + ")",
             f"wall {wall:.3f}", f"plain step {statistics.median(r['plain_us']):.0f} us CPU",
             f"{len(r['cpu'])} interleaved pairs"]
    if r["later_us"]:
        for (start, length), key, what in zip(WINDOWS, ("later_us", "middle_us", "steady_us"), WINDOW_NAMES):
            us, lo, hi = spread(r[key])
            parts.insert(len(parts) - 3, f"steps {start + 1}-{start + length} ({what}) watch {us:+.1f} us a step "
                                         f"(quartiles {lo:+.1f} .. {hi:+.1f} us" + (f"; target <= {us_target:g} us"
                                                                                    if us_target is not None else "") + ")")
    return "; ".join(parts)


# -- instruction counts under callgrind ---------------------------------------------------------------------
COUNT_WARM = 80  # steps before a counted run: past a session's start-up work and its checks' every-step beginning
COUNT_CYCLE = 2 * sum(AUDIT_GAPS[0])  # a counted run's steps are a multiple of the audit cycle (timeline.AUDIT_GAPS)
# the timed windows of the tiny MLP (start, steps), each two cycles of the audit gaps there (timeline.AUDIT_GAPS): past
# the first steps (one step in 30 or 31 audited), past step 308 (one in 63 or 64) and past step 816 (one in 125 or 126)
WINDOWS = ((COUNT_WARM, 2 * sum(AUDIT_GAPS[0])), (400, 2 * sum(AUDIT_GAPS[1])), (1000, 2 * sum(AUDIT_GAPS[2])))
WINDOW_NAMES = ("past the first steps, one in 30 or 31 audited", "one in 63 or 64 audited",
                "the steady state, one in 125 or 126 audited")
COUNTED = "sys_call_tracing"  # CPython's C function behind sys.call_tracing, which nothing else calls


def counted(run: Callable[[], None]) -> None:
    """Run ``run()`` through ``sys.call_tracing`` (with no tracer set, a plain call): callgrind started with
    --toggle-collect=sys_call_tracing --dump-before/--dump-after=sys_call_tracing counts exactly its
    instructions, in a file of their own. A full collection first: each counted run starts from the same garbage collector state."""
    gc.collect()
    sys.call_tracing(run, ())


def instrument(on: bool) -> None:
    """Switch callgrind's instrumentation on or off (off at start: importing torch instrumented takes minutes;
    the steps before a counted run need none either)."""
    control = subprocess.Popen(["callgrind_control", "-i", "on" if on else "off", str(os.getpid())],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while control.poll() is None:  # keep running Python code: valgrind's gdbserver answers between blocks
        if time.monotonic() > deadline:
            control.kill()
            control.wait()
            raise SystemExit("callgrind_control did not answer in 120 s")
        sum(range(1000))


def count_child(name: str, n: int, rounds: int, warm_steps: int = COUNT_WARM) -> None:
    """Runs under callgrind: per round, plain then watched, ``warm_steps`` steps, then an empty counted run and one
    of ``n`` steps."""
    from torchdoctor.runtime import session, timeline

    # valgrind runs ~50x slower: the 50 ms host-memory timer would read RSS at every step, not every ~80th
    for module in (session, timeline):
        if hasattr(module, "RSS_EVERY_S"):
            module.RSS_EVERY_S = float("inf")
    model, opt, batches = workload(name, n + warm_steps)
    warm, timed = batches[:warm_steps], batches[warm_steps:]
    criterion = nn.CrossEntropyLoss()

    def count() -> None:
        instrument(True)
        counted(lambda: train(model, opt, criterion, []))
        counted(lambda: train(model, opt, criterion, timed))
        instrument(False)

    for _ in range(rounds):
        train(model, opt, criterion, warm)
        count()
        with torchdoctor.watch(environment=False):
            train(model, opt, criterion, warm)
            count()


def count_bytecodes(name: str, n: int) -> tuple[float, float, list[tuple[float, str]]]:
    """Python bytecodes a step of the tiny MLP runs, plain and watched (``sys.settrace`` with opcode events, so
    deterministic and cheap, unlike callgrind, but blind to C: the cost of torch's kernels and of each C call is
    not in it), and the watch's extra per function (the replaced ``Module._wrapped_call_impl`` counts negative).
    Counted past a session's first ``COUNT_WARM`` steps, over ``n`` steps (a multiple of the sampled checks'
    cycles)."""
    from collections import Counter

    model, opt, batches = workload(name, n + COUNT_WARM)
    warm, timed = batches[:COUNT_WARM], batches[COUNT_WARM:]
    criterion = nn.CrossEntropyLoss()

    def count() -> Counter[str]:
        ops: Counter[str] = Counter()

        def trace(frame, event, arg):  # type: ignore[no-untyped-def]
            frame.f_trace_opcodes = True
            if event == "opcode":
                code = frame.f_code
                ops[f"{os.path.basename(code.co_filename)}:{code.co_name}"] += 1
            return trace

        gc.collect()
        sys.settrace(trace)
        try:
            train(model, opt, criterion, timed)
        finally:
            sys.settrace(None)
        return ops

    train(model, opt, criterion, warm)
    plain = count()
    with torchdoctor.watch(environment=False):
        train(model, opt, criterion, warm)
        watched = count()
    extra = Counter(watched)
    extra.subtract(plain)
    parts = sorted(((v / n, k) for k, v in extra.items() if abs(v) >= n / 2), reverse=True)
    return sum(plain.values()) / n, sum(watched.values()) / n, parts


def count_instructions(name: str, n: int, rounds: int, timeout: float, warm: int = COUNT_WARM) -> list[tuple[float, float]]:
    """Per round: (plain, watched) instructions a step over ``n`` steps after ``warm``, counted by callgrind in a
    child process."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("--instructions needs valgrind (callgrind_control on PATH): apt-get install valgrind")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no", f"--toggle-collect={COUNTED}",
               f"--dump-before={COUNTED}", f"--dump-after={COUNTED}", f"--callgrind-out-file={out}",
               sys.executable, os.path.abspath(__file__), "--count-child", name, str(n), str(rounds), str(warm)]
        done = subprocess.run(cmd, env={**os.environ, "PYTHONHASHSEED": "0"}, timeout=timeout,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            raise SystemExit(f"callgrind run of {name} failed (exit {done.returncode}):\n{done.stdout[-3000:]}")
        dumps = sorted((int(f.rsplit(".", 1)[1]), f) for f in os.listdir(tmp) if re.fullmatch(r"callgrind\.out\.\d+", f))
        # each counted run's own file, written as it returns: dumping as it starts too restarts the count there
        # (switching instrumentation off and on between runs would leave the next file's total off)
        totals = [t for t in (_total(os.path.join(tmp, f)) for _, f in dumps) if t is not None]
    if len(totals) != 4 * rounds:
        raise SystemExit(f"expected {4 * rounds} callgrind dumps for {name}, found {len(totals)} (another sys.call_tracing call?)")
    return [((totals[i + 1] - totals[i]) / n, (totals[i + 3] - totals[i + 2]) / n) for i in range(0, len(totals), 4)]


def _total(path: str) -> int | None:
    """The instructions of a file written at the end of a counted run; None for one written at its start."""
    after = False
    with open(path) as f:
        for text in f:
            if text.startswith("desc: Trigger:"):
                after = "--dump-after" in text
            elif text.startswith(("summary:", "totals:")):
                return int(text.split()[1]) if after else None
    raise SystemExit(f"no instruction total in {path}")


def count_line(name: str, rounds: list[tuple[float, float]], plain_us: float, *, ratio_target: float | None = None,
               us_target: float | None = None) -> str:
    plain = statistics.median(p for p, _ in rounds)
    extra = statistics.median(w - p for p, w in rounds)
    ns = plain_us * 1e3 / plain  # the plain step's own cost per instruction, timed natively above
    each = ", ".join(f"{w - p:+,.0f}" for p, w in rounds)
    return (f"{name}: instructions a step (callgrind) plain {plain:,.0f}, watch {extra:+,.0f} ({extra / plain * 100:+.2f} %"
            + (f"; target <= +{ratio_target:g} %" if ratio_target is not None else "") + f"; rounds {each}) = "
            f"{extra * ns / 1e3:+.2f} us a step at the plain step's {ns:.3f} ns an instruction ({plain_us:.0f} us CPU "
            "timed above / its instruction count)" + (f"; target <= {us_target:g} us" if us_target is not None else "")
            + "; host-memory reads (one every 50 ms) not counted")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=21)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--instructions", action="store_true",
                        help="also count instructions a step under callgrind (deterministic; needs valgrind)")
    parser.add_argument("--count-cnn", action="store_true",
                        help="with --instructions, count the small CNN too (slow: tens of minutes under callgrind)")
    parser.add_argument("--count-steps", type=int, default=COUNT_CYCLE,
                        help=f"steps of a counted run of the tiny MLP, a multiple of {COUNT_CYCLE} (%(default)s)")
    parser.add_argument("--bytecodes", action="store_true",
                        help="only count the Python bytecodes a tiny-MLP step runs, plain and watched, per function "
                             "(deterministic, seconds; blind to C work), and print where the watch's go")
    parser.add_argument("--count-child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.count_child:
        count_child(args.count_child[0], int(args.count_child[1]), int(args.count_child[2]), int(args.count_child[3]))
        return
    if args.bytecodes:
        plain, watched, parts = count_bytecodes("mlp", args.count_steps)
        print(f"tiny MLP: Python bytecodes a step (past the first {COUNT_WARM}, {args.count_steps} steps): plain "
              f"{plain:,.0f}, watched {watched:,.0f} ({watched - plain:+,.0f}); the watch's, by function:")
        for per_step, where in parts:
            print(f"  {per_step:+8.1f}  {where}")
        return
    if args.reps < 4:
        parser.error("--reps must be at least 4 (quartiles)")
    if args.count_steps < COUNT_CYCLE or args.count_steps % COUNT_CYCLE:
        parser.error(f"--count-steps must be a positive multiple of {COUNT_CYCLE} (the sampled checks' cycles)")
    cnn_r, mlp_r = measure("cnn", args.reps, args.steps), measure("mlp", args.reps, args.steps * 10, later=True)
    print(line("small CNN, 32x32 images", cnn_r, ratio_target=1))
    print(line("tiny MLP               ", mlp_r, us_target=5))
    if args.instructions and args.count_cnn:  # 8 steps, one round: a CNN step is ~50x a tiny MLP's
        print(count_line("small CNN, 32x32 images", count_instructions("cnn", 8, 1, 3600),
                         statistics.median(cnn_r["plain_us"]), ratio_target=1))
    if args.instructions:  # a session's start: each of its first steps is audited (timeline.TIMED_FIRST)
        print(count_line("tiny MLP, steps 3-22 (each audited)", count_instructions("mlp", 20, 2, 1800, warm=2),
                         statistics.median(mlp_r["plain_us"]), us_target=5))
        print(count_line(f"tiny MLP, steps {COUNT_WARM + 1}-{COUNT_WARM + args.count_steps}",
                         count_instructions("mlp", args.count_steps, 2, 1800), statistics.median(mlp_r["plain_us"]),
                         us_target=5))
        start, length = WINDOWS[-1]  # the steady state: the same window the timed figure has
        print(count_line(f"tiny MLP, steps {start + 1}-{start + length}",
                         count_instructions("mlp", length, 2, 1800, warm=start), statistics.median(mlp_r["plain_us"]),
                         us_target=5))


if __name__ == "__main__":
    main()
