"""Stand-in for RoboTwin's ``Base_Task``: the calls the wamcore plugin makes, with RoboTwin's
signatures and rules, over a toy dual-arm "simulation" (no SAPIEN).

Rules kept from RoboTwin (envs/_base_task.py, envs/robot/robot.py):
* ``setup_demo`` seeds ``np.random`` with ``seed``, builds the scene, homes the arms, commands
  both grippers to 1.0 (open), resets ``take_action_cnt``/``eval_success``/``instruction``,
  loads ``step_lim`` from ./task_config/_eval_step_limit.yml when ``eval_mode`` (else None),
  and opens its assets with paths relative to the working directory;
* ``take_action`` is a no-op when ``take_action_cnt == step_lim`` or ``eval_success``; otherwise
  counts one action, moves over several physics steps and sets ``eval_success`` (and refreshes
  ``now_obs``) at the first physics step where ``check_success()`` holds, returning early;
* grippers are clipped to [0, 1]; ``joint_action`` holds drive targets, the robot's
  ``get_*_arm_real_jointState`` the measured joints (then the gripper value);
* ``action_type="ee"`` takes 16 values, per arm a world-frame pose (x, y, z, qw, qx, qy, qz,
  the quaternion normalised as transforms3d's ``quat2mat`` does) and the gripper; the stand-in's
  "planner" is the exact inverse of its ``endpose`` (yaw from the quaternion, joints 1 and 2
  from y and z), where RoboTwin plans with cuRobo.
Every input is checked, so the tests fail if the plugin calls RoboTwin differently.
"""

import copy
import os

import numpy as np
import yaml

from .utils.create_actor import UnStableError

ARM = 6
SUBSTEPS = 5  # physics steps per take_action (RoboTwin: TOPP's step count)
TRACKING = 0.5  # measured joints move this fraction toward the drive target per physics step
REQUIRED_KWARGS = (
    "seed", "now_ep_num", "is_test", "task_name", "task_config", "eval_mode", "render_freq",
    "domain_randomization", "camera", "data_type", "left_robot_file", "right_robot_file",
    "left_embodiment_config", "right_embodiment_config", "dual_arm_embodied", "head_camera_h", "head_camera_w",
)


class Robot:
    """The robot calls the plugin makes (measured joint states)."""

    def __init__(self):
        self.left_target = np.zeros(ARM)
        self.right_target = np.zeros(ARM)
        self.left_measured = np.zeros(ARM)
        self.right_measured = np.zeros(ARM)
        self.left_gripper_val = 1.0
        self.right_gripper_val = 1.0

    def get_left_arm_jointState(self) -> list:
        return [float(v) for v in self.left_target] + [self.left_gripper_val]

    def get_right_arm_jointState(self) -> list:
        return [float(v) for v in self.right_target] + [self.right_gripper_val]

    def get_left_arm_real_jointState(self) -> list:
        return [float(v) for v in self.left_measured] + [self.left_gripper_val]

    def get_right_arm_real_jointState(self) -> list:
        return [float(v) for v in self.right_measured] + [self.right_gripper_val]

    def get_left_gripper_val(self):
        return self.left_gripper_val

    def get_right_gripper_val(self):
        return self.right_gripper_val


def _pose_to_joints(pose, current):
    """The inverse of ``_endpose`` for the joints it depends on; the others keep their targets."""
    q = np.asarray(pose[3:7], dtype=np.float64)
    q = q / np.linalg.norm(q)
    joints = np.array(current, dtype=np.float64)
    joints[0] = 2.0 * np.arctan2(q[3], q[0])
    joints[1] = (pose[1] + 0.2) / 0.05
    joints[2] = (pose[2] - 0.9) / 0.05
    return joints


def _endpose(joints, side):
    """A world-frame pose [x, y, z, qw, qx, qy, qz] (scalar-first quaternion) from the joints."""
    yaw = float(joints[0])
    x = (-0.3 if side == "left" else 0.3) + 0.1 * np.sin(yaw)
    return [x, -0.2 + 0.05 * float(joints[1]), 0.9 + 0.05 * float(joints[2]), float(np.cos(yaw / 2)), 0.0, 0.0, float(np.sin(yaw / 2))]


class Base_Task:
    #: call log the tests read: (name, details)
    calls: list

    def __init__(self):
        self.calls = []
        self.fail_on_action = None  # tests: take_action raises on this call number
        self.fail_setup = None  # tests: setup_demo raises this message (a broken install)
        self.robot = None

    # ---------------------------------------------------------------- episode set-up

    def _init_task_env_(self, **kwargs):
        missing = [k for k in REQUIRED_KWARGS if k not in kwargs]
        assert not missing, f"setup_demo misses {missing}"
        assert "eval_video_save_dir" not in kwargs, "eval_video_save_dir needs an attached ffmpeg process"
        assert kwargs["is_test"] is True and kwargs["render_freq"] == 0
        seed = kwargs["seed"]
        assert isinstance(seed, int), f"seed must be an int, got {type(seed).__name__}"
        # RoboTwin opens assets relative to the working directory
        with open(os.path.join(kwargs["left_robot_file"], "config.yml")) as f:
            assert yaml.safe_load(f)["arm_joints_name"]
        self.calls.append(("setup_demo", {"seed": seed, "now_ep_num": kwargs["now_ep_num"]}))
        if self.fail_setup:
            raise NameError(self.fail_setup)
        np.random.seed(seed)
        self.seed = seed
        self.task_name = kwargs["task_name"]
        self.data_type = kwargs["data_type"]
        with open("./task_config/_camera_config.yml") as f:
            cams = yaml.safe_load(f)
        head = cams[kwargs["camera"]["head_camera_type"]]
        wrist = cams[kwargs["camera"]["wrist_camera_type"]]
        assert (head["h"], head["w"]) == (kwargs["head_camera_h"], kwargs["head_camera_w"])
        self.sizes = {"head_camera": (head["h"], head["w"]), "left_camera": (wrist["h"], wrist["w"]), "right_camera": (wrist["h"], wrist["w"])}
        if self.robot is None:
            self.robot = Robot()
        else:
            self.robot.__init__()
        self.take_action_cnt = 0
        self.eval_success = False
        self.plan_success = True
        self.instruction = None
        self.now_obs = {}
        self.step_lim = None
        self.load_actors()
        if seed % 5 == 1:
            raise UnStableError(f"Objects is unstable in seed({seed})")
        if kwargs["eval_mode"]:
            with open("./task_config/_eval_step_limit.yml") as f:
                self.step_lim = yaml.safe_load(f).get(self.task_name, 1000)
        self.info = {"info": {}}

    def close_env(self, clear_cache=False):
        self.calls.append(("close_env", {"clear_cache": clear_cache}))

    def set_instruction(self, instruction=None):
        self.calls.append(("set_instruction", {"instruction": instruction}))
        self.instruction = instruction

    def get_instruction(self, instruction=None):
        return self.instruction

    # ---------------------------------------------------------------- observation

    def get_obs(self):
        self.calls.append(("get_obs", {"take_action_cnt": self.take_action_cnt}))
        obs = {"observation": {}, "pointcloud": [], "joint_action": {}, "endpose": {}}
        for name, (h, w) in self.sizes.items():
            obs["observation"][name] = {
                "intrinsic_cv": np.eye(3),
                "extrinsic_cv": np.zeros((3, 4)),
                "cam2world_gl": np.eye(4),
            }
            if self.data_type.get("rgb", False):
                obs["observation"][name]["rgb"] = self._render(name, h, w)[:, :, :3]  # a view of RGBA, as SAPIEN's
        left = self.robot.get_left_arm_jointState()
        right = self.robot.get_right_arm_jointState()
        if self.data_type.get("endpose", False):
            obs["endpose"] = {
                "left_endpose": _endpose(self.robot.left_measured, "left"),
                "left_gripper": self.robot.get_left_gripper_val(),
                "right_endpose": _endpose(self.robot.right_measured, "right"),
                "right_gripper": self.robot.get_right_gripper_val(),
            }
        if self.data_type.get("qpos", False):
            obs["joint_action"] = {
                "left_arm": left[:-1],
                "left_gripper": left[-1],
                "right_arm": right[:-1],
                "right_gripper": right[-1],
                "vector": np.array(left + right),
            }
        self.now_obs = copy.deepcopy(obs)
        return obs

    def _render(self, name, h, w):
        """RGBA uint8 with the top-left pixel first: the table, the goal marker, the arms."""
        img = np.zeros((h, w, 4), dtype=np.uint8)
        img[..., 3] = 255
        img[h // 2 :, :, :3] = (120, 90, 60)  # table in the lower half
        gx = int((self.goal + 1.5) / 3.0 * (w - 1))
        img[h // 2 : h // 2 + 4, max(gx - 2, 0) : gx + 2, 0] = 255
        for k, joints in enumerate((self.robot.left_measured, self.robot.right_measured)):
            ax = int(np.clip((joints[0] + 1.5) / 3.0, 0, 1) * (w - 1))
            img[: h // 2, ax, 1 + k] = 255
        if name != "head_camera":
            val = self.robot.left_gripper_val if name == "left_camera" else self.robot.right_gripper_val
            img[:4, :, :3] = int(255 * val)
        return img

    # ---------------------------------------------------------------- control

    def take_action(self, action, action_type="qpos"):
        assert action_type in ("qpos", "ee"), action_type
        if self.take_action_cnt == self.step_lim or self.eval_success:
            return
        action = sent = np.asarray(action)
        assert action.dtype == np.float64, action.dtype
        if action_type == "ee":
            assert action.shape == (16,), f"ee action must have 16 values, got {action.shape}"
            action = np.concatenate([
                _pose_to_joints(action[:7], self.robot.left_target), action[7:8],
                _pose_to_joints(action[8:15], self.robot.right_target), action[15:16],
            ])
        assert action.shape == (2 * ARM + 2,), f"qpos action must have 14 values, got {action.shape}"
        self.take_action_cnt += 1
        print(f"step: {self.take_action_cnt} / {self.step_lim}", end="\r")  # as RoboTwin does
        self.calls.append(("take_action", {"action": sent.copy(), "action_type": action_type}))
        if self.fail_on_action == self.take_action_cnt:
            raise RuntimeError("TOPP failed: path is not feasible")
        start_l, start_r = self.robot.left_target.copy(), self.robot.right_target.copy()
        start_lg, start_rg = self.robot.left_gripper_val, self.robot.right_gripper_val
        goal_l, goal_r = action[:ARM], action[ARM + 1 : 2 * ARM + 1]
        goal_lg, goal_rg = float(np.clip(action[ARM], 0, 1)), float(np.clip(action[2 * ARM + 1], 0, 1))
        for i in range(1, SUBSTEPS + 1):
            f = i / SUBSTEPS
            self.robot.left_target = start_l + f * (goal_l - start_l)
            self.robot.right_target = start_r + f * (goal_r - start_r)
            self.robot.left_gripper_val = start_lg + f * (goal_lg - start_lg)
            self.robot.right_gripper_val = start_rg + f * (goal_rg - start_rg)
            self.robot.left_measured += TRACKING * (self.robot.left_target - self.robot.left_measured)
            self.robot.right_measured += TRACKING * (self.robot.right_target - self.robot.right_measured)
            if self.check_success():
                self.eval_success = True
                self.get_obs()
                return
