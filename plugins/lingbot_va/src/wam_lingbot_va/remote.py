"""A client of a running LingBot-VA server: upstream's copy of openpi's websocket server
(Robbyant/lingbot-va 6f092cb, ``wan_va/utils/Simple_Remote_Infer/deploy/websocket_policy_server.py``
and ``msgpack_numpy.py``; the client side is ``evaluation/robotwin/websocket_client_policy.py``).

The protocol: on connect the server sends msgpack metadata (``{}``); then every request and
reply is one binary msgpack message, numpy arrays as maps ``{b"__ndarray__": True, b"data",
b"dtype" (dtype.str), b"shape"}`` (scalars ``{b"__npgeneric__": True, b"data", b"dtype"}``);
the reply gains ``server_timing``. A failing request is answered with a *text* frame (the
traceback), then the server closes the connection (1011). ``GET /healthz`` answers 200.

Replies are decoded strictly, never with pickle: an array must have a numeric dtype
(bool, int, uint, float), a shape of non-negative ints and exactly as many bytes as they
need; extension types and non-string map keys are refused with a ``ProtocolError``. The
server computes the actions, so it is trusted that far, and no further.
"""

from __future__ import annotations

import contextlib
import re
import urllib.error
import urllib.request
from typing import Any, Optional, Tuple

import msgpack
import numpy as np

from wamcore.errors import ConfigurationError, ProtocolError, RemoteError, WorkerError

#: replies are small (a [16, F, 16] chunk and timings); anything much larger is not a reply
MAX_REPLY_BYTES = 16 * 1024 * 1024
_DTYPE = re.compile(r"^[<>|=][biuf][1-9][0-9]?$")
_ARRAY_KEYS = {b"__ndarray__", b"data", b"dtype", b"shape"}
_SCALAR_KEYS = {b"__npgeneric__", b"data", b"dtype"}


def _pack_default(obj: Any) -> Any:
    if isinstance(obj, (np.ndarray, np.generic)) and obj.dtype.kind not in "biuf":
        raise ProtocolError(f"only numeric arrays travel to the LingBot-VA server, got dtype {obj.dtype}")
    if isinstance(obj, np.ndarray):
        return {b"__ndarray__": True, b"data": np.ascontiguousarray(obj).tobytes(), b"dtype": obj.dtype.str,
                b"shape": list(obj.shape)}
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise ProtocolError(f"cannot send a {type(obj).__name__} to the LingBot-VA server")


def pack(obj: Any) -> bytes:
    """One request, as upstream's ``Packer`` writes it."""
    return msgpack.packb(obj, default=_pack_default, use_bin_type=True)


def _dtype(value: Any) -> np.dtype:
    if not isinstance(value, str) or not _DTYPE.match(value):
        raise ProtocolError(f"refused array dtype {value!r}: only bool, int, uint and float arrays are accepted")
    return np.dtype(value)


def _array_hook(obj: dict) -> Any:
    keys = set(obj)
    if b"__ndarray__" in keys:
        if keys != _ARRAY_KEYS or obj[b"__ndarray__"] is not True or not isinstance(obj[b"data"], bytes):
            raise ProtocolError(f"malformed array in the server's reply (keys {sorted(map(repr, keys))})")
        dtype = _dtype(obj[b"dtype"])
        shape = obj[b"shape"]
        if not isinstance(shape, list) or len(shape) > 8 or not all(type(n) is int and n >= 0 for n in shape):
            raise ProtocolError(f"malformed array shape {shape!r} in the server's reply")
        if len(obj[b"data"]) != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
            raise ProtocolError(f"array of shape {shape} and dtype {dtype} does not match its {len(obj[b'data'])} bytes")
        return np.frombuffer(obj[b"data"], dtype=dtype).reshape(shape)
    if b"__npgeneric__" in keys:
        if keys != _SCALAR_KEYS or not isinstance(obj[b"data"], (bool, int, float)):
            raise ProtocolError("malformed scalar in the server's reply")
        return _dtype(obj[b"dtype"]).type(obj[b"data"])
    if not all(isinstance(k, str) for k in keys):
        raise ProtocolError("a map in the server's reply has a key that is not a string")
    return obj


def _no_extension(code: int, data: bytes) -> Any:
    raise ProtocolError(f"refused msgpack extension type {code} in the server's reply")


def unpack(data: bytes) -> Any:
    """One reply, decoded strictly (see the module docstring)."""
    if not isinstance(data, (bytes, bytearray)):
        raise ProtocolError(f"expected a binary msgpack reply, got {type(data).__name__}")
    try:
        return msgpack.unpackb(bytes(data), object_hook=_array_hook, ext_hook=_no_extension, raw=False,
                               strict_map_key=False)
    except ProtocolError:
        raise
    except Exception as exc:  # msgpack's own errors: truncated, bad markers, over the limits
        raise ProtocolError(f"the server's reply is not valid msgpack: {type(exc).__name__}: {exc}") from exc


def parse_address(value: str) -> Tuple[str, int]:
    """``[ws://]HOST:PORT`` or ``PORT`` (127.0.0.1)."""
    text = str(value).strip()
    text = text[len("ws://"):] if text.startswith("ws://") else text
    host, _, port = text.rstrip("/").rpartition(":")
    try:
        number = int(port)
    except ValueError:
        raise ConfigurationError(f"--lingbot-server expects [ws://]HOST:PORT or PORT, got {value!r}") from None
    if not 0 < number < 65536:
        raise ConfigurationError(f"--lingbot-server port must be in 1..65535, got {number}")
    return (host or "127.0.0.1"), number


def check_health(host: str, port: int, timeout_s: float = 10.0) -> None:
    """Upstream's health route: ``GET /healthz`` -> 200."""
    url = f"http://{host}:{port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            status = response.status
    except (urllib.error.URLError, OSError) as exc:
        raise WorkerError(f"the LingBot-VA server at {host}:{port} does not answer {url}: {exc}; start it with "
                          "upstream's evaluation/robotwin/launch_server.sh (or wam serve in-process)") from exc
    if status != 200:
        raise WorkerError(f"{url} answered {status}, not 200")


class WebsocketServer:
    """``infer(request) -> reply`` over one websocket connection, reconnected after a failure
    (upstream's server closes a connection whose request failed)."""

    def __init__(self, host: str, port: int, *, timeout_s: float = 300.0):
        self.host, self.port, self.timeout_s = host, int(port), float(timeout_s)
        self.uri = f"ws://{host}:{self.port}"
        self._conn = self._stack = None
        self.metadata: Optional[dict] = None
        check_health(host, self.port)
        self._connect()

    def _connect(self) -> None:
        from websockets.sync.client import connect

        stack = contextlib.ExitStack()  # websockets >= 17 wants the connection used as a context manager
        try:
            conn = stack.enter_context(connect(self.uri, compression=None, max_size=MAX_REPLY_BYTES,
                                               ping_interval=None, close_timeout=10, open_timeout=30))
            metadata = unpack(conn.recv(timeout=30))
            if not isinstance(metadata, dict):
                raise ProtocolError(f"the server at {self.uri} sent {type(metadata).__name__} metadata, not a map")
        except ProtocolError:
            stack.close()
            raise
        except Exception as exc:
            stack.close()
            raise WorkerError(f"cannot connect to the LingBot-VA server at {self.uri}: {type(exc).__name__}: {exc}") from exc
        self._conn, self._stack, self.metadata = conn, stack, metadata

    def infer(self, request: dict) -> dict:
        if self._conn is None:
            self._connect()
        data = pack(request)
        try:
            self._conn.send(data)
            reply = self._conn.recv(timeout=self.timeout_s)
        except Exception as exc:  # closed, reset, or no answer in time: this connection is done
            self.close()
            raise WorkerError(f"the LingBot-VA server at {self.uri} failed a request: {type(exc).__name__}: {exc}") from exc
        if isinstance(reply, str):  # upstream's error frame: the traceback, then close 1011
            self.close()
            lines = reply.strip().splitlines() or ["(empty)"]
            raise RemoteError("LingBot-VA server", lines[-1], traceback=reply)
        out = unpack(reply)
        if not isinstance(out, dict):
            raise ProtocolError(f"the server replied with {type(out).__name__}, not a map")
        return out

    def close(self) -> None:
        stack, self._conn, self._stack = self._stack, None, None
        if stack is not None:
            try:
                stack.close()
            except Exception:  # the connection is gone either way
                pass


__all__ = ["WebsocketServer", "pack", "unpack", "parse_address", "check_health", "MAX_REPLY_BYTES"]
