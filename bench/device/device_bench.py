#!/usr/bin/env python3
"""Measurements for the device machine (bench/device/call1.sh runs them after setup.sh).

    python3 bench/device/device_bench.py gpu      --out DIR   # bench-dit: ms per chunk at batch 1/4/16
    python3 bench/device/device_bench.py libero   --out DIR   # one LIBERO env: create, reset, step (2 cameras)
    python3 bench/device/device_bench.py parallel --out DIR --procs 4,8,16   # N env processes stepping at once
    python3 bench/device/device_bench.py merge    --out DIR   # DIR/*.json -> DIR/results.json

Each subcommand writes DIR/<name>.json as soon as it has a number (a killed run keeps what
it had). Timings are wall clock (time.perf_counter); GPU timings end with a host copy of
the result, so they include the synchronisation a real worker pays.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # bench/ -> gpu_wam


def _write(out: Path, name: str, data: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{name}.json.tmp"
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True, default=str))
    tmp.replace(out / f"{name}.json")


def _stats_ms(seconds: list) -> dict:
    ms = sorted(s * 1000.0 for s in seconds)
    n = len(ms)
    return {
        "n": n,
        "median_ms": round(statistics.median(ms), 3),
        "mean_ms": round(statistics.fmean(ms), 3),
        "min_ms": round(ms[0], 3),
        "p90_ms": round(ms[min(n - 1, int(0.9 * n))], 3),
        "max_ms": round(ms[-1], 3),
    }


# ----------------------------------------------------------------------------- gpu


def bench_gpu(out: Path, batches=(1, 4, 16), iters: int = 10, warm: int = 3, options: dict | None = None) -> dict:
    import numpy as np

    import gpu_wam
    from wamcore import ModelConfig

    result: dict = {"batches": {}}
    t0 = time.perf_counter()
    import torch

    result["torch"] = torch.__version__
    result["cuda"] = torch.cuda.is_available()
    result["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    result["import_torch_s"] = round(time.perf_counter() - t0, 2)
    spec = gpu_wam.BENCH_DIT
    config = ModelConfig(platform="libero", options=spec.with_defaults(options or {}))
    t0 = time.perf_counter()
    model = gpu_wam.load(config)
    result["load_s"] = round(time.perf_counter() - t0, 2)
    result["model"] = dict(model.details)
    result["params"] = int(model.params)
    _write(out, "gpu", result)

    rng = np.random.default_rng(0)
    layout = model.layout
    natives = [
        {
            "images": [rng.integers(0, 256, (256, 256, 3), dtype=np.uint8) for _ in layout.cameras],
            "state": rng.standard_normal(layout.state_dim).astype(np.float32),
            "text": "pick up the black bowl between the plate and the ramekin and place it on the plate",
            "entropy": [i, 0],
        }
        for i in range(max(batches))
    ]
    for b in batches:
        batch = natives[:b]
        for _ in range(warm):
            model.predict_native_batch(batch, [None] * b)
        times = []
        for _ in range(iters):
            t = time.perf_counter()
            outs = model.predict_native_batch(batch, [None] * b)
            times.append(time.perf_counter() - t)
        assert len(outs) == b and outs[0].shape == (model.chunk, layout.action_dim)
        stats = _stats_ms(times)
        stats["ms_per_request"] = round(stats["median_ms"] / b, 3)
        stats["ms_per_forward"] = round(stats["median_ms"] / model.steps, 3)
        result["batches"][str(b)] = stats
        _write(out, "gpu", result)
    if torch.cuda.is_available():
        result["max_memory_allocated_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    # same seed -> same chunk (batch of one, twice)
    a = model.predict_native(natives[0])
    b_ = model.predict_native(natives[0])
    result["deterministic_repeat"] = bool(np.array_equal(a, b_))
    result["in_unit_range"] = bool(np.all(np.abs(a) <= 1.0))
    _write(out, "gpu", result)
    return result


# ----------------------------------------------------------------------------- libero


def _gl_renderer(env) -> str | None:
    try:
        env._gl.make_current()
        from OpenGL import GL

        return "; ".join(
            (GL.glGetString(k) or b"?").decode("ascii", "replace") for k in (GL.GL_VENDOR, GL.GL_RENDERER, GL.GL_VERSION)
        )
    except Exception as exc:  # diagnostic only
        return f"unknown ({type(exc).__name__}: {exc})"


def bench_libero(out: Path, steps: int = 50, resets: int = 3, resolution: int = 256, fast_steps: int = 30) -> dict:
    import numpy as np

    result: dict = {"resolution": resolution, "suite": "libero_spatial", "MUJOCO_GL": os.environ.get("MUJOCO_GL")}
    t0 = time.perf_counter()
    from wam_libero.env import LiberoEnv
    from wam_libero.upstream import import_simulator

    import_simulator()
    result["import_s"] = round(time.perf_counter() - t0, 2)

    t0 = time.perf_counter()
    env = LiberoEnv(suite="libero_spatial", task=0, resolution=resolution)
    result["create_s_first"] = round(time.perf_counter() - t0, 2)
    result["gl"] = _gl_renderer(env)
    _write(out, "libero", result)

    reset_s = []
    for i in range(resets):
        t0 = time.perf_counter()
        obs = env.reset(seed=0, init_state=i)
        reset_s.append(round(time.perf_counter() - t0, 3))
    result["reset_s"] = reset_s
    result["reset_includes"] = f"soft reset + set_init_state + {env.settle_steps} settle steps (rendered)"
    result["image_shapes"] = {k: list(v.shape) for k, v in obs.images.items()}
    result["image_mean"] = {k: round(float(v.mean()), 2) for k, v in obs.images.items()}  # ~0 would mean black frames
    _write(out, "libero", result)

    rng = np.random.default_rng(0)
    actions = rng.uniform(-0.3, 0.3, size=(steps, 7)).astype(np.float32)
    actions[:, 6] = -1.0
    times = []
    for a in actions:
        t = time.perf_counter()
        env.step(a)
        times.append(time.perf_counter() - t)
    result["step_2cam"] = _stats_ms(times)
    t = time.perf_counter()
    env.observe()
    result["observe_ms"] = round((time.perf_counter() - t) * 1000, 3)
    env.close()
    _write(out, "libero", result)

    # a second env (another task), fast render: warm create time and fast-render step time
    t0 = time.perf_counter()
    env = LiberoEnv(suite="libero_spatial", task=1, resolution=resolution, fast_render=True)
    result["create_s_second_fast_render"] = round(time.perf_counter() - t0, 2)
    t0 = time.perf_counter()
    env.reset(seed=0, init_state=0)
    result["reset_s_second"] = round(time.perf_counter() - t0, 3)
    times = []
    for a in actions[:fast_steps]:
        t = time.perf_counter()
        env.step(a)
        times.append(time.perf_counter() - t)
    result["step_2cam_fast_render"] = _stats_ms(times)
    env.close()
    _write(out, "libero", result)
    return result


# ----------------------------------------------------------------------------- parallel


def _worker(index: int, steps: int, resolution: int, barrier, queue) -> None:
    try:
        import numpy as np

        from wam_libero.env import LiberoEnv

        t0 = time.perf_counter()
        env = LiberoEnv(suite="libero_spatial", task=index % 10, resolution=resolution)
        create = time.perf_counter() - t0
        t0 = time.perf_counter()
        env.reset(seed=index, init_state=0)
        reset = time.perf_counter() - t0
        rng = np.random.default_rng(index)
        actions = rng.uniform(-0.3, 0.3, size=(steps, 7)).astype(np.float32)
        actions[:, 6] = -1.0
        barrier.wait(timeout=300)
        times = []
        t_all = time.perf_counter()
        for a in actions:
            t = time.perf_counter()
            env.step(a)
            times.append(time.perf_counter() - t)
        wall = time.perf_counter() - t_all
        env.close()
        queue.put({"index": index, "create_s": create, "reset_s": reset, "steps_wall_s": wall,
                   "step_median_ms": statistics.median(times) * 1000})
    except Exception as exc:  # reported, not raised: the parent collects what it can
        queue.put({"index": index, "error": f"{type(exc).__name__}: {exc}"})
        try:
            barrier.abort()
        except Exception:
            pass


def bench_parallel(out: Path, procs=(4, 8, 16), steps: int = 30, resolution: int = 256, deadline_s: float = 1e9) -> dict:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    result: dict = {"steps": steps, "resolution": resolution, "runs": {}}
    start = time.perf_counter()
    for n in procs:
        if time.perf_counter() - start > deadline_s:
            result["runs"][str(n)] = "skipped (deadline)"
            break
        barrier, queue = ctx.Barrier(n), ctx.Queue()
        t0 = time.perf_counter()
        ps = [ctx.Process(target=_worker, args=(i, steps, resolution, barrier, queue)) for i in range(n)]
        for p in ps:
            p.start()
        rows = []
        for _ in range(n):
            try:
                rows.append(queue.get(timeout=240))
            except Exception:
                break
        for p in ps:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
        ok = [r for r in rows if "error" not in r]
        run = {"procs": n, "ok": len(ok), "errors": [r["error"] for r in rows if "error" in r][:3],
               "wall_s": round(time.perf_counter() - t0, 2)}
        if ok:
            run["create_s_median"] = round(statistics.median(r["create_s"] for r in ok), 2)
            run["create_s_max"] = round(max(r["create_s"] for r in ok), 2)
            run["reset_s_median"] = round(statistics.median(r["reset_s"] for r in ok), 2)
            run["step_median_ms"] = round(statistics.median(r["step_median_ms"] for r in ok), 2)
            slowest = max(r["steps_wall_s"] for r in ok)
            run["aggregate_steps_per_s"] = round(len(ok) * steps / slowest, 1)
        result["runs"][str(n)] = run
        _write(out, "parallel", result)
    return result


# ----------------------------------------------------------------------------- main


def merge(out: Path) -> dict:
    merged = {}
    for f in sorted(out.glob("*.json")):
        if f.name == "results.json":
            continue
        try:
            merged[f.stem] = json.loads(f.read_text())
        except ValueError as exc:
            merged[f.stem] = f"unreadable: {exc}"
    _write(out, "results", merged)
    return merged


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("gpu", "libero", "parallel", "merge"))
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench-out")))
    ap.add_argument("--procs", default="4,8,16")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--deadline-s", type=float, default=1e9, help="parallel: start no new N after this many seconds")
    ap.add_argument("--am-option", action="append", default=[], help="gpu: bench-dit option KEY=VALUE (typed)")
    args = ap.parse_args(argv)
    if args.what == "gpu":
        from wamcore.runtime import typed_options

        import gpu_wam

        opts = typed_options(gpu_wam.BENCH_DIT, dict(kv.split("=", 1) for kv in args.am_option))
        r = bench_gpu(args.out, options=opts)
    elif args.what == "libero":
        r = bench_libero(args.out, steps=args.steps or 50)
    elif args.what == "parallel":
        r = bench_parallel(args.out, procs=[int(x) for x in args.procs.split(",") if x], steps=args.steps or 30,
                           deadline_s=args.deadline_s)
    else:
        r = merge(args.out)
    print(json.dumps(r, sort_keys=True, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
