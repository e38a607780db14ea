#!/usr/bin/env bash
# Device call: StarWAM at GPU speed (bench/device/starwam_speed.py), one H200, full size, bf16.
# Carry .upstream, holding the StarWAM a7b05c8 source archive (git archive), filled here by:
#     mkdir -p .upstream && cp "$WAMCORE_UPSTREAM_DIR/starwam-a7b05c8.tar.gz" .upstream/
# then: run(command="bash bench/device/call_starwam_speed.sh", carry=[".upstream"], kind="nvidia-h200", timeout_s=590)
# About 5-6 minutes: LIBERO MoT (baseline, exactness, FLOPs, eager and CUDA graphs at batch 1..32,
# the VAE alone, the worker's path), then RoboTwin MoT if more than 150 s of --budget-s are left.
# --vae-dtype bfloat16 against float32 (CUDA graphs, batch 1, 16, 32), under 4 minutes, the rest skipped:
#     run(command="bash bench/device/call_starwam_speed.sh --batches 1,16,32 --vae-bf16-batches 1,16,32
#         --skip base,flops,libero_eager,vae,plugin --robotwin-batches '' --budget-s 180",
#         carry=[".upstream"], kind="nvidia-h200", timeout_s=240)
# Nothing else travels: StarWAM's inference needs torch, einops, pyyaml, safetensors, pillow and
# pyarrow (imported, never used; stubbed if missing), wamcore needs attrs, numpy and pluggy, all on
# the image. Extra arguments go to the bench. Its JSON is rewritten after every stage, so a
# timeout still returns what was measured.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT="${OUT:-/tmp/starwam-speed-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/plugins/starwam/src${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version,power.limit --format=csv,noheader
timeout 540 python3 bench/device/starwam_speed.py --tarball .upstream/starwam-a7b05c8.tar.gz \
    --out "$OUT/starwam_speed.json" --budget-s 420 "$@" 2>&1 | tee "$OUT/starwam_speed.log"
