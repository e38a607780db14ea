"""A platform with two controls and one model per control, for the tests of
``PlatformSpec.extra_controls`` (loaded in subprocesses through
``WAMCORE_PLUGIN_MODULES=wamtest_controls`` with ``tests/`` on ``PYTHONPATH``).

* platform ``twoway``: a point on a line that must reach 0.5, commanded by velocity
  (``twoway.velocity.v1``, the default) or by an absolute target position
  (``twoway.position.v1``); the env executes only the control it was built with, and names
  it in its instruction, so that records show which one ran;
* models ``twoway-vel`` and ``twoway-pos``: a proportional controller in each control.
"""

from __future__ import annotations

import numpy as np

from wamcore import (
    Adapter,
    AdapterContract,
    Capabilities,
    ControlSpec,
    ModelSpec,
    Observation,
    ObservationSpec,
    PlatformSpec,
    Prediction,
    StepResult,
    hookimpl,
)

TARGET = 0.5
CHUNK = 4
VELOCITY = ControlSpec(action_space="twoway.velocity.v1", action_names=("v",), low=(-0.2,), high=(0.2,))
POSITION = ControlSpec(action_space="twoway.position.v1", action_names=("x",), low=(-1.0,), high=(1.0,))
OBSERVATION = ObservationSpec(cameras={}, state={"position": 1}, units={"position": "m"})


class TwoWayEnv:
    observation_spec = OBSERVATION
    max_steps = 40

    def __init__(self, control=None):
        self.control = {None: VELOCITY, VELOCITY.action_space: VELOCITY, POSITION.action_space: POSITION}[control]
        self.position, self.steps = 0.0, 0

    def reset(self, *, seed=None):
        self.position, self.steps = float(np.random.default_rng(seed).uniform(-1, 1)), 0
        return self.observe()

    def observe(self):
        return Observation(images={}, state={"position": np.array([self.position])},
                           instruction=f"reach 0.5 by {self.control.action_space}", step=self.steps)

    def step(self, action):
        value = float(action[0])
        if self.control is POSITION:
            self.position += 0.5 * (value - self.position)
        else:
            self.position += value
        self.steps += 1
        return StepResult(success=abs(self.position - TARGET) < 0.02, info={"control": self.control.action_space})

    def snapshot(self):
        return (self.position, self.steps)

    def restore(self, snap):
        self.position, self.steps = snap

    def close(self):
        pass


class Controller:
    def __init__(self, control):
        self.control = control

    def predict_native(self, position, request):
        value = TARGET if self.control is POSITION else float(np.clip(TARGET - position, -0.2, 0.2))
        return np.full((CHUNK, 1), value, dtype=np.float32)


def _model(name, control):
    contract = AdapterContract(platform="twoway", action_space=control.action_space, action_dim=1, cameras={},
                               state={"position": 1}, chunk_size=CHUNK)
    adapter = Adapter(contract=contract, encode=lambda r: float(r.observation.state["position"][0]),
                      decode=lambda native, r: Prediction(actions=native))
    return ModelSpec(name=name, load=lambda config: Controller(control), adapters=[adapter],
                     capabilities=Capabilities(actions=True))


PLATFORM = PlatformSpec(name="twoway", observation=OBSERVATION, control=VELOCITY, extra_controls=(POSITION,),
                        make_env=TwoWayEnv, env_memory_mb=100.0)
VEL_MODEL = _model("twoway-vel", VELOCITY)
POS_MODEL = _model("twoway-pos", POSITION)


@hookimpl
def wam_register_platforms(register):
    register(PLATFORM)


@hookimpl
def wam_register_models(register):
    register(VEL_MODEL)
    register(POS_MODEL)
