"""Fuzz a real ``wam serve`` worker, and kill its parent over and over (issue 13).

Fuzz: malformed requests of every kind, over ZeroMQ, over the same-host Unix channel, and
through shared memory (sealed memory files, and descriptors that are not), headers built to
decode to many times their size (amplification), and sealed memory files of every size up
to terabytes (address space), against a worker
with a token that serves ``sentinel-wam`` (``tests/wamtest_fuzz.py``: a model that checks
on its own everything that reaches it and counts its calls). Every few cases a valid client
checks that the worker still answers correctly. The run reports crashes (worker exits),
hangs (no answer and no close within the time limit), what reached the model (calls, and
inputs the model itself found malformed), the worker's RSS and its peak, and its address
space (VmSize) and its peak::

    python bench/fuzz_worker.py --cases 10000 --seed 0 [--json]

Parent kills: a script opens a spawned worker (``open_model``), predicts through shared
memory, and is SIGKILLed (idle, in the middle of a slow call, or with a second request
queued behind it); the run reports workers that outlived their parent (orphans), the time
each took to exit, and shared-memory segments that outlived both (named in /dev/shm, or a
memory file some process still maps or holds)::

    python bench/fuzz_worker.py --cases 0 --parent-kills 100

``tests/test_worker_fuzz.py`` runs both, bounded (a few thousand cases, a few kills).
"""

from __future__ import annotations

import argparse
import array
import json
import os
import random
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional

import msgpack
import numpy as np

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
sys.path.insert(0, str(TESTS))

import wamtest_scripted as toy  # noqa: E402
from helpers_workers import TAG_ENV, ServedWorker, pid_gone, tagged_pids  # noqa: E402
from helpers_workers import worker_env as _worker_env  # noqa: E402
from wamcore import wire  # noqa: E402
from wamcore.contracts import PredictRequest  # noqa: E402
from wamcore.rpc import RemoteModel, local, protocol, shm  # noqa: E402
from wamcore.specs import PlatformSpec  # noqa: E402

TOKEN = "fuzz-token"
BIG = PlatformSpec(name="toy-big", observation=toy.BIG_OBSERVATION, control=toy.TOY_CONTROL, make_env=toy.ToyEnv)
REPLY_TIMEOUT_S = 5.0
MESSAGE_TIMEOUT_S = 1.0
MAX_MESSAGE_MB = 16
MAX_SHARED_MB = 64


def worker_env(**extra: str) -> dict:
    return _worker_env(WAMCORE_PLUGIN_MODULES="wamtest_scripted,wamtest_fuzz", **extra)


class Worker(ServedWorker):
    """A ``wam serve`` of sentinel-wam with a token, bound to loopback (so the Unix channel
    and shared memory are on)."""

    def __init__(self, tmp: Path):
        super().__init__(["--am-backend", "sentinel-wam", "--platform", "toy-big", "--message-timeout",
                          str(MESSAGE_TIMEOUT_S), "--max-message-mb", str(MAX_MESSAGE_MB),
                          "--max-shared-mb", str(MAX_SHARED_MB)], tmp, env=worker_env(WAMCORE_TOKEN=TOKEN))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def rss_kib(self) -> Dict[str, int]:
        """Resident and peak resident memory, address space and its peak (KiB), and the
        memory files (shared-memory segments) it maps."""
        out = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "VmSize", "VmPeak"):
                out[key] = int(value.split()[0])
        out["memfd"] = 0
        for line in Path(f"/proc/{self.proc.pid}/maps").read_text().splitlines():
            if "/memfd:" in line:
                start, end = (int(x, 16) for x in line.split()[0].split("-"))
                out["memfd"] += (end - start) >> 10
        return out


# ----------------------------------------------------------------------------- values


def junk(rng: random.Random, depth: int = 0) -> Any:
    """A random msgpack-able value: every type, edge sizes, some nesting."""
    kind = rng.randrange(12 if depth < 3 else 8)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.choice([0, -1, 1, 2**31, -(2**63), 2**64 - 1, rng.randrange(-1000, 1000)])
    if kind == 3:
        return rng.choice([0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1e300, -1e-300, rng.random()])
    if kind == 4:
        return rng.choice(["", " ", "x" * rng.randrange(1, 300), "\u00e9\u4e2d\U0001f600", "predict", "hello"])
    if kind == 5:
        return os.urandom(rng.randrange(0, 64))
    if kind == 6:
        return msgpack.ExtType(rng.randrange(0, 128), os.urandom(rng.randrange(0, 40)))
    if kind == 7:
        return np.zeros(rng.choice([(0,), (3,), (2, 2), (5000,)]), dtype=rng.choice(["u1", "f4", "i8", "?"]))
    if kind in (8, 9):
        return [junk(rng, depth + 1) for _ in range(rng.randrange(0, 4))]
    return {rng.choice(["type", "v", "images", "state", "x", "", "\0"]): junk(rng, depth + 1) for _ in range(rng.randrange(0, 4))}


def deep(depth: int) -> bytes:
    """Raw msgpack of a list nested ``depth`` deep (deeper than a packer would pack)."""
    return b"\x91" * depth + b"\x90"


def empty_maps(n: int) -> bytes:
    """Raw msgpack of a list of ``n`` empty maps: 1 byte each, a 64-byte dict each decoded."""
    return b"\xdd" + n.to_bytes(4, "big") + b"\x80" * n


def nested_maps(lists: int, per_list: int) -> bytes:
    """A list of ``lists`` lists of ``per_list`` empty maps: no list is long, all are many."""
    return b"\xdc" + lists.to_bytes(2, "big") + (b"\xdd" + per_list.to_bytes(4, "big") + b"\x80" * per_list) * lists


def raw_envelope(msg: dict, **raw: bytes) -> bytes:
    """``msg`` packed by hand, with the fields in ``raw`` put in as raw msgpack."""
    fields = {k: v for k, v in msg.items() if k not in raw}
    body = b"".join(msgpack.packb(k) + msgpack.packb(v) for k, v in fields.items())
    body += b"".join(msgpack.packb(k) + v for k, v in raw.items())
    return bytes([0xDE]) + (len(fields) + len(raw)).to_bytes(2, "big") + body


def sealed_segment(size: int) -> tuple:
    """(descriptor, id) of a sealed memory file of ``size`` bytes (sparse: costs no memory)."""
    import fcntl

    fd = os.memfd_create("fuzz", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    sid = os.urandom(16)
    os.pwrite(fd, sid, 0)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
    return fd, sid


# ----------------------------------------------------------------------------- cases


class Fuzzer:
    def __init__(self, worker: Worker, seed: int):
        self.worker = worker
        self.rng = random.Random(seed)
        self.zmq_sock = None
        self.local_conn: Optional[socket.socket] = None
        self.session: Optional[str] = None
        self.local_address: Optional[str] = None
        self.stale: List[socket.socket] = []  # connections left with a partial message: the worker must drop them
        self.outcomes: Dict[str, int] = {}
        self.by_kind: Dict[str, int] = {}
        self.ok_predicts = 0
        self.hangs: List[str] = []
        self.canaries = 0
        self._hello()

    # -------------------------------------------------------------- transports

    def _zmq(self):
        import zmq

        if self.zmq_sock is None:
            self.zmq_sock = zmq.Context.instance().socket(zmq.DEALER)
            self.zmq_sock.setsockopt(zmq.LINGER, 0)
            self.zmq_sock.connect(self.worker.endpoint)
        return self.zmq_sock

    def _reset_zmq(self) -> None:
        if self.zmq_sock is not None:
            self.zmq_sock.close()
            self.zmq_sock = None

    def _local(self) -> socket.socket:
        if self.local_conn is None:
            self.local_conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.local_conn.settimeout(REPLY_TIMEOUT_S)
            self.local_conn.connect(self.local_address)
        return self.local_conn

    def _drop_local(self) -> None:
        if self.local_conn is not None:
            self.local_conn.close()
            self.local_conn = None

    def _hello(self) -> None:
        reply = self.send_zmq(wire.encode(protocol.request(1, "hello", session=None, token=TOKEN)))
        if isinstance(reply, dict) and reply.get("ok"):
            self.session = reply["result"]["session"]
            self.local_address = reply["result"]["local"]

    def send_zmq(self, frames: list):
        sock = self._zmq()
        sock.send_multipart(frames)
        if not sock.poll(REPLY_TIMEOUT_S * 1000):
            self._reset_zmq()  # a late answer must not meet the next case
            return "hang"
        return self._decode(sock.recv_multipart())

    def send_local(self, raw: bytes = b"", frames: Optional[list] = None, fds=()) -> Any:
        try:
            conn = self._local()
            if frames is not None:
                local.send_frames(conn, frames, fds)
            else:
                ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
                conn.sendmsg([raw], ancillary)
            deadline = time.monotonic() + REPLY_TIMEOUT_S

            def wait():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise socket.timeout()
                conn.settimeout(left)

            return self._decode(local.recv_frames(conn, wait))
        except socket.timeout:
            self._drop_local()
            return "hang"
        except OSError:  # the worker closed this connection (framing broken): expected for some cases
            self._drop_local()
            return "closed"

    @staticmethod
    def _decode(frames) -> Any:
        try:
            reply = wire.decode(frames)
        except Exception as exc:
            return f"undecodable answer: {exc}"
        return reply

    # -------------------------------------------------------------- generators

    def base_request(self, method: str) -> dict:
        args = {}
        if method == "predict":
            obs = toy.big_observation(self.rng.randrange(1000))
            args = {"request": PredictRequest(obs, seed=self.rng.choice([None, 0, 7])).to_wire()}
        session = self.session if method in protocol.SESSION_METHODS else None
        return protocol.request(self.rng.randrange(1, 1 << 30), method, session=session, token=TOKEN, args=args)

    def mutate_envelope(self) -> dict:
        msg = self.base_request(self.rng.choice(["health", "get_model_info", "predict", "reset", "hello"]))
        for _ in range(self.rng.randrange(1, 3)):
            key = self.rng.choice(["type", "v", "id", "method", "session", "token", "args", "extra"])
            if self.rng.random() < 0.2 and key in msg:
                del msg[key]
            else:
                msg[key] = junk(self.rng)
        return msg

    def mutate_predict(self) -> dict:
        msg = self.base_request("predict")
        req = msg["args"]["request"]
        obs = req["observation"]
        choice = self.rng.randrange(14)
        img = (*toy.BIG_SIZE, 3)
        if choice == 0:
            obs["images"].pop(self.rng.choice(["primary", "wrist"]))
        elif choice == 1:
            obs["images"][self.rng.choice(["side", "", "x" * 200])] = np.zeros(img, np.uint8)
        elif choice == 2:
            obs["images"]["primary"] = np.zeros(self.rng.choice([(2, 2, 3), (256, 256), (256, 256, 4), (0, 256, 3)]),
                                                self.rng.choice(["u1", "f4", "i2"]))
        elif choice == 3:
            obs["images"]["wrist"] = junk(self.rng)
        elif choice == 4:
            obs["state"]["position"] = np.array(self.rng.choice([[np.nan, 0], [np.inf, 1], [1e300, 0], [1, 2, 3], [[1, 2]]]))
        elif choice == 5:
            obs["state"][self.rng.choice(["position", "velocity"])] = junk(self.rng)
        elif choice == 6:
            obs["instruction"] = self.rng.choice([junk(self.rng), "", "   ", "y" * 100_000])
        elif choice == 7:
            obs["step"] = self.rng.choice([-1, 2**64 - 1, 1.5, "3", None, junk(self.rng)])
        elif choice == 8:
            req["seed"] = self.rng.choice([-5, 2**63, 2**64 - 1, 0.5, "s", True, junk(self.rng)])
        elif choice == 9:  # options: unknown names, wrong types; valid ones only small
            req["options"] = self.rng.choice([{"evil": 1}, {"delay": "x"}, {"delay": float("nan")}, {"delay": [1]},
                                              {"delay": True}, {"open_files": 1.5}, {"delay": 0.0}, junk(self.rng)])
        elif choice == 10:
            req["candidate_actions"] = self.rng.choice([np.zeros((1, 2), np.float32), junk(self.rng)])
        elif choice == 11:
            target = self.rng.choice([req, obs])
            target[self.rng.choice(list(target))] = junk(self.rng)
        elif choice == 12:
            req["instruction"] = self.rng.choice(["", 5, None, "fine override"])
        else:
            obs.pop(self.rng.choice(list(obs)))
        return msg

    def wire_case(self) -> list:
        choice = self.rng.randrange(8)
        header = msgpack.packb(self.base_request("health"), use_bin_type=True)
        if choice == 0:
            return [os.urandom(self.rng.randrange(1, 200))]
        if choice == 1:
            return [header[: self.rng.randrange(1, len(header))]]
        if choice == 2:  # a buffer reference to a frame that is not there, or of the wrong size
            ref = msgpack.ExtType(1, msgpack.packb([self.rng.randrange(0, 4), "<f4", [self.rng.randrange(0, 10)]]))
            return [wire.encode({**self.base_request("health"), "args": {"x": ref}})[0], os.urandom(self.rng.randrange(0, 12))]
        if choice == 3:
            ref = msgpack.ExtType(2, msgpack.packb([self.rng.choice(["|O", "V8", "<c8", "S3", ">f8", "abc"]), [1], b"\0" * 8]))
            return wire.encode({**self.base_request("health"), "args": {"x": ref}})
        if choice == 4:  # nesting deeper than any packer packs, in every field
            field = self.rng.choice(["id", "method", "session", "token", "args", "type", "v", "x"])
            fields = {k: v for k, v in self.base_request("health").items() if k != field}
            return [bytes([0x80 | (len(fields) + 1)]) + b"".join(msgpack.packb(k) + msgpack.packb(v) for k, v in fields.items())
                    + msgpack.packb(field) + deep(self.rng.choice([100, 600, 1000]))]
        if choice == 5:
            return [header, os.urandom(10), os.urandom(3)]
        if choice == 6:  # a huge string where a short one belongs
            msg = self.base_request("health")
            msg[self.rng.choice(["method", "session", "token"])] = "m" * self.rng.choice([65, 5000, 1 << 20])
            return wire.encode(msg)
        return wire.encode(junk(self.rng))

    def framing_case(self) -> bytes:
        choice = self.rng.randrange(5)
        if choice == 0:
            return os.urandom(self.rng.randrange(1, 64))
        if choice == 1:
            return struct.pack("!I", self.rng.choice([0, 1025, 1 << 31]))
        if choice == 2:
            count = self.rng.randrange(1, 1025)
            return struct.pack(f"!{count + 1}I", count, *([self.rng.choice([1 << 30, 0xFFFFFFFF])] * count))
        if choice == 3:  # two messages at once
            frames = wire.encode(self.base_request("health"))
            one = struct.pack("!2I", 1, len(frames[0])) + bytes(frames[0])
            return one + one
        return struct.pack("!2I", 1, 10) + b"abc"  # partial: the worker must drop it after --message-timeout

    def shm_case(self):
        """(frames, fds): references into segments of every kind, with descriptors that may
        or may not be sealed memory files."""
        msg = self.base_request("predict")
        obs = msg["args"]["request"]["observation"]
        choice = self.rng.randrange(9)
        fds: List[int] = []
        sid = os.urandom(16)
        if choice in (0, 1, 2, 3):
            arena = shm.Arena(1 << 20)
            sid = arena.id
            fds = [os.dup(arena.fd)]
            arena.close()
        shape = [*toy.BIG_SIZE, 3]
        offset, dtype = 64, "|u1"
        if choice == 1:
            offset = self.rng.choice([0, 15, (1 << 20) - 10, 1 << 40, -1])
        elif choice == 2:
            dtype, shape = self.rng.choice([("|O", shape), ("<f8", [1 << 20]), ("|u1", [1 << 30]), ("|u1", [-1]),
                                            ("|u1", "x")])
        elif choice == 3:
            fds.append(os.dup(fds[0]))
            fds.append(os.dup(fds[0]))  # more descriptors than a message may carry
        elif choice == 4:
            fd = os.memfd_create("fuzz")  # not sealed: could shrink under the worker
            os.ftruncate(fd, 1 << 20)
            os.pwrite(fd, sid, 0)
            fds = [fd]
        elif choice == 5:
            r, w = os.pipe()
            os.close(w)
            fds = [r]
        elif choice == 6:
            fds = [os.open("/etc/hostname" if os.path.exists("/etc/hostname") else __file__, os.O_RDONLY)]
        elif choice == 7:  # a segment by name, as earlier workers read them
            ref = msgpack.ExtType(3, msgpack.packb((f"wamcore-{uuid.uuid4().hex}", os.urandom(16), 64, "|u1", shape)))
            obs["images"]["primary"] = ref
            return wire.encode(msg), fds
        ref = msgpack.ExtType(3, msgpack.packb((sid, offset, dtype, shape)))
        obs["images"][self.rng.choice(["primary", "wrist"])] = ref
        if self.rng.random() < 0.1:
            msg = {**self.base_request("health"), "args": {"x": ref}}  # descriptors with a call without a session
        return wire.encode(msg), fds

    def amplify_case(self) -> list:
        """Headers that decode to many times their size (a 1-byte empty map becomes a 64-byte
        dict; a 3-byte integer a 32-byte int), before and after the token."""
        choice = self.rng.randrange(5)
        n = self.rng.choice([1 << 16, 1 << 20, (MAX_MESSAGE_MB - 1) << 20])
        msg = self.base_request("health")
        if choice == 0:  # the whole header
            return [empty_maps(n)]
        if choice == 1:  # args, with a wrong token
            return [raw_envelope({**msg, "token": "wrong"}, args=empty_maps(n))]
        if choice == 2:  # args under the header limit, with the token: many short lists
            return [raw_envelope(msg, args=nested_maps(self.rng.choice([16, 200, 255]), 4000))]
        if choice == 3:  # an envelope field
            field = self.rng.choice(["id", "method", "session", "token", "type", "v"])
            return [raw_envelope(msg, **{field: nested_maps(self.rng.choice([1, 16, 200]), 4000)})]
        ints = b"\xdc" + (4000).to_bytes(2, "big") + b"\xcd\x12\x34" * 4000  # 4000 uint16 per list
        return [raw_envelope(msg, args=b"\x81\xa1x\xdc" + (80).to_bytes(2, "big") + ints * 80)]

    def address_case(self):
        """(frames, fds): sealed memory files of every size, terabytes (sparse) to just over
        the request limit to ones that fit, for one session and for many: the worker's
        address space must stay bounded (``--max-shared-mb``)."""
        choice = self.rng.randrange(3)
        if choice == 0:
            size = self.rng.choice([1 << 40, 32 << 40, 64 << 40])
        elif choice == 1:
            size = (MAX_MESSAGE_MB << 20) + self.rng.randrange(1, 1 << 20)
        else:
            size = self.rng.choice([MAX_MESSAGE_MB << 20, 4 << 20])
        if self.rng.random() < 0.3:  # segments are kept per session: spread them over sessions
            self.send_zmq(wire.encode(self.base_request("bye")))
            self._hello()
        fd, sid = sealed_segment(size)
        msg = self.base_request("predict")
        nbytes = toy.BIG_SIZE[0] * toy.BIG_SIZE[1] * 3
        msg["args"]["request"]["observation"]["images"] = {
            role: msgpack.ExtType(3, msgpack.packb((sid, 64 + i * nbytes, "|u1", [*toy.BIG_SIZE, 3])))
            for i, role in enumerate(("primary", "wrist"))}
        return wire.encode(msg), [fd]

    # -------------------------------------------------------------- driving

    def record(self, kind: str, outcome: Any, expected_close: bool = False) -> None:
        self.by_kind[kind] = self.by_kind.get(kind, 0) + 1
        if outcome == "hang":
            self.hangs.append(kind)
            label = "hang"
        elif outcome == "closed":
            label = "closed (expected)" if expected_close else "closed"
        elif isinstance(outcome, dict):
            if outcome.get("ok"):
                label = "ok"
                result = outcome.get("result")
                if isinstance(result, dict) and "actions" in result:
                    self.ok_predicts += 1
            else:
                label = str((outcome.get("error") or {}).get("type"))
                if label == "SessionNotFound":
                    self._hello()
        else:
            label = str(outcome)[:60]
        self.outcomes[label] = self.outcomes.get(label, 0) + 1

    def case(self) -> None:
        kind = self.rng.choices(["envelope", "predict", "wire", "framing", "shm", "amplify", "address"],
                                weights=[3, 4, 2, 1, 2, 1, 1])[0]
        over_zmq = self.rng.random() < 0.5
        if kind == "framing":
            raw = self.framing_case()
            partial = raw.endswith(b"abc")
            if partial:  # leave it open: the worker must drop it by itself
                conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                conn.connect(self.local_address)
                conn.sendall(raw)
                self.stale.append(conn)
                self.record("framing", "closed", expected_close=True)
                return
            self.record("framing", self.send_local(raw=raw), expected_close=True)
            self._drop_local()  # whatever is left of a broken framing must not meet the next case
            return
        if kind in ("shm", "address"):
            frames, fds = self.shm_case() if kind == "shm" else self.address_case()
            try:
                self.record(kind, self.send_local(frames=frames, fds=fds))
            finally:
                for fd in fds:
                    os.close(fd)
            return
        if kind in ("wire", "amplify"):
            frames = self.wire_case() if kind == "wire" else self.amplify_case()
            outcome = self.send_zmq(frames) if over_zmq else self.send_local(frames=frames)
            self.record(f"{kind}/{'zmq' if over_zmq else 'local'}", outcome)
            return
        msg = self.mutate_envelope() if kind == "envelope" else self.mutate_predict()
        try:
            frames = wire.encode(msg)
        except Exception:
            frames = [msgpack.packb(msg, use_bin_type=True, default=lambda o: str(type(o)))]
        outcome = self.send_zmq(frames) if over_zmq else self.send_local(frames=frames)
        self.record(f"{kind}/{'zmq' if over_zmq else 'local'}", outcome)

    def canary(self) -> dict:
        """A valid client through shared memory: right answer, and the model's own counters."""
        self.canaries += 1
        with RemoteModel(self.worker.endpoint, token=TOKEN, connect_timeout_s=10).bind(BIG) as m:
            obs = toy.big_observation(self.canaries)
            info = m.predict(PredictRequest(obs)).info
            right = info["sums"] == {r: int(a.sum(dtype=np.int64)) for r, a in obs.images.items()}
            return {"right": right and m._arena is not None and m._arena.sent, "calls": info["calls"],
                    "violations": info["violations"], "first_violation": info["first_violation"]}

    def close(self) -> None:
        self._reset_zmq()
        self._drop_local()
        for conn in self.stale:
            conn.close()


def stale_dropped(conns: List[socket.socket], timeout_s: float) -> int:
    """How many of these connections the worker closed within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    dropped = 0
    for conn in conns:
        conn.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            dropped += conn.recv(1) == b""
        except socket.timeout:
            pass
        except OSError:  # reset by the worker
            dropped += 1
    return dropped


def run_fuzz(cases: int, seed: int = 0, tmp: Optional[Path] = None, canary_every: int = 100,
             progress: bool = False) -> dict:
    """Fuzz one worker with ``cases`` malformed requests; restarts it if it dies (each a crash)."""
    tmp = Path(tmp or tempfile.mkdtemp())
    worker = Worker(tmp)
    crashes, canaries_wrong, violations, first_violation = [], 0, 0, None
    t0 = time.monotonic()
    try:
        fuzzer = Fuzzer(worker, seed)
        first = fuzzer.canary()
        calls_before = first["calls"] - 1  # not counting this canary
        rss_before = worker.rss_kib()
        canary_calls = 1
        for i in range(cases):
            fuzzer.case()
            if not worker.alive():
                crashes.append({"case": i, "exit": worker.proc.returncode, "log": worker.output()[-2000:]})
                worker.stop()
                worker = Worker(tmp)
                fuzzer.close()
                fuzzer = Fuzzer(worker, seed + i + 1)
                calls_before, canary_calls = fuzzer.canary()["calls"] - 1, 1
            if (i + 1) % canary_every == 0:
                c = fuzzer.canary()
                canary_calls += 1
                canaries_wrong += not c["right"]
                violations = c["violations"]
                first_violation = c["first_violation"]
                if progress:
                    print(f"{i + 1} cases, {c['calls']} model calls, {len(crashes)} crashes, {len(fuzzer.hangs)} hangs",
                          flush=True)
        last = fuzzer.canary()
        canary_calls += 1
        canaries_wrong += not last["right"]
        violations, first_violation = last["violations"], last["first_violation"]
        fuzz_calls = last["calls"] - calls_before - canary_calls
        dropped = stale_dropped(fuzzer.stale, MESSAGE_TIMEOUT_S + 3.0)
        rss_after = worker.rss_kib()
        report = {
            "cases": cases, "seed": seed, "seconds": round(time.monotonic() - t0, 1),
            "crashes": len(crashes), "crash_details": crashes[:3],
            "hangs": len(fuzzer.hangs), "hang_kinds": sorted(set(fuzzer.hangs)),
            "model_calls_from_fuzz": fuzz_calls, "ok_predictions_from_fuzz": fuzzer.ok_predicts,
            "malformed_inputs_seen_by_model": violations, "first_violation": first_violation,
            "canaries": fuzzer.canaries, "canaries_wrong": canaries_wrong,
            "partial_messages_left_open": len(fuzzer.stale), "of_them_dropped_by_worker": dropped,
            "rss_kib_before": rss_before.get("VmRSS"), "rss_kib_after": rss_after.get("VmRSS"),
            "rss_kib_peak": rss_after.get("VmHWM"),
            "vm_kib_before": rss_before.get("VmSize"), "vm_kib_after": rss_after.get("VmSize"),
            "vm_kib_peak": rss_after.get("VmPeak"), "shared_mapped_kib_after": rss_after.get("memfd"),
            "outcomes": dict(sorted(fuzzer.outcomes.items(), key=lambda kv: -kv[1])), "cases_by_kind": fuzzer.by_kind,
            "worker_alive": worker.alive(),
        }
        fuzzer.close()
        return report
    finally:
        worker.stop()


# ----------------------------------------------------------------------------- parent kills

PARENT = textwrap.dedent("""
    import json, os, sys, time
    import wamtest_scripted as toy
    from wamcore.contracts import PredictRequest
    from wamcore.errors import WorkerTimeout
    from wamcore.registry import default_registry
    from wamcore.rpc import shm
    from wamcore.runtime import WorkerConfig, open_model
    mode = sys.argv[2]
    reg = default_registry()
    config = WorkerConfig.from_options(platform="toy-big", am_backend="sentinel-wam", am_python=sys.executable,
                                       log_dir=sys.argv[1], timeout_s=0.5 if mode == "queued" else 60)
    model = open_model(config, reg.platform("toy-big"), registry=reg)
    model.predict(PredictRequest(toy.big_observation(0)))  # through shared memory
    if mode == "queued":
        try:
            model.predict(PredictRequest(toy.big_observation(1), options={"delay": 5.0}))
        except WorkerTimeout:
            pass
        model.timeout_s = 60
        model._arena = shm.Arena(1 << 20)  # the fresh segment the next request takes (made here to follow it)
    arena = model._arena  # the shared-memory segment of this client
    print(json.dumps({"worker": model.info.details["worker"]["pid"], "arena": os.readlink(f"/proc/self/fd/{arena.fd}"),
                      "inode": os.fstat(arena.fd).st_ino}), flush=True)
    if mode == "idle":
        time.sleep(120)
    model.predict(PredictRequest(toy.big_observation(2), options={"delay": 30.0 if mode == "busy" else 0.0}))
    time.sleep(120)
""")


def holders(inode: int) -> List[int]:
    """Processes that still map or hold the memory file with this inode."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            maps = Path(f"/proc/{entry}/maps").read_text()
            if any(line.split()[4] == str(inode) and "memfd:" in line for line in maps.splitlines() if len(line.split()) > 5):
                found.append(int(entry))
                continue
            for fd in os.listdir(f"/proc/{entry}/fd"):
                if os.readlink(f"/proc/{entry}/fd/{fd}").startswith("/memfd:") and os.stat(f"/proc/{entry}/fd/{fd}").st_ino == inode:
                    found.append(int(entry))
                    break
        except OSError:
            continue
    return found


def run_parent_kills(kills: int, tmp: Optional[Path] = None, exit_limit_s: float = 10.0, progress: bool = False) -> dict:
    """SIGKILL the parent of a spawned worker ``kills`` times (idle, mid-call, with a request
    queued behind a slow call); count workers that outlive it, and shared-memory segments
    that outlive both (a named one left in /dev/shm, or a memory file still held)."""
    tmp = Path(tmp or tempfile.mkdtemp())
    script = tmp / "parent.py"
    script.write_text(PARENT)
    tag = uuid.uuid4().hex
    exits: Dict[str, List[float]] = {}
    orphans, modes, named, held = [], {}, [], []
    for i in range(kills):
        mode = ("idle", "busy", "queued")[i % 3]
        modes[mode] = modes.get(mode, 0) + 1
        parent = subprocess.Popen([sys.executable, str(script), str(tmp / f"logs{i}"), mode], env=worker_env(**{TAG_ENV: tag}),
                                  stdout=subprocess.PIPE, text=True)
        line = parent.stdout.readline()
        if not line:
            parent.wait()
            raise RuntimeError(f"parent {i} ({mode}) failed before its worker was ready")
        record = json.loads(line)
        pid = record["worker"]
        if not record["arena"].startswith("/memfd:"):
            named.append(record["arena"])
        time.sleep(0.3)
        parent.kill()
        parent.wait()
        parent.stdout.close()
        t0 = time.monotonic()
        while not pid_gone(pid) and time.monotonic() - t0 < exit_limit_s:
            time.sleep(0.01)
        if pid_gone(pid):
            exits.setdefault(mode, []).append(time.monotonic() - t0)
        else:
            orphans.append(pid)
            os.kill(pid, signal.SIGKILL)
        held += holders(record["inode"])
        if progress and (i + 1) % 10 == 0:
            print(f"{i + 1} parent kills, {len(orphans)} orphans", flush=True)
    time.sleep(0.5)
    left = tagged_pids(tag)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return {
        "kills": kills, "modes": modes, "orphans": len(orphans), "processes_left": len(left),
        "segments_named_in_dev_shm": len(named), "segments_still_held": len(held),
        "exit_s_median": {m: round(statistics.median(v), 3) for m, v in exits.items()},
        "exit_s_max": {m: round(max(v), 3) for m, v in exits.items()},
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--parent-kills", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    out: Dict[str, Any] = {}
    if args.cases:
        out["fuzz"] = run_fuzz(args.cases, args.seed, progress=not args.json)
    if args.parent_kills:
        out["parent_kills"] = run_parent_kills(args.parent_kills, progress=not args.json)
    print(json.dumps(out, indent=None if args.json else 2))
    fuzz, kills = out.get("fuzz", {}), out.get("parent_kills", {})
    bad = (fuzz.get("crashes") or fuzz.get("hangs") or fuzz.get("malformed_inputs_seen_by_model")
           or fuzz.get("canaries_wrong") or fuzz.get("model_calls_from_fuzz", 0) != fuzz.get("ok_predictions_from_fuzz", 0)
           or kills.get("orphans") or kills.get("processes_left") or kills.get("segments_named_in_dev_shm")
           or kills.get("segments_still_held"))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
