"""RoboTwin 2.0's physical observation and its two controls, as wamcore contracts (no import
of RoboTwin). Facts: RoboTwin-Platform/RoboTwin ``envs/_base_task.py`` ``get_obs`` and
``take_action``, ``task_config/_camera_config.yml`` (aloha-agilex embodiment, D435 cameras
320x240); RPent's qpos14 control (RLinf/RPent ``robots/robotwin/control.py``) has the same
layout. The end-effector control is ``take_action(a, action_type="ee")``: per arm a
world-frame pose in ``get_obs()``'s ``endpose`` convention (x, y, z, then the quaternion
scalar first, as ``robot._trans_from_gripper_to_endlink`` reads it with transforms3d's
``quat2mat``) and the gripper."""

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

EE_ACTION_SPACE = "robotwin.endpose.ee16.v1"
EE_ACTION_NAMES = tuple(
    f"{side}_{name}" for side in ("left", "right") for name in ("x", "y", "z", "qw", "qx", "qy", "qz", "gripper")
)
#: a quaternion further than this from unit length is refused before RoboTwin reads it (its
#: ``quat2mat`` would silently normalise it, and turn a zero quaternion into no rotation)
EE_QUATERNION_TOLERANCE = 1e-3

#: Absolute world-frame end-effector poses, executed one row at a time with
#: ``take_action(a, action_type="ee")`` (RoboTwin plans each arm to its pose with cuRobo).
ROBOTWIN_EE_CONTROL = ControlSpec(
    action_space=EE_ACTION_SPACE,
    action_names=EE_ACTION_NAMES,
    chunk_min=1,
    chunk_max=None,
    gripper=GripperSpec(indices=(7, 15), open=1.0, close=0.0),
    rate_hz=None,
    description=(
        "aloha-agilex ee16: per arm (left, then right) x, y, z (m, world frame), unit quaternion qw, qx, qy, qz "
        "(scalar first, as get_obs()'s endpose), gripper in [0, 1], 1 = open, 0 = closed (RoboTwin clips it)"
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
