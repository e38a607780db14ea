"""Cosmos Policy's LIBERO adapter: a physical LIBERO observation in, the upstream ``obs``
dict for ``get_action`` out; upstream's action list in, a 16x7 LIBERO chunk out.

Upstream conventions (NVlabs/cosmos-policy ``cosmos_policy/experiments/robot/libero/``
``run_libero_eval.py`` ``prepare_observation`` and ``libero_utils.py``, ``cosmos_utils.py``
``get_action``; how RPent wrapped it: RLinf/RPent ``rpent/robots/components/cosmos_policy/``):

* **Images.** Upstream feeds ``np.flipud(obs["agentview_image"])`` as ``primary_image`` and
  ``np.flipud(obs["robot0_eye_in_hand_image"])`` as ``wrist_image`` (``--flip_images True``;
  the training set was regenerated with the same flip). That vertical flip is exactly the one
  the LIBERO platform applies once to reach wamcore's top-left origin, so the adapter passes
  both views through unchanged. It must *not* rotate them by 180 degrees (``[::-1, ::-1]``):
  that is Fast-WAM's convention (yuantianyuan01/FastWAM ``experiments/libero/libero_utils.py``),
  a different model trained on other pixels. Both views are 256x256, upstream's
  ``env_img_res``; upstream resizes to 224 itself.
* **Proprio.** 9-D, in upstream order ``gripper_qpos(2) | eef_pos(3) | eef_quat(4)``; robosuite's
  ``robot0_eef_quat`` is x, y, z, w, which is the platform's ``eef_quaternion_xyzw``. Upstream
  normalises it with the dataset statistics inside ``get_action``; the adapter sends raw values.
* **Actions.** ``get_action`` returns a list of 16 arrays of shape (7,), already un-normalised
  and in LIBERO's convention (OSC_POSE delta, gripper -1 open / +1 close): upstream's eval
  hands them to ``env.step`` with no inversion or binarisation, and its no-op is
  ``[0, 0, 0, 0, 0, 0, -1]`` (gripper open). The adapter stacks them in order into ``[16, 7]``
  and clips to the control's [-1, 1] box, which robosuite's controller applies anyway.
* **Futures** (``--predict-future``): ``future_image_predictions["future_image"]`` and
  ``["future_wrist_image"]`` are decoded frames in the same (top-left) orientation as the
  inputs, at the model's resolution; ``value_prediction`` is a float in [0, 1].
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from wamcore import Adapter, AdapterContract, PredictRequest, Prediction
from wamcore.errors import PredictionError

PLATFORM = "libero"
ACTION_SPACE = "libero.osc_pose.delta.v1"
ACTION_DIM = 7
CHUNK_SIZE = 16
IMAGE_SIZE = (256, 256)

#: platform camera role -> upstream ``obs`` key
CAMERA_KEYS = {"primary": "primary_image", "wrist": "wrist_image"}
#: upstream proprio layout: (platform state name, length), in order
PROPRIO_LAYOUT = (("gripper_qpos", 2), ("eef_position", 3), ("eef_quaternion_xyzw", 4))
PROPRIO_DIM = sum(n for _, n in PROPRIO_LAYOUT)
#: platform camera role -> upstream ``future_image_predictions`` key
FUTURE_KEYS = {"primary": "future_image", "wrist": "future_wrist_image"}
ACTION_LOW, ACTION_HIGH = -1.0, 1.0


def contract(predict_future: bool = False) -> AdapterContract:
    """Exactly what the upstream LIBERO policy consumes and produces."""
    return AdapterContract(
        platform=PLATFORM,
        action_space=ACTION_SPACE,
        action_dim=ACTION_DIM,
        cameras={role: IMAGE_SIZE for role in CAMERA_KEYS},
        state=dict(PROPRIO_LAYOUT),
        chunk_size=CHUNK_SIZE,
        horizon=CHUNK_SIZE,
        future_cameras=tuple(FUTURE_KEYS) if predict_future else (),
    )


def proprio(state: Mapping[str, np.ndarray]) -> np.ndarray:
    """The 9-D upstream proprio vector, float64 like robosuite's observation arrays."""
    return np.concatenate([np.asarray(state[name], dtype=np.float64).reshape(n) for name, n in PROPRIO_LAYOUT])


def encode(request: PredictRequest) -> dict:
    """The arguments ``get_action`` takes for one query: ``obs`` and the instruction."""
    obs = request.observation
    upstream_obs = {key: obs.images[role] for role, key in CAMERA_KEYS.items()}
    upstream_obs["proprio"] = proprio(obs.state)
    return {"obs": upstream_obs, "instruction": request.effective_instruction}


def action_chunk(actions: Sequence[Any]) -> np.ndarray:
    """Upstream's list of 16 ``(7,)`` arrays as a ``[16, 7]`` float32 chunk, in order."""
    rows = [np.asarray(a) for a in actions] if isinstance(actions, (list, tuple)) else None
    if rows is None or len(rows) != CHUNK_SIZE or any(r.shape != (ACTION_DIM,) for r in rows):
        shapes = [tuple(r.shape) for r in rows] if rows is not None else type(actions).__name__
        raise PredictionError(
            [f"upstream get_action must return a list of {CHUNK_SIZE} arrays of shape ({ACTION_DIM},), got {shapes}"],
            context=PLATFORM,
        )
    return np.stack(rows).astype(np.float32)


def _decoder(predict_future: bool):
    def decode(native: Mapping[str, Any], request: PredictRequest) -> Prediction:
        raw = action_chunk(native["actions"])
        actions = np.clip(raw, ACTION_LOW, ACTION_HIGH)
        info = {"clipped_values": int(np.count_nonzero(actions != raw) - np.count_nonzero(np.isnan(raw)))}
        if not predict_future:
            return Prediction(actions=actions, info=info)
        frames = native["future_image_predictions"]
        futures = {role: np.asarray(frames[key]) for role, key in FUTURE_KEYS.items()}
        values = np.array([float(native["value_prediction"])], dtype=np.float32)
        return Prediction(actions=actions, future_observations=futures, values=values, info=info)

    return decode


def adapter(predict_future: bool = False) -> Adapter:
    return Adapter(contract=contract(predict_future), encode=encode, decode=_decoder(predict_future))


__all__ = [
    "PLATFORM",
    "ACTION_SPACE",
    "CHUNK_SIZE",
    "CAMERA_KEYS",
    "PROPRIO_LAYOUT",
    "FUTURE_KEYS",
    "contract",
    "proprio",
    "encode",
    "action_chunk",
    "adapter",
]
