"""``wam serve --protocol openpi`` in real processes, driven by openpi's own client.

openpi-client (the real PyPI package, unmodified) talks to the PointMass reference WAM and
gets exactly the actions our own protocol gives for the same observations; the core's
scripted model (``tests/wamtest_scripted.py``, which counts its calls), served with this
plugin's protocol loaded beside it, shows that wrong keys and
malformed frames come back as openpi sends errors (a text frame, then close 1011) without
ever reaching the model, that each connection is one session, and the token rules.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import msgpack
import numpy as np
import pytest
from openpi_client.websocket_client_policy import WebsocketClientPolicy
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.frames import CloseCode
from websockets.sync.client import connect

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))  # the core's worker helpers

import helpers_workers  # noqa: E402
from helpers_workers import PLUGIN_MODULE, no_leaks, worker_env  # noqa: E402,F401

import wamtest_scripted as toy  # noqa: E402
from wam_openpi import codec  # noqa: E402
from wamcore.contracts import PredictRequest  # noqa: E402
from wamcore.registry import default_registry  # noqa: E402
from wamcore.runtime import WorkerConfig, open_model  # noqa: E402

pytestmark = [pytest.mark.usefixtures("no_leaks"),  # openpi-client's own connect() warns under websockets 17:
              pytest.mark.filterwarnings("ignore:connect\\(\\) must be used as a context manager:DeprecationWarning")]
OPENPI = ("--protocol", "openpi")


def openpi_env(**extra: str) -> dict:
    """A worker's environment with the scripted models and this plugin's protocol only."""
    return worker_env(WAMCORE_PLUGIN_MODULES=f"{PLUGIN_MODULE},wam_openpi.plugin", **extra)


def served(tmp: Path, *args: str, env=None, **kw):
    """``wam serve`` (helpers_workers.served) where the openpi protocol is installed."""
    return helpers_workers.served(tmp, *args, env=env or openpi_env(), **kw)


def generic_keys(obs) -> dict:
    """The generic layout: one key per camera and state vector, and the prompt."""
    return {**{f"observation/images/{k}": v for k, v in obs.images.items()},
            **{f"observation/state/{k}": v for k, v in obs.state.items()}, "prompt": obs.instruction}


def toy_request(**changes) -> dict:
    request = generic_keys(toy.ToyEnv().reset(seed=1))
    for key, value in changes.items():
        if value is None:
            request.pop(key)
        else:
            request[key] = value
    return request


def close(policy: WebsocketClientPolicy) -> None:
    policy._ws.close()  # openpi-client has no close(); its connection is this attribute


def test_the_plugin_registers_the_openpi_protocol_with_its_own_options():
    from wam_openpi import plugin
    from wamcore.registry import Registry

    registry = Registry(entry_points=False)
    record = registry.register(plugin, name="openpi")
    assert record.serving_protocols == ["openpi"] and record.problems == []  # its flags are not wamcore's own
    assert [o.flag for o in registry.serving_protocol("openpi").options] == ["--default-prompt", "--idle-grace"]


def test_openpi_client_gets_the_actions_our_protocol_gives(tmp_path):
    registry = default_registry()
    platform = registry.platform("pointmass")
    env = platform.create()
    kw = dict(backend="pointmass-wam", platform="pointmass", env={**os.environ, "PYTHONUNBUFFERED": "1"})
    with served(tmp_path, *OPENPI, **kw) as openpi_worker, served(tmp_path, "--batch-window-ms", "0", **kw) as zmq_worker:
        assert openpi_worker.ready["protocol"] == "openpi" and openpi_worker.ready["layout"] == "generic"
        assert openpi_worker.endpoint == f"ws://127.0.0.1:{openpi_worker.port}"
        ours = open_model(WorkerConfig.from_options(platform="pointmass", am_endpoint=zmq_worker.endpoint), platform,
                          registry=registry)
        theirs = WebsocketClientPolicy("127.0.0.1", openpi_worker.port)
        try:
            meta = theirs.get_server_metadata()["wamcore"]
            assert (meta["backend"], meta["platform"], meta["action_dim"]) == ("pointmass-wam", "pointmass", 2)
            assert set(meta["keys"]) == set(generic_keys(env.reset(seed=0)))
            compared = 0
            for seed in range(3):
                obs = env.reset(seed=seed)
                for _ in range(3):
                    expected = ours.predict(PredictRequest(obs)).actions
                    answer = theirs.infer(generic_keys(obs))
                    assert answer["actions"].dtype == np.float32 and np.array_equal(answer["actions"], expected)
                    assert answer["server_timing"]["infer_ms"] > 0 and answer["policy_timing"]["model_ms"] > 0
                    for action in expected[:3]:
                        env.step(action)
                    obs = env.observe()
                    compared += 1
            assert compared == 9 and "prev_total_ms" in answer["server_timing"]
        finally:
            ours.close()
            close(theirs)


def _array_map(dtype: str, data: bytes, shape) -> dict:
    return {b"__ndarray__": True, b"data": data, b"dtype": dtype, b"shape": shape}


MALFORMED = [
    ("text frame", "observation", "ProtocolError"),
    ("not msgpack", b"\xc1\xc1\xc1", "ProtocolError"),
    ("not a map", msgpack.packb([1, 2, 3]), "ObservationError"),
    ("object dtype", msgpack.packb({**{k: v for k, v in toy_request().items() if not isinstance(v, np.ndarray)},
                                    "observation/state/position": _array_map("|O", b"\0" * 16, [2])}), "ProtocolError"),
    ("bytes do not fit", msgpack.packb({"observation/state/position": _array_map("<f8", b"\0" * 15, [2])}), "ProtocolError"),
    ("missing key", codec.packb(toy_request(**{"observation/images/wrist": None})), "missing key 'observation/images/wrist'"),
    ("openpi's LIBERO keys", codec.packb({"observation/image": np.zeros((24, 32, 3), np.uint8), "prompt": "x"}),
     "unexpected key(s) 'observation/image'"),
    ("float image", codec.packb(toy_request(**{"observation/images/primary": np.zeros((24, 32, 3), np.float32)})),
     "dtype must be uint8"),
    ("wrong size", codec.packb(toy_request(**{"observation/images/primary": np.zeros((10, 10, 3), np.uint8)})),
     "size must be 24x32"),
    ("NaN state", codec.packb(toy_request(**{"observation/state/position": np.array([np.nan, 0.0])})), "NaN"),
    ("state too long", codec.packb(toy_request(**{"observation/state/velocity": np.zeros(3)})), "shape must be (2,)"),
    ("empty prompt", codec.packb(toy_request(prompt=" ")), "instruction is empty"),
    ("prompt not text", codec.packb(toy_request(prompt=7)), "instruction must be a string"),
]


def test_wrong_keys_and_malformed_frames_are_answered_as_openpi_does_and_never_reach_the_model(tmp_path):
    with served(tmp_path, *OPENPI) as worker:
        url = worker.endpoint
        for why, message, expected in MALFORMED:
            with connect(url, compression=None, max_size=None) as ws:
                assert "wamcore" in codec.unpackb(ws.recv(timeout=10))  # the metadata comes first
                ws.send(message)
                text = ws.recv(timeout=10)
                assert isinstance(text, str) and expected in text, why
                assert text.startswith("Traceback"), why
                with pytest.raises(ConnectionClosed) as closed:
                    ws.recv(timeout=10)
                assert closed.value.rcvd.code == CloseCode.INTERNAL_ERROR, why
        # openpi's own client sees a RuntimeError that carries our problem list
        policy = WebsocketClientPolicy("127.0.0.1", worker.port)
        with pytest.raises(RuntimeError, match=r"(?s)ObservationError.*missing key 'observation/state/velocity'"):
            policy.infer(toy_request(**{"observation/state/velocity": None}))
        close(policy)
        policy = WebsocketClientPolicy("127.0.0.1", worker.port)
        answer = policy.infer(toy_request())
        close(policy)
    assert answer["info"]["native_calls"] == 1  # nothing malformed ever reached the model
    assert answer["actions"].shape == (toy.CHUNK, 2)


def test_an_oversized_message_closes_only_its_connection(tmp_path):
    with served(tmp_path, *OPENPI, "--max-message-mb", "0.01") as worker:
        with connect(worker.endpoint, compression=None, max_size=None) as ws:
            ws.recv(timeout=10)
            ws.send(codec.packb(toy_request(extra=np.zeros(1 << 20, np.uint8))))
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=10)
            assert closed.value.rcvd.code == CloseCode.MESSAGE_TOO_BIG
        policy = WebsocketClientPolicy("127.0.0.1", worker.port)
        assert policy.infer(toy_request())["actions"].shape == (toy.CHUNK, 2)
        close(policy)


def test_each_connection_is_one_session_and_connections_are_capped(tmp_path):
    with served(tmp_path, *OPENPI, "--max-sessions", "2") as worker:
        a = WebsocketClientPolicy("127.0.0.1", worker.port)
        b = WebsocketClientPolicy("127.0.0.1", worker.port)
        counts = [p.infer(toy_request())["info"]["count"] for p in (a, b, a, a, b)]
        assert counts == [1, 1, 2, 3, 2]  # the scripted model counts per session
        with pytest.raises(InvalidStatus) as refused:
            WebsocketClientPolicy("127.0.0.1", worker.port)
        assert refused.value.response.status_code == 503
        close(a)
        deadline = time.monotonic() + 10
        while True:  # the server frees the slot once it has seen the close
            try:
                c = WebsocketClientPolicy("127.0.0.1", worker.port)
                break
            except InvalidStatus:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert c.infer(toy_request())["info"]["count"] == 1  # a new connection is a new session
        close(b)
        close(c)


def test_token_is_required_off_loopback_and_checked_at_the_handshake(tmp_path):
    off_loopback = subprocess.run([sys.executable, "-m", "wamcore", "serve", *OPENPI, "--am-backend", "scripted-wam",
                                   "--platform", "toy", "--host", "0.0.0.0"], env=openpi_env(), capture_output=True,
                                  text=True, timeout=60)
    assert off_loopback.returncode == 2 and "without a token" in off_loopback.stderr
    with served(tmp_path, *OPENPI, env=openpi_env(WAMCORE_TOKEN="s3cret")) as worker:
        assert worker.ready["token_required"] is True
        for key in (None, "wrong"):
            with pytest.raises(InvalidStatus) as refused:
                WebsocketClientPolicy("127.0.0.1", worker.port, api_key=key)
            assert refused.value.response.status_code == 401
        with urllib.request.urlopen(f"http://127.0.0.1:{worker.port}/healthz", timeout=10) as health:
            assert health.status == 200 and health.read() == b"OK\n"  # openpi's health route, no token needed
        policy = WebsocketClientPolicy("127.0.0.1", worker.port, api_key="s3cret")
        assert policy.infer(toy_request())["actions"].shape == (toy.CHUNK, 2)
        close(policy)
        assert "s3cret" not in worker.output()


def test_sigterm_stops_the_server_and_its_ready_file_goes(tmp_path):
    with served(tmp_path, *OPENPI) as worker:
        policy = WebsocketClientPolicy("127.0.0.1", worker.port)  # a connection left open
        worker.proc.terminate()
        assert worker.proc.wait(20) == 0
        assert not worker.ready_file.exists()
        with pytest.raises(ConnectionClosed):
            policy.infer(toy_request())
