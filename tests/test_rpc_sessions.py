"""The worker's session handling, in-process and at its boundaries: who may call, when a
session expires or is evicted, and that the model state of a session that ends is freed
while the others keep theirs.

Requests go through the worker's own entry point as the wire frames a client sends
(``protocol.request`` encoded by ``wire``), answers come back decoded, errors as the classes a
client rebuilds. The worker's clock is a test clock, so an expiry is tested at its exact
boundary without waiting. ``test_rpc_protocol.py`` shows the same promises end to end against
a real ``wam serve`` process.
"""

from __future__ import annotations

import itertools
import os
import select
import struct
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # helpers beside the tests

import wamtest_scripted as toy  # noqa: E402
from helpers_workers import wait_for  # noqa: E402
from test_worker_hardening import connect_local, local_call, request  # noqa: E402
from wamcore import wire  # noqa: E402
from wamcore.contracts import PredictRequest  # noqa: E402
from wamcore.errors import ProtocolError  # noqa: E402
from wamcore.registry import Registry  # noqa: E402
from wamcore.rpc import SessionNotFound, WorkerBusy, local, protocol, server, shm  # noqa: E402
from wamcore.rpc.server import WorkerServer  # noqa: E402
from wamcore.service import ModelService  # noqa: E402
from wamcore.specs import ModelConfig  # noqa: E402

TTL = 30.0


class Clock:
    """The worker's ``time.monotonic`` during a test (the server's and its local channel's; the
    test's own clock is untouched): it moves only when told to."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Worker:
    """A WorkerServer and the means to talk to it the way a client does."""

    def __init__(self, clock: Clock, backend: str = "scripted-wam", platform: str = "toy", **options):
        reg = Registry(entry_points=False)
        reg.register(toy, name="toy")
        self.service = ModelService(reg.model(backend), ModelConfig(platform=platform))
        self.server = WorkerServer(self.service, session_ttl_s=TTL, batch_window_s=0.0, **options)
        self.clock = clock
        self._ids = itertools.count(1)

    @property
    def model(self) -> toy.ScriptedModel:
        return self.service.native

    def call(self, method: str, session=None, args=None, fds=(), arena=None, pass_segment=True):
        """One request as a client sends it (``arena``: its large arrays in shared memory, the
        segment's descriptor passed along as over the local channel unless ``pass_segment`` is
        false: one the session passed before)."""
        answers = []
        msg = protocol.request(next(self._ids), method, session=session, token=None, args=args)
        frames = wire.encode(msg, arena=arena)
        fds = [*fds, os.dup(arena.fd)] if arena is not None and pass_segment else list(fds)
        self.server._serve(frames, fds, reply=answers.append)
        (answer,) = answers
        reply = wire.decode(answer)
        if not reply["ok"]:
            raise protocol.rebuild_error(reply["error"])
        return reply["result"]

    def hello(self) -> str:
        return self.call("hello")["session"]

    def predict(self, session: str) -> dict:
        obs = toy.ToyEnv().reset(seed=0)
        return self.call("predict", session, {"request": PredictRequest(obs).to_wire()})["info"]

    def sessions(self) -> int:
        return self.call("health")["sessions"]

    def sweep(self) -> None:
        self.server._sweep(self.clock.now)  # what the serving loop does once a second


@pytest.fixture
def worker(monkeypatch):
    clock = Clock()
    worker_time = SimpleNamespace(monotonic=clock, perf_counter=time.perf_counter)
    monkeypatch.setattr(server, "time", worker_time)
    monkeypatch.setattr(local, "time", worker_time)
    made = []

    def make(**options) -> Worker:
        made.append(Worker(clock, **options))
        return made[-1]

    yield make
    for w in made:
        w.server.close()


def test_session_calls_need_a_session_that_hello_opened(worker):
    w = worker()
    for method in protocol.SESSION_METHODS:
        with pytest.raises(SessionNotFound, match=r"session None is not open .* more than 30 s\); open a new one"):
            w.call(method)
        with pytest.raises(SessionNotFound, match="'nope' is not open"):
            w.call(method, "nope")
    opened = w.call("hello")
    assert opened["session_ttl_s"] == TTL and w.sessions() == 1
    assert w.predict(opened["session"])["count"] == 1
    assert w.call("reset", opened["session"]) == {"ok": True}
    assert w.model.resets == {opened["session"]: 1}


def test_calls_outside_sessions_need_none_and_unknown_methods_are_refused(worker):
    w = worker()
    assert w.call("get_model_info")["backend"] == "scripted-wam"
    w.call("health")
    assert w.call("health")["served"] == {"get_model_info": 1, "health": 2}
    with pytest.raises(ProtocolError, match="unknown method 'predict_all'; a worker answers hello, "):
        w.server._dispatch({"method": "predict_all"}, 1, None, [], [])
    assert w.sessions() == 0 and w.model.native_calls == 0
    assert w.call("shutdown") == {"ok": True, "stopping": True}


def test_descriptors_are_accepted_in_session_calls_only(worker):
    w = worker()
    fd = os.open(os.devnull, os.O_RDONLY)
    with pytest.raises(ProtocolError, match="descriptors are accepted in session calls only"):
        w.call("health", fds=[fd])
    with pytest.raises(OSError):
        os.fstat(fd)  # the worker closed what it refused


def test_bye_frees_that_sessions_model_state_and_no_other(worker):
    w = worker()
    a, b = w.hello(), w.hello()
    w.predict(a), w.predict(b)
    assert w.call("bye", a) == {"ok": True}
    assert dict(w.model.resets) == {a: 1} and set(w.model.counts) == {b} and w.sessions() == 1
    with pytest.raises(SessionNotFound):
        w.predict(a)
    assert w.predict(b)["count"] == 2  # b's state was kept


def test_a_session_idle_for_exactly_its_ttl_stays_and_one_idle_longer_is_freed(worker):
    w = worker()
    a, b = w.hello(), w.hello()
    w.predict(a), w.predict(b)
    w.clock.now += TTL / 2
    w.predict(b)  # a call keeps a session alive
    w.clock.now += TTL / 2
    w.sweep()
    assert w.sessions() == 2 and w.model.resets == {}  # a has been idle for exactly the TTL
    w.clock.now += 0.001
    w.sweep()
    assert w.sessions() == 1 and dict(w.model.resets) == {a: 1} and set(w.model.counts) == {b}
    with pytest.raises(SessionNotFound, match="idle for more than 30 s"):
        w.predict(a)
    w.clock.now += TTL / 2
    w.sweep()
    assert w.sessions() == 0 and dict(w.model.resets) == {a: 1, b: 1}


def test_at_the_cap_the_oldest_session_that_never_called_makes_room(worker):
    w = worker(max_sessions=3)
    a, b, c = w.hello(), w.hello(), w.hello()
    w.predict(a)  # a has called: it is never evicted
    d = w.hello()
    assert w.sessions() == 3 and dict(w.model.resets) == {b: 1}
    with pytest.raises(SessionNotFound):
        w.predict(b)
    w.predict(d)
    e = w.hello()  # c is now the only one that never called
    assert dict(w.model.resets) == {b: 1, c: 1}
    w.predict(e)
    assert w.predict(a)["count"] == 2 and w.predict(d)["count"] == 2


def test_a_worker_whose_every_session_has_called_is_busy_and_touches_nobody(worker):
    w = worker(max_sessions=2)
    a, b = w.hello(), w.hello()
    w.predict(a), w.predict(b)
    with pytest.raises(WorkerBusy, match=r"2 open sessions, its limit \(--max-sessions 2\)"):
        w.hello()
    assert w.sessions() == 2 and w.model.resets == {}
    w.call("bye", b)
    assert w.hello() and w.sessions() == 2  # room again


def test_a_reset_call_makes_a_fresh_session_no_less_protected(worker):
    w = worker(max_sessions=2)
    a, b = w.hello(), w.hello()
    w.call("reset", a)  # a session call: a is no longer one that never called
    w.hello()
    assert dict(w.model.resets) == {a: 1, b: 1}  # b was evicted, a was only reset by its own call
    assert w.sessions() == 2


def test_a_model_without_sessions_is_not_reset_and_a_failing_reset_is_only_logged(worker, monkeypatch, caplog):
    w = worker()
    a = w.hello()
    w.predict(a)

    def broken(session):
        raise RuntimeError("reset failed")

    monkeypatch.setattr(w.model, "reset", broken)
    assert w.call("bye", a) == {"ok": True} and w.sessions() == 0
    assert "resetting dropped session" in caplog.text
    monkeypatch.setattr(toy.ScriptedModel, "uses_sessions", False)
    stateless = worker()
    assert not stateless.service.uses_sessions
    s = stateless.hello()
    stateless.call("bye", s)
    assert stateless.model.resets == {}


def test_shared_memory_is_read_in_session_calls_only(worker):
    w = worker(backend="echo-wam", platform="toy-big")  # cameras large enough for shared memory
    a = w.hello()
    obs = toy.big_observation(0)
    arena = shm.Arena(1 << 20)
    try:
        answer = w.call("predict", a, {"request": PredictRequest(obs).to_wire()}, arena=arena)
        assert arena.used and answer["info"]["sums"]["primary"] == int(obs.images["primary"].sum())
        with pytest.raises(ProtocolError, match="references are accepted in session calls only"):
            w.call("health", args={"x": obs.images["primary"]}, arena=arena, pass_segment=False)
    finally:
        arena.close()


def test_the_serving_loop_frees_idle_sessions_and_drops_local_messages_slower_than_the_timeout(worker):
    """The loop itself sweeps once a second of the worker's clock: an idle session is freed past
    its TTL while a local message that began as long ago, within --message-timeout, is still
    awaited; past the timeout that message's connection is closed."""
    w = worker(message_timeout_s=2 * TTL)
    address = w.call("hello")["local"]
    idle = w.hello()
    w.predict(idle)
    slow = connect_local(address)
    slow.sendall(struct.pack("!2I", 1, 100) + b"x" * 10)  # a message of 100 bytes, 10 of them sent
    loop = threading.Thread(target=w.server.serve_forever, daemon=True)
    loop.start()
    try:
        # two round trips: the loop has read the slow message's first bytes (it was readable first)
        assert local_call(address, request("health"))["ok"] and local_call(address, request("health"))["ok"]
        w.clock.now += TTL + 1
        wait_for(lambda: idle in w.model.resets, 60, "the loop to free the idle session")
        assert local_call(address, request("health"))["result"]["sessions"] == 0  # the sweep is over (hello's session idled too)
        assert select.select([slow], [], [], 0)[0] == []  # still open, nothing to read: the message is awaited
        w.clock.now += TTL
        assert slow.recv(1) == b""  # closed by the worker (a hang here ends in the socket's timeout)
    finally:
        local_call(address, request("shutdown"))
        loop.join(30)
        slow.close()
    assert not loop.is_alive()
