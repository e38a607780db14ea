"""Metrics of one context, each by the capability it needs, and their summary over a set.

Every metric is a dict with ``status``: ``"ok"`` with its figures, or ``"skipped"`` with
``reason`` (and ``needs``, the capability the model does not declare). Nothing a model
cannot support is an error, and nothing is silently absent. docs/probe.md defines each.

Frames are compared on the 0-255 scale: MSE over pixels and channels, PSNR =
10 log10(255^2 / MSE) (``None`` where the frames are equal).
"""

from __future__ import annotations

import math
from itertools import combinations
from typing import Dict, List, Mapping, Optional

import numpy as np

from ..contracts import Capabilities, Observation, Prediction
from ..stats import bootstrap_mean_interval
from .branches import Rollout

#: a context's branch ranking "agrees" when Kendall's tau exceeds this: with 5 candidates,
#: at least 8 of the 10 pairs in reality's order
AGREEMENT_TAU = 0.5
#: ours, then WAMProbe's (:mod:`.counterfactual`)
METRICS = ("branch_separation", "future_frames", "candidate_futures", "branch_ranking", "values",
           "action_dependence", "counterfactual_direction", "noop_stability", "top1_regret")
#: context-block bootstrap of every summary figure: contexts resampled with replacement
BOOTSTRAP_RESAMPLES = 1000


def skipped(reason: str, needs: Optional[str] = None) -> dict:
    out = {"status": "skipped", "reason": reason}
    if needs:
        out["needs"] = needs
    return out


def lacks(backend: str, capability: str) -> dict:
    return skipped(f"model {backend!r} does not declare {capability}", capability)


def mse(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))


def psnr(error: float) -> Optional[float]:
    return None if error == 0 else 10.0 * math.log10(255.0 ** 2 / error)


def _gaussian_matrix(n: int, sigma: float) -> np.ndarray:
    x = np.arange(n, dtype=np.float64)
    k = np.exp(-0.5 * ((x[:, None] - x[None, :]) / sigma) ** 2)
    return k / k.sum(axis=1, keepdims=True)


def blurred(frame: np.ndarray) -> np.ndarray:
    """``frame`` under a Gaussian blur of sigma = 1/16 of its side. Pixel MSE stops growing
    once an object no longer overlaps where it was; blurred, it keeps growing with the
    distance moved, so that branches can be ordered by how far they take the scene."""
    h, w = frame.shape[:2]
    rows, cols = _gaussian_matrix(h, max(1.0, h / 16)), _gaussian_matrix(w, max(1.0, w / 16))
    along_rows = np.tensordot(rows, frame.astype(np.float64), axes=(1, 0))  # (h, w, c)
    return np.tensordot(along_rows, cols, axes=(1, 1)).transpose(0, 2, 1)


def kendall_tau(x, y) -> Optional[float]:
    """Kendall's tau-b (ties in either ranking allowed); None when a ranking is constant."""
    concordant = discordant = ties_x = ties_y = 0
    for i, j in combinations(range(len(x)), 2):
        dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
        if dx == 0 and dy == 0:
            continue
        if dx == 0:
            ties_x += 1
        elif dy == 0:
            ties_y += 1
        elif dx == dy:
            concordant += 1
        else:
            discordant += 1
    denominator = math.sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))
    return None if denominator == 0 else (concordant - discordant) / denominator


def predicted_frames(prediction: Prediction, role: str, steps: int) -> Dict[int, np.ndarray]:
    """The predicted frames of ``role`` by the step they show: one frame is the chunk's end;
    K frames are spread evenly, the last at the chunk's end."""
    frames = (prediction.future_observations or {}).get(role)
    if frames is None:
        return {}
    frames = np.asarray(frames)
    if frames.ndim == 3:
        return {steps: frames}
    k = len(frames)
    return {max(1, round(steps * (i + 1) / k)): frames[i] for i in range(k)}


# ----------------------------------------------------------------------------- one context


def branch_separation(rollouts: Mapping[str, Rollout], horizons) -> dict:
    """How far apart the branches' real futures are, per horizon (always computed)."""
    if len(rollouts) < 2:
        return skipped("needs at least two branches; the platform names no interventions")
    out = {}
    for h in horizons:
        pairs = [(a, b) for a, b in combinations(rollouts.values(), 2) if a.steps >= h and b.steps >= h]
        if not pairs:
            continue
        state = [float(np.linalg.norm(a.state_at(h) - b.state_at(h))) for a, b in pairs]
        if pairs[0][0].frames:
            frame = [np.mean([mse(a.frames[r][h - 1], b.frames[r][h - 1]) for r in a.frames]) for a, b in pairs]
            frames = {"frame_mse_min": float(min(frame)), "frame_mse_mean": float(np.mean(frame))}
        else:  # a platform without cameras: branches differ by their states
            frame, frames = state, {"frame_mse_min": None, "frame_mse_mean": None}
        out[str(h)] = {"pairs": len(pairs), "distinct_pairs": int(sum(f > 0 for f in frame)), **frames,
                       "state_distance_min": min(state), "state_distance_mean": float(np.mean(state))}
    return {"status": "ok", "horizons": out, "outcomes": {n: r.outcome() for n, r in rollouts.items()}}


def _frame_scores(prediction: Prediction, real: Rollout, now: Observation) -> dict:
    """Predicted frames against the real ones, beside the current frame as the baseline."""
    cameras, problems = {}, []
    for role in sorted((prediction.future_observations or {})):
        if role not in real.frames:
            problems.append(f"predicted camera {role!r} is not observed")
            continue
        for step, frame in predicted_frames(prediction, role, len(prediction.actions)).items():
            if step > real.steps:
                problems.append(f"{role} frame for step {step} is beyond the branch's {real.steps} steps")
                continue
            truth = real.frames[role][step - 1]
            if frame.shape != truth.shape:
                problems.append(f"{role} predicted {frame.shape[:2]}, camera {truth.shape[:2]}")
                continue
            error, baseline = mse(frame, truth), mse(np.asarray(now.images[role]), truth)
            cameras[f"{role}@{step}"] = {"mse": error, "psnr": psnr(error), "current_mse": baseline,
                                         "current_psnr": psnr(baseline), "closer_than_current": error < baseline}
    if not cameras:
        return skipped("; ".join(problems) or "the prediction carries no future frame")
    return {"status": "ok", "frames": cameras, **({"problems": problems} if problems else {})}


def future_frames(caps: Capabilities, backend: str, prediction: Prediction, real: Rollout, now: Observation) -> dict:
    """The model's predicted future of its own chunk against that chunk's real future."""
    if not caps.future_observations:
        return lacks(backend, "future_observations")
    return _frame_scores(prediction, real, now)


def candidate_futures(caps: Capabilities, backend: str, candidates: Mapping[str, object],
                      rollouts: Mapping[str, Rollout], now: Observation) -> dict:
    """Each intervention's predicted future (asked as candidate actions) against its real one."""
    if not caps.action_conditioned_futures:
        return lacks(backend, "action_conditioned_futures")
    scored = {n: _frame_scores(p, rollouts[n], now) if isinstance(p, Prediction) else skipped(p)
              for n, p in candidates.items()}
    if not any(s["status"] == "ok" for s in scored.values()):
        return skipped("no intervention could be scored: " + "; ".join(f"{n}: {s['reason']}" for n, s in scored.items()))
    return {"status": "ok", "candidates": scored}


def end_frames(candidates: Mapping[str, object], rollouts: Mapping[str, Rollout], now: Observation) -> list:
    """Per candidate that can be scored: (name, predicted end frame, real frame at that step,
    the current frame blurred), on the first camera it predicts."""
    rows = []
    for name, pred in candidates.items():
        if not isinstance(pred, Prediction):
            continue
        for role in sorted(pred.future_observations or {}):
            frames = predicted_frames(pred, role, len(pred.actions))
            step = max(frames) if frames else 0
            real = rollouts[name].frames.get(role)
            if not frames or real is None or step > len(real) or frames[step].shape != real[step - 1].shape:
                continue
            rows.append((name, frames[step], real[step - 1], blurred(np.asarray(now.images[role]))))
            break  # one camera per branch: the first predicted one
    return rows


def branch_ranking(caps: Capabilities, backend: str, candidates: Mapping[str, object],
                   rollouts: Mapping[str, Rollout], now: Observation) -> dict:
    """Does the model order the interventions by how far they take the scene as reality does
    (Kendall's tau over the blurred frames' MSE to the current one), and is each predicted
    future nearest its own real one (identified)?"""
    if not caps.action_conditioned_futures:
        return lacks(backend, "action_conditioned_futures")
    rows = [(name, mse(blurred(p), c), mse(blurred(r), c), p, r) for name, p, r, c in end_frames(candidates, rollouts, now)]
    if len(rows) < 3:
        return skipped(f"needs at least three scorable candidate futures, got {len(rows)}")
    tau = kendall_tau([r[1] for r in rows], [r[2] for r in rows])
    identified = [int(np.argmin([mse(r[3], s[4]) for s in rows])) == i for i, r in enumerate(rows)]
    return {"status": "ok", "branches": [r[0] for r in rows],
            "predicted_change": [r[1] for r in rows], "real_change": [r[2] for r in rows],
            "kendall_tau": tau, "agrees": tau is not None and tau > AGREEMENT_TAU,
            "identified": sum(identified), "candidates": len(rows)}


def values(caps: Capabilities, backend: str, scored: Mapping[str, object], rollouts: Mapping[str, Rollout]) -> dict:
    """Each predicted value (read as the probability that the branch succeeds) against the
    branch's real success."""
    if not caps.values:
        return lacks(backend, "values")
    pairs = [{"branch": n, "value": float(p.values[0]), "success": rollouts[n].outcome()["success"]}
             for n, p in scored.items() if isinstance(p, Prediction) and p.values is not None and len(p.values)]
    if not pairs:
        return skipped("the predictions carry no value")
    brier = float(np.mean([(p["value"] - p["success"]) ** 2 for p in pairs]))
    return {"status": "ok", "pairs": pairs, "brier": brier}


# ----------------------------------------------------------------------------- summary


def _mean(xs: List[float]) -> Optional[float]:
    return float(np.mean(xs)) if xs else None


def _first_skip(entries: List[dict]) -> dict:
    return next(e for e in entries if e["status"] == "skipped")


def summarise(contexts: List[dict], *, seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES) -> dict:
    """One figure set per metric over every context (a metric skipped everywhere stays
    skipped, with its reason), each with ``ci95``: a seeded percentile bootstrap interval per
    figure, resampling whole contexts (branches and frames of one context are not independent)."""
    out = {}
    for name in METRICS:
        entries = [c["metrics"][name] for c in contexts]
        ok = [e for e in entries if e["status"] == "ok"]
        if not ok:
            out[name] = _first_skip(entries) if entries else skipped("no contexts")
            continue
        per_context = [_FIGURES[name](e) for e in ok]
        intervals = {f: bootstrap_interval([c[f] for c in per_context if c.get(f) is not None], seed, resamples)
                     for f in per_context[0]}
        summary = _SUMMARIES[name](ok) if name in _SUMMARIES else {
            f: _mean([c[f] for c in per_context if c.get(f) is not None]) for f in per_context[0]}
        out[name] = {"status": "ok", "contexts": len(ok), **summary, "ci95": intervals}
        if len(ok) < len(entries):
            out[name]["skipped_contexts"] = len(entries) - len(ok)
    return out


def bootstrap_interval(values: List[float], seed: int, resamples: int = BOOTSTRAP_RESAMPLES) -> Optional[list]:
    """95% percentile interval of the mean of ``values`` (one per context), resampled from
    ``numpy.random.default_rng(seed)``; None without values."""
    found = bootstrap_mean_interval(values, np.random.default_rng(seed), resamples)
    return None if found is None else list(found)


def _separation(entries: List[dict]) -> dict:
    horizons: Dict[str, dict] = {}
    for e in entries:
        for h, s in e["horizons"].items():
            acc = horizons.setdefault(h, {"pairs": 0, "distinct_pairs": 0, "frame_mse_min": math.inf,
                                          "frame": [], "state_distance_min": math.inf, "state": []})
            acc["pairs"] += s["pairs"]
            acc["distinct_pairs"] += s["distinct_pairs"]
            if s["frame_mse_min"] is not None:  # None: no cameras
                acc["frame_mse_min"] = min(acc["frame_mse_min"], s["frame_mse_min"])
                acc["frame"].append(s["frame_mse_mean"])
            acc["state_distance_min"] = min(acc["state_distance_min"], s["state_distance_min"])
            acc["state"].append(s["state_distance_mean"])
    return {"horizons": {h: {"pairs": a["pairs"], "distinct_pairs": a["distinct_pairs"],
                             "frame_mse_min": a["frame_mse_min"] if a["frame"] else None,
                             "frame_mse_mean": _mean(a["frame"]),
                             "state_distance_min": a["state_distance_min"], "state_distance_mean": _mean(a["state"])}
                         for h, a in horizons.items()}}


def _frame_summary(scores: List[dict]) -> dict:
    predicted = [s["mse"] for s in scores]
    current = [s["current_mse"] for s in scores]
    return {"frames": len(scores), "mse": _mean(predicted), "current_mse": _mean(current),
            "psnr": _mean([s["psnr"] for s in scores if s["psnr"] is not None]),
            "current_psnr": _mean([s["current_psnr"] for s in scores if s["current_psnr"] is not None]),
            "closer_than_current": sum(s["closer_than_current"] for s in scores)}


def _futures(entries: List[dict]) -> dict:
    return _frame_summary([f for e in entries for f in e["frames"].values()])


def _candidates(entries: List[dict]) -> dict:
    return _frame_summary([f for e in entries for c in e["candidates"].values() if c["status"] == "ok"
                           for f in c["frames"].values()])


def _ranking(entries: List[dict]) -> dict:
    taus = [e["kendall_tau"] for e in entries if e["kendall_tau"] is not None]
    return {"kendall_tau_mean": _mean(taus), "agreeing_contexts": sum(e["agrees"] for e in entries),
            "agreement_tau": AGREEMENT_TAU, "identified": sum(e["identified"] for e in entries),
            "candidates": sum(e["candidates"] for e in entries)}


def _values(entries: List[dict]) -> dict:
    pairs = [p for e in entries for p in e["pairs"]]
    return {"pairs": len(pairs), "successes": sum(p["success"] for p in pairs),
            "brier": _mean([(p["value"] - p["success"]) ** 2 for p in pairs])}


def _last_horizon(e: dict) -> dict:
    s = e["horizons"][max(e["horizons"], key=int)] if e["horizons"] else {}
    return {"state_distance_mean": s.get("state_distance_mean"), "frame_mse_mean": s.get("frame_mse_mean")}


def _frame_figures(scores: List[dict]) -> dict:
    return {"mse": _mean([s["mse"] for s in scores]), "psnr": _mean([s["psnr"] for s in scores if s["psnr"] is not None])}


#: the figures of one context that its summary averages, each given a bootstrap interval
_FIGURES = {
    "branch_separation": _last_horizon,
    "future_frames": lambda e: _frame_figures(list(e["frames"].values())),
    "candidate_futures": lambda e: _frame_figures([f for c in e["candidates"].values() if c["status"] == "ok"
                                                   for f in c["frames"].values()]),
    "branch_ranking": lambda e: {"kendall_tau": e["kendall_tau"], "identified": e["identified"] / e["candidates"]},
    "values": lambda e: {"brier": e["brier"]},
    "action_dependence": lambda e: {"score": e["score"], "permutation_effect": e["permutation"]["effect"],
                                    "permutation_p_value": e["permutation"]["p_value"]},
    "counterfactual_direction": lambda e: {"direction": e["direction"]},
    "noop_stability": lambda e: {"stable": float(e["stable"]), "exact": float(e["exact"])},
    "top1_regret": lambda e: {"regret": e["regret"]},
}

_SUMMARIES = {"branch_separation": _separation, "future_frames": _futures, "candidate_futures": _candidates,
              "branch_ranking": _ranking, "values": _values}

__all__ = ["METRICS", "AGREEMENT_TAU", "BOOTSTRAP_RESAMPLES", "bootstrap_interval", "end_frames", "blurred", "branch_separation", "future_frames", "candidate_futures",
           "branch_ranking", "values", "summarise", "kendall_tau", "mse", "psnr", "skipped"]
