"""Real StarWAM inference through a wamcore worker, with random weights generated in place:
per-chunk latency (p50/p99), GPU memory and load time, and the same model called directly
(outside wamcore) for comparison. One run does everything; nothing is downloaded.

For each platform (LIBERO MoT at 8 steps, RoboTwin MoT at 4 steps, upstream's defaults):

1. ``wam_starwam.testweights.generate`` writes full-size (``--layers 0``) random weights from
   StarWAM's own classes, on the GPU, in the files upstream reads;
2. a ``wam serve`` worker is spawned with ``--am-cuda-device``; load time is spawn to ready
   (the worker builds the model, loads and hashes the files); ``--calls`` predictions are timed
   after ``--warmup`` ones, at the client (end to end) and inside the worker (``model_ms``);
   GPU memory in use is read with nvidia-smi while the worker holds the model;
3. the worker is closed, the same files are loaded in this process and upstream's own entry
   point is timed directly: ``examples/libero/rollout.py`` ``_predict_action_chunk`` on LIBERO,
   ``StarwamPolicy.predict_chunk`` with ``_build_robotwin_image`` on RoboTwin, with torch's
   peak allocated memory.

Usage (H200): ``python plugins/starwam/bench/upstream_latency.py --out $OUT/starwam.json``
At reduced depth on CPU: ``--layers 2 --device cpu --calls 3 --warmup 1``.
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

TASKS = {"libero": "pick up the black bowl between the plate and the ramekin and place it on the plate",
         "robotwin": "hand the block over"}
STEPS = {"libero": 8, "robotwin": 4}


def observation(platform: str, seed: int = 0):
    from wamcore import Observation

    rng = np.random.default_rng(seed)
    if platform == "libero":
        return Observation(
            images={r: rng.integers(0, 256, (256, 256, 3), dtype=np.uint8) for r in ("primary", "wrist")},
            state={"eef_position": np.array([-0.2, 0.0, 1.17]), "eef_quaternion_xyzw": np.array([0.99, 0.05, 0.0, 0.05]),
                   "gripper_qpos": np.array([0.04, -0.04]), "joint_positions": np.zeros(7)},
            instruction=TASKS[platform])
    return Observation(
        images={r: rng.integers(0, 256, (240, 320, 3), dtype=np.uint8) for r in ("head", "left_wrist", "right_wrist")},
        state={"joint_targets": rng.uniform(-0.5, 0.5, 14), "joint_positions": np.zeros(12), "left_eef_pose": np.zeros(7),
               "right_eef_pose": np.zeros(7), "left_gripper": np.ones(1), "right_gripper": np.ones(1)},
        instruction=TASKS[platform])


def percentiles(ms: list) -> dict:
    return {"p50_ms": round(float(np.percentile(ms, 50)), 1), "p99_ms": round(float(np.percentile(ms, 99)), 1),
            "mean_ms": round(float(np.mean(ms)), 1), "n": len(ms)}


def gpu_memory_used_mb() -> list:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
        return [int(x) for x in out.split()]
    except (OSError, subprocess.SubprocessError, ValueError):
        return []


def through_worker(platform: str, files: dict, args) -> dict:
    from wamcore import PredictRequest, default_registry
    from wamcore.runtime import WorkerConfig, open_model

    registry = default_registry()
    plat = registry.platform(platform)
    options = {"backbone": files["backbone"], "action_stats": files["action_stats"], "text_cache": files["text_cache"],
               "num_inference_steps": STEPS[platform]}
    config = WorkerConfig.from_options(platform=platform, am_backend="starwam", am_python=sys.executable,
                                       am_checkpoint=files["checkpoint"], backend_options=options,
                                       am_cuda_device=args.cuda_device if args.device == "cuda" else None,
                                       log_dir=str(Path(args.work) / "worker-logs"), start_timeout_s=1200)
    t0 = time.perf_counter()
    model = open_model(config, plat, registry=registry)
    load_s = time.perf_counter() - t0
    try:
        request = PredictRequest(observation=observation(platform).select(model.contract.cameras, model.contract.state),
                                 seed=1)
        client_ms, model_ms = [], []
        for i in range(args.warmup + args.calls):
            t = time.perf_counter()
            pred = model.predict(request)
            if i >= args.warmup:
                client_ms.append((time.perf_counter() - t) * 1000)
                model_ms.append(pred.timing["model_ms"])
        memory = gpu_memory_used_mb()
        info = model.info
    finally:
        model.close()
    return {"load_s": round(load_s, 1), "client": percentiles(client_ms), "model_in_worker": percentiles(model_ms),
            "gpu_memory_used_mb": memory, "chunk": list(pred.actions.shape), "finite": bool(np.isfinite(pred.actions).all()),
            "device": info.device, "identity": {k: info.details.get(k) for k in (
                "upstream", "entry", "weights_sha256", "stats_sha256", "num_inference_steps", "replan_steps", "dtype")}}


def direct(platform: str, files: dict, args) -> dict:
    """The same files, upstream's own entry point, no wamcore in the timed loop."""
    import importlib

    import torch

    from wamcore import ModelConfig, PredictRequest
    from wam_starwam import upstream
    from wam_starwam.worker import load

    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    options = {"backbone": files["backbone"], "action_stats": files["action_stats"], "text_cache": files["text_cache"],
               "num_inference_steps": STEPS[platform]}
    t0 = time.perf_counter()
    native = load(ModelConfig(platform=platform, checkpoint=files["checkpoint"], options=options,
                              device="cuda:0" if args.device == "cuda" else "cpu"))
    load_s = time.perf_counter() - t0
    root = upstream.checkout_root()
    sys.path.insert(0, str(root))
    obs = observation(platform)
    if platform == "libero":
        rollout = importlib.import_module("examples.libero.rollout")
        raw = {"agentview_image": obs.images["primary"][::-1], "robot0_eye_in_hand_image": obs.images["wrist"][::-1],
               "robot0_eef_pos": obs.state["eef_position"], "robot0_eef_quat": obs.state["eef_quaternion_xyzw"],
               "robot0_gripper_qpos": obs.state["gripper_qpos"]}
        cfg = native.cfg
        cfg.data.text_embedding_cache_dir = files["text_cache"]
        a_stats, s_stats = rollout._load_action_stats(cfg), rollout._load_state_stats(cfg)

        def call(i):
            with torch.no_grad(), upstream.weights_only_loads():
                return rollout._predict_action_chunk(native.model, raw, TASKS[platform], cfg, {}, a_stats, s_stats,
                                                     native.torch_device, native.dtype, STEPS[platform], STEPS[platform], 1)[0]
    else:
        server = importlib.import_module("examples.robotwin.policy_server")
        policy = native.policy
        native.predict_native({"head": obs.images["head"], "left": obs.images["left_wrist"], "right": obs.images["right_wrist"],
                               "state": obs.state["joint_targets"].astype(np.float32), "instruction": TASKS[platform]},
                              PredictRequest(observation=obs))  # fills the policy's text entry as the worker does

        def call(i):
            image = server._build_robotwin_image(obs.images["head"], obs.images["left_wrist"], obs.images["right_wrist"],
                                                 policy.device, policy.dtype)
            return policy.predict_chunk(image, obs.state["joint_targets"].astype(np.float32), TASKS[platform])
    times = []
    for i in range(args.warmup + args.calls):
        sync()
        t = time.perf_counter()
        chunk = call(i)
        sync()
        if i >= args.warmup:
            times.append((time.perf_counter() - t) * 1000)
    out = {"load_s": round(load_s, 1), "upstream_call": percentiles(times), "chunk": list(np.shape(chunk)),
           "finite": bool(np.isfinite(chunk).all())}
    if args.device == "cuda":
        out["torch_peak_allocated_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        out["parameters_b"] = round(sum(p.numel() for p in (native.model if platform == "libero" else native.policy.model)
                                        .parameters()) / 1e9, 3)
    native = None  # frees the model before the next platform
    if args.device == "cuda":
        torch.cuda.empty_cache()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="starwam_latency.json")
    ap.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "starwam-bench"))
    ap.add_argument("--platforms", default="libero,robotwin")
    ap.add_argument("--layers", type=int, default=0, help="0: full size (Wan2.2-TI2V-5B geometry)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--cuda-device", default="0")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    if args.device == "cuda":
        os.environ.setdefault("CUDA_VISIBLE_DEVICES", args.cuda_device)
    import torch

    from wam_starwam.testweights import generate

    result = {"torch": torch.__version__, "python": sys.version.split()[0],
              "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu",
              "layers": args.layers or "full", "calls": args.calls, "warmup": args.warmup, "platforms": {}}
    for platform in args.platforms.split(","):
        t0 = time.perf_counter()
        files = generate(Path(args.work) / "weights", platform=platform, layers=args.layers, seed=0,
                         instructions=[TASKS[platform]], device="cuda" if args.device == "cuda" else "cpu",
                         dtype="bfloat16" if args.device == "cuda" else "float32")
        entry = {"generate_s": round(time.perf_counter() - t0, 1), "parameters": files.pop("parameters"),
                 "steps": STEPS[platform], "worker": through_worker(platform, files, args)}
        entry["direct"] = direct(platform, files, args)
        result["platforms"][platform] = entry
        print(platform, json.dumps(entry), flush=True)
        Path(files["checkpoint"]).unlink()  # disk: one full-size checkpoint at a time
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
