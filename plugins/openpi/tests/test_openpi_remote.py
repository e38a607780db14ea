"""``openpi-remote`` against openpi-protocol servers in their own processes: a stand-in of
openpi's own server (``openpi_standin.py``) and ``wam serve --protocol openpi``.

What it sends (RoboTwin in openpi's ALOHA keys, as RoboTwin's own openpi policy sends
them), the chunk it executes, the metadata check at connect, and every failure as a typed
wamcore error after which the next request reconnects and works.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from openpi_helpers import SERVE_ENV, libero_request, remote, served

from wam_openpi.client import OpenpiClient
from wamcore import IncompatiblePairError, Observation, PredictRequest
from wamcore.errors import ObservationError, PredictionError, ProtocolError, RemoteError, WorkerError, WorkerTimeout
from wamcore.rpc import AccessDenied

ROLES = {"head": "cam_high", "left_wrist": "cam_left_wrist", "right_wrist": "cam_right_wrist"}


def test_robotwin_sends_robotwins_keys_and_executes_the_chunk_it_asked_for(standin):
    server = standin("aloha")
    row = np.linspace(-0.5, 0.9, 14)
    server.script(actions=[row.tolist()], repeat=50)
    rng = np.random.default_rng(3)
    obs = Observation(images={r: rng.integers(0, 256, (240, 320, 3), dtype=np.uint8) for r in ROLES},
                      state={"joint_targets": rng.standard_normal(14), "joint_positions": np.zeros(12),
                             "left_eef_pose": np.zeros(7), "right_eef_pose": np.zeros(7),
                             "left_gripper": np.ones(1), "right_gripper": np.ones(1)},
                      instruction="hand the block over")
    for chunk, expected in ((None, 50), (25, 25)):
        model = remote(server.url, "robotwin", **({"openpi_chunk": chunk} if chunk else {}))
        prediction = model.predict(PredictRequest(obs))
        model.close()
        assert prediction.actions.shape == (expected, 14) and np.allclose(prediction.actions, row.astype(np.float32))
        assert prediction.info["served_actions"] == 50 and prediction.timing["server_infer_ms"] >= 0
    sent = server.requests()
    assert len(sent) == 2 and set(sent[0]) == {"images/" + n for n in ROLES.values()} | {"state", "prompt"}
    for role, name in ROLES.items():
        assert np.array_equal(sent[0][f"images/{name}"], obs.images[role].transpose(2, 0, 1))  # CHW, as rendered
    assert np.array_equal(sent[0]["state"], obs.state["joint_targets"]) and sent[0]["prompt"] == "hand the block over"


@pytest.mark.parametrize("script, error, match", [
    ({"mode": "raise"}, RemoteError, "ValueError in model worker: scripted failure inside the policy"),
    ({"mode": "garbage"}, ProtocolError, "malformed openpi message"),
    ({"mode": "object"}, ProtocolError, "dtype"),
    ({"mode": "no-actions"}, PredictionError, "has no 'actions'"),
    ({"actions": [[0.0] * 8], "repeat": 10}, PredictionError, r"\[T >= 5, 7\]"),
    ({"actions": [[0.0] * 7], "repeat": 3}, PredictionError, r"got \(3, 7\)"),
    ({"mode": "close"}, WorkerError, "closed the connection"),
    ({"mode": "sleep", "seconds": 3}, WorkerTimeout, "within 0.5 s"),
])
def test_every_failure_is_typed_and_the_next_request_reconnects(standin, script, error, match):
    server = standin("libero")
    model = remote(server.url, openpi_timeout=0.5)
    try:
        server.script(**script)
        with pytest.raises(error, match=match) as failed:
            model.predict(libero_request())
        if error is RemoteError:
            assert failed.value.remote_type == "ValueError" and "Traceback" in failed.value.remote_traceback
        server.script(actions=[[0.1, 0, 0, 0, 0, 0, -1]], repeat=10)
        assert np.allclose(model.predict(libero_request(1)).actions[:, 0], 0.1)
    finally:
        model.close()


def test_connect_checks_the_server_and_a_vanished_server_is_an_error(standin):
    aloha = standin("aloha", metadata={"reset_pose": [0, -1.5, 1.5, 0, 0, 0]})
    with pytest.raises(IncompatiblePairError, match="reset_pose: it serves an ALOHA policy"):
        remote(aloha.url, "libero")
    remote(aloha.url, "robotwin").close()  # the same server fits RoboTwin's layout
    server = standin("libero")
    model = remote(server.url)
    assert model.info.details["openpi_endpoint"] == server.url and model.info.checkpoint == server.url
    server.stop()
    with pytest.raises(WorkerError, match="closed the connection"):
        model.predict(libero_request())
    with pytest.raises(WorkerError, match="nothing answers at"):
        model.predict(libero_request())
    model.close()
    with pytest.raises(WorkerError, match="nothing answers at"):
        remote(server.url)


def test_against_our_own_server_typed_errors_come_back_as_their_class_and_the_token_is_the_api_key(tmp_path, monkeypatch):
    args = ("--protocol", "openpi", "--am-option", "chunk=4")
    with served(tmp_path, *args, backend="libero-smoke", platform="libero",
                env={**os.environ, **SERVE_ENV, "WAMCORE_TOKEN": "s3cret"}) as worker:
        with pytest.raises(AccessDenied, match="HTTP 401"):
            remote(worker.endpoint, openpi_chunk=4)
        monkeypatch.setenv("WAM_OPENPI_API_KEY", "s3cret")
        with pytest.raises(IncompatiblePairError, match="answers 4 actions per request, fewer than the 5"):
            remote(worker.endpoint)  # its metadata says what it serves
        model = remote(worker.endpoint, openpi_chunk=4)
        assert model.predict(libero_request()).actions.shape == (4, 7)
        model.close()
        client = OpenpiClient(worker.endpoint, api_key="s3cret")
        client.connect()
        with pytest.raises(ObservationError) as refused:
            client.infer({"observation/image": np.zeros((224, 224, 3), np.uint8), "prompt": "x"})
        assert refused.value.problems[0] == "missing key 'observation/wrist_image' (wrist camera, HxWx3 uint8, rotated the same way)"
        assert len(refused.value.problems) == 2 and "Traceback" in refused.value.remote_traceback
        client.close()
