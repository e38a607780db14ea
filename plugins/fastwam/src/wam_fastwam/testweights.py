"""RANDOM Fast-WAM weights for RoboTwin, generated from upstream's own classes, in the files
upstream reads.

For tests and latency measurements of the real inference code where no checkpoint can be
downloaded. FastWAM's ``sim_robotwin`` config builds the video DiT and the ActionDiT randomly
(``skip_dit_load_from_pretrain: true``, ``action_dit_pretrained_path: null``) and overrides them
with the checkpoint; the loader (``src/fastwam/models/wan22/helpers/loader.py``
``load_wan22_ti2v_5b_components``) still reads the Wan2.2 VAE from
``$DIFFSYNTH_MODEL_BASE_PATH`` and recognises it by an md5 of its key names and shapes
(``WAN22_MODEL_REGISTRY``, ``helpers/io.py`` ``hash_model_file``): only the full-size VAE
(0.7B parameters) passes, so it is always full size; bf16 by default (1.4 GB, the registry does
not hash values or dtypes). Layout written to ``out``::

    diffsynth/DiffSynth-Studio/Wan-Series-Converted-Safetensors/Wan2.2_VAE.safetensors
                                    WanVideoVAE38().model state dict (set DIFFSYNTH_MODEL_BASE_PATH
                                    to out/diffsynth and DIFFSYNTH_SKIP_DOWNLOAD=true)
    random_fastwam_robotwin.pt      FastWAM.save_checkpoint of the model composed from sim_robotwin
                                    with the architecture overrides (``--fastwam-override``)
    random_fastwam_robotwin_dataset_stats.json   random 14-D state/action stats, FastWAM's format
    text_cache/<sha256(prompt)>.t5_len128.wan22ti2v5b.pt   random T5 entries in the format of
                                    upstream's scripts/precompute_text_embeds.py, one per instruction
    FASTWAM_RANDOM_TEST_WEIGHTS.json   the marker: what was generated, how, with which overrides

By default the text encoder (UMT5-XXL, 5.7B parameters) is not generated: the worker runs with
``--text-cache out/text_cache``. With ``text_encoder=True`` (``--text-encoder``, for the default
deployment on a GPU machine) two more files are written where the loader looks for them::

    diffsynth/DiffSynth-Studio/Wan-Series-Converted-Safetensors/models_t5_umt5-xxl-enc-bf16.safetensors
                                    WanTextEncoder() state dict, bf16 (11.4 GB; its key/shape hash is
                                    the registry's, so only full size)
    diffsynth/Wan-AI/Wan2.1-T2V-1.3B/google/umt5-xxl/   a small tokenizer built with ``tokenizers``
                                    (word pieces of the instructions, T5's pad/eos/unk ids 0/1/2),
                                    read by upstream's HuggingfaceTokenizer (AutoTokenizer)

Everything is named random and marked; nothing here is ever pinned as a release file. A fixed
seed gives the same tensors on the same device.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable, List, Optional

from . import upstream
from .robotwin import ACTION_DIM, DEFAULT_CONFIG_NAME
from .text_cache import TEXT_DIM, TEXT_LEN, entry_name, prompt_for
from .worker import RANDOM_MARKER, fastwam_config_dir

CHECKPOINT = "random_fastwam_robotwin.pt"
STATS = "random_fastwam_robotwin_dataset_stats.json"
VAE_DIR = "diffsynth/DiffSynth-Studio/Wan-Series-Converted-Safetensors"
VAE_FILE = "Wan2.2_VAE.safetensors"
T5_FILE = "models_t5_umt5-xxl-enc-bf16.safetensors"
TOKENIZER_DIR = "diffsynth/Wan-AI/Wan2.1-T2V-1.3B/google/umt5-xxl"
HEAD_DIM = 128  # attn_head_dim of both experts (configs/model/fastwam.yaml); MoT mixes heads of this width


def architecture_overrides(layers: int, width: int) -> List[str]:
    """Hydra overrides of ``sim_robotwin`` for ``layers`` blocks of ``width`` (0: full size)."""
    out = []
    if layers:
        out += [f"model.video_dit_config.num_layers={layers}", f"model.action_dit_config.num_layers={layers}"]
    if width:
        if width % HEAD_DIM:
            raise ValueError(f"--width must be a multiple of {HEAD_DIM}, got {width}")
        heads = width // HEAD_DIM
        for expert in ("video_dit_config", "action_dit_config"):
            out += [f"model.{expert}.hidden_dim={width}", f"model.{expert}.ffn_dim={2 * width}",
                    f"model.{expert}.num_heads={heads}"]
    return out


def random_stats(seed: int) -> dict:
    """FastWAM's ``*_dataset_stats.json`` layout (``state``/``action`` -> ``default`` -> global_*)."""
    import numpy as np

    rng = np.random.default_rng(seed)

    def block():
        mean = rng.uniform(-0.5, 0.5, ACTION_DIM)
        std = rng.uniform(0.05, 0.5, ACTION_DIM)
        return {"default": {"global_mean": mean.tolist(), "global_std": std.tolist(),
                            "global_min": (mean - 3 * std).tolist(), "global_max": (mean + 3 * std).tolist()}}

    return {"state": block(), "action": block()}


def write_tokenizer(folder: Path, texts: Iterable[str]) -> Path:
    """A tokenizer folder ``AutoTokenizer.from_pretrained`` reads: a word-level
    vocabulary of ``texts`` (plus the prompt template) with T5's special tokens (pad 0, eos 1,
    unk 2) and T5's ``$A </s>`` post-processing. Not UMT5's vocabulary: random test weights only."""
    import re

    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = sorted({w for t in [prompt_for(""), *texts] for w in re.findall(r"\w+|[^\w\s]", t)})
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    folder.mkdir(parents=True, exist_ok=True)
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>").save_pretrained(
        str(folder))
    return folder


def write_text_encoder(out: Path, seed: int, device: str) -> Path:
    """``WanTextEncoder()`` (UMT5-XXL encoder, full size: the registry knows no other) in bf16."""
    import torch
    from fastwam.models.wan22.wan_video_text_encoder import WanTextEncoder
    from safetensors.torch import save_file

    path = out / VAE_DIR / T5_FILE
    if path.is_file():
        return path
    torch.manual_seed(seed)
    with torch.device(device):
        encoder = WanTextEncoder().to(torch.bfloat16)
    state = {k: v.detach().to("cpu").contiguous() for k, v in encoder.state_dict().items()}
    del encoder
    tmp = path.with_name(path.name + ".tmp")
    save_file(state, str(tmp), metadata={"random": "true", "generator": "wam_fastwam.testweights"})
    os.replace(tmp, path)
    return path


def generate(out, *, layers: int = 2, width: int = 256, seed: int = 0, instructions: Iterable[str] = (),
             config_dir: Optional[str] = None, device: str = "cpu", dtype: str = "bfloat16",
             text_encoder: bool = False) -> dict:
    """Write the files (see the module docstring); returns what was written."""
    import torch

    upstream.require(upstream.ROBOTWIN_STACK, upstream.ROBOTWIN_MODULES, "generating Fast-WAM test weights")
    from fastwam.models.wan22.wan_video_vae import WanVideoVAE38
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.utils import instantiate
    from omegaconf import OmegaConf
    from safetensors.torch import save_file

    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    overrides = architecture_overrides(layers, width)
    marker = {"random": True, "generator": "wam_fastwam.testweights", "upstream": upstream.FASTWAM_OFFICIAL.label,
              "seed": seed, "layers": layers or "full", "width": width or "full", "fastwam_overrides": overrides,
              "device": device, "dtype": dtype,
              "warning": "random weights: for plumbing tests and latency only, never a real Fast-WAM checkpoint"}
    marker_path = out / RANDOM_MARKER
    if marker_path.is_file():
        previous = json.loads(marker_path.read_text())
        if (previous.get("seed"), previous.get("fastwam_overrides"), previous.get("dtype")) != (seed, overrides, dtype):
            raise ValueError(f"{out} holds test weights of another seed, architecture or dtype: generate into a new folder")
    marker_path.write_text(json.dumps(marker, indent=1))
    torch_dtype = getattr(torch, dtype)

    vae_path = out / VAE_DIR / VAE_FILE
    if not vae_path.is_file():  # the VAE depends on the seed and dtype only
        vae_path.parent.mkdir(parents=True, exist_ok=True)
        (out / "diffsynth" / RANDOM_MARKER).write_text(json.dumps(marker, indent=1))
        torch.manual_seed(seed)
        with torch.device(device):
            vae = WanVideoVAE38()
        state = {k: v.detach().to("cpu", torch_dtype).contiguous() for k, v in vae.model.state_dict().items()}
        del vae
        tmp = vae_path.with_name(vae_path.name + ".tmp")
        save_file(state, str(tmp), metadata={"random": "true", "generator": "wam_fastwam.testweights"})
        os.replace(tmp, vae_path)
        del state

    stats_path = out / STATS
    stats_path.write_text(json.dumps(random_stats(seed)))

    configs = fastwam_config_dir(config_dir)
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(configs.resolve())):
        cfg = compose(config_name=DEFAULT_CONFIG_NAME, overrides=overrides)
    model_cfg = OmegaConf.create(OmegaConf.to_container(cfg.model, resolve=True))
    model_cfg.load_text_encoder = False
    env = {"DIFFSYNTH_MODEL_BASE_PATH": str(out / "diffsynth"), "DIFFSYNTH_SKIP_DOWNLOAD": "true"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        torch.manual_seed(seed)
        model = instantiate(model_cfg, model_dtype=torch_dtype, device=device)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    ckpt = out / CHECKPOINT
    model.save_checkpoint(str(ckpt))
    params = sum(p.numel() for p in model.mot.parameters())
    if model.proprio_encoder is not None:
        params += sum(p.numel() for p in model.proprio_encoder.parameters())
    del model

    cache_dir = out / "text_cache"
    cache_dir.mkdir(exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    instructions = list(instructions)
    for task in instructions:
        prompt = prompt_for(task)
        n = min(TEXT_LEN, 16 + len(task.split()))  # valid tokens, the rest padding, as the T5 tokenizer pads
        context = torch.zeros(TEXT_LEN, TEXT_DIM, dtype=torch.bfloat16)
        context[:n] = torch.randn(n, TEXT_DIM, generator=gen).to(torch.bfloat16)
        mask = torch.zeros(TEXT_LEN, dtype=torch.bool)
        mask[:n] = True
        torch.save({"context": context, "mask": mask}, cache_dir / entry_name(prompt))  # precompute_text_embeds' payload
    made = {"checkpoint": str(ckpt), "dataset_stats": str(stats_path), "vae": str(vae_path),
            "diffsynth_model_base_path": str(out / "diffsynth"), "text_cache": str(cache_dir),
            "fastwam_overrides": " ".join(overrides), "parameters": params}
    if text_encoder:
        instructions = list(instructions)
        made["tokenizer"] = str(write_tokenizer(out / TOKENIZER_DIR, [prompt_for(t) for t in instructions]))
        made["text_encoder"] = str(write_text_encoder(out, seed, device))
    return made


__all__ = ["generate", "architecture_overrides", "random_stats", "write_tokenizer", "write_text_encoder", "CHECKPOINT",
           "STATS", "VAE_DIR", "VAE_FILE", "T5_FILE", "TOKENIZER_DIR"]
