"""``libero-smoke``: a smoke-test model for ``libero`` (no weights, not a policy).

Registered by the ``wam-libero`` plugin, so ``wam run --platform libero --am-backend
libero-smoke`` checks an installation end to end (simulator, cameras, the service's checks,
workers, ``--num-envs``) before a real model is in place. ``libero-scripted`` is its former
name, kept as an alias.

Its adapter encodes like a real LIBERO model (both cameras, a 9-D proprio in Cosmos Policy's
order gripper_qpos, eef_pos, eef_quat) and its native model checks what it receives, then
returns a chunk of one repeated scripted action (default: the no-op, gripper open).
"""

from __future__ import annotations

import numpy as np

from wamcore import Adapter, AdapterContract, Capabilities, ModelSpec, Prediction
from wamcore.specs import Option

from .spec import ACTION_SPACE, PLATFORM, STATE_SIZES
from .suites import NOOP_ACTION

NAME = "libero-smoke"
DEFAULT_CHUNK = 4


def encode(request):
    obs = request.observation
    proprio = np.concatenate([obs.state["gripper_qpos"], obs.state["eef_position"], obs.state["eef_quaternion_xyzw"]])
    return {"primary": obs.images["primary"], "wrist": obs.images["wrist"], "proprio": proprio, "text": request.effective_instruction}


def decode(native, request):
    return Prediction(actions=np.asarray(native, dtype=np.float32), info={"scripted": True})


class ScriptedModel:
    """Returns ``chunk`` copies of ``action`` after checking its native input."""

    checkpoint = "scripted"

    def __init__(self, chunk: int = DEFAULT_CHUNK, action=NOOP_ACTION):
        self.chunk = int(chunk)
        self.action = np.asarray(action, dtype=np.float32)
        self.calls = 0

    def predict_native(self, native, request):
        for role in ("primary", "wrist"):
            img = native[role]
            if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
                raise ValueError(f"scripted model got a malformed {role} image {img.dtype} {img.shape}")
        if native["proprio"].shape != (9,) or not np.isfinite(native["proprio"]).all():
            raise ValueError(f"scripted model got a malformed proprio {native['proprio']!r}")
        if not native["text"].strip():
            raise ValueError("scripted model got an empty instruction")
        self.calls += 1
        return np.tile(self.action, (self.chunk, 1))


def load(config):
    chunk = int(config.options.get("chunk") or DEFAULT_CHUNK)
    action = config.options.get("action")
    return ScriptedModel(chunk, NOOP_ACTION if not action else [float(x) for x in str(action).split(",")])


def _configure(spec, config):
    """The chunk size is a deployment option; the contract must declare it."""
    import attrs

    chunk = int(config.options.get("chunk") or DEFAULT_CHUNK)
    adapter = attrs.evolve(spec.adapters[0], contract=attrs.evolve(spec.adapters[0].contract, chunk_size=chunk))
    return attrs.evolve(spec, adapters=(adapter,), configure=None)


SCRIPTED_MODEL = ModelSpec(
    name=NAME,
    load=load,
    adapters=[
        Adapter(
            contract=AdapterContract(
                platform=PLATFORM,
                action_space=ACTION_SPACE,
                action_dim=7,
                cameras={"primary": None, "wrist": None},
                state={k: STATE_SIZES[k] for k in ("gripper_qpos", "eef_position", "eef_quaternion_xyzw")},
                chunk_size=DEFAULT_CHUNK,
            ),
            encode=encode,
            decode=decode,
        )
    ],
    capabilities=Capabilities(actions=True),
    configure=_configure,
    options=(
        Option("chunk", "int", DEFAULT_CHUNK, help="Actions per chunk."),
        Option("action", "str", None, help="The repeated action, 7 comma-separated numbers (default: no-op)."),
    ),
    aliases=("libero-scripted",),
    description="smoke test for LIBERO installs (no weights, not a policy): checks what it receives, "
                "repeats one action (default: the no-op)",
)

