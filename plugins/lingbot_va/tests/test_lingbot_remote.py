"""The websocket protocol against upstream's own code: its ``msgpack_numpy`` reads what the
worker sends and writes what the worker reads; its ``WebsocketPolicyServer`` serves the
stand-in. Replies are decoded strictly: no pickle, numeric arrays only."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from wamcore.errors import ConfigurationError, ProtocolError, RemoteError, WorkerError
from wam_lingbot_va.remote import WebsocketServer, check_health, pack, parse_address, unpack

from lingbot_standins import StandInServer, UpstreamWebsocketServer, closed_port


@pytest.fixture(scope="module")
def upstream_codec():
    from wan_va.utils.Simple_Remote_Infer.deploy import msgpack_numpy

    return msgpack_numpy


def test_upstream_reads_what_the_worker_sends(upstream_codec):
    request = {"obs": [{"observation.images.cam_high": np.arange(24, dtype=np.uint8).reshape(2, 4, 3),
                        "observation.state": np.linspace(0, 1, 14), "task": "pick"}],
               "compute_kv_cache": True, "state": np.ones((16, 2, 16), dtype=np.float32), "n": np.int64(3)}
    got = upstream_codec.unpackb(pack(request))
    frame = got["obs"][0]
    np.testing.assert_array_equal(frame["observation.images.cam_high"], request["obs"][0]["observation.images.cam_high"])
    assert frame["observation.images.cam_high"].dtype == np.uint8 and frame["task"] == "pick"
    np.testing.assert_array_equal(frame["observation.state"], request["obs"][0]["observation.state"])
    assert got["state"].dtype == np.float32 and got["state"].shape == (16, 2, 16) and got["n"] == 3


def test_the_worker_reads_what_upstream_sends(upstream_codec):
    reply = {"action": np.random.default_rng(0).normal(size=(16, 2, 16)).astype(np.float32),
             "server_timing": {"infer_ms": 12.5}, "flag": np.bool_(True)}
    got = unpack(upstream_codec.Packer().pack(reply))
    np.testing.assert_array_equal(got["action"], reply["action"])
    assert got["server_timing"] == {"infer_ms": 12.5} and got["flag"] is np.True_


def _array(dtype: str, data: bytes, shape) -> dict:
    return {b"__ndarray__": True, b"data": data, b"dtype": dtype, b"shape": shape}


@pytest.mark.parametrize("reply, problem", [
    ({"action": _array("|O", b"\0" * 8, [1])}, "refused array dtype"),
    ({"action": _array("<c8", b"\0" * 8, [1])}, "refused array dtype"),
    ({"action": _array("|V8", b"\0" * 8, [1])}, "refused array dtype"),
    ({"action": _array("[('a', '<i4')]", b"\0" * 4, [1])}, "refused array dtype"),
    ({"action": _array("<f4", b"\0" * 7, [2])}, "does not match its 7 bytes"),
    ({"action": _array("<f4", b"\0" * 8, [-2])}, "malformed array shape"),
    ({"action": _array("<f4", b"\0" * 8, "2")}, "malformed array shape"),
    ({"action": {b"__ndarray__": True, b"data": b"", b"dtype": "<f4", b"shape": [0], b"extra": 1}}, "malformed array"),
    ({b"action": 1}, "key that is not a string"),
    ({"action": msgpack.ExtType(1, b"pickle?")}, "extension type 1"),
])
def test_a_malformed_reply_is_refused(reply, problem):
    with pytest.raises(ProtocolError, match=problem.replace("[", r"\[").replace("(", r"\(")):
        unpack(msgpack.packb(reply, use_bin_type=True))


def test_truncated_and_textual_replies_are_refused():
    data = msgpack.packb({"action": [1, 2, 3]})
    with pytest.raises(ProtocolError, match="not valid msgpack"):
        unpack(data[:-1])
    with pytest.raises(ProtocolError, match="binary msgpack"):
        unpack("a text frame")


def test_nothing_but_numbers_is_sent():
    with pytest.raises(ProtocolError, match="only numeric arrays"):
        pack({"obs": np.array(["a", None], dtype=object)})


def test_addresses():
    assert parse_address("29056") == ("127.0.0.1", 29056)
    assert parse_address("ws://gpu-host:29056/") == ("gpu-host", 29056)
    with pytest.raises(ConfigurationError, match="HOST:PORT"):
        parse_address("gpu-host")


def test_health_route_and_a_server_error_frame():
    standin = StandInServer()
    server = UpstreamWebsocketServer(standin)
    try:
        check_health("127.0.0.1", server.port)
        client = WebsocketServer("127.0.0.1", server.port, timeout_s=30)
        assert client.metadata == {}
        with pytest.raises(RemoteError, match="a request before the first reset") as info:
            client.infer({"obs": {}, "prompt": "p"})  # the stand-in's AssertionError, as upstream sends it: text, close
        assert "Traceback" in info.value.remote_traceback
        reply = client.infer({"reset": True, "prompt": "p", "save_visualization": True})  # a new connection
        assert set(reply) == {"server_timing"} and standin.log == [("reset", "p")]
        client.close()
    finally:
        server.stop()
    with closed_port() as port, pytest.raises(WorkerError, match="does not answer"):
        check_health("127.0.0.1", port, timeout_s=2)
