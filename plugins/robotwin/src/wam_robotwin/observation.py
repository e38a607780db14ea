"""RoboTwin's ``get_obs()`` dictionary -> wamcore's physical :class:`Observation`.

The dictionary layout is RoboTwin's (``envs/_base_task.py`` ``get_obs``):
``observation.<camera>.rgb`` uint8 HxWx3 (SAPIEN renders with the top-left pixel first, so
images keep their native orientation), ``joint_action.vector`` (14 drive targets: left 6 joints,
left gripper, right 6 joints, right gripper), ``endpose.{left,right}_endpose`` (world-frame
x, y, z, qw, qx, qy, qz) and ``endpose.{left,right}_gripper`` (last commanded, 1 = open).
Measured joint positions are not in that dictionary; they come from the robot's
``get_{left,right}_arm_real_jointState()`` (6 joints, then the gripper value).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from wamcore import Observation
from wamcore.errors import EnvironmentFailure

#: wamcore camera role -> RoboTwin camera name (as RPent maps them: RLinf/RPent
#: ``robots/robotwin/observation.py``)
CAMERA_NAMES = {"head": "head_camera", "left_wrist": "left_camera", "right_wrist": "right_camera"}


def _get(raw: Mapping[str, Any], *path: str) -> Any:
    node: Any = raw
    for i, key in enumerate(path):
        if not isinstance(node, Mapping) or key not in node:
            raise EnvironmentFailure(
                f"RoboTwin's get_obs() has no {'.'.join(path[: i + 1])}: the task config must collect the head and "
                "wrist cameras with data_type rgb, qpos and endpose set to true"
            )
        node = node[key]
    return node


def _vector(value: Any) -> np.ndarray:
    return np.array(value, dtype=np.float64).reshape(-1)


def physical_observation(
    raw: Mapping[str, Any],
    *,
    left_measured: Sequence[float],
    right_measured: Sequence[float],
    instruction: str,
    step: int,
) -> Observation:
    """One observation from a ``get_obs()`` dictionary and the two measured joint states.

    Arrays are copied (RoboTwin's rgb is a strided view of its RGBA buffer, and the task
    reuses its buffers), so the observation stays valid after the next action."""
    images = {role: np.array(_get(raw, "observation", name, "rgb"), order="C") for role, name in CAMERA_NAMES.items()}
    state = {
        "joint_targets": _vector(_get(raw, "joint_action", "vector")),
        "joint_positions": np.concatenate([_vector(left_measured)[:-1], _vector(right_measured)[:-1]]),
        "left_eef_pose": _vector(_get(raw, "endpose", "left_endpose")),
        "right_eef_pose": _vector(_get(raw, "endpose", "right_endpose")),
        "left_gripper": _vector(_get(raw, "endpose", "left_gripper")),
        "right_gripper": _vector(_get(raw, "endpose", "right_gripper")),
    }
    return Observation(images=images, state=state, instruction=instruction or "", step=int(step))
