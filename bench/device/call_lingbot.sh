#!/usr/bin/env bash
# Device call: LingBot-VA (6f092cb) at full size on one H200, random weights generated there
# (plugins/lingbot_va/bench/chunk_latency.py): its chunk through a wamcore worker against
# upstream's VA_Server called directly. Carry .whl-lingbot, filled here by:
#     mkdir -p .whl-lingbot && cp "${WAMCORE_UPSTREAM_DIR:-../shared/upstream}/lingbot-va-6f092cb.tar.gz" .whl-lingbot/
#     python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#         --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform any -d .whl-lingbot \
#         diffusers==0.36.0 easydict ftfy wcwidth websockets pyzmq==27.3.0
# then: run(command="bash bench/device/call_lingbot.sh", carry=[".whl-lingbot"], kind="nvidia-h200", timeout_s=590)
# torch, transformers, tokenizers, safetensors, einops, msgpack are on the device image; upstream's
# unconditional `import flash_attn` is met by the one-line stub of plugins/lingbot_va/tests/stubs
# (attn_mode "torch": SDPA, never flash-attn). Budget: generate ~2 min (11 B parameters built on
# the GPU, 22 GB written), two loads of ~1-2 min, 2 x 4 chunks at 25/50 steps.
# Extra arguments go to the bench (e.g. --chunks 3 --steps 10 --action-steps 20 to be quicker).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT="${OUT:-/tmp/lingbot-out}"
mkdir -p "$OUT" /tmp/lb
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-lb \
    .whl-lingbot/*.whl || exit 1
tar xzf .whl-lingbot/lingbot-va-6f092cb.tar.gz -C /tmp/lb || exit 1
export LINGBOT_VA_ROOT=/tmp/lb/lingbot-va
# wamcore and the two plugins from the checkout, upstream's wan_va from the unpacked checkout; the
# worker loads the plugins by module name and inherits the path
export PYTHONPATH="/tmp/site-lb:$PWD:$PWD/plugins/lingbot_va/src:$PWD/plugins/robotwin/src:$LINGBOT_VA_ROOT:$PWD/plugins/lingbot_va/tests/stubs"
export WAMCORE_PLUGIN_MODULES=wam_lingbot_va.plugin,wam_robotwin.plugin WAMCORE_LOAD_PLUGINS=
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 plugins/lingbot_va/bench/chunk_latency.py --out "$OUT/lingbot_h200.json" --work /tmp/lingbot-bench "$@"
