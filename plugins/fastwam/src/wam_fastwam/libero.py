"""Fast-WAM's LIBERO adapter: wamcore's physical observation <-> RLinf's Fast-WAM batch.

RLinf owns the model-side preprocessing (center-crop-resize to the processor's 224x224,
horizontal concatenation, [-1, 1] scaling, min/max state normalisation, prompt template) and
the action restoration (min/max de-normalisation, FastWAM's 0 = close / 1 = open gripper
mapped to LIBERO's -1 = open / +1 = close, optional sign binarisation, the first
``num_action_chunks`` steps); RL#1398 ``rlinf/models/embodiment/fastwam/fastwam_policy.py``,
FastWAM ``experiments/libero/eval_libero_single.py`` and ``configs/data/libero_2cam.yaml``.
This adapter builds exactly what RLinf's ``LiberoEnv`` would hand to ``predict_action_batch``:

* ``main_images`` / ``wrist_images`` ``[1, H, W, 3] uint8``: Fast-WAM was trained on
  robosuite renders rotated 180 degrees (``img[::-1, ::-1]``, RLinf and FastWAM
  ``get_libero_image``). wamcore's LIBERO observation is the raw render flipped vertically
  once (``[::-1]``, top-left origin; wam_libero.spec), so one more *horizontal* flip
  (``[:, ::-1]``) completes the rotation: ``raw[::-1][:, ::-1] == raw[::-1, ::-1]``.
* ``states [1, 8]`` (float64, as RLinf's env builds it): eef position (3), the eef
  quaternion as axis-angle (3) with robosuite's ``quat2axisangle`` convention, gripper finger
  positions (2).
* ``task_descriptions``: the request's instruction.

RLinf returns ``[1, num_action_chunks, 7]`` float32 already in LIBERO's control convention,
so decoding only checks the shape and drops the batch axis.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from wamcore import Adapter, AdapterContract, PredictRequest, Prediction
from wamcore.errors import PredictionError

PLATFORM = "libero"
ACTION_SPACE = "libero.osc_pose.delta.v1"
ACTION_DIM = 7
#: The render size Fast-WAM's LIBERO data and evaluation use (FastWAM ``experiments/libero/``).
CAMERA_SIZE = (256, 256)
STATE = {"eef_position": 3, "eef_quaternion_xyzw": 4, "gripper_qpos": 2}
#: RLinf's default model YAML: num_action_chunks 10, action_horizon 32.
DEFAULT_CHUNK = 10
DEFAULT_HORIZON = 32


def rotate_to_training(image: np.ndarray) -> np.ndarray:
    """The physical (once vertically flipped) image as Fast-WAM saw it in training: rotated
    180 degrees from the raw render, i.e. one more horizontal flip. Contiguous, because RLinf
    turns it into a tensor with ``torch.as_tensor`` (no negative strides)."""
    return np.ascontiguousarray(image[:, ::-1])


def quat_xyzw_to_axis_angle(quat) -> np.ndarray:
    """Axis-angle of an ``(x, y, z, w)`` quaternion in robosuite's ``quat2axisangle`` convention,
    which Fast-WAM's state was computed with: ``w`` is clipped to [-1, 1], the angle is
    ``2 acos(w)`` with no sign canonicalisation (a negative ``w`` gives an angle above pi,
    not the equivalent shorter rotation), and the vector is zero only when
    ``sqrt(1 - w^2)`` is exactly zero. The input is not modified."""
    q = np.array(quat, dtype=np.float64)
    w = min(max(q[3], -1.0), 1.0)
    den = math.sqrt(1.0 - w * w)
    if den == 0.0:
        return np.zeros(3)
    return (q[:3] * 2.0 * math.acos(w)) / den


def libero_state(state) -> np.ndarray:
    """RLinf's 8-D LIBERO state: eef position, axis-angle, gripper qpos (float64)."""
    return np.concatenate(
        [
            np.asarray(state["eef_position"], dtype=np.float64),
            quat_xyzw_to_axis_angle(state["eef_quaternion_xyzw"]),
            np.asarray(state["gripper_qpos"], dtype=np.float64),
        ]
    )


def encode(request: PredictRequest) -> dict:
    """RLinf's ``env_obs`` for one environment."""
    obs = request.observation
    return {
        "main_images": rotate_to_training(obs.images["primary"])[None],
        "wrist_images": rotate_to_training(obs.images["wrist"])[None],
        "states": libero_state(obs.state)[None],
        "task_descriptions": [request.effective_instruction],
    }


def libero_adapter(chunk_size: int = DEFAULT_CHUNK, horizon: Optional[int] = DEFAULT_HORIZON) -> Adapter:
    """The adapter for a deployment whose RLinf YAML sets ``num_action_chunks = chunk_size``."""

    def decode(native, request: PredictRequest) -> Prediction:
        actions = np.asarray(native)
        expected = (1, chunk_size, ACTION_DIM)
        if actions.shape != expected or actions.dtype.kind != "f":
            raise PredictionError(
                [f"RLinf predict_action_batch returned {actions.dtype} {actions.shape}, expected float {expected} "
                 "(num_action_chunks of the YAML)"],
                context=PLATFORM,
            )
        return Prediction(actions=actions[0].astype(np.float32))

    contract = AdapterContract(
        platform=PLATFORM,
        action_space=ACTION_SPACE,
        action_dim=ACTION_DIM,
        cameras={"primary": CAMERA_SIZE, "wrist": CAMERA_SIZE},
        state=STATE,
        chunk_size=chunk_size,
        horizon=horizon,
    )
    return Adapter(contract=contract, encode=encode, decode=decode)


__all__ = [
    "libero_adapter",
    "encode",
    "rotate_to_training",
    "quat_xyzw_to_axis_angle",
    "libero_state",
    "CAMERA_SIZE",
    "STATE",
    "DEFAULT_CHUNK",
    "DEFAULT_HORIZON",
]
