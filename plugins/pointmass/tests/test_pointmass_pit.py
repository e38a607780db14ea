"""The ``pit`` task family and the model trained for it: the layout, the fall, the scripted
controllers that make its data, and what the shipped pit weights predict (run with
``pytest -s`` to print the measured figures)."""

from __future__ import annotations

import numpy as np
import pytest

from wamcore import ConfigurationError, PredictRequest
from wamcore.testing import check_platform

from wam_pointmass.data import GAMMA, _valued_outcome
from wam_pointmass.env import PIT_ALONG, PIT_CLEARANCE, PIT_OFFSET, PointMassEnv
from wam_pointmass.expert import avoiding_action, expert_chunk, route_action
from wam_pointmass.plugin import POINTMASS_PLATFORM
from wam_pointmass.render import to_pixel
from wam_pointmass.spec import CAMERA, PIT_COLOUR, PIT_RADIUS, TARGET_RADIUS


def _run(env: PointMassEnv, controller) -> bool:
    """Run ``controller(env, position, velocity)`` to the end of the episode: success?"""
    while env.steps < env.max_steps:
        s = env.observe().state
        if env.step(controller(env, s["position"], s["velocity"])).success:
            return True
    return False


def test_the_reach_family_is_the_original_task():
    default, reach = PointMassEnv(), PointMassEnv(family="reach")
    for seed in range(20):
        assert default.reset(seed=seed) == reach.reset(seed=seed)
    assert reach.pit_position is None and not reach.fallen
    assert POINTMASS_PLATFORM.with_defaults()["family"] == "reach"
    with pytest.raises(ConfigurationError, match="family"):
        PointMassEnv(family="maze")


@pytest.mark.parametrize("options", [{"family": "pit"}, {"family": "pit", "action_noise": 0.2}])
def test_the_pit_family_conforms(options):
    assert check_platform(POINTMASS_PLATFORM, options=options, seed=7)["snapshot"] == "bit-identical"


def test_the_pit_lies_across_the_direct_route_and_is_drawn_there():
    env = PointMassEnv(family="pit")
    for seed in range(100):
        obs = env.reset(seed=seed)
        start, goal, pit = obs.state["position"], env.goal_position, env.pit_position
        route = goal - start
        along = np.dot(pit - start, route) / np.dot(route, route)
        lateral = abs(route[0] * (pit - start)[1] - route[1] * (pit - start)[0]) / np.linalg.norm(route)
        assert PIT_ALONG[0] <= along <= PIT_ALONG[1] and lateral <= PIT_OFFSET + 1e-9
        targets = np.stack(list(env.target_positions.values()))
        assert np.linalg.norm(targets - pit, axis=-1).min() >= PIT_RADIUS + PIT_CLEARANCE + TARGET_RADIUS
        row, col = to_pixel(pit)
        assert tuple(obs.images[CAMERA][int(round(row)), int(round(col))]) == PIT_COLOUR


def test_a_mass_in_the_pit_stays_there_and_never_succeeds():
    env = PointMassEnv(family="pit")
    env.reset(seed=0)
    before = env.snapshot()
    straight = lambda e, p, v: route_action(p, v, e.goal_position, 0.0)  # noqa: E731
    assert not _run(env, straight) and env.fallen
    assert np.linalg.norm(env.observe().state["position"] - env.pit_position) <= PIT_RADIUS
    stuck = env.observe().state["position"].copy()
    env.restore(before)
    assert not env.fallen
    while not env.fallen:
        s = env.observe().state
        result = env.step(route_action(s["position"], s["velocity"], env.goal_position, 0.0))
    assert result.info["fallen"] and not result.success
    position = env.observe().state["position"].copy()
    for action in ([1.0, 1.0], [-1.0, 0.0]):
        assert not env.step(np.array(action)).success
        assert env.observe().step == env.steps
    np.testing.assert_array_equal(env.observe().state["position"], position)
    np.testing.assert_array_equal(position, stuck)
    np.testing.assert_array_equal(env.observe().state["velocity"], [0.0, 0.0])


def test_the_avoiding_expert_goes_around_and_the_straight_route_falls():
    """What makes the family hard for a policy that imitates routes, and what labels its values."""
    env = PointMassEnv(family="pit")
    avoiding, straight = [], []
    for seed in range(100):
        env.reset(seed=seed)
        avoiding.append(_run(env, lambda e, p, v: avoiding_action(p, v, e.goal_position, e.pit_position)))
        env.reset(seed=seed)
        straight.append(_run(env, lambda e, p, v: route_action(p, v, e.goal_position, 0.0)))
    print(f"\npit family, 100 seeds: avoiding expert {np.mean(avoiding):.2f}, straight route {np.mean(straight):.2f}")
    assert np.mean(avoiding) >= 0.97
    assert np.mean(straight) <= 0.1
    # without a pit every route arrives
    reach = PointMassEnv()
    for seed in range(30):
        for route in (-1.0, 0.0, 1.0):
            reach.reset(seed=seed)
            assert _run(reach, lambda e, p, v: route_action(p, v, e.goal_position, route))


def test_goal_distance_reads_the_mass_from_the_frame():
    env = PointMassEnv(family="pit")
    for seed in range(30):
        obs = env.reset(seed=seed)
        assert abs(env.goal_distance(obs) - env.distance_to_goal()) < 0.01
    empty = obs.replace(images={CAMERA: np.zeros_like(obs.images[CAMERA])})
    assert env.goal_distance(empty) == float("inf")


# ---------------------------------------------------------------------- the pit weights


@pytest.fixture(scope="module")
def pit_wam():
    from wamcore import Registry
    from wamcore.runtime import WorkerConfig, open_model

    from wam_pointmass import plugin

    registry = Registry(entry_points=False)
    registry.register(plugin, name="pointmass")
    config = WorkerConfig.from_options(platform="pointmass", am_backend="pointmass-wam", backend_options={"weights": "pit"})
    client = open_model(config, registry.platform("pointmass"), registry=registry)
    yield client
    client.close()


def test_pit_weights_match_their_pin_and_say_what_their_value_means(pit_wam):
    from wam_pointmass.checkpoint import SHIPPED, shipped_weights
    from wamcore.checkpoints import sha256_file

    assert sha256_file(shipped_weights("pit")) == SHIPPED["pit"][1]
    assert pit_wam.info.checkpoint == f"sha256:{SHIPPED['pit'][1]}"
    trained = pit_wam.info.details["trained"]
    assert trained["family"] == "pit" and "gamma**steps" in trained["value"]


def test_routes_are_sampled_from_the_seed_and_the_step(pit_wam):
    env = PointMassEnv(family="pit")
    obs = env.reset(seed=3)

    def chunk(seed, observation=obs):
        return pit_wam.predict(PredictRequest(observation=observation, seed=seed)).actions

    np.testing.assert_array_equal(chunk(5), chunk(5))
    assert np.abs(chunk(5) - chunk(6)).max() > 0.1
    assert np.abs(chunk(5) - chunk(5, obs.replace(step=8))).max() > 0.1
    # no seed: the middle route, the straight one, nearer to it than to any other route
    def error(route):
        planned = expert_chunk(env, 8, lambda e, p, v: route_action(p, v, e.goal_position, route))
        return np.abs(chunk(None) - planned).mean()

    assert error(0.0) < min(error(r) for r in (-1.0, -0.5, 0.5, 1.0))


def test_the_value_ranks_sampled_routes_as_their_real_outcomes_do(pit_wam):
    """For the candidates best-of-8 sees (8 sampled routes from pit-family starts), the
    model's value against the value measured by executing them (``data._valued_outcome``)."""
    env = PointMassEnv(family="pit")
    predicted, real, chosen_real, best_real = [], [], [], []
    for seed in range(40):
        obs = env.reset(seed=seed)
        here_p, here_r = [], []
        for s in range(8):
            actions = pit_wam.predict(PredictRequest(observation=obs, seed=1000 * seed + s)).actions
            value = pit_wam.predict(PredictRequest(observation=obs, candidate_actions=actions)).values[0]
            here_p.append(float(value))
            here_r.append(_valued_outcome(env, actions, GAMMA, 50)[2])
        predicted += here_p
        real += here_r
        chosen_real.append(here_r[int(np.argmax(here_p))])
        best_real.append(max(here_r))
    real = np.asarray(real)
    correlation = np.corrcoef(predicted, real)[0, 1]
    falls_chosen = np.mean(np.asarray(chosen_real) == 0.0)
    regret = np.mean(np.asarray(best_real) - np.asarray(chosen_real))
    print(f"\nvalue vs real outcome, 320 sampled routes: correlation {correlation:.3f}, "
          f"real zero values {np.mean(real == 0):.2f}; the argmax falls in {falls_chosen:.3f} of 40 states, "
          f"mean regret {regret:.4f}; real value of the chosen {np.mean(chosen_real):.3f}, of all {np.mean(real):.3f}")
    assert correlation >= 0.7
    assert falls_chosen <= 0.05 and np.mean(real == 0.0) >= 0.2  # the sampled routes do fall
    assert np.mean(chosen_real) >= np.mean(real) + 0.15
