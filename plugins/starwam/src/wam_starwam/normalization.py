"""StarWAM's ``action_stats.json`` and its normalisation, in float32 numpy.

Layout (``starwam.data.lerobot.load_lerobot_stats``): ``{"action": {min, max, mean, std,
count}, "state": {...}}`` of float lists; a flat ``{min, max, ...}`` file holds actions only.
The recipes point ``data.action_stats_path`` and ``data.state_stats_path`` at the same file.

LIBERO normalises min-max (``rollout._normalize_state``, ``_denormalize_action``)::

    state  -> clamp(2 (x - min) / max(max - min, 1e-6) - 1, -5, 5)
    action <- (clamp(y, -1, 1) + 1) * 0.5 * max(max - min, 1e-6) + min

RoboTwin z-scores (``eval.policy._normalize_vector``, ``_denormalize_action``) inside
StarwamPolicy, so this module only checks that file.

State statistics longer than the proprio are cut to its length, as upstream does
(``rollout._stat_tensor``: ``value[:dim]``, shorter is an error; ``_normalize_vector``:
``stats[...][:dim]``); action statistics are used whole, so they must match the action. The arithmetic below is upstream's, in
the same order and precision, so results are bit-identical (tests compare them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, Union

import attrs
import numpy as np

from wamcore.checkpoints import sha256_file
from wamcore.errors import CheckpointError

EPS = np.float32(1e-6)
CLAMP = 5.0
#: the fields each platform's normalisation reads
FIELDS = {"libero": ("min", "max"), "robotwin": ("mean", "std")}


@attrs.frozen(eq=False)
class Stats:
    """One checkpoint's action and state statistics, checked for a platform."""

    action: Dict[str, np.ndarray]
    state: Dict[str, np.ndarray]
    path: str
    sha256: str

    def normalize_state_minmax(self, x) -> np.ndarray:
        lo, hi = self.state["min"], self.state["max"]
        y = np.float32(2.0) * (np.asarray(x, dtype=np.float32) - lo) / np.maximum(hi - lo, EPS) - np.float32(1.0)
        return np.clip(y, -CLAMP, CLAMP).astype(np.float32)

    def restore_action_minmax(self, y) -> np.ndarray:
        lo, hi = self.action["min"], self.action["max"]
        a = np.clip(np.asarray(y, dtype=np.float32), -1.0, 1.0)
        return ((a + np.float32(1.0)) * np.float32(0.5) * np.maximum(hi - lo, EPS) + lo).astype(np.float32)


def load_stats(path: Union[str, Path], platform: str, *, action_dim: int, state_dim: int) -> Stats:
    """Read and check ``action_stats.json`` for ``platform``; every problem names the file."""
    p = Path(path)
    try:
        raw = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read StarWAM stats {p}: {exc}") from exc
    if not isinstance(raw, dict):
        raise CheckpointError(f"{p}: expected a JSON object of action/state statistics")
    if "action" not in raw and "state" not in raw:
        raw = {"action": raw}  # upstream reads a flat file as action-only
    problems = []
    blocks = {}
    for part, dim in (("action", action_dim), ("state", state_dim)):
        entry = raw.get(part)
        if not isinstance(entry, dict):
            problems.append(f"no {part!r} statistics (StarWAM normalises both actions and state)")
            continue
        block = {}
        for key in FIELDS[platform]:
            try:
                values = np.asarray(entry[key], dtype=np.float32)
            except KeyError:
                problems.append(f"{part}.{key} is missing")
                continue
            except (TypeError, ValueError):
                problems.append(f"{part}.{key} is not a list of numbers")
                continue
            if part == "state" and values.ndim == 1 and values.shape[0] > dim:
                values = values[:dim]  # upstream's _stat_tensor
            if part == "state" and values.ndim == 1 and values.shape[0] < dim:
                problems.append(f"{part}.{key} has {values.shape[0]} values, fewer than the {dim} of the {platform} "
                                f"proprio (upstream: \"state stats {key} dim {values.shape[0]} is smaller than proprio "
                                f"dim {dim}\")")
            elif values.shape != (dim,):
                problems.append(f"{part}.{key} has shape {values.shape}, expected ({dim},) for {platform}")
            elif not np.isfinite(values).all():
                problems.append(f"{part}.{key} is not finite")
            else:
                block[key] = values
        blocks[part] = block
    for part in ("action", "state"):
        block = blocks.get(part, {})
        if "min" in block and "max" in block and (block["max"] < block["min"]).any():
            problems.append(f"{part}.max is below {part}.min")
        if "std" in block and (block["std"] < 0).any():
            problems.append(f"{part}.std is negative")
    if problems:
        raise CheckpointError(f"StarWAM stats {p} are not usable for {platform}: " + "; ".join(problems))
    return Stats(action=blocks["action"], state=blocks["state"], path=str(p), sha256=sha256_file(p))


__all__ = ["Stats", "load_stats", "EPS", "CLAMP"]
