"""Upstream's model called directly, outside wamcore, on the files the worker served: the
reference chunk of ``test_fastwam_real_upstream.py``. Runs in the model environment.

FastWAM's own calls: Hydra ``compose("sim_robotwin", overrides)``, ``instantiate(cfg.model)``
(``fastwam.runtime.create_fastwam``), ``FastWAM.load_checkpoint``, ``FastWAM.infer_action``; the
text entry read as upstream's dataset reads it (``torch.load``, padded positions zeroed, mask
all ones). The inputs are built as FastWAM's ``deploy_policy.py`` builds them (head over
``[left | right]`` wrists, PIL bilinear, ``x*2/255-1`` at the model dtype; the state z-scored
with ``(x - mean) / (std + 1e-8)`` clamped to ±5; the output ``y * (std + 1e-8) + mean``), written
out here with numpy and PIL rather than through the plugin's code.

Usage: python fastwam_direct_call.py WEIGHTS OBSERVATION.npz SEED OUT.npy
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image


def resize(image, w, h):
    return np.asarray(Image.fromarray(image).resize((w, h), Image.Resampling.BILINEAR))


def main(weights: str, observation: str, seed: str, out: str) -> None:
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    import fastwam

    weights = Path(weights)
    marker = json.loads((weights / "FASTWAM_RANDOM_TEST_WEIGHTS.json").read_text())
    os.environ["DIFFSYNTH_MODEL_BASE_PATH"] = str(weights / "diffsynth")
    os.environ["DIFFSYNTH_SKIP_DOWNLOAD"] = "true"
    configs = Path(fastwam.__file__).resolve().parents[2] / "configs"
    with initialize_config_dir(version_base="1.3", config_dir=str(configs)):
        cfg = compose(config_name="sim_robotwin", overrides=marker["fastwam_overrides"])
    model_cfg = OmegaConf.create(OmegaConf.to_container(cfg.model, resolve=True))
    model_cfg.load_text_encoder = False
    model = instantiate(model_cfg, model_dtype=torch.bfloat16, device="cpu")
    model.load_checkpoint(str(weights / "random_fastwam_robotwin.pt"))
    model = model.eval()

    obs = np.load(observation)
    image = np.concatenate([resize(obs["head"], 320, 256),
                            np.concatenate([resize(obs["left_wrist"], 160, 128), resize(obs["right_wrist"], 160, 128)], 1)])
    tensor = torch.from_numpy(image).permute(2, 0, 1).unsqueeze(0).to(torch.bfloat16) * (2.0 / 255.0) - 1.0
    stats = json.loads((weights / "random_fastwam_robotwin_dataset_stats.json").read_text())
    s, a = stats["state"]["default"], stats["action"]["default"]
    s_mean, s_std = np.asarray(s["global_mean"]), np.asarray(s["global_std"])
    a_mean, a_std = np.asarray(a["global_mean"]), np.asarray(a["global_std"])
    state = np.clip((obs["joint_targets"] - s_mean) / (s_std + 1e-8), -5, 5).astype(np.float32)
    prompt = ("A video recorded from a robot's point of view executing the following instruction: "
              + str(obs["instruction"]))
    entry = weights / "text_cache" / f"{hashlib.sha256(prompt.encode()).hexdigest()}.t5_len128.wan22ti2v5b.pt"
    payload = torch.load(entry, map_location="cpu", weights_only=True)
    context, mask = payload["context"].clone(), payload["mask"].bool()
    context[~mask] = 0.0
    with torch.no_grad():
        action = model.infer_action(prompt=None, input_image=tensor, action_horizon=32,
                                    proprio=torch.from_numpy(state)[None], context=context[None],
                                    context_mask=torch.ones_like(mask)[None], negative_prompt="", text_cfg_scale=1.0,
                                    num_inference_steps=2, sigma_shift=None, seed=int(seed), rand_device="cpu",
                                    tiled=False)["action"]
    action = action.float().numpy().reshape(32, 14)
    np.save(out, action * (a_std + 1e-8) + a_mean)


if __name__ == "__main__":
    main(*sys.argv[1:5])
