"""Each rejection class, for observations (service side) and actions (client side)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from wamcore.contracts import AdapterContract, ControlSpec, Observation, PredictRequest, Prediction, Capabilities
from wamcore.errors import ActionError, ObservationError, PredictionError
from wamcore.specs import Option
from wamcore.validation import validate_actions, validate_candidates, validate_observation, validate_prediction, validate_request

CONTRACT = AdapterContract(
    platform="toy", action_space="toy.delta.v1", action_dim=3,
    cameras={"primary": (4, 6), "wrist": None}, state={"pos": 3}, chunk_size=4,
)
CONTROL = ControlSpec(action_space="toy.delta.v1", action_names=("x", "y", "g"), chunk_max=8, low=(-1, -1, -1), high=(1, 1, 1))


def good_obs(**changes):
    obs = Observation(
        images={"primary": np.zeros((4, 6, 3), np.uint8), "wrist": np.zeros((9, 9, 3), np.uint8)},
        state={"pos": np.zeros(3)},
        instruction="stack the cups",
    )
    return obs.replace(**changes)


def test_a_good_observation_passes():
    validate_observation(good_obs(), CONTRACT)


def _with_image(role, value):
    images = dict(good_obs().images)
    images[role] = value
    return good_obs(images=images)


def _with_state(name, value):
    return good_obs(state={name: value})


@pytest.mark.parametrize(
    "obs,problem",
    [
        (_with_image("primary", np.zeros((4, 6, 3), np.float32)), "dtype must be uint8"),
        (_with_image("primary", np.zeros((4, 6, 3), np.int8)), "dtype must be uint8"),
        (_with_image("primary", np.zeros((4, 6, 3), bool)), "dtype must be uint8"),
        (_with_image("primary", np.zeros((4, 6), np.uint8)), "shape must be (H, W, 3)"),
        (_with_image("primary", np.zeros((4, 6, 4), np.uint8)), "shape must be (H, W, 3)"),
        (_with_image("primary", np.zeros((4, 6, 2), np.uint8)), "shape must be (H, W, 3)"),
        (_with_image("primary", np.zeros((5, 6, 3), np.uint8)), "size must be 4x6"),
        (_with_image("primary", [[0]]), "expected an HxWx3 uint8 array, got list"),
        (good_obs(images={"wrist": np.zeros((2, 2, 3), np.uint8)}), "camera 'primary' is missing"),
        (_with_image("extra", np.zeros((2, 2, 3), np.uint8)), "camera 'extra' is not in the contract"),
        (_with_state("pos", np.array([0.0, np.nan, 0.0])), "contains NaN or inf at [1]"),
        (_with_state("pos", np.array([0.0, np.inf, 0.0])), "contains NaN or inf"),
        (_with_state("pos", np.zeros(4)), "shape must be (3,)"),
        (_with_state("pos", np.zeros((3, 1))), "shape must be (3,)"),
        (_with_state("pos", np.array(["a", "b", "c"])), "dtype must be numeric"),
        (good_obs(state={}), "state 'pos' is missing"),
        (good_obs(state={"pos": np.zeros(3), "vel": np.zeros(3)}), "state 'vel' is not in the contract"),
        (good_obs(instruction=""), "instruction is empty"),
        (good_obs(instruction="   "), "instruction is empty"),
        (good_obs(instruction=None), "instruction must be a string"),
    ],
)
def test_each_observation_rejection(obs, problem):
    with pytest.raises(ObservationError) as info:
        validate_observation(obs, CONTRACT)
    assert any(problem in p for p in info.value.problems), info.value.problems


def test_every_problem_is_reported_at_once():
    obs = Observation(images={}, state={"pos": np.full(3, np.nan)}, instruction="")
    with pytest.raises(ObservationError) as info:
        validate_observation(obs, CONTRACT)
    assert len(info.value.problems) == 4  # two cameras, NaN state, empty instruction


def test_a_request_instruction_override_is_what_is_checked():
    validate_observation(good_obs(instruction=""), CONTRACT, instruction="override")
    with pytest.raises(ObservationError):
        validate_observation(good_obs(), CONTRACT, instruction=" ")


def test_not_an_observation():
    with pytest.raises(ObservationError, match="expected an Observation"):
        validate_observation({"images": {}}, CONTRACT)


def test_good_actions_pass_and_become_float32():
    out = validate_actions(np.zeros((4, 3)), CONTROL, chunk_size=4)
    assert out.dtype == np.float32 and out.shape == (4, 3)


@pytest.mark.parametrize(
    "actions,problem",
    [
        (np.zeros((4, 2), np.float32), "action dim must be 3"),
        (np.zeros((3, 3), np.float32), "chunk length must be 4"),
        (np.zeros((9, 3), np.float32), "outside the platform's bounds [1, 8]"),
        (np.zeros((0, 3), np.float32), "chunk is empty"),
        (np.zeros(3, np.float32), "must be 2-D"),
        (np.zeros((4, 3), np.int32), "dtype must be float"),
        (np.array([[0, 0, np.nan]] * 4, np.float32), "NaN or inf at [step, dim] [[0, 2], [1, 2]"),
        (np.array([[0, 0, 0]] * 3 + [[0, 1.5, 0]], np.float32), "beyond the high bound: [3, y]=1.5"),
        (np.array([[-2, 0, 0]] * 4, np.float32), "4 value(s) beyond the low bound"),
        ([[0, 0, 0]] * 4, "expected a [T, 3] float array, got list"),
    ],
)
def test_each_action_rejection(actions, problem):
    with pytest.raises(ActionError) as info:
        validate_actions(actions, CONTROL, chunk_size=4)
    assert any(problem in p for p in info.value.problems), info.value.problems


def test_bounds_allow_float_rounding_only():
    validate_actions(np.full((4, 3), 1.0 + 1e-7, np.float32), CONTROL)
    with pytest.raises(ActionError):
        validate_actions(np.full((4, 3), 1.001, np.float32), CONTROL)


def test_only_values_past_the_rounding_tolerance_are_reported_at_either_bound():
    actions = np.full((4, 3), -1.0 - 1e-7, np.float32)  # at the low bound, within rounding
    actions[1, 1] = 1.0 + 1e-7  # at the high bound, within rounding
    actions[0, 0], actions[2, 2] = 1.001, -1.001
    with pytest.raises(ActionError) as info:
        validate_actions(actions, CONTROL)
    assert list(info.value.problems) == ["1 value(s) beyond the low bound: [2, g]=-1.001",
                                         "1 value(s) beyond the high bound: [0, x]=1.001"]


def test_prediction_extras_must_be_declared():
    pred = Prediction(actions=np.zeros((4, 3)), values=[0.5], future_observations={"primary": np.zeros((4, 6, 3), np.uint8)})
    with pytest.raises(PredictionError) as info:
        validate_prediction(pred, Capabilities(), CONTRACT)
    assert len(info.value.problems) == 2
    validate_prediction(pred, Capabilities(future_observations=True, values=True), CONTRACT)


def test_malformed_prediction_extras():
    pred = Prediction(actions=np.zeros((4, 3)), values=[np.nan], future_observations={"primary": np.zeros((4, 6), np.uint8)})
    with pytest.raises(PredictionError) as info:
        validate_prediction(pred, Capabilities(future_observations=True, values=True), CONTRACT)
    assert {p.split(":")[0] for p in info.value.problems} == {"future 'primary'", "values must be a finite float vector, got array float32 (1,)"}


@pytest.mark.parametrize("extras, problem", [
    ({"future_observations": {"primary": np.zeros((6, 3), np.uint8)}}, "future 'primary': expected uint8 HxWx3"),
    ({"future_observations": {"primary": np.zeros((4, 6, 3), np.float32)}}, "future 'primary': expected uint8 HxWx3"),
    ({"future_observations": {"primary": np.zeros((2, 4, 6, 4), np.uint8)}}, "future 'primary': expected uint8 HxWx3"),
    ({"values": np.array(["a", "b"])}, "values must be a finite float vector, got array <U1 (2,)"),
    ({"values": np.zeros((2, 1))}, "values must be a finite float vector"),
    ({"world_features": {"depth": np.array(["a"])}}, "world feature 'depth' must be a numeric array"),
])
def test_each_malformed_prediction_extra(extras, problem):
    pred = Prediction(actions=np.zeros((4, 3)), **extras)
    with pytest.raises(PredictionError) as info:
        validate_prediction(pred, Capabilities(future_observations=True, values=True, world_features=True), CONTRACT)
    assert [p for p in info.value.problems if problem in p], info.value.problems


# ----------------------------------------------------------------------------- chunk bounds, requests


BOUNDED = ControlSpec(action_space="toy.delta.v1", action_names=("x", "y", "g"), chunk_min=2, chunk_max=8,
                      low=(-1, -1, -1), high=(1, 1, 1))


@pytest.mark.parametrize("length", [2, 8])
def test_a_chunk_exactly_at_the_controls_minimum_or_maximum_length_is_accepted(length):
    assert validate_actions(np.zeros((length, 3)), BOUNDED).shape == (length, 3)


@pytest.mark.parametrize("length", [1, 9])
def test_a_chunk_one_past_the_controls_bounds_is_refused(length):
    with pytest.raises(ActionError, match=r"chunk length %d outside the platform's bounds \[2, 8\]" % length):
        validate_actions(np.zeros((length, 3)), BOUNDED)


OPTIONS = {
    "steps": Option("steps", type="int", default=8, deployment=False),
    "scale": Option("scale", type="float", default=1.0, deployment=False),
    "greedy": Option("greedy", type="bool", default=False, deployment=False),
    "mode": Option("mode", type="choice", choices=("fast", "exact"), default="fast", deployment=False),
    "tag": Option("tag", type="str", default="", deployment=False),
}


def request(seed=None, step=0, **options) -> PredictRequest:
    return PredictRequest(good_obs(step=step), seed=seed, options=options)


@pytest.mark.parametrize("req", [
    request(), request(seed=0), request(seed=2**63 - 1), request(seed=np.int64(7), step=2**63 - 1),
    request(steps=2**62, scale=-1e300, greedy=True, mode="exact", tag="x" * 100), request(steps=None),
    request(steps=-2**63), request(steps=2**63 - 1),  # the int64 range, both ends
])
def test_a_well_formed_request_passes(req):
    validate_request(req, CONTRACT, OPTIONS)


@pytest.mark.parametrize("req, problem", [
    (request(seed=-1), "seed must be a non-negative integer below 2**63, got -1"),
    (request(seed=2**63), "seed must be a non-negative integer below 2**63"),
    (request(seed=1.0), "seed must be a non-negative integer"),
    (request(seed=True), "seed must be a non-negative integer"),
    (request(seed="3"), "seed must be a non-negative integer"),
    (request(step=-1), "step must be a non-negative integer, got -1"),
    (request(step=2**63), "step must be a non-negative integer"),
    (request(step=0.5), "step must be a non-negative integer"),
    (request(steps=1.0), "option 'steps' must be an integer, got 1.0"),
    (request(steps=True), "option 'steps' must be an integer"),
    (request(steps=2**63), "option 'steps' must be an integer"),
    (request(scale=float("nan")), "option 'scale' must be a finite number"),
    (request(scale=float("inf")), "option 'scale' must be a finite number"),
    (request(scale="1"), "option 'scale' must be a finite number"),
    (request(greedy=1), "option 'greedy' must be true or false, got 1"),
    (request(mode="slow"), "option 'mode' must be one of fast, exact, got 'slow'"),
    (request(tag=3), "option 'tag' must be text of at most"),
    (request(tag="x" * 100_000), "option 'tag' must be text of at most"),
    (request(temperature=0.1), "option 'temperature' is not a per-request option of this model (it has: greedy, mode"),
])
def test_each_request_rejection(req, problem):
    with pytest.raises(ObservationError) as info:
        validate_request(req, CONTRACT, OPTIONS)
    assert any(problem in p for p in info.value.problems), info.value.problems


@pytest.mark.parametrize("value, ok", [(3.4e38, True), (-3.4e38, True), (3.5e38, False), (-1e39, False)])
def test_state_beyond_the_float32_range_is_refused_before_a_model_turns_it_into_inf(value, ok):
    obs = good_obs(state={"pos": np.array([0.0, value, 0.0])})
    if ok:
        validate_observation(obs, CONTRACT)
    else:
        with pytest.raises(ObservationError, match=r"beyond the float32 range .* at \[1\]"):
            validate_observation(obs, CONTRACT)


def test_a_flood_of_unknown_options_is_read_only_until_twenty_problems():
    with pytest.raises(ObservationError) as info:
        validate_request(request(**{f"o{i}": 1 for i in range(10_000)}), CONTRACT, OPTIONS)
    assert 20 <= len(info.value.problems) <= 21 and "option 'o0'" in info.value.problems[0]


def test_choices_on_a_typed_option_are_enforced():
    levels = {"level": Option("level", type="int", choices=(1, 2, 4), default=1, deployment=False)}
    validate_request(request(level=2), CONTRACT, levels)
    with pytest.raises(ObservationError, match="option 'level' must be one of 1, 2, 4, got 3"):
        validate_request(request(level=3), CONTRACT, levels)


def test_a_long_list_of_bad_values_is_cut_to_the_first_five():
    actions = np.zeros((8, 3), np.float32)
    actions[:, 0] = np.nan
    actions[:, 1] = 2.0
    with pytest.raises(ActionError) as info:
        validate_actions(actions, CONTROL)
    nan, high = info.value.problems
    assert nan.endswith("[[0, 0], [1, 0], [2, 0], [3, 0], [4, 0]]")
    assert high.startswith("8 value(s) beyond the high bound") and high.count("=2") == 5


def test_candidates_are_checked_against_the_control_like_actions():
    good = np.tile(np.array([0.5, -1.0, 1.0]), (4, 1))
    assert validate_candidates(good, CONTROL, CONTRACT).dtype == np.float32
    nan = good.copy()
    nan[1, 2] = np.nan
    for bad, problem in ((good * 3, "beyond the high bound"), (-good * 3, "beyond the low bound"),
                         (good[:2], "shape (4, 3)"), (good.tolist(), "shape (4, 3)"), (nan, "NaN")):
        with pytest.raises(ActionError, match=re.escape(problem)):
            validate_candidates(bad, CONTROL, CONTRACT)
