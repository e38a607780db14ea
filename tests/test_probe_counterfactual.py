"""WAMProbe's metrics on branches with known futures: the reference orderings its metric cards
state (oracle best; action-agnostic and static models weak; a reversed model worse than the
oracle), the permutation null, Top-1 Regret, and the seeded context bootstrap."""

from __future__ import annotations

import numpy as np
import pytest

from wamcore import Capabilities, Observation, Prediction
from wamcore.probe import counterfactual as cf
from wamcore.probe.branches import Rollout
from wamcore.probe.metrics import bootstrap_interval

ROLE = "primary"
MOVES = {"no-op": (0, 0), "+x": (0, 10), "-x": (0, -10), "+y": (-10, 0), "-y": (10, 0)}
ALL = Capabilities(actions=True, future_observations=True, values=True, action_conditioned_futures=True)


def frame(dy: int, dx: int) -> np.ndarray:
    image = np.full((48, 48, 3), 40, np.uint8)
    image[20 + dy:28 + dy, 20 + dx:28 + dx] = 220
    return image


def branches(returns=None):
    returns = returns or dict.fromkeys(MOVES, 0.0)
    rollouts = {n: Rollout(n, {ROLE: np.stack([frame(dy // 2, dx // 2), frame(dy, dx)])}, {}, np.array([0.0, returns[n]]),
                           np.zeros(2, bool), None) for n, (dy, dx) in MOVES.items()}
    return rollouts, Observation(images={ROLE: frame(0, 0)}, state={})


def predictions(futures, values=None):
    return {n: Prediction(actions=np.zeros((2, 2), np.float32), future_observations={ROLE: f},
                          values=None if values is None else [values[n]]) for n, f in futures.items()}


ORACLE = {n: frame(*m) for n, m in MOVES.items()}
STATIC = {n: frame(0, 0) for n in MOVES}  # every future is the current frame
AGNOSTIC = {n: frame(10, 10) for n in MOVES}  # one future whatever the action
REVERSED = {n: frame(-dy, -dx) for n, (dy, dx) in MOVES.items()}


def test_action_dependence_and_its_permutation_null():
    rollouts, now = branches()
    oracle = cf.action_dependence(ALL, "m", predictions(ORACLE), rollouts, now, seed=0)
    assert oracle["score"] == 1.0 and oracle["permutation"]["observed"] == pytest.approx(1.0)
    assert oracle["permutation"]["permutations"] == 119  # 5! - 1: every permutation, no sampling
    assert oracle["permutation"]["p_value"] < 0.1 and oracle["permutation"]["effect"] > 1
    for futures in (STATIC, AGNOSTIC):
        flat = cf.action_dependence(ALL, "m", predictions(futures), rollouts, now, seed=0)
        assert flat["score"] == 0.0 and flat["permutation"]["p_value"] == 1.0 and flat["permutation"]["effect"] == 0.0
    assert cf.action_dependence(Capabilities(actions=True), "m", {}, rollouts, now, seed=0)["needs"] == \
        "action_conditioned_futures"


def test_the_permutation_null_is_sampled_from_the_seed_past_128():
    rng = np.random.default_rng(0)
    true = [rng.random(6) for _ in range(7)]  # 7! - 1 permutations: 128 are drawn
    predicted = [t + 0.01 * rng.random(6) for t in true]
    first = cf.permutation_test(predicted, true, seed=cf.context_seed(0, "c"))
    assert first == cf.permutation_test(predicted, true, seed=cf.context_seed(0, "c"))
    assert first["permutations"] == 128 and first["p_value"] == pytest.approx(1 / 129)
    assert cf.context_seed(0, "c") != cf.context_seed(1, "c")


def test_counterfactual_direction_orders_oracle_reversed_and_static():
    rollouts, now = branches()
    score = {name: cf.counterfactual_direction(ALL, "m", predictions(f), rollouts, now)
             for name, f in {"oracle": ORACLE, "reversed": REVERSED, "static": STATIC}.items()}
    assert score["oracle"]["direction"] == pytest.approx(1.0)
    assert "no-op" not in score["oracle"]["cosines"]  # a branch whose real frame did not move is left out
    assert score["static"]["direction"] == 0.0
    # in pixel space a reversed move still shares the vacated place: below the oracle, above -1
    assert score["static"]["direction"] < score["reversed"]["direction"] < score["oracle"]["direction"]


def test_noop_stability_exact_and_stable():
    rollouts, now = branches()
    oracle = cf.noop_stability(ALL, "m", predictions(ORACLE), rollouts, now)
    assert oracle["exact"] and oracle["stable"] and oracle["distance"] == 0.0
    moved = dict(ORACLE, **{"no-op": frame(0, 10)})  # predicts the no-op as the +x future
    wrong = cf.noop_stability(ALL, "m", predictions(moved), rollouts, now)
    assert not wrong["exact"] and not wrong["stable"]
    slightly = dict(ORACLE, **{"no-op": (frame(0, 0).astype(int) + 3).astype(np.uint8)})
    close = cf.noop_stability(ALL, "m", predictions(slightly), rollouts, now)
    assert not close["exact"] and close["stable"]
    without = {n: p for n, p in predictions(ORACLE).items() if n != "no-op"}
    assert cf.noop_stability(ALL, "m", without, rollouts, now)["status"] == "skipped"


def test_top1_regret_is_the_return_lost_by_the_top_valued_candidate():
    returns = {"no-op": 0.0, "+x": 3.0, "-x": 1.0, "+y": 0.5, "-y": 2.0}
    rollouts, _ = branches(returns)
    right = cf.top1_regret(ALL, "m", predictions(ORACLE, values=returns), rollouts)
    assert (right["selected"], right["optimal"], right["regret"]) == ("+x", "+x", 0.0)
    inverted = cf.top1_regret(ALL, "m", predictions(ORACLE, values={n: -r for n, r in returns.items()}), rollouts)
    assert (inverted["selected"], inverted["regret"]) == ("no-op", 3.0)
    no_values = Capabilities(actions=True, action_conditioned_futures=True)
    assert cf.top1_regret(no_values, "m", predictions(ORACLE), rollouts)["needs"] == "values"


def test_bootstrap_interval_is_seeded_and_covers_the_mean():
    values = [0.1, 0.9, 0.5, 0.7, 0.3, 0.6]
    lo, hi = bootstrap_interval(values, seed=0)
    assert bootstrap_interval(values, seed=0) == [lo, hi] and bootstrap_interval(values, seed=1) != [lo, hi]
    assert lo < np.mean(values) < hi and bootstrap_interval([2.0, 2.0], seed=0) == [2.0, 2.0]
    assert bootstrap_interval([], seed=0) is None
