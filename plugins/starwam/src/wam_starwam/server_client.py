"""A client of StarWAM's own RoboTwin policy server (``--policy-server [HOST:]PORT``).

Protocol (StarWAM a7b05c8 ``examples/robotwin/policy_server.py`` and ``client_policy.py``):
plain TCP, ``TCP_NODELAY``; each message is an 8-byte big-endian length (``struct ">Q"``)
followed by a pickle. Requests: ``{"cmd": "infer", "head", "left", "right": HxWx3 uint8,
"state": float32[14], "instruction": str}`` -> ``{"action": float32[32, 14]}`` (already
de-normalised) or ``{"error": traceback}``; ``{"cmd": "reset"}`` -> ``{"ok": True}``. The
server composes the 384x320 frame itself from the raw cameras, as ``client_policy.py`` sends
them, and serves one client at a time.

Trust: the requests written here are plain dicts of arrays. Replies are read with an
unpickler that builds only numpy arrays (numeric dtypes), dicts, lists, strings and numbers;
any other object named in a reply is refused with a :class:`ProtocolError` before it is
built, so a reply cannot run code here. Beyond that the server is trusted: it computes the
actions that are executed. Frames above 512 MiB (the server's own limit) are refused.
"""

from __future__ import annotations

import pickle
import socket
import struct
from typing import Any, Optional

import numpy as np

from wamcore.contracts import PredictRequest
from wamcore.errors import PredictionError, ProtocolError, WorkerError

from .chunks import HORIZON
from .robotwin import ACTION_DIM

MAX_MESSAGE = 512 * 1024 * 1024
_ALLOWED = {
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
}


class _ReplyUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) not in _ALLOWED:
            raise ProtocolError(
                f"StarWAM policy server reply refused: it names {module}.{name}; only numpy arrays, dicts, lists, "
                "strings and numbers are accepted"
            )
        return super().find_class(module, name)


def _plain(value: Any, where: str = "reply") -> Any:
    """Check the unpickled reply holds only plain data (numeric arrays, no object dtype)."""
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise ProtocolError(f"StarWAM policy server {where}: non-string key refused")
        return {k: _plain(v, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, where) for v in value]
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            raise ProtocolError(f"StarWAM policy server {where}: array of dtype {value.dtype} refused (numeric only)")
        return value
    if value is None or isinstance(value, (str, bool, int, float, np.generic)):
        return value
    raise ProtocolError(f"StarWAM policy server {where}: {type(value).__name__} refused")


def loads_reply(payload: bytes) -> Any:
    import io

    try:
        return _plain(_ReplyUnpickler(io.BytesIO(payload)).load())
    except ProtocolError:
        raise
    except Exception as exc:  # a malformed pickle is a protocol problem, whatever the unpickler raised
        raise ProtocolError(f"StarWAM policy server sent an unreadable reply: {type(exc).__name__}: {exc}") from exc


def send_message(conn: socket.socket, obj: dict) -> None:
    payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    conn.sendall(struct.pack(">Q", len(payload)) + payload)


def _recv_exactly(conn: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise WorkerError("StarWAM policy server closed the connection")
        buf.extend(chunk)
    return bytes(buf)


def recv_reply(conn: socket.socket) -> Any:
    (length,) = struct.unpack(">Q", _recv_exactly(conn, 8))
    if length == 0 or length > MAX_MESSAGE:
        raise ProtocolError(f"StarWAM policy server frame of {length} bytes refused (1..{MAX_MESSAGE})")
    return loads_reply(_recv_exactly(conn, length))


class PolicyServerClient:
    """A NativeModel whose predictions come from a running StarWAM policy server."""

    uses_sessions = False  # the server keeps one queue for one client

    def __init__(self, host: str, port: int, *, settings=None, timeout_s: float = 600.0):
        self.address = (host, int(port))
        self.settings = settings
        self.checkpoint = f"starwam-policy-server://{host}:{port}"
        self.details = {"entry": "examples.robotwin.policy_server (length-prefixed pickle over TCP)",
                        "server": f"{host}:{port}", "trust": "server trusted; replies read with a restricted unpickler"}
        try:
            self._conn: Optional[socket.socket] = socket.create_connection(self.address, timeout=30.0)
        except OSError as exc:
            raise WorkerError(
                f"cannot reach the StarWAM policy server at {host}:{port}: {exc}; start it with "
                "`python -m examples.robotwin.policy_server --config RECIPE --checkpoint CKPT --host 127.0.0.1 "
                f"--port {port}` in the StarWAM checkout"
            ) from exc
        self._conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._conn.settimeout(timeout_s)

    def _call(self, message: dict) -> dict:
        if self._conn is None:
            raise WorkerError("StarWAM policy server connection is closed")
        try:
            send_message(self._conn, message)
            reply = recv_reply(self._conn)
        except OSError as exc:
            raise WorkerError(f"StarWAM policy server {self.address[0]}:{self.address[1]}: {exc}") from exc
        if not isinstance(reply, dict):
            raise ProtocolError(f"StarWAM policy server replied {type(reply).__name__}, expected a dict")
        if "error" in reply:
            raise WorkerError(f"StarWAM policy server error:\n{reply['error']}")
        return reply

    def predict_native(self, native: dict, request: PredictRequest) -> np.ndarray:
        reply = self._call({"cmd": "infer", "head": native["head"], "left": native["left"], "right": native["right"],
                            "state": np.asarray(native["state"], dtype=np.float32),
                            "instruction": str(native["instruction"])})
        action = reply.get("action")
        if not isinstance(action, np.ndarray) or action.shape != (HORIZON, ACTION_DIM):
            raise PredictionError([f"StarWAM policy server returned action {getattr(action, 'shape', action)!r}, "
                                   f"expected ({HORIZON}, {ACTION_DIM})"], context="robotwin")
        return action.astype(np.float32)

    def reset(self) -> None:
        self._call({"cmd": "reset"})

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


__all__ = ["PolicyServerClient", "loads_reply", "send_message", "recv_reply", "MAX_MESSAGE"]
