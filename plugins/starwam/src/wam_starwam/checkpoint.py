"""The files one StarWAM deployment reads, their pins, and safe loading of the weights.

Files (StarWAM README, ``RoboTwin.md`` §8.4, ``LIBERO.md`` §8.7; ``starwam/backbone/wan22.py``):

* the StarWAM checkpoint: ``--am-checkpoint`` is the ModelScope download folder (the family's
  released file is taken from it, ``families``), a checkpoint file, or a folder in one of
  the layouts upstream's loader reads (``model.pt``, ``pytorch_model.bin``, ``model.bin``,
  ``mp_rank_00_model_states.pt``, ``pytorch_model/mp_rank_00_model_states.pt``,
  ``*.safetensors``);
* ``action_stats.json`` (``--action-stats``, else the release's, else beside the checkpoint);
* the Wan2.2-TI2V-5B folder (``--backbone``): ``Wan2.2_VAE.pth`` always; the UMT5 encoder
  ``models_t5_umt5-xxl-enc-bf16.pth`` with its ``google/umt5-xxl/`` tokenizer for
  instructions without a text-cache entry. Its ``diffusion_pytorch_model*.safetensors`` are
  optional: upstream loads them when present and the StarWAM checkpoint then overwrites every
  DiT weight (the worker refuses a checkpoint that leaves a model weight unloaded).

ModelScope and Hugging Face publish no file hashes, so the shipped pins (``pins/starwam.json``)
name the files and leave their sha256 open; ``--am-pins FILE`` adds a user's hashes (written
once with ``wamcore.checkpoints.write_pins``), and every pinned file is then checked at
start-up. Whatever is pinned, the sha256 of the checkpoint, stats and VAE go into the model's
identity. Weights are read as tensors only: safetensors, or ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import attrs

from wamcore.checkpoints import Pins, sha256_file
from wamcore.errors import CheckpointError

from . import upstream
from .families import Family
from .text_cache import T5_FILE, TOKENIZER_DIR

VAE_FILE = "Wan2.2_VAE.pth"
STATS_FILE = "action_stats.json"
#: upstream's folder layouts, in its order (eval.policy.load_checkpoint_into)
FOLDER_FILES = ("model.pt", "pytorch_model.bin", "model.bin", "mp_rank_00_model_states.pt",
                "pytorch_model/mp_rank_00_model_states.pt")
PREFIXES = ("module.", "model.", "_orig_mod.")


def shipped_pins() -> Pins:
    with resources.as_file(resources.files("wam_starwam") / "pins" / "starwam.json") as path:
        return Pins.load(path)


def pins(extra: Optional[str] = None) -> Pins:
    return shipped_pins().extended(Pins.load(extra) if extra else None)


@attrs.frozen
class DeploymentFiles:
    """Every file one deployment reads, each under the name it is pinned by."""

    checkpoint: Tuple[Path, ...]
    stats: Path
    backbone: Path
    names: Dict[str, Path]

    @property
    def vae(self) -> Path:
        return self.backbone / VAE_FILE


def _checkpoint_files(given: Optional[str], family: Family) -> Tuple[Tuple[Path, ...], Dict[str, Path], Optional[Path]]:
    """(files, their pin names, the release root when the ModelScope layout was used)."""
    if not given:
        raise CheckpointError(
            f"StarWAM needs --am-checkpoint: the ModelScope download ({upstream.DOWNLOAD}), holding "
            f"{family.release or 'your own ' + family.name + ' checkpoint'}, or a checkpoint file"
        )
    path = Path(given).expanduser()
    if path.is_file():
        return (path,), {path.name: path}, None
    if not path.is_dir():
        raise CheckpointError(f"StarWAM checkpoint {path} does not exist; download it with: {upstream.DOWNLOAD}")
    if family.release and (path / family.release).is_file():
        return (path / family.release,), {family.release: path / family.release}, path
    for name in FOLDER_FILES:
        if (path / name).is_file():
            return (path / name,), {name: path / name}, None
    shards = tuple(sorted(path.glob("*.safetensors")))
    if shards:
        return shards, {p.name: p for p in shards}, None
    wanted = [family.release] if family.release else []
    raise CheckpointError(
        f"no StarWAM {family.name} checkpoint in {path}: expected {', '.join(wanted + list(FOLDER_FILES))} or "
        f"*.safetensors; the released files come with: {upstream.DOWNLOAD}"
    )


def _stats_file(explicit: Optional[str], checkpoint: Path, release_root: Optional[Path], family: Family) -> Tuple[str, Path]:
    if explicit:
        p = Path(explicit).expanduser()
        if not p.is_file():
            raise CheckpointError(f"--action-stats {p} does not exist")
        return p.name, p
    if release_root is not None and (release_root / family.release_stats).is_file():
        return family.release_stats, release_root / family.release_stats
    tried = [parent / STATS_FILE for parent in list(checkpoint.parents)[:3]]
    for p in tried:
        if p.is_file():
            return STATS_FILE, p
    raise CheckpointError(
        f"no StarWAM {STATS_FILE} for {checkpoint.name} (tried {', '.join(str(p) for p in tried)}): pass "
        f"--action-stats FILE (the release has {family.release_stats})"
    )


def resolve(checkpoint: Optional[str], family: Family, *, backbone: Optional[str], action_stats: Optional[str],
            text_cache: Optional[str]) -> DeploymentFiles:
    """Every file the deployment needs, present; one error naming each missing one."""
    files, names, release_root = _checkpoint_files(checkpoint, family)
    stats_name, stats = _stats_file(action_stats, files[0], release_root, family)
    names = dict(names, **{stats_name: stats})
    if not backbone:
        raise CheckpointError(f"StarWAM needs --backbone: the Wan2.2-TI2V-5B folder ({upstream.BACKBONE_DOWNLOAD})")
    root = Path(backbone).expanduser()
    needed = [VAE_FILE] + ([] if text_cache else [T5_FILE, TOKENIZER_DIR])
    missing = [n for n in needed if not (root / n).exists()]
    if missing:
        why = "" if text_cache else f" ({T5_FILE} and {TOKENIZER_DIR}/ encode instructions; with --text-cache they are optional)"
        raise CheckpointError(
            f"the Wan2.2-TI2V-5B folder {root} lacks {', '.join(missing)}{why}; download it with: {upstream.BACKBONE_DOWNLOAD}"
        )
    names[VAE_FILE] = root / VAE_FILE
    if (root / T5_FILE).is_file():
        names[T5_FILE] = root / T5_FILE
    return DeploymentFiles(checkpoint=files, stats=stats, backbone=root, names=names)


def verify(files: DeploymentFiles, pin_set: Pins) -> None:
    """Each file whose name is pinned must match its sha256; one error naming every mismatch."""
    problems = []
    for name, path in files.names.items():
        expected = pin_set.files.get(name)
        if expected and sha256_file(path) != expected.lower():
            problems.append(f"{name} ({path}): sha256 {sha256_file(path)} does not match the pinned {expected}")
    if problems:
        raise CheckpointError("StarWAM files do not match their pins:\n  - " + "\n  - ".join(problems))


def identity_hashes(files: DeploymentFiles) -> Dict[str, str]:
    """sha256 of what decides the outputs: checkpoint, stats, VAE (the T5 only when used)."""
    chosen = {name: p for name, p in files.names.items() if p.is_file() and name != T5_FILE}
    return {name: sha256_file(p) for name, p in sorted(chosen.items())}


def strip_prefixes(state: dict) -> dict:
    """upstream ``_strip_known_prefixes``: drop ``module.``/``model.``/``_orig_mod.`` repeatedly."""
    out = {}
    for key, value in state.items():
        changed = True
        while changed:
            changed = False
            for prefix in PREFIXES:
                if key.startswith(prefix):
                    key, changed = key[len(prefix):], True
        out[key] = value
    return out


def _torch_file(path: Path) -> dict:
    import pickle

    import torch

    try:
        try:
            payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:  # a legacy (non-zip) torch file cannot be memory-mapped
            if "mmap" not in str(exc):
                raise
            payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(f"{path}: refused, not a plain tensor file (read with weights_only=True): {exc}") from exc
    if isinstance(payload, dict):
        for key in ("model_state_dict", "module", "state_dict"):  # upstream _extract_checkpoint_state
            if isinstance(payload.get(key), dict):
                return payload[key]
        return payload
    raise CheckpointError(f"{path}: expected a state dict, got {type(payload).__name__}")


def load_state(files: Tuple[Path, ...]) -> dict:
    """The checkpoint's tensors, prefixes stripped as upstream does, read without running code."""
    state: dict = {}
    for path in files:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state.update(load_file(str(path), device="cpu"))
        else:
            state.update(_torch_file(path))
    return strip_prefixes(state)


def load_into(model, files: Tuple[Path, ...]) -> Dict[str, int]:
    """Load non-strictly as upstream, but refuse a checkpoint that leaves model weights unloaded
    (they would silently stay random)."""
    state = load_state(files)
    result = model.load_state_dict(state, strict=False)
    check_coverage(result.missing_keys, files)
    return {"tensors": len(state), "unexpected": len(result.unexpected_keys)}


def check_coverage(missing: List[str], files: Tuple[Path, ...]) -> None:
    if missing:
        raise CheckpointError(
            f"{files[0]} leaves {len(missing)} model weights unloaded (first: {', '.join(list(missing)[:5])}): "
            "not a checkpoint of this --checkpoint-family / recipe"
        )


__all__ = ["DeploymentFiles", "resolve", "verify", "identity_hashes", "pins", "shipped_pins", "load_state",
           "load_into", "check_coverage", "strip_prefixes", "VAE_FILE", "STATS_FILE"]
