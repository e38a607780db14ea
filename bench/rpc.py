"""Predict round trip of a wamcore worker against raw TCP and openpi's websocket protocol.

Run from the repository root, in a venv with wamcore, ``wam-openpi`` (openpi's serving
protocol, and ``websockets``) and ``openpi-client`` (installed ``--no-deps``: it pins numpy<2
and only its websocket client and msgpack_numpy are used here)::

    python -m venv .venv-bench
    .venv-bench/bin/pip install -e . -e plugins/libero -e plugins/robotwin -e plugins/openpi typing_extensions
    .venv-bench/bin/pip install --no-deps openpi-client
    .venv-bench/bin/python bench/rpc.py --rounds 3 --n 2000 --out runs/bench-rpc.json

Five transports, each with a fake model that answers a precomputed chunk at once, so the
numbers are transport + serialization + (for wamcore) validation, nothing else:

* ``wamcore``: ``RemoteModel.predict`` against a real ``wam serve`` worker spawned through
  ``wamcore.runtime`` (this file is its plugin module: the worker imports it as ``rpc``
  from ``bench/``). The full path: contract selection, server-side observation validation,
  adapter encode/decode, client-side action validation;
* ``zmq_bare``: the same ZeroMQ DEALER/ROUTER multipart transport with none of wamcore's
  code (header + one frame per array, ``copy=False``): what the transport alone costs, so
  the difference to ``wamcore`` is wamcore's own work (envelope, codec, validation);
* ``raw_tcp``: the floor of a Python kernel-socket path: one blocking TCP connection,
  ``sendmsg`` of [length prefix, msgpack header, array buffers] with no user-space copy,
  ``recv_into`` a reused buffer;
* ``ws_openpi``: openpi's own ``WebsocketClientPolicy`` against a server that speaks its
  protocol (metadata on connect, then msgpack_numpy request/response), written here;
* ``wamcore_openpi``: the same openpi client against a real ``wam serve --protocol openpi``
  worker (docs/openpi.md): strict decoding, the generic layout, the same validation and
  adapter as ``wamcore``, openpi's answer layout.

A second mode times a *real* model end to end (e.g. the reference WAM on a GPU), with
observations from the platform's own env, through any deployment mode::

    python bench/rpc.py latency --platform pointmass --am-backend pointmass-wam \
        --am-python /envs/model/bin/python --am-cuda-device 0 --n 300

Payloads: LIBERO-sized (2 x 256x256x3 uint8 + 9 floats -> 16x7, a Cosmos Policy request) and
RoboTwin-sized (3 x 240x320x3 uint8 + 14 floats -> 64x14). Each case runs in a fresh
client process against a fresh server process; cases are interleaved and repeated for
``--rounds`` rounds (the host is shared, so one round proves little); the first answer of
every case is checked for content. Ratios are computed per round, then the median taken.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

import msgpack
import numpy as np

from wamcore import (
    Adapter,
    AdapterContract,
    Capabilities,
    ControlSpec,
    ModelSpec,
    Observation,
    ObservationSpec,
    PlatformSpec,
    Prediction,
    hookimpl,
)

HERE = Path(__file__).resolve().parent
PAYLOADS = {
    "libero": {"cameras": {"primary": (256, 256), "wrist": (256, 256)}, "state": 9, "chunk": 16, "dim": 7},
    "robotwin": {"cameras": {"high": (240, 320), "left_wrist": (240, 320), "right_wrist": (240, 320)},
                 "state": 14, "chunk": 64, "dim": 14},
}
TRANSPORTS = ("wamcore", "zmq_bare", "raw_tcp", "ws_openpi", "wamcore_openpi")
PROMPT = "put the black bowl on the plate"


# ----------------------------------------------------------------------------- payloads


def observation(payload: str) -> Observation:
    p = PAYLOADS[payload]
    rng = np.random.default_rng(0)
    images = {role: rng.integers(0, 256, (*hw, 3), dtype=np.uint8) for role, hw in p["cameras"].items()}
    return Observation(images=images, state={"state": rng.standard_normal(p["state"]).astype(np.float32)},
                       instruction=PROMPT)


def actions(payload: str) -> np.ndarray:
    p = PAYLOADS[payload]
    return np.random.default_rng(1).uniform(-1, 1, (p["chunk"], p["dim"])).astype(np.float32)


def checksum(arrays) -> float:
    return float(sum(np.sum(a, dtype=np.float64) for a in arrays))


def expected_checksum(payload: str) -> float:
    obs = observation(payload)
    return checksum([*obs.images.values(), *obs.state.values()])


def flat_obs(payload: str) -> dict:
    """The same observation as a flat dict (what openpi clients and the raw path send)."""
    obs = observation(payload)
    return {**{f"observation/{k}": v for k, v in obs.images.items()}, "observation/state": obs.state["state"],
            "prompt": PROMPT}


def generic_obs(payload: str) -> dict:
    """The same observation in the generic openpi layout of ``wam serve --protocol openpi``."""
    obs = observation(payload)
    return {**{f"observation/images/{k}": v for k, v in obs.images.items()},
            "observation/state/state": obs.state["state"], "prompt": PROMPT}


def _bench_plugin_env(*modules: str) -> None:
    """A worker started from here imports this file as its plugin module ``rpc`` (and ``modules``)."""
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    os.environ["WAMCORE_PLUGIN_MODULES"] = ",".join(("rpc", *modules))
    os.environ["WAMCORE_LOAD_PLUGINS"] = ""


# ----------------------------------------------------------------------------- wamcore plugin (worker side)


def control(payload: str) -> ControlSpec:
    p = PAYLOADS[payload]
    return ControlSpec(action_space=f"bench.{payload}.v1", action_names=[f"a{i}" for i in range(p["dim"])],
                       chunk_max=p["chunk"], low=[-1.0] * p["dim"], high=[1.0] * p["dim"])


def obs_spec(payload: str) -> ObservationSpec:
    p = PAYLOADS[payload]
    return ObservationSpec(cameras=p["cameras"], state={"state": p["state"]})


class EchoModel:
    """Answers a precomputed chunk; on the first call, the checksum of what it received."""

    def __init__(self):
        self.calls = 0
        self.chunks = {payload: actions(payload) for payload in PAYLOADS}

    def predict_native(self, native, request):
        self.calls += 1
        info = {"checksum": checksum(native[1])} if self.calls == 1 else {}
        return self.chunks[native[0]], info


def _encode(payload):
    def encode(request):
        obs = request.observation
        return payload, [*obs.images.values(), *obs.state.values()]
    return encode


def _decode(native, request):
    chunk, info = native
    return Prediction(actions=chunk, info=info)


@hookimpl
def wam_register_platforms(register):
    for payload in PAYLOADS:
        register(PlatformSpec(name=f"bench-{payload}", observation=obs_spec(payload), control=control(payload),
                              make_env=lambda: None))


@hookimpl
def wam_register_models(register):
    adapters = []
    for payload, p in PAYLOADS.items():
        contract = AdapterContract(platform=f"bench-{payload}", action_space=f"bench.{payload}.v1", action_dim=p["dim"],
                                   cameras=p["cameras"], state={"state": p["state"]}, chunk_size=p["chunk"])
        adapters.append(Adapter(contract=contract, encode=_encode(payload), decode=_decode))
    register(ModelSpec(name="bench-echo", load=lambda config: EchoModel(), adapters=adapters,
                       capabilities=Capabilities(actions=True), timeout_s=10.0))


# ----------------------------------------------------------------------------- raw TCP


def _raw_pack(obj: dict) -> list:
    """[prefix, header, buffers...]: header = msgpack of {key: str | [dtype, shape, nbytes]}."""
    header, bufs = {}, []
    for k, v in obj.items():
        if isinstance(v, np.ndarray):
            header[k] = [v.dtype.str, list(v.shape), v.nbytes]
            bufs.append(memoryview(np.ascontiguousarray(v)).cast("B"))
        else:
            header[k] = v
    h = msgpack.packb(header)
    return [struct.pack("<II", len(h), sum(b.nbytes for b in bufs)), h, *bufs]


def _raw_unpack(header: bytes, body: memoryview) -> dict:
    out, offset = {}, 0
    for k, v in msgpack.unpackb(header).items():
        if isinstance(v, list):
            dtype, shape, n = v
            out[k] = np.frombuffer(body[offset:offset + n], dtype=dtype).reshape(shape)
            offset += n
        else:
            out[k] = v
    return out


class _RawConn:
    def __init__(self, sock: socket.socket):
        self.sock = sock
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray(4 << 20)
        self.prefix = bytearray(8)

    def _fill(self, view: memoryview) -> None:
        got = 0
        while got < len(view):
            n = self.sock.recv_into(view[got:])
            if n == 0:
                raise ConnectionError("peer closed")
            got += n

    def recv(self) -> dict:
        self._fill(memoryview(self.prefix))
        hlen, blen = struct.unpack("<II", self.prefix)
        view = memoryview(self.buf)[:hlen + blen]
        self._fill(view)
        return _raw_unpack(bytes(view[:hlen]), view[hlen:])

    def send(self, obj: dict) -> None:
        parts = _raw_pack(obj)
        total = sum(memoryview(p).nbytes for p in parts)
        sent = self.sock.sendmsg(parts)
        if sent < total:  # finish a short write
            rest = b"".join(bytes(p) for p in parts)[sent:]
            self.sock.sendall(rest)


def serve_raw(payload: str, port_file: str) -> None:
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    Path(port_file).write_text(str(lsock.getsockname()[1]))
    conn = _RawConn(lsock.accept()[0])
    model = EchoModel()
    try:
        while True:
            req = conn.recv()
            chunk, info = model.predict_native(
                (payload, [v for k, v in req.items() if isinstance(v, np.ndarray)]), None)
            conn.send({"actions": chunk, **info})
    except ConnectionError:
        pass


class RawClient:
    def __init__(self, port: int):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.settimeout(None)  # blocking calls, as in the floor measurement; the kernel bounds recv:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 10, 0))
        self.conn = _RawConn(sock)

    def infer(self, obs: dict) -> dict:
        self.conn.send(obs)
        return self.conn.recv()

    def close(self):
        self.conn.sock.close()


# ----------------------------------------------------------------------------- bare ZeroMQ


def serve_zmq(payload: str, port_file: str) -> None:
    import zmq

    sock = zmq.Context().socket(zmq.ROUTER)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    Path(port_file).write_text(str(port))
    model = EchoModel()
    while True:
        frames = sock.recv_multipart(copy=False)
        header = msgpack.unpackb(frames[1])
        arrays = [np.frombuffer(f, dtype=dt).reshape(shape) for f, (dt, shape) in zip(frames[2:], header["arrays"])]
        chunk, info = model.predict_native((payload, arrays), None)
        sock.send_multipart([frames[0], msgpack.packb({"dtype": chunk.dtype.str, "shape": chunk.shape, **info}),
                             chunk], copy=False)


class ZmqClient:
    def __init__(self, port: int):
        import zmq

        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.RCVTIMEO, 10000)  # a lost server fails the case, never hangs it
        self.sock.connect(f"tcp://127.0.0.1:{port}")

    def infer(self, obs: dict) -> dict:
        arrays = [v for v in obs.values() if isinstance(v, np.ndarray)]
        header = {"arrays": [[a.dtype.str, a.shape] for a in arrays], "prompt": obs["prompt"]}
        self.sock.send_multipart([msgpack.packb(header), *arrays], copy=False)
        head, body = self.sock.recv_multipart(copy=False)
        meta = msgpack.unpackb(head)
        return {"actions": np.frombuffer(body, dtype=meta["dtype"]).reshape(meta["shape"]), **meta}

    def close(self):
        self.sock.close(linger=0)
        self.ctx.term()


# ----------------------------------------------------------------------------- openpi websocket


def serve_ws(payload: str, port_file: str) -> None:
    """openpi's WebsocketPolicyServer protocol: metadata first, then msgpack_numpy request/response."""
    import asyncio

    from openpi_client import msgpack_numpy
    from websockets.asyncio.server import serve

    model = EchoModel()
    packer = msgpack_numpy.Packer()

    async def handler(ws):
        await ws.send(packer.pack({"payload": payload}))
        async for message in ws:
            t0 = time.monotonic()
            obs = msgpack_numpy.unpackb(message)
            chunk, info = model.predict_native(
                (payload, [v for k, v in obs.items() if isinstance(v, np.ndarray)]), None)
            await ws.send(packer.pack({"actions": chunk, **info, "server_timing": {"infer_ms": (time.monotonic() - t0) * 1e3}}))

    async def main():
        async with serve(handler, "127.0.0.1", 0, compression=None, max_size=None) as server:
            Path(port_file).write_text(str(server.sockets[0].getsockname()[1]))
            await asyncio.get_running_loop().create_future()

    asyncio.run(main())


# ----------------------------------------------------------------------------- one case (client process)


def _wait_port(port_file: Path, proc: subprocess.Popen) -> int:
    while not port_file.exists() or not port_file.read_text():
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        time.sleep(0.01)
    return int(port_file.read_text())


def run_case(transport: str, payload: str, n: int, warmup: int, tmp: Path) -> dict:
    """Time ``n`` sequential predictions; returns latencies in ms and the first answer's check."""
    server = None
    if transport == "wamcore":
        from wamcore.contracts import PredictRequest
        from wamcore.registry import Registry
        from wamcore.runtime import WorkerConfig, open_model

        _bench_plugin_env()
        reg = Registry(entry_points=False)
        reg.register(sys.modules[__name__], name="bench")
        config = WorkerConfig.from_options(platform=f"bench-{payload}", am_backend="bench-echo",
                                           am_python=sys.executable, log_dir=str(tmp))
        model = open_model(config, reg.platform(f"bench-{payload}"), registry=reg)
        request = PredictRequest(observation(payload))

        def call():
            pred = model.predict(request)
            return pred.actions, pred.info.get("checksum")

        close = model.close
    else:
        port_file = tmp / f"{transport}-{payload}-{os.getpid()}.port"  # never a previous round's
        if transport == "wamcore_openpi":
            _bench_plugin_env("wam_openpi.plugin")  # the serving protocol openpi
            ready = tmp / f"{transport}-{payload}-{os.getpid()}.ready"
            server = subprocess.Popen([sys.executable, "-m", "wamcore", "serve", "--protocol", "openpi", "--am-backend",
                                       "bench-echo", "--platform", f"bench-{payload}", "--ready-file", str(ready)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            while not ready.exists():
                if server.poll() is not None:
                    raise RuntimeError(f"wam serve exited with {server.returncode}")
                time.sleep(0.01)
            port_file.write_text(str(json.loads(ready.read_text())["port"]))
        else:
            server = subprocess.Popen([sys.executable, __file__, "_serve", transport, payload, str(port_file)])
        port = _wait_port(port_file, server)
        if transport == "raw_tcp":
            client = RawClient(port)
        elif transport == "zmq_bare":
            client = ZmqClient(port)
        else:
            from openpi_client.websocket_client_policy import WebsocketClientPolicy

            client = WebsocketClientPolicy("127.0.0.1", port)
        obs = generic_obs(payload) if transport == "wamcore_openpi" else flat_obs(payload)

        def call():
            out = client.infer(obs)
            return out["actions"], out.get("info", out).get("checksum")

        close = getattr(client, "close", lambda: None)
        if transport in ("ws_openpi", "wamcore_openpi"):
            close = client._ws.close
    try:
        first, first_sum = call()
        ok = bool(np.array_equal(first, actions(payload)) and np.isclose(first_sum, expected_checksum(payload)))
        for _ in range(warmup):
            call()
        lat = []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            call()
            lat.append((time.perf_counter_ns() - t0) / 1e6)
    finally:
        close()
        if server is not None:
            server.terminate()
            server.wait()
    return {"transport": transport, "payload": payload, "n": n, "checked": ok,
            "p50": float(np.percentile(lat, 50)), "p99": float(np.percentile(lat, 99)),
            "mean": float(np.mean(lat))}


# ----------------------------------------------------------------------------- orchestration


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2000, help="timed requests per case")
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--payloads", default="libero,robotwin")
    ap.add_argument("--transports", default=",".join(TRANSPORTS))
    ap.add_argument("--out", default=None, help="write every case and the summary as JSON")
    args = ap.parse_args(argv)
    import tempfile

    payloads, transports = args.payloads.split(","), args.transports.split(",")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for payload in payloads:
                order = transports[r % len(transports):] + transports[:r % len(transports)]  # rotate
                for transport in order:
                    out = subprocess.run([sys.executable, __file__, "_case", transport, payload, str(args.n),
                                          str(args.warmup), tmp], capture_output=True, text=True, check=False)
                    if out.returncode != 0:
                        sys.exit(f"case {transport}/{payload} failed:\n{out.stderr}")
                    row = json.loads(out.stdout.strip().splitlines()[-1])
                    row["round"] = r
                    rows.append(row)
                    print(f"round {r} {payload:9s} {transport:10s} p50 {row['p50']:.3f} ms  p99 {row['p99']:.3f} ms"
                          f"  checked={row['checked']}", flush=True)
    summary = summarize(rows, payloads, transports)
    print()
    print(table(summary))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"cases": rows, "summary": summary}, indent=2) + "\n")
    if not all(r["checked"] for r in rows):
        sys.exit("a case answered wrong content")


def summarize(rows, payloads, transports) -> dict:
    out = {}
    for payload in payloads:
        by = {t: [r for r in rows if r["payload"] == payload and r["transport"] == t] for t in transports}
        s = {t: {"p50": statistics.median(r["p50"] for r in rs), "p99": statistics.median(r["p99"] for r in rs)}
             for t, rs in by.items() if rs}
        rounds = sorted({r["round"] for r in rows})

        def ratio(a, b, q="p50"):
            vals = []
            for rd in rounds:
                x = [r[q] for r in by.get(a, []) if r["round"] == rd]
                y = [r[q] for r in by.get(b, []) if r["round"] == rd]
                if x and y:
                    vals.append(x[0] / y[0])
            return statistics.median(vals) if vals else None

        s["ratios"] = {
            "wamcore_over_raw_tcp_p50": ratio("wamcore", "raw_tcp"),
            "zmq_bare_over_raw_tcp_p50": ratio("zmq_bare", "raw_tcp"),
            "ws_openpi_over_wamcore_p50": ratio("ws_openpi", "wamcore"),
            "wamcore_over_raw_tcp_p99": ratio("wamcore", "raw_tcp", "p99"),
            "ws_openpi_over_wamcore_p99": ratio("ws_openpi", "wamcore", "p99"),
            "wamcore_openpi_over_ws_openpi_p50": ratio("wamcore_openpi", "ws_openpi"),
            "wamcore_openpi_over_wamcore_p50": ratio("wamcore_openpi", "wamcore"),
        }
        out[payload] = s
    return out


def table(summary: dict) -> str:
    lines = ["| payload | transport | p50 ms | p99 ms |", "|---|---|---|---|"]
    for payload, s in summary.items():
        for t, v in s.items():
            if t != "ratios":
                lines.append(f"| {payload} | {t} | {v['p50']:.3f} | {v['p99']:.3f} |")
    lines += ["", "| payload | wamcore / raw TCP (p50) | bare ZeroMQ / raw TCP (p50) | websocket / wamcore (p50) "
              "| wamcore / raw TCP (p99) | websocket / wamcore (p99) | wamcore_openpi / websocket (p50) "
              "| wamcore_openpi / wamcore (p50) |", "|---|---|---|---|---|---|---|---|"]
    fmt = lambda x: "n/a" if x is None else f"{x:.2f}x"  # noqa: E731
    for payload, s in summary.items():
        r = s["ratios"]
        lines.append(f"| {payload} | {fmt(r['wamcore_over_raw_tcp_p50'])} | {fmt(r['zmq_bare_over_raw_tcp_p50'])} | "
                     f"{fmt(r['ws_openpi_over_wamcore_p50'])} | "
                     f"{fmt(r['wamcore_over_raw_tcp_p99'])} | {fmt(r['ws_openpi_over_wamcore_p99'])} | "
                     f"{fmt(r['wamcore_openpi_over_ws_openpi_p50'])} | {fmt(r['wamcore_openpi_over_wamcore_p50'])} |")
    return "\n".join(lines)


def latency(argv) -> None:
    """p50/p99 of ``predict`` for a real model, in-process, spawned or borrowed."""
    from wamcore.contracts import PredictRequest
    from wamcore.registry import default_registry
    from wamcore.runtime import WorkerConfig, open_model

    ap = argparse.ArgumentParser(prog="bench/rpc.py latency")
    ap.add_argument("--platform", required=True)
    ap.add_argument("--am-backend")
    ap.add_argument("--am-python")
    ap.add_argument("--am-endpoint")
    ap.add_argument("--am-cuda-device")
    ap.add_argument("--cuda-device")
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    args = ap.parse_args(argv)
    reg = default_registry()
    platform = reg.platform(args.platform)
    config = WorkerConfig.from_options(platform=platform.name, am_backend=args.am_backend, am_python=args.am_python,
                                       am_endpoint=args.am_endpoint, am_cuda_device=args.am_cuda_device,
                                       cuda_device=args.cuda_device)
    env = platform.create()
    with open_model(config, platform, registry=reg) as model:
        obs = env.reset(seed=0)
        request = PredictRequest(obs)
        for _ in range(args.warmup):
            model.predict(request)
        lat, model_ms = [], []
        for _ in range(args.n):
            t0 = time.perf_counter_ns()
            pred = model.predict(request)
            lat.append((time.perf_counter_ns() - t0) / 1e6)
            model_ms.append(pred.timing.get("model_ms", float("nan")))
        worker = model.info.details.get("worker", {})
        print(json.dumps({"backend": model.info.backend, "mode": config.mode, "device": model.info.device,
                          "cuda_visible_devices": worker.get("cuda_visible_devices"), "n": args.n,
                          "p50_ms": round(float(np.percentile(lat, 50)), 3),
                          "p99_ms": round(float(np.percentile(lat, 99)), 3),
                          "model_p50_ms": round(float(np.nanpercentile(model_ms, 50)), 3)}))
    env.close()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "latency":
        latency(sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "_serve":
        {"raw_tcp": serve_raw, "zmq_bare": serve_zmq, "ws_openpi": serve_ws}[sys.argv[2]](sys.argv[3], sys.argv[4])
    elif len(sys.argv) > 1 and sys.argv[1] == "_case":
        _, _, transport, payload, n, warmup, tmp = sys.argv
        print(json.dumps(run_case(transport, payload, int(n), int(warmup), Path(tmp))))
    else:
        main()
