"""LingBot-VA's chunk through a wamcore worker against upstream's ``VA_Server`` called directly.

One run, random weights generated in place (``wam_lingbot_va.testweights.generate``; full size
by default, built on the GPU and saved in bf16, the dtype the server loads):

1. a ``wam serve`` worker is spawned (``--am-cuda-device``); load time is spawn to ready. One
   episode of ``--chunks`` chunks is driven through it as the robotwin platform would: an
   observation every 4 actions (wamcore's chunk is one keyframe interval), so a prediction
   that needs a new LingBot chunk makes the worker call ``VA_Server.infer`` (the first one
   ``reset`` + ``infer``, later ones ``compute_kv_cache`` with the keyframes and the executed
   chunk, then ``infer``); the others are answered from the chunk already computed.
   Reported: per-chunk client latency (the predictions that computed a chunk), the
   in-worker ``model_ms``, and the buffered predictions' latency;
2. the worker is closed, the same files are loaded here with upstream's server as the worker
   builds it (``wam_lingbot_va.upstream.build_server``) and the same request sequence (upstream's
   client's dicts: ``reset_request``, ``infer_request``, ``kv_request``) is timed around
   ``VA_Server.infer``, with the noise seeded per chunk as the worker seeds it; the first
   chunk's actions are compared with the worker's.

Each section is written to ``--out`` as soon as it is measured::

    python3 plugins/lingbot_va/bench/chunk_latency.py --out $OUT/lingbot.json       # H200
    python plugins/lingbot_va/bench/chunk_latency.py --device cpu --layers 1 --steps 2 --chunks 2 \\
        --out /tmp/lingbot.json                                                        # CPU check
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PROMPT = "pick up the cup"
SEED = 7


def observation(step: int, seed: int):
    """A RoboTwin observation (three cameras, qpos14 targets, unit-quaternion endposes)."""
    from wamcore import Observation

    rng = np.random.default_rng(seed)
    images = {role: rng.integers(0, 256, (240, 320, 3), dtype=np.uint8) for role in ("head", "left_wrist", "right_wrist")}
    state = {"joint_targets": rng.uniform(-1, 1, 14), "joint_positions": rng.uniform(-1, 1, 12)}
    for side in ("left", "right"):
        q = rng.normal(size=4)
        state[f"{side}_eef_pose"] = np.concatenate([rng.uniform(-0.4, 0.4, 3), q / np.linalg.norm(q)])
        state[f"{side}_gripper"] = rng.uniform(0, 1, 1)
    return Observation(images=images, state=state, instruction=PROMPT, step=step)


def predictions_for(chunks: int) -> int:
    """wamcore predictions that consume ``chunks`` LingBot chunks: 16 actions, then 32 each."""
    return 4 + 8 * (chunks - 1)


def percentiles(ms: list) -> dict:
    return {"p50_ms": round(float(np.percentile(ms, 50)), 1), "max_ms": round(float(np.max(ms)), 1),
            "mean_ms": round(float(np.mean(ms)), 1), "n": len(ms)} if ms else {}


def options(args) -> dict:
    return {"num_inference_steps": args.steps, "action_num_inference_steps": args.action_steps,
            "save_root": str(Path(args.work) / "save"), "device": args.device}


def save(result: dict, args) -> None:
    Path(args.out).write_text(json.dumps(result, indent=1, default=str))


def through_worker(folder: str, args) -> dict:
    import wam_lingbot_va.plugin
    import wam_robotwin.plugin
    from wamcore import PredictRequest
    from wamcore.registry import Registry
    from wamcore.runtime import WorkerConfig, open_model

    registry = Registry(entry_points=False)
    registry.register(wam_robotwin.plugin, name="robotwin")
    registry.register(wam_lingbot_va.plugin, name="lingbot_va")
    plat = registry.platform("robotwin")
    control = {"control": "robotwin.endpose.ee16.v1"}
    config = WorkerConfig.from_options(platform="robotwin", am_backend="lingbot-va", am_python=sys.executable,
                                       am_checkpoint=folder, backend_options=options(args), timeout_s=1200.0,
                                       am_cuda_device=args.cuda_device if args.device == "cuda" else None,
                                       log_dir=str(Path(args.work) / "worker-logs"), start_timeout_s=1200)
    t0 = time.perf_counter()
    model = open_model(config, plat, registry=registry, observation=plat.observation_spec(control),
                       platform_options=control)
    load_s = time.perf_counter() - t0
    chunk_ms, chunk_model_ms, buffered_ms, first = [], [], [], None
    try:
        for k in range(predictions_for(args.chunks)):
            t = time.perf_counter()
            pred = model.predict(PredictRequest(observation=observation(4 * k, k), seed=SEED))
            ms = (time.perf_counter() - t) * 1000
            if k == 0:
                first = np.asarray(pred.actions)
            if k == 0 or (k - 4) % 8 == 0:  # this prediction made the worker compute a chunk
                chunk_ms.append(ms)
                chunk_model_ms.append(pred.timing["model_ms"])
            else:
                buffered_ms.append(ms)
        info = model.info
    finally:
        model.close()
    return {"load_s": round(load_s, 1), "chunk_client": percentiles(chunk_ms[1:]), "first_chunk_ms": round(chunk_ms[0], 1),
            "chunk_model_in_worker": percentiles(chunk_model_ms[1:]), "buffered_prediction": percentiles(buffered_ms),
            "first_actions": first.tolist(), "device": info.device,
            "identity": {k: info.details.get(k) for k in ("upstream", "deployment", "num_inference_steps",
                                                          "action_num_inference_steps", "dtype", "noise")}}


def direct(folder: str, args) -> dict:
    """The same files and request sequence, ``VA_Server.infer`` called here."""
    import torch

    from wam_lingbot_va import upstream
    from wam_lingbot_va.robotwin import encode, executed_rows, initial_pose
    from wam_lingbot_va.session import chunk_seed, infer_request, kv_request, reset_request
    from wamcore import PredictRequest

    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    server = upstream.build_server(upstream.checkout_root(), Path(folder), device=args.device,
                                   save_root=Path(args.work) / "save-direct",
                                   overrides={"num_inference_steps": args.steps,
                                              "action_num_inference_steps": args.action_steps})
    load_s = time.perf_counter() - t0
    natives = [encode(PredictRequest(observation=observation(4 * k, k))) for k in range(predictions_for(args.chunks))]
    server.infer(reset_request(PROMPT))
    times, chunk, keyframes, first = [], None, [], None
    step = 1  # natives[0] conditions every chunk; natives[1:] are the keyframes after every 4th action
    for c in range(args.chunks):
        sync()
        t = time.perf_counter()
        if chunk is not None:
            server.infer(kv_request(keyframes, chunk))
        torch.manual_seed(chunk_seed(SEED, c))
        chunk = np.asarray(server.infer(infer_request(natives[0]["frame"], PROMPT))["action"])
        sync()
        times.append((time.perf_counter() - t) * 1000)
        if first is None:
            first = executed_rows(chunk, initial_pose(PredictRequest(observation=observation(0, 0))), first=True)[:4]
        if c + 1 < args.chunks:  # the keyframes the next chunk feeds back (4 after the first chunk, then 8)
            n = 4 if c == 0 else 8
            keyframes, step = [natives[i]["frame"] for i in range(step, step + n)], step + n
    out = {"load_s": round(load_s, 1), "first_chunk_ms": round(times[0], 1), "chunk": percentiles(times[1:]),
           "first_actions": np.asarray(first).tolist()}
    if args.device == "cuda":
        out["torch_peak_allocated_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="lingbot_latency.json")
    ap.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "lingbot-bench"))
    ap.add_argument("--layers", type=int, default=0, help="0: full size")
    ap.add_argument("--steps", type=int, default=25, help="video denoising steps (robotwin config: 25)")
    ap.add_argument("--action-steps", type=int, default=50, help="action denoising steps (robotwin config: 50)")
    ap.add_argument("--chunks", type=int, default=4, help="LingBot chunks per path (the first is reported apart)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--cuda-device", default="0")
    args = ap.parse_args()
    if args.device == "cuda":
        os.environ.setdefault("CUDA_VISIBLE_DEVICES", args.cuda_device)
    import torch

    from wam_lingbot_va.testweights import generate

    folder = Path(args.work) / "weights"
    t0 = time.perf_counter()
    made = generate(folder, layers=args.layers, seed=0, device=args.device,
                    dtype="bfloat16" if args.device == "cuda" else "float32")
    result = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu",
              "layers": args.layers or "full", "steps": [args.steps, args.action_steps], "chunks": args.chunks,
              "generate_s": round(time.perf_counter() - t0, 1), "parameters": made["parameters"]}
    save(result, args)
    result["worker"] = through_worker(str(folder), args)
    save(result, args)
    result["direct"] = direct(str(folder), args)
    w, d = np.asarray(result["worker"]["first_actions"]), np.asarray(result["direct"]["first_actions"])
    result["first_chunk_equal"] = bool(w.shape == d.shape and np.allclose(w, d, atol=1e-5))
    if result["worker"]["chunk_client"] and result["direct"]["chunk"]:
        result["worker_over_direct_p50"] = round(result["worker"]["chunk_client"]["p50_ms"]
                                                 / result["direct"]["chunk"]["p50_ms"], 3)
    save(result, args)
    print(json.dumps({k: v for k, v in result.items() if k not in ("worker", "direct")}))


if __name__ == "__main__":
    main()
