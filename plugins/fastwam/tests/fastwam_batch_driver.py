"""Concurrent sessions against one spawned Fast-WAM worker (upstream FastWAM 45d8e14, reduced-depth
random weights, ``.venv-fastwam``): each session's chunk alone (upstream's ``infer_action``)
and in batches of 2 and 5 sessions (``predict_native_batch``); a malformed observation and an
instruction without a text-cache entry inside a batch. Writes what happened as JSON.

Run by ``test_fastwam_batching.py`` with the test environment's Python. The batch window is a
minute: a batch closes because every open session is in it, never because of timing.

Usage: python fastwam_batch_driver.py ARGS.json OUT.json, ARGS = {fastwam_python, weights_root, log_dir}.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

from wamcore import Observation, PredictRequest
from wamcore.testing import run_concurrently
from wamcore.registry import Registry
from wamcore.rpc import RemoteModel
from wamcore.runtime import WorkerConfig, open_model

import wam_fastwam.testweights as generator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fastwam_real_driver import test_weights  # noqa: E402

INSTRUCTION = "Hit the block with the small hammer."
MISSING = "stack the cups in a pyramid"  # no text-cache entry
#: (observation, seed) per session of the batch of 5: sessions 0 and 3 see the same observation
CASES = [(0, 11), (1, 12), (2, 13), (0, 14), (3, 15)]


def observation(index: int, instruction: str = INSTRUCTION) -> Observation:
    rng = np.random.default_rng(100 + index)
    return Observation(
        images={r: rng.integers(0, 256, (240, 320, 3), dtype=np.uint8) for r in ("head", "left_wrist", "right_wrist")},
        state={"joint_targets": rng.uniform(-0.5, 0.5, 14), "joint_positions": np.zeros(12), "left_eef_pose": np.zeros(7),
               "right_eef_pose": np.zeros(7), "left_gripper": np.ones(1), "right_gripper": np.ones(1)},
        instruction=instruction)


def concurrently(models, jobs):
    """``job(model)`` for each model at once; the result or the exception, per job."""
    return run_concurrently(models, jobs, timeout_s=900)


def chunk(pred):
    if isinstance(pred, Exception):
        return {"error": type(pred).__name__, "message": str(pred)}
    return {"actions": np.asarray(pred.actions).tolist(), "batch_size": pred.timing.get("batch_size")}


def main(args_path: str, out_path: str) -> None:
    args = json.loads(Path(args_path).read_text())
    import wam_fastwam.plugin  # here, not at import: fastwam_graph_driver imports this module in the model
    import wam_robotwin.plugin  # environment, which has no RoboTwin platform

    registry = Registry(entry_points=False)
    registry.register(wam_robotwin.plugin, name="robotwin")
    registry.register(wam_fastwam.plugin, name="fastwam")
    platform = registry.platform("robotwin")
    weights = test_weights(args["fastwam_python"], Path(args["weights_root"]), INSTRUCTION)
    marker = json.loads((weights / "FASTWAM_RANDOM_TEST_WEIGHTS.json").read_text())
    os.environ["DIFFSYNTH_MODEL_BASE_PATH"] = str(weights / "diffsynth")  # the worker inherits both
    os.environ["DIFFSYNTH_SKIP_DOWNLOAD"] = "true"
    config = WorkerConfig.from_options(
        platform="robotwin", am_backend="fast-wam", am_python=args["fastwam_python"],
        am_checkpoint=str(weights / generator.CHECKPOINT), batch_window_ms=60000.0, timeout_s=900.0,
        backend_options={"text_cache": str(weights / "text_cache"), "fastwam_override": marker["fastwam_overrides"],
                         "num_inference_steps": 2, "replan_steps": 8},
        log_dir=args["log_dir"], start_timeout_s=600,
    )
    first = open_model(config, platform, registry=registry)  # one session, the only one open for now
    record: dict = {"details": first.info.details}
    try:
        def request(index, seed, instruction=INSTRUCTION):
            obs = observation(index, instruction).select(first.contract.cameras, first.contract.state)
            return PredictRequest(obs, seed=seed)

        # alone: a lone session's request runs at once, through upstream's infer_action
        record["alone"] = [chunk(first.predict(request(i, s))) for i, s in CASES]
        others = [RemoteModel(first.endpoint, timeout_s=900.0).bind(platform) for _ in range(4)]
        try:
            sessions = [first, *others]
            for n in (2, 5):
                for m in sessions[n:]:  # only the n sessions of this round are open
                    m.close()
                preds = concurrently(sessions[:n], [lambda m, c=c: m.predict(request(*c)) for c in CASES[:n]])
                record[f"batch{n}"] = [chunk(p) for p in preds]
                if n == 2:
                    sessions[2:] = [RemoteModel(first.endpoint, timeout_s=900.0).bind(platform) for _ in range(3)]
            nan = request(1, 12).to_wire()
            nan["observation"]["state"]["joint_targets"][3] = np.nan
            for m in sessions[3:]:
                m.close()
            mixed = concurrently(sessions[:3], [
                lambda m: m.predict(request(*CASES[0])),
                lambda m: m._session_call("predict", {"request": nan}, 900.0),  # past the client's own checks
                lambda m: m.predict(request(2, 13, MISSING)),
            ])
            record["mixed"] = [chunk(p) for p in mixed]
            record["health"] = first.health()["batching"]
        finally:
            for m in others + sessions[1:]:
                m.close()
    finally:
        first.close()
    Path(out_path).write_text(json.dumps(record, default=str))


if __name__ == "__main__":
    main(*sys.argv[1:3])
