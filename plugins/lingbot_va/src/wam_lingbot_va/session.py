"""Upstream's RoboTwin client loop as a stateful wamcore model (``uses_sessions``).

LingBot-VA keeps one episode on its server: the KV cache, the latent frame index
``frame_st_id``, the streaming VAE caches, the prompt's embeddings. It must be fed what the
robot did: after a chunk, the observed keyframes and the whole chunk (``compute_kv_cache``).
The loop of ``evaluation/robotwin/eval_polict_client_openpi.py`` (Robbyant/lingbot-va 6f092cb),
one wamcore prediction per keyframe interval (4 actions):

1. first request of an episode: ``{reset: True, prompt}``; this observation gives the initial
   end-effector pose (``init``) and the conditioning frame (``first_obs``), which every
   ``infer`` request carries (the server reads it only while ``frame_st_id == 0``);
2. no actions left: if a chunk was executed, ``{obs: keyframes, compute_kv_cache: True,
   state: chunk}`` (the whole chunk, the first one's skipped frame included), then
   ``{obs: first_obs, prompt, ...}`` -> ``action [16, F, 16]``, composed into absolute ee16
   rows; the first chunk's frame 0 is skipped (16 actions, 4 keyframes; then 32 and 8);
3. every later request's observation is a keyframe: the one after each 4th action.

Upstream's loop is synchronous: ``compute_kv_cache`` wants the keyframes observed while the
whole chunk ran, before the next ``infer`` (its server has no request for a chunk that only
partly ran). So the model declares ``whole_chunks``: ``--execution pause`` and ``hold`` (a
later keyframe, the arm held meanwhile) work; ``async`` and ``rtc`` are refused up front.

Each wamcore session has its own episode state here, and the server holds one episode: the
session that is in one owns the server until it resets (a new episode, or the session
closed); another session's request meanwhile is refused, never interleaved.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional

import attrs
import numpy as np

from wamcore.contracts import PredictRequest
from wamcore.errors import ConfigurationError, ObservationError

from .robotwin import KEYFRAME_INTERVAL, check_chunk, executed_rows

#: the request keys and values of upstream's client (``eval_policy``, called with
#: ``save_visualization=True``; ``launch_client.sh`` passes guidance 5 and 1). The server
#: ignores all of them but the mode keys, ``prompt`` at reset and ``obs``/``state``.
SAVE_VISUALIZATION = True
VIDEO_GUIDANCE_SCALE = 5.0
ACTION_GUIDANCE_SCALE = 1.0
CONTEXT = "LingBot-VA episode"


@attrs.define
class Episode:
    prompt: str
    init: np.ndarray
    first_frame: dict
    next_step: int
    chunk: Optional[np.ndarray] = None  # the last chunk the server returned
    rows: List[np.ndarray] = attrs.field(factory=list)  # composed actions not yet handed out
    keyframes: List[dict] = attrs.field(factory=list)
    chunks: int = 0
    broken: Optional[str] = None
    seed: Optional[int] = None  # the request's: each chunk's noise is drawn from (seed, chunk index)


def chunk_seed(seed: int, chunk: int) -> int:
    """A 63-bit seed for chunk ``chunk`` of an episode seeded ``seed`` (validated: 0 <= seed < 2**63)."""
    return int(np.random.SeedSequence([seed, chunk]).generate_state(1, np.uint64)[0] >> 1)


def reset_request(prompt: str) -> dict:
    return {"reset": True, "prompt": prompt, "save_visualization": SAVE_VISUALIZATION}


def infer_request(first_frame: dict, prompt: str) -> dict:
    return {"obs": first_frame, "prompt": prompt, "save_visualization": SAVE_VISUALIZATION,
            "video_guidance_scale": VIDEO_GUIDANCE_SCALE, "action_guidance_scale": ACTION_GUIDANCE_SCALE}


def kv_request(keyframes: List[dict], chunk: np.ndarray) -> dict:
    return {"obs": keyframes, "compute_kv_cache": True, "imagine": False, "save_visualization": SAVE_VISUALIZATION,
            "state": chunk}


class LingbotModel:
    """The native model: the client loop in front of a server (``server.infer(dict) -> dict``:
    upstream's ``VA_Server`` in this process, or a running websocket server).

    ``seed_noise(n)`` seeds the generator the server draws its noise from (``torch.manual_seed``
    for the in-process server: ``VA_Server`` samples with the global one); with it, a request
    seed makes an episode's chunks reproducible. A remote server draws its own noise."""

    uses_sessions = True

    def __init__(self, server: Any, *, details: Optional[dict] = None, device: Optional[str] = None,
                 seed_noise: Optional[Callable[[int], Any]] = None):
        self.server = server
        self.seed_noise = seed_noise
        self.details = dict(details or {})
        self.device = device
        self.checkpoint = self.details.get("checkpoint")
        self.episodes: Dict[str, Episode] = {}
        self.owner: Optional[str] = None
        self.owner_since = 0.0

    # ------------------------------------------------------------------ sessions

    def _claim(self, session: str) -> None:
        if self.owner not in (None, session):
            raise ConfigurationError(
                f"LingBot-VA's server holds one episode at a time (KV cache, frame index), and session "
                f"{self.owner[:8]} has been running one for {time.monotonic() - self.owner_since:.0f} s; a second "
                "session would interleave with it. Run one env per LingBot-VA worker (wam eval --num-envs 1, or "
                "--executor ray --num-model-workers N with N envs); a session that ended without closing holds the "
                "server until the worker drops it (--session-ttl)."
            )
        if self.owner is None:
            self.owner, self.owner_since = session, time.monotonic()

    def reset(self, session: str = "default") -> None:
        """A new episode for ``session`` (its next request resets the server), or the end of a
        closed session; either way the server is free for any session."""
        self.episodes.pop(session, None)
        if self.owner == session:
            self.owner = None

    # ------------------------------------------------------------------ predictions

    def predict_native(self, native: dict, request: PredictRequest, session: str = "default") -> np.ndarray:
        self._claim(session)
        episode = self.episodes.get(session)
        if episode is not None and episode.broken:
            raise ObservationError([f"{episode.broken}: the server no longer follows this episode; reset the model "
                                    "(a new episode) to go on"], context=CONTEXT)
        if episode is None or episode.prompt != native["prompt"]:
            episode = self._start(session, native, request)
        else:
            # later is fine: the arm held still while the chunk was computed (``--realtime
            # --execution hold``); the keyframe is the world as the robot's camera sees it then
            if native["step"] < episode.next_step:
                raise ObservationError([
                    f"this observation is at step {native['step']}, the server expects the keyframe of step "
                    f"{episode.next_step} or later: the last {KEYFRAME_INTERVAL} actions were not all executed (as "
                    "under --execution async or rtc, which the model's whole_chunks capability refuses where a "
                    "strategy is built with it), or the env was reset without resetting the model"
                ], context=CONTEXT)
            episode.keyframes.append(native["frame"])
        try:
            if not episode.rows:
                self._next_chunk(episode)
        except Exception as exc:
            episode.broken = f"a request to the LingBot-VA server failed ({type(exc).__name__})"
            raise
        out, episode.rows = episode.rows[:KEYFRAME_INTERVAL], episode.rows[KEYFRAME_INTERVAL:]
        episode.next_step = native["step"] + KEYFRAME_INTERVAL
        return np.stack(out)

    def _start(self, session: str, native: dict, request: PredictRequest) -> Episode:
        """A new server episode: the client's reset with the prompt; this observation is the
        initial pose and the conditioning frame. A changed instruction starts one too (the
        server encodes the prompt at reset only)."""
        episode = Episode(prompt=native["prompt"], init=native["pose"], first_frame=native["frame"],
                          next_step=native["step"], seed=request.seed)
        self.episodes[session] = episode
        try:
            self.server.infer(reset_request(episode.prompt))
        except Exception:
            self.reset(session)  # no episode began: the server is free again
            raise
        return episode

    def _next_chunk(self, episode: Episode) -> None:
        if episode.chunk is not None:  # the whole chunk ran: feed its keyframes and actions back
            self.server.infer(kv_request(episode.keyframes, episode.chunk))
            episode.keyframes = []
        if episode.seed is not None and self.seed_noise is not None:
            self.seed_noise(chunk_seed(episode.seed, episode.chunks))
        reply = self.server.infer(infer_request(episode.first_frame, episode.prompt))
        chunk = check_chunk(reply.get("action") if isinstance(reply, dict) else None)
        episode.rows = executed_rows(chunk, episode.init, first=episode.chunk is None)
        episode.chunk = chunk
        episode.chunks += 1

    def close(self) -> None:
        close = getattr(self.server, "close", None)
        if close is not None:
            close()


__all__ = ["LingbotModel", "chunk_seed", "reset_request", "infer_request", "kv_request"]
