"""Intervals shared by ``wam compare`` (paired episodes) and ``wam probe`` (contexts)."""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np


def bootstrap_mean_interval(values: Sequence[float], rng: np.random.Generator, resamples: int) -> Optional[tuple]:
    """95% percentile bootstrap interval of the mean of ``values`` (each value one resampling
    unit: an episode pair, a context); None without values."""
    if len(values) == 0:
        return None
    x = np.asarray(values, dtype=np.float64)
    means = x[rng.integers(0, len(x), size=(resamples, len(x)))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(lo), float(hi)


__all__ = ["bootstrap_mean_interval"]
