"""Predictions per second of a model worker serving S concurrent sessions, with dynamic
batching (up to ``--max-batch``) against batching off, measured in one run.

Self-contained: it starts each worker itself (``sys.executable -m wamcore serve`` on
127.0.0.1, port 0, ``--parent-watch``) and S client processes, each with its own session
and its own observations from the platform's env; nothing leaves the host. Defaults: the
reference WAM on PointMass, 16 sessions, batches of up to 16::

    python bench/batching.py --device cuda --sessions 16 --seconds 20 --rounds 3
    python bench/batching.py --device cpu --sessions 4 --seconds 5 --json

Each round runs both modes (order alternating between rounds) for ``--seconds`` after a
warm-up; predictions/s counts answers received by all clients in that time. The ratio is
computed per round, and the median over rounds reported. The worker's ``health()`` gives
the batch sizes it actually formed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def start_worker(args, window_ms: float, max_batch: int, tmp: str) -> tuple:
    ready = Path(tmp) / f"ready-{window_ms}-{time.monotonic_ns()}.json"
    log = open(Path(tmp) / f"{ready.stem}.log", "wb")
    argv = [sys.executable, "-m", "wamcore", "serve", "--am-backend", args.am_backend, "--platform", args.platform,
            "--host", "127.0.0.1", "--port", "0", "--parent-watch", "--ready-file", str(ready),
            "--batch-window-ms", str(window_ms), "--max-batch", str(max_batch)]
    if args.device:
        argv += ["--device", args.device]
    argv += args.serve_arg
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 600
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            sys.exit(f"worker failed to start:\n{Path(log.name).read_text()}")
        time.sleep(0.05)
    return proc, json.loads(ready.read_text()), log


def stop_worker(proc, log) -> None:
    proc.stdin.close()  # --parent-watch: stdin EOF stops it
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


def client(index: int, endpoint: str, platform_id: str, start_at: float, measure_from: float, end_at: float,
           ready, results) -> None:
    """One session: predict as fast as answers come, count those received in the window."""
    from wamcore.contracts import PredictRequest
    from wamcore.registry import default_registry
    from wamcore.rpc import RemoteModel

    platform = default_registry().platform(platform_id)
    env = platform.create()
    requests = [PredictRequest(env.reset(seed=1000 * index + k)) for k in range(8)]
    env.close()
    with RemoteModel(endpoint).bind(platform) as model:
        model.predict(requests[0])
        ready.put(index)
        while time.monotonic() < start_at.value:
            time.sleep(0.001)
        count, latencies, sizes, k = 0, [], [], 0
        while True:
            t0 = time.monotonic()
            if t0 >= end_at.value:
                break
            pred = model.predict(requests[k % len(requests)])
            k += 1
            t1 = time.monotonic()
            if t0 >= measure_from.value:
                count += 1
                latencies.append(t1 - t0)
                sizes.append(pred.timing.get("batch_size", 1))
    results.put({"count": count, "p50_ms": float(np.percentile(latencies, 50) * 1000) if latencies else None,
                 "batch": float(np.mean(sizes)) if sizes else None})


def measure(args, window_ms: float, max_batch: int, tmp: str) -> dict:
    proc, record, log = start_worker(args, window_ms, max_batch, tmp)
    ctx = mp.get_context("spawn")
    ready, results = ctx.Queue(), ctx.Queue()
    start_at, measure_from, end_at = (ctx.Value("d", float("inf")) for _ in range(3))
    procs = [ctx.Process(target=client, args=(i, record["endpoint"], args.platform, start_at, measure_from, end_at,
                                              ready, results), daemon=True) for i in range(args.sessions)]
    try:
        for p in procs:
            p.start()
        for _ in procs:
            ready.get(timeout=600)
        now = time.monotonic()
        measure_from.value, end_at.value = now + 0.2 + args.warmup, now + 0.2 + args.warmup + args.seconds
        start_at.value = now + 0.2
        rows = [results.get(timeout=args.warmup + args.seconds + 600) for _ in procs]
        for p in procs:
            p.join(60)
        from wamcore.rpc import RemoteModel

        with RemoteModel(record["endpoint"]) as probe:
            batching = probe.health()["batching"]
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        stop_worker(proc, log)
    total = sum(r["count"] for r in rows)
    return {"window_ms": window_ms, "max_batch": max_batch, "predictions": total,
            "per_s": total / args.seconds, "p50_ms": statistics.median(r["p50_ms"] for r in rows if r["p50_ms"]),
            "mean_batch": statistics.mean(r["batch"] for r in rows if r["batch"]), "device": record["device"],
            "worker_batches": batching}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--am-backend", default="pointmass-wam")
    ap.add_argument("--platform", default="pointmass")
    ap.add_argument("--device", choices=("cpu", "cuda"), default=None,
                    help="passed to the worker as the backend's --device (default: the backend's own default)")
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=10.0, help="measured time per mode and round")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds of predictions before measuring")
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--window-ms", type=float, default=2.0, help="--batch-window-ms of the batching worker")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--serve-arg", action="append", default=[], help="extra `wam serve` argument (repeatable)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = ap.parse_args(argv)
    modes = {"off": (0.0, 1), "on": (args.window_ms, args.max_batch)}
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = ["off", "on"] if r % 2 == 0 else ["on", "off"]
            row = {mode: measure(args, *modes[mode], tmp) for mode in order}
            row["ratio"] = row["on"]["per_s"] / row["off"]["per_s"]
            rounds.append(row)
            if not args.json:
                print(f"round {r}: off {row['off']['per_s']:.1f}/s, on {row['on']['per_s']:.1f}/s "
                      f"(mean batch {row['on']['mean_batch']:.2f}), ratio {row['ratio']:.2f}x", flush=True)
    summary = {
        "backend": args.am_backend, "platform": args.platform, "device": rounds[0]["on"]["device"],
        "sessions": args.sessions, "seconds": args.seconds, "rounds": rounds,
        "off_per_s": statistics.median(r["off"]["per_s"] for r in rounds),
        "on_per_s": statistics.median(r["on"]["per_s"] for r in rounds),
        "ratio": statistics.median(r["ratio"] for r in rounds),
        "host": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
    }
    if args.json:
        print(json.dumps(summary))
        return
    print()
    print(f"{args.am_backend} on {summary['device']}, {args.sessions} sessions, {args.seconds:g} s per mode, "
          f"median of {args.rounds} round(s)")
    print("| batching | window ms | max batch | predictions/s | mean batch | p50 ms |")
    print("|---|---|---|---|---|---|")
    for mode in ("off", "on"):
        per_s = statistics.median(r[mode]["per_s"] for r in rounds)
        batch = statistics.median(r[mode]["mean_batch"] for r in rounds)
        p50 = statistics.median(r[mode]["p50_ms"] for r in rounds)
        window, max_batch = modes[mode]
        print(f"| {mode} | {window:g} | {max_batch} | {per_s:.1f} | {batch:.2f} | {p50:.2f} |")
    print(f"\nbatching on / off: {summary['ratio']:.2f}x predictions per second")


if __name__ == "__main__":
    main()
