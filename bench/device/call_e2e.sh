#!/usr/bin/env bash
# Device call: real StarWAM (a7b05c8, full size, random weights generated on the GPU) on real
# LIBERO libero_spatial tasks 0-9 with N env processes, against the simulators alone
# (libero-smoke), batched and unbatched: bench/e2e_libero.py. One call:
#     run(command="bash bench/device/call_e2e.sh", carry=[".whl", ".gl", ".whl-starwam"],
#         kind="nvidia-h200", timeout_s=590)
# Prepare here, once: bench/device/make_gl.sh && bench/device/make_wheelhouse.sh (.gl, .whl:
# LIBERO, ~48 MiB) and
#     mkdir -p .whl-starwam && cp "${WAMCORE_UPSTREAM_DIR:-../shared/upstream}/starwam-a7b05c8.tar.gz" .whl-starwam/
# StarWAM's inference imports torch, numpy, einops (on the device image) and its own package;
# the tarball is 0.13 MiB, so the call sends ~50 MiB of its 64.
# Budget (9.5 min): setup ~20 s, weights ~60-90 s, three stages of <= STAGE_S (160) s each (a StarWAM stage: worker load ~60-90 s, then
# the episodes); about 8 minutes in all. STAGES=sim,batched,graphs,unbatched adds StarWAM's --cuda-graphs
# (once plugins/starwam has it; then lower CHUNKS or STAGE_S to stay in the budget).
# Each stage writes $OUT/<stage>.json as soon as it ends; $OUT/summary.json holds the ratios.
# Knobs: BUDGET_S (the whole call, default 560 s: a stage gets at most what is left), NS (env processes, default 14: 16 cores, two left for the driver and the worker),
# CHUNKS (chunks per episode, 8 = 80 steps), EPE (episodes per env), STAGES, STAGE_S.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
OUT="${OUT:-/tmp/e2e-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
START=$(date +%s)
if [ "${SKIP_SETUP:-0}" != 1 ]; then
    source bench/device/setup.sh || { echo "setup.sh FAILED"; exit 1; }
    { nproc; free -g; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; } >"$OUT/machine.txt" 2>&1
    mkdir -p /tmp/sw && tar xzf .whl-starwam/starwam-a7b05c8.tar.gz -C /tmp/sw || { echo "no .whl-starwam"; exit 1; }
    # the StarWAM plugin from this checkout, upstream's package from the unpacked tarball;
    # the spawned workers inherit both (ADD to PYTHONPATH: the wheels live there)
    export PYTHONPATH="$PYTHONPATH:$ROOT/plugins/starwam/src:/tmp/sw/StarWAM"
    export WAMCORE_PLUGIN_MODULES=wam_starwam.plugin STARWAM_ROOT=/tmp/sw/StarWAM
fi
python3 bench/e2e_libero.py --model starwam --num-envs "${NS:-14}" --max-chunks "${CHUNKS:-8}" \
    --episodes-per-env "${EPE:-1}" --stages "${STAGES:-sim,batched,unbatched}" --timeout "${STAGE_S:-160}" \
    --deadline $(( ${BUDGET_S:-560} - $(date +%s) + START )) \
    --out "$OUT" --work /tmp/wam-e2e "$@"
