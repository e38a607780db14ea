"""Fast-WAM's text conditioning without the T5: upstream's own text-embedding cache, read safely.

FastWAM 45d8e14 trains from precomputed T5 embeddings: ``scripts/precompute_text_embeds.py``
encodes ``DEFAULT_PROMPT.format(task=...)`` with the UMT5-XXL encoder and writes one
``torch.save`` per prompt, ``<dir>/<sha256(prompt)>.t5_len<L>.<enc_id>.pt`` holding
``{"context": bf16 [L, 4096], "mask": bool [L]}`` (``enc_id`` is ``wan22ti2v5b`` for
``Wan-AI/Wan2.2-TI2V-5B``, L = 128); ``RobotVideoDataset._get_cached_text_context``
(``src/fastwam/datasets/lerobot/robot_video_dataset.py``) reads it back, zeroes the padded
positions and sets the mask to all ones, which is also what ``FastWAM.encode_prompt`` does
with the live encoder. ``infer_action`` takes the result as ``context``/``context_mask``
instead of ``prompt``.

``--text-cache DIR`` makes the RoboTwin worker use such a folder instead of the 5.7B-parameter
UMT5-XXL (about 11 GB of memory less): the model is built with ``load_text_encoder=false``.
Entries are read with ``weights_only=True`` (upstream reads them with the default) and
checked; every entry's sha256 goes into the model's identity. An instruction without an
entry is a :class:`CheckpointError` naming the instruction, the file expected and the
upstream command that writes it.
"""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path
from typing import Dict, Tuple

from wamcore.errors import CheckpointError

#: FastWAM's ``DEFAULT_PROMPT`` (``src/fastwam/datasets/lerobot/robot_video_dataset.py`` at
#: 45d8e14); kept here so that the worker does not import upstream's dataset stack (datasets,
#: av, gitpython) for one string. tests/test_fastwam_real_upstream.py compares it with upstream's.
PROMPT_TEMPLATE = "A video recorded from a robot's point of view executing the following instruction: {task}"
TEXT_LEN = 128
TEXT_DIM = 4096
ENCODER_ID = "wan22ti2v5b"
SUFFIX = f".t5_len{TEXT_LEN}.{ENCODER_ID}.pt"


def prompt_for(task: str, template: str = PROMPT_TEMPLATE) -> str:
    return template.format(task=task)


def entry_name(prompt: str, *, text_len: int = TEXT_LEN, encoder_id: str = ENCODER_ID) -> str:
    """The file name upstream gives the entry of ``prompt`` (the full prompt, template applied)."""
    return f"{hashlib.sha256(prompt.encode('utf-8')).hexdigest()}.t5_len{text_len}.{encoder_id}.pt"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def folder_hashes(cache_dir: Path) -> Dict[str, str]:
    """sha256 of every entry of the folder (for the model's identity); an empty or missing
    folder is a :class:`CheckpointError`."""
    cache_dir = Path(cache_dir)
    if not cache_dir.is_dir():
        raise CheckpointError(f"--text-cache {cache_dir} is not a folder: {make_entries('TASK', cache_dir)}")
    entries = sorted(p for p in cache_dir.iterdir() if p.name.endswith(SUFFIX) and p.is_file())
    if not entries:
        raise CheckpointError(f"--text-cache {cache_dir} holds no *{SUFFIX} entry: {make_entries('TASK', cache_dir)}")
    return {p.name: _sha256(p) for p in entries}


def digest(hashes: Dict[str, str]) -> str:
    """One sha256 over the folder's entries and their hashes."""
    text = "\n".join(f"{name} {sha}" for name, sha in sorted(hashes.items()))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_entry(path: Path, *, text_len: int = TEXT_LEN, text_dim: int = TEXT_DIM) -> Tuple["object", "object"]:
    """``(context [text_len, text_dim] float32, mask [text_len] bool)`` as upstream's dataset
    hands them to the model: padded positions zeroed, the mask all ones."""
    import torch

    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError) as exc:
        raise CheckpointError(f"text-cache entry {path} is not a plain tensor file: {exc}") from exc
    if not isinstance(payload, dict) or not isinstance(payload.get("context"), torch.Tensor) or not isinstance(
        payload.get("mask"), torch.Tensor
    ):
        raise CheckpointError(f"text-cache entry {path} must hold tensors 'context' and 'mask' "
                              "(FastWAM scripts/precompute_text_embeds.py)")
    context, mask = payload["context"].float(), payload["mask"].bool()
    problems = []
    if tuple(context.shape) != (text_len, text_dim):
        problems.append(f"context has shape {tuple(context.shape)}, expected ({text_len}, {text_dim})")
    if tuple(mask.shape) != (text_len,):
        problems.append(f"mask has shape {tuple(mask.shape)}, expected ({text_len},)")
    elif not problems and not torch.isfinite(context).all():
        problems.append("context is not finite")
    if problems:
        raise CheckpointError(f"text-cache entry {path}: " + "; ".join(problems))
    context = context.clone()
    context[~mask] = 0.0  # RobotVideoDataset._get: "to keep consistent with wan2.2's behavior"
    return context, torch.ones_like(mask)


MAKE_ENTRIES = (
    "write the entries with FastWAM's own encoder, from the FastWAM checkout: "
    "`python scripts/precompute_text_embeds.py task=robotwin_uncond_3cam_384_1e-4 "
    "'+override_instruction=\"{task}\"' data.train.text_embedding_cache_dir={dir} "
    "data.val.text_embedding_cache_dir={dir}` (one prompt; without override_instruction it encodes every "
    "task of the config's datasets), or leave --text-cache out to "
    "load the UMT5-XXL encoder (about 11 GB) instead"
)


def make_entries(task: str, cache_dir) -> str:
    return MAKE_ENTRIES.format(task=task.replace('"', '\\"').replace("'", "'\\''"), dir=cache_dir)


def missing_entry_error(task: str, cache_dir: Path) -> CheckpointError:
    prompt = prompt_for(task)
    return CheckpointError(
        f"Fast-WAM has no text embedding for the instruction {task!r}: --text-cache {cache_dir} has no entry "
        f"{entry_name(prompt)} (sha256 of the prompt {prompt!r}). To add it, "
        + make_entries(task, cache_dir)
    )


class TextCache:
    """Instruction -> ``(context [1, L, D], mask [1, L])`` from a ``--text-cache`` folder."""

    def __init__(self, cache_dir, *, template: str = PROMPT_TEMPLATE):
        self.dir = Path(cache_dir).expanduser()
        self.template = template
        self.hashes = folder_hashes(self.dir)
        self._memo: dict = {}

    @property
    def identity(self) -> dict:
        return {"dir": str(self.dir), "entries": len(self.hashes), "sha256": digest(self.hashes)}

    def context(self, task: str):
        if task not in self._memo:
            name = entry_name(prompt_for(task, self.template))
            if name not in self.hashes:
                raise missing_entry_error(task, self.dir)
            path = self.dir / name
            if _sha256(path) != self.hashes[name]:
                raise CheckpointError(f"text-cache entry {path} changed after the model was loaded: restart the worker")
            context, mask = read_entry(path)
            self._memo[task] = (context[None], mask[None])
        return self._memo[task]


__all__ = ["PROMPT_TEMPLATE", "TEXT_LEN", "TEXT_DIM", "ENCODER_ID", "prompt_for", "entry_name", "read_entry",
           "folder_hashes", "digest", "missing_entry_error", "make_entries", "TextCache", "MAKE_ENTRIES"]
