"""The RoboTwin adapter and worker against StarWAM's own ``examples/robotwin/policy_server.py``
and ``starwam/eval/policy.py``: the composed frame equals ``_build_robotwin_image`` bit for bit,
and ``StarwamPolicy.predict_chunk`` (a stand-in here) gets the raw state, the instruction, the
seed and the safely read text entry."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from wamcore import LocalModel, ModelConfig, ModelService, Observation, PredictRequest
from wamcore.errors import ConfigurationError
from wamcore.testing import check_model_adapter
from wam_robotwin.plugin import wam_register_platforms

import wam_starwam.worker as worker
from starwam_standins import PolicyStandIn
from wam_starwam.plugin import MODEL
from wam_starwam.robotwin import compose_image
from wam_starwam.settings import Settings

TASK = "hand the block over"
JOINTS = np.array([0.0, 0.9, -0.6, 0.05, 0.3, -0.1, 1.0, 0.02, 0.85, -0.55, -0.04, 0.28, 0.12, 0.0])


def robotwin_platform():
    platforms = []
    wam_register_platforms(platforms.append)
    return platforms[0]


def observation(seed=0) -> Observation:
    rng = np.random.default_rng(seed)
    return Observation(
        images={r: rng.integers(0, 256, (240, 320, 3), dtype=np.uint8) for r in ("head", "left_wrist", "right_wrist")},
        state={"joint_targets": JOINTS, "joint_positions": rng.standard_normal(12), "left_eef_pose": rng.standard_normal(7),
               "right_eef_pose": rng.standard_normal(7), "left_gripper": np.array([1.0]), "right_gripper": np.array([0.0])},
        instruction=TASK,
    )


@pytest.fixture(scope="module")
def server_module(starwam_root):
    import importlib

    return importlib.import_module("examples.robotwin.policy_server")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_frame_equals_the_policy_servers(server_module, dtype):
    obs = observation(1)
    head, left, right = (obs.images[r] for r in ("head", "left_wrist", "right_wrist"))
    ours = compose_image(head, left, right, "cpu", dtype)
    theirs = server_module._build_robotwin_image(head, left, right, torch.device("cpu"), dtype)
    assert tuple(ours.shape) == (1, 3, 384, 320) and torch.equal(ours, theirs)


def test_wrists_are_not_swapped_nor_flipped(server_module):
    obs = observation(2)
    head, left, right = (obs.images[r] for r in ("head", "left_wrist", "right_wrist"))
    theirs = server_module._build_robotwin_image(head, left, right, torch.device("cpu"), torch.float32)
    assert not torch.equal(compose_image(head, right, left), theirs)
    assert not torch.equal(compose_image(head[::-1, ::-1], left, right), theirs)


def make_model(text_cache=None, **options):
    settings = Settings.from_options("robotwin", dict(options, text_cache=str(text_cache) if text_cache else None))
    policy = PolicyStandIn()
    text = worker.TextConditioning(settings, text_cache, 4096, torch.device("cpu"), torch.float32)
    return worker.RoboTwinModel(policy, settings, text), policy


@pytest.fixture
def text_cache(tmp_path, starwam_root):
    from starwam.data.lerobot import DEFAULT_TEXT_PROMPT, load_text_cache, save_text_cache, text_cache_path

    path = text_cache_path(tmp_path, TASK, 128, DEFAULT_TEXT_PROMPT, "wan22ti2v5b")
    save_text_cache(path, torch.randn(11, 4096), torch.ones(11, dtype=torch.bool), DEFAULT_TEXT_PROMPT.format(task=TASK), TASK)
    return tmp_path, load_text_cache(path, 128, 4096)


def test_predict_chunk_gets_what_the_server_gives_it(server_module, text_cache):
    folder, (context, mask) = text_cache
    native, policy = make_model(folder, replan_steps=8)
    obs = observation(3)
    service = ModelService(MODEL, ModelConfig(platform="robotwin", options={"replan_steps": 8}), native=native)
    pred = LocalModel(service).bind(robotwin_platform()).predict(PredictRequest(observation=obs, seed=4))
    (call,) = policy.calls
    expected = server_module._build_robotwin_image(*(obs.images[r] for r in ("head", "left_wrist", "right_wrist")),
                                                    torch.device("cpu"), torch.float32)
    assert torch.equal(call["image"], expected)
    np.testing.assert_array_equal(call["state"], JOINTS.astype(np.float32))  # raw: StarwamPolicy z-scores it
    assert call["instruction"] == TASK and call["seed"] == 4
    assert torch.equal(call["text"][0], context[None]) and torch.equal(call["text"][1], mask[None])
    np.testing.assert_array_equal(pred.actions, policy.predict_chunk(None, JOINTS, TASK)[:8])
    np.testing.assert_array_equal(pred.actions[:, [6, 13]], 1.0)  # grippers stay in RoboTwin's [0, 1] scale


def test_no_seed_by_default_as_the_server(text_cache):
    native, policy = make_model(text_cache[0])
    native.predict_native(worker_input(), PredictRequest(observation=observation()))
    native.reset()
    assert policy.calls[0]["seed"] is None and policy.resets == 1


def worker_input():
    from wam_starwam.robotwin import encode

    return encode(PredictRequest(observation=observation()))


def test_options_are_checked_together():
    with pytest.raises(ConfigurationError) as err:
        Settings.from_options("robotwin", {"replan_steps": 40, "checkpoint_family": "mot", "action_inference_steps": 3})
    assert "--replan-steps 40 exceeds" in str(err.value) and "shared-dit family only" in str(err.value)
    with pytest.raises(ConfigurationError, match="no 'shared-dit' checkpoint family on robotwin"):
        Settings.from_options("robotwin", {"checkpoint_family": "shared-dit"})
    with pytest.raises(ConfigurationError, match="--policy-server speaks"):
        Settings.from_options("libero", {"policy_server": "8765"})


def test_conformance_kit(text_cache):
    native, _ = make_model(text_cache[0])
    obs = observation()
    report = check_model_adapter(MODEL, robotwin_platform(), native=native, config=ModelConfig(platform="robotwin"),
                                 observation=obs)
    assert report["actions"] == (24, 14)
