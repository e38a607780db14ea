"""End to end: a real WAM on LIBERO with N env processes, against the simulators alone.

Three evaluations of the same episodes (``bench/eval_throughput.py``, one worker each, the
same ``--max-chunks`` and chunk length, so every episode runs the same number of steps unless
it succeeds):

1. ``sim``: the ``libero-smoke`` model (no model work: the simulators' own bound), ``chunk``
   equal to the model's executed chunk;
2. ``batched``: the model, its worker batching the envs' requests (default window);
3. ``unbatched``: the same with ``--batch-window-ms 0``;
4. ``graphs`` (only when asked, ``--stages``): batched with the model's ``cuda_graphs`` option.

With ``--model starwam`` a ``weights`` stage first generates full-size random StarWAM weights
on the GPU (``wam_starwam.testweights.generate``, bf16) with a text-cache entry for the
instruction of every task evaluated. Each stage writes ``OUT/<stage>.json`` as soon as it ends
(a stage that fails or times out writes its error and the others still run), and
``OUT/summary.json`` holds the ratios: wall time per episode of the model against the
simulators (target: <= 1.25), episodes/hour, GPU busy (NVML over the measured interval, and
``nvidia-smi`` sampled over the whole stage) and where the bound lies::

    # H200 host (bench/device/call_e2e.sh wraps it)
    python3 bench/e2e_libero.py --model starwam --num-envs 14 --out $OUT
    # CPU, reduced depth: the logic of the same stages
    python bench/e2e_libero.py --model starwam --layers 2 --device cpu --num-envs 2 --max-chunks 1 \\
        --episodes-per-env 1 --model-python .venv-starwam/bin/python --out /tmp/e2e
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: executed actions per chunk of each model on LIBERO (the smoke model's chunk is set to it)
CHUNK = {"starwam": 10, "pointmass-wam": None}


def nvidia_smi_sampler(path: Path):
    try:
        return subprocess.Popen(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                                 "-lms", "200"], stdout=path.open("w"), stderr=subprocess.DEVNULL)
    except OSError:
        return None


def busy_from(path: Path):
    values = [float(x) for x in path.read_text().split() if x.replace(".", "", 1).isdigit()] if path.exists() else []
    return round(sum(values) / len(values) / 100.0, 3) if values else None


def run_stage(name: str, argv: list, out: Path, timeout_s: float) -> dict:
    """One ``eval_throughput.py`` run; its JSON (or its failure) lands in ``out/<name>.json``."""
    t0 = time.perf_counter()
    smi = nvidia_smi_sampler(out / f"{name}.smi")
    record: dict = {"stage": name, "argv": argv}
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
        record.update(returncode=proc.returncode, stdout_tail=proc.stdout[-3000:], stderr_tail=proc.stderr[-3000:])
        result = out / f"{name}.eval.json"
        if proc.returncode == 0 and result.exists():
            record["eval"] = json.loads(result.read_text())
    except subprocess.TimeoutExpired as exc:
        record.update(error=f"timed out after {timeout_s:g} s", stderr_tail=(exc.stderr or b"")[-3000:].decode(errors="replace"))
    finally:
        if smi is not None:
            smi.terminate()
            smi.wait()
    record["stage_s"] = round(time.perf_counter() - t0, 1)
    record["gpu_busy_stage_smi"] = busy_from(out / f"{name}.smi")
    (out / f"{name}.json").write_text(json.dumps(record, indent=1, default=str))
    print(f"[{name}] {record['stage_s']} s, rc={record.get('returncode')}, {record.get('error', '')}", flush=True)
    return record


def generate_starwam(args, out: Path) -> dict:
    """Full-size (or ``--layers``) random StarWAM LIBERO weights with the tasks' instructions cached."""
    t0 = time.perf_counter()
    from wam_libero.suites import parse_suites
    from wam_libero.upstream import import_simulator, load_task
    from wam_starwam.testweights import generate

    sim = import_simulator()
    (suite,) = parse_suites(args.suite)
    tasks = [int(t) for t in args.tasks.split(",")]
    instructions = sorted({load_task(sim, suite, t).language for t in tasks})
    files = generate(args.work / "starwam-weights", platform="libero", layers=args.layers, width=args.width, seed=0,
                     instructions=instructions, device=args.device,
                     dtype="bfloat16" if args.device == "cuda" else "float32")
    record = {"stage": "weights", "stage_s": round(time.perf_counter() - t0, 1), "instructions": instructions,
              "files": {k: str(v) for k, v in files.items()}}
    (out / "weights.json").write_text(json.dumps(record, indent=1, default=str))
    print(f"[weights] {record['stage_s']} s", flush=True)
    return files


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="starwam")
    ap.add_argument("--platform", default="libero")
    ap.add_argument("--suite", default="libero_spatial")
    ap.add_argument("--tasks", default="0,1,2,3,4,5,6,7,8,9", help="the wheelhouse of bench/device serves 0-9")
    ap.add_argument("--num-envs", type=int, default=14, help="env processes (the H200 host has 16 cores)")
    ap.add_argument("--episodes-per-env", type=int, default=1)
    ap.add_argument("--max-chunks", type=int, default=8, help="chunks per episode, the same in every stage")
    ap.add_argument("--layers", type=int, default=0, help="StarWAM depth, 0: full size")
    ap.add_argument("--width", type=int, default=256, help="StarWAM width at reduced depth")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--model-python", default=sys.executable, help="the model worker's Python")
    ap.add_argument("--model-option", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--stages", default="sim,batched,unbatched")
    ap.add_argument("--timeout", type=float, default=150.0, help="seconds per evaluation stage")
    ap.add_argument("--deadline", type=float, default=None,
                    help="seconds for the whole run: each stage gets at most what is left, less 10 s for the summary")
    ap.add_argument("--out", default="e2e-out")
    ap.add_argument("--work", default="/tmp/wam-e2e")
    args = ap.parse_args(argv)
    started = time.monotonic()
    out, args.work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)

    platform_set = [] if args.platform != "libero" else ["--set", f"suite={args.suite}", "--set", f"task={args.tasks}"]
    common = [sys.executable, str(HERE / "eval_throughput.py"), "--platform", args.platform, *platform_set,
              "--max-chunks", str(args.max_chunks), "--num-envs", str(args.num_envs),
              "--episodes-per-env", str(args.episodes_per_env), "--warmup", "0"]
    model = [*common, "--backend", args.model, "--am-python", args.model_python]
    for pair in args.model_option:
        model += ["--am-option", pair]
    if args.device == "cuda":
        model += ["--cuda-device", os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]]
    stages = args.stages.split(",")
    if args.model == "starwam":
        try:
            files = generate_starwam(args, out)
        except Exception as exc:  # the simulators' stage still runs and reports
            (out / "weights.json").write_text(json.dumps({"stage": "weights", "error": f"{type(exc).__name__}: {exc}"}))
            print(f"[weights] FAILED: {type(exc).__name__}: {exc}", flush=True)
            files, stages = None, [s for s in stages if s == "sim"]
    if args.model == "starwam" and files is not None:
        model += ["--am-checkpoint", str(files["checkpoint"]), "--am-option", f"backbone={files['backbone']}",
                  "--am-option", f"action_stats={files['action_stats']}", "--am-option", f"text_cache={files['text_cache']}"]
    sim = [*common, "--backend", "libero-smoke" if args.platform == "libero" else "random"]
    if CHUNK.get(args.model):
        sim += ["--am-option", f"chunk={CHUNK[args.model]}"]
    argvs = {"sim": sim, "batched": model, "unbatched": [*model, "--batch-window-ms", "0"],
             "graphs": [*model, "--am-option", "cuda_graphs=true"]}  # StarWAM's --cuda-graphs, batching on
    records = {}
    for name in stages:
        log = ["--log-dir", str(args.work / f"logs-{name}"), "--json", str(out / f"{name}.eval.json")]
        left = args.timeout if args.deadline is None else min(args.timeout, args.deadline - (time.monotonic() - started) - 10)
        if left <= 0:
            records[name] = {"stage": name, "error": "skipped: the --deadline was reached"}
            (out / f"{name}.json").write_text(json.dumps(records[name]))
            continue
        records[name] = run_stage(name, argvs[name] + log, out, left)

    def row(name):
        rows = records.get(name, {}).get("eval", {}).get("rows") or [None]
        return rows[0]

    summary = {"model": args.model, "platform": args.platform, "suite": args.suite, "tasks": args.tasks,
               "num_envs": args.num_envs, "max_chunks": args.max_chunks, "cpus": os.cpu_count(),
               "stages": {name: row(name) for name in records}}
    sim_row = row("sim")
    for name in ("batched", "unbatched", "graphs"):
        r = row(name)
        if sim_row and r:
            per_episode = {k: x["wall_s"] / x["episodes"] for k, x in (("model", r), ("sim", sim_row))}
            summary[f"{name}_over_sim_wall_per_episode"] = round(per_episode["model"] / per_episode["sim"], 3)
            summary[f"{name}_mean_steps_vs_sim"] = [r["mean_steps"], sim_row["mean_steps"]]
    ratio = summary.get("batched_over_sim_wall_per_episode")
    if ratio is not None:
        summary["target_1_25x_met"] = ratio <= 1.25
        summary["bound"] = "simulators" if ratio <= 1.25 else "the model worker"
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    print(json.dumps(summary, default=str))


if __name__ == "__main__":
    main()
