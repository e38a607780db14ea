"""LingBot-VA's RoboTwin adapter and the client's pose arithmetic (Robbyant/lingbot-va at
6f092cb, ``evaluation/robotwin/eval_polict_client_openpi.py``).

* What the server gets is the client's frame dictionary (``format_obs``): the head and wrist
  cameras as they are (RoboTwin's native orientation, 240x320), ``joint_action.vector`` as
  ``observation.state`` (the server never reads it) and the prompt as ``task``.
* What the server returns is ``[16, F, 16]`` (channels, latent frames, actions per frame): per
  arm a translation, a quaternion and a gripper *relative to the episode's initial end-effector
  pose*. The client turns each action into an absolute ee16 pose with ``add_init_pose``:
  translations are added; rotations are composed with SciPy as
  ``R.from_quat(init_q) * R.from_quat(a_q)``, where SciPy reads quaternions scalar *last*
  while both arrays are RoboTwin's scalar-*first* ones, and the product (``as_quat()``, scalar
  last) goes back to RoboTwin as it is, then divided by its norm; grippers are absolute.
  :func:`compose` does that arithmetic in numpy, operation for operation (the tests compare
  it with SciPy value by value). Whether the model was trained with the same quirk is not in
  the public code; reproducing it is what makes this client equal upstream's.
* wamcore's chunk is one *keyframe interval*: the client observes after every 4th action
  (``(j + 1) % (16 // 4) == 0``), so each prediction executes 4 actions and the next
  request's observation is the keyframe the server is fed (``wam_lingbot_va.session``).
"""

from __future__ import annotations

from typing import Any, Dict, List

import numpy as np

from wamcore import Adapter, AdapterContract, PredictRequest, Prediction
from wamcore.errors import PredictionError

PLATFORM = "robotwin"
ACTION_SPACE = "robotwin.endpose.ee16.v1"  # wam_robotwin.spec.EE_ACTION_SPACE
ACTION_DIM = 16
CAMERA_SIZE = (240, 320)  # D435, what upstream's evaluation renders (task_config demo_clean)
#: wamcore camera role -> the client's frame key (``format_obs``)
CAMERAS = {
    "head": "observation.images.cam_high",
    "left_wrist": "observation.images.cam_left_wrist",
    "right_wrist": "observation.images.cam_right_wrist",
}
STATE = {"joint_targets": 14, "left_eef_pose": 7, "left_gripper": 1, "right_eef_pose": 7, "right_gripper": 1}
#: actions per latent frame in the robotwin config (``action_per_frame``), and the client's
#: keyframe interval ``action.shape[2] // 4``: wamcore's chunk
ACTIONS_PER_FRAME = 16
KEYFRAME_INTERVAL = ACTIONS_PER_FRAME // 4


def initial_pose(request: PredictRequest) -> np.ndarray:
    """The client's ``init`` vector: left endpose, left gripper, right endpose, right gripper (float64)."""
    s = request.observation.state
    return np.concatenate([s["left_eef_pose"], s["left_gripper"], s["right_eef_pose"], s["right_gripper"]]).astype(
        np.float64)


def encode(request: PredictRequest) -> Dict[str, Any]:
    """The frame upstream's client sends (``format_obs``), plus this observation's initial pose."""
    obs = request.observation
    frame = {key: np.ascontiguousarray(obs.images[role]) for role, key in CAMERAS.items()}
    frame["observation.state"] = np.asarray(obs.state["joint_targets"], dtype=np.float64)
    frame["task"] = request.effective_instruction
    return {"frame": frame, "pose": initial_pose(request), "step": int(obs.step), "prompt": request.effective_instruction}


def decode(native: np.ndarray, request: PredictRequest) -> Prediction:
    return Prediction(actions=np.asarray(native, dtype=np.float32))


def _scipy_xyzw_product(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """SciPy's ``Rotation.__mul__`` on two 4-vectors read scalar-last, each normalised first
    (``from_quat``), the product normalised again as SciPy stores it."""
    p = p / np.linalg.norm(p)
    q = q / np.linalg.norm(q)
    xyz = p[3] * q[:3] + q[3] * p[:3] + np.cross(p[:3], q[:3])
    w = p[3] * q[3] - np.dot(p[:3], q[:3])
    out = np.array([xyz[0], xyz[1], xyz[2], w])
    return out / np.linalg.norm(out)


def compose(action: np.ndarray, init: np.ndarray) -> np.ndarray:
    """One 16-D model action -> the absolute ee16 row upstream's client executes
    (``add_init_pose`` then the re-normalisation of both quaternions), in float64."""
    a = np.asarray(action, dtype=np.float64)
    rows = []
    for arm in (slice(0, 8), slice(8, 16)):
        new, base = a[arm], init[arm]
        rot = _scipy_xyzw_product(base[3:7], new[3:7])
        rows += [new[:3] + base[:3], rot / np.linalg.norm(rot), new[7:8]]
    return np.concatenate(rows)


def executed_rows(chunk: np.ndarray, init: np.ndarray, first: bool) -> List[np.ndarray]:
    """Every row the client executes from one ``[16, F, 16]`` chunk, in its order (frame by
    frame); the first chunk's frame 0 is the zero-pinned conditioning frame and is skipped."""
    rows = []
    for i in range(1 if first else 0, chunk.shape[1]):
        for j in range(chunk.shape[2]):
            rows.append(compose(chunk[:, i, j], init))
    return rows


def check_chunk(chunk: Any) -> np.ndarray:
    """The server's ``action``: finite floats ``[16, F, 16]``, every quaternion usable."""
    arr = np.asarray(chunk)
    problems = []
    if arr.dtype.kind != "f":
        problems.append(f"action must be floats, got {arr.dtype}")
    elif arr.ndim != 3 or arr.shape[0] != ACTION_DIM or arr.shape[1] < 1 or arr.shape[2] != ACTIONS_PER_FRAME:
        problems.append(f"action must have shape [{ACTION_DIM}, frames, {ACTIONS_PER_FRAME}] (the robotwin config), "
                        f"got {list(arr.shape)}")
    elif not np.isfinite(arr).all():
        problems.append("action holds NaN or inf")
    else:
        norms = np.linalg.norm(arr[[3, 4, 5, 6, 11, 12, 13, 14]].reshape(2, 4, -1).astype(np.float64), axis=1)
        if (norms == 0).any():
            problems.append("a predicted quaternion is zero (SciPy's from_quat refuses it, so would upstream's client)")
    if problems:
        raise PredictionError(problems, context="LingBot-VA server reply")
    return np.array(arr, copy=True)


def robotwin_adapter() -> Adapter:
    contract = AdapterContract(
        platform=PLATFORM,
        action_space=ACTION_SPACE,
        action_dim=ACTION_DIM,
        cameras={role: CAMERA_SIZE for role in CAMERAS},
        state=STATE,
        chunk_size=KEYFRAME_INTERVAL,
    )
    return Adapter(contract=contract, encode=encode, decode=decode)


__all__ = ["robotwin_adapter", "compose", "executed_rows", "check_chunk", "initial_pose", "encode", "CAMERAS",
           "KEYFRAME_INTERVAL", "ACTIONS_PER_FRAME", "ACTION_SPACE"]
