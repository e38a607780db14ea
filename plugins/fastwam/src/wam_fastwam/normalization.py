"""FastWAM's z-score normalisation of the RoboTwin state and actions, from its dataset stats.

FastWAM's RoboTwin processor normalises the merged 14-D state and action (key ``default``)
with ``norm_default_mode: z-score`` and global statistics (``configs/data/robotwin.yaml``).
Its ``SingleFieldLinearNormalizer`` (``src/fastwam/datasets/lerobot/utils/normalizer.py``)
computes, in float32, ``scale = 1 / (std + 1e-8)`` and ``offset = -mean / (std + 1e-8)``;
forward is ``clamp(x * scale + offset, -5, 5)``, backward ``(y - offset) / scale``. The same
arithmetic runs here in float32 numpy, so the worker's inputs and outputs match the official
path.

Stats file layout (``*_dataset_stats.json`` shipped with the checkpoint)::

    {"state":  {"default": {"global_mean": [14], "global_std": [14], ...}},
     "action": {"default": {"global_mean": [14], "global_std": [14], ...}}}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Union

import attrs
import numpy as np

from wamcore.errors import CheckpointError

STD_REG = 1e-8
CLAMP = 5.0
STATS_KEY = "default"


def _f32(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


@attrs.frozen(eq=False)
class ZScore:
    """One field's z-score normaliser (float32, FastWAM's regularised std and clamp)."""

    mean: np.ndarray = attrs.field(converter=_f32)
    std: np.ndarray = attrs.field(converter=_f32)

    @property
    def scale(self) -> np.ndarray:
        return (np.float32(1.0) / (self.std + np.float32(STD_REG))).astype(np.float32)

    @property
    def offset(self) -> np.ndarray:
        return (-self.mean / (self.std + np.float32(STD_REG))).astype(np.float32)

    def normalize(self, x) -> np.ndarray:
        y = _f32(x) * self.scale + self.offset
        return np.clip(y, -CLAMP, CLAMP).astype(np.float32)

    def restore(self, y) -> np.ndarray:
        return ((_f32(y) - self.offset) / self.scale).astype(np.float32)


@attrs.frozen(eq=False)
class DatasetStats:
    """The state and action normalisers of one checkpoint."""

    state: ZScore
    action: ZScore
    source: str = ""


def load_dataset_stats(path: Union[str, Path], *, dim: int) -> DatasetStats:
    """Read a FastWAM ``*_dataset_stats.json``; a missing key or a wrong size names the file."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read the Fast-WAM dataset stats {p}: {exc}") from exc
    fields = {}
    for field in ("state", "action"):
        try:
            entry = data[field][STATS_KEY]
            mean, std = _f32(entry["global_mean"]), _f32(entry["global_std"])
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(
                f"{p.name}: expected {field}.{STATS_KEY}.global_mean and global_std (FastWAM's dataset stats layout), "
                f"missing {exc}"
            ) from exc
        if mean.shape != (dim,) or std.shape != (dim,):
            raise CheckpointError(
                f"{p.name}: {field} statistics have shapes {mean.shape} / {std.shape}, expected ({dim},): "
                "not the stats of this model's checkpoint"
            )
        if not (np.isfinite(mean).all() and np.isfinite(std).all()) or (std < 0).any():
            raise CheckpointError(f"{p.name}: {field} statistics hold non-finite values or a negative std")
        fields[field] = ZScore(mean=mean, std=std)
    return DatasetStats(state=fields["state"], action=fields["action"], source=str(p))


__all__ = ["ZScore", "DatasetStats", "load_dataset_stats", "STD_REG", "CLAMP"]
