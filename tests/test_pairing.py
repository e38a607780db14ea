"""Pairing: one error naming every gap, and what would fit instead."""

from __future__ import annotations

import attrs
import pytest

from wamcore import pair
from wamcore.contracts import Capabilities, ModelInfo
from wamcore.errors import IncompatiblePairError
from wamcore.pairing import check_model_info, contract_problems
from wamcore.specs import ModelSpec, Option


def test_the_documented_pair_fits(line_registry):
    pairing = pair(line_registry.model("line-p"), line_registry.platform("line"))
    assert pairing.contract.chunk_size == 4 and pairing.observation.cameras == {"primary": (8, 32)}


def _model_with(line_plugin, **contract_changes):
    contract = attrs.evolve(line_plugin.LINE_ADAPTER.contract, **contract_changes)
    adapter = attrs.evolve(line_plugin.LINE_ADAPTER, contract=contract)
    return ModelSpec(name="other", load=lambda c: None, adapters=[adapter])


def test_every_mismatch_is_named(line_plugin, line_registry):
    model = _model_with(
        line_plugin,
        action_space="line.position.v1",
        action_dim=2,
        cameras={"primary": (16, 16), "depth": None},
        state={"position": 2, "velocity": 1},
        chunk_size=12,
    )
    with pytest.raises(IncompatiblePairError) as info:
        pair(model, line_registry.platform("line"), registry=line_registry)
    problems = info.value.problems
    assert len(problems) == 7, problems
    text = str(info.value)
    for expected in [
        "the model produces 'line.position.v1', the platform executes 'line.velocity.v1'",
        "action dim: the model produces 2, the platform takes 1",
        "camera 'primary' must be 16x16 (HxW); the platform renders 8x32",
        "camera 'depth' (any size) is not provided by the platform (it has: primary 8x32)",
        "state 'position' must have 2 values; the platform gives 1",
        "state 'velocity' (1) is not provided by the platform (it has: ['position', 'target'])",
        "chunk size 12 is outside the platform's executable bounds [1, 8]",
        "Models with an adapter for 'line': line-p",
    ]:
        assert expected in text
    assert "--control" not in text  # no control of 'line' executes positions: nothing to choose


@pytest.mark.parametrize("chunk, fits", [(1, False), (2, True), (8, True), (9, False)])
def test_a_chunk_at_the_controls_bounds_fits_and_one_past_them_does_not(line_plugin, chunk, fits):
    control = attrs.evolve(line_plugin.LINE_CONTROL, chunk_min=2)  # executes chunks of 2 to 8 actions
    contract = attrs.evolve(line_plugin.LINE_ADAPTER.contract, chunk_size=chunk)
    problems = contract_problems(contract, line_plugin.LINE_OBSERVATION, control)
    assert problems == ([] if fits else [f"chunk size {chunk} is outside the platform's executable bounds [2, 8]"])


def test_sizes_are_compared_by_value_however_large(line_plugin):
    """Dims and state sizes above the small integers Python shares still fit when equal."""
    names = [f"joint{i}" for i in range(300)]
    control = attrs.evolve(line_plugin.LINE_CONTROL, action_names=names, low=None, high=None)
    contract = attrs.evolve(line_plugin.LINE_ADAPTER.contract, action_dim=int("300"), state={"position": int("1000")})
    observation = attrs.evolve(line_plugin.LINE_OBSERVATION, state={"position": int("1000"), "target": 1})
    assert contract_problems(contract, observation, control) == []
    assert contract_problems(attrs.evolve(contract, action_dim=301), observation, control) == [
        "action dim: the model produces 301, the platform takes 300"]


def test_no_adapter_names_what_the_model_supports(line_plugin, line_registry):
    contract = attrs.evolve(line_plugin.LINE_ADAPTER.contract, platform="circle")
    model = ModelSpec(name="circler", load=lambda c: None, adapters=[attrs.evolve(line_plugin.LINE_ADAPTER, contract=contract)])
    with pytest.raises(IncompatiblePairError, match="(?s)no adapter for platform 'line'.*'circler' supports: circle.*adapter for 'line': line-p"):
        pair(model, line_registry.platform("line"), registry=line_registry)


def test_worker_model_info_is_checked_the_same_way(line_plugin, line_registry):
    platform = line_registry.platform("line")
    good = ModelInfo(backend="w", checkpoint=None, capabilities=Capabilities(), contracts=[line_plugin.LINE_ADAPTER.contract])
    assert check_model_info(good, platform).chunk_size == 4
    bad = attrs.evolve(good, contracts=[attrs.evolve(line_plugin.LINE_ADAPTER.contract, state={"speed": 1})])
    with pytest.raises(IncompatiblePairError, match="state 'speed'"):
        check_model_info(bad, platform)
    elsewhere = attrs.evolve(good, contracts=[attrs.evolve(line_plugin.LINE_ADAPTER.contract, platform="circle")])
    with pytest.raises(IncompatiblePairError, match="The worker serves: circle"):
        check_model_info(elsewhere, platform)


def test_platform_options_change_what_pairing_sees(line_plugin, line_registry):
    from wamcore.contracts import ObservationSpec

    platform = attrs.evolve(
        line_registry.platform("line"),
        observation_for=lambda opts: ObservationSpec(cameras={"primary": (opts["res"], opts["res"])}, state={"position": 1, "target": 1}),
        options=[Option("res", "int", 8)],
    )
    model = _model_with(line_plugin, cameras={"primary": (8, 8)})
    assert pair(model, platform).observation.cameras["primary"] == (8, 8)
    with pytest.raises(IncompatiblePairError, match="must be 8x8"):
        pair(model, platform, platform_options={"res": 16})


def test_contract_problems_is_empty_for_a_fit(line_plugin):
    assert contract_problems(line_plugin.LINE_ADAPTER.contract, line_plugin.LINE_OBSERVATION, line_plugin.LINE_CONTROL) == []


def test_open_model_names_what_fits_before_loading_anything(line_registry, line_plugin):
    from wamcore import hookimpl
    from wamcore.runtime import WorkerConfig, open_model

    loads = []
    contract = attrs.evolve(line_plugin.LINE_ADAPTER.contract, platform="circle")
    model = ModelSpec(name="circler", load=lambda c: loads.append(c),
                      adapters=[attrs.evolve(line_plugin.LINE_ADAPTER, contract=contract)])

    class Plugin:
        @hookimpl
        def wam_register_models(self, register):
            register(model)

    line_registry.register(Plugin(), name="circle")
    with pytest.raises(IncompatiblePairError, match="(?s)'circler' supports: circle.*adapter for 'line': line-p"):
        open_model(WorkerConfig.from_options(platform="line", am_backend="circler"), line_registry.platform("line"),
                   registry=line_registry)
    assert loads == []


def _options_dependent(line_plugin):
    """The line platform whose action dim and state length come from its option ``dim``."""
    from wamcore import ControlSpec, ObservationSpec, PlatformSpec

    def control(options):
        return attrs.evolve(line_plugin.LINE_CONTROL, action_space=f"line.velocity.d{options['dim']}.v1",
                            action_names=[f"v{i}" for i in range(options["dim"])], low=None, high=None)

    def observation(options):
        return ObservationSpec(cameras={}, state={"position": options["dim"]})

    platform = PlatformSpec(name="line", observation=line_plugin.LINE_OBSERVATION, control=line_plugin.LINE_CONTROL,
                            make_env=line_plugin.LineEnv, options=(Option("dim", type="int", default=1),),
                            observation_for=observation, control_from=control)

    def fit(spec, config):
        dim = config.platform_options["dim"]
        contract = attrs.evolve(line_plugin.LINE_ADAPTER.contract, action_space=f"line.velocity.d{dim}.v1", action_dim=dim,
                                state={"position": dim})
        return attrs.evolve(spec, adapters=[attrs.evolve(line_plugin.LINE_ADAPTER, contract=contract)])

    model = ModelSpec(name="fitted", load=lambda c: None, adapters=[line_plugin.LINE_ADAPTER], configure=fit)
    assert isinstance(control({"dim": 1}), ControlSpec)
    return platform, model


def test_a_model_fits_a_platform_whose_control_depends_on_its_options(line_plugin):
    platform, model = _options_dependent(line_plugin)
    assert platform.control_for({"dim": 3}).action_dim == 3 and platform.control_for().action_dim == 1  # the default
    pairing = pair(model, platform, platform_options={"dim": 3})
    assert (pairing.control.action_dim, pairing.contract.action_dim, pairing.contract.state) == (3, 3, {"position": 3})
    fixed = ModelSpec(name="fixed", load=lambda c: None, adapters=[line_plugin.LINE_ADAPTER])
    with pytest.raises(IncompatiblePairError, match="action dim: the model produces 1, the platform takes 3"):
        pair(fixed, platform, platform_options={"dim": 3})


def test_a_spawned_worker_gets_the_platform_options(line_plugin):
    from wamcore.runtime import WorkerConfig, for_platform, worker_argv

    platform, _ = _options_dependent(line_plugin)
    config = WorkerConfig.from_options(platform="line", am_backend="fitted", am_python="python")
    argv = worker_argv(for_platform(config, platform, {"dim": 3}), spec=None, ready_file="r", python="python")
    assert argv[argv.index("--platform-options") + 1] == '{"dim": 3}'
    in_process = WorkerConfig.from_options(platform="line", am_backend="fitted")
    assert for_platform(in_process, platform, {"dim": 3}) is in_process
