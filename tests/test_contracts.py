"""Every contract round-trips through its wire dict and the wire codec (property-based)."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from wamcore import wire
from wamcore.contracts import (
    CAPABILITY_NAMES,
    PROTOCOL_VERSION,
    AdapterContract,
    Capabilities,
    ControlSpec,
    GripperSpec,
    ModelInfo,
    Observation,
    ObservationSpec,
    PredictRequest,
    Prediction,
)
from wamcore.errors import ProtocolError

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12)
texts = st.text(max_size=40)
sizes = st.tuples(st.integers(1, 8), st.integers(1, 8))
finite = st.floats(-1e6, 1e6, allow_nan=False, width=32)
action_space_ids = st.builds(lambda a, b, v: f"{a}.{b}.v{v}", names, names, st.integers(0, 9))
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**31), 2**31), finite, texts)


def images(size):
    return hnp.arrays(np.uint8, (*size, 3))


observations = st.builds(
    Observation,
    images=st.dictionaries(names, sizes.flatmap(images), max_size=3),
    state=st.dictionaries(names, hnp.arrays(st.sampled_from([np.float32, np.float64, np.int64]), st.integers(1, 6)), max_size=3),
    instruction=texts,
    step=st.integers(0, 10_000),
)


@st.composite
def control_specs(draw):
    d = draw(st.integers(1, 8))
    lows = draw(st.one_of(st.none(), st.lists(finite, min_size=d, max_size=d)))
    chunk_min = draw(st.integers(1, 4))
    return ControlSpec(
        action_space=draw(action_space_ids),
        action_names=draw(st.lists(names, min_size=d, max_size=d)),
        chunk_min=chunk_min,
        chunk_max=draw(st.one_of(st.none(), st.integers(chunk_min, 64))),
        gripper=draw(st.one_of(st.none(), st.builds(GripperSpec, indices=st.lists(st.integers(0, d - 1), min_size=1, max_size=2), open=finite, close=finite))),
        low=lows,
        high=None if lows is None else [x + 1 for x in lows],
        rate_hz=draw(st.one_of(st.none(), st.floats(1, 500))),
        description=draw(texts),
    )


capabilities = st.builds(Capabilities, **{n: st.booleans() for n in CAPABILITY_NAMES})


@st.composite
def adapter_contracts(draw):
    chunk = draw(st.integers(1, 32))
    return AdapterContract(
        platform=draw(names),
        action_space=draw(action_space_ids),
        action_dim=draw(st.integers(1, 16)),
        cameras=draw(st.dictionaries(names, st.one_of(st.none(), sizes), max_size=3)),
        state=draw(st.dictionaries(names, st.integers(1, 20), max_size=4)),
        chunk_size=chunk,
        horizon=draw(st.one_of(st.none(), st.integers(chunk, 64))),
        future_cameras=draw(st.lists(names, max_size=2)),
    )


model_infos = st.builds(
    ModelInfo,
    backend=names,
    checkpoint=st.one_of(st.none(), texts),
    capabilities=capabilities,
    contracts=st.lists(adapter_contracts(), max_size=2),
    timeout_s=st.floats(0.1, 1e4),
    device=st.one_of(st.none(), st.sampled_from(["cpu", "cuda:0"])),
    details=st.dictionaries(names, json_scalars, max_size=3),
)

requests = st.builds(
    PredictRequest,
    observation=observations,
    instruction=st.one_of(st.none(), texts),
    seed=st.one_of(st.none(), st.integers(0, 2**31)),
    candidate_actions=st.one_of(st.none(), hnp.arrays(np.float32, st.tuples(st.integers(1, 8), st.integers(1, 4)))),
    options=st.dictionaries(names, json_scalars, max_size=3),
    # a platform's privileged state: nested dicts and lists of arrays, words and numbers
    privileged=st.one_of(st.none(), st.dictionaries(names, st.one_of(
        json_scalars, st.lists(st.lists(names, max_size=3), max_size=2),
        st.dictionaries(names, hnp.arrays(np.float64, st.integers(1, 7), elements=finite), max_size=3)), max_size=4)),
)

predictions = st.builds(
    Prediction,
    actions=hnp.arrays(np.float32, st.tuples(st.integers(1, 16), st.integers(1, 8)), elements=finite),
    future_observations=st.one_of(st.none(), st.dictionaries(names, sizes.flatmap(images), max_size=2)),
    values=st.one_of(st.none(), hnp.arrays(np.float32, st.integers(1, 3), elements=finite)),
    world_features=st.one_of(st.none(), st.dictionaries(names, hnp.arrays(np.float16, st.integers(1, 5)), max_size=2)),
    timing=st.dictionaries(names, st.floats(0, 1e4), max_size=3),
    info=st.dictionaries(names, json_scalars, max_size=3),
)

ALL = [
    (Observation, observations),
    (ObservationSpec, st.builds(ObservationSpec, cameras=st.dictionaries(names, sizes, max_size=3), state=st.dictionaries(names, st.integers(1, 9), max_size=3), units=st.dictionaries(names, texts, max_size=2))),
    (ControlSpec, control_specs()),
    (Capabilities, capabilities),
    (AdapterContract, adapter_contracts()),
    (ModelInfo, model_infos),
    (PredictRequest, requests),
    (Prediction, predictions),
]


@pytest.mark.parametrize("cls,strategy", ALL, ids=[c.__name__ for c, _ in ALL])
def test_round_trip_through_frames_and_bytes(cls, strategy):
    @settings(max_examples=60, deadline=None)
    @given(strategy)
    def check(value):
        d = value.to_wire()
        assert d["type"] and d["v"] == PROTOCOL_VERSION
        assert cls.from_wire(wire.decode(wire.encode(d))) == value
        assert cls.from_wire(wire.unpackb(wire.packb(d))) == value

    check()


def test_wire_dict_is_plain_msgpack_apart_from_arrays():
    info = ModelInfo(backend="m", checkpoint=None, capabilities=Capabilities(), contracts=())
    assert msgpack.unpackb(msgpack.packb(info.to_wire())) == info.to_wire()


def test_other_protocol_version_is_refused():
    d = Capabilities().to_wire()
    d["v"] = PROTOCOL_VERSION + 1
    with pytest.raises(ProtocolError, match="protocol version"):
        Capabilities.from_wire(d)


def test_wrong_message_type_is_refused():
    with pytest.raises(ProtocolError, match="expected a 'prediction' message"):
        Prediction.from_wire(Capabilities().to_wire())


def test_prediction_actions_become_float32():
    assert Prediction(actions=np.zeros((2, 3))).actions.dtype == np.float32


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"action_space": "LIBERO osc"}, "must look like"),
        ({"action_names": ()}, "at least one action name"),
        ({"low": (0.0,)}, "low has 1 entries"),
        ({"chunk_min": 4, "chunk_max": 2}, "bad chunk bounds"),
        ({"chunk_min": 0}, r"bad chunk bounds \[0, None\]"),
        ({"gripper": GripperSpec(indices=(-1,), open=-1, close=1)}, "outside 2 action dims"),
        ({"gripper": GripperSpec(indices=(5,), open=-1, close=1)}, "outside 2 action dims"),
    ],
)
def test_control_spec_rejects_inconsistent_definitions(kwargs, message):
    base = {"action_space": "toy.velocity.v1", "action_names": ("x", "y")}
    with pytest.raises(ValueError, match=message):
        ControlSpec(**{**base, **kwargs})
    assert ControlSpec(**base, chunk_min=3, chunk_max=3).chunk_max == 3  # one length exactly is a control too


def test_adapter_contract_horizon_must_cover_the_chunk():
    with pytest.raises(ValueError, match="horizon 4 < chunk_size 8"):
        AdapterContract(platform="p", action_space="p.a.v1", action_dim=2, cameras={}, state={}, chunk_size=8, horizon=4)


def test_a_model_declares_actions_and_nothing_else_unless_it_says_so():
    assert Capabilities().names() == ["actions"]
    assert Capabilities(values=True, privileged_state=True).names() == ["actions", "values", "privileged_state"]


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_float_actions_of_any_width_become_float32(dtype):
    assert Prediction(actions=np.zeros((2, 3), dtype)).actions.dtype == np.float32
    assert Prediction(actions=np.zeros((2, 3), np.int64)).actions.dtype == np.int64  # left for validation to refuse


def test_numeric_values_become_a_float32_vector():
    for given, expected in (([1, 2], [1.0, 2.0]), (0.5, [0.5]), (np.float64(0.25), [0.25]), ([True], [1.0])):
        values = Prediction(actions=np.zeros((2, 3)), values=given).values
        assert values.dtype == np.float32 and values.tolist() == expected


def test_predictions_are_equal_by_value_and_differ_in_any_field():
    base = Prediction(actions=np.zeros((2, 3)), future_observations={"primary": np.zeros((4, 4, 3), np.uint8)},
                      values=[0.5], world_features={"f": np.zeros(2)}, timing={"model_ms": 1.0}, info={"k": 1})
    assert base == base.replace() == Prediction.from_wire(base.to_wire())
    for change in (
        {"actions": np.ones((2, 3))},
        {"future_observations": {"primary": np.ones((4, 4, 3), np.uint8)}},
        {"future_observations": {"wrist": np.zeros((4, 4, 3), np.uint8)}},
        {"future_observations": None},
        {"values": [0.6]},
        {"values": None},
        {"world_features": {"f": np.zeros(2, np.float32)}},  # the same numbers in another dtype
        {"timing": {"model_ms": 2.0}},
        {"info": {"k": 2}},
    ):
        other = base.replace(**change)
        assert base != other and other != base, change


def test_observations_and_requests_are_equal_by_value_and_differ_in_any_field():
    obs = Observation(images={"primary": np.zeros((4, 4, 3), np.uint8)}, state={"pos": np.zeros(2)},
                      instruction="go", step=3)
    assert obs == obs.replace() == Observation.from_wire(obs.to_wire())
    for change in ({"instruction": "stop"}, {"step": 4}, {"images": {"primary": np.ones((4, 4, 3), np.uint8)}},
                   {"state": {"pos": np.ones(2)}}):
        assert obs != obs.replace(**change) and obs.replace(**change) != obs, change

    def request(privileged):
        return PredictRequest(observation=obs, privileged=privileged)

    goal = {"goal": [np.zeros(2), {"k": 1}]}
    assert request(goal) == request({"goal": [np.zeros(2), {"k": 1}]})
    for privileged in (None, {"goal": [np.zeros(2)]}, {"goal": [np.zeros(2), {"k": 2}]}, {"goal": np.zeros(2)},
                       {"goal": {"k": 1}}, {"goal": [np.zeros(2), {"k": 1}, 3]}):
        assert request(goal) != request(privileged) and request(privileged) != request(goal), privileged


def test_model_info_finds_the_contract_of_a_platform_and_defaults_to_a_minute():
    contracts = [AdapterContract(platform=name, action_space=f"{name}.delta.v1", action_dim=1, cameras={}, state={},
                                 chunk_size=1) for name in ("alpha", "beta")]
    info = ModelInfo(backend="m", checkpoint=None, capabilities=Capabilities(), contracts=contracts)
    assert info.contract_for("".join(["be", "ta"])) is contracts[1] and info.contract_for("gamma") is None
    assert info.timeout_s == 60.0  # docs/reference.md
