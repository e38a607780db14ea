"""Fast-WAM RoboTwin per-observation cost at batch 1..16, eager and with ``--cuda-graphs``, and how
far it is from the GPU's limit.

In one process, random weights generated in place (``wam_fastwam.testweights.generate``,
full size by default, text cache): the model loaded as the worker loads it
(``load_robotwin``), then

1. the card's bf16 matmul rate (8192^3, median of 20) measured in this run;
2. FLOPs of one observation's chunk (``torch.utils.flop_counter.FlopCounterMode`` around
   upstream's ``infer_action``);
3. per batch size B: ``predict_native_batch`` on B distinct observations, p50 of ``--calls``
   after ``--warmup`` (synchronised), ms per call and per observation, utilisation (FLOPs x B
   over time against the measured rate), peak memory, and the largest difference of a batched
   row from that observation's chunk alone (upstream's ``infer_action``);
4. batch 1 of the composed path against ``infer_action``: equal or not;
5. on CUDA (unless ``--no-graphs``), the same rows again with the batched path replayed from CUDA
   graphs (``BatchedInference.use_cuda_graphs``, what ``--cuda-graphs`` turns on): ms per call
   and per observation, utilisation, the first call's time (it captures the bucket), and the
   largest difference of a row from the eager batched row at the same batch size.

The JSON is rewritten after every batch size (a timeout keeps what was measured)::

    python3 plugins/fastwam/bench/batch_latency.py --out $OUT/fastwam_batch.json      # H200
    python3 plugins/fastwam/bench/batch_latency.py --device cpu --layers 2 --width 256 --steps 2 \\
        --sizes 1,2 --calls 1 --warmup 0 --out /tmp/fwb.json                           # CPU check
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from upstream_latency import TASK, observation, options  # noqa: E402


def matmul_tflops(torch, device: str) -> float:
    n = 8192 if device == "cuda" else 1024
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    times = []
    for _ in range(23):
        sync(torch, device)
        t = time.perf_counter()
        a @ b
        sync(torch, device)
        times.append(time.perf_counter() - t)
    return 2 * n**3 / float(np.median(times[3:])) / 1e12


def sync(torch, device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="fastwam_batch.json")
    ap.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "fastwam-batch-bench"))
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--width", type=int, default=0)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--sizes", default="1,2,4,8,16")
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--no-graphs", action="store_true", help="skip the CUDA-graph rows")
    args = ap.parse_args()
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from wamcore import ModelConfig, PredictRequest
    from wam_fastwam.robotwin import compose_cameras
    from wam_fastwam.testweights import generate
    from wam_fastwam.worker import load_robotwin

    files = generate(Path(args.work) / "weights", layers=args.layers, width=args.width, seed=0, instructions=[TASK],
                     device=args.device, text_encoder=False)
    os.environ["DIFFSYNTH_MODEL_BASE_PATH"] = files["diffsynth_model_base_path"]
    os.environ["DIFFSYNTH_SKIP_DOWNLOAD"] = "true"
    args.text_encoder = False
    native = load_robotwin(ModelConfig(platform="robotwin", checkpoint=files["checkpoint"],
                                       options=options(files, args), device=args.device))
    result = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu",
              "layers": args.layers or "full", "width": args.width or "full", "steps": args.steps,
              "parameters_b": round(sum(p.numel() for p in native.model.parameters()) / 1e9, 3),
              "max_batch": native.max_batch, "batching": native.details["batching"], "rows": []}
    result["matmul_tflops"] = round(matmul_tflops(torch, args.device), 1)

    def natives(n):
        out = []
        for i in range(n):
            obs = observation(i)
            out.append({"image": compose_cameras(obs.images["head"], obs.images["left_wrist"], obs.images["right_wrist"]),
                        "state": obs.state["joint_targets"].astype(np.float32), "instruction": TASK})
        return out

    requests = [PredictRequest(observation(i), seed=100 + i) for i in range(max(map(int, args.sizes.split(","))))]
    singles = natives(len(requests))
    with FlopCounterMode(display=False) as counter:
        alone0 = native.predict_native(singles[0], requests[0])
    result["gflop_per_observation"] = round(counter.get_total_flops() / 1e9, 1)
    alone = [alone0] + [native.predict_native(n, r) for n, r in zip(singles[1:], requests[1:])]
    result["batch1_equals_infer_action"] = bool(np.array_equal(native.predict_native_batch(singles[:1], requests[:1])[0],
                                                               alone0))
    sizes = [int(b) for b in args.sizes.split(",")]

    def rows(key: str, reference=None) -> dict:
        """One row per batch size into ``result[key]``; ``reference``: eager outputs per size."""
        outputs = {}
        for b in sizes:
            if args.device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            times = []
            for i in range(1 + args.warmup + args.calls):  # call 0: the first (with graphs: the capture)
                sync(torch, args.device)
                t = time.perf_counter()
                outs = native.predict_native_batch(singles[:b], requests[:b])
                sync(torch, args.device)
                times.append((time.perf_counter() - t) * 1000)
            call_ms = float(np.median(times[1 + args.warmup:]))
            row = {"batch": b, "ms_per_call": round(call_ms, 1), "ms_per_observation": round(call_ms / b, 2),
                   "first_call_ms": round(times[0], 1),
                   "utilisation_pct": round(100 * result["gflop_per_observation"] * b / (call_ms / 1000) / 1000
                                            / result["matmul_tflops"], 3),
                   "max_abs_diff_vs_alone": float(max(np.abs(o - a).max() for o, a in zip(outs, alone))),
                   "peak_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2) if args.device == "cuda" else None}
            if reference is not None:
                row["max_abs_diff_vs_eager"] = float(max(np.abs(o - e).max() for o, e in zip(outs, reference[b])))
            outputs[b] = outs
            result[key].append(row)
            print(key, json.dumps(row), flush=True)
            Path(args.out).write_text(json.dumps(result, indent=1))
        return outputs

    eager = rows("rows")
    if args.device != "cuda" or args.no_graphs:
        result["graphs"] = "not run: " + ("--no-graphs" if args.no_graphs else "no CUDA (--cuda-graphs is refused off CUDA)")
    else:
        result["graph_rows"] = []
        native.batched.use_cuda_graphs()
        rows("graph_rows", reference=eager)
        result["graph_buckets_captured"] = native.batched.graphed.captured
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
