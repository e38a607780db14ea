"""The worker side: a ZeroMQ ROUTER serving one :class:`~wamcore.service.ModelService`.

One thread answers requests in arrival order, so the model is never entered twice at once
(most models hold one GPU stream). Every observation goes through ``ModelService.predict``,
which validates it against the adapter contract before the model sees it; anything that
goes wrong while answering becomes a typed error response and the worker keeps serving.

Sessions: ``hello`` opens one per client (the worker picks the id); ``predict`` and
``reset`` name it, so a stateful model (``uses_sessions``) keeps one state per client and a
reset touches only that client's. Sessions idle for longer than ``session_ttl_s`` are
dropped (default one hour, as RPent's ``DEFAULT_SESSION_TIMEOUT_S``,
``../shared/reference/rpent_rlinf_wam.md`` §2), and so is a session whose client says
``bye``.

Lifetime: :func:`watch_parent` makes a spawned worker exit when its parent dies, even by
SIGKILL: it reads stdin until EOF (the parent holds the pipe's write end; the kernel closes
it when the parent dies) and, on Linux, asks for SIGTERM at parent death
(``PR_SET_PDEATHSIG``), which also covers a parent whose forked children still hold the
pipe. Either way the worker stops serving, closes the model, and is forced out after a
short grace period if the model does not let go.
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import os
import signal
import socket
import sys
import threading
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, TextIO

import attrs
import zmq

from .. import __version__, wire
from ..contracts import PROTOCOL_VERSION, PredictRequest
from ..errors import ConfigurationError, ProtocolError
from ..service import ModelService
from . import protocol
from .protocol import AccessDenied, SessionNotFound
from . import local
from .local import LocalListener
from .shm import SharedSegments

log = logging.getLogger("wamcore.worker")

DEFAULT_SESSION_TTL_S = 3600.0
#: how long a predict request of a batching model waits for requests of other sessions
DEFAULT_BATCH_WINDOW_S = 0.002
_MAX_DRAIN = 64  # ZeroMQ messages taken per wake-up
#: how long a worker told to stop may take to close its model before it is forced out
STOP_GRACE_S = 2.0
_POLL_MS = 100
PARENT_PID_ENV = "WAMCORE_PARENT_PID"


class _Stop:
    """Process-wide stop request: set by signals and the parent watch, read by the loop."""

    event = threading.Event()
    reason: Optional[str] = None
    _forced = False

    @classmethod
    def request(cls, reason: str, *, force_after: Optional[float] = STOP_GRACE_S) -> None:
        if cls.reason is None:
            cls.reason = reason
            log.info("stopping: %s", reason)
        cls.event.set()
        if force_after is not None and not cls._forced:
            cls._forced = True
            timer = threading.Timer(force_after, os._exit, args=(3,))
            timer.daemon = True
            timer.start()


def _set_pdeathsig() -> None:
    """Linux: deliver SIGTERM to this process when the parent that spawned it dies."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not glibc: the stdin watch still works
        log.debug("prctl(PR_SET_PDEATHSIG) unavailable", exc_info=True)


def watch_parent() -> None:
    """Stop this process when its parent dies (stdin EOF, and PDEATHSIG on Linux)."""
    install_signal_handlers()
    _set_pdeathsig()
    expected = os.environ.get(PARENT_PID_ENV)
    if expected and expected.isdigit() and os.getppid() != int(expected):
        _Stop.request(f"parent {expected} died before the worker started watching it")

    def read_stdin() -> None:
        # the raw fd, not sys.stdin: a daemon thread blocked inside a buffered reader's
        # lock makes interpreter shutdown abort
        try:
            while os.read(0, 65536):
                pass
        except OSError:
            pass
        _Stop.request("parent closed the worker's stdin (parent exited or stopped the worker)")

    threading.Thread(target=read_stdin, name="wamcore-parent-watch", daemon=True).start()


def install_signal_handlers() -> None:
    """SIGTERM stops the worker cleanly (the model is closed) instead of killing it mid-call."""
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGTERM, lambda signum, frame: _Stop.request("SIGTERM"))


def stop_requested() -> bool:
    return _Stop.event.is_set()


def _predict_request(d: Any) -> PredictRequest:
    """A PredictRequest from the wire; any malformed shape of it is a ProtocolError."""
    try:
        return PredictRequest.from_wire(d)
    except ProtocolError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ProtocolError(f"malformed predict request: {type(exc).__name__}: {exc}") from exc


def check_bind(host: str, token: Optional[str]) -> None:
    """Loopback needs nothing; any other address needs a shared token."""
    if not protocol.is_loopback(host) and not token:
        raise ConfigurationError(
            f"refusing to serve on {host!r} without a token: anyone who can reach it could drive the model. "
            "Pass --token (or set WAMCORE_TOKEN) and give clients the same --am-token, or bind 127.0.0.1."
        )


def worker_details() -> dict:
    """Where this worker runs; reported in ModelInfo.details["worker"] and in the ready line."""
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "python": sys.executable,
        "cwd": os.getcwd(),
        "wamcore": __version__,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


@attrs.define
class _Session:
    last_used: float
    predictions: int = 0


@attrs.define
class _Pending:
    """A predict request waiting for its batch; ``reply(frames)`` answers it on its own
    transport (its ZeroMQ identity or its Unix connection)."""

    rid: Any
    session: str
    request: PredictRequest
    reply: Callable[[list], None]
    t0: float


_DEFERRED = object()  # a result that is sent later, when the request's batch runs


class WorkerServer:
    """Serves one ModelService on a ZeroMQ ROUTER socket bound at construction.

    ``port=0`` binds a port the kernel picks (no pick-then-bind race); :attr:`endpoint`
    tells which. A host other than loopback needs ``token``: clients must present it.
    """

    def __init__(
        self,
        service: ModelService,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: Optional[str] = None,
        session_ttl_s: float = DEFAULT_SESSION_TTL_S,
        aliases: tuple = (),
        batch_window_s: float = DEFAULT_BATCH_WINDOW_S,
        max_batch: Optional[int] = None,
    ):
        check_bind(host, token)
        self.service = service
        self.batch_window_s = max(0.0, float(batch_window_s))
        self.max_batch = service.max_batch if max_batch is None else max(1, min(int(max_batch), service.max_batch))
        self._pending: List[_Pending] = []
        self._pending_until = 0.0
        self._batches: Dict[int, int] = {}  # group size -> how many groups
        self.token = token or None
        self.session_ttl_s = float(session_ttl_s)
        self.instance = uuid.uuid4().hex
        self.info = attrs.evolve(service.info, details={**service.info.details, "worker": worker_details()})
        self._info_wire = self.info.to_wire()
        self._aliases = list(aliases)
        self._sessions: Dict[str, _Session] = {}
        self._started = time.monotonic()
        self._served: Dict[str, int] = {}
        self._errors = 0
        self._stopping = False
        self._shared = SharedSegments(enabled=protocol.is_loopback(host))
        self._local = LocalListener(self.instance) if protocol.is_loopback(host) and local.supported() else None
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 1000)  # let the answer to "shutdown" leave
        if ":" in host.strip("[]"):
            self._sock.setsockopt(zmq.IPV6, 1)
        try:
            self._sock.bind(protocol.bind_address(host, port))
        except zmq.ZMQError as exc:
            self.close()
            raise ConfigurationError(f"cannot bind {host}:{port}: {exc}") from exc
        self.endpoint = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.port = int(self.endpoint.rsplit(":", 1)[1])

    # ------------------------------------------------------------------ announcement

    def ready_record(self) -> dict:
        return {
            "event": "ready",
            "endpoint": self.endpoint,
            "port": self.port,
            "protocol": PROTOCOL_VERSION,
            "backend": self.info.backend,
            "platforms": [c.platform for c in self.info.contracts],
            "device": self.info.device,
            "token_required": self.token is not None,
            **worker_details(),
        }

    def announce(self, out: Optional[TextIO] = None, ready_file: Optional[str] = None) -> dict:
        """Print the ready line (one JSON object) and write it to ``ready_file`` atomically."""
        record = self.ready_record()
        line = json.dumps(record)
        if ready_file:
            tmp = f"{ready_file}.{os.getpid()}.tmp"
            with open(tmp, "w") as fh:
                fh.write(line + "\n")
            os.replace(tmp, ready_file)
        if out is not None:
            out.write(line + "\n")
            out.flush()
        return record

    # ------------------------------------------------------------------ loop

    @property
    def batching(self) -> bool:
        return self.batch_window_s > 0 and self.max_batch > 1

    def serve_forever(self) -> None:
        """Answer requests until ``shutdown``, a signal, or the parent watch stops us."""
        self._poller = poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        if self._local is not None:
            poller.register(self._local.sock, zmq.POLLIN)
        next_sweep = time.monotonic() + 1.0
        try:
            while not self._stopping and not _Stop.event.is_set():
                timeout = _POLL_MS
                if self._pending:  # wake up when the batch's window closes
                    timeout = max(0, math.ceil((self._pending_until - time.monotonic()) * 1000))
                for item, _ in poller.poll(timeout):
                    if item is self._sock:
                        self._handle_zmq()
                    elif self._local is not None and item == self._local.sock.fileno():  # raw sockets poll as fds
                        conn = self._local.accept()
                        if conn is not None:
                            poller.register(conn, zmq.POLLIN)
                    else:
                        self._handle_local(item)
                now = time.monotonic()
                if self._pending and now >= self._pending_until:
                    self._flush()
                if now >= next_sweep:
                    self._sweep(now)
                    next_sweep = now + 1.0
        finally:
            self._flush()  # requests already taken get their answers

    def _handle_zmq(self) -> None:
        # every queued message, so that requests that arrived together can share a batch
        for _ in range(_MAX_DRAIN):
            frames = self._sock.recv_multipart(copy=False)
            identity = frames[0]

            def reply(out: list, identity=identity) -> None:
                self._sock.send_multipart([identity, *out], copy=wire.frames_nbytes(out) < 64 * 1024)

            self._serve(frames[1:], reply)
            if not self._sock.get(zmq.EVENTS) & zmq.POLLIN:
                return

    def _handle_local(self, fd: int) -> None:
        conn = self._local.conns.get(fd)
        if conn is None:
            return
        try:
            body = local.recv_frames(conn)
        except (OSError, ProtocolError) as exc:  # the client went away or broke the framing
            self._drop_local(conn, exc)
            return

        def reply(out: list) -> None:
            try:
                local.send_frames(conn, out)
            except OSError as exc:
                self._drop_local(conn, exc)

        self._serve(body, reply)

    def _drop_local(self, conn, why: Exception) -> None:
        if self._local.conns.get(conn.fileno()) is conn:
            log.info("local connection closed: %s", why)
            self._poller.unregister(conn)
            self._local.drop(conn)

    def _serve(self, body: list, reply: Callable[[list], None]) -> None:
        """Answer one request through ``reply``: now, or when its batch runs. Every failure
        becomes a typed error answer."""
        rid: Any = None
        try:
            msg = wire.decode(body, shared=self._shared.resolve)
            if isinstance(msg, dict):
                rid = msg.get("id")
            protocol.check_envelope(msg, protocol.REQUEST)
            result = self._dispatch(msg, rid, reply)
            if result is _DEFERRED:
                return
            out = wire.encode(protocol.response(rid, self.instance, result))
        except Exception as exc:  # every failure goes back typed; the worker keeps serving
            out = self._error(rid, exc)
        reply(out)

    def _error(self, rid: Any, exc: Exception) -> list:
        self._errors += 1
        log.info("request %r failed: %s: %s", rid, type(exc).__name__, exc)
        return wire.encode(protocol.error_response(rid, self.instance, exc))

    def _dispatch(self, msg: dict, rid: Any, reply: Callable[[list], None]) -> Any:
        method = msg.get("method")
        if self.token is not None:
            given = msg.get("token")
            if not isinstance(given, str) or not hmac.compare_digest(given.encode(), self.token.encode()):
                raise AccessDenied("this worker requires a token; pass the worker's token with --am-token (or WAMCORE_TOKEN)")
        if method not in protocol.METHODS:
            raise ProtocolError(f"unknown method {method!r}; a worker answers {', '.join(protocol.METHODS)}")
        args = msg.get("args") or {}
        if not isinstance(args, dict):
            raise ProtocolError(f"args must be a map, got {type(args).__name__}")
        self._served[method] = self._served.get(method, 0) + 1
        session = None
        if method in protocol.SESSION_METHODS:
            sid = msg.get("session")
            session = self._sessions.get(sid) if isinstance(sid, str) else None
            if session is None:
                raise SessionNotFound(
                    f"session {sid!r} is not open on this worker (it restarted, or the session was idle for "
                    f"more than {self.session_ttl_s:g} s); open a new one with hello"
                )
            session.last_used = time.monotonic()
        if method == "hello":
            return self._hello()
        if method == "get_model_info":
            return self._info_wire
        if method == "predict":
            request = _predict_request(args.get("request"))
            session.predictions += 1
            self._enqueue(_Pending(rid, msg["session"], request, reply, time.perf_counter()))
            return _DEFERRED
        if method == "reset":
            self.service.reset(msg["session"])
            return {"ok": True}
        if method == "bye":
            self._drop(msg["session"], "client closed it")
            return {"ok": True}
        if method == "health":
            return self.health()
        # shutdown
        self._stopping = True
        return {"ok": True, "stopping": True}

    # ------------------------------------------------------------------ batching

    def _enqueue(self, item: _Pending) -> None:
        """Hold a predict request for a batch, or run it at once when waiting cannot help:
        batching off, the batch full, or every open session already in it."""
        if not self.batching:
            self._run([item])
            return
        if any(p.session == item.session for p in self._pending):  # one batch, one request per session
            self._flush()
        if not self._pending:
            self._pending_until = time.monotonic() + self.batch_window_s
        self._pending.append(item)
        if len(self._pending) >= min(self.max_batch, len(self._sessions)):
            self._flush()

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        if batch:
            self._batches[len(batch)] = self._batches.get(len(batch), 0) + 1
            self._run(batch)

    def _run(self, batch: List[_Pending]) -> None:
        """One native call for the whole batch (the model's single call for one request);
        each answer goes back to its own client."""
        if len(batch) == 1:
            try:
                results: list = [self.service.predict(batch[0].request, session=batch[0].session)]
            except Exception as exc:
                results = [exc]
        else:
            results = self.service.predict_batch([(p.request, p.session) for p in batch])
        for p, result in zip(batch, results):
            try:
                if isinstance(result, Exception):
                    raise result
                out = result.to_wire()
                out["timing"]["server_ms"] = round((time.perf_counter() - p.t0) * 1000.0, 3)  # to_wire copied it
                frames = wire.encode(protocol.response(p.rid, self.instance, out))
            except Exception as exc:
                frames = self._error(p.rid, exc)
            p.reply(frames)

    def _hello(self) -> dict:
        sid = uuid.uuid4().hex
        self._sessions[sid] = _Session(last_used=time.monotonic())
        return {
            "session": sid,
            "worker": self.instance,
            "protocol": PROTOCOL_VERSION,
            "info": self._info_wire,
            "aliases": self._aliases,
            "session_ttl_s": self.session_ttl_s,
            "local": None if self._local is None else self._local.address,
        }

    def health(self) -> dict:
        return {
            "status": "ok",
            "backend": self.info.backend,
            "device": self.info.device,
            "sessions": len(self._sessions),
            "uptime_s": round(time.monotonic() - self._started, 3),
            "served": dict(self._served),
            "errors": self._errors,
            "pid": os.getpid(),
            "batching": {
                "window_ms": self.batch_window_s * 1000.0,
                "max_batch": self.max_batch,
                "pending": len(self._pending),
                "batches": sum(self._batches.values()),
                "batched_requests": sum(k * v for k, v in self._batches.items()),
                "sizes": {str(k): v for k, v in sorted(self._batches.items())},  # msgpack map keys are strings
            },
        }

    def _drop(self, sid: str, why: str) -> None:
        if self._sessions.pop(sid, None) is None:
            return
        log.info("session %s dropped: %s", sid[:8], why)
        if self.service.uses_sessions:  # free that client's model state; others keep theirs
            try:
                self.service.reset(sid)
            except Exception:
                log.exception("resetting dropped session %s failed", sid[:8])

    def _sweep(self, now: float) -> None:
        for sid, s in list(self._sessions.items()):
            if now - s.last_used > self.session_ttl_s:
                self._drop(sid, f"idle for more than {self.session_ttl_s:g} s")

    def close(self) -> None:
        sock, self._sock = getattr(self, "_sock", None), None
        if sock is not None:
            sock.close()
        self._ctx.term()
        self._shared.close()
        if self._local is not None:
            self._local.close()


def tune_allocator() -> bool:
    """glibc: keep freed blocks of up to 64 MB instead of returning them to the kernel.

    Each request allocates a few fresh arrays of 0.1-1 MB; by default glibc maps and unmaps
    such blocks every time, and every page is faulted in again (~160 faults and 0.2-0.3 ms
    per LIBERO-sized message, ``../shared/reference/rpc_perf.md`` "glibc malloc A/B"). The
    worker process is ours, so it opts out; the caller's process is left alone."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
        return bool(libc.mallopt(M_MMAP_THRESHOLD, 64 << 20)) and bool(libc.mallopt(M_TRIM_THRESHOLD, 256 << 20))
    except (OSError, AttributeError):  # not glibc
        return False


def serve(
    service: ModelService,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    token: Optional[str] = None,
    session_ttl_s: float = DEFAULT_SESSION_TTL_S,
    ready_file: Optional[str] = None,
    out: Optional[TextIO] = None,
    aliases: tuple = (),
    batch_window_s: float = DEFAULT_BATCH_WINDOW_S,
    max_batch: Optional[int] = None,
) -> None:
    """Bind, announce readiness (stdout line and ``ready_file``), serve, then close the model."""
    install_signal_handlers()
    tune_allocator()
    server = WorkerServer(service, host=host, port=port, token=token, session_ttl_s=session_ttl_s, aliases=aliases,
                          batch_window_s=batch_window_s, max_batch=max_batch)
    try:
        record = server.announce(out if out is not None else sys.stdout, ready_file)
        log.info("serving %s on %s (device %s)", record["backend"], record["endpoint"], record["device"])
        server.serve_forever()
    finally:
        server.close()
        service.close()
        if ready_file:
            try:
                os.unlink(ready_file)
            except FileNotFoundError:
                pass


__all__ = ["WorkerServer", "serve", "check_bind", "watch_parent", "install_signal_handlers", "stop_requested", "worker_details",
           "DEFAULT_SESSION_TTL_S", "DEFAULT_BATCH_WINDOW_S", "PARENT_PID_ENV"]
