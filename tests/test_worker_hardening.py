"""Hostile local clients against a real ``wam serve`` worker (issue 13): the worker never
crashes, hangs, reads what it should not, or passes a malformed input to the model, and
it keeps serving everyone else. One test per defect found by fuzzing the same-host path;
docs/security.md states the threat model and the limits."""

from __future__ import annotations

import glob
import os
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import msgpack
import numpy as np
import pytest
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parent))  # helpers beside the tests

from helpers_workers import no_leaks, served, wait_for, wait_gone, worker_env  # noqa: E402,F401

import wamtest_scripted as toy  # noqa: E402
from wamcore import wire  # noqa: E402
from wamcore.contracts import PredictRequest  # noqa: E402
from wamcore.errors import ObservationError, WorkerError, WorkerTimeout  # noqa: E402
from wamcore.rpc import RemoteModel, local, protocol  # noqa: E402
from wamcore.specs import PlatformSpec  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_leaks")

BIG = PlatformSpec(name="toy-big", observation=toy.BIG_OBSERVATION, control=toy.TOY_CONTROL, make_env=toy.ToyEnv)
TOY = PlatformSpec(name="toy", observation=toy.TOY_OBSERVATION, control=toy.TOY_CONTROL, make_env=toy.ToyEnv)
ENV = worker_env(WAMCORE_PLUGIN_MODULES="wamtest_scripted,wamtest_fuzz")
SECRET = b"root:x:0:0:root:TOPSECRET-CONTENTS-OF-A-FILE-THE-WORKER-MUST-NOT-READ\n" * 4


def sentinel(tmp, *extra, **kw):
    return served(tmp, *extra, backend="sentinel-wam", platform="toy-big", env=kw.pop("env", ENV), **kw)


def raw_call(endpoint: str, frames: list, timeout_s: float = 10.0):
    """Send frames straight to the worker's ROUTER; the raw answer frames, or None if none came."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    try:
        sock.send_multipart(frames)
        if not sock.poll(timeout_s * 1000):
            return None
        return sock.recv_multipart()
    finally:
        sock.close()


def request(method="health", *, rid=1, session=None, token=None, args=None, **over) -> dict:
    msg = protocol.request(rid, method, session=session, token=token, args=args)
    msg.update(over)
    return msg


def hello(endpoint: str, token=None) -> dict:
    reply = wire.decode(raw_call(endpoint, wire.encode(request("hello", token=token))))
    assert reply["ok"], reply
    return reply["result"]


def serving(worker) -> bool:
    """The worker process runs and a fresh client gets a right answer from its model."""
    if worker.proc.poll() is not None:
        return False
    with RemoteModel(worker.endpoint, connect_timeout_s=10, timeout_s=10).bind(BIG) as m:
        obs = toy.big_observation(0)
        return m.predict(PredictRequest(obs)).info["sums"] == {r: int(a.sum(dtype=np.int64)) for r, a in obs.images.items()}


def model_calls(worker) -> int:
    """The model's call count, from a valid probe prediction (which adds one)."""
    with RemoteModel(worker.endpoint).bind(BIG) as m:
        return m.predict(PredictRequest(toy.big_observation(0))).info["calls"] - 1


def named_ref(name: str, cookie: bytes, offset: int, dtype: str, shape) -> msgpack.ExtType:
    """A reference to a segment by its name in /dev/shm, as workers before this fix read them."""
    return msgpack.ExtType(3, msgpack.packb((name, cookie, offset, dtype, list(shape)), use_bin_type=True))


def segment_ref(segment_id: bytes, offset: int, dtype: str, shape) -> msgpack.ExtType:
    return msgpack.ExtType(3, msgpack.packb((segment_id, offset, dtype, list(shape)), use_bin_type=True))


def local_call(address: str, msg: dict, fds=()) -> dict:
    """One request over the worker's Unix socket, with descriptors passed along."""
    conn = connect_local(address)
    try:
        local.send_frames(conn, wire.encode(msg), fds)
        return wire.decode(local.recv_frames(conn))
    finally:
        conn.close()


def predict_args(obs=None, **image_over) -> dict:
    d = PredictRequest(obs or toy.big_observation(0)).to_wire()
    d["observation"]["images"].update(image_over)
    return {"request": d}


def connect_local(address: str) -> socket.socket:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(10)
    conn.connect(address)
    return conn


# ----------------------------------------------------------------------------- 1, 6: segment references


def test_1_no_request_makes_the_worker_read_a_file(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_bytes(SECRET)
    link = Path("/dev/shm") / f"wamcore-{uuid.uuid4().hex}"
    link.symlink_to(secret)
    try:
        with sentinel(tmp_path, "--token", "s3cret") as w:
            by_name = named_ref(link.name, SECRET[:16], 16, "|u1", [len(SECRET) - 16])
            # without the token: nothing is resolved, and an id that is not a number is not echoed
            for msg in (request("health", token="wrong", rid=by_name), request("health", token="wrong", args={"x": by_name})):
                frames = raw_call(w.endpoint, [msgpack.packb(msg, use_bin_type=True)])
                assert frames is not None and not any(b"TOPSECRET" in bytes(f) for f in frames)
                reply = wire.decode(frames)
                assert reply["ok"] is False and reply["error"]["type"] in ("AccessDenied", "ProtocolError")
                assert reply["id"] == (None if msg["id"] is by_name else 1)
            answer = hello(w.endpoint, token="s3cret")
            # with the token: a segment by name is not read at all (segments travel as descriptors)
            msg = request("predict", token="s3cret", session=answer["session"], args=predict_args(primary=by_name))
            frames = raw_call(w.endpoint, wire.encode(msg))
            assert not any(b"TOPSECRET" in bytes(f) for f in frames)
            assert wire.decode(frames)["error"]["type"] == "SharedMemoryUnavailable"
            assert link.is_symlink()  # neither followed nor unlinked
            # a descriptor of a file the client could open is refused: only sealed memory files
            fd = os.open(secret, os.O_RDONLY)
            msg["args"] = predict_args(primary=segment_ref(SECRET[:16], 16, "|u1", [len(SECRET) - 16]))
            reply = local_call(answer["local"], msg, [fd])
            os.close(fd)
            assert reply["error"]["type"] == "ProtocolError" and "sealed against shrinking" in reply["error"]["message"]
            assert "TOPSECRET" not in str(reply)
            with RemoteModel(w.endpoint, token="s3cret").bind(BIG) as m:
                assert m.predict(PredictRequest(toy.big_observation(1))).info["violations"] == 0
    finally:
        link.unlink()


def test_6_a_fifo_does_not_hang_the_worker(tmp_path):
    fifo = Path("/dev/shm") / f"wamcore-{uuid.uuid4().hex}"
    os.mkfifo(fifo)
    try:
        with sentinel(tmp_path) as w:
            answer = hello(w.endpoint)
            msg = request("predict", session=answer["session"],
                          args=predict_args(primary=named_ref(fifo.name, b"\0" * 16, 64, "|u1", [*toy.BIG_SIZE, 3])))
            frames = raw_call(w.endpoint, wire.encode(msg), timeout_s=10)
            assert frames is not None, "the worker hung opening a FIFO"
            assert wire.decode(frames)["error"]["type"] == "SharedMemoryUnavailable"
            fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # and as a descriptor
            msg["args"] = predict_args(primary=segment_ref(b"\0" * 16, 64, "|u1", [*toy.BIG_SIZE, 3]))
            reply = local_call(answer["local"], msg, [fd])
            os.close(fd)
            assert reply["error"]["type"] == "ProtocolError" and "not a pipe" in reply["error"]["message"]
            assert serving(w)
    finally:
        fifo.unlink()


# ----------------------------------------------------------------------------- 2, 4, 7: the Unix socket


def test_2_a_huge_declared_frame_length_is_refused_before_anything_is_allocated(tmp_path):
    with sentinel(tmp_path) as w:
        conn = connect_local(hello(w.endpoint)["local"])
        try:
            conn.sendall(struct.pack("!1025I", 1024, *([1 << 30] * 1024)))
            assert conn.recv(65536) == b""  # the worker closed this connection
        finally:
            conn.close()
        assert serving(w)
        assert "frame too large" in w.output() or "message too large" in w.output()


def python_with_fds(tmp_path, limit: int) -> str:
    wrapper = tmp_path / f"python-{limit}-fds"
    wrapper.write_text(f"#!/bin/sh\nulimit -n {limit}\nexec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    return str(wrapper)


def open_local_connections(worker, address: str, wanted: int) -> list:
    conns, refused = [], 0
    while len(conns) < wanted and refused < 200 and worker.proc.poll() is None:
        try:
            conns.append(connect_local(address))
        except OSError:  # backlog full: the worker accepts at its own pace
            refused += 1
            time.sleep(0.01)
    return conns


@pytest.mark.parametrize("cap", [[], ["--max-local-connections", "1000"]], ids=["default-cap", "cap-above-fd-limit"])
def test_4_many_connections_neither_crash_the_worker_nor_lock_clients_out(tmp_path, cap):
    with sentinel(tmp_path, *cap, python=python_with_fds(tmp_path, 256)) as w:
        conns = open_local_connections(w, hello(w.endpoint)["local"], 300)
        try:
            assert len(conns) == 300 and serving(w)  # a new client, over the cap: served over ZeroMQ
        finally:
            for c in conns:
                c.close()
        assert serving(w)
        assert "local connections: at most 64" in w.output()  # a quarter of the 256 descriptors


def test_4_a_worker_out_of_descriptors_backs_off_and_keeps_serving(tmp_path):
    with sentinel(tmp_path, python=python_with_fds(tmp_path, 256)) as w:
        with RemoteModel(w.endpoint).bind(BIG) as m:
            obs = toy.big_observation(0)
            m.predict(PredictRequest(obs, options={"open_files": 240}))  # the model leaks descriptors
            conns = open_local_connections(w, m._local_address, 30)
            try:
                for _ in range(3):  # the client that holds its connections is still served
                    assert m.predict(PredictRequest(obs)).info["violations"] == 0
                assert w.proc.poll() is None and "pausing the local channel" in w.output()
            finally:
                for c in conns:
                    c.close()


def test_7_a_slow_sender_cannot_starve_other_clients(tmp_path):
    with sentinel(tmp_path, "--message-timeout", "2") as w:
        conn = connect_local(hello(w.endpoint)["local"])
        header = struct.pack("!2I", 1, 100)
        stop, arriving = threading.Event(), threading.Event()
        closed = []

        def trickle():
            try:
                for b in header + b"x" * 100:
                    if stop.wait(0.3):
                        return
                    conn.send(bytes([b]))
                    arriving.set()
            except OSError:
                closed.append(True)

        sender = threading.Thread(target=trickle)
        sender.start()
        try:
            with RemoteModel(w.endpoint, local_channel=False) as other:
                answered = 0
                while sender.is_alive():  # for as long as the slow message is arriving (or 30 s of it)
                    was_arriving = arriving.is_set()
                    assert other.health(timeout_s=10.0)["status"] == "ok"
                    answered += was_arriving
                    sender.join(0.2)
            assert closed, "the worker never dropped a sender that took longer than --message-timeout"
            assert answered >= 2  # answered while the message was arriving, not only before it
        finally:
            stop.set()
            sender.join()
            conn.close()
        assert serving(w)


# ----------------------------------------------------------------------------- 3: truncated segment


def test_3_no_segment_can_shrink_under_the_worker(tmp_path):
    with sentinel(tmp_path) as w, RemoteModel(w.endpoint).bind(BIG) as m:
        assert m.predict(PredictRequest(toy.big_observation(2))).info["violations"] == 0
        with pytest.raises(PermissionError):
            os.ftruncate(m._arena.fd, 0)  # the client's own segment is sealed
        # a hostile client's segment that could shrink after the worker mapped it is not taken
        fd = os.memfd_create("hostile")
        os.ftruncate(fd, 1 << 20)
        os.pwrite(fd, b"h" * 16, 0)
        msg = request("predict", session=m.session,
                      args=predict_args(primary=segment_ref(b"h" * 16, 64, "|u1", [*toy.BIG_SIZE, 3])))
        reply = local_call(m._local_address, msg, [fd])
        assert reply["error"]["type"] == "ProtocolError" and "sealed against shrinking" in reply["error"]["message"]
        os.ftruncate(fd, 0)
        reply = local_call(m._local_address, msg)  # it was never mapped: nothing to fault on
        assert reply["error"]["type"] == "SharedMemoryUnavailable"
        os.close(fd)
        assert w.proc.poll() is None
        assert serving(w)


# ----------------------------------------------------------------------------- 5, 14: the envelope


def raw_request(**fields) -> bytes:
    """A request packed by hand: a value given as bytes is put in as raw msgpack, so it may
    be nested deeper than this side's msgpack would pack (an older worker's cannot pack it back)."""
    msg = request("health")
    msg.update(fields)
    body = b"".join(msgpack.packb(k) + (v if isinstance(v, bytes) else msgpack.packb(v)) for k, v in msg.items())
    return bytes([0x80 | len(msg)]) + body


DEEP = b"\x91" * 600 + b"\x90"  # a list in a list ... 600 deep


def test_5_envelope_fields_of_the_wrong_type_or_depth_are_refused_and_never_echoed(tmp_path):
    with sentinel(tmp_path) as w:
        for over in ({"id": DEEP}, {"id": "x" * 1000}, {"id": -1}, {"id": 2.5}, {"session": DEEP},
                     {"method": DEEP}, {"token": {"a": 1}}, {"args": DEEP}, {"type": DEEP}, {"v": DEEP}):
            frames = raw_call(w.endpoint, [raw_request(**over)])
            assert frames is not None and w.proc.poll() is None, over
            reply = wire.decode(frames)
            assert reply["ok"] is False and reply["error"]["type"] == "ProtocolError", reply
            assert reply["id"] in (None, 1) and len(frames[0]) < 4096
        assert serving(w)


def test_14_huge_fields_do_not_amplify_into_logs_or_replies(tmp_path):
    with sentinel(tmp_path) as w:
        before = len(w.output())
        frames = raw_call(w.endpoint, [msgpack.packb(request("x" * (64 << 20)), use_bin_type=True)], timeout_s=60)
        assert frames is not None and sum(len(f) for f in frames) < 16384
        assert wire.decode(frames)["error"]["type"] == "ProtocolError"
        session = hello(w.endpoint)["session"]
        # a camera name of 8 MiB breaks the header limit; one of 512 KiB is a request to validate
        for name_bytes, kind in ((8 << 20, "ProtocolError"), (512 << 10, "ObservationError")):
            args = predict_args(**{"c" * name_bytes: np.zeros((2, 2, 3), np.uint8)})
            frames = raw_call(w.endpoint, wire.encode(request("predict", session=session, args=args)), timeout_s=60)
            reply = wire.decode(frames)
            assert reply["error"]["type"] == kind and sum(len(f) for f in frames) < 16384
        assert len(w.output()) - before < 16384
        assert serving(w)


# ----------------------------------------------------------------------------- 8: request fields


def test_8_request_fields_are_validated_before_the_model(tmp_path):
    with sentinel(tmp_path) as w, RemoteModel(w.endpoint).bind(BIG) as m:
        before = model_calls(w)
        cases = []
        for seed in ("abc", -1, 2**64 - 1, 1.5, True):
            cases.append((f"seed {seed!r}", lambda d, s=seed: d.update(seed=s)))
        for step in (-1, "x", 2.5, None):
            cases.append((f"step {step!r}", lambda d, s=step: d["observation"].update(step=s)))
        for options in ({"evil": 1}, {"delay": "slow"}, {"delay": float("nan")}, {"delay": True}, {"delay": [1.0]}):
            cases.append((f"options {options!r}", lambda d, o=options: d.update(options=o)))
        cases.append(("state 1e300", lambda d: d["observation"]["state"].update(position=np.array([1e300, 0.0]))))
        for label, change in cases:
            d = PredictRequest(toy.big_observation(3)).to_wire()
            change(d)
            with pytest.raises(ObservationError):
                m._session_call("predict", {"request": d}, 10.0)
        assert model_calls(w) == before + 1  # only model_calls' own probe
        ok = m.predict(PredictRequest(toy.big_observation(3), seed=7, options={"delay": 0.0}))
        assert ok.info["violations"] == 0


# ----------------------------------------------------------------------------- 9, 10: lifecycle

PARENT_LEAVING_A_QUEUED_SEGMENT = textwrap.dedent("""
    import json, sys
    import wamtest_scripted as toy
    from wamcore.contracts import PredictRequest
    from wamcore.errors import WorkerTimeout
    from wamcore.registry import default_registry
    from wamcore.runtime import WorkerConfig, open_model
    reg = default_registry()
    config = WorkerConfig.from_options(platform="toy-big", am_backend="sentinel-wam", am_python=sys.executable,
                                       log_dir=sys.argv[1], timeout_s=0.5)
    model = open_model(config, reg.platform("toy-big"), registry=reg)
    try:
        model.predict(PredictRequest(toy.big_observation(0), options={"delay": 5.0}))
    except WorkerTimeout:
        pass
    print(json.dumps({"worker": model.info.details["worker"]["pid"]}), flush=True)
    model.timeout_s = 60
    model.predict(PredictRequest(toy.big_observation(1)))   # a fresh segment, queued behind the slow call: killed meanwhile
""")


def shm_entries() -> set:
    return set(glob.glob("/dev/shm/wamcore-*"))


def test_9_a_segment_queued_behind_a_slow_call_does_not_outlive_a_killed_parent(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(PARENT_LEAVING_A_QUEUED_SEGMENT)
    import json

    before = shm_entries()
    for i in range(3):
        parent = subprocess.Popen([sys.executable, str(script), str(tmp_path / f"logs{i}")], env=ENV,
                                  stdout=subprocess.PIPE, text=True)
        record = json.loads(parent.stdout.readline())
        wait_for(lambda: waits_on_a_fresh_segment(parent.pid), 30, "the second request to be sent")
        parent.kill()
        parent.wait()
        parent.stdout.close()
        assert wait_gone(record["worker"], 30) is not None
    assert shm_entries() - before == set()  # segments have no name: nothing can be left behind


def waits_on_a_fresh_segment(pid: int) -> bool:
    """``pid`` holds a client segment again (the first was retired at the timeout) and its main
    thread sleeps: the request that carries the segment has been sent and waits for its answer."""
    try:
        links = [os.readlink(fd) for fd in glob.glob(f"/proc/{pid}/fd/*")]
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:  # a descriptor closed while we read: look again
        return False
    return state == "S" and any(link.startswith("/memfd:wamcore-arena") for link in links)


PARENT_OPENING_FROM_A_THREAD = textwrap.dedent("""
    import json, sys, threading, time
    import wamtest_scripted as toy
    from wamcore.contracts import PredictRequest
    from wamcore.registry import default_registry
    from wamcore.runtime import WorkerConfig, open_model
    reg = default_registry()
    config = WorkerConfig.from_options(platform="toy", am_backend="scripted-wam", am_python=sys.executable,
                                       log_dir=sys.argv[1])
    opened = {}
    t = threading.Thread(target=lambda: opened.update(model=open_model(config, reg.platform("toy"), registry=reg)))
    t.start()
    t.join()
    time.sleep(1.0)  # a parent-death signal tied to that thread has fired by now
    model = opened["model"]
    pred = model.predict(PredictRequest(toy.ToyEnv().reset(seed=0)))
    print(json.dumps({"worker": model.info.details["worker"]["pid"], "count": pred.info["count"]}), flush=True)
    model.close()
""")


def test_10_a_worker_opened_from_a_thread_that_ended_keeps_serving(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(PARENT_OPENING_FROM_A_THREAD)
    out = subprocess.run([sys.executable, str(script), str(tmp_path)], env=ENV, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    import json

    assert json.loads(out.stdout)["count"] == 1


# ----------------------------------------------------------------------------- 11: a peer that is gone


def test_11_a_borrowed_worker_that_is_gone_is_reported_at_once(tmp_path):
    with served(tmp_path) as w:
        m = RemoteModel(w.endpoint, timeout_s=15).bind(TOY)
        try:
            m.predict(PredictRequest(toy.ToyEnv().reset(seed=0)))
            w.kill()
            with pytest.raises(WorkerError) as info:
                m.predict(PredictRequest(toy.ToyEnv().reset(seed=0)))
            assert not isinstance(info.value, WorkerTimeout), info.value  # the dead peer, not the deadline
            assert "gone" in str(info.value) or "lost the connection" in str(info.value)
        finally:
            m.close()


def test_11_a_worker_that_was_shut_down_is_reported_at_once(tmp_path):
    with served(tmp_path) as w:
        with RemoteModel(w.endpoint, timeout_s=15).bind(TOY) as m:
            m.shutdown()
            assert w.proc.wait(10) == 0
            with pytest.raises(WorkerError) as info:
                m.predict(PredictRequest(toy.ToyEnv().reset(seed=0)))
            assert not isinstance(info.value, WorkerTimeout), info.value


# ----------------------------------------------------------------------------- 12: many shared-memory clients


def test_12_sixteen_shared_memory_clients_keep_shared_memory(tmp_path):
    with sentinel(tmp_path) as w:
        models = [RemoteModel(w.endpoint).bind(BIG) for _ in range(16)]
        try:
            for rnd in range(3):
                for i, m in enumerate(models):
                    obs = toy.big_observation(100 * rnd + i)
                    sums = m.predict(PredictRequest(obs)).info["sums"]
                    assert sums == {r: int(a.sum(dtype=np.int64)) for r, a in obs.images.items()}
            assert [m.shared_memory for m in models] == [True] * 16
            assert [m._shm_refusals for m in models] == [0] * 16
        finally:
            for m in models:
                m.close()


# ----------------------------------------------------------------------------- 15: sessions


def test_15_sessions_are_capped_and_unused_ones_make_room(tmp_path):
    with sentinel(tmp_path, "--max-sessions", "40") as w:
        users = [RemoteModel(w.endpoint).bind(BIG) for _ in range(3)]
        try:
            for m in users:
                m.predict(PredictRequest(toy.big_observation(0)))
            for _ in range(300):
                hello(w.endpoint)
            health = users[0].health()
            assert health["sessions"] <= 40
            for m in users:  # sessions in use were not the ones dropped
                assert m.predict(PredictRequest(toy.big_observation(1))).info["violations"] == 0
                assert m.reconnects == 0
        finally:
            for m in users:
                m.close()
        assert serving(w)


def test_15_default_cap_holds_against_a_flood_of_hellos(tmp_path):
    with sentinel(tmp_path) as w:
        for _ in range(400):
            hello(w.endpoint)
        with RemoteModel(w.endpoint) as m:
            assert m.health()["sessions"] <= 256
