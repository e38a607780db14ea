#!/usr/bin/env bash
# Device call 1 (one nvidia-h200, ~3-4 min):
#     run(command="bash bench/device/call1.sh", carry=[".whl", ".gl"], kind="nvidia-h200", timeout_s=300)
# 1. setup.sh (EGL loaders, wheels, wamcore + plugins offline)
# 2. machine.txt: nproc, free -g, GPU, CPU model
# 3. libero.json (b): one LIBERO env, libero_spatial, 2 cameras 256 px: create, reset, median step
# 4. gpu.json (c): bench-dit at its default size (~1.05B params, bf16, 8 steps): ms per chunk at batch 1, 4, 16
# 5. eval.json + eval_episodes.jsonl (a): the scripted 10-task LIBERO eval through `wam eval`
# 6. parallel.json (extra, while time remains): N env processes stepping at once (N = $PROCS)
# 7. results.json: all of the above in one file; log.txt: everything printed
# Every part writes its file as soon as it has numbers, and a failing part does not stop the
# others. Locally (no GPU, no .gl): WAM_SETUP_SKIP_GL=1 OUT=/tmp/c1 bash bench/device/call1.sh
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
OUT="${OUT:-/tmp/call1-out}"
mkdir -p "$OUT"
START=$(date +%s)
BUDGET_S="${BUDGET_S:-285}"          # stay inside a 300 s timeout_s
PROCS="${PROCS:-4,8,16}"
EVAL_TASKS="${EVAL_TASKS:-0-9}"
export PYTHONUNBUFFERED=1

elapsed() { echo $(( $(date +%s) - START )); }
left() { echo $(( BUDGET_S - $(elapsed) )); }
part() { echo; echo "=== [$(elapsed) s] $*"; }

main() {
    part "setup"
    source bench/device/setup.sh || { echo "setup.sh FAILED"; return 1; }

    part "machine"
    {
        echo "nproc: $(nproc)"
        free -g
        grep -m1 "model name" /proc/cpuinfo
        nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1
        python3 -c 'import torch, numpy; print("torch", torch.__version__, "cuda", torch.version.cuda, "numpy", numpy.__version__)' 2>&1
        echo "EGL vendor: ${__EGL_VENDOR_LIBRARY_FILENAMES:-default search path}"
    } >"$OUT/machine.txt" 2>&1
    cat "$OUT/machine.txt"

    part "(b) libero env: create, reset, step"
    timeout 90 python3 bench/device/device_bench.py libero --out "$OUT" || echo "libero part FAILED rc=$?"

    part "(c) bench-dit on the GPU"
    timeout 120 python3 bench/device/device_bench.py gpu --out "$OUT" || echo "gpu part FAILED rc=$?"

    part "(a) scripted 10-task eval"
    local t=$(( $(left) - 20 )); [ "$t" -gt 150 ] && t=150
    if [ "$t" -gt 30 ]; then
        rm -rf /tmp/wh-check
        timeout "$t" wam eval --platform libero --suite libero_spatial \
            --task "$EVAL_TASKS" --episodes 1 --am-backend libero-smoke --max-chunks 4 --json --out /tmp/wh-check \
            >"$OUT/eval.json" || echo "eval FAILED rc=$?"
        cp /tmp/wh-check/episodes.jsonl "$OUT/eval_episodes.jsonl" 2>/dev/null
        cat "$OUT/eval.json"
    else
        echo "skipped: ${t} s left"
    fi

    part "(extra) parallel env processes: $PROCS"
    t=$(( $(left) - 8 ))
    if [ "$t" -gt 40 ]; then
        timeout "$t" python3 bench/device/device_bench.py parallel --out "$OUT" --procs "$PROCS" \
            --deadline-s $(( t - 35 )) || echo "parallel part stopped rc=$?"
    else
        echo "skipped: ${t} s left"
    fi
}

main 2>&1 | tee "$OUT/log.txt"
python3 bench/device/device_bench.py merge --out "$OUT" >/dev/null 2>&1
echo; echo "=== [$(elapsed) s] results.json"
python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1])), sort_keys=True))' "$OUT/results.json" 2>/dev/null
