"""The stand-in at the upstream boundary: ``VA_Server.infer(obs)`` (Robbyant/lingbot-va 6f092cb,
``wan_va/wan_va_server.py``) without weights.

It answers as the server's three modes do (reset -> ``{}``, compute_kv_cache -> ``{}``,
anything else -> ``{"action": float32 [16, 2, 16]}``) and checks every request against what
upstream's RoboTwin client sends (``evaluation/robotwin/eval_polict_client_openpi.py``) and the
server's state machine: reset first; the keys of each mode; ``infer`` only when the last chunk
was fed back; ``compute_kv_cache`` only after an ``infer``, with the whole chunk as returned
and 4 keyframes after the first chunk, 8 after later ones; the latent frame index advancing as
the server's (``frame_st_id``: the init latent plus one latent frame per 4 keyframes); every
frame in ``format_obs``'s layout, the conditioning frame the same in every ``infer``. A
violation raises ``AssertionError`` in the server (over the websocket: the error frame).
Chunks are seeded random values, so tests can recompute what the client must execute.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import List, Optional

import numpy as np
from scipy.spatial.transform import Rotation as R

#: flash_attn, which upstream's wan_va/modules/model.py imports and a CPU cannot have
STUBS = Path(__file__).resolve().parent / "stubs"
FRAME_KEYS = {"observation.images.cam_high", "observation.images.cam_left_wrist", "observation.images.cam_right_wrist",
              "observation.state", "task"}
RESET_KEYS = {"reset", "prompt", "save_visualization"}
INFER_KEYS = {"obs", "prompt", "save_visualization", "video_guidance_scale", "action_guidance_scale"}
KV_KEYS = {"obs", "compute_kv_cache", "imagine", "save_visualization", "state"}
FRAMES, ACTIONS = 2, 16  # the robotwin config: frame_chunk_size, action_per_frame
#: the first chunk's frame 0 is pinned by the server (to the normalised zero action): a value
#: that would show at once if a client executed it
PINNED = 7.0


def check_frame(frame, prompt: str) -> None:
    assert isinstance(frame, dict) and set(frame) == FRAME_KEYS, f"frame keys {sorted(frame)}"
    for key in FRAME_KEYS - {"observation.state", "task"}:
        image = frame[key]
        assert isinstance(image, np.ndarray) and image.dtype == np.uint8 and image.shape == (240, 320, 3), key
    state = frame["observation.state"]
    assert isinstance(state, np.ndarray) and state.dtype == np.float64 and state.shape == (14,)
    assert frame["task"] == prompt, (frame["task"], prompt)


class StandInServer:
    """``infer(obs) -> reply`` as ``VA_Server`` answers it; ``log`` records each request."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.log: List[tuple] = []
        self.chunks: List[np.ndarray] = []
        self.keyframes: List[list] = []
        self.prompt: Optional[str] = None
        self.frame_st_id: Optional[int] = None
        self.pending: Optional[np.ndarray] = None
        self.first_frame: Optional[dict] = None
        self.fail_next: Optional[str] = None  # tests: the next request raises this

    def infer(self, obs: dict) -> dict:
        if self.fail_next:
            message, self.fail_next = self.fail_next, None
            raise RuntimeError(message)
        assert isinstance(obs, dict)
        if obs.get("reset"):
            assert set(obs) == RESET_KEYS and obs["reset"] is True, sorted(obs)
            assert isinstance(obs["prompt"], str) and obs["prompt"].strip()
            self.prompt, self.frame_st_id, self.pending, self.first_frame = obs["prompt"], 0, None, None
            self.log.append(("reset", obs["prompt"]))
            return {}
        assert self.frame_st_id is not None, "a request before the first reset"
        if obs.get("compute_kv_cache"):
            return self._kv(obs)
        return self._infer(obs)

    def _kv(self, obs: dict) -> dict:
        assert set(obs) == KV_KEYS and obs["compute_kv_cache"] is True and obs["imagine"] is False, sorted(obs)
        assert self.pending is not None, "compute_kv_cache without a chunk to feed back"
        state = obs["state"]
        assert isinstance(state, np.ndarray) and state.dtype == np.float32 and np.array_equal(state, self.pending), \
            "state is not the whole chunk the server returned"
        frames = obs["obs"]
        first = self.frame_st_id == 0
        assert isinstance(frames, list) and len(frames) == (4 if first else 8), f"{len(frames)} keyframes"
        for frame in frames:
            check_frame(frame, self.prompt)
        self.frame_st_id += (1 if first else 0) + len(frames) // 4  # the init latent, then 4 frames per latent frame
        self.pending = None
        self.keyframes.append(frames)
        self.log.append(("compute_kv_cache", len(frames), self.frame_st_id))
        return {}

    def _infer(self, obs: dict) -> dict:
        assert set(obs) == INFER_KEYS, sorted(obs)
        assert self.pending is None, "infer before the last chunk was fed back with compute_kv_cache"
        assert obs["prompt"] == self.prompt
        assert (obs["video_guidance_scale"], obs["action_guidance_scale"]) == (5.0, 1.0)
        check_frame(obs["obs"], self.prompt)
        if self.frame_st_id == 0:
            self.first_frame = obs["obs"]
        else:
            for key, value in self.first_frame.items():  # the client resends its conditioning frame
                assert np.array_equal(obs["obs"][key], value) if isinstance(value, np.ndarray) else obs["obs"][key] == value
        chunk = np.concatenate([
            self.rng.uniform(-0.05, 0.05, (3, FRAMES, ACTIONS)), self.rng.normal(size=(4, FRAMES, ACTIONS)),
            self.rng.uniform(0, 1, (1, FRAMES, ACTIONS)), self.rng.uniform(-0.05, 0.05, (3, FRAMES, ACTIONS)),
            self.rng.normal(size=(4, FRAMES, ACTIONS)), self.rng.uniform(0, 1, (1, FRAMES, ACTIONS)),
        ]).astype(np.float32)
        if self.frame_st_id == 0:
            chunk[:3, 0] = chunk[8:11, 0] = PINNED
        self.pending = chunk
        self.chunks.append(chunk)
        self.log.append(("infer", self.frame_st_id))
        return {"action": chunk}


def upstream_client_row(action: np.ndarray, init: np.ndarray) -> np.ndarray:
    """``add_init_pose(ee_action, init)`` and the division by the quaternion norms, with SciPy."""
    out = []
    for arm in (slice(0, 8), slice(8, 16)):
        new, base = action[arm].astype(np.float64), init[arm]
        rot = (R.from_quat(base[3:7][None]) * R.from_quat(new[3:7][None])).as_quat().reshape(-1)
        out.append(np.concatenate([new[:3] + base[:3], rot, new[7:8]]))
    row = np.concatenate(out)
    return np.concatenate([row[:3], row[3:7] / np.linalg.norm(row[3:7]), row[7:11],
                           row[11:15] / np.linalg.norm(row[11:15]), row[15:16]])


def expected_rows(chunks, init: np.ndarray) -> np.ndarray:
    """Every action the client executes from the server's ``chunks``, computed independently
    (``upstream_client_row``), as float32 (what wamcore hands the simulator)."""
    rows = []
    for n, chunk in enumerate(chunks):
        for i in range(1 if n == 0 else 0, chunk.shape[1]):
            rows += [upstream_client_row(chunk[:, i, j], init) for j in range(chunk.shape[2])]
    return np.array(rows, dtype=np.float32)


def random_weights(folder: Path) -> Path:
    """Random weights at reduced size, the four subfolders VA_Server reads (a few MB, seconds)."""
    from wam_lingbot_va.testweights import generate

    generate(folder, layers=1, seed=0)
    return folder


def stubs_for_workers(monkeypatch) -> None:
    """What a spawned worker needs here: the flash_attn stub on its path."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(STUBS), os.environ.get("PYTHONPATH")])))


def listening_ports() -> set:
    """The TCP ports this process listens on (from /proc: a server that binds port 0 itself
    tells its port this way, with no pick-release-rebind race)."""
    inodes = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


@contextmanager
def closed_port():
    """A port on which nothing listens, held bound (not listening) so that no one else takes it:
    a connection to it is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


class UpstreamWebsocketServer:
    """Upstream's own ``WebsocketPolicyServer`` (``wan_va/utils/Simple_Remote_Infer/deploy/``)
    serving ``policy`` on 127.0.0.1 in a thread, stopped by ``stop()``."""

    def __init__(self, policy):
        from wan_va.utils.Simple_Remote_Infer.deploy.websocket_policy_server import WebsocketPolicyServer

        before = listening_ports()
        self.server = WebsocketPolicyServer(policy, host="127.0.0.1", port=0)  # it binds once, we read the port
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not (new := listening_ports() - before):
            assert self.thread.is_alive() and time.monotonic() < deadline, "upstream's server never listened"
            time.sleep(0.02)
        (self.port,) = new

    def _run(self):
        asyncio.set_event_loop(self.loop)
        self.task = self.loop.create_task(self.server.run())
        try:
            self.loop.run_until_complete(self.task)
        except (asyncio.CancelledError, Exception):
            pass

    def stop(self):
        self.loop.call_soon_threadsafe(self.task.cancel)
        self.thread.join(10)
