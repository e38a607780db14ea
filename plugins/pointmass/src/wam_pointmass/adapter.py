"""The reference WAM's adapter for PointMass: physical observation <-> the network's format.

Native input (what ``encode`` returns, numpy only, so it can be checked without torch)::

    image     float32 [3, 64, 64]  RGB in [0, 1], channels first, top-left origin kept
    state     float32 [4]          position (m), velocity / VELOCITY_SCALE (m/s)
    tokens    int64   [8]          the instruction, see ``tokenizer``
    candidate float32 [8, 2] | None  a chunk whose outcome to predict
    sample    [seed, step] | None    what a model with a latent draws its sample from
                                     (the request's seed and the observation's step)
    prefix    float32 [8, 2] | None  ``action_prefix`` zero-padded to the chunk ...
    mask      float32 [8] | None     ... and 1 where it gives an action

Native output (what the model returns): ``actions`` float32 [8, 2] in the platform's units,
``future`` uint8 [64, 64, 3] (the camera at the chunk's end), ``value`` float (probability
that executing ``actions`` reaches the named target before the chunk ends).

With ``candidate_actions`` the prediction's ``actions`` are the candidate chunk itself, so
the future and the value always describe the returned ``actions``. With ``action_prefix``
(the weights trained for it, ``--weights reach-rtc``) the chunk starts with the prefix.
"""

from __future__ import annotations

from typing import Any, Dict

import numpy as np

from wamcore import ActionError, AdapterContract, PredictRequest, Prediction

from .spec import ACTION_SPACE, CAMERA, IMAGE_SIZE, PLATFORM, POINTMASS_CONTROL
from .tokenizer import tokenize

CHUNK = 8
#: velocity enters the network divided by this (speeds stay below ~2 m/s)
VELOCITY_SCALE = 2.0

CONTRACT = AdapterContract(
    platform=PLATFORM,
    action_space=ACTION_SPACE,
    action_dim=2,
    cameras={CAMERA: (IMAGE_SIZE, IMAGE_SIZE)},
    state={"position": 2, "velocity": 2},
    chunk_size=CHUNK,
    horizon=CHUNK,
    future_cameras=(CAMERA,),
)

_LOW = np.asarray(POINTMASS_CONTROL.low, dtype=np.float32)
_HIGH = np.asarray(POINTMASS_CONTROL.high, dtype=np.float32)


def check_candidate(candidate: np.ndarray) -> np.ndarray:
    """The core already checked the shape (the model's chunk) and finiteness; the model's
    input domain is the action bounds, which a request sent straight to a worker may break."""
    if ((candidate < _LOW - 1e-5) | (candidate > _HIGH + 1e-5)).any():
        raise ActionError(["candidate_actions must lie within the action bounds [-1, 1]"], context="candidate_actions for pointmass-wam")
    return np.clip(candidate.astype(np.float32), _LOW, _HIGH)


def normalise_states(states: np.ndarray) -> np.ndarray:
    """``[..., 4]`` (position m, velocity m/s) -> the network's float32 state input."""
    out = np.asarray(states, dtype=np.float32).copy()
    out[..., 2:] /= VELOCITY_SCALE
    return out


def encode(request: PredictRequest) -> Dict[str, Any]:
    obs = request.observation
    image = np.ascontiguousarray(obs.images[CAMERA].transpose(2, 0, 1), dtype=np.float32) / np.float32(255.0)
    state = normalise_states(np.concatenate([obs.state["position"], obs.state["velocity"]]))
    candidate = None if request.candidate_actions is None else check_candidate(np.asarray(request.candidate_actions))
    sample = None if request.seed is None else [int(request.seed) % 2**64, int(obs.step)]
    prefix = mask = None
    if request.action_prefix is not None:  # the core checked its control, bounds and length (<= CHUNK)
        d = len(request.action_prefix)
        prefix, mask = np.zeros((CHUNK, 2), np.float32), (np.arange(CHUNK) < d).astype(np.float32)
        prefix[:d] = check_candidate(np.asarray(request.action_prefix))
    return {"image": image, "state": state, "tokens": tokenize(request.effective_instruction), "candidate": candidate,
            "sample": sample, "prefix": prefix, "mask": mask}


def decode(native: Dict[str, Any], request: PredictRequest) -> Prediction:
    return Prediction(
        actions=np.asarray(native["actions"], dtype=np.float32),
        future_observations={CAMERA: native["future"]},
        values=np.asarray([native["value"]], dtype=np.float32),
        info={"future_of": "candidate_actions" if request.candidate_actions is not None else "predicted_actions"},
    )


__all__ = ["CHUNK", "CONTRACT", "VELOCITY_SCALE", "normalise_states", "encode", "decode", "check_candidate"]
