"""RANDOM StarWAM weights, generated from upstream's own classes, in the files upstream reads.

For tests and latency measurements of the real inference code where no checkpoint can be
downloaded (upstream builds a random model when ``starwam/utils/checkpoint.py``
``infer_backbone_info`` finds no ``config.json``, ``Wan22Backbone`` loads no DiT weights and
``framework.action_expert_init_from`` is null). Layout written to ``out``::

    backbone/config.json                  the DiT architecture upstream reads (infer_backbone_info);
                                          absent at full size (Wan2.2-TI2V-5B defaults)
    backbone/Wan2.2_VAE.pth               starwam.backbone.wan22.WanVAE_ (the Wan2.2 geometry upstream
                                          hard-codes), state dict, float32
    random_starwam_<family>_<platform>.pt {"model_state_dict": ...} of starwam.build_framework(recipe)
    action_stats_<platform>.json          random min/max/mean/std of the platform's dims
    text_cache/<sha256>.t5_len128.wan22ti2v5b.pt   via upstream's save_text_cache, one per instruction
    STARWAM_RANDOM_TEST_WEIGHTS.json      the marker (also in backbone/): what was generated, how

Everything is named random and marked; nothing here is ever pinned as a release file. A fixed
seed gives the same tensors on the same device.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Optional

from . import upstream
from .families import family
from .worker import RANDOM_MARKER

FULL_DIT = {"dim": 3072, "ffn_dim": 14336, "num_heads": 24, "num_layers": 30}
HEAD_DIM = 128  # Wan's rotary embedding is laid out for 128-wide heads
VAE_KWARGS = dict(dim=160, z_dim=48, dim_mult=[1, 2, 4, 4], num_res_blocks=2, attn_scales=[],
                  temperal_downsample=[False, True, True], dropout=0.0)  # wan22._load_wan22_vae


def dit_config(layers: int, width: int) -> dict:
    if width % HEAD_DIM:
        raise ValueError(f"--width must be a multiple of {HEAD_DIM}, got {width}")
    return {"dim": width, "ffn_dim": 2 * width, "num_heads": width // HEAD_DIM, "num_layers": layers, "freq_dim": 256,
            "eps": 1e-6, "in_dim": 48, "out_dim": 48, "text_dim": 4096, "patch_size": [1, 2, 2]}


def random_stats(platform: str, seed: int) -> dict:
    import numpy as np

    rng = np.random.default_rng(seed)
    dims = {"libero": (7, 8), "robotwin": (14, 14)}[platform]

    def block(n):
        lo = rng.uniform(-1.0, -0.1, n)
        hi = rng.uniform(0.1, 1.0, n)
        return {"min": lo.tolist(), "max": hi.tolist(), "mean": ((lo + hi) / 2).tolist(),
                "std": rng.uniform(0.05, 0.5, n).tolist(), "count": [1000] * n}

    return {"action": block(dims[0]), "state": block(dims[1])}


def generate(out, *, platform: str = "libero", family_name: str = "mot", layers: int = 2, width: int = 256,
             seed: int = 0, instructions: Iterable[str] = (), starwam_root: Optional[str] = None,
             device: str = "cpu", dtype: str = "float32") -> dict:
    """Write the files (see the module docstring); returns what was written."""
    import torch

    upstream.require("generating StarWAM test weights", robotwin=platform == "robotwin")
    from starwam import build_framework
    from starwam.backbone.wan22 import WanVAE_
    from starwam.config import load_config
    from starwam.data.lerobot import save_text_cache, text_cache_path
    from starwam.utils.config_cli import apply_overrides

    fam = family(family_name, platform)
    out = Path(out)
    backbone = out / "backbone"
    backbone.mkdir(parents=True, exist_ok=True)
    arch = dit_config(layers, width) if layers else dict(FULL_DIT, text_dim=4096)
    if layers:
        (backbone / "config.json").write_text(json.dumps(arch))
    marker = {"random": True, "generator": "wam_starwam.testweights", "upstream": upstream.LABEL, "seed": seed,
              "dit": arch, "device": device, "dtype": dtype,
              "warning": "random weights: for plumbing tests and latency only, never a real StarWAM checkpoint"}
    previous = json.loads((backbone / RANDOM_MARKER).read_text()) if (backbone / RANDOM_MARKER).is_file() else None
    if previous is not None and (previous["seed"], previous["dit"]) != (seed, arch):
        raise ValueError(f"{out} holds test weights of another seed or depth: generate into a new folder")
    for folder in (out, backbone):
        (folder / RANDOM_MARKER).write_text(json.dumps(marker, indent=1))

    torch_dtype = getattr(torch, dtype)
    vae_path = backbone / "Wan2.2_VAE.pth"
    if not vae_path.is_file():  # the VAE depends on the seed only: a second platform reuses it
        torch.manual_seed(seed)
        with torch.device(device):
            vae = WanVAE_(**VAE_KWARGS)
        torch.save({k: v.detach().cpu() for k, v in vae.state_dict().items()}, vae_path)
        del vae

    stats_path = out / f"action_stats_{platform}.json"
    stats_path.write_text(json.dumps(random_stats(platform, seed)))
    cache_dir = out / "text_cache"
    root = upstream.checkout_root(starwam_root)
    cfg = apply_overrides(load_config(root / fam.recipe), [
        f"backbone.pretrained_model_id={backbone}", "framework.action_expert_init_from=null",
        f"data.action_stats_path={stats_path}", f"data.state_stats_path={stats_path}",
        f"data.text_embedding_cache_dir={cache_dir}", "data.dataset_dirs=[]",
    ])
    torch.manual_seed(seed)
    with upstream.weights_only_loads():
        model = build_framework(cfg, device=device, dtype=torch_dtype)
    ckpt = out / f"random_starwam_{fam.name}_{platform}.pt"
    torch.save({"model_state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()}}, ckpt)
    params = sum(p.numel() for p in model.parameters())
    del model

    gen = torch.Generator().manual_seed(seed)
    for task in instructions:
        n = 8 + len(task.split())
        context = torch.randn(n, arch["text_dim"], generator=gen).to(torch.bfloat16)
        path = text_cache_path(cache_dir, task, int(cfg.data.text_len), cfg.data.text_prompt_template,
                               cfg.data.text_cache_encoder_id)
        save_text_cache(path, context, torch.ones(n, dtype=torch.bool), cfg.data.text_prompt_template.format(task=task), task)
    return {"checkpoint": str(ckpt), "backbone": str(backbone), "action_stats": str(stats_path),
            "text_cache": str(cache_dir), "parameters": params}


__all__ = ["generate", "dit_config", "random_stats"]
