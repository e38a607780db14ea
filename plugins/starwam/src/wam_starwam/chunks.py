"""StarWAM's action chunk: 32 rows (``framework.chunk_size`` of every recipe), of which a
deployment executes the first ``--replan-steps``."""

from __future__ import annotations

from typing import Any

import numpy as np

from wamcore import PredictRequest, Prediction
from wamcore.errors import PredictionError

HORIZON = 32


def as_chunk(pred: Any, dim: int) -> np.ndarray:
    """The model's output as a float32 ``(32, dim)`` array (a leading batch of one dropped)."""
    action = pred.detach().float().cpu().numpy() if hasattr(pred, "detach") else np.asarray(pred, dtype=np.float32)
    if action.ndim == 3 and action.shape[0] == 1:
        action = action[0]
    if action.shape != (HORIZON, dim):
        raise PredictionError([f"StarWAM returned an action of shape {action.shape}, expected ({HORIZON}, {dim})"],
                              context="starwam")
    return action.astype(np.float32)


def prefix_decoder(platform: str, dim: int, replan_steps: int):
    """``Adapter.decode``: the executed prefix of a restored chunk."""

    def decode(native, request: PredictRequest) -> Prediction:
        actions = np.asarray(native)
        if actions.shape != (HORIZON, dim) or actions.dtype != np.float32:
            raise PredictionError([f"StarWAM returned {actions.dtype} {actions.shape}, expected float32 ({HORIZON}, {dim})"],
                                  context=platform)
        return Prediction(actions=actions[:replan_steps])

    return decode


__all__ = ["HORIZON", "as_chunk", "prefix_decoder"]
