#!/usr/bin/env bash
# Ray scale-out on the 2-GPU H200 host, one device call:
#     run(command="bash bench/device/call_ray.sh", carry=[".whl-ray"], kind="nvidia-h200-x2", timeout_s=600)
# PointMass env actors (light CPU work: the GPU model is what is measured) and bench-dit model
# actors (~1.05B-parameter DiT, bf16, 8 passes per chunk, dynamic batching), one per GPU:
# K = 1 then K = 2 (K=1,2,4,8 on larger hosts) model actors with the same N env actors, then local env processes with one
# worker as the reference. Writes ray.json (and log.txt) to $OUT.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
OUT="${OUT:-/tmp/call-ray-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ "${SKIP_SETUP:-0}" != 1 ]; then
    source bench/device/setup_ray.sh || { echo "setup_ray.sh FAILED"; exit 1; }
    { nproc; free -g; nvidia-smi --query-gpu=index,name,memory.total --format=csv; } >"$OUT/machine.txt" 2>&1
fi
export WAMCORE_PLUGIN_MODULES=gpu_wam
timeout "${T:-480}" ${PY:-python3} bench/eval_throughput.py --platform pointmass --backend bench-dit ${DIT:-} \
    --executor ray,local --num-model-workers "${K:-1,2}" --num-envs "${N:-24}" --episodes-per-env "${EPE:-2}" ${RAY_CPUS:+--ray-num-cpus $RAY_CPUS} \
    --log-dir /tmp/b-ray --json "$OUT/ray.json" 2>>"$OUT/stderr.log"
echo "done"
