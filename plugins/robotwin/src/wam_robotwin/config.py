"""RoboTwin's own YAML configs, read the way its ``script/eval_policy.py`` reads them.

Builds the keyword arguments of ``setup_demo`` (as ``script/eval_policy.py`` ``main`` does;
``envs/_base_task.py`` ``_init_task_env_`` consumes them):
the task config YAML plus the task name, the embodiment files and configs, the head camera
size and ``eval_mode=True`` (which makes RoboTwin load the task's step limit). Also derives
what wamcore must know before RoboTwin is imported: the camera sizes
(``task_config/_camera_config.yml``), the step limit (``task_config/_eval_step_limit.yml``)
and whether the embodiment speaks qpos14. Nothing here imports RoboTwin.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Dict, Mapping, Tuple

import attrs

from wamcore import ObservationSpec
from wamcore.errors import ConfigurationError

from .install import RoboTwinNotInstalled, config_dir, resolve_root
from .spec import ROBOTWIN_OBSERVATION, STATE_SIZES, STATE_UNITS

#: RoboTwin's default when a task is missing from _eval_step_limit.yml (envs/_base_task.py).
DEFAULT_STEP_LIMIT = 1000
#: qpos14 = 6 arm joints + gripper per arm (aloha-agilex); other arm sizes are other action spaces.
ARM_JOINTS = 6
#: Parts of get_obs() the observation needs (task config ``camera`` and ``data_type`` keys).
REQUIRED_CAMERA_FLAGS = ("collect_head_camera", "collect_wrist_camera")
REQUIRED_DATA_TYPES = ("rgb", "qpos", "endpose")


def read_yaml(path: Path) -> Any:
    import yaml

    with open(path, "r", encoding="utf-8") as f:
        return yaml.safe_load(f)


@attrs.frozen
class TaskSetup:
    """One task under one task config of one checkout."""

    root: Path
    task: str
    task_config: str
    #: keyword arguments of ``setup_demo`` (besides seed, now_ep_num and is_test)
    demo_args: dict
    #: RoboTwin's step limit for the task (take_action calls per episode)
    step_limit: int
    #: camera role -> (H, W)
    cameras: dict
    clear_cache_freq: int = 5

    @property
    def observation_spec(self) -> ObservationSpec:
        return observation_spec(self.cameras)


def observation_spec(cameras: Mapping[str, Tuple[int, int]]) -> ObservationSpec:
    return ObservationSpec(cameras=dict(cameras), state=STATE_SIZES, units=STATE_UNITS)


def camera_sizes(camera_types: Mapping[str, Any], camera: Mapping[str, Any]) -> Dict[str, Tuple[int, int]]:
    """(H, W) per wamcore role from the config's ``camera`` block and _camera_config.yml."""
    out = {}
    for roles, key in ((("head",), "head_camera_type"), (("left_wrist", "right_wrist"), "wrist_camera_type")):
        kind = camera.get(key, "D435")
        if kind not in camera_types:
            raise ConfigurationError(f"camera type {kind!r} ({key}) is not in _camera_config.yml (has: {sorted(camera_types)})")
        size = (int(camera_types[kind]["h"]), int(camera_types[kind]["w"]))
        out.update({role: size for role in roles})
    return out


def load_setup(root: Path, task: str, task_config: str) -> TaskSetup:
    """Read and check everything a task needs; errors name the file and the fix."""
    cfg_dir = config_dir(root)
    _check_task(root, task)
    cfg_path = cfg_dir / f"{task_config}.yml"
    if not cfg_path.is_file():
        known = sorted(p.stem for p in cfg_dir.glob("*.yml") if not p.stem.startswith("_"))
        raise ConfigurationError(f"task config {task_config!r} not found at {cfg_path} (available: {', '.join(known) or 'none'})")
    args = dict(read_yaml(cfg_path) or {})
    _check_observation_parts(args, cfg_path)
    camera_types = read_yaml(cfg_dir / "_camera_config.yml")
    cameras = camera_sizes(camera_types, args["camera"])
    args.update(_embodiment_args(root, cfg_dir, args.get("embodiment"), cfg_path))
    args["head_camera_h"], args["head_camera_w"] = cameras["head"]
    args.update(task_name=task, task_config=task_config, eval_mode=True, render_freq=0)
    # eval_video_save_dir is left out: take_action would then write frames to an ffmpeg
    # process the caller must attach (``envs/_base_task.py`` ``take_action``); wamcore
    # records video itself.
    args.pop("eval_video_save_dir", None)
    limits = read_yaml(cfg_dir / "_eval_step_limit.yml") or {}
    return TaskSetup(
        root=root,
        task=task,
        task_config=task_config,
        demo_args=args,
        step_limit=int(limits.get(task, DEFAULT_STEP_LIMIT)),
        cameras=cameras,
        clear_cache_freq=int(args.get("clear_cache_freq", 5) or 5),
    )


def _check_task(root: Path, task: str) -> None:
    if (root / "envs" / f"{task}.py").is_file():
        return
    tasks = sorted(p.stem for p in (root / "envs").glob("*.py") if not p.stem.startswith("_"))
    close = difflib.get_close_matches(task, tasks, n=3)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise ConfigurationError(f"RoboTwin task {task!r} not found (no envs/{task}.py in {root}).{hint} Tasks: {', '.join(tasks)}")


def _check_observation_parts(args: Mapping[str, Any], cfg_path: Path) -> None:
    camera, data_type = args.get("camera") or {}, args.get("data_type") or {}
    off = [f"camera.{k}" for k in REQUIRED_CAMERA_FLAGS if not camera.get(k, True)]
    off += [f"data_type.{k}" for k in REQUIRED_DATA_TYPES if not data_type.get(k, False)]
    if off:
        raise ConfigurationError(
            f"{cfg_path} turns off {', '.join(off)}; the robotwin platform needs the head and wrist RGB cameras, "
            "joint_action and endpose in get_obs(): set them to true (as demo_clean does)"
        )


def _embodiment_args(root: Path, cfg_dir: Path, embodiment, cfg_path: Path) -> dict:
    """Robot files and configs as eval_policy.py derives them from ``embodiment``."""
    if not isinstance(embodiment, list) or len(embodiment) not in (1, 3):
        raise ConfigurationError(f"{cfg_path}: embodiment must list 1 or 3 items, got {embodiment!r}")
    files = read_yaml(cfg_dir / "_embodiment_config.yml") or {}

    def robot_file(name: str) -> str:
        if name not in files or not files[name].get("file_path"):
            raise ConfigurationError(f"embodiment {name!r} has no file_path in {cfg_dir / '_embodiment_config.yml'}")
        return files[name]["file_path"]

    left, right = (embodiment[0], embodiment[0]) if len(embodiment) == 1 else (embodiment[0], embodiment[1])
    out: Dict[str, Any] = {"left_robot_file": robot_file(left), "right_robot_file": robot_file(right)}
    out["dual_arm_embodied"] = len(embodiment) == 1
    if len(embodiment) == 3:
        out["embodiment_dis"] = embodiment[2]
    for side, name in (("left", left), ("right", right)):
        cfg_file = root / out[f"{side}_robot_file"] / "config.yml"
        if not cfg_file.is_file():
            raise RoboTwinNotInstalled(f"{cfg_file} is missing: embodiment assets not downloaded (script/_download_assets.sh)")
        cfg = read_yaml(cfg_file)
        out[f"{side}_embodiment_config"] = cfg
        joints = len(cfg["arm_joints_name"][0 if side == "left" else 1])
        if joints != ARM_JOINTS:
            raise ConfigurationError(
                f"embodiment {name!r} has {joints} {side} arm joints; the robotwin platform executes "
                f"robotwin.joint_action.qpos14.v1 ({ARM_JOINTS} joints + gripper per arm, e.g. aloha-agilex)"
            )
    return out


def observation_for(options: Mapping[str, Any]) -> ObservationSpec:
    """The observation schema for platform options: camera sizes from the task config when a
    checkout is configured, else the demo configs' D435 cameras (240x320), so that pairing
    works in an environment without RoboTwin (a model's own environment)."""
    try:
        root = resolve_root(options.get("robotwin_root"))
        cfg_dir = config_dir(root)
        cfg = read_yaml(cfg_dir / f"{options.get('task_config') or 'demo_clean'}.yml") or {}
        return observation_spec(camera_sizes(read_yaml(cfg_dir / "_camera_config.yml"), cfg.get("camera") or {}))
    except (RoboTwinNotInstalled, OSError):
        return ROBOTWIN_OBSERVATION
