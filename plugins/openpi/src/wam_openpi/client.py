"""A client of an openpi policy server (openpi's protocol, our strict decoding, typed errors).

It speaks what openpi-client's ``WebsocketClientPolicy`` speaks
(``packages/openpi-client/src/openpi_client/websocket_client_policy.py``): connect (with
``Authorization: Api-Key KEY`` when there is a key), read the metadata, then one binary
msgpack-numpy message per request and one per answer; a text answer is the server's
traceback. Unlike it, this client decodes strictly (:mod:`.codec`), never waits
forever (a refused connection fails at once, an answer has a deadline), and turns every
failure into a wamcore error: a traceback of a wamcore server becomes its own class
again (``ObservationError`` with its problems), any other a ``RemoteError``. After a
failure the connection is dropped and the next request opens a new one (the protocol has
no request ids, so a late answer could not be told from the next one).
"""

from __future__ import annotations

import inspect
import re
from typing import Any, Callable, Mapping, Optional

from websockets.exceptions import ConnectionClosed, InvalidStatus, InvalidURI, WebSocketException
from websockets.sync.client import ClientConnection, connect

from wamcore.errors import ConfigurationError, ProtocolError, RemoteError, ValidationError, WorkerError, WorkerTimeout
from wamcore.rpc.protocol import ERROR_CLASSES, AccessDenied, rebuild_error, shorten

from . import codec

MAX_MESSAGE_BYTES = 256 << 20
#: websockets >= 17 asks for ``legacy=True`` to return the connection itself, outside a ``with``
_DIRECT = {"legacy": True} if "legacy" in inspect.signature(connect).parameters else {}
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?:: (.*))?$")


def remote_error(text: str) -> Exception:
    """The exception a server's traceback text ends with, as a wamcore error."""
    lines = text.rstrip().splitlines()
    for i in range(len(lines) - 1, -1, -1):
        match = _EXCEPTION_LINE.match(lines[i])
        if match:
            name, rest = match.group(1), lines[i + 1:]
            message = "\n".join([match.group(2) or "", *rest]).strip()
            break
    else:
        name, rest, message = "Exception", [], text.strip()
    cls = ERROR_CLASSES.get(name.rsplit(".", 1)[-1]) if name.startswith("wamcore.") else None
    if cls is None:
        return RemoteError(name, shorten(message, 2000), text)
    problems = [line[4:] for line in rest if line.startswith("  - ")] if issubclass(cls, ValidationError) else []
    return rebuild_error({"type": cls.__name__, "message": message, "traceback": text, "fields": {"problems": problems}})


class OpenpiClient:
    """One connection to one policy server; ``check_metadata(metadata)`` runs at every connect."""

    def __init__(self, url: str, *, api_key: Optional[str] = None, timeout_s: float = 300.0, open_timeout_s: float = 10.0,
                 check_metadata: Optional[Callable[[Mapping[str, Any]], None]] = None):
        self.url = url
        self.timeout_s = float(timeout_s)
        self.open_timeout_s = float(open_timeout_s)
        self._headers = {"Authorization": f"Api-Key {api_key}"} if api_key else None
        self._check = check_metadata
        self._ws: Optional[ClientConnection] = None
        self.metadata: Optional[Mapping[str, Any]] = None

    def connect(self) -> Mapping[str, Any]:
        """Open the connection and read (and check) the server's metadata."""
        self.close()
        try:
            ws = connect(self.url, compression=None, max_size=MAX_MESSAGE_BYTES, additional_headers=self._headers,
                         open_timeout=self.open_timeout_s, ping_interval=None, proxy=None, **_DIRECT)
        except InvalidURI as exc:
            raise ConfigurationError(f"--openpi-endpoint {self.url!r} is not a websocket URL: {exc}") from None
        except InvalidStatus as exc:
            status, body = exc.response.status_code, exc.response.body or b""
            text = shorten(body.decode("utf-8", "replace").strip(), 300)
            if status in (401, 403):
                raise AccessDenied(f"the openpi server at {self.url} refused us (HTTP {status}: {text}); "
                                   "give its api key in WAM_OPENPI_API_KEY") from None
            raise WorkerError(f"the openpi server at {self.url} answered the handshake with HTTP {status}: {text}") from None
        except TimeoutError:
            raise WorkerTimeout(f"no websocket handshake from {self.url} within {self.open_timeout_s:g} s") from None
        except OSError as exc:
            raise WorkerError(f"nothing answers at {self.url} ({exc.strerror or exc}): start the policy server "
                              "(openpi: scripts/serve_policy.py; wamcore: wam serve --protocol openpi) or fix "
                              "--openpi-endpoint") from None
        except WebSocketException as exc:
            raise ProtocolError(f"{self.url} is not a websocket server: {exc}") from None
        self._ws = ws
        try:
            metadata = self._receive(self.open_timeout_s, "its metadata")
            if not isinstance(metadata, Mapping):
                raise ProtocolError(f"the openpi server at {self.url} sent metadata of type {type(metadata).__name__}, not a map")
            if self._check is not None:
                self._check(metadata)
        except BaseException:
            self.close()
            raise
        self.metadata = metadata
        return metadata

    def infer(self, request: Mapping[str, Any]) -> Mapping[str, Any]:
        """One request, one answer (a map), or a typed error with the connection dropped."""
        if self._ws is None:
            self.connect()
        try:
            try:
                self._ws.send(codec.packb(request))
            except ConnectionClosed as exc:
                raise self._closed(exc) from None
            answer = self._receive(self.timeout_s, "an answer")
            if not isinstance(answer, Mapping):
                raise ProtocolError(f"the openpi server at {self.url} answered a {type(answer).__name__}, not a map")
            return answer
        except BaseException:
            self.close()
            raise

    def _receive(self, timeout: float, what: str) -> Any:
        try:
            message = self._ws.recv(timeout=timeout)
        except TimeoutError:
            raise WorkerTimeout(f"the openpi server at {self.url} sent no {what} within {timeout:g} s "
                                "(raise --openpi-timeout if it is just slow)") from None
        except ConnectionClosed as exc:
            raise self._closed(exc) from None
        if isinstance(message, str):
            raise remote_error(message)
        return codec.unpackb(message)

    def _closed(self, exc: ConnectionClosed) -> WorkerError:
        code = exc.rcvd.code if exc.rcvd is not None else "none"
        reason = exc.rcvd.reason if exc.rcvd is not None else ""
        return WorkerError(f"the openpi server at {self.url} closed the connection (code {code}{', ' + reason if reason else ''})")

    def close(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            ws.close()


__all__ = ["OpenpiClient", "remote_error", "MAX_MESSAGE_BYTES"]
