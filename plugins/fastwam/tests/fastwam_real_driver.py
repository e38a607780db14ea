"""Drive the real Fast-WAM (upstream FastWAM 45d8e14, random weights) on the RoboTwin stand-in
checkout through a spawned ``wam serve`` worker; write what happened as JSON.

Run by ``test_fastwam_real_upstream.py`` with the test environment's Python, in a process of
its own: RoboTwin's code is imported as the top-level package ``envs``, one checkout per
process, and the robotwin plugin's own tests hold theirs. The worker runs in the model
environment ``.venv-fastwam`` (``bash .ci/install``).

Usage: python fastwam_real_driver.py ARGS.json OUT.json, ARGS = {robotwin_root, fastwam_python,
weights_root, log_dir, missing_instruction, observation_out}.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from wamcore import PredictRequest, wam_act
from wamcore.artifacts import model_identity
from wamcore.registry import Registry
from wamcore.runtime import WorkerConfig, open_model

import wam_fastwam.testweights as generator

STEP_LIMIT = 60
REPLAN = 8  # actions executed per chunk: two chunks stay clear of the stand-in task's success check


def test_weights(fastwam_python: str, root: Path, instruction: str) -> Path:
    """Reduced-depth random weights with a text-cache entry for ``instruction``, generated once
    by the model environment and kept under ``root``, keyed by the generator's source."""
    sources = b"".join(Path(m.__file__).read_bytes() for m in (generator, sys.modules["wam_fastwam.text_cache"]))
    key = hashlib.sha256(sources + instruction.encode("utf-8")).hexdigest()[:12]
    out = root / f"seed0-l2-w256-{key}"
    if not (out / "complete").is_file():
        subprocess.run([fastwam_python, "-m", "wamcore", "fastwam-test-weights", str(out), "--layers", "2", "--width",
                        "256", "--seed", "0", "--instruction", instruction],
                       check=True, timeout=600, stdout=subprocess.DEVNULL)
        (out / "complete").write_text("ok")
    return out


def main(args_path: str, out_path: str) -> None:
    args = json.loads(Path(args_path).read_text())
    import wam_fastwam.plugin  # here, not at import: fastwam_graph_driver imports this module in the model
    import wam_robotwin.plugin  # environment, which has no RoboTwin platform

    registry = Registry(entry_points=False)
    registry.register(wam_robotwin.plugin, name="robotwin")
    registry.register(wam_fastwam.plugin, name="fastwam")
    platform = registry.platform("robotwin")
    options = {"robotwin_root": args["robotwin_root"], "step_limit": STEP_LIMIT}
    env = platform.create(**options)
    record: dict = {}
    try:
        env.reset(seed=0)
        instruction = env.observe().instruction
        t0 = time.perf_counter()
        weights = test_weights(args["fastwam_python"], Path(args["weights_root"]), instruction)
        record["weights_s"] = time.perf_counter() - t0
        marker = json.loads((weights / "FASTWAM_RANDOM_TEST_WEIGHTS.json").read_text())
        os.environ["DIFFSYNTH_MODEL_BASE_PATH"] = str(weights / "diffsynth")  # the worker inherits it
        os.environ["DIFFSYNTH_SKIP_DOWNLOAD"] = "true"
        config = WorkerConfig.from_options(
            platform="robotwin", am_backend="fast-wam", am_python=args["fastwam_python"],
            am_checkpoint=str(weights / generator.CHECKPOINT),
            backend_options={"text_cache": str(weights / "text_cache"), "fastwam_override": marker["fastwam_overrides"],
                             "num_inference_steps": 2, "replan_steps": REPLAN},
            log_dir=args["log_dir"], start_timeout_s=300,
        )
        t0 = time.perf_counter()
        model = open_model(config, platform, registry=registry, observation=platform.observation_spec(options))
        record["load_s"] = time.perf_counter() - t0
        try:
            executed = []
            first = env.observe()  # what wam_act's first request carries
            np.savez(args["observation_out"], instruction=first.instruction,
                     joint_targets=np.asarray(first.state["joint_targets"], np.float64),
                     **{role: first.images[role] for role in ("head", "left_wrist", "right_wrist")})
            start = first.state["joint_targets"].copy()
            t0 = time.perf_counter()
            act = wam_act(model, env, max_chunks=2, seed=3,
                          on_step=lambda step, action, result, prediction: executed.append(np.asarray(action).tolist()))
            record["act_s"] = time.perf_counter() - t0
            try:
                model.predict(PredictRequest(observation=env.observe(), instruction=args["missing_instruction"], seed=3))
                record["missing"] = None
            except Exception as exc:  # the typed error, as the client receives it
                record["missing"] = {"type": type(exc).__name__, "module": type(exc).__module__, "message": str(exc)}
            record.update(
                instruction=instruction,
                details=model.info.details,
                identity=model_identity(model.info, model.contract),
                contract={"chunk_size": model.contract.chunk_size, "horizon": model.contract.horizon,
                          "action_dim": model.contract.action_dim},
                act={"chunks": act.chunks, "steps": act.steps, "stop_reason": act.stop_reason},
                chunks=[np.asarray(p.actions).tolist() for p in act.predictions],
                executed=executed,
                sent=[np.asarray(c[1]["action"]).tolist() for c in env.task.calls if c[0] == "take_action"],
                start_state=start.tolist(),
                end_state=env.observe().state["joint_targets"].tolist(),
                weights=str(weights),
            )
        finally:
            model.close()
    finally:
        env.close()
    Path(out_path).write_text(json.dumps(record, default=str))


if __name__ == "__main__":
    main(*sys.argv[1:3])
