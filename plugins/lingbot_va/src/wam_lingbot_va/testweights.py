"""RANDOM LingBot-VA weights, in the folder layout ``VA_Server`` reads, written with
``save_pretrained`` from the classes upstream loads them with.

The architecture of a release comes with its weights (each subfolder's ``config.json``), not
with the code, so the configs are written here: the transformer from
``wan_va.modules.model.WanTransformer3DModel``'s defaults (the 5 B geometry; ``attn_mode``
``torch``), the VAE with the Wan2.2-TI2V-5B geometry upstream's server relies on (48 latent
channels, 16x spatial and 4x temporal compression, patch 2), the text encoder as UMT5 (XXL
geometry at full size). ``--layers N`` shrinks the transformer's depth, and its width, the
VAE's channels and the text encoder with it, for CPU tests; the geometry the server depends on
(latent channels, compression, patch, action channels) stays. Layout written to ``out``::

    transformer/   config.json, diffusion_pytorch_model.safetensors
    vae/           config.json, diffusion_pytorch_model.safetensors
    text_encoder/  config.json, model.safetensors
    tokenizer/     tokenizer.json, tokenizer_config.json (a small Unigram vocabulary)
    LINGBOT_VA_RANDOM_TEST_WEIGHTS.json   the marker: what was generated, how

Never real weights: the worker reports the marker in the model's identity.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from . import upstream
from .checkpoint import RANDOM_MARKER
#: upstream's server fixes these (randn with 48 channels, height // 16, the action channels)
Z_DIM, ACTION_DIM = 48, 30
WORDS = ("pick up the cup place it on the left right block hammer beat bottle adjust open close move "
         "grab shoe mug rack hand over to side table put into basket stack bowls two three")


def transformer_config(layers: int) -> dict:
    if layers == 0:  # WanTransformer3DModel's defaults: the released geometry
        return {"attn_mode": "torch"}
    return {"num_attention_heads": 2, "attention_head_dim": 24, "ffn_dim": 96, "num_layers": layers, "text_dim": 64,
            "freq_dim": 32, "attn_mode": "torch"}


def vae_config(layers: int) -> dict:
    base = {"z_dim": Z_DIM, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2, "attn_scales": [],
            "temperal_downsample": [False, True, True], "dropout": 0.0, "is_residual": True, "in_channels": 12,
            "out_channels": 12, "patch_size": 2, "scale_factor_spatial": 16, "scale_factor_temporal": 4,
            "latents_mean": [0.0] * Z_DIM, "latents_std": [1.0] * Z_DIM}
    if layers == 0:  # Wan2.2-TI2V-5B's channel widths (diffusers' Wan2.2 VAE conversion)
        return {**base, "base_dim": 160, "decoder_base_dim": 256}
    return {**base, "base_dim": 16, "decoder_base_dim": 16, "num_res_blocks": 1}


def text_encoder_config(layers: int, vocab: int) -> dict:
    if layers == 0:  # UMT5-XXL
        return dict(d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_heads=64, vocab_size=256384)
    return dict(d_model=transformer_config(layers)["text_dim"], d_kv=16, d_ff=128, num_layers=1, num_heads=4,
                vocab_size=vocab)


def _tokenizer(folder: Path) -> int:
    """A T5-style tokenizer (``T5TokenizerFast.from_pretrained`` reads it): Unigram over a few
    words, ``<pad>`` 0, ``</s>`` 1, ``<unk>`` 2, ``</s>`` appended."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
    from transformers import T5TokenizerFast

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=120, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>")
    tok.train_from_iterator([WORDS] * 4, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    fast = T5TokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>",
                           extra_ids=0)
    fast.save_pretrained(str(folder))
    return tok.get_vocab_size()


def generate(out, *, layers: int = 1, seed: int = 0, lingbot_root: Optional[str] = None, device: str = "cpu",
             dtype: str = "float32") -> dict:
    """Write the folders (see the module docstring); returns what was written. ``device``/``dtype``:
    where the modules are built and how their tensors are saved (full size: ``cuda``, ``bfloat16``,
    the dtype the server loads them in, about 22 GB instead of 44)."""
    import torch

    upstream.require("generating LingBot-VA test weights")
    upstream.import_server(upstream.checkout_root(lingbot_root))  # wan_va's own classes, as the server loads them
    from diffusers import AutoencoderKLWan
    from transformers import UMT5Config, UMT5EncoderModel
    from wan_va.modules.model import WanTransformer3DModel

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    vocab = _tokenizer(out / "tokenizer")
    torch.manual_seed(seed)
    builders = {
        "transformer": lambda: WanTransformer3DModel(**transformer_config(layers)),
        "vae": lambda: AutoencoderKLWan(**vae_config(layers)),
        "text_encoder": lambda: UMT5EncoderModel(UMT5Config(**text_encoder_config(layers, vocab))),
    }
    counts = {}
    for name, build in builders.items():  # one at a time: a full-size part is 10-23 GB
        with torch.device(device):
            model = build().to(getattr(torch, dtype))
        model.save_pretrained(str(out / name), safe_serialization=True)
        counts[name] = sum(p.numel() for p in model.parameters())
        del model
    marker = {"random": True, "generator": "wam_lingbot_va.testweights", "upstream": upstream.LABEL, "seed": seed,
              "layers": layers, "device": device, "dtype": dtype, "parameters": counts,
              "warning": "random weights: for plumbing tests and latency only, never a real LingBot-VA checkpoint"}
    (out / RANDOM_MARKER).write_text(json.dumps(marker, indent=1))
    return {"folder": str(out), "parameters": counts}


__all__ = ["generate", "transformer_config", "vae_config", "text_encoder_config"]
