"""HTTP to SGLang with the standard library: timeouts, bounded retries, clear errors.

The retry policy follows RLinf's ``InferenceHTTPClient.post`` (RL#1487
``rlinf/utils/http_client.py``): HTTP
500/502/503/504 and a dropped connection are retried up to ``retries`` times, retry ``k``
sleeping ``k * backoff_s`` (linear); any other non-2xx fails at once with the status and
the start of the body. Two deliberate differences: a *refused* connection is not retried
(nothing listens there: the user must start SGLang or fix the URL, and waiting minutes to
say so helps nobody), and a timeout is not retried (the prediction's budget is spent).
``http.client`` never reads proxy variables, so requests go straight to the endpoint, as
RLinf arranges by stripping proxies.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from typing import Any, Callable, Optional
from urllib.parse import urlsplit

from wamcore.errors import ConfigurationError, ProtocolError, WorkerError, WorkerTimeout

from . import codec

MSGPACK = "application/msgpack"
RETRY_STATUSES = frozenset({500, 502, 503, 504})
_EXCERPT = 500


def _excerpt(body: bytes) -> str:
    text = body[:_EXCERPT].decode("utf-8", errors="replace").strip()
    return text or "(empty body)"


class SGLangClient:
    """Talks to one SGLang server. ``sleep`` is injectable so tests can record backoffs."""

    def __init__(
        self,
        endpoint: str,
        *,
        timeout_s: float = 120.0,
        retries: int = 5,
        backoff_s: float = 1.0,
        sleep: Callable[[float], None] = time.sleep,
    ):
        url = endpoint if "://" in endpoint else "http://" + endpoint
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigurationError(f"--cosmos3-sglang-endpoint must be http(s)://HOST:PORT, got {endpoint!r}")
        try:
            port = parts.port
        except ValueError:
            raise ConfigurationError(f"--cosmos3-sglang-endpoint has a bad port: {endpoint!r}") from None
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.url = f"{self.scheme}://{self.host}:{self.port}{self.prefix}"
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)
        self.backoff_s = float(backoff_s)
        self._sleep = sleep

    # ------------------------------------------------------------------ public

    def post_msgpack(self, path: str, body: Any) -> Any:
        """POST ``body`` as msgpack, asking for msgpack back; the decoded answer."""
        headers = {"Content-Type": MSGPACK, "Accept": MSGPACK}
        status, ctype, data = self._send("POST", path, codec.pack(body), headers, self.timeout_s, self.retries)
        if "msgpack" not in ctype:
            raise ProtocolError(
                f"SGLang answered POST {self.url}{path} with Content-Type {ctype or 'none'!r}, not msgpack: {_excerpt(data)}"
            )
        return codec.unpack(data)

    def get_json(self, path: str, *, timeout_s: Optional[float] = None, retries: Optional[int] = None) -> Any:
        """GET a JSON document (identity and health endpoints)."""
        timeout = self.timeout_s if timeout_s is None else timeout_s
        _, _, data = self._send(
            "GET", path, None, {"Accept": "application/json"}, timeout, self.retries if retries is None else retries
        )
        try:
            return json.loads(data)
        except ValueError:
            raise ProtocolError(f"SGLang's answer to GET {self.url}{path} is not JSON: {_excerpt(data)}") from None

    # ------------------------------------------------------------------ internals

    def _send(self, method: str, path: str, body: Optional[bytes], headers: dict, timeout: float, retries: int):
        url = f"{self.url}{path}"
        failures = []
        for attempt in range(retries + 1):
            if attempt:
                self._sleep(self.backoff_s * attempt)
            try:
                status, ctype, data = self._once(method, path, body, headers, timeout)
            except ConnectionRefusedError:
                raise WorkerError(
                    f"SGLang is not reachable at {self.url}: connection refused. Start the SGLang server "
                    "(e.g. `sglang serve --model-path <Cosmos3 checkpoint> --port 30000`) or point "
                    "--cosmos3-sglang-endpoint at it."
                ) from None
            except socket.gaierror as exc:
                raise WorkerError(f"SGLang host {self.host!r} cannot be resolved ({exc}); check --cosmos3-sglang-endpoint") from None
            except TimeoutError:
                raise WorkerTimeout(
                    f"SGLang did not answer {method} {url} within {timeout:g} s "
                    "(raise --cosmos3-http-timeout if the server is just slow)"
                ) from None
            except (OSError, http.client.HTTPException) as exc:  # reset, dropped, truncated
                failures.append(f"{type(exc).__name__}: {exc}")
                continue
            if 200 <= status < 300:
                return status, ctype, data
            if status in RETRY_STATUSES:
                failures.append(f"HTTP {status}: {_excerpt(data)}")
                continue
            rejected = ProtocolError(f"SGLang rejected {method} {url} with HTTP {status}: {_excerpt(data)}")
            rejected.status = status
            raise rejected
        raise WorkerError(
            f"SGLang failed {method} {url} {len(failures)} time(s) "
            f"({retries} retries, --cosmos3-http-retries); last: {failures[-1]}"
        )

    def _once(self, method: str, path: str, body: Optional[bytes], headers: dict, timeout: float):
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=timeout)
        try:
            conn.request(method, self.prefix + path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, (resp.getheader("Content-Type") or "").lower(), data
        finally:
            conn.close()


__all__ = ["SGLangClient", "MSGPACK", "RETRY_STATUSES"]
