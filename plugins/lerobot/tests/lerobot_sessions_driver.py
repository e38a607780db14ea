"""The plugin's own session handling, in the model environment: each session keeps its own
queues and random stream, a reset starts them again. Writes the actions as JSON.

Usage: python lerobot_sessions_driver.py POLICY_DIR OUT.json
"""

from __future__ import annotations

import json
import sys

import numpy as np

from wamcore import Observation, PredictRequest
from wamcore.specs import ModelConfig

from wam_lerobot.plugin import MODEL
from wam_lerobot.worker import load


def main(path: str, out: str) -> None:
    config = ModelConfig(platform="libero", checkpoint=path)
    adapter = MODEL.resolve(config).adapter_for("libero")
    model = load(config)
    rng = np.random.default_rng(0)

    def request(seed):
        images = {role: rng.integers(0, 255, (64, 64, 3), dtype=np.uint8) for role in ("primary", "wrist")}
        state = {"eef_position": rng.normal(size=3), "eef_quaternion_xyzw": np.array([1.0, 0, 0, 0]),
                 "gripper_qpos": np.array([0.02, -0.02])}
        return PredictRequest(observation=Observation(images=images, state=state, instruction="put the bowl"), seed=seed)

    def step(req, session):
        return model.predict_native(adapter.encode(req), req, session=session)[0].tolist()

    requests = [request(5) for _ in range(6)]
    alone = [step(r, "a") for r in requests]
    model.reset("a")
    interleaved_a, interleaved_b = [], []
    for r in requests:  # b sees other observations with another seed between a's steps
        interleaved_a.append(step(r, "a"))
        interleaved_b.append(step(request(9), "b"))
    model.reset("a")
    other_seed = [step(PredictRequest(observation=r.observation, seed=6), "a") for r in requests]
    with open(out, "w") as f:
        json.dump({"alone": alone, "interleaved_a": interleaved_a, "interleaved_b": interleaved_b,
                   "other_seed": other_seed}, f)


if __name__ == "__main__":
    main(*sys.argv[1:3])
