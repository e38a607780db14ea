"""``libero-oracle`` on the real simulator: LIBERO episodes that succeed through wamcore's path.

The oracle reads privileged state, emits ordinary OSC_POSE chunks, and wamcore validates and
executes them and stops at native success. Replaying exactly the executed actions with the
gripper sign flipped must fail: that pins the gripper convention (-1 open, +1 close) the way
only a succeeding policy can. Cameras are off (``cameras=False``): the oracle reads no image.
"""

from __future__ import annotations

import numpy as np
import pytest

from wamcore.artifacts import model_identity
from wamcore.contracts import PredictRequest
from wamcore.errors import CapabilityError, IncompatiblePairError
from wamcore.execution import run_episode
from wamcore.pairing import pair
from wamcore.service import LocalModel, ModelService
from wamcore.specs import ModelConfig

from wam_libero.env import LiberoEnv
from wam_libero.oracle import ORACLE_MODEL
from wam_libero.plugin import LIBERO_PLATFORM
from wam_libero.scripted import SCRIPTED_MODEL

#: (suite, task, init states): a bowl by its rim onto a plate, a bottle into the basket
CASES = [("libero_spatial", 0, (0, 1)), ("libero_object", 2, (0,))]


def oracle_client(env):
    service = ModelService(ORACLE_MODEL, ModelConfig(platform="libero"))
    return LocalModel(service).bind(LIBERO_PLATFORM, env.observation_spec)


@pytest.mark.parametrize("suite,task,inits", CASES)
def test_oracle_succeeds_and_the_same_actions_with_the_gripper_flipped_fail(suite, task, inits):
    env = LiberoEnv(suite=suite, task=task, cameras=False)
    try:
        model = oracle_client(env)
        for init in inits:
            executed = []
            result = run_episode(model, env, reset={"init_state": init, "seed": 0},
                                 on_step=lambda i, action, step, pred: executed.append(np.array(action)))
            assert (result.stop_reason, result.success) == ("native_success", True), (suite, task, init, result)
            assert env.check_success() and result.steps == len(executed) < env.max_steps
            actions = np.array(executed)
            assert set(np.unique(actions[:, 6])) == {-1.0, 1.0}  # it opened and closed the hand

            env.reset(init_state=init, seed=0)  # the same actions again: the episode is reproducible
            assert [env.step(a).success for a in actions][-1] is True

            flipped = actions.copy()
            flipped[:, 6] *= -1.0
            env.reset(init_state=init, seed=0)
            assert not any(env.step(a).success for a in flipped) and not env.check_success()
    finally:
        env.close()


def test_oracle_declares_privileged_state_in_its_identity():
    env = LiberoEnv(suite="libero_goal", task=0, cameras=False)
    try:
        model = oracle_client(env)
        assert model.info.capabilities.privileged_state and model.info.backend == "libero-oracle"
        assert "privileged_state" in model_identity(model.info, model.contract)["capabilities"]
        assert model.contract.cameras == {}  # it reads no image
        obs = env.reset(init_state=0, seed=0)
        # a caller that does not go through wam_act (no privileged state): a typed refusal
        with pytest.raises(CapabilityError, match="privileged state"):
            model.predict(PredictRequest(observation=obs))
    finally:
        env.close()


def test_privileged_state_is_libero_ground_truth_and_refused_to_other_models():
    env = LiberoEnv(suite="libero_goal", task=0, cameras=False)
    try:
        obs = env.reset(init_state=0, seed=0)
        assert obs.images == {} and env.observation_spec.cameras == {}
        truth = env.privileged_state()
        assert truth["goal"] == [["open", "wooden_cabinet_1_middle_region"]]
        inner = env.upstream.env
        bowl = truth["objects"]["akita_black_bowl_1"]
        assert np.allclose(bowl[:3], inner.sim.data.body_xpos[inner.obj_body_id["akita_black_bowl_1"]])
        low, high = truth["extents"]["akita_black_bowl_1"][:3], truth["extents"]["akita_black_bowl_1"][3:]
        assert (low[:2] < bowl[:2]).all() and (bowl[:2] < high[:2]).all() and 0.04 < high[2] - low[2] < 0.08
        assert truth["joints"]["wooden_cabinet_1_middle_level"] == pytest.approx(0.0, abs=1e-3)
        assert "wooden_cabinet_1_cabinet_middle" in truth["bodies"] and "main_table_stove_front_region" in truth["sites"]

        smoke = ModelService(SCRIPTED_MODEL, ModelConfig(platform="libero"))
        with pytest.raises(CapabilityError, match="privileged_state"):
            smoke.predict(PredictRequest(observation=obs, privileged=truth))
        # a model that needs the cameras does not pair with an env that renders none
        with pytest.raises(IncompatiblePairError, match="camera 'primary'"):
            pair(SCRIPTED_MODEL, LIBERO_PLATFORM, platform_options={"cameras": False})
    finally:
        env.close()
