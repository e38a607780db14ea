"""Cosmos3's LIBERO action output -> LIBERO's native OSC delta chunk.

Cosmos3's LIBERO fine-tune predicts 10 channels per step, ``[dpos(3), rot6d(6),
gripper(1)]``, frame-wise relative and normalised with ``quantile_rot`` (cosmos-framework
``libero_lerobot_dataset.py``; metadata of ``libero_native_frame_wise_relative_rot6d.json``).
SGLang pads the model's output to its action width and slices it back to ``raw_action_dim``;
in policy mode it does not de-normalise ``quantile_rot`` (a server launched with
``action_stats_path`` knows only ``quantile``, ``meanstd`` and ``minmax`` over the stats'
``global`` block), so the client does, as RLinf's ``Cosmos3SGLangAdapter._action_to_env``
(RL#1487 ``rlinf/models/embodiment/cosmos3/sglang_adapter.py``):

1. keep the first 10 channels;
2. ``a = (x + 1) / 2 * (q99 - q01) + q01`` with the stats under ``global_raw``
   (``quantile_rot``) or ``global`` (``quantile``), no clamp;
3. rot6d = the first two *columns* of the rotation matrix: Gram-Schmidt, third column
   ``c0 x c1``, then the rotation vector (axis * angle);
4. gripper as RLinf's ``prepare_actions_for_libero`` for COSMOS3 (RL#1487
   ``rlinf/envs/action_utils.py``): ``sign(2g - 1) * -1``, i.e. model 1 (open) -> LIBERO
   -1 (open), model 0 -> +1 (close), exactly 0.5 -> 0;
5. pad (repeat the last row) or truncate to the chunk size.

Then every value is clipped to the control's bounds, which is what robosuite's OSC
controller does to its inputs anyway, so the executed motion is unchanged and a slightly
out-of-range prediction does not get the whole chunk refused. The count is reported.
The rotation is computed here with numpy (no scipy in the worker); the tests check it
against ``scipy.spatial.transform.Rotation``, which RLinf calls.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import attrs
import numpy as np

from wamcore import ConfigurationError, ControlSpec
from wamcore.checkpoints import sha256_file
from wamcore.errors import CheckpointError, PredictionError

RAW_ACTION_DIM = 10
_DEGENERATE = 1e-6


@attrs.frozen(eq=False)
class ActionStats:
    """The two quantiles the quantile formula needs, and where they came from."""

    q01: np.ndarray
    q99: np.ndarray
    path: str
    key: str
    sha256: str


def load_stats(path: Optional[str], normalization: str) -> Optional[ActionStats]:
    """The statistics for ``normalization`` (None for ``none``), checked at start-up."""
    if normalization == "none":
        return None
    if not path:
        raise ConfigurationError(
            f"--cosmos3-action-stats is required for --cosmos3-action-normalization {normalization}: the dataset "
            "statistics JSON the model was trained with (cosmos-framework's "
            "libero_native_frame_wise_relative_rot6d.json for LIBERO), or 'none' if SGLang de-normalises itself"
        )
    file = Path(path)
    try:
        raw = json.loads(file.read_text())
    except OSError as exc:
        raise CheckpointError(f"cannot read the action statistics {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise CheckpointError(f"the action statistics {path} are not JSON: {exc}") from None
    key = "global_raw" if normalization == "quantile_rot" else "global"
    nested = isinstance(raw, dict) and ("global" in raw or "global_raw" in raw)
    if nested and key not in raw:
        raise CheckpointError(f"{path} has no {key!r} block, which --cosmos3-action-normalization {normalization} reads")
    block = raw[key] if nested else raw
    where = f"{path} [{key if nested else 'top level'}]"
    if not isinstance(block, dict) or "q01" not in block or "q99" not in block:
        raise CheckpointError(f"{where} has no q01/q99 statistics")
    try:
        q01 = np.asarray(block["q01"], dtype=np.float64)
        q99 = np.asarray(block["q99"], dtype=np.float64)
    except (TypeError, ValueError):
        raise CheckpointError(f"{where}: q01/q99 must be lists of numbers") from None
    for name, q in (("q01", q01), ("q99", q99)):
        if q.shape != (RAW_ACTION_DIM,) or not np.isfinite(q).all():
            raise CheckpointError(f"{where}: {name} must be {RAW_ACTION_DIM} finite numbers, got shape {q.shape}")
    if (q99 < q01).any():
        raise CheckpointError(f"{where}: q99 < q01 in dims {np.flatnonzero(q99 < q01).tolist()}")
    return ActionStats(q01=q01, q99=q99, path=str(file), key=key if nested else "", sha256=sha256_file(file))


def denormalize(x: np.ndarray, stats: Optional[ActionStats]) -> np.ndarray:
    """Quantile inverse, channel by channel; identity without stats."""
    if stats is None:
        return x
    return (x + 1.0) / 2.0 * (stats.q99 - stats.q01) + stats.q01


def rot6d_to_matrix(rot6d: np.ndarray) -> np.ndarray:
    """``[T, 6]`` (first two columns) -> ``[T, 3, 3]`` proper rotations, by Gram-Schmidt."""
    a, b = rot6d[:, 0:3], rot6d[:, 3:6]
    na = np.linalg.norm(a, axis=1)
    c0 = a / np.maximum(na, _DEGENERATE)[:, None]
    b = b - np.sum(b * c0, axis=1, keepdims=True) * c0
    nb = np.linalg.norm(b, axis=1)
    bad = np.flatnonzero((na < _DEGENERATE) | (nb < _DEGENERATE))
    if bad.size:
        raise PredictionError(
            [f"rot6d of steps {bad.tolist()} does not span a rotation (zero or parallel columns)"], context="cosmos3"
        )
    c1 = b / nb[:, None]
    return np.stack([c0, c1, np.cross(c0, c1)], axis=-1)


def matrix_to_axis_angle(matrix: np.ndarray) -> np.ndarray:
    """``[T, 3, 3]`` rotations -> ``[T, 3]`` rotation vectors, angle in [0, pi].

    Through the unit quaternion, built from the largest of (trace, diagonal) so it stays
    accurate near 180 degrees (Shepperd's method)."""
    m = matrix
    t = len(m)
    trace = np.trace(m, axis1=1, axis2=2)
    pick = np.argmax(np.stack([m[:, 0, 0], m[:, 1, 1], m[:, 2, 2], trace], axis=1), axis=1)
    q = np.empty((t, 4))  # x, y, z, w
    rows = np.flatnonzero(pick == 3)
    q[rows] = np.stack(
        [m[rows, 2, 1] - m[rows, 1, 2], m[rows, 0, 2] - m[rows, 2, 0], m[rows, 1, 0] - m[rows, 0, 1], 1.0 + trace[rows]],
        axis=1,
    )
    for i in range(3):
        rows = np.flatnonzero(pick == i)
        j, k = (i + 1) % 3, (i + 2) % 3
        q[rows, i] = 1.0 - trace[rows] + 2.0 * m[rows, i, i]
        q[rows, j] = m[rows, j, i] + m[rows, i, j]
        q[rows, k] = m[rows, k, i] + m[rows, i, k]
        q[rows, 3] = m[rows, k, j] - m[rows, j, k]
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    q[q[:, 3] < 0] *= -1.0
    vec = q[:, :3]
    angle = 2.0 * np.arctan2(np.linalg.norm(vec, axis=1), q[:, 3])
    small = angle < 1e-3
    safe = np.where(small, 1.0, angle)
    scale = np.where(small, 2.0 + angle**2 / 12.0 + 7.0 * angle**4 / 2880.0, safe / np.sin(safe / 2.0))
    return vec * scale[:, None]


def gripper_to_control(g: np.ndarray, control: ControlSpec) -> np.ndarray:
    """Model gripper (1 = open, 0 = closed) -> the platform's open/close values."""
    spec = control.gripper
    s = np.sign(2.0 * g - 1.0)
    return np.where(s > 0, spec.open, np.where(s < 0, spec.close, (spec.open + spec.close) / 2.0))


def fit_chunk(actions: np.ndarray, size: int) -> np.ndarray:
    """Truncate to ``size`` rows, or pad by repeating the last row."""
    if len(actions) >= size:
        return actions[:size]
    return np.concatenate([actions, np.repeat(actions[-1:], size - len(actions), axis=0)], axis=0)


def restore(values: np.ndarray, stats: Optional[ActionStats], control: ControlSpec, chunk_size: int) -> tuple:
    """``[H, D >= 10]`` model output -> (``[chunk_size, 7]`` float32 native actions, values clipped)."""
    a = denormalize(np.asarray(values[:, :RAW_ACTION_DIM], dtype=np.float64), stats)
    axis_angle = matrix_to_axis_angle(rot6d_to_matrix(a[:, 3:9]))
    gripper = gripper_to_control(a[:, 9], control)
    native = fit_chunk(np.concatenate([a[:, 0:3], axis_angle, gripper[:, None]], axis=1), chunk_size)
    clipped = 0
    if control.low is not None or control.high is not None:
        low = -np.inf if control.low is None else np.asarray(control.low)
        high = np.inf if control.high is None else np.asarray(control.high)
        bounded = np.clip(native, low, high)
        clipped = int(np.count_nonzero(bounded != native))
        native = bounded
    return native.astype(np.float32), clipped


__all__ = [
    "RAW_ACTION_DIM",
    "ActionStats",
    "load_stats",
    "denormalize",
    "rot6d_to_matrix",
    "matrix_to_axis_angle",
    "gripper_to_control",
    "fit_chunk",
    "restore",
]
