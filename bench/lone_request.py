"""Does a batching worker hold a lone request back? One session, batch window W against 0.

Two workers of the same model run side by side (``--batch-window-ms W`` with the model's
``max_batch``, and ``--batch-window-ms 0``), one client session each, and the client
alternates single predictions between them (A, B, A, B, ...) so both see the same load of a
shared machine. Reported: p50 / p90 latency per worker, the p50 ratio (batching / off), and
the batch sizes the batching worker formed (all 1: each request ran alone, on arrival)::

    python bench/lone_request.py --device cpu --pairs 400
    python bench/lone_request.py --device cuda --json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

from batching import start_worker, stop_worker  # bench/ is this script's folder


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--am-backend", default="pointmass-wam")
    ap.add_argument("--platform", default="pointmass")
    ap.add_argument("--device", choices=("cpu", "cuda"), default=None)
    ap.add_argument("--window-ms", type=float, default=2.0)
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--pairs", type=int, default=400, help="measured predictions per worker")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--serve-arg", action="append", default=[])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    from wamcore.contracts import PredictRequest
    from wamcore.registry import default_registry
    from wamcore.rpc import RemoteModel

    platform = default_registry().platform(args.platform)
    env = platform.create()
    requests = [PredictRequest(env.reset(seed=k)) for k in range(8)]
    env.close()
    modes = {"batching": (args.window_ms, args.max_batch), "off": (0.0, 1)}
    latencies = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        workers = {m: start_worker(args, *modes[m], tmp) for m in modes}
        try:
            models = {m: RemoteModel(workers[m][1]["endpoint"]).bind(platform) for m in modes}
            try:
                for k in range(args.warmup + args.pairs):
                    order = ("batching", "off") if k % 2 == 0 else ("off", "batching")
                    for m in order:
                        t0 = time.perf_counter()
                        models[m].predict(requests[k % len(requests)])
                        if k >= args.warmup:
                            latencies[m].append((time.perf_counter() - t0) * 1000.0)
                health = {m: models[m].health()["batching"] for m in modes}
                device = models["batching"].info.device
            finally:
                for model in models.values():
                    model.close()
        finally:
            for proc, _, log in workers.values():
                stop_worker(proc, log)
    rows = {m: {"window_ms": modes[m][0], "max_batch": modes[m][1], "p50_ms": float(np.percentile(v, 50)),
                "p90_ms": float(np.percentile(v, 90)), "worker_batches": health[m]} for m, v in latencies.items()}
    summary = {"backend": args.am_backend, "platform": args.platform, "device": device, "pairs": args.pairs,
               "modes": rows, "p50_ratio": rows["batching"]["p50_ms"] / rows["off"]["p50_ms"],
               "host": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}}
    if args.json:
        print(json.dumps(summary))
        return
    print(f"{args.am_backend} on {device}, one session per worker, {args.pairs} alternating predictions each")
    print("| worker | window ms | max batch | p50 ms | p90 ms | batch sizes formed |")
    print("|---|---|---|---|---|---|")
    for m, r in rows.items():
        print(f"| {m} | {r['window_ms']:g} | {r['max_batch']} | {r['p50_ms']:.3f} | {r['p90_ms']:.3f} | "
              f"{r['worker_batches']['sizes'] or '-'} |")
    print(f"\np50 latency, batching / off: {summary['p50_ratio']:.3f}x")


if __name__ == "__main__":
    main()
