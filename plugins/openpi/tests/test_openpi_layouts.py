"""The LIBERO and ALOHA layouts against openpi's own conventions, and back.

The references are the real packages: openpi-client's ``image_tools.resize_with_pad`` for
the resize, robosuite's ``quat2axisangle`` (which openpi's LIBERO example copies) for the
state, and the example's own steps (rotate the raw render 180 degrees, resize with pad,
concatenate the state) written out here.
"""

from __future__ import annotations

import numpy as np
import pytest
from openpi_client import image_tools
from robosuite.utils import transform_utils

from wam_openpi.layouts import LIBERO, ROBOTWIN, axis_angle_to_quat, check_served, layout_for, quat_to_axis_angle, resize_with_pad
from wam_openpi.plugin import served_actions
from wamcore import AdapterContract, ConfigurationError, Observation
from wamcore.errors import ObservationError, PredictionError
from wam_openpi.generic import GenericLayout, inject_default_prompt


def unit_quaternions(n: int, seed: int = 0) -> np.ndarray:
    q = np.random.default_rng(seed).standard_normal((n, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return np.concatenate([q, [[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, -1.0], [1.0, 0.0, 0.0, 0.0]]])


def libero_observation(size=(256, 256), seed=0) -> Observation:
    rng = np.random.default_rng(seed)
    return Observation(
        images={role: rng.integers(0, 256, (*size, 3), dtype=np.uint8) for role in ("primary", "wrist")},
        state={"eef_position": rng.standard_normal(3), "eef_quaternion_xyzw": unit_quaternions(1, seed)[0],
               "gripper_qpos": rng.uniform(-0.04, 0.04, 2), "joint_positions": rng.standard_normal(7)},
        instruction="put the bowl on the plate",
    )


@pytest.mark.parametrize("shape", [(256, 256), (240, 320), (224, 224), (100, 50), (224, 300), (31, 17)])
def test_resize_with_pad_is_openpi_clients(shape):
    image = np.random.default_rng(1).integers(0, 256, (*shape, 3), dtype=np.uint8)
    assert np.array_equal(resize_with_pad(image, 224), image_tools.resize_with_pad(image, 224, 224))


def test_axis_angle_is_robosuites_and_inverts_back():
    for q in unit_quaternions(200):
        expected = transform_utils.quat2axisangle(q.copy())  # robosuite clips its argument in place
        assert np.array_equal(quat_to_axis_angle(q), expected)
        back = axis_angle_to_quat(quat_to_axis_angle(q))
        assert np.allclose(back, q, atol=1e-9) or (q[3] == -1.0 and np.allclose(back, -q))  # -identity is identity


def test_libero_request_is_what_openpis_example_sends():
    obs = libero_observation()
    request = LIBERO.request(obs, obs.instruction, 224)
    for role, key in (("primary", "observation/image"), ("wrist", "observation/wrist_image")):
        raw = obs.images[role][::-1]  # the platform flipped robosuite's bottom-up render once, vertically
        example = image_tools.convert_to_uint8(image_tools.resize_with_pad(np.ascontiguousarray(raw[::-1, ::-1]), 224, 224))
        assert request[key].dtype == np.uint8 and np.array_equal(request[key], example)
    s = obs.state
    example_state = np.concatenate((s["eef_position"], transform_utils.quat2axisangle(s["eef_quaternion_xyzw"].copy()),
                                    s["gripper_qpos"]))
    assert np.array_equal(request["observation/state"], example_state)
    assert request["prompt"] == obs.instruction and set(request) == {"observation/image", "observation/wrist_image",
                                                                     "observation/state", "prompt"}


def test_libero_request_comes_back_as_the_observation():
    obs = libero_observation()
    contract = LIBERO.contract(5)
    back = LIBERO.observation(LIBERO.request(obs, obs.instruction, 0), contract)
    for role in ("primary", "wrist"):
        assert np.array_equal(back.images[role], obs.images[role])
    for name in ("eef_position", "eef_quaternion_xyzw", "gripper_qpos"):
        np.testing.assert_allclose(back.state[name], obs.state[name], rtol=0, atol=1e-12)
    assert set(back.state) == set(contract.state) and back.instruction == obs.instruction


def test_aloha_request_is_robotwins_and_comes_back():
    rng = np.random.default_rng(2)
    obs = Observation(images={r: rng.integers(0, 256, (240, 320, 3), dtype=np.uint8) for r in ("head", "left_wrist", "right_wrist")},
                      state={"joint_targets": rng.standard_normal(14)}, instruction="hand over the block")
    request = ROBOTWIN.request(obs, obs.instruction, 0)
    for role, name in (("head", "cam_high"), ("left_wrist", "cam_left_wrist"), ("right_wrist", "cam_right_wrist")):
        assert np.array_equal(request["images"][name], np.transpose(obs.images[role], (2, 0, 1)))  # RoboTwin's pi_model.py
    assert np.array_equal(request["state"], obs.state["joint_targets"])
    resized = ROBOTWIN.request(obs, obs.instruction, 224)["images"]["cam_high"]
    assert np.array_equal(resized, np.transpose(image_tools.resize_with_pad(obs.images["head"], 224, 224), (2, 0, 1)))
    back = ROBOTWIN.observation(request, ROBOTWIN.contract(50))
    assert back == obs


def test_layouts_refuse_wrong_keys_naming_them():
    contract = LIBERO.contract(5)
    request = LIBERO.request(libero_observation(), "x", 224)
    with pytest.raises(ObservationError, match="missing key 'observation/wrist_image'"):
        LIBERO.observation({k: v for k, v in request.items() if k != "observation/wrist_image"}, contract)
    with pytest.raises(ObservationError, match="'observation/state' must be 8 numbers"):
        LIBERO.observation({**request, "observation/state": np.zeros(9)}, contract)
    aloha = ROBOTWIN.request(Observation(images={r: np.zeros((8, 8, 3), np.uint8) for r in ROBOTWIN.cameras},
                                         state={"joint_targets": np.zeros(14)}, instruction="x"), "x", 0)
    with pytest.raises(ObservationError, match="'images' must be a map"):
        ROBOTWIN.observation({**aloha, "images": np.zeros(3)}, ROBOTWIN.contract(50))


def aloha_real_observation(seed: int = 0) -> dict:
    """What openpi's ``examples/aloha_real/env.py`` ``get_observation`` returns: the four
    cameras of ``real_env.py`` (480x640x3 uint8) through openpi-client's ``resize_with_pad`` to
    224x224 and ``convert_to_uint8``, then ``einops.rearrange(img, "h w c -> c h w")`` (a
    transpose); ``state`` the 14 qpos; no prompt."""
    rng = np.random.default_rng(seed)
    images = {}
    for name in ("cam_high", "cam_low", "cam_left_wrist", "cam_right_wrist"):
        img = image_tools.convert_to_uint8(image_tools.resize_with_pad(rng.integers(0, 256, (480, 640, 3), np.uint8), 224, 224))
        images[name] = np.transpose(img, (2, 0, 1))
    return {"state": rng.standard_normal(14), "images": images}


def test_aloha_takes_what_openpis_aloha_inputs_takes():
    """openpi's ``AlohaInputs`` (``src/openpi/policies/aloha_policy.py``): cameras among
    cam_high, cam_low, cam_left_wrist, cam_right_wrist; cam_high required; a missing wrist a
    black image of cam_high's size; cam_low unused. The prompt: the server's default."""
    contract = ROBOTWIN.contract(50)
    real = aloha_real_observation()
    with pytest.raises(ObservationError, match="missing key 'prompt'.*wam serve --default-prompt"):
        ROBOTWIN.observation(real, contract)
    obs = ROBOTWIN.observation(inject_default_prompt(real, "fold the towel"), contract)
    assert obs.instruction == "fold the towel" and np.array_equal(obs.state["joint_targets"], real["state"])
    for role, name in (("head", "cam_high"), ("left_wrist", "cam_left_wrist"), ("right_wrist", "cam_right_wrist")):
        assert np.array_equal(obs.images[role], np.transpose(real["images"][name], (1, 2, 0)))
    with_prompt = {**real, "prompt": "uncap the pen"}
    assert ROBOTWIN.observation(inject_default_prompt(with_prompt, "fold the towel"), contract).instruction == "uncap the pen"
    wrists = ("cam_left_wrist", "cam_right_wrist")
    for kept in [(), ("cam_low",), ("cam_left_wrist",), ("cam_right_wrist", "cam_low"), wrists]:
        subset = {name: real["images"][name] for name in ("cam_high", *kept)}
        obs = ROBOTWIN.observation({**real, "images": subset, "prompt": "x"}, contract)
        for role, name in (("left_wrist", "cam_left_wrist"), ("right_wrist", "cam_right_wrist")):
            expected = real["images"][name] if name in kept else np.zeros_like(real["images"]["cam_high"])
            assert np.array_equal(obs.images[role], np.transpose(expected, (1, 2, 0))), (kept, role)
    small_head = {"cam_high": np.zeros((3, 8, 12), np.uint8)}
    assert ROBOTWIN.observation({**real, "images": small_head, "prompt": "x"}, contract).images["left_wrist"].shape == (8, 12, 3)
    with pytest.raises(ObservationError, match="needs 'cam_high', the base image"):
        ROBOTWIN.observation({**real, "images": {n: real["images"][n] for n in wrists}, "prompt": "x"}, contract)
    with pytest.raises(ObservationError, match="camera\\(s\\) 'cam_front'; openpi's AlohaInputs accepts cam_high, cam_low"):
        ROBOTWIN.observation({**real, "images": {**real["images"], "cam_front": real["images"]["cam_low"]},
                              "prompt": "x"}, contract)


def test_a_model_needing_what_openpis_keys_lack_is_refused_at_start():
    needs_joints = AdapterContract(platform="libero", action_space=LIBERO.action_space, action_dim=7,
                                   cameras={"primary": None}, state={"joint_positions": 7}, chunk_size=4)
    with pytest.raises(ConfigurationError, match="needs state 'joint_positions'"):
        LIBERO.check(needs_joints)
    with pytest.raises(ConfigurationError, match="needs state 'joint_positions'"):
        check_served(needs_joints)  # what `wam serve --protocol openpi` runs before the model loads
    LIBERO.check(LIBERO.contract(5))
    assert layout_for("libero") is LIBERO and layout_for("RoboTwin") is ROBOTWIN
    assert isinstance(layout_for("pointmass"), GenericLayout)  # no openpi convention: one key per camera and state


def test_metadata_checks():
    assert LIBERO.check_metadata({}, 5) == []  # what openpi's LIBERO configs serve
    assert "ALOHA" in LIBERO.check_metadata({"reset_pose": [0, -1.5, 1.5, 0, 0, 0]}, 5)[0]
    assert ROBOTWIN.check_metadata({"reset_pose": [0, -1.5, 1.5, 0, 0, 0]}, 50) == []
    ours = {"wamcore": {"layout": "libero", "action_space": LIBERO.action_space, "chunk_size": 4}}
    assert LIBERO.check_metadata(ours, 4) == []
    assert "fewer than the 5" in LIBERO.check_metadata(ours, 5)[0]
    assert len(ROBOTWIN.check_metadata(ours, 4)) == 2  # another layout, another action space


@pytest.mark.parametrize("answer, problem", [
    ({"action": np.zeros((10, 7), np.float32)}, "has no 'actions'"),
    ({"actions": np.zeros((10, 7), np.int64)}, "2-D float array"),
    ({"actions": np.zeros(7, np.float32)}, "2-D float array"),
    ({"actions": np.zeros((10, 32), np.float32)}, r"\[T >= 5, 7\]"),
    ({"actions": np.zeros((4, 7), np.float32)}, r"\[T >= 5, 7\]"),
    ([1, 2], "has no 'actions'"),
])
def test_answers_without_a_usable_chunk_are_prediction_errors(answer, problem):
    with pytest.raises(PredictionError, match=problem):
        served_actions(answer, 5, 7)
    chunk, served = served_actions({"actions": np.arange(70, dtype=np.float64).reshape(10, 7)}, 5, 7)
    assert chunk.dtype == np.float32 and chunk.shape == (5, 7) and served == 10 and chunk[4, 6] == 34
