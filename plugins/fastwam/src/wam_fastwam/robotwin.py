"""Fast-WAM's RoboTwin adapter, on the official FastWAM path (RLinf's wrapper lacks it).

Conventions of FastWAM's RoboTwin deployment (``experiments/robotwin/fastwam_policy/
deploy_policy.py`` ``_build_robotwin_image_tensor`` at 45d8e14, ``configs/data/robotwin.yaml``;
RPent's encoder, RLinf/RPent ``rpent/robots/components/fast_wam/adapter/encode.py``, matches):

* one 384x320 (HxW) image: the head camera resized (PIL bilinear) to 256x320 on top, the
  left and right wrist cameras resized to 128x160 each side by side below it
  (``[left | right]``); cameras in RoboTwin's native orientation (no flip). The worker then
  scales it to [-1, 1] at the model's dtype (``wam_fastwam.worker``);
* the state is the 14-D ``joint_action.vector`` (wamcore's ``joint_targets``, qpos14 layout:
  left 6 joints, left gripper, right 6 joints, right gripper), z-score normalised with the
  checkpoint's stats (``wam_fastwam.normalization``);
* the model predicts ``action_horizon`` (32) z-scored qpos14 rows; restored, they are native
  joint targets with grippers in [0, 1] (1 = open), no gripper post-processing; the first
  ``replan_steps`` (24, ``configs/sim_robotwin.yaml``) are executed.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import attrs
import numpy as np

from wamcore import Adapter, AdapterContract, PredictRequest, Prediction
from wamcore.errors import ConfigurationError, PredictionError

PLATFORM = "robotwin"
ACTION_SPACE = "robotwin.joint_action.qpos14.v1"
ACTION_DIM = 14
#: RoboTwin's D435 cameras, HxW (wam_robotwin.spec).
CAMERA_SIZE = (240, 320)
CAMERAS = ("head", "left_wrist", "right_wrist")
STATE = {"joint_targets": 14}
HEAD_SIZE = (256, 320)
WRIST_SIZE = (128, 160)
IMAGE_SIZE = (HEAD_SIZE[0] + WRIST_SIZE[0], HEAD_SIZE[1])
DEFAULT_REPLAN = 24
DEFAULT_HORIZON = 32
DEFAULT_INFERENCE_STEPS = 10
DEFAULT_CONFIG_NAME = "sim_robotwin"


@attrs.frozen
class RoboTwinSettings:
    """The RoboTwin deployment's options (``--replan-steps`` etc.), checked together."""

    replan_steps: int = DEFAULT_REPLAN
    action_horizon: int = DEFAULT_HORIZON
    num_inference_steps: int = DEFAULT_INFERENCE_STEPS
    config_dir: Optional[str] = None
    dataset_stats: Optional[str] = None
    pins: Optional[str] = None
    #: ``--text-cache``: upstream's text-embedding folder instead of the UMT5-XXL encoder
    text_cache: Optional[str] = None
    #: ``--fastwam-override``: Hydra overrides of ``sim_robotwin`` (architecture of generated weights)
    overrides: tuple = ()
    #: ``--cuda-graphs``: every prediction through the batched path, replayed from CUDA graphs
    cuda_graphs: bool = False

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> "RoboTwinSettings":
        def pick(key, default):
            value = options.get(key)
            return default if value is None else value

        problems = []
        values = {}
        for key, default, flag in (
            ("replan_steps", DEFAULT_REPLAN, "--replan-steps"),
            ("action_horizon", DEFAULT_HORIZON, "--action-horizon"),
            ("num_inference_steps", DEFAULT_INFERENCE_STEPS, "--num-inference-steps"),
        ):
            try:
                value = int(pick(key, default))
            except (TypeError, ValueError):
                problems.append(f"{flag} must be an integer, got {options.get(key)!r}")
                continue
            if value < 1:
                problems.append(f"{flag} must be >= 1, got {value}")
            values[key] = value
        if not problems and values["replan_steps"] > values["action_horizon"]:
            problems.append(
                f"--replan-steps {values['replan_steps']} exceeds the action horizon {values['action_horizon']}: "
                "only predicted actions can be executed"
            )
        overrides = options.get("fastwam_override") or ()
        overrides = (overrides,) if isinstance(overrides, str) else tuple(overrides)
        for item in overrides:
            if not isinstance(item, str) or "=" not in item:
                problems.append(f"--fastwam-override must be a Hydra override KEY=VALUE, got {item!r}")
        cuda_graphs = options.get("cuda_graphs")
        if not isinstance(cuda_graphs, (bool, type(None))):
            problems.append(f"--cuda-graphs is a flag (true or false), got {cuda_graphs!r}")
        if problems:
            raise ConfigurationError("Fast-WAM on RoboTwin: " + "; ".join(problems))
        return cls(
            **values,
            config_dir=options.get("fastwam_config_dir"),
            dataset_stats=options.get("dataset_stats"),
            pins=options.get("am_pins"),
            text_cache=options.get("text_cache"),
            overrides=overrides,
            cuda_graphs=bool(cuda_graphs),
        )


def resize_bilinear(image: np.ndarray, size_hw: tuple) -> np.ndarray:
    """PIL bilinear resize to ``size_hw`` (HxW), as FastWAM's ``_resize_rgb``."""
    from PIL import Image  # imported here so that listing plugins stays light

    h, w = size_hw
    return np.asarray(Image.fromarray(np.ascontiguousarray(image, dtype=np.uint8)).resize((w, h), Image.Resampling.BILINEAR))


def compose_cameras(head: np.ndarray, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """The 384x320x3 uint8 frame: head above ``[left | right]``."""
    bottom = np.concatenate([resize_bilinear(left, WRIST_SIZE), resize_bilinear(right, WRIST_SIZE)], axis=1)
    return np.ascontiguousarray(np.concatenate([resize_bilinear(head, HEAD_SIZE), bottom], axis=0))


def encode(request: PredictRequest) -> dict:
    obs = request.observation
    return {
        "image": compose_cameras(obs.images["head"], obs.images["left_wrist"], obs.images["right_wrist"]),
        "state": np.asarray(obs.state["joint_targets"], dtype=np.float32),
        "instruction": request.effective_instruction,
    }


def robotwin_adapter(replan_steps: int = DEFAULT_REPLAN, action_horizon: int = DEFAULT_HORIZON) -> Adapter:
    """The adapter for a deployment executing ``replan_steps`` of ``action_horizon`` actions."""

    def decode(native, request: PredictRequest) -> Prediction:
        actions = np.asarray(native)
        expected = (action_horizon, ACTION_DIM)
        if actions.shape != expected or actions.dtype.kind != "f":
            raise PredictionError(
                [f"Fast-WAM returned restored actions {actions.dtype} {actions.shape}, expected float {expected}"],
                context=PLATFORM,
            )
        return Prediction(actions=actions[:replan_steps].astype(np.float32))

    contract = AdapterContract(
        platform=PLATFORM,
        action_space=ACTION_SPACE,
        action_dim=ACTION_DIM,
        cameras={role: CAMERA_SIZE for role in CAMERAS},
        state=STATE,
        chunk_size=replan_steps,
        horizon=action_horizon,
    )
    return Adapter(contract=contract, encode=encode, decode=decode)


__all__ = [
    "RoboTwinSettings",
    "robotwin_adapter",
    "encode",
    "compose_cameras",
    "resize_bilinear",
    "IMAGE_SIZE",
    "HEAD_SIZE",
    "WRIST_SIZE",
    "CAMERAS",
    "STATE",
]
