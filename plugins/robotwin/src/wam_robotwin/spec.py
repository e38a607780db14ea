"""RoboTwin 2.0's physical observation and qpos control, as wamcore contracts (no import of
RoboTwin). Facts: RoboTwin-Platform/RoboTwin ``envs/_base_task.py`` ``get_obs`` and
``take_action``, ``task_config/_camera_config.yml`` (aloha-agilex embodiment, D435 cameras
320x240); RPent's qpos14 control (RLinf/RPent ``robots/robotwin/control.py``) has the same
layout."""

from __future__ import annotations

from wamcore import ControlSpec, GripperSpec, ObservationSpec

PLATFORM = "robotwin"
ACTION_SPACE = "robotwin.joint_action.qpos14.v1"
CAMERA_SIZE = (240, 320)  # D435, H x W

ACTION_NAMES = tuple(
    [f"left_joint_{i}" for i in range(6)] + ["left_gripper"] + [f"right_joint_{i}" for i in range(6)] + ["right_gripper"]
)

#: Absolute joint targets in rad, grippers normalised to [0, 1] (1 = open, 0 = closed);
#: executed one row at a time with ``take_action(a, action_type="qpos")``.
ROBOTWIN_CONTROL = ControlSpec(
    action_space=ACTION_SPACE,
    action_names=ACTION_NAMES,
    chunk_min=1,
    chunk_max=None,
    gripper=GripperSpec(indices=(6, 13), open=1.0, close=0.0),
    rate_hz=None,
    description=(
        "aloha-agilex qpos14: [left 6 joints (rad), left gripper, right 6 joints (rad), right gripper], "
        "absolute joint targets; grippers in [0, 1], 1 = open, 0 = closed (RoboTwin clips them)"
    ),
)

STATE_SIZES = {
    "joint_targets": 14,
    "joint_positions": 12,
    "left_eef_pose": 7,
    "right_eef_pose": 7,
    "left_gripper": 1,
    "right_gripper": 1,
}
STATE_UNITS = {
    "joint_targets": "controller set-points, qpos14 layout (joint_action.vector): rad, grippers in [0, 1]",
    "joint_positions": "rad, measured arm joints: left 6 then right 6",
    "left_eef_pose": "world frame x, y, z (m) then quaternion w, x, y, z (endpose.left_endpose)",
    "right_eef_pose": "world frame x, y, z (m) then quaternion w, x, y, z (endpose.right_endpose)",
    "left_gripper": "normalised [0, 1], 1 = open (last commanded)",
    "right_gripper": "normalised [0, 1], 1 = open (last commanded)",
}

ROBOTWIN_OBSERVATION = ObservationSpec(
    cameras={"head": CAMERA_SIZE, "left_wrist": CAMERA_SIZE, "right_wrist": CAMERA_SIZE},
    state=STATE_SIZES,
    units=STATE_UNITS,
)
