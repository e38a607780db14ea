#!/usr/bin/env bash
# Device call: Fast-WAM RoboTwin at full size on one H200, random weights generated there
# (plugins/fastwam/bench/upstream_latency.py). Carry .whl-fastwam, filled here by:
#     mkdir -p .whl-fastwam && cp "$WAMCORE_UPSTREAM_DIR/fastwam-45d8e14.tar.gz" .whl-fastwam/   # FastWAM 45d8e14 source
#     python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#         --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl-fastwam \
#         hydra-core==1.3.2 omegaconf==2.3.0 boto3 botocore s3transfer jmespath termcolor pyzmq==27.3.0
#     python3 -m pip wheel --no-deps -w .whl-fastwam antlr4-python3-runtime==4.9.3   # sdist only
# then: run(command="bash bench/device/call_fastwam.sh", carry=[".whl-fastwam"], kind="nvidia-h200")
#   or:  run(command="BENCH=batch bash bench/device/call_fastwam.sh", carry=[".whl-fastwam"], kind="nvidia-h200",
#            timeout_s=590)   (batch 1..16 eager, then the same with --cuda-graphs; ~6 min; killed at 560 s,
#            its JSON is rewritten after every row)
# Everything else (torch, transformers, accelerate, einops, imageio, safetensors, msgpack, ...)
# is on the device image. Extra arguments go to the bench (default: 20 calls after 3).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT="${OUT:-/tmp/fastwam-out}"
mkdir -p "$OUT" /tmp/fw
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl-fastwam/*.whl || exit 1
tar xzf .whl-fastwam/fastwam-45d8e14.tar.gz -C /tmp/fw
# wamcore and the two plugins from the checkout, FastWAM from its unpacked checkout (its configs/
# beside src/, as an editable install has them); the worker loads the plugins by module name
export PYTHONPATH="/tmp/site:$PWD:$PWD/plugins/fastwam/src:$PWD/plugins/robotwin/src:/tmp/fw/FastWAM/src"
export WAMCORE_PLUGIN_MODULES=wam_fastwam.plugin,wam_robotwin.plugin WAMCORE_LOAD_PLUGINS=
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
# BENCH=batch: per-observation cost at batch 1..16 (batch_latency.py) instead of worker vs direct
if [ "${BENCH:-latency}" = batch ]; then
    timeout 560 python3 plugins/fastwam/bench/batch_latency.py --out "$OUT/fastwam_batch_h200.json" \
        --work /tmp/fastwam-bench "$@" 2>&1 | tee "$OUT/fastwam_batch_h200.log"
else
    python3 plugins/fastwam/bench/upstream_latency.py --out "$OUT/fastwam_h200.json" --work /tmp/fastwam-bench "$@"
fi
