"""``wam serve --protocol openpi``: a wamcore model served to openpi clients.

The protocol is openpi's ``WebsocketPolicyServer``
(``src/openpi/serving/websocket_policy_server.py``): on connect the server sends its
metadata; then every binary message is an observation and is answered with
``{"actions": [T, D] float32, "server_timing": {"infer_ms", "prev_total_ms"}, ...}``, all
msgpack-numpy (:mod:`.codec`); a failure is answered with a text frame (the traceback)
and the connection closed with 1011, as openpi does; ``GET /healthz`` answers 200.

What is ours: every request is decoded strictly, laid out into our physical observation
by the platform's :mod:`layout <.layouts>`, and validated by the model's own contract
before the model sees it; the model runs in one thread, one request at a time, while the
event loop keeps answering handshakes and pings; each connection is one session of a
stateful model (reset when it closes). Security as ``wam serve``: loopback by default, and
a token required off loopback, presented as openpi-client's ``api_key`` (the header
``Authorization: Api-Key TOKEN``) and checked before the handshake completes.
"""

from __future__ import annotations

import asyncio
import hmac
import http
import logging
import sys
import time
import traceback
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional, TextIO

from websockets.asyncio.server import serve as ws_serve
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from .. import __version__
from ..contracts import PredictRequest, Prediction
from ..errors import ConfigurationError, ProtocolError
from ..rpc import protocol
from ..rpc.server import (DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_SESSIONS, check_bind, install_signal_handlers,
                          remove_ready, stop_requested, worker_details, write_ready)
from ..service import ModelService
from . import codec
from .layouts import Layout, inject_default_prompt

log = logging.getLogger("wamcore.openpi")

PROTOCOL = "openpi"
API_KEY_PREFIX = "Api-Key "  # openpi-client's WebsocketClientPolicy(api_key=...) header
CLOSE_REASON = "Internal server error. Traceback included in previous frame."  # openpi's own words
_STOP_POLL_S = 0.1


def error_text(exc: BaseException) -> str:
    """The text frame openpi sends for a failure: the traceback, bounded in size."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return protocol.shorten(text, protocol.MAX_TRACEBACK_CHARS, keep_end=True)


class OpenpiServer:
    """Serves one ModelService to openpi clients through ``layout``."""

    def __init__(self, service: ModelService, layout: Layout, *, token: Optional[str] = None,
                 max_connections: int = DEFAULT_MAX_SESSIONS, default_prompt: Optional[str] = None):
        self.service = service
        self.layout = layout
        self.default_prompt = default_prompt
        self.contract = service.contract
        layout.check(self.contract)
        self.token = token or None
        self.max_connections = max(1, int(max_connections))
        self.connections = 0
        self.endpoint: Optional[str] = None
        info = service.info
        self.metadata = {"wamcore": {
            "version": __version__, "backend": info.backend, "checkpoint": info.checkpoint,
            "platform": self.contract.platform, "layout": layout.name, "keys": layout.keys(self.contract),
            "action_space": self.contract.action_space, "action_dim": self.contract.action_dim,
            "chunk_size": self.contract.chunk_size, "default_prompt": default_prompt,
        }}
        self._metadata = codec.packb(self.metadata)
        self._model = ThreadPoolExecutor(1, thread_name_prefix="wamcore-model")  # one model call at a time

    # ------------------------------------------------------------------ handshake

    def _process_request(self, connection, request):
        if request.path == "/healthz":
            return connection.respond(http.HTTPStatus.OK, "OK\n")
        if self.token is not None:
            given = (request.headers.get("Authorization") or "").encode("utf-8", "surrogateescape")
            if not hmac.compare_digest(given, (API_KEY_PREFIX + self.token).encode()):
                return connection.respond(http.HTTPStatus.UNAUTHORIZED,
                                          "this server requires a token: pass it as openpi-client's api_key "
                                          "(header 'Authorization: Api-Key TOKEN')\n")
        if self.connections >= self.max_connections:
            return connection.respond(http.HTTPStatus.SERVICE_UNAVAILABLE,
                                      f"this server has {self.connections} connections, its limit (--max-sessions)\n")
        return None

    # ------------------------------------------------------------------ requests

    def _answer(self, message: Any, session: str, prev_total_s: Optional[float]) -> bytes:
        """Decode, lay out, validate and predict, encode: in the model's thread."""
        t0 = time.monotonic()
        if not isinstance(message, bytes):
            raise ProtocolError("an openpi request is a binary msgpack frame, got a text frame")
        request = inject_default_prompt(codec.unpackb(message), self.default_prompt)
        observation = self.layout.observation(request, self.contract)
        prediction: Prediction = self.service.predict(PredictRequest(observation), session=session)
        timing = {"infer_ms": (time.monotonic() - t0) * 1000.0}
        if prev_total_s is not None:
            timing["prev_total_ms"] = prev_total_s * 1000.0
        answer = {"actions": prediction.actions, "server_timing": timing, "policy_timing": dict(prediction.timing)}
        if prediction.info:
            answer["info"] = dict(prediction.info)
        return codec.packb(answer)

    async def _handler(self, ws) -> None:
        loop = asyncio.get_running_loop()
        session = uuid.uuid4().hex
        self.connections += 1
        log.info("connection %s from %s opened", session[:8], ws.remote_address)
        try:
            await ws.send(self._metadata)
            prev_total = None
            while True:
                message = await ws.recv()
                t0 = time.monotonic()
                try:
                    answer = await loop.run_in_executor(self._model, self._answer, message, session, prev_total)
                except Exception as exc:  # openpi's way: the traceback as text, then close
                    log.info("connection %s: %s: %s", session[:8], type(exc).__name__, protocol.shorten(str(exc), 300))
                    await ws.send(error_text(exc))
                    await ws.close(CloseCode.INTERNAL_ERROR, CLOSE_REASON)
                    return
                await ws.send(answer)
                prev_total = time.monotonic() - t0
        except ConnectionClosed:
            pass
        finally:
            self.connections -= 1
            log.info("connection %s closed", session[:8])
            if self.service.uses_sessions:  # free that client's model state
                loop.run_in_executor(self._model, self._reset, session)

    def _reset(self, session: str) -> None:
        try:
            self.service.reset(session)
        except Exception:
            log.exception("resetting the session of a closed connection failed")

    # ------------------------------------------------------------------ lifetime

    def ready_record(self, port: int) -> dict:
        return {
            "event": "ready", "endpoint": self.endpoint, "port": port, "protocol": PROTOCOL, "layout": self.layout.name,
            "backend": self.service.info.backend, "platforms": [self.contract.platform], "device": self.service.info.device,
            "token_required": self.token is not None, **worker_details(),
        }

    async def run(self, host: str, port: int, *, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                  out: Optional[TextIO] = None, ready_file: Optional[str] = None) -> None:
        """Bind, announce, serve until a stop is requested (signal, parent watch)."""
        try:
            server = await ws_serve(self._handler, host, port, compression=None, max_size=max_message_bytes,
                                    process_request=self._process_request, server_header=None)
        except OSError as exc:
            raise ConfigurationError(f"cannot bind {host}:{port}: {exc}") from exc
        try:
            bound = server.sockets[0].getsockname()[1]
            self.endpoint = f"ws://{f'[{host}]' if ':' in host else host}:{bound}"
            record = self.ready_record(bound)
            write_ready(record, out, ready_file)
            log.info("serving %s over openpi's protocol on %s (layout %s)", record["backend"], self.endpoint,
                     self.layout.name)
            while not stop_requested():
                await asyncio.sleep(_STOP_POLL_S)
        finally:
            server.close()
            await server.wait_closed()

    def close(self) -> None:
        self._model.shutdown(wait=True)


def serve(service: ModelService, layout: Layout, *, host: str = "127.0.0.1", port: int = 0, token: Optional[str] = None,
          ready_file: Optional[str] = None, out: Optional[TextIO] = None, max_connections: int = DEFAULT_MAX_SESSIONS,
          max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, default_prompt: Optional[str] = None) -> None:
    """What ``wam serve --protocol openpi`` runs: serve until stopped, then close the model."""
    check_bind(host, token)
    install_signal_handlers()
    server = OpenpiServer(service, layout, token=token, max_connections=max_connections, default_prompt=default_prompt)
    try:
        asyncio.run(server.run(host, port, max_message_bytes=max_message_bytes,
                               out=out if out is not None else sys.stdout, ready_file=ready_file))
    finally:
        server.close()
        service.close()
        remove_ready(ready_file)


__all__ = ["OpenpiServer", "serve", "error_text", "API_KEY_PREFIX", "PROTOCOL"]
