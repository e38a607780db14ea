"""LIBERO's physical observation and control, as wamcore contracts (no simulator import).

Facts: robosuite 1.4 (ARISE-Initiative/robosuite ``robosuite/controllers/config/osc_pose.json``
for the OSC_POSE scaling, ``robosuite/models/grippers/panda_gripper.py`` for the gripper sign,
the ``robot0_*`` observation keys) and LIBERO (Lifelong-Robot-Learning/LIBERO
``libero/libero/envs/``, 20 Hz control); RPent's LIBERO platform uses the same names
(RLinf/RPent ``robots/libero/``). Model adapters rely on exactly these names, units and
conventions.
"""

from __future__ import annotations

from wamcore import CameraInfo, ControlSpec, GripperSpec, ObservationSpec

PLATFORM = "libero"
ACTION_SPACE = "libero.osc_pose.delta.v1"
DEFAULT_RESOLUTION = 256

#: robosuite OSC_POSE (delta) inputs; the controller clips each to [-1, 1] and scales the
#: first three by 0.05 m and the next three by 0.5 rad; 20 Hz control.
LIBERO_CONTROL = ControlSpec(
    action_space=ACTION_SPACE,
    action_names=(
        "delta_x",
        "delta_y",
        "delta_z",
        "delta_axis_angle_x",
        "delta_axis_angle_y",
        "delta_axis_angle_z",
        "gripper",
    ),
    chunk_min=1,
    chunk_max=None,
    gripper=GripperSpec(indices=(6,), open=-1.0, close=1.0),
    low=(-1.0,) * 7,
    high=(1.0,) * 7,
    rate_hz=20.0,
    description=(
        "robosuite 1.4 OSC_POSE delta of the end-effector pose: translation x 0.05 m and axis-angle "
        "rotation x 0.5 rad per unit, inputs clipped to [-1, 1]; gripper -1 = open, +1 = close; 20 Hz"
    ),
)

STATE_UNITS = {
    "eef_position": "m, world frame (robot0_eef_pos)",
    "eef_quaternion_xyzw": "unit quaternion x, y, z, w (robosuite robot0_eef_quat)",
    "gripper_qpos": "m, the two finger joint positions (robot0_gripper_qpos)",
    "joint_positions": "rad, the 7 arm joints (robot0_joint_pos)",
}
STATE_SIZES = {"eef_position": 3, "eef_quaternion_xyzw": 4, "gripper_qpos": 2, "joint_positions": 7}


#: the robosuite cameras behind each role; robosuite renders bottom-up, the env flips rows once
CAMERA_INFO = {
    "primary": CameraInfo("agentview", "flipud", "robosuite's front view of the table and the robot"),
    "wrist": CameraInfo("robot0_eye_in_hand", "flipud", "robosuite's camera on the Panda's hand"),
}


def observation_spec(resolution: int = DEFAULT_RESOLUTION, cameras: bool = True) -> ObservationSpec:
    """Cameras ``primary`` (agentview) and ``wrist`` (eye-in-hand), square, top-left origin.

    robosuite renders bottom-up; the platform flips each image once vertically (``img[::-1]``),
    which is Cosmos Policy's ``np.flipud`` input (NVlabs/cosmos-policy
    ``cosmos_policy/experiments/robot/libero/libero_utils.py``). Models trained on images
    rotated 180° (Fast-WAM, StarWAM, openpi: ``[::-1, ::-1]``) add a left-right flip in their
    adapter. ``cameras=False`` (``--no-cameras``): no camera at all, for policies that read
    no images (pairing then refuses any model that needs one)."""
    r = int(resolution)
    roles = {"primary": (r, r), "wrist": (r, r)} if cameras else {}
    return ObservationSpec(cameras=roles, state=STATE_SIZES, units=STATE_UNITS,
                           camera_info={k: v for k, v in CAMERA_INFO.items() if k in roles})


LIBERO_OBSERVATION = observation_spec()
