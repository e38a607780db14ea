"""Real Fast-WAM RoboTwin inference through a wamcore worker, with random weights generated in
place: per-chunk latency (p50/p99), GPU memory and load time, and the same model called
directly (outside wamcore) for comparison. One run does everything; nothing is downloaded.

1. ``wam_fastwam.testweights.generate`` writes full-size (``--layers 0 --width 0``) random
   weights from FastWAM's own classes, on the GPU, in the files upstream reads, with a
   text-cache entry for the instruction (the UMT5-XXL is neither generated nor loaded; with
   ``--text-encoder`` it is, and a tokenizer folder, and the worker runs without ``--text-cache``
   as the default deployment does);
2. a ``wam serve`` worker is spawned with ``--am-cuda-device`` and ``--text-cache``; load time
   is spawn to ready (Hydra composition, ``create_fastwam``, ``load_checkpoint``, hashing);
   ``--calls`` predictions at upstream's default 10 steps are timed after ``--warmup`` ones, at
   the client and inside the worker (``model_ms``); GPU memory in use is read with nvidia-smi
   while the worker holds the model;
3. the worker is closed, the same files are loaded in this process and
   ``FastWAM.infer_action`` is timed directly, with torch's peak allocated memory.

Usage (H200): ``python plugins/fastwam/bench/upstream_latency.py --out $OUT/fastwam.json``
At reduced depth on CPU: ``--layers 2 --width 256 --device cpu --steps 2 --calls 3 --warmup 1``.
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

TASK = "Hit the block with the small hammer."


def observation(seed: int = 0):
    from wamcore import Observation

    rng = np.random.default_rng(seed)
    return Observation(
        images={r: rng.integers(0, 256, (240, 320, 3), dtype=np.uint8) for r in ("head", "left_wrist", "right_wrist")},
        state={"joint_targets": rng.uniform(-0.5, 0.5, 14), "joint_positions": np.zeros(12), "left_eef_pose": np.zeros(7),
               "right_eef_pose": np.zeros(7), "left_gripper": np.ones(1), "right_gripper": np.ones(1)},
        instruction=TASK)


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


def options(files: dict, args) -> dict:
    text = {} if args.text_encoder else {"text_cache": files["text_cache"]}
    return {**text, "fastwam_override": files["fastwam_overrides"].split(), "num_inference_steps": args.steps}


def through_worker(files: dict, args) -> dict:
    import wam_fastwam.plugin
    import wam_robotwin.plugin  # the platform's spec binds the model (pip install -e ./plugins/robotwin)
    from wamcore import PredictRequest
    from wamcore.registry import Registry
    from wamcore.runtime import WorkerConfig, open_model

    registry = Registry(entry_points=False)
    registry.register(wam_robotwin.plugin, name="robotwin")
    registry.register(wam_fastwam.plugin, name="fastwam")
    plat = registry.platform("robotwin")
    config = WorkerConfig.from_options(platform="robotwin", am_backend="fast-wam", am_python=sys.executable,
                                       am_checkpoint=files["checkpoint"], backend_options=options(files, args),
                                       am_cuda_device=args.cuda_device if args.device == "cuda" else None,
                                       log_dir=str(Path(args.work) / "worker-logs"), start_timeout_s=1200)
    t0 = time.perf_counter()
    model = open_model(config, plat, registry=registry)
    load_s = time.perf_counter() - t0
    try:
        request = PredictRequest(observation=observation().select(model.contract.cameras, model.contract.state), seed=1)
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
                "upstream", "entry", "upstream_file", "checkpoint_sha256", "stats_sha256", "text_cache", "num_inference_steps")}}


def direct(files: dict, args) -> dict:
    """The same files, upstream's ``infer_action`` called here, no wamcore in the timed loop."""
    import torch

    from wamcore import ModelConfig
    from wam_fastwam.robotwin import compose_cameras
    from wam_fastwam.worker import load_robotwin, model_image

    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    native = load_robotwin(ModelConfig(platform="robotwin", checkpoint=files["checkpoint"], options=options(files, args),
                                       device="cuda" if args.device == "cuda" else "cpu"))
    load_s = time.perf_counter() - t0
    model = native.model
    obs = observation()
    if native.text is not None:
        context, mask = native.text.context(TASK)
        text = {"prompt": None, "context": context, "context_mask": mask}
    else:  # the UMT5-XXL encodes the prompt inside infer_action, as the deployment does
        text = {"prompt": native.prompt_template.format(task=TASK)}
    state = torch.from_numpy(native.stats.state.normalize(obs.state["joint_targets"].astype(np.float32))[None])

    def call():
        image = model_image(compose_cameras(obs.images["head"], obs.images["left_wrist"], obs.images["right_wrist"]),
                            model.device, model.torch_dtype)
        with torch.no_grad():
            return model.infer_action(**text, input_image=image, action_horizon=32, proprio=state,
                                      num_inference_steps=args.steps, seed=1)["action"]

    times = []
    for i in range(args.warmup + args.calls):
        sync()
        t = time.perf_counter()
        action = call()
        sync()
        if i >= args.warmup:
            times.append((time.perf_counter() - t) * 1000)
    action = action.float().cpu().numpy()
    out = {"load_s": round(load_s, 1), "upstream_call": percentiles(times), "chunk": list(action.shape),
           "finite": bool(np.isfinite(action).all()),
           "parameters_b": round(sum(p.numel() for p in model.parameters()) / 1e9, 3)}
    if args.device == "cuda":
        out["torch_peak_allocated_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="fastwam_latency.json")
    ap.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "fastwam-bench"))
    ap.add_argument("--layers", type=int, default=0, help="0: full size (30)")
    ap.add_argument("--width", type=int, default=0, help="0: full size (3072 video, 1024 action)")
    ap.add_argument("--steps", type=int, default=10, help="denoising steps (sim_robotwin's default: 10)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--cuda-device", default="0")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--text-encoder", action="store_true",
                    help="generate and load the UMT5-XXL (the default deployment) instead of --text-cache")
    args = ap.parse_args()
    if args.device == "cuda":
        os.environ.setdefault("CUDA_VISIBLE_DEVICES", args.cuda_device)
    import torch

    from wam_fastwam.testweights import generate

    weights = Path(args.work) / "weights"
    t0 = time.perf_counter()
    files = generate(weights, layers=args.layers, width=args.width, seed=0, instructions=[TASK],
                     device="cuda" if args.device == "cuda" else "cpu", text_encoder=args.text_encoder)
    os.environ["DIFFSYNTH_MODEL_BASE_PATH"] = files["diffsynth_model_base_path"]  # the worker inherits both
    os.environ["DIFFSYNTH_SKIP_DOWNLOAD"] = "true"
    result = {"torch": torch.__version__, "python": sys.version.split()[0],
              "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu",
              "layers": args.layers or "full", "width": args.width or "full", "steps": args.steps,
              "text": "umt5-xxl" if args.text_encoder else "text-cache",
              "calls": args.calls, "warmup": args.warmup, "generate_s": round(time.perf_counter() - t0, 1),
              "parameters_mot_and_proprio": files.pop("parameters")}
    result["worker"] = through_worker(files, args)
    print("worker", json.dumps(result["worker"]), flush=True)
    result["direct"] = direct(files, args)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
