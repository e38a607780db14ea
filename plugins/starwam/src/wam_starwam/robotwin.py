"""StarWAM's RoboTwin adapter: what ``examples/robotwin/policy_server.py`` and
``starwam/eval/policy.py`` (StarWAM a7b05c8) do around the model.

* the three D435 cameras in RoboTwin's native orientation (no flip; ``client_policy.py``
  sends ``head_camera``, ``left_camera``, ``right_camera`` as they are), composed into one
  384x320 (HxW) frame: the head resized to 256x320 on top, the left and right wrists resized
  to 128x160 each side by side below; resizing is torch bilinear, ``align_corners=False``,
  no antialias, on float values 0..255 (``starwam.data.lerobot._resize_frames``), then
  ``/255 * 2 - 1`` at the model's dtype (``_build_robotwin_image``). Training used the same
  layout (``concat_multi_camera: robotwin``);
* the 14-D ``joint_action.vector`` (wamcore's ``joint_targets``) as the state; StarwamPolicy
  z-scores it with the release's ``action_stats.json`` (std floored at 1e-6, clamped to +-5);
* 32x14 qpos chunks, z-score restored by StarwamPolicy, grippers (indices 6 and 13) left in
  RoboTwin's [0, 1] scale (RoboTwin clips them); the first ``replan_steps`` (24) are executed.

The adapter hands the worker the raw cameras; the worker composes the frame with torch
(:func:`compose_image`), where the model's device and dtype are known.
"""

from __future__ import annotations

import numpy as np

from wamcore import Adapter, AdapterContract, PredictRequest

from .chunks import HORIZON, prefix_decoder

PLATFORM = "robotwin"
ACTION_SPACE = "robotwin.joint_action.qpos14.v1"
ACTION_DIM = 14
CAMERA_SIZE = (240, 320)
CAMERAS = ("head", "left_wrist", "right_wrist")
STATE = {"joint_targets": 14}
HEAD_SIZE = (256, 320)
WRIST_SIZE = (128, 160)
IMAGE_SIZE = (HEAD_SIZE[0] + WRIST_SIZE[0], HEAD_SIZE[1])


def _resized(image: np.ndarray, size_hw):
    """``_resize_frames`` on one HxWx3 uint8 image: [1, 3, h, w] float32 in 0..255."""
    import torch
    import torch.nn.functional as F

    frames = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1).unsqueeze(0)
    if tuple(frames.shape[-2:]) == tuple(size_hw):
        return frames.float()
    t, c, h, w = frames.shape
    flat = frames.float().reshape(t * c, 1, h, w)
    return F.interpolate(flat, size=tuple(size_hw), mode="bilinear", align_corners=False).reshape(t, c, *size_hw)


def compose_image(head: np.ndarray, left: np.ndarray, right: np.ndarray, device="cpu", dtype=None):
    """``[1, 3, 384, 320]`` in [-1, 1] at ``dtype``, as ``_build_robotwin_image``."""
    import torch

    top = _resized(head, HEAD_SIZE) / 255.0
    bottom = torch.cat([_resized(left, WRIST_SIZE) / 255.0, _resized(right, WRIST_SIZE) / 255.0], dim=-1)
    frame = torch.cat([top, bottom], dim=-2) * 2.0 - 1.0
    return frame.to(device=device, dtype=dtype or torch.float32)


def encode(request: PredictRequest) -> dict:
    obs = request.observation
    return {
        "head": np.ascontiguousarray(obs.images["head"]),
        "left": np.ascontiguousarray(obs.images["left_wrist"]),
        "right": np.ascontiguousarray(obs.images["right_wrist"]),
        "state": np.asarray(obs.state["joint_targets"], dtype=np.float32),
        "instruction": request.effective_instruction,
    }


def robotwin_adapter(replan_steps: int) -> Adapter:
    contract = AdapterContract(
        platform=PLATFORM,
        action_space=ACTION_SPACE,
        action_dim=ACTION_DIM,
        cameras={role: CAMERA_SIZE for role in CAMERAS},
        state=STATE,
        chunk_size=replan_steps,
        horizon=HORIZON,
    )
    return Adapter(contract=contract, encode=encode, decode=prefix_decoder(PLATFORM, ACTION_DIM, replan_steps))


__all__ = ["robotwin_adapter", "encode", "compose_image", "IMAGE_SIZE", "CAMERAS", "STATE"]
