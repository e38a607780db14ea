"""LeRobot's own evaluation path, called directly on recorded raw LIBERO observations: the
reference the plugin's actions must equal. Run in the model environment (``.venv-lerobot``).

It does what LeRobot 0.4.4 does for each env step, written from its sources and calling its
functions (huggingface/lerobot v0.4.4): ``LiberoEnv._format_raw_obs`` (``envs/libero.py``;
rebuilt here from the raw robosuite observation, since LeRobot's env module needs the LIBERO
package, which lives in the platform's environment), then ``lerobot_eval.rollout``
(``scripts/lerobot_eval.py``): ``preprocess_observation``, ``add_envs_task``, the env's
preprocessor, the policy's preprocessor, ``select_action`` under ``inference_mode``, the
policy's postprocessor, the env's postprocessor; the policy and processors loaded as
``lerobot-eval`` loads them; ``torch.manual_seed`` once, before the first step.

Besides the actions it writes, for the test's controls, the policy's raw outputs (before the
postprocessor) and the actions the same path gives on the images as wamcore's LIBERO observes
them (flipped vertically once): an adapter that forgot to undo that flip would give these.

Usage: python lerobot_reference.py POLICY_DIR RAW.npz SEED OUT.npz
"""

from __future__ import annotations

import sys

import numpy as np

from wam_lerobot.torchvision_ops import ensure_torchvision_importable

ensure_torchvision_importable()  # this machine's torchvision is a CUDA build (see that module)

import torch  # noqa: E402
from lerobot.configs.policies import PreTrainedConfig  # noqa: E402
from lerobot.envs.configs import LiberoEnv  # noqa: E402
from lerobot.envs.factory import make_env_pre_post_processors  # noqa: E402
from lerobot.envs.utils import preprocess_observation  # noqa: E402
from lerobot.policies.factory import get_policy_class, make_pre_post_processors  # noqa: E402


def format_raw_obs(raw, i: int, flip_images: bool = False) -> dict:
    """``LiberoEnv._format_raw_obs`` (obs_type ``pixels_agent_pos``) of step ``i``, with the
    batch axis of LeRobot's vector env of one."""
    image = (lambda a: a[::-1].copy()) if flip_images else (lambda a: a)
    one = lambda key: raw[key][i][None]  # noqa: E731
    return {
        "pixels": {"image": image(raw["agentview_image"][i])[None], "image2": image(raw["robot0_eye_in_hand_image"][i])[None]},
        "robot_state": {
            "eef": {"pos": one("robot0_eef_pos"), "quat": one("robot0_eef_quat"), "mat": one("ee_ori_mat")},
            "gripper": {"qpos": one("robot0_gripper_qpos"), "qvel": one("robot0_gripper_qvel")},
            "joints": {"pos": one("robot0_joint_pos"), "vel": one("robot0_joint_vel")},
        },
    }


def rollout(path: str, raw, task: str, seed: int, flip_images: bool = False):
    cfg = PreTrainedConfig.from_pretrained(path)
    cfg.device = "cpu"
    policy = get_policy_class(cfg.type).from_pretrained(path, config=cfg)
    policy.eval()
    preprocessor, postprocessor = make_pre_post_processors(
        cfg, pretrained_path=path, preprocessor_overrides={"device_processor": {"device": "cpu"}})
    env_preprocessor, env_postprocessor = make_env_pre_post_processors(LiberoEnv(), cfg)
    policy.reset()
    torch.manual_seed(seed)
    actions, outputs = [], []
    for i in range(len(raw["agentview_image"])):
        observation = preprocess_observation(format_raw_obs(raw, i, flip_images))
        observation["task"] = [task]  # add_envs_task
        observation = env_preprocessor(observation)
        observation = preprocessor(observation)
        with torch.inference_mode():
            action = policy.select_action(observation)
        outputs.append(action.numpy().copy())
        action = postprocessor(action)
        action = env_postprocessor({"action": action})["action"]
        actions.append(action.to("cpu").numpy())
    return np.concatenate(actions), np.concatenate(outputs)


def main(path: str, raw_path: str, seed: str, out: str) -> None:
    raw = dict(np.load(raw_path))
    task = str(raw.pop("task"))
    actions, outputs = rollout(path, raw, task, int(seed))
    flipped, _ = rollout(path, raw, task, int(seed), flip_images=True)
    np.savez(out, actions=actions, policy_outputs=outputs, actions_on_wamcore_images=flipped)


if __name__ == "__main__":
    main(*sys.argv[1:5])
