"""WAMProbe's counterfactual metrics, on the branches of one context (docs/probe.md).

WAMProbe (myheart521/WAMProbe, ``src/wamprobe/metrics.py`` and ``evaluation.py``) defines
them on predicted and true *state* endpoints of action branches from one context. Our
models predict *frames*, so the endpoint of a branch is its end frame blurred as for
``branch_ranking`` (Gaussian, sigma = 1/16 of the side; blurred distance keeps growing with
the distance an object moved) and distances are RMS over pixels and channels (grey levels).
Top-1 Regret uses WAMProbe's definition as is, with the model's value as its score and the
branch's real return as the truth.
"""

from __future__ import annotations

import hashlib
import math
from itertools import combinations, permutations
from typing import Mapping, Sequence

import numpy as np

from ..contracts import Capabilities, Observation, Prediction
from .branches import Rollout
from .metrics import blurred, end_frames, lacks, skipped

#: WAMProbe's permutation count (all permutations when there are fewer: 5 branches give 119)
PERMUTATIONS = 128
#: names a platform's no-op intervention goes by
NO_OP_NAMES = ("no-op", "noop")


def _rms(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sqrt(np.mean((a - b) ** 2)))


def _pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """WAMProbe's ``_pearson``: 0 where either side is constant, clipped to [-1, 1]."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    x, y = x - x.mean(), y - y.mean()
    denominator = math.sqrt(float((x * x).sum() * (y * y).sum()))
    return 0.0 if denominator <= 1e-15 else max(-1.0, min(1.0, float((x * y).sum()) / denominator))


def _pairwise(endpoints: Sequence[np.ndarray]) -> list:
    return [_rms(endpoints[i], endpoints[j]) for i, j in combinations(range(len(endpoints)), 2)]


def _permutation_indices(size: int, count: int, seed: int) -> list:
    """Every non-identity permutation when there are at most ``count``; else ``count`` distinct
    ones drawn from the seed."""
    identity = tuple(range(size))
    if math.factorial(size) - 1 <= count:
        return [p for p in permutations(range(size)) if p != identity]
    rng, chosen = np.random.default_rng(seed), set()
    while len(chosen) < count:
        p = tuple(int(i) for i in rng.permutation(size))
        if p != identity:
            chosen.add(p)
    return sorted(chosen)


def permutation_test(predicted: Sequence[np.ndarray], true: Sequence[np.ndarray], *, seed: int,
                     count: int = PERMUTATIONS) -> dict:
    """Pearson correlation of the true and predicted pairwise endpoint distances, against the
    same with the predicted endpoints permuted among the branches (the within-context null)."""
    truth = _pairwise(true)
    observed = _pearson(truth, _pairwise(predicted))
    null = np.array([_pearson(truth, _pairwise([predicted[i] for i in p]))
                     for p in _permutation_indices(len(predicted), count, seed)])
    sd = float(null.std())
    return {"observed": observed, "null_mean": float(null.mean()), "null_sd": sd,
            "effect": (observed - float(null.mean())) / sd if sd > 1e-15 else 0.0,
            "p_value": float((1 + np.sum(null >= observed - 1e-15)) / (1 + len(null))), "permutations": len(null)}


def context_seed(seed: int, context: str) -> int:
    """WAMProbe's per-context permutation seed: the first 8 bytes of sha256(seed NUL context)."""
    return int.from_bytes(hashlib.sha256(f"{seed}\0{context}".encode()).digest()[:8], "big")


def _endpoints(candidates, rollouts, now):
    return [(name, blurred(p), blurred(r), c) for name, p, r, c in end_frames(candidates, rollouts, now)]


def action_dependence(caps: Capabilities, backend: str, candidates: Mapping[str, object],
                      rollouts: Mapping[str, Rollout], now: Observation, *, seed: int) -> dict:
    """Do the predicted futures separate as the actions do? ``score``: mean predicted pairwise
    endpoint distance over the mean true one, clipped to [0, 1]; ``permutation``: the
    permutation test of the distance geometry (effect and add-one p-value)."""
    if not caps.action_conditioned_futures:
        return lacks(backend, "action_conditioned_futures")
    rows = _endpoints(candidates, rollouts, now)
    if len(rows) < 3:
        return skipped(f"needs at least three scorable candidate futures, got {len(rows)}")
    predicted, true = [r[1] for r in rows], [r[2] for r in rows]
    true_mean = float(np.mean(_pairwise(true)))
    score = min(1.0, float(np.mean(_pairwise(predicted))) / true_mean) if true_mean else 0.0
    return {"status": "ok", "branches": [r[0] for r in rows], "score": score,
            "permutation": permutation_test(predicted, true, seed=seed)}


def counterfactual_direction(caps: Capabilities, backend: str, candidates: Mapping[str, object],
                             rollouts: Mapping[str, Rollout], now: Observation) -> dict:
    """Mean cosine between each branch's predicted and true displacement from the current frame
    (branches whose real frame did not move are left out; a prediction that did not move scores 0)."""
    if not caps.action_conditioned_futures:
        return lacks(backend, "action_conditioned_futures")
    cosines = {}
    for name, predicted, true, current in _endpoints(candidates, rollouts, now):
        t, p = (true - current).ravel(), (predicted - current).ravel()
        if np.linalg.norm(t) <= 1e-12:
            continue
        cosines[name] = 0.0 if np.linalg.norm(p) <= 1e-12 else float(p @ t / (np.linalg.norm(p) * np.linalg.norm(t)))
    if not cosines:
        return skipped("no candidate branch changed the scene")
    return {"status": "ok", "cosines": cosines, "direction": float(np.mean(list(cosines.values())))}


def noop_stability(caps: Capabilities, backend: str, candidates: Mapping[str, object],
                   rollouts: Mapping[str, Rollout], now: Observation) -> dict:
    """Does the no-op prediction agree with the true no-op future? ``exact``: WAMProbe's
    fidelity (identical, every grey level); ``stable``: nearer the real no-op future than any
    other branch's real future (blurred), the tolerance generated frames need."""
    if not caps.action_conditioned_futures:
        return lacks(backend, "action_conditioned_futures")
    rows = {name: (p, r, blurred(p), blurred(r)) for name, p, r, _ in end_frames(candidates, rollouts, now)}
    noop = next((n for n in NO_OP_NAMES if n in rows), None)
    if noop is None:
        return skipped("the platform names no scorable no-op intervention (" + " or ".join(NO_OP_NAMES) + ")")
    p, r, pb, rb = rows[noop]
    to_own = _rms(pb, rb)
    others = [_rms(pb, o[3]) for n, o in rows.items() if n != noop]
    return {"status": "ok", "branch": noop, "exact": bool(np.array_equal(p, r)), "distance": to_own,
            "nearest_other": min(others) if others else None,
            "stable": bool(not others or to_own < min(others))}


def top1_regret(caps: Capabilities, backend: str, candidates: Mapping[str, object],
                rollouts: Mapping[str, Rollout]) -> dict:
    """The real return lost by executing the candidate the model values most instead of the
    best one: max real return minus the real return of argmax predicted value (first on ties)."""
    if not caps.action_conditioned_futures:
        return lacks(backend, "action_conditioned_futures")
    if not caps.values:
        return lacks(backend, "values")
    scores = {n: float(p.values[0]) for n, p in candidates.items()
              if isinstance(p, Prediction) and p.values is not None and len(p.values)}
    if len(scores) < 2:
        return skipped(f"needs at least two candidates with a value, got {len(scores)}")
    returns = {n: rollouts[n].outcome()["return"] for n in scores}
    selected = max(scores, key=scores.__getitem__)
    optimal = max(returns, key=returns.__getitem__)
    return {"status": "ok", "selected": selected, "optimal": optimal, "regret": returns[optimal] - returns[selected],
            "returns": returns, "values": scores}


__all__ = ["action_dependence", "counterfactual_direction", "noop_stability", "top1_regret", "permutation_test",
           "context_seed", "PERMUTATIONS", "NO_OP_NAMES"]
