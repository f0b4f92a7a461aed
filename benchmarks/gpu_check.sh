#!/usr/bin/env bash
# One run on a lent GPU, under 8 minutes: the GPU tests (pytest -m gpu) and every benchmark on CUDA,
# summed up in one JSON of ratios.
#
#   benchmarks/gpu_check.sh [OUTPUT.json]            on a CUDA machine
#   benchmarks/gpu_check.sh --dry-run [OUTPUT.json]  on the CPU, tiny sizes: proves the script itself
#
# OUTPUT.json defaults to $OUT/gpu_check.json when $OUT is set, else ./gpu_check.json; each step's log
# lands beside it in gpu_check_logs/. Every step has its own time limit (about 7 minutes in all); a step
# that fails or runs out of time is recorded as such and the others still run. Exit status: 0 when every
# step passed, 1 when one failed, 2 when the machine cannot run the check (no CUDA, no torch).
set -euo pipefail

DRY=0
if [[ "${1:-}" == "--dry-run" ]]; then DRY=1; shift; fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ $# -ge 1 ]]; then RESULT="$1"; elif [[ -n "${OUT:-}" ]]; then RESULT="$OUT/gpu_check.json"; else RESULT="$PWD/gpu_check.json"; fi
mkdir -p "$(dirname "$RESULT")"
RESULT="$(cd "$(dirname "$RESULT")" && pwd)/$(basename "$RESULT")"
LOGS="$(dirname "$RESULT")/gpu_check_logs"
mkdir -p "$LOGS"
PY="${PYTHON:-python}"
export PYTHONPATH="$ROOT/src:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
cd "$ROOT"

# Limits are sized for the GPU machine (7.7 minutes at most in all); a dry run on a small, busy CPU
# machine gets twice as long per step, with tiny sizes.
if [[ $DRY == 1 ]]; then
  DEVICE=cpu; REPS=1; STEPS=4; SIZE=16; BENCH_REPS=1; SCALE=2
else
  DEVICE=cuda; REPS=5; STEPS=40; SIZE=64; BENCH_REPS=5; SCALE=1
fi

say() { printf '[gpu_check %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
STATUS="$LOGS/status.tsv"
: > "$STATUS"
FAILED=0

# step NAME SECONDS COMMAND...: run with a time limit, log to $LOGS/NAME.log, record "NAME rc seconds".
step() {
  local name="$1" limit=$(( $2 * SCALE )); shift 2
  local began rc
  began=$(date +%s)
  say "$name: $* (limit ${limit}s)"
  if timeout --kill-after=15 "$limit" "$@" > "$LOGS/$name.log" 2>&1; then rc=0; else rc=$?; fi
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - began ))" >> "$STATUS"
  case $rc in
    0) say "$name: ok" ;;
    124|137) say "$name: TIMED OUT after ${limit}s (see $LOGS/$name.log)"; FAILED=1 ;;
    *) say "$name: FAILED with exit code $rc (see $LOGS/$name.log)"; tail -n 5 "$LOGS/$name.log" | sed 's/^/    /'; FAILED=1 ;;
  esac
}

say "writing $RESULT (logs in $LOGS)"
if ! timeout 120 "$PY" -c "import torch" 2> "$LOGS/torch.log"; then
  say "cannot import torch with $PY (see $LOGS/torch.log)"; exit 2
fi
HAS_CUDA=$(timeout 120 "$PY" -c "import torch; print(int(torch.cuda.is_available()))")
if [[ $DRY == 0 && $HAS_CUDA != 1 ]]; then
  say "torch sees no CUDA device here: run on a GPU machine, or use --dry-run to test this script on the CPU"
  exit 2
fi

# 1. The GPU tests; rc 5 (none collected) would mean the marker lost its tests.
step gpu_tests 150 "$PY" -m pytest -q -m gpu -p no:cacheprovider --junitxml="$LOGS/gpu_tests.xml" tests
# 2. fit() against the hand loop and its peers, fp32 and bf16 (peers only where installed).
step bench_fit_fp32 90 "$PY" benchmarks/bench_fit.py --device "$DEVICE" --reps "$BENCH_REPS" --no-memory \
  --json "$LOGS/bench_fit_fp32.json"
step bench_fit_bf16 60 "$PY" benchmarks/bench_fit.py --device "$DEVICE" --precision bf16 --reps "$BENCH_REPS" \
  --no-memory --models mlp --json "$LOGS/bench_fit_bf16.json"
# 3. Prefetching, pinned copies, AMP with the scaler, the watch's cost with syncs detected.
step bench_device 75 "$PY" benchmarks/bench_device.py --device "$DEVICE" --reps "$REPS" --steps "$STEPS" --size "$SIZE" \
  --json "$LOGS/bench_device.json"
# 4. The other benchmarks as they are (they print their own ratios).
step bench_watch 40 "$PY" benchmarks/bench_watch.py --reps "$(( REPS < 4 ? 4 : REPS ))" --steps 10  # (quartiles need 4)
step bench_env 45 "$PY" benchmarks/bench_env.py --runs 2

say "summing up"
timeout 60 "$PY" - "$RESULT" "$LOGS" "$DRY" <<'PYEOF'
"""Collect the steps' JSON and logs into one file; the headline ratios first."""
import json, os, subprocess, sys, xml.etree.ElementTree as ET
result, logs, dry = sys.argv[1], sys.argv[2], sys.argv[3] == "1"

def load(name):
    try:
        with open(os.path.join(logs, name)) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None

def tail(name, n=12):
    try:
        with open(os.path.join(logs, name)) as fh:
            return fh.read().splitlines()[-n:]
    except OSError:
        return []

steps = {}
with open(os.path.join(logs, "status.tsv")) as fh:
    for line in fh:
        name, rc, seconds = line.rstrip("\n").split("\t")
        steps[name] = {"rc": int(rc), "seconds": int(seconds), "timed_out": rc in ("124", "137")}
tests = {}
try:
    suite = ET.parse(os.path.join(logs, "gpu_tests.xml")).getroot()
    suite = suite.find("testsuite") if suite.tag == "testsuites" else suite
    tests = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
except (OSError, ET.ParseError, AttributeError):
    pass
ratios = {}
for precision in ("fp32", "bf16"):
    doc = load(f"bench_fit_{precision}.json") or {}
    for workload, parts in doc.get("workloads", {}).items():
        for loop, s in parts["throughput"]["wall"].items():
            if loop != "hand":
                ratios[f"fit.{precision}.{workload}.{loop}_over_hand"] = round(s["ratio_median"], 3)
device = load("bench_device.json") or {}
for part in ("prefetch", "pinned", "amp_bf16", "amp_fp16", "watch"):
    if isinstance(device.get(part), dict) and "ratio_median" in device[part]:
        ratios[f"device.{part}"] = round(device[part]["ratio_median"], 3)
try:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10).stdout.strip()
except (OSError, subprocess.SubprocessError):
    commit = ""
summary = {"dry_run": dry, "commit": commit, "ratios": ratios, "gpu_tests": tests, "steps": steps,
           "bench_fit": {"fp32": load("bench_fit_fp32.json"), "bf16": load("bench_fit_bf16.json")},
           "bench_device": device, "bench_watch": tail("bench_watch.log"), "bench_env": tail("bench_env.log")}
tmp = result + ".tmp"
with open(tmp, "w") as fh:
    json.dump(summary, fh, indent=2)
os.replace(tmp, result)
print(json.dumps({"ratios": ratios, "gpu_tests": tests}, indent=2))
PYEOF

if [[ $FAILED == 0 ]]; then say "all steps passed: $RESULT"; else say "some steps failed (see above): $RESULT"; fi
exit $FAILED
