"""The worker protocol against a real ``wam serve`` process: handshake, methods, typed errors,
malformed input straight to the worker, bad action chunks, timeouts, tokens, versions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgpack
import numpy as np
import pytest
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parent))  # helpers beside the tests

from helpers_workers import no_leaks, scripted_env, served, wait_for, worker_env  # noqa: E402,F401

import wamtest_scripted as toy  # noqa: E402
from wamcore import wire  # noqa: E402
from wamcore.contracts import PROTOCOL_VERSION, Observation, PredictRequest  # noqa: E402
from wamcore.errors import (  # noqa: E402
    ActionError,
    CheckpointError,
    ConfigurationError,
    ObservationError,
    ProtocolError,
    RemoteError,
    WorkerError,
    WorkerTimeout,
)
from wamcore.execution import wam_act  # noqa: E402
from wamcore.rpc import AccessDenied, RemoteModel, open_remote  # noqa: E402
from wamcore.runtime import WorkerConfig  # noqa: E402
from wamcore.specs import PlatformSpec  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_leaks")

TOY = PlatformSpec(name="toy", observation=toy.TOY_OBSERVATION, control=toy.TOY_CONTROL, make_env=toy.ToyEnv)


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    with served(tmp_path_factory.mktemp("worker")) as w:
        yield w


def client(endpoint, **kw) -> RemoteModel:
    return RemoteModel(endpoint, **kw).bind(TOY)


def good_obs(seed=0) -> Observation:
    env = toy.ToyEnv()
    return env.reset(seed=seed)


def native_calls(model: RemoteModel) -> int:
    """How often the worker's model has run, read from a fresh valid prediction (which adds one)."""
    return model.predict(PredictRequest(good_obs())).info["native_calls"] - 1


# ----------------------------------------------------------------------------- handshake


def test_handshake_reports_version_model_and_worker(worker):
    with client(worker.endpoint) as m:
        assert m.info.backend == "scripted-wam"
        assert m.info.contract_for("toy") == toy.CONTRACT
        assert m.info.timeout_s == 20.0
        details = m.info.details["worker"]
        assert details["pid"] == worker.pid and details["wamcore"]
        assert m.aliases == ("scripted",)
        health = m.health()
        assert health["status"] == "ok" and health["sessions"] >= 1 and health["pid"] == worker.pid
        assert m.get_model_info() == m.info
    # the ready line went to stdout (the log here) and the ready file: one JSON object
    line = next(ln for ln in worker.output().splitlines() if ln.startswith("{"))
    record = json.loads(line)
    assert record["event"] == "ready" and record["protocol"] == PROTOCOL_VERSION
    assert record["endpoint"] == worker.endpoint and record["port"] > 0 and record["endpoint"].startswith("tcp://127.0.0.1:")


def test_predict_round_trip_matches_in_process(worker):
    from wamcore.registry import Registry
    from wamcore.service import LocalModel, ModelService
    from wamcore.specs import ModelConfig

    reg = Registry(entry_points=False)
    reg.register(toy, name="toy")
    local = LocalModel(ModelService(reg.model("scripted-wam"), ModelConfig(platform="toy"))).bind(TOY)
    with client(worker.endpoint) as remote:
        for seed in range(3):
            request = PredictRequest(good_obs(seed), seed=seed)
            a, b = remote.predict(request), local.predict(request)
            np.testing.assert_array_equal(a.actions, b.actions)
            assert a.actions.dtype == np.float32 and a.actions.shape == (toy.CHUNK, 2)
            assert {"validate_ms", "model_ms", "server_ms"} <= set(a.timing)


# ----------------------------------------------------------------------------- malformed observations


def _obs_wire(**changes) -> dict:
    obs = good_obs()
    d = PredictRequest(obs).to_wire()
    o = d["observation"]
    for path, value in changes.items():
        section, _, key = path.partition("__")
        target = o if not key else o[section]
        name = key or section
        if value is _DROP:
            del target[name]
        else:
            target[name] = value
    return d


_DROP = object()
IMG = np.zeros((*toy.SIZE, 3), dtype=np.uint8)

MALFORMED_OBSERVATIONS = {
    "missing camera": (dict(images__wrist=_DROP), ObservationError, "camera 'wrist' is missing"),
    "extra camera": (dict(images__side=IMG), ObservationError, "not in the contract"),
    "image dtype float": (dict(images__primary=IMG.astype(np.float32)), ObservationError, "dtype must be uint8"),
    "image not HxWx3": (dict(images__primary=IMG[..., 0]), ObservationError, "shape must be (H, W, 3)"),
    "image wrong size": (dict(images__primary=np.zeros((48, 64, 3), np.uint8)), ObservationError, "size must be 24x32"),
    "image zero-sized": (dict(images__primary=np.zeros((0, 32, 3), np.uint8)), ObservationError, "shape must be"),
    "image not an array": (dict(images__primary=[[1, 2, 3]]), ObservationError, "expected an HxWx3 uint8 array"),
    "missing state": (dict(state__velocity=_DROP), ObservationError, "state 'velocity' is missing"),
    "extra state": (dict(state__joints=np.zeros(7)), ObservationError, "not in the contract"),
    "state wrong length": (dict(state__position=np.zeros(3)), ObservationError, "shape must be (2,)"),
    "state 2-D": (dict(state__position=np.zeros((1, 2))), ObservationError, "shape must be (2,)"),
    "state NaN": (dict(state__position=np.array([0.1, np.nan])), ObservationError, "NaN or inf"),
    "state inf": (dict(state__velocity=np.array([np.inf, 0.0])), ObservationError, "NaN or inf"),
    "state bool": (dict(state__position=np.array([True, False])), ObservationError, "dtype must be numeric"),
    "state not an array": (dict(state__position=[0.1, 0.2]), ObservationError, "expected a 1-D numeric array"),
    "empty instruction": (dict(instruction=""), ObservationError, "instruction is empty"),
    "blank instruction": (dict(instruction="   "), ObservationError, "instruction is empty"),
    "instruction not a string": (dict(instruction=42), ObservationError, "instruction must be a string"),
    "images not a map": (dict(images=[IMG]), ProtocolError, "malformed predict request"),
    "observation of another version": (dict(v=PROTOCOL_VERSION + 1), ProtocolError, "protocol version"),
    "observation missing a field": (dict(state=_DROP), ProtocolError, "malformed predict request"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED_OBSERVATIONS))
def test_malformed_observation_gets_typed_error_and_never_reaches_model(worker, case):
    changes, error, text = MALFORMED_OBSERVATIONS[case]
    with client(worker.endpoint) as m:
        before = native_calls(m)
        # straight to the worker: no client-side selection or checks on the way
        with pytest.raises(error) as info:
            m._session_call("predict", {"request": _obs_wire(**changes)}, 5.0)
        assert text in str(info.value)
        assert info.value.remote_traceback and "Traceback" in info.value.remote_traceback
        if error is ObservationError:
            assert info.value.problems and any(text in p for p in info.value.problems)
        assert native_calls(m) == before + 1  # only our own valid probe ran the model


def test_candidate_actions_need_the_capability(worker):
    from wamcore.errors import CapabilityError

    with client(worker.endpoint) as m:
        before = native_calls(m)
        request = PredictRequest(good_obs(), candidate_actions=np.zeros((4, 2), np.float32))
        with pytest.raises(CapabilityError, match="action_conditioned_futures"):
            m.predict(request)
        assert native_calls(m) == before + 1


def _raw_socket(endpoint):
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 5000)
    sock.connect(endpoint)
    return sock


def _request(method="health", **over):
    msg = {"type": "rpc_request", "v": PROTOCOL_VERSION, "id": 1, "method": method, "session": None,
           "token": None, "args": {}}
    msg.update(over)
    return msg


RAW_MESSAGES = {
    "garbage header": ([b"\xc1\xc1 not msgpack"], "ProtocolError", "malformed message header"),
    "missing buffer frame": (  # array references are read in a request's args, once the envelope passed
        [msgpack.packb(_request(args={"x": msgpack.ExtType(1, msgpack.packb([3, "|u1", [4]]))}))], "ProtocolError",
        "bad array reference"),
    "buffer size mismatch": (
        [msgpack.packb(_request(args={"x": msgpack.ExtType(1, msgpack.packb([0, "<f4", [4]]))})), b"\0" * 3],
        "ProtocolError", "needs 16 bytes"),
    "object dtype": (
        [msgpack.packb(_request(args={"x": msgpack.ExtType(1, msgpack.packb([0, "|O", [1]]))})), b"\0" * 8],
        "ProtocolError", "cannot go on the wire"),
    "not a map": ([msgpack.packb([1, 2, 3])], "ProtocolError", "expected an rpc_request message"),
    "other protocol version": ([msgpack.packb(_request(v=99))], "ProtocolError", "version 99"),
    "unknown method": ([msgpack.packb(_request("eval_python"))], "ProtocolError", "unknown method 'eval_python'"),
    "predict without session": ([msgpack.packb(_request("predict"))], "SessionNotFound", "is not open"),
    "args not a map": ([msgpack.packb(_request(args=[1]))], "ProtocolError", "args must be a map"),
}


@pytest.mark.parametrize("case", sorted(RAW_MESSAGES))
def test_malformed_message_gets_typed_error_and_worker_keeps_serving(worker, case):
    frames, error_type, text = RAW_MESSAGES[case]
    with client(worker.endpoint) as m:
        before = native_calls(m)
        sock = _raw_socket(worker.endpoint)
        try:
            sock.send_multipart(frames)
            reply = wire.decode(sock.recv_multipart())
        finally:
            sock.close()
        assert reply["type"] == "rpc_response" and reply["ok"] is False
        assert reply["error"]["type"] == error_type and text in reply["error"]["message"]
        assert native_calls(m) == before + 1


# ----------------------------------------------------------------------------- errors from the model


def test_model_errors_come_back_typed_with_traceback_and_connection_stays_usable(worker):
    with client(worker.endpoint) as m:
        with pytest.raises(RemoteError) as info:
            m.predict(PredictRequest(good_obs(), options={"behaviour": "raise-value-error"}))
        assert info.value.remote_type == "ValueError"
        assert "scripted failure inside the model" in str(info.value)
        assert "wamtest_scripted.py" in info.value.remote_traceback
        with pytest.raises(CheckpointError, match="pinned sha256") as info:
            m.predict(PredictRequest(good_obs(), options={"behaviour": "raise-checkpoint-error"}))
        assert "raise CheckpointError" in info.value.remote_traceback
        assert m.predict(PredictRequest(good_obs())).actions.shape == (toy.CHUNK, 2)


BAD_CHUNKS = {
    "nan": "NaN or inf",
    "wrong-dim": "action dim must be 2",
    "wrong-length": "chunk length must be 4",
    "out-of-bounds": "beyond the high bound",
    "int-dtype": "dtype must be float",
    "one-d": "must be 2-D",
}


@pytest.mark.parametrize("behaviour", sorted(BAD_CHUNKS))
def test_malformed_action_chunk_from_worker_is_rejected_before_execution(worker, behaviour):
    env = toy.ToyEnv()
    env.reset(seed=1)
    with client(worker.endpoint) as m:
        with pytest.raises(ActionError, match=BAD_CHUNKS[behaviour]):
            wam_act(m, env, max_chunks=1, options={"behaviour": behaviour})
        assert env.executed == [] and env.steps == 0
        result = wam_act(m, env, max_chunks=1)
        assert result.steps == toy.CHUNK and len(env.executed) == toy.CHUNK


# ----------------------------------------------------------------------------- sessions


def test_two_clients_interleave_predict_and_reset_in_separate_sessions(worker):
    def count(m):
        return m.predict(PredictRequest(good_obs())).info["count"]

    with client(worker.endpoint) as a, client(worker.endpoint) as b:
        assert a.session != b.session
        assert [count(a), count(a), count(b), count(a), count(b)] == [1, 2, 1, 3, 2]
        a.reset()
        assert [count(b), count(a), count(b), count(a)] == [3, 1, 4, 2]
        b.reset()
        b.reset()
        assert [count(a), count(b)] == [3, 1]
        sessions = a.health()["sessions"]
    with client(worker.endpoint) as c:
        assert c.health()["sessions"] == sessions - 1  # a and b said bye; c is new


def predict_info(m) -> dict:
    return m.predict(PredictRequest(good_obs())).info


def test_a_session_that_says_bye_frees_its_model_state(tmp_path):
    with served(tmp_path) as w:
        with client(w.endpoint) as a:
            assert predict_info(a)["held"] == 1
        with client(w.endpoint) as b:  # a said bye: the model holds b's state alone
            info = predict_info(b)
            assert (info["held"], info["resets"]) == (1, 1)


def test_an_idle_session_that_expires_frees_its_model_state(tmp_path):
    with served(tmp_path, "--session-ttl", "1") as w:
        a = client(w.endpoint)
        assert predict_info(a)["held"] == 1
        wait_for_log(w, "idle for more than 1 s")
        with client(w.endpoint) as b:
            info = predict_info(b)
            assert (info["held"], info["resets"]) == (1, 1)
        a.close()


def test_a_session_evicted_at_the_cap_is_reset_and_busy_when_every_session_has_called(tmp_path):
    from wamcore.rpc import WorkerBusy

    with served(tmp_path, "--max-sessions", "2") as w:
        with client(w.endpoint) as a, client(w.endpoint) as idle:
            assert predict_info(a)["resets"] == 0
            with client(w.endpoint) as b:  # at the cap: the session that never called makes room
                assert (predict_info(b)["held"], predict_info(b)["resets"]) == (2, 1)
                with pytest.raises(WorkerBusy, match="2 open sessions, its limit"):
                    RemoteModel(w.endpoint, connect_timeout_s=10)  # a and b have both called
                assert predict_info(a)["count"] == 2  # nobody's state was touched by the refusal
            assert "never made a call" in w.output()
            del idle


def test_a_spawned_workers_token_travels_in_its_environment_not_its_command_line(tmp_path):
    from wamcore.registry import Registry
    from wamcore.runtime import spawn_worker

    token = "tok-" + "9" * 24
    config = WorkerConfig.from_options(platform="toy", am_backend="scripted-wam", am_python=sys.executable,
                                       log_dir=str(tmp_path))
    import attrs

    worker = spawn_worker(attrs.evolve(config, token=token), registry=Registry(plugins=[toy], entry_points=False),
                          env=worker_env())
    try:
        pid = worker.pid
        assert token not in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        assert f"WAMCORE_TOKEN={token}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        with pytest.raises(AccessDenied):
            RemoteModel(worker.endpoint, connect_timeout_s=10)  # and the worker requires it
    finally:
        worker.stop()


def wait_for_log(w, text: str, timeout: float = 60.0) -> None:
    wait_for(lambda: text in w.output(), timeout, f"{text!r} in the worker log")


def test_idle_session_expires_and_client_reopens_one(tmp_path):
    # a TTL far above the gap between two calls on a loaded machine, and a wait on the sweep itself
    with served(tmp_path, "--session-ttl", "3") as w, client(w.endpoint) as m:
        assert m.predict(PredictRequest(good_obs())).info["count"] == 1
        assert m.predict(PredictRequest(good_obs())).info["count"] == 2
        wait_for_log(w, "idle for more than 3 s")
        assert m.predict(PredictRequest(good_obs())).info["count"] == 1  # new session, fresh state
        assert m.reconnects == 1


# ----------------------------------------------------------------------------- time limits, connection loss


def test_timeout_override_never_waits_forever_and_drops_the_late_answer(worker):
    with client(worker.endpoint, timeout_s=0.3) as m:
        with pytest.raises(WorkerTimeout, match="within 0.3 s"):  # the override, not the model's budget
            m.predict(PredictRequest(good_obs(), options={"delay": 3.0}))
        m.timeout_s = 10.0
        late_count = 1  # the delayed request still ran on the worker and counted
        pred = m.predict(PredictRequest(good_obs()))
        assert pred.info["count"] == late_count + 1  # our answer, not the stale one


def test_default_timeout_is_the_models_declared_budget(tmp_path):
    with served(tmp_path, "--budget", "0.4") as w, client(w.endpoint) as m:
        assert m.info.timeout_s == 0.4 and m.predict_timeout_s == 0.4
        with pytest.raises(WorkerTimeout):
            m.predict(PredictRequest(good_obs(), options={"delay": 1.5}))


def test_connect_to_nothing_times_out(tmp_path):
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    sock.close(linger=0)
    ctx.term()  # joins ZeroMQ's I/O thread: the listener is closed now, not just asked to close
    with pytest.raises(WorkerTimeout, match="within 0.5 s.*is a worker running there"):
        RemoteModel(f"tcp://127.0.0.1:{port}", connect_timeout_s=0.5)


def test_worker_dying_mid_call_fails_fast(tmp_path):
    with served(tmp_path, env=worker_env(**{toy.BUSY_DIR_ENV: str(tmp_path)})) as w, client(w.endpoint) as m:
        # killed once its model has started the 10 s prediction (it leaves a marker as it starts)
        killer = subprocess.Popen([sys.executable, "-c", "import glob, os, sys, time\n"
                                   "while not glob.glob(os.path.join(sys.argv[1], 'predicting-*')): time.sleep(0.01)\n"
                                   f"os.kill({w.pid}, 9)", str(tmp_path)])
        with pytest.raises(WorkerError, match="lost the connection"):  # at once, not a WorkerTimeout at the budget
            m.predict(PredictRequest(good_obs(), options={"delay": 10.0}))
        killer.wait()


def test_client_reconnects_after_worker_restart_on_same_port(tmp_path):
    with served(tmp_path) as first:
        port = first.port
        m = client(first.endpoint)
        try:
            assert m.predict(PredictRequest(good_obs())).info["count"] == 1
            first.kill()
            with served(tmp_path, "--port", str(port)) as second:
                pred = m.predict(PredictRequest(good_obs()))
                assert pred.info["count"] == 1 and pred.info["pid"] == second.pid
                assert m.reconnects == 1
                assert m.predict(PredictRequest(good_obs())).info["count"] == 2
        finally:
            m.close()


def test_restarted_worker_with_another_contract_is_refused(tmp_path):
    from wamcore.errors import IncompatiblePairError

    with served(tmp_path) as first:
        port = first.port
        with client(first.endpoint) as m:
            m.predict(PredictRequest(good_obs()))
            first.kill()
            with served(tmp_path, "--port", str(port), "--chunk-size", "8"):
                with pytest.raises(IncompatiblePairError, match="another contract"):
                    m.predict(PredictRequest(good_obs()))


# ----------------------------------------------------------------------------- versions, tokens, backends


def test_other_protocol_version_is_refused_by_the_client(worker):
    from wamcore.rpc import protocol

    with pytest.raises(ProtocolError, match="version 2"):
        protocol.check_envelope({"type": "rpc_response", "v": 2}, protocol.RESPONSE)


def test_non_loopback_bind_needs_a_token(tmp_path):
    env = worker_env()
    env.pop("WAMCORE_TOKEN", None)
    out = subprocess.run([sys.executable, "-m", "wamcore", "serve", "--am-backend", "scripted-wam", "--platform", "toy",
                          "--host", "0.0.0.0"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "refusing to serve on '0.0.0.0' without a token" in out.stderr


def test_token_is_required_from_every_client(tmp_path):
    env = worker_env(WAMCORE_TOKEN="s3cret-token")
    with served(tmp_path, "--host", "0.0.0.0", env=env) as w:
        assert w.ready["token_required"] is True
        endpoint = f"tcp://127.0.0.1:{w.port}"
        with pytest.raises(AccessDenied, match="requires a token"):
            RemoteModel(endpoint, connect_timeout_s=5)
        with pytest.raises(AccessDenied):
            RemoteModel(endpoint, token="wrong", connect_timeout_s=5)
        with client(endpoint, token="s3cret-token") as m:
            assert m.predict(PredictRequest(good_obs())).actions.shape == (toy.CHUNK, 2)


def test_borrowed_worker_must_serve_the_backend_asked_for(worker):
    ok = open_remote(WorkerConfig(backend="scripted", platform="toy", endpoint=worker.endpoint))
    ok.close()
    with pytest.raises(ConfigurationError, match="serves 'scripted-wam', not 'torch-wam'"):
        open_remote(WorkerConfig(backend="torch-wam", platform="toy", endpoint=worker.endpoint))


def test_shutdown_stops_a_worker(tmp_path):
    with served(tmp_path) as w:
        m = RemoteModel(w.endpoint)
        m.shutdown()
        m.close()
        assert w.proc.wait(10) == 0


# ----------------------------------------------------------------------------- pure protocol pieces


def test_error_names_from_the_wire_never_build_other_classes():
    from wamcore.errors import UnknownModelError
    from wamcore.rpc import protocol

    exc = protocol.rebuild_error({"type": "UnknownModelError", "message": "Unknown model 'fastwm'.",
                                  "traceback": "tb", "fields": {"suggestions": ["fastwam"], "requested": "fastwm"}})
    assert isinstance(exc, UnknownModelError) and exc.suggestions == ("fastwam",) and exc.remote_traceback == "tb"
    for name in ("SystemExit", "os.system", "KeyboardInterrupt", "__import__"):
        exc = protocol.rebuild_error({"type": name, "message": "x"})
        assert type(exc) is RemoteError and exc.remote_type == name


@pytest.mark.parametrize("host, loopback", [("127.0.0.1", True), ("127.0.0.2", True), ("localhost", True),
                                            ("::1", True), ("[::1]", True), ("0.0.0.0", False), ("10.0.0.5", False),
                                            ("example.org", False)])
def test_loopback_detection(host, loopback):
    from wamcore.rpc import protocol

    assert protocol.is_loopback(host) is loopback


@pytest.mark.parametrize("given, endpoint", [("tcp://127.0.0.1:5555", "tcp://127.0.0.1:5555"),
                                             ("127.0.0.1:5555", "tcp://127.0.0.1:5555"),
                                             (":5555", "tcp://127.0.0.1:5555"),
                                             ("ipc:///tmp/w.sock", "ipc:///tmp/w.sock")])
def test_endpoint_forms(given, endpoint):
    from wamcore.rpc import protocol

    assert protocol.normalize_endpoint(given) == endpoint
    with pytest.raises(ConfigurationError, match="--am-backend openpi-remote --openpi-endpoint ws://127.0.0.1:8000"):
        protocol.normalize_endpoint("ws://127.0.0.1:8000")


def test_borrowed_worker_for_another_platform_is_refused_at_connect(worker):
    from wamcore.errors import IncompatiblePairError

    other = PlatformSpec(name="other", observation=toy.TOY_OBSERVATION, control=toy.TOY_CONTROL, make_env=toy.ToyEnv)
    m = RemoteModel(worker.endpoint)
    try:
        with pytest.raises(IncompatiblePairError, match="The worker serves: toy"):
            m.bind(other)
    finally:
        m.close()
