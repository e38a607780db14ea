"""StarWAM's LIBERO adapter: what ``examples/libero/rollout.py`` does around ``infer_action``.

Upstream (``_obs_to_images``, ``_obs_to_image``, ``_extract_proprio``, ``_quat2axisangle``,
``_denormalize_action`` in StarWAM ``examples/libero/rollout.py`` at f6c771f):

* both 256x256 renders rotated 180 degrees (``img[::-1, ::-1]``), each resized with PIL
  bilinear to the recipe's ``data.video_size``, then put side by side, primary left of wrist
  (``concat_multi_camera: horizontal``); wamcore's LIBERO images are the raw render flipped
  vertically once, so one more horizontal flip completes the rotation;
* 8-D proprio ``[eef_pos, axis-angle of eef_quat, gripper_qpos]`` in float32, the axis-angle
  computed as robosuite's ``quat2axisangle`` in float32 (``w`` clipped, angle ``2 acos(w)``
  with no sign canonicalisation, zero only when the denominator is exactly 0);
* the model's 32x7 chunk, min-max de-normalised (``normalization``), its gripper column mapped
  ``> 0.5 -> -1`` (open) else ``+1`` (close), LIBERO's convention; the first
  ``replan_steps`` rows are executed.

The [-1, 1] scaling, state normalisation and de-normalisation run in the worker, which holds
the stats (``wam_starwam.worker``).
"""

from __future__ import annotations

import math

import numpy as np

from wamcore import Adapter, AdapterContract, PredictRequest

from .chunks import HORIZON, prefix_decoder
from .families import Family

PLATFORM = "libero"
ACTION_SPACE = "libero.osc_pose.delta.v1"
ACTION_DIM = 7
#: ``LIBERO_ENV_RESOLUTION`` of rollout.py
CAMERA_SIZE = (256, 256)
STATE = {"eef_position": 3, "eef_quaternion_xyzw": 4, "gripper_qpos": 2}
#: rollout.py ``LIBERO_DUMMY_ACTION``: the wait steps, which wam_libero's --settle-steps runs
DUMMY_ACTION = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0)


def resize(image: np.ndarray, size_hw) -> np.ndarray:
    """PIL bilinear, as rollout ``_resize_rgb``."""
    from PIL import Image

    h, w = size_hw
    return np.asarray(Image.fromarray(image).resize((w, h), resample=Image.BILINEAR), dtype=np.uint8)


def compose(primary: np.ndarray, wrist: np.ndarray, size_hw) -> np.ndarray:
    """The uint8 frame StarWAM sees: both cameras rotated to training orientation, resized, side by side."""
    views = [resize(np.ascontiguousarray(img[:, ::-1]), size_hw) for img in (primary, wrist)]
    return np.ascontiguousarray(np.concatenate(views, axis=1))


def quat2axisangle(quat) -> np.ndarray:
    """rollout ``_quat2axisangle``: float32 throughout, as the training data."""
    q = np.asarray(quat, dtype=np.float32).copy()
    q[3] = np.clip(q[3], -1.0, 1.0)
    den = math.sqrt(max(0.0, 1.0 - float(q[3]) * float(q[3])))
    if den == 0.0:
        return np.zeros(3, dtype=np.float32)
    return (q[:3] * (2.0 * math.acos(float(q[3]))) / den).astype(np.float32)


def proprio(state) -> np.ndarray:
    return np.concatenate(
        [
            np.asarray(state["eef_position"], dtype=np.float32),
            quat2axisangle(state["eef_quaternion_xyzw"]),
            np.asarray(state["gripper_qpos"], dtype=np.float32),
        ]
    )


def gripper_to_libero(actions: np.ndarray) -> np.ndarray:
    """StarWAM's gripper channel (1 = open in its data) to LIBERO's -1 open / +1 close."""
    out = np.array(actions, dtype=np.float32)
    out[..., -1] = np.where(out[..., -1] > 0.5, -1.0, 1.0)
    return out


def libero_adapter(family: Family, replan_steps: int) -> Adapter:
    def encode(request: PredictRequest) -> dict:
        obs = request.observation
        return {
            "image": compose(obs.images["primary"], obs.images["wrist"], family.video_size),
            "proprio": proprio(obs.state),
            "instruction": request.effective_instruction,
        }

    contract = AdapterContract(
        platform=PLATFORM,
        action_space=ACTION_SPACE,
        action_dim=ACTION_DIM,
        cameras={"primary": CAMERA_SIZE, "wrist": CAMERA_SIZE},
        state=STATE,
        chunk_size=replan_steps,
        horizon=HORIZON,
    )
    return Adapter(contract=contract, encode=encode, decode=prefix_decoder(PLATFORM, ACTION_DIM, replan_steps))


__all__ = ["libero_adapter", "compose", "resize", "quat2axisangle", "proprio", "gripper_to_libero", "DUMMY_ACTION"]
