"""A tiny platform and scripted models for the worker tests (no torch, except ``torch-wam``).

Loaded in-process by the tests and inside ``wam serve`` workers through
``WAMCORE_PLUGIN_MODULES=wamtest_scripted`` (with ``tests/`` on ``PYTHONPATH``).

* platform ``toy``: a point on the plane that must reach ``TARGET``; two 24x32 cameras,
  position and velocity state, 2-D velocity actions in [-1, 1];
* model ``scripted-wam``: a proportional controller that keeps a counter per session (so
  session isolation is visible in its answers), counts every call of ``predict_native``
  (so a test can prove that a rejected observation never reached it), and misbehaves on
  request (``behaviour`` option) to produce every kind of bad action chunk and error;
* model ``torch-wam``: the same controller computed with torch, for the cross-environment
  test (the worker's venv has torch, the client's does not).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from collections import defaultdict

import attrs
import numpy as np

from wamcore import (
    Adapter,
    AdapterContract,
    Capabilities,
    ControlSpec,
    ModelSpec,
    Observation,
    ObservationSpec,
    Option,
    PlatformSpec,
    Prediction,
    StepResult,
    hookimpl,
)
from wamcore.errors import CheckpointError, DependencyNotInstalled

TARGET = np.array([0.5, -0.25])
CHUNK = 4
SIZE = (24, 32)

TOY_CONTROL = ControlSpec(
    action_space="toy.velocity.delta.v1",
    action_names=("vx", "vy"),
    chunk_min=1,
    chunk_max=16,
    low=(-1.0, -1.0),
    high=(1.0, 1.0),
    description="velocity command, units per second, applied for 0.1 s",
)
TOY_OBSERVATION = ObservationSpec(
    cameras={"primary": SIZE, "wrist": SIZE},
    state={"position": 2, "velocity": 2},
    units={"position": "m", "velocity": "m/s"},
)
CONTRACT = AdapterContract(
    platform="toy",
    action_space=TOY_CONTROL.action_space,
    action_dim=2,
    cameras={"primary": SIZE, "wrist": SIZE},
    state={"position": 2, "velocity": 2},
    chunk_size=CHUNK,
)
BEHAVIOURS = (
    "ok", "nan", "wrong-dim", "wrong-length", "out-of-bounds", "int-dtype", "one-d",
    "raise-value-error", "raise-checkpoint-error", "sleep",
)


class ToyEnv:
    observation_spec = TOY_OBSERVATION
    control = TOY_CONTROL
    max_steps = 60

    def __init__(self):
        self.position = np.zeros(2)
        self.velocity = np.zeros(2)
        self.steps = 0
        self.executed = []  # every action that reached the "simulator"

    def reset(self, *, seed=None):
        rng = np.random.default_rng(seed)
        self.position = rng.uniform(-1, 1, size=2)
        self.velocity = np.zeros(2)
        self.steps = 0
        return self.observe()

    def observe(self):
        img = np.zeros((*SIZE, 3), dtype=np.uint8)
        col = int(np.clip((self.position[0] + 1) / 2 * (SIZE[1] - 1), 0, SIZE[1] - 1))
        img[:, col] = 255
        return Observation(
            images={"primary": img, "wrist": img[::-1].copy()},
            state={"position": self.position.copy(), "velocity": self.velocity.copy()},
            instruction="reach the target",
            step=self.steps,
        )

    def step(self, action):
        self.executed.append(np.array(action))
        self.velocity = np.asarray(action, dtype=np.float64)
        self.position = self.position + 0.1 * self.velocity * 2.0
        self.steps += 1
        return StepResult(success=bool(np.linalg.norm(self.position - TARGET) < 0.08))

    def snapshot(self):
        return (self.position.copy(), self.velocity.copy(), self.steps)

    def restore(self, snap):
        self.position, self.velocity, self.steps = snap[0].copy(), snap[1].copy(), snap[2]

    def close(self):
        pass


class ScriptedModel:
    """Proportional controller with per-session counters and scripted misbehaviour."""

    uses_sessions = True

    def __init__(self, gain: float, budget: float, chunk: int = CHUNK, predict_delay: float = 0.0):
        self.gain = gain
        self.predict_delay = predict_delay
        self.chunk = chunk
        self.timeout_s = budget
        self.checkpoint = f"scripted:gain={gain}"
        self.native_calls = 0
        self.counts = defaultdict(int)
        self.resets = defaultdict(int)

    def actions(self, error):
        step = np.clip(self.gain * error, -1.0, 1.0)
        return np.repeat(step[None, :], self.chunk, axis=0)

    def predict_native(self, native, request, session="default"):
        self.native_calls += 1
        self.counts[session] += 1
        behaviour = request.options.get("behaviour") or "ok"
        delay = float(request.options.get("delay") or self.predict_delay)
        if os.environ.get(BUSY_DIR_ENV):  # a test waits on this to know the model is mid-call
            Path(os.environ[BUSY_DIR_ENV], f"predicting-{os.getpid()}-{self.native_calls}").write_text("")
        if delay:
            time.sleep(delay)
        actions = self.actions(native)
        if behaviour == "nan":
            actions[1, 0] = np.nan
        elif behaviour == "wrong-dim":
            actions = np.zeros((self.chunk, 3), dtype=np.float32)
        elif behaviour == "wrong-length":
            actions = actions[:-1]
        elif behaviour == "out-of-bounds":
            actions[0, 1] = 7.5
        elif behaviour == "int-dtype":
            actions = np.ones((self.chunk, 2), dtype=np.int64)
        elif behaviour == "one-d":
            actions = actions[0]
        elif behaviour == "raise-value-error":
            raise ValueError("scripted failure inside the model")
        elif behaviour == "raise-checkpoint-error":
            raise CheckpointError("scripted: weights.safetensors does not match its pinned sha256")
        return {"actions": actions, "count": self.counts[session], "session": session}

    def reset(self, session="default"):
        self.counts.pop(session, None)
        self.resets[session] += 1


def encode(request):
    return TARGET - np.asarray(request.observation.state["position"], dtype=np.float64)


def decode(native, request):
    return Prediction(
        actions=native["actions"],
        info={"count": native["count"], "native_calls": _MODELS[-1].native_calls if _MODELS else -1,
              "pid": os.getpid(),
              # the sessions whose state the model holds, and how many it was told to free
              "held": len(_MODELS[-1].counts) if _MODELS else -1,
              "resets": sum(_MODELS[-1].resets.values()) if _MODELS else -1},
    )


_MODELS: list = []

#: a folder where every prediction leaves ``predicting-<pid>-<n>`` as it starts
BUSY_DIR_ENV = "WAMTEST_BUSY_DIR"


def load_scripted(config):
    time.sleep(float(config.options.get("load_delay") or 0.0))
    if config.options.get("fail_load"):
        raise CheckpointError("scripted load failure: the checkpoint cannot be read")
    model = ScriptedModel(float(config.options.get("gain") or 0.5), float(config.options.get("budget") or 20.0),
                          int(config.options.get("chunk_size") or CHUNK), float(config.options.get("predict_delay") or 0.0))
    _MODELS.append(model)
    return model


class TorchModel(ScriptedModel):
    """Same controller, computed with torch; reports the device it runs on."""

    def __init__(self, gain, budget):
        try:
            import torch
        except ImportError as exc:
            raise DependencyNotInstalled("torch", "pip install torch", "the torch-wam test model") from exc
        super().__init__(gain, budget)
        self.torch = torch
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.details = {"torch": torch.__version__}

    def actions(self, error):
        t = self.torch.as_tensor(error, dtype=self.torch.float32, device=self.device)
        step = self.torch.clamp(self.gain * t, -1.0, 1.0)
        return step.repeat(self.chunk, 1).cpu().numpy()


def load_torch(config):
    model = TorchModel(float(config.options.get("gain") or 0.5), 20.0)
    _MODELS.append(model)
    return model


# ----------------------------------------------------------------------------- large images

BIG_SIZE = (256, 256)  # LIBERO-sized cameras: large enough for the shared-memory path
BIG_CONTRACT = AdapterContract(
    platform="toy-big", action_space=TOY_CONTROL.action_space, action_dim=2,
    cameras={"primary": BIG_SIZE, "wrist": BIG_SIZE}, state={"position": 2}, chunk_size=1,
)
BIG_OBSERVATION = ObservationSpec(cameras={"primary": BIG_SIZE, "wrist": BIG_SIZE}, state={"position": 2})


def big_observation(seed: int) -> Observation:
    rng = np.random.default_rng(seed)
    return Observation(
        images={role: rng.integers(0, 256, size=(*BIG_SIZE, 3), dtype=np.uint8) for role in ("primary", "wrist")},
        state={"position": rng.uniform(-1, 1, size=2)},
        instruction="look",
    )


class EchoModel:
    """Answers with checksums of what it received, and keeps the previous observation's
    arrays (as a model with a frame history would) to prove they stay intact."""

    def __init__(self):
        self.kept = None

    def predict_native(self, images, request):
        sums = {role: int(img.sum(dtype=np.int64)) for role, img in images.items()}
        kept_now = None if self.kept is None else {r: int(a.sum(dtype=np.int64)) for r, a in self.kept[0].items()}
        kept_then = None if self.kept is None else self.kept[1]
        self.kept = (images, sums)
        return {"sums": sums, "kept_now": kept_now, "kept_then": kept_then}


@hookimpl
def wam_register_platforms(register):
    register(PlatformSpec(name="toy", observation=TOY_OBSERVATION, control=TOY_CONTROL, make_env=ToyEnv))
    register(PlatformSpec(name="toy-big", observation=BIG_OBSERVATION, control=TOY_CONTROL, make_env=ToyEnv))


SCRIPTED_OPTIONS = (
    Option("gain", type="float", default=0.5, help="Controller gain."),
    Option("budget", type="float", default=20.0, help="Declared timeout budget (s)."),
    Option("fail-load", type="bool", default=False, help="Fail while loading."),
    Option("load-delay", type="float", default=None, help="Seconds loading takes."),
    Option("predict-delay", type="float", default=None,
           help="Seconds each prediction sleeps, for clients that cannot send per-request options (openpi)."),
    Option("chunk-size", type="int", default=None, help="Actions per chunk (changes the contract)."),
    Option("behaviour", type="choice", choices=BEHAVIOURS, default=None, deployment=False,
           help="What the next predictions do (per request)."),
    Option("delay", type="float", default=None, deployment=False, help="Seconds each prediction sleeps."),
)


def configure(spec, config):
    """``--chunk-size`` changes the adapter contract, as a real backend's config file would."""
    chunk = config.options.get("chunk_size")
    if not chunk:
        return spec
    contract = attrs.evolve(CONTRACT, chunk_size=int(chunk))
    return attrs.evolve(spec, adapters=[Adapter(contract=contract, encode=encode, decode=decode)])


@hookimpl
def wam_register_models(register):
    adapter = Adapter(contract=CONTRACT, encode=encode, decode=decode)
    register(ModelSpec(name="scripted-wam", load=load_scripted, adapters=[adapter], aliases=("scripted",),
                       capabilities=Capabilities(actions=True), options=SCRIPTED_OPTIONS, timeout_s=20.0,
                       configure=configure))
    register(ModelSpec(
        name="echo-wam", load=lambda config: EchoModel(), capabilities=Capabilities(actions=True),
        adapters=[Adapter(
            contract=BIG_CONTRACT,
            encode=lambda request: dict(request.observation.images),
            decode=lambda native, request: Prediction(actions=np.zeros((1, 2), np.float32), info=native),
        )],
    ))
    register(ModelSpec(name="torch-wam", load=load_torch, adapters=[adapter],
                       capabilities=Capabilities(actions=True), options=SCRIPTED_OPTIONS[:1], timeout_s=20.0))
