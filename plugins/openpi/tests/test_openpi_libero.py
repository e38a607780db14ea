"""Both directions on the real LIBERO simulator (libero_spatial task 0, 256 px).

1. ``openpi-remote`` in a spawned ``wam serve`` worker drives LIBERO through a stand-in of
   openpi's policy server: the server receives exactly what openpi's
   ``examples/libero/main.py`` would send for the same simulator state (built here from
   LIBERO's raw observation with openpi-client's and robosuite's own functions), and the
   robot does what the served chunks say.
2. openpi-client (unmodified) sends that same example request to ``wam serve --protocol
   openpi`` with the LIBERO smoke model, and the same observation through our own protocol
   and through openpi-remote over openpi's protocol gives the same actions.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from openpi_client import image_tools
from openpi_client.websocket_client_policy import WebsocketClientPolicy
from openpi_helpers import SERVE_ENV, remote, served
from robosuite.utils import transform_utils

from wam_libero.plugin import LIBERO_PLATFORM
from wamcore import PredictRequest, Registry
from wamcore.execution import COMPLETED, wam_act
from wamcore.runtime import SPAWN, WorkerConfig, open_model

# openpi-client's own connect() warns under websockets 17
pytestmark = pytest.mark.filterwarnings("ignore:connect\\(\\) must be used as a context manager:DeprecationWarning")
SMOKE_ACTION = [0.1, -0.2, 0.3, 0.0, 0.05, -0.05, 1.0]


@pytest.fixture(scope="module")
def libero_env():
    env = LIBERO_PLATFORM.create(suite="libero_spatial", task="0", resolution=256, fast_render=True)
    yield env
    env.close()


def example_request(raw: dict, prompt: str) -> dict:
    """What openpi's examples/libero/main.py sends for LIBERO's raw observation ``raw``."""
    def image(key):
        rotated = np.ascontiguousarray(raw[key][::-1, ::-1])
        return image_tools.convert_to_uint8(image_tools.resize_with_pad(rotated, 224, 224))

    state = np.concatenate((raw["robot0_eef_pos"], transform_utils.quat2axisangle(raw["robot0_eef_quat"].copy()),
                            raw["robot0_gripper_qpos"]))
    return {"observation/image": image("agentview_image"), "observation/wrist_image": image("robot0_eye_in_hand_image"),
            "observation/state": state, "prompt": prompt}


def finger_gap(obs) -> float:
    q = obs.state["gripper_qpos"]
    return float(q[0] - q[1])


def test_openpi_remote_drives_libero_with_what_openpis_example_sends(libero_env, standin, tmp_path):
    server = standin("libero")
    up_close = [[0.0, 0.0, 0.8, 0.0, 0.0, 0.0, 1.0]]  # LIBERO's own units: openpi serves env actions
    side_open = [[0.0, -0.8, 0.0, 0.0, 0.0, 0.0, -1.0]]
    config = WorkerConfig.from_options(platform="libero", am_backend="openpi-remote", am_python=sys.executable,
                                       backend_options={"openpi_endpoint": server.url}, log_dir=str(tmp_path))
    assert config.mode == SPAWN
    model = open_model(config, LIBERO_PLATFORM, registry=Registry(), observation=libero_env.observation_spec)
    try:
        assert model.contract.chunk_size == 5  # openpi's replan_steps
        obs0 = libero_env.reset(seed=0, init_state=0)
        raw0 = dict(libero_env._raw)
        server.script(actions=up_close, repeat=10)
        first = wam_act(model, libero_env, max_chunks=1)
        obs1, raw1 = libero_env.observe(), dict(libero_env._raw)
        server.script(actions=side_open, repeat=10)
        second = wam_act(model, libero_env, max_chunks=1, instruction="slide left")
        obs2 = libero_env.observe()
    finally:
        model.close()
    assert (first.steps, first.stop_reason, second.steps, second.stop_reason) == (5, COMPLETED, 5, COMPLETED)
    assert first.predictions[0].info["served_actions"] == 10

    sent = server.requests()
    assert len(sent) == 2
    for got, want in zip(sent, (example_request(raw0, obs0.instruction), example_request(raw1, "slide left"))):
        assert set(got) == set(want)
        for key in ("observation/image", "observation/wrist_image"):
            assert got[key].dtype == np.uint8 and np.array_equal(got[key], want[key]), key
        assert np.array_equal(got["observation/state"], want["observation/state"]) and got["prompt"] == want["prompt"]

    d1 = obs1.state["eef_position"] - obs0.state["eef_position"]
    d2 = obs2.state["eef_position"] - obs1.state["eef_position"]
    assert d1[2] > 0.02 and abs(d1[0]) < d1[2] / 3 and abs(d1[1]) < d1[2] / 3, d1
    assert -d2[1] > 0.02 and abs(d2[0]) < -d2[1] / 3 and abs(d2[2]) < -d2[1] / 3, d2
    assert finger_gap(obs1) < finger_gap(obs0) - 0.005 and finger_gap(obs2) > finger_gap(obs1) + 0.005


def test_openpi_client_drives_a_libero_model_and_both_protocols_agree(libero_env, tmp_path):
    obs = libero_env.reset(seed=0, init_state=1)
    raw = dict(libero_env._raw)
    kw = dict(backend="libero-smoke", platform="libero", env={**os.environ, **SERVE_ENV})
    smoke = ("--am-option", "chunk=10", "--am-option", "action=" + ",".join(map(str, SMOKE_ACTION)))
    with served(tmp_path, "--protocol", "openpi", *smoke, **kw) as openpi_worker, served(tmp_path, *smoke, **kw) as zmq_worker:
        assert openpi_worker.ready["layout"] == "libero"
        policy = WebsocketClientPolicy("127.0.0.1", openpi_worker.port)
        meta = policy.get_server_metadata()["wamcore"]
        assert (meta["layout"], meta["action_space"], meta["chunk_size"]) == ("libero", "libero.osc_pose.delta.v1", 10)
        answer = policy.infer(example_request(raw, obs.instruction))
        policy._ws.close()
        assert answer["actions"].shape == (10, 7) and np.allclose(answer["actions"], np.float32(SMOKE_ACTION))

        ours = open_model(WorkerConfig.from_options(platform="libero", am_endpoint=zmq_worker.endpoint), LIBERO_PLATFORM,
                          registry=Registry(), observation=libero_env.observation_spec)
        theirs = remote(openpi_worker.endpoint, openpi_chunk=10)
        try:
            via_ours = ours.predict(PredictRequest(obs)).actions
            via_openpi = theirs.predict(PredictRequest(obs)).actions
        finally:
            ours.close()
            theirs.close()
    assert via_openpi.dtype == via_ours.dtype == np.float32 and np.array_equal(via_openpi, via_ours)
