"""A stand-in SGLang server for the Cosmos3 tests: real sockets, the documented protocol.

It implements what a Cosmos3 action server exposes (sgl-project/sglang,
``python/sglang/multimodal_gen/``; docs/models/cosmos3.md): ``POST /v1/actions/generations``
with a msgpack body in and a msgpack envelope out,
numpy arrays packed as SGLang packs them (a map with *bin* keys ``__ndarray__``, ``data``,
``dtype``, ``shape``; written here independently of the plugin's decoder), SGLang's request
validation and status codes (400 ``{"detail"}`` JSON for a bad request), and the identity
endpoints ``GET /v1/models`` and ``GET /v1/actions/metadata``. It records every request so
the tests can check exactly what the adapter sent, and it can be scripted to answer a path
with an error status, a delay, or a dropped connection. The model itself (what SGLang
would compute on a GPU) is the only thing replaced: ``values_fn`` returns the action
values, after the request was checked.
"""

from __future__ import annotations

import base64
import io
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import msgpack
import numpy as np
import pytest
from PIL import Image

SERVED_ID = "nvidia/Cosmos3-Nano-Policy-LIBERO"
MODEL_PATH = "/models/cosmos3-nano-libero-diffusers"

#: cosmos-framework's libero_native_frame_wise_relative_rot6d.json, as documented in
#: sglang_cosmos3.md §7.2 (global_raw quantiles verbatim; 'global' has identity rot6d dims)
GLOBAL_RAW_Q01 = [-0.723214, -0.808929, -0.9375, 0.934955, -0.223431, -0.189878, -0.334735, 0.938516, -0.107736, 0.0]
GLOBAL_RAW_Q99 = [0.9375, 0.870536, 0.9375, 1.0, 0.331, 0.163153, 0.226216, 1.0, 0.127158, 1.0]


def libero_stats_document() -> dict:
    q01 = list(GLOBAL_RAW_Q01)
    q99 = list(GLOBAL_RAW_Q99)
    g01 = q01[:3] + [-1.0] * 6 + q01[9:]
    g99 = q99[:3] + [1.0] * 6 + q99[9:]
    block = lambda lo, hi: {"q01": lo, "q99": hi, "min": lo, "max": hi, "mean": [0.0] * 10, "std": [1.0] * 10}
    return {
        "metadata": {"embodiment_type": "libero", "rotation_format": "6d", "action_dim": 10, "chunk_length": 16},
        "global": block(g01, g99),
        "global_raw": block(q01, q99),
    }


@pytest.fixture
def stats_file(tmp_path):
    path = tmp_path / "libero_native_frame_wise_relative_rot6d.json"
    path.write_text(json.dumps(libero_stats_document()))
    return str(path)


def sglang_pack(obj) -> bytes:
    """SGLang's pack_msgpack (protocol.py pack_numpy_payload), as documented."""

    def default(o):
        if isinstance(o, np.ndarray):
            return {b"__ndarray__": True, b"data": o.tobytes(), b"dtype": o.dtype.str, b"shape": list(o.shape)}
        if isinstance(o, np.generic):
            return {b"__npgeneric__": True, b"data": o.item(), b"dtype": o.dtype.str}
        raise TypeError(type(o))

    return msgpack.packb(obj, default=default, use_bin_type=True)


def decode_data_uri(uri: str) -> np.ndarray:
    head, _, b64 = uri.partition(",")
    assert head == "data:image/png;base64", head
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(b64))).convert("RGB"))


class Recorded:
    def __init__(self, method, path, headers, raw, body=None, image=None):
        self.method, self.path, self.headers, self.raw, self.body, self.image = method, path, headers, raw, body, image


class FakeSGLang:
    """A Cosmos3 action server on 127.0.0.1 with scripted model output and faults."""

    def __init__(self, served_id=SERVED_ID, model_path=MODEL_PATH, policy_family="cosmos3"):
        self.served_id, self.model_path, self.policy_family = served_id, model_path, policy_family
        self.requests = []
        self.script = {}  # path -> list of ("status", code, body, ctype) | ("sleep", s) | ("drop",)
        self.values_fn = lambda body: np.zeros((body["parameters"]["num_frames"] - 1, body["parameters"]["raw_action_dim"]), np.float32)
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                fake._handle(self, "GET")

            def do_POST(self):
                fake._handle(self, "POST")

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                pass  # a client that gave up (time-out tests) makes the late answer fail: expected

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def posts(self):
        return [r for r in self.requests if r.method == "POST"]

    # ------------------------------------------------------------ server side

    def _send(self, h, status, body: bytes, ctype: str):
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _json(self, h, status, obj):
        self._send(h, status, json.dumps(obj).encode(), "application/json")

    def _handle(self, h, method):
        raw = h.rfile.read(int(h.headers.get("Content-Length") or 0)) if method == "POST" else b""
        rec = Recorded(method, h.path, {k.lower(): v for k, v in h.headers.items()}, raw)
        with self._lock:
            self.requests.append(rec)
            steps = self.script.get(h.path)
            step = steps.pop(0) if steps else None
        if step is not None:
            if step[0] == "status":
                _, code, body, ctype = step
                return self._send(h, code, body, ctype)
            if step[0] == "sleep":
                time.sleep(step[1])
            elif step[0] == "drop":
                h.close_connection = True
                return
        if method == "GET" and h.path == "/v1/models":
            card = {"id": self.served_id, "object": "model", "owned_by": "sglang", "root": self.model_path,
                    "task_type": "TI2V", "pipeline_class": "Cosmos3OmniDiffusersPipeline"}
            return self._json(h, 200, {"object": "list", "data": [card]})
        if method == "GET" and h.path == "/v1/actions/metadata" and self.policy_family is not None:
            return self._json(h, 200, {
                "object": "action.metadata", "model": self.served_id, "model_path": self.model_path,
                "policy_family": self.policy_family, "output": {"action_horizon": 16, "action_dim": None, "dtype": "float32"},
                "capabilities": {"max_batch_size": 1, "batched_action_modes": ["policy"]},
            })
        if method == "POST" and h.path == "/v1/actions/generations":
            return self._generate(h, rec)
        return self._json(h, 404, {"detail": "Not Found"})

    def _generate(self, h, rec):
        ctype = rec.headers.get("content-type", "")
        if "msgpack" not in ctype:
            return self._json(h, 400, {"detail": f"fake SGLang expects msgpack in these tests, got {ctype!r}"})
        body = msgpack.unpackb(rec.raw, raw=False)
        rec.body = body
        problem = self._validate(body)
        if problem:
            return self._json(h, 400, {"detail": problem})
        try:
            rec.image = decode_data_uri(body["input"]["input_reference"])
        except Exception:  # decoded on SGLang's GPU worker: a pipeline error, a bare 500 (§3.2)
            return self._send(h, 500, b"Internal Server Error", "text/plain; charset=utf-8")
        values = np.asarray(self.values_fn(body), dtype=np.float32)
        params = body["parameters"]
        envelope = {
            "id": f"act_{len(self.requests):032x}",
            "object": "action.generation",
            "created": int(time.time()),
            "model": self.served_id,
            "data": [{"index": 0, "input_index": 0, "candidate_index": 0, "action": {
                "type": "continuous", "dtype": "float32", "shape": list(values.shape), "values": values,
                "action_mode": "policy", "raw_action_dim": params["raw_action_dim"]}}],
            "usage": {"batch_size": 1, "action_horizon": values.shape[0], "action_dim": values.shape[-1],
                      "denoise_steps": params["num_inference_steps"], "prefix_cache_hit": False},
        }
        return self._send(h, 200, sglang_pack(envelope), "application/msgpack")

    @staticmethod
    def _validate(body):
        """SGLang 0.5.19+ build_cosmos3_action_sampling_params checks (§2.3-2.4)."""
        inp, params = body.get("input"), body.get("parameters", {})
        if not isinstance(inp, dict):
            return "no input"
        if not isinstance(inp.get("prompt") or inp.get("task"), str):
            return "prompt must be a string"
        if not isinstance(inp.get("input_reference"), str):
            return "policy input requires an observation image"
        if params.get("action_mode", "policy") != "policy":
            return "action_mode must be policy here"
        if "domain_name" not in params and "domain_id" not in params:
            return "Cosmos3 action requests require domain_name or domain_id"
        n = params.get("num_frames", 17)
        if n <= 1 or (n - 1) % 4:
            return "num_frames must be 4k+1"
        if "raw_action_dim" not in params:
            return "raw_action_dim is required for libero"
        return None


@pytest.fixture
def make_sglang():
    """Factory of started fake servers (keyword arguments of FakeSGLang); all stopped after."""
    started = []

    def make(**kwargs):
        fake = FakeSGLang(**kwargs)
        fake.thread.start()
        started.append(fake)
        return fake

    yield make
    for fake in started:
        fake.server.shutdown()
        fake.server.server_close()


@pytest.fixture
def sglang(make_sglang):
    return make_sglang()


@pytest.fixture
def decode_png():
    return decode_data_uri


@pytest.fixture
def stats_document():
    return libero_stats_document()


@pytest.fixture
def closed_port():
    """A port on which nothing listens: held bound but not listening for the test, so that no
    one else can take it and a connection to it is refused."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]
