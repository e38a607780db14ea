"""StarWAM's text conditioning: its prompt template and its sha256-keyed T5 cache, read safely.

Upstream (``starwam/data/lerobot.py``): the prompt is
``"A video recorded from a robot's point of view executing the following instruction: {task}"``;
a cache entry is ``<dir>/<sha256(prompt)>.t5_len128.wan22ti2v5b.pt``, a ``torch.save`` of
``{"context": bf16 [L, 4096], "mask": bool [L], "prompt", "task"}`` (a7b05c8 keeps only the
valid tokens, f6c771f all 128); ``load_text_cache`` re-pads it to ``[128, 4096]`` float32
with its mask. Upstream reads entries with ``weights_only=False``; here they are read with
``weights_only=True`` (tensors, strings and containers only) and checked: a tampered entry is
refused, not run. On a miss upstream encodes the prompt with UMT5-XXL from the backbone
folder; without that encoder the miss is a :class:`CheckpointError` naming the entry and
how to make one.
"""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path
from typing import Optional, Tuple

from wamcore.errors import CheckpointError

PROMPT_TEMPLATE = "A video recorded from a robot's point of view executing the following instruction: {task}"
TEXT_LEN = 128
ENCODER_ID = "wan22ti2v5b"
T5_FILE = "models_t5_umt5-xxl-enc-bf16.pth"
TOKENIZER_DIR = "google/umt5-xxl"


def prompt_for(task: str, template: str = PROMPT_TEMPLATE) -> str:
    return template.format(task=task)


def cache_path(cache_dir, task: str, *, text_len: int = TEXT_LEN, template: str = PROMPT_TEMPLATE,
               encoder_id: str = ENCODER_ID) -> Path:
    digest = hashlib.sha256(prompt_for(task, template).encode("utf-8")).hexdigest()
    return Path(cache_dir) / f"{digest}.t5_len{text_len}.{encoder_id}.pt"


def has_encoder(backbone: Optional[str]) -> bool:
    return bool(backbone) and (Path(backbone) / T5_FILE).is_file() and (Path(backbone) / TOKENIZER_DIR).is_dir()


def read_entry(path: Path, *, prompt: str, text_len: int, text_dim: int) -> Tuple["object", "object"]:
    """``(context [text_len, text_dim] float32, mask [text_len] bool)``, as ``load_text_cache``."""
    import torch

    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError) as exc:
        raise CheckpointError(f"text-cache entry {path} is not a plain tensor file: {exc}") from exc
    problems = []
    if not isinstance(payload, dict) or not isinstance(payload.get("context"), torch.Tensor) or not isinstance(
        payload.get("mask"), torch.Tensor
    ):
        raise CheckpointError(f"text-cache entry {path} must hold tensors 'context' and 'mask' (StarWAM save_text_cache)")
    if payload.get("prompt") not in (None, prompt):
        problems.append(f"it was written for the prompt {payload.get('prompt')!r}, not {prompt!r}")
    context, mask = payload["context"].float(), payload["mask"].bool()
    if context.dim() == 3:
        context = context[0]
    if mask.dim() == 2:
        mask = mask[0]
    if context.dim() != 2 or context.shape[-1] != text_dim:
        problems.append(f"context has shape {tuple(context.shape)}, the model's text dim is {text_dim}")
    if not torch.isfinite(context).all():
        problems.append("context is not finite")
    if problems:
        raise CheckpointError(f"text-cache entry {path}: " + "; ".join(problems))
    out = torch.zeros(text_len, text_dim, dtype=torch.float32)
    out_mask = torch.zeros(text_len, dtype=torch.bool)
    n = min(text_len, context.shape[0], mask.shape[0])
    out[:n] = context[:n]
    out_mask[:n] = mask[:n]
    return out, out_mask


def missing_entry_error(task: str, path: Optional[Path], backbone: Optional[str]) -> CheckpointError:
    where = f"no entry {path.name} in {path.parent}" if path is not None else "no --text-cache folder"
    return CheckpointError(
        f"StarWAM cannot encode the instruction {task!r}: {where}, and no T5 encoder "
        f"({T5_FILE} and {TOKENIZER_DIR}/ in --backbone {backbone or '(not given)'}). Either download the "
        "Wan2.2-TI2V-5B folder with its T5, or precompute the entry with StarWAM's "
        "`python -m starwam.tools.precompute_text_cache --config RECIPE --pretrained-model-id WAN_DIR --output-dir DIR` (it reads the tasks of the recipe's data.dataset_dirs) and pass --text-cache DIR"
    )


__all__ = ["PROMPT_TEMPLATE", "TEXT_LEN", "ENCODER_ID", "prompt_for", "cache_path", "read_entry", "has_encoder",
           "missing_entry_error", "T5_FILE", "TOKENIZER_DIR"]
