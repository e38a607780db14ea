"""The core's ``random`` baseline pairs with every platform (PointMass, LIBERO, a third party's),
from the platform's own ControlSpec: bounds, gripper convention, chunk bounds; seeded."""

from __future__ import annotations

import numpy as np
import pytest

from wamcore import (
    CapabilityError,
    ControlSpec,
    GripperSpec,
    ModelConfig,
    ModelService,
    ModelSpec,
    ObservationSpec,
    PlatformSpec,
    PredictRequest,
    Registry,
    hookimpl,
)
from wamcore.baselines import random_model_spec
from wamcore.execution import run_episode
from wamcore.runtime import WorkerConfig, open_model
from wamcore.testing import check_model_adapter, synthetic_observation

from wam_libero.plugin import LIBERO_PLATFORM
from wam_pointmass.env import PointMassEnv
from wam_pointmass.plugin import POINTMASS_PLATFORM

#: a third party's arm: unbounded joints, a gripper at index 1 with 0 = open and 0.04 = closed,
#: chunks of at most 4
ARM = PlatformSpec(
    name="toy-arm",
    observation=ObservationSpec(cameras={}, state={"joints": 3}),
    control=ControlSpec(action_space="toy.joint.delta.v1", action_names=("j0", "finger", "j2"), chunk_max=4,
                        gripper=GripperSpec(indices=(1,), open=0.0, close=0.04)),
    make_env="nowhere:Env",
)


def predict(platform, seed, step=0, obs_seed=0):
    service = ModelService(random_model_spec([platform]), ModelConfig(platform=platform.name))
    obs = synthetic_observation(platform.observation, seed=obs_seed).replace(step=step)
    obs = obs.select((), platform.observation.state)  # what the contract asks for: no camera
    return service.predict(PredictRequest(observation=obs, seed=seed)).actions


def test_the_installed_registry_offers_random_on_every_platform():
    reg = Registry()
    assert set(reg.model("random").platforms) == set(reg.platforms())
    assert {"pointmass", "libero", "robotwin"} <= set(reg.platforms())
    assert all("random" in reg.models_for(p) for p in reg.platforms())


@pytest.mark.parametrize("platform", [POINTMASS_PLATFORM, LIBERO_PLATFORM, ARM], ids=lambda p: p.name)
def test_random_conforms_and_stays_in_the_control(platform):
    spec = random_model_spec([platform])
    report = check_model_adapter(spec, platform)
    control = platform.control
    chunk = max(control.chunk_min, min(8, control.chunk_max or 8))
    assert report["actions"] == (chunk, control.action_dim)
    actions = np.concatenate([predict(platform, seed) for seed in range(50)])
    low = np.asarray(control.low if control.low is not None else [-1.0] * control.action_dim)
    high = np.asarray(control.high if control.high is not None else [1.0] * control.action_dim)
    assert (actions >= low).all() and (actions <= high).all()
    gripper = set(control.gripper.indices) if control.gripper else set()
    for i in range(control.action_dim):
        if i in gripper:  # the convention's two values, both drawn
            assert set(np.unique(actions[:, i]).tolist()) == {np.float32(control.gripper.open),
                                                              np.float32(control.gripper.close)}
        else:  # spread over the bounds
            assert len(np.unique(actions[:, i])) == len(actions)
            assert actions[:, i].min() < low[i] + 0.1 * (high[i] - low[i])
            assert actions[:, i].max() > high[i] - 0.1 * (high[i] - low[i])


def test_random_is_seeded_by_the_request():
    assert np.array_equal(predict(ARM, seed=5), predict(ARM, seed=5, obs_seed=1))  # the seed decides
    assert not np.array_equal(predict(ARM, seed=5), predict(ARM, seed=6))
    assert not np.array_equal(predict(ARM, seed=5, step=0), predict(ARM, seed=5, step=8))
    # without a seed: the observation's content decides, reproducibly
    assert np.array_equal(predict(ARM, None, obs_seed=2), predict(ARM, None, obs_seed=2))
    assert not np.array_equal(predict(ARM, None, obs_seed=2), predict(ARM, None, obs_seed=3))


def test_random_refuses_candidates():
    service = ModelService(random_model_spec([POINTMASS_PLATFORM]), ModelConfig(platform="pointmass"))
    obs = PointMassEnv().reset(seed=0).select((), POINTMASS_PLATFORM.observation.state)
    with pytest.raises(CapabilityError):
        service.predict(PredictRequest(observation=obs, candidate_actions=np.zeros((8, 2), np.float32)))


def test_a_third_party_platform_gets_random_and_runs_an_episode(line_plugin):
    """The documented example platform, registered after the registry loaded, runs with it."""
    reg = Registry(entry_points=False)
    assert reg.model("random").platforms == ()
    reg.register(line_plugin, name="line")
    assert reg.model("random").platforms == ("line",)
    platform = reg.platform("line")
    model = open_model(WorkerConfig.from_options(platform="line", am_backend="random"), platform, registry=reg)
    runs = []
    for _ in range(2):
        actions = []
        result = run_episode(model, platform.create(), reset={"seed": 0}, seed=1, max_chunks=3,
                             on_step=lambda step, action, *_: actions.append(np.array(action)))
        runs.append((result.steps, np.array(actions)))
    assert runs[0][0] == runs[1][0] == 24 and np.array_equal(runs[0][1], runs[1][1])
    assert np.abs(runs[0][1]).max() <= 0.2 and len(np.unique(runs[0][1])) == 24
    reg.unregister("line")
    assert reg.model("random").platforms == ()


def test_a_plugins_own_random_replaces_the_cores():
    mine = ModelSpec(name="random", load="nowhere:load", adapters=[])

    class Plugin:
        @hookimpl
        def wam_register_models(self, register):
            register(mine)

        @hookimpl
        def wam_register_platforms(self, register):
            register(ARM)

    reg = Registry(entry_points=False)
    record = reg.register(Plugin(), name="mine")
    assert record.models == ["random"] and not record.problems
    assert reg.model("random") is mine and reg.owner("model", "random") is record
