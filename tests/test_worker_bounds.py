"""Memory and address-space bounds of a real ``wam serve`` worker against hostile local
clients, and candidate actions checked before any adapter (docs/security.md, second round).

Each test measures the worker process itself (``/proc/PID/status`` and ``/proc/PID/maps``):
peak RSS for what decoding may allocate, mapped memory files for shared memory."""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path

import msgpack
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # helpers beside the tests

from helpers_workers import no_leaks, served, worker_env  # noqa: E402,F401
from test_worker_hardening import (BIG, ENV, hello, local_call, raw_call, request, segment_ref,  # noqa: E402
                                   sentinel, serving)

import wamtest_scripted as toy  # noqa: E402
from wamcore import wire  # noqa: E402
from wamcore.contracts import PredictRequest  # noqa: E402
from wamcore.errors import ActionError, CapabilityError  # noqa: E402
from wamcore.rpc import RemoteModel  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_leaks")

MiB = 1 << 20
SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


def status(pid: int) -> dict:
    """VmHWM (peak RSS), VmRSS, VmSize, VmPeak of a process, in bytes."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS", "VmSize", "VmPeak"):
            out[key] = int(value.split()[0]) * 1024
    return out


def memfd_mappings(pid: int) -> list:
    """Sizes of the memory files a process maps (shared-memory segments)."""
    sizes = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        if "/memfd:" in line:
            start, end = (int(x, 16) for x in line.split()[0].split("-"))
            sizes.append(end - start)
    return sizes


def empty_maps(n: int) -> bytes:
    """msgpack of an array of ``n`` empty maps: each 1-byte map decodes to a 64-byte dict."""
    return b"\xdd" + n.to_bytes(4, "big") + b"\x80" * n


def packed_request(args: bytes, token: str) -> bytes:
    """A request header whose args are the raw msgpack ``args``."""
    msg = request("health", token=token)
    del msg["args"]
    body = b"".join(msgpack.packb(k) + msgpack.packb(v) for k, v in msg.items()) + msgpack.packb("args") + args
    return bytes([0x80 | (len(msg) + 1)]) + body


def test_1_decoding_a_header_is_bounded_before_and_after_authentication(tmp_path):
    with sentinel(tmp_path, "--token", "s3cret") as w:
        hello(w.endpoint, token="s3cret")
        before = status(w.pid)["VmHWM"]
        # 16 MiB headers, at the default --max-message-mb of 256: an array of 16 Mi empty maps,
        # and a request (wrong token) whose args are one. Decoded, each took about 1 GiB.
        for header in (empty_maps(16 * MiB), packed_request(empty_maps(16 * MiB), token="wrong")):
            frames = raw_call(w.endpoint, [header], timeout_s=60)
            assert frames is not None and not wire.decode(frames)["ok"]
            growth = status(w.pid)["VmHWM"] - before
            print(f"peak RSS growth {growth / MiB:.0f} MiB")
            assert growth < 200 * MiB, f"peak RSS grew by {growth / MiB:.0f} MiB"
            assert "request header of 16777" in wire.decode(frames)["error"]["message"]
        # under the header limit: with a wrong token the args are never decoded; with the
        # right one they are, within the bounds (nested arrays of empty maps, 1 byte each)
        nested = b"\xdc" + (240).to_bytes(2, "big") + (b"\xdd" + (4096).to_bytes(4, "big") + b"\x80" * 4096) * 240
        for token, kind in (("wrong", "AccessDenied"), ("s3cret", "ProtocolError")):
            frames = raw_call(w.endpoint, [packed_request(nested, token=token)], timeout_s=60)
            assert wire.decode(frames)["error"]["type"] == kind
        growth = status(w.pid)["VmHWM"] - before
        assert growth < 200 * MiB, f"peak RSS grew by {growth / MiB:.0f} MiB"
        with RemoteModel(w.endpoint, token="s3cret").bind(BIG) as m:
            assert m.predict(PredictRequest(toy.big_observation(0))).info["violations"] == 0


def sealed_segment(size: int) -> tuple:
    """(descriptor, segment id) of a sealed memory file of ``size`` bytes (sparse: costs nothing)."""
    fd = os.memfd_create("hostile", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    sid = os.urandom(16)
    os.pwrite(fd, sid, 0)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    return fd, sid


def predict_from_segment(session: str, sid: bytes) -> dict:
    """A predict request whose two images are read from the segment ``sid``."""
    d = PredictRequest(toy.big_observation(0)).to_wire()
    nbytes = toy.BIG_SIZE[0] * toy.BIG_SIZE[1] * 3
    d["observation"]["images"] = {role: segment_ref(sid, 64 + i * nbytes, "|u1", [*toy.BIG_SIZE, 3])
                                  for i, role in enumerate(("primary", "wrist"))}
    return request("predict", session=session, args={"request": d})


def test_2_shared_memory_is_bounded_per_segment_and_in_all(tmp_path):
    with sentinel(tmp_path, "--max-message-mb", "64", "--max-shared-mb", "128") as w:
        before = status(w.pid)["VmSize"]
        # sealed sparse memory files of 64 TiB and 32 TiB, for several sessions: refused from
        # their size, never mapped (they took the worker's address space to 128 TiB)
        for size in (64 << 40, 32 << 40, 64 * MiB + 4096):
            answer = hello(w.endpoint)
            fd, sid = sealed_segment(size)
            reply = local_call(answer["local"], predict_from_segment(answer["session"], sid), [fd])
            os.close(fd)
            assert reply["error"]["type"] == "SharedMemoryUnavailable", reply
            assert "--max-message-mb" in reply["error"]["message"]
        assert memfd_mappings(w.pid) == []
        assert status(w.pid)["VmPeak"] - before < 1 << 30
        # 20 sessions with a 64 MiB segment each: served, and never more than 128 MiB mapped
        for _ in range(20):
            answer = hello(w.endpoint)
            fd, sid = sealed_segment(64 * MiB)
            reply = local_call(answer["local"], predict_from_segment(answer["session"], sid), [fd])
            os.close(fd)
            assert reply["ok"] and reply["result"]["info"]["violations"] == 0, reply
            assert sum(memfd_mappings(w.pid)) <= 128 * MiB
        assert len(memfd_mappings(w.pid)) == 2
        assert serving(w)


def test_14_out_of_bounds_candidates_never_reach_the_adapter(tmp_path):
    with served(tmp_path, backend="sentinel-cf-wam", platform="toy-big", env=ENV) as w, \
            RemoteModel(w.endpoint).bind(BIG) as m:
        obs = toy.big_observation(4)
        ok = m.predict(PredictRequest(obs, candidate_actions=np.array([[0.5, -1.0]], np.float32)))
        assert ok.info["violations"] == 0
        for bad in ([[5.0, 0.0]], [[0.0, -1.5]], [[1e30, 0.0]]):
            # straight to the worker, past the client's own check (a client of another make)
            d = PredictRequest(obs, candidate_actions=np.array(bad, np.float32)).to_wire()
            with pytest.raises(ActionError, match="beyond the (high|low) bound"):
                m._session_call("predict", {"request": d}, 10.0)
        last = m.predict(PredictRequest(obs))
        assert last.info["violations"] == 0 and last.info["calls"] == ok.info["calls"] + 1


def test_14_a_worker_without_the_platform_refuses_candidates_it_cannot_check(tmp_path):
    only_models = worker_env(WAMCORE_PLUGIN_MODULES="wamtest_fuzz")  # toy-big's plugin is not loaded
    with served(tmp_path, backend="sentinel-cf-wam", platform="toy-big", env=only_models) as w, \
            RemoteModel(w.endpoint).bind(BIG) as m:
        obs = toy.big_observation(5)
        with pytest.raises(CapabilityError, match="not installed where the model runs"):
            m.predict(PredictRequest(obs, candidate_actions=np.array([[0.5, 0.5]], np.float32)))
        info = m.predict(PredictRequest(obs)).info
        assert info["calls"] == 1 and info["violations"] == 0  # the refused request never reached the model
