"""``--policy-server``: the client of StarWAM's own RoboTwin policy server, against a local
server built here from upstream's framing (``examples/robotwin/policy_server.py``
``send_msg``/``recv_msg``) and the real wamcore service, on loopback."""

from __future__ import annotations

import os
import pickle
import socket
import struct
import threading

import numpy as np
import pytest

from wamcore import LocalModel, ModelConfig, ModelService, PredictRequest
from wamcore.errors import PredictionError, ProtocolError, WorkerError
from wam_starwam.plugin import MODEL
from wam_starwam.server_client import MAX_MESSAGE, loads_reply, recv_reply
from wam_starwam.worker import load

from test_starwam_robotwin import JOINTS, TASK, observation, robotwin_platform

CHUNK = (np.arange(32 * 14, dtype=np.float32).reshape(32, 14) / 1000.0)


class Server:
    """One-client server speaking upstream's framing; ``reply(request)`` decides each answer."""

    def __init__(self, server_module, reply):
        self.module, self.reply, self.requests = server_module, reply, []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        conn, _ = self.sock.accept()
        with conn:
            while True:
                request = self.module.recv_msg(conn)
                if request is None:
                    return
                self.requests.append(request)
                answer = self.reply(request)
                if isinstance(answer, bytes):
                    conn.sendall(struct.pack(">Q", len(answer)) + answer)
                else:
                    self.module.send_msg(conn, answer)

    def close(self):
        self.sock.close()
        self.thread.join(timeout=5)


@pytest.fixture
def server(starwam_root):
    import importlib

    module = importlib.import_module("examples.robotwin.policy_server")
    made = []

    def start(reply):
        made.append(Server(module, reply))
        return made[-1]

    yield start
    for s in made:
        s.close()


def normal(request):
    return {"ok": True} if request.get("cmd") == "reset" else {"action": CHUNK.copy()}


def client(port, **options):
    config = ModelConfig(platform="robotwin", options={"policy_server": str(port), **options})
    return LocalModel(ModelService(MODEL, config, native=load(config))).bind(robotwin_platform())


def test_requests_are_the_clients_and_actions_come_back(server):
    srv = server(normal)
    model = client(srv.port)
    obs = observation(5)
    pred = model.predict(PredictRequest(observation=obs))
    model.reset()
    model.close()
    infer, reset = srv.requests
    assert infer["cmd"] == "infer" and infer["instruction"] == TASK
    for key, role in (("head", "head"), ("left", "left_wrist"), ("right", "right_wrist")):
        np.testing.assert_array_equal(infer[key], obs.images[role])  # raw, native orientation: the server composes
    assert infer["state"].dtype == np.float32 and np.array_equal(infer["state"], JOINTS.astype(np.float32))
    assert reset == {"cmd": "reset"}
    np.testing.assert_array_equal(pred.actions, CHUNK[:24])
    assert model.info.checkpoint == f"starwam-policy-server://127.0.0.1:{srv.port}"


class Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.makedirs, (self.marker,))


def test_a_reply_that_would_run_code_is_refused_unrun(server, tmp_path):
    marker = tmp_path / "ran"
    srv = server(lambda r: pickle.dumps({"action": Payload(str(marker))}))
    model = client(srv.port)
    with pytest.raises(ProtocolError, match="posix.makedirs|os.makedirs"):
        model.predict(PredictRequest(observation=observation()))
    assert not marker.exists()


@pytest.mark.parametrize("reply, error, problem", [
    ({"action": np.array([1, "x"], dtype=object)}, ProtocolError, "refused"),
    ({"action": CHUNK[:16]}, PredictionError, "expected \\(32, 14\\)"),
    ({1: "x"}, ProtocolError, "non-string key"),
])
def test_replies_other_than_plain_numeric_data_are_refused(server, reply, error, problem):
    srv = server(lambda r: reply)
    with pytest.raises(error, match=problem):
        client(srv.port).predict(PredictRequest(observation=observation()))


def test_server_error_comes_back_with_its_traceback(server):
    srv = server(lambda r: {"error": "Traceback ...\nRuntimeError: CUDA out of memory"})
    with pytest.raises(WorkerError, match="CUDA out of memory"):
        client(srv.port).predict(PredictRequest(observation=observation()))


def test_unreadable_and_oversized_replies_are_refused():
    with pytest.raises(ProtocolError, match="unreadable"):
        loads_reply(b"not a pickle")
    a, b = socket.socketpair()
    with a, b:
        a.sendall(struct.pack(">Q", MAX_MESSAGE + 1))
        with pytest.raises(ProtocolError, match="refused"):
            recv_reply(b)


def test_unreachable_server_says_how_to_start_one():
    with socket.socket() as s:  # held bound, not listening: nothing else takes the port, connecting is refused
        s.bind(("127.0.0.1", 0))
        with pytest.raises(WorkerError, match="examples.robotwin.policy_server"):
            client(s.getsockname()[1])
