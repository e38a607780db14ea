"""Planning with predictions (``wamcore.planning``) on PointMass with its real models: the
capability check, seeding, that only the chosen chunk ever executes, the scorers, and
``wam eval --best-of`` with one env and with env processes sharing a model worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from wamcore import ActionError, CapabilityError, ConfigurationError, PredictRequest, Registry
from wamcore.contracts import Prediction
from wamcore.errors import PredictionError
from wamcore.execution import run_episode
from wamcore.planning import BestOfN, Scorer, candidate_seeds, goal_scorer, planner_for, value_scorer
from wamcore.runtime import WorkerConfig, open_model

from wam_pointmass import plugin
from wam_pointmass.env import PointMassEnv

sys.path.insert(0, os.path.dirname(__file__))
from helpers_workers import worker_python  # noqa: E402
from test_evaluation_ray import tag  # noqa: E402,F401  (the fixture that clears Ray's processes)

PIT = {"weights": "pit"}


@pytest.fixture(scope="module")
def registry():
    reg = Registry(entry_points=False)
    reg.register(plugin, name="pointmass")
    return reg


def _open(registry, backend, options=None, **worker):
    config = WorkerConfig.from_options(platform="pointmass", am_backend=backend, backend_options=options, **worker)
    return open_model(config, registry.platform("pointmass"), registry=registry)


@pytest.fixture(scope="module")
def pit_wam(registry):
    client = _open(registry, "pointmass-wam", PIT)
    yield client
    client.close()


class Counted:
    """Counts what reaches a real model client (the requests themselves are untouched)."""

    def __init__(self, client):
        self.client = client
        self.requests = []
        self.info = client.info
        self.contract, self.control = client.contract, client.control

    def predict(self, request):
        self.requests.append(request)
        return self.client.predict(request)

    def reset(self):
        self.client.reset()


class RecordingEnv(PointMassEnv):
    """The real env, keeping every action it executes."""

    def __init__(self, **options):
        super().__init__(**options)
        self.executed = []

    def step(self, action):
        self.executed.append(np.array(action, copy=True))
        return super().step(action)


def test_a_model_without_the_capability_gets_a_capability_error_before_any_sampling(registry):
    random_model = Counted(_open(registry, "random"))
    with pytest.raises(CapabilityError, match="values and action_conditioned_futures.*'value' scorer"):
        BestOfN(random_model, 8, "value")
    with pytest.raises(CapabilityError, match="future_observations and action_conditioned_futures.*'goal' scorer"):
        planner_for(random_model, PointMassEnv(), 8, "goal")
    assert random_model.requests == []
    # a function that scores the candidates' own predictions needs nothing more than actions
    planner = BestOfN(random_model, 3, lambda request, predictions: [0.0, 1.0, 0.0])
    env = RecordingEnv()
    run_episode(planner, env, reset={"seed": 0}, max_chunks=1)
    assert len(random_model.requests) == 3 and all(p.chosen == 1 for p in planner.plans)
    np.testing.assert_array_equal(np.stack(env.executed), planner.plans[0].candidates[1])


def test_rejected_candidates_never_execute(pit_wam):
    planner = BestOfN(pit_wam, 8, "value")
    for seed in range(4):
        env = RecordingEnv(family="pit")
        result = run_episode(planner, env, reset={"seed": seed})
        executed = np.stack(env.executed)
        assert len(executed) == result.steps and len(planner.plans) == result.chunks
        chosen = np.concatenate([plan.candidates[plan.chosen] for plan in planner.plans])
        np.testing.assert_array_equal(executed, chosen[: len(executed)])
        for plan in planner.plans:
            taken = executed[plan.step: plan.step + 8]
            rejected = [c for i, c in enumerate(plan.candidates) if i != plan.chosen]
            assert len({c.tobytes() for c in plan.candidates}) == 8  # the candidates really differ
            assert not any(np.array_equal(c[: len(taken)], taken) for c in rejected)


def test_a_given_episode_seed_gives_the_same_candidates(pit_wam):
    def run(seed, n=8):
        planner, env = BestOfN(pit_wam, n, "value"), RecordingEnv(family="pit")
        result = run_episode(planner, env, reset={"seed": seed}, seed=seed)
        return result, [p.to_json() for p in planner.plans], np.stack(env.executed)

    first, again = run(11), run(11)
    assert first[1] == again[1] and first[0].success == again[0].success
    np.testing.assert_array_equal(first[2], again[2])
    other = run(12)
    assert other[1][0]["seeds"] != first[1][0]["seeds"]
    assert candidate_seeds(11, 0, 8) == first[1][0]["seeds"] and first[1][0]["seeds"][0] == 11
    assert candidate_seeds(11, 8, 8)[1:] != candidate_seeds(11, 0, 8)[1:]
    # best of one is plain sampling: the same chunks as running the model itself
    env = RecordingEnv(family="pit")
    plain = run_episode(pit_wam, env, reset={"seed": 11}, seed=11)
    single = run(11, n=1)
    assert plain.steps == single[0].steps and plain.success == single[0].success
    np.testing.assert_array_equal(np.stack(env.executed), single[2])


def test_the_value_scorer_asks_the_model_about_each_candidate_and_takes_the_highest(pit_wam):
    counted = Counted(pit_wam)
    obs = PointMassEnv(family="pit").reset(seed=5)
    plan = BestOfN(counted, 6, "value").plan(PredictRequest(observation=obs, seed=5))
    sampled, conditioned = counted.requests[:6], counted.requests[6:]
    assert [r.seed for r in sampled] == candidate_seeds(5, 0, 6) and all(r.candidate_actions is None for r in sampled)
    assert len(conditioned) == 6
    for request, chunk, score in zip(conditioned, plan.candidates, plan.scores):
        np.testing.assert_array_equal(request.candidate_actions, chunk)
        assert score == float(pit_wam.predict(request).values[0])
    assert plan.chosen == int(np.argmax(plan.scores))
    np.testing.assert_array_equal(plan.actions, plan.candidates[plan.chosen])


@pytest.mark.parametrize("scores, chosen", [
    ([1.0, 3.0, 3.0, 2.0], 1),                          # a tie goes to the lowest index
    ([float("nan"), 0.5, float("nan"), 0.5], 1),        # a NaN never wins, even first
    ([-5.0, float("nan"), -7.0], 0),                    # nor against scores below zero
    ([float("-inf"), float("nan"), float("-inf")], 0),  # nor against -inf
])
def test_ties_go_to_the_lowest_index_and_a_nan_never_wins(pit_wam, scores, chosen):
    obs = PointMassEnv(family="pit").reset(seed=2)
    plan = BestOfN(pit_wam, len(scores), lambda request, predictions: scores).plan(PredictRequest(observation=obs, seed=2))
    assert plan.chosen == chosen
    np.testing.assert_array_equal(plan.actions, plan.candidates[chosen])


def test_a_scorer_without_conditioning_scores_the_samples_own_predictions_or_the_given_chunks(pit_wam):
    seen = []

    def score(request, predictions):
        seen.append(list(predictions))
        return [0.0] * len(predictions)

    obs = PointMassEnv(family="pit").reset(seed=3)
    planner = BestOfN(pit_wam, 3, score)
    plan = planner.plan(PredictRequest(observation=obs, seed=3))
    assert all(p.future_observations and p.values is not None for p in seen[0])  # the model's own answers
    assert [p.to_wire() for p in seen[0]] == [p.to_wire() for p in plan.predictions]
    chunks = [np.zeros((8, 2), np.float32), np.full((8, 2), 0.5, np.float32)]
    planner.plan(PredictRequest(observation=obs), candidates=chunks)
    assert [p.future_observations for p in seen[1]] == [None, None]  # nothing was asked of the model
    for given, scored in zip(chunks, seen[1]):
        np.testing.assert_array_equal(scored.actions, given)


def test_the_value_scorer_needs_the_value_it_reads():
    scorer = value_scorer(2)
    actions = np.zeros((8, 2), np.float32)
    for values, returned in ((None, "None"), ([0.5], "1"), ([0.5, 0.5], "2")):
        with pytest.raises(PredictionError, match=rf"needs values\[2\]; the model returned {returned} values"):
            scorer.fn(None, [Prediction(actions=actions, values=[0.1, 0.2, 0.3]), Prediction(actions=actions, values=values)])
    assert scorer.fn(None, [Prediction(actions=actions, values=[0.1, 0.2, 0.75])]) == [0.75]
    assert value_scorer().fn(None, [Prediction(actions=actions, values=[0.25, 0.75])]) == [0.25]  # the first value


def test_a_scorer_needing_a_capability_the_core_does_not_know_is_refused(pit_wam):
    with pytest.raises(CapabilityError, match="does not declare telepathy"):
        BestOfN(pit_wam, 2, Scorer("mind", lambda request, predictions: [0.0] * len(predictions), requires=("telepathy",)))


def test_the_other_candidates_seeds_follow_the_episode_seed():
    assert candidate_seeds(11, 0, 4)[0] == 11 and candidate_seeds(None, 0, 2)[0] is None
    for a, b in ((11, 12), (11, 13), (2**63 - 1, 0)):  # every bit of a valid seed counts
        assert candidate_seeds(a, 0, 4)[1:] != candidate_seeds(b, 0, 4)[1:]
    assert candidate_seeds(11, 0, 4) == candidate_seeds(11, 0, 4)


def test_a_scorer_must_score_every_candidate_once(pit_wam):
    obs = PointMassEnv(family="pit").reset(seed=1)
    chunks = [np.zeros((8, 2), np.float32), np.full((8, 2), 0.5, np.float32)]
    for scores in ([1.0], [1.0, 2.0, 3.0]):
        planner = BestOfN(pit_wam, 2, lambda request, predictions, scores=scores: scores)
        with pytest.raises(PredictionError, match=f"returned {len(scores)} scores for 2 candidates"):
            planner.plan(PredictRequest(observation=obs), candidates=chunks)


def test_the_goal_scorer_needs_a_predicted_frame_of_its_camera():
    request = PredictRequest(observation=PointMassEnv().reset(seed=0))
    actions = np.zeros((8, 2), np.float32)
    frame = {"primary": np.zeros((8, 8, 3), np.uint8)}
    for scorer, futures, needs in ((goal_scorer(lambda f: 0.0), None, "any camera"),
                                   (goal_scorer(lambda f: 0.0, camera="wrist"), frame, "wrist")):
        with pytest.raises(PredictionError, match=rf"needs a predicted future frame \({needs}\)"):
            scorer.fn(request, [Prediction(actions=actions, future_observations=futures)])


def test_an_unknown_score_is_refused(pit_wam):
    for score in ("distance", "zeal"):  # sorting before and after "goal"
        with pytest.raises(ConfigurationError, match=f"unknown scorer '{score}'"):
            planner_for(pit_wam, PointMassEnv(), 2, score)


def test_proposed_candidates_are_validated_before_any_request(pit_wam):
    counted = Counted(pit_wam)
    planner = BestOfN(counted, 8, "value")
    obs = PointMassEnv(family="pit").reset(seed=1)
    request = PredictRequest(observation=obs)
    good = np.zeros((8, 2), dtype=np.float32)
    for bad in (np.full((8, 2), 3.0, dtype=np.float32), np.zeros((5, 2), dtype=np.float32),
                np.full((8, 2), np.nan, dtype=np.float32)):
        with pytest.raises(ActionError):
            planner.plan(request, candidates=[good, bad])
    assert counted.requests == []
    with pytest.raises(ConfigurationError):
        planner.plan(request, candidates=[])
    # research code's own candidates: scored, and the chosen one comes back as the chunk to run
    push = np.tile(np.float32([0.5, -0.5]), (8, 1))
    plan = planner.plan(request, candidates=[good, push])
    assert len(counted.requests) == 2 and plan.seeds == (None, None)
    np.testing.assert_array_equal(plan.actions, plan.candidates[plan.chosen])


def test_the_goal_scorer_prefers_the_future_nearest_the_goal(pit_wam):
    env = PointMassEnv()
    obs = env.reset(seed=2)
    planner = planner_for(pit_wam, env, 8, "goal")
    plan = planner.plan(PredictRequest(observation=obs, seed=2))
    distances = [env.goal_distance(obs.replace(images=dict(p.future_observations))) for p in plan.predictions]
    assert plan.scores == tuple(-d for d in distances) and plan.chosen == int(np.argmin(distances))
    assert max(distances) - min(distances) > 0.05  # the routes end in different places
    with pytest.raises(ConfigurationError, match="goal_distance"):
        planner_for(pit_wam, object(), 8, "goal")
    # the scorer on its own, with any distance
    scorer = goal_scorer(lambda future: 0.0)
    assert scorer.capabilities == ("future_observations", "action_conditioned_futures")


# ---------------------------------------------------------------------- wam eval


def _wam(*args, timeout=600):
    env = {k: v for k, v in os.environ.items() if k not in ("WAMCORE_PLUGIN_MODULES", "WAMCORE_LOAD_PLUGINS")}
    return subprocess.run([sys.executable, "-m", "wamcore", *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=timeout)


def _records(out):
    return {r["key"]: r for r in map(json.loads, (out / "episodes.jsonl").read_text().splitlines())}


def test_wam_eval_best_of_with_one_env_and_with_env_processes(tmp_path):
    """Env processes and a shared model worker give the same decisions as one env
    (batching off: batched kernels round differently in the last bits)."""
    common = ["eval", "--platform", "pointmass", "--family", "pit", "--am-backend", "pointmass-wam", "--weights", "pit",
              "--episodes", 4, "--best-of", 4, "--score", "value"]
    one = _wam(*common, "--out", tmp_path / "one")
    two = _wam(*common, "--num-envs", 2, "--am-batch-window-ms", 0, "--out", tmp_path / "two")
    assert one.returncode == 0 and two.returncode == 0, one.stderr + two.stderr
    assert "best of 4 by value" in one.stdout
    a, b = _records(tmp_path / "one"), _records(tmp_path / "two")
    assert sorted(a) == sorted(b) == [f"seed={i}" for i in range(4)]
    for key, record in a.items():
        assert record["plans"] == b[key]["plans"] and record["steps"] == b[key]["steps"]
        assert len(record["plans"]) == record["chunks"]
        for plan in record["plans"]:
            assert len(plan["scores"]) == len(plan["seeds"]) == 4
            assert plan["scores"][plan["chosen"]] == max(plan["scores"])
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert summary["planning"] == {"best_of": 4, "score": "value"} and summary["num_envs"] == 2
    assert json.loads((tmp_path / "one" / "config.json").read_text())["planning"] == summary["planning"]
    assert summary["model_info"]["details"]["options"]["weights"] == "pit"


def test_wam_eval_refuses_planning_a_model_cannot_do(tmp_path):
    bad = _wam("eval", "--am-backend", "random", "--episodes", 2, "--best-of", 8, "--out", tmp_path / "r")
    assert bad.returncode != 0
    assert "does not declare values and action_conditioned_futures" in bad.stderr
    episodes = tmp_path / "r" / "episodes.jsonl"
    assert not episodes.exists() or episodes.read_text() == ""
    lone = _wam("eval", "--episodes", 2, "--score", "goal", "--out", tmp_path / "s")
    assert lone.returncode != 0 and "--score chooses among candidates: it needs --best-of N" in lone.stderr


def test_the_documented_example_plans_an_episode(docs_example, capsys):
    source = docs_example("planning", doc="docs/planning.md")
    assert len([line for line in source.splitlines() if line.strip()]) <= 15
    exec(compile(source, "docs/planning.md", "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("True ")  # seed 0 of the pit family: planned around the pit
    decisions = [line.split(" ", 2) for line in lines[:-1]]
    assert decisions and all(len(json.loads(scores)) == 8 for _, _, scores in decisions)


def test_wam_eval_best_of_through_ray_actors_and_a_spawned_worker(tmp_path, tag):
    """The planning settings travel to Ray env actors; the model runs in a worker of its own
    environment: the same decisions as one env in this process."""
    common = ["eval", "--platform", "pointmass", "--family", "pit", "--am-backend", "pointmass-wam", "--weights", "pit",
              "--episodes", 3, "--best-of", 4]
    one = _wam(*common, "--out", tmp_path / "one")
    distributed = _wam(*common, "--executor", "ray", "--num-envs", 2, "--am-python", worker_python(),
                       "--am-batch-window-ms", 0, "--am-log-dir", tmp_path / "w", "--out", tmp_path / "ray")
    assert one.returncode == 0 and distributed.returncode == 0, one.stderr + distributed.stderr
    a, b = _records(tmp_path / "one"), _records(tmp_path / "ray")
    assert sorted(a) == sorted(b) and all(a[k]["plans"] == b[k]["plans"] for k in a)
    assert json.loads((tmp_path / "ray" / "summary.json").read_text())["executor"] == "ray"
