#!/usr/bin/env bash
# The parallel-evaluation benchmark on one H200 host (16 cores), one device call:
#     run(command="bash bench/device/call_eval.sh", carry=[".whl", ".gl"], kind="nvidia-h200", timeout_s=600)
# Stages (each writes its JSON to $OUT as soon as it ends; a failing stage does not stop the others):
#   1. scripted.json      LIBERO with the scripted model (no model work; MuJoCo still renders on the GPU):
#                         the envs' own scaling, N = 1, 4, 16
#   2. dit_batched.json   LIBERO with bench-dit (~1.05B-parameter DiT, bf16, 8 passes per 16-action chunk)
#                         in one GPU worker, dynamic batching on (default 2 ms window), N = 1, 2, 4, 8, 16
#   3. dit_unbatched.json the same with batching off, N = 8, 16 (the GPU becomes the bottleneck)
#   4. batching.json      bench/batching.py: the reference WAM on cuda, 16 sessions, batch <= 16 vs off
# Locally, small and without the device setup:
#     SKIP_SETUP=1 OUT=/tmp/ce DIT="--am-option layers=2 --am-option width=128" NS=1,2 NS_OFF=2 \
#         PYTHONPATH=bench bash bench/device/call_eval.sh
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
OUT="${OUT:-/tmp/call-eval-out}"
mkdir -p "$OUT"
START=$(date +%s)
export PYTHONUNBUFFERED=1
stage() { echo; echo "=== [$(( $(date +%s) - START )) s] $*"; }

if [ "${SKIP_SETUP:-0}" != 1 ]; then
    stage "setup"
    source bench/device/setup.sh || { echo "setup.sh FAILED"; exit 1; }
    { nproc; free -g; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; } >"$OUT/machine.txt" 2>&1
fi
export WAMCORE_PLUGIN_MODULES=gpu_wam MUJOCO_GL=${MUJOCO_GL:-egl}
PY=${PY:-python3}
LIBERO="--platform libero --set suite=libero_spatial --set task=0 --max-chunks ${CHUNKS:-6} --episodes-per-env ${EPE:-2}"

# each stage can be skipped: SKIP="2 3 4" runs stage 1 only
run_stage() { case " ${SKIP:-} " in *" $1 "*) return 1 ;; esac; return 0; }
if run_stage 1; then
    stage "1. scripted model (CPU): the envs' own scaling"
    timeout ${T1:-170} $PY bench/eval_throughput.py $LIBERO --backend libero-smoke --am-option chunk=16 \
        --num-envs "${NS_SCRIPTED:-1,4,16}" --log-dir /tmp/b-scripted --json "$OUT/scripted.json" 2>>"$OUT/stderr.log"
fi
if run_stage 2; then
    stage "2. bench-dit on the GPU, batching on"
    timeout ${T2:-230} $PY bench/eval_throughput.py $LIBERO --backend bench-dit ${DIT:-} \
        --num-envs "${NS:-1,2,4,8,16}" --log-dir /tmp/b-dit --json "$OUT/dit_batched.json" 2>>"$OUT/stderr.log"
fi
if run_stage 3; then
    stage "3. bench-dit on the GPU, batching off"
    timeout 110 $PY bench/eval_throughput.py $LIBERO --backend bench-dit ${DIT:-} --batch-window-ms 0 \
        --num-envs "${NS_OFF:-8,16}" --log-dir /tmp/b-dit-off --json "$OUT/dit_unbatched.json" 2>>"$OUT/stderr.log"
fi
if run_stage 4; then
    stage "4. batching: the reference WAM, 16 sessions"
    timeout 90 $PY bench/batching.py --device "${BATCH_DEVICE:-cuda}" --sessions 16 --seconds "${BATCH_S:-10}" \
        --rounds 2 --json >"$OUT/batching.json" 2>>"$OUT/stderr.log"
fi
stage "done"
