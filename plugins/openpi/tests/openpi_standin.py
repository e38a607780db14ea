"""A stand-in openpi policy server: openpi's framing and keys, a scripted policy.

Run as a process (``python openpi_standin.py DIR LAYOUT``). It does what openpi's
``WebsocketPolicyServer`` (``src/openpi/serving/websocket_policy_server.py``) does, with
openpi-client's own ``msgpack_numpy`` (the real package): on connect it sends the metadata,
then for each binary message it unpacks the observation, runs the policy, adds
``server_timing`` and sends the packed answer; an exception is sent as its traceback in a
text frame and the connection closed with 1011; ``GET /healthz`` answers 200. It writes
its port to ``DIR/port``.

Only the policy is replaced. Like openpi's input transforms it reads the layout's keys
(a missing one is a ``KeyError``, as in ``LiberoInputs``/``AlohaInputs``) and checks their
shapes; it saves every request to ``DIR/request-N.npz`` and answers what ``DIR/script.json``
says at that moment: ``{"actions": [[...]], "repeat": N}`` (rows tiled N times), or a
misbehaviour: ``raise`` (a ValueError), ``garbage`` (bytes that are not msgpack),
``object`` (an array map of dtype object), ``no-actions``, ``close`` (close without an
answer), ``sleep`` (seconds before answering). ``DIR/metadata.json`` is sent on connect.
"""

from __future__ import annotations

import asyncio
import http
import json
import sys
import time
import traceback
from pathlib import Path

import msgpack
import numpy as np
import websockets
import websockets.asyncio.server as _server
import websockets.frames
from openpi_client import msgpack_numpy

LAYOUTS = {
    "libero": {"observation/image": (224, 224, 3), "observation/wrist_image": (224, 224, 3), "observation/state": (8,)},
    "aloha": {"images": None, "state": (14,)},
}
ALOHA_CAMERAS = ("cam_high", "cam_left_wrist", "cam_right_wrist")


class ScriptedPolicy:
    def __init__(self, folder: Path, layout: str):
        self.folder, self.layout, self.calls = folder, layout, 0

    def infer(self, obs: dict) -> dict:
        for key, shape in LAYOUTS[self.layout].items():
            value = obs[key]  # KeyError when missing, as openpi's transforms
            if shape is not None and (not isinstance(value, np.ndarray) or value.shape != shape):
                raise ValueError(f"{key}: expected shape {shape}, got {getattr(value, 'shape', type(value))}")
        if self.layout == "aloha":
            for name in ALOHA_CAMERAS:
                image = obs["images"][name]
                if image.dtype != np.uint8 or image.ndim != 3 or image.shape[0] != 3:
                    raise ValueError(f"images/{name}: expected 3xHxW uint8, got {image.dtype} {image.shape}")
        if not isinstance(obs["prompt"], str):
            raise ValueError("prompt must be a string")
        flat = {k: v for k, v in obs.items() if k != "images"}
        flat.update({f"images/{k}": v for k, v in obs.get("images", {}).items()})
        np.savez(self.folder / f"request-{self.calls}.npz", **flat)
        self.calls += 1
        script = json.loads((self.folder / "script.json").read_text())
        mode = script.get("mode", "ok")
        if mode == "raise":
            raise ValueError("scripted failure inside the policy")
        if mode == "sleep":
            time.sleep(float(script["seconds"]))
        actions = np.tile(np.asarray(script.get("actions", [[0.0] * 7]), np.float32), (script.get("repeat", 1), 1))
        return {"actions": actions, "mode": mode}


async def main(folder: Path, layout: str) -> None:
    policy = ScriptedPolicy(folder, layout)
    metadata = json.loads((folder / "metadata.json").read_text()) if (folder / "metadata.json").exists() else {}

    async def handler(websocket):
        packer = msgpack_numpy.Packer()
        await websocket.send(packer.pack(metadata))
        prev_total_time = None
        while True:
            try:
                start_time = time.monotonic()
                obs = msgpack_numpy.unpackb(await websocket.recv())
                infer_time = time.monotonic()
                action = policy.infer(obs)
                infer_time = time.monotonic() - infer_time
                mode = action.pop("mode")
                if mode == "close":
                    await websocket.close()
                    break
                if mode == "garbage":
                    await websocket.send(b"\xc1\xc1\xc1")
                    continue
                if mode == "object":
                    bad = {b"__ndarray__": True, b"data": b"\0" * 8, b"dtype": "|O", b"shape": [1]}
                    await websocket.send(msgpack.packb({"actions": bad}, use_bin_type=True))
                    continue
                if mode == "no-actions":
                    action = {"action": action["actions"]}
                action["server_timing"] = {"infer_ms": infer_time * 1000}
                if prev_total_time is not None:
                    action["server_timing"]["prev_total_ms"] = prev_total_time * 1000
                await websocket.send(packer.pack(action))
                prev_total_time = time.monotonic() - start_time
            except websockets.ConnectionClosed:
                break
            except Exception:
                await websocket.send(traceback.format_exc())
                await websocket.close(code=websockets.frames.CloseCode.INTERNAL_ERROR,
                                      reason="Internal server error. Traceback included in previous frame.")
                break

    def health(connection, request):
        return connection.respond(http.HTTPStatus.OK, "OK\n") if request.path == "/healthz" else None

    async with _server.serve(handler, "127.0.0.1", 0, compression=None, max_size=None, process_request=health) as server:
        (folder / "port.tmp").write_text(str(server.sockets[0].getsockname()[1]))
        (folder / "port.tmp").rename(folder / "port")
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2]))
