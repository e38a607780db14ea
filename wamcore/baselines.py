"""``random``: the chance baseline of every platform, built from the platform's own ControlSpec.

The registry adds it (unless a plugin registers a model named ``random`` itself) with one
adapter per registered platform, its own and any third party's: actions uniform within the
control's bounds (``[-1, 1]`` on a dimension without bounds); the gripper dimensions take
the convention's ``open`` or ``close`` value, each with probability 1/2, never a value in
between. The control's bounds travel in the native request, so one loader serves every
platform and nothing but numpy is imported.

Seeded per request: from the request's ``seed`` and the observation's step when a seed is
given, else from the observation's content (state vectors, instruction, step), so a run is
reproducible and resumable without state.
"""

from __future__ import annotations

import zlib
from typing import Any, Dict, Iterable

import numpy as np

from .contracts import AdapterContract, Capabilities, ControlSpec, PredictRequest, Prediction
from .specs import Adapter, ModelConfig, ModelSpec, PlatformSpec

NAME = "random"
#: chunk length the baseline returns, clipped to the control's chunk bounds
CHUNK = 8


def chunk_size(control: ControlSpec) -> int:
    return max(control.chunk_min, min(CHUNK, control.chunk_max or CHUNK))


def _encoder(control: ControlSpec, chunk: int):
    dim = control.action_dim
    low = np.asarray(control.low if control.low is not None else [-1.0] * dim, dtype=np.float64)
    high = np.asarray(control.high if control.high is not None else [1.0] * dim, dtype=np.float64)
    gripper = control.gripper

    def encode(request: PredictRequest) -> Dict[str, Any]:
        obs = request.observation
        if request.seed is not None:
            entropy = [int(request.seed) & 0xFFFFFFFF, int(obs.step)]
        else:
            entropy = [zlib.crc32(np.ascontiguousarray(obs.state[k]).tobytes()) for k in sorted(obs.state)]
            entropy += [zlib.crc32(obs.instruction.encode()), int(obs.step)]
        native = {"entropy": entropy, "low": low, "high": high, "chunk": chunk}
        if gripper is not None:
            native["gripper"] = {"indices": list(gripper.indices), "values": [gripper.open, gripper.close]}
        return native

    return encode


def _decode(native: np.ndarray, request: PredictRequest) -> Prediction:
    return Prediction(actions=native)


def adapter_for(platform: PlatformSpec) -> Adapter:
    """The baseline's adapter for one platform: its default control, its state vectors (the
    seed when a request has none), no camera."""
    control = platform.control
    chunk = chunk_size(control)
    contract = AdapterContract(platform=platform.name, action_space=control.action_space,
                               action_dim=control.action_dim, cameras={}, state=dict(platform.observation.state),
                               chunk_size=chunk)
    return Adapter(contract=contract, encode=_encoder(control, chunk), decode=_decode)


def random_model_spec(platforms: Iterable[PlatformSpec]) -> ModelSpec:
    return ModelSpec(
        name=NAME,
        load="wamcore.baselines:load",
        adapters=[adapter_for(p) for p in platforms],
        capabilities=Capabilities(actions=True),
        description="Chance baseline of every platform: uniformly random action chunks within the control's "
                    "bounds, the gripper open or closed (wamcore.baselines).",
        timeout_s=5.0,
    )


class RandomModel:
    checkpoint = "none"
    device = "cpu"

    def predict_native(self, native: Dict[str, Any], request: PredictRequest) -> np.ndarray:
        rng = np.random.default_rng(native["entropy"])
        actions = rng.uniform(native["low"], native["high"], size=(native["chunk"], len(native["low"])))
        gripper = native.get("gripper")
        if gripper is not None:
            for i in gripper["indices"]:
                actions[:, i] = rng.choice(gripper["values"], size=native["chunk"])
        return actions.astype(np.float32)


def load(config: ModelConfig) -> RandomModel:
    return RandomModel()


__all__ = ["NAME", "CHUNK", "RandomModel", "adapter_for", "chunk_size", "random_model_spec", "load"]
