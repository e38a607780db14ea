"""A platform with more than one control (``PlatformSpec.extra_controls``): pairing picks the
control the model's adapter declares, and that choice reaches every env, in this process, in
env processes and through a spawned worker; nothing runs under another control."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from wamcore import ModelConfig, ModelService, pair, wam_act
from wamcore.errors import ConfigurationError, IncompatiblePairError
from wamcore.registry import Registry
from wamcore.runtime import WorkerConfig, open_model
from wamcore.service import LocalModel
from wamcore.specs import CONTROL_OPTION, Option, PlatformSpec

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))
import wamtest_controls as toy  # noqa: E402
from test_evaluation_ray import tag  # noqa: E402,F401  (clears the Ray processes a test leaves)

POS, VEL = toy.POSITION.action_space, toy.VELOCITY.action_space


@pytest.fixture
def registry():
    reg = Registry(entry_points=False)
    reg.register(toy)
    return reg


def wam(*args, timeout=180):
    env = dict(os.environ, WAMCORE_PLUGIN_MODULES="wamtest_controls", WAMCORE_LOAD_PLUGINS="")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "wamcore", *map(str, args)], env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_the_platform_lists_its_controls_and_gets_a_control_option():
    assert [c.action_space for c in toy.PLATFORM.controls] == [VEL, POS]
    option = next(o for o in toy.PLATFORM.options if o.dest == CONTROL_OPTION)
    assert option.type == "choice" and option.choices == (VEL, POS) and option.default is None
    assert toy.PLATFORM.control_for({}) is toy.VELOCITY and toy.PLATFORM.control_for({"control": POS}) is toy.POSITION
    with pytest.raises(ConfigurationError, match="executes no control 'twoway.torque.v1'"):
        toy.PLATFORM.control_for({"control": "twoway.torque.v1"})
    assert toy.PLATFORM.create(control=POS).control is toy.POSITION


def test_a_platform_with_one_control_is_unchanged(line_registry):
    platform = line_registry.platform("line")
    assert platform.controls == (platform.control,) and not [o for o in platform.options if o.dest == CONTROL_OPTION]
    assert pair(line_registry.model("line-p"), platform).platform_options == {}


def test_controls_must_be_distinct_and_the_option_is_the_cores():
    with pytest.raises(ValueError, match="lists an action space twice"):
        PlatformSpec(name="bad", observation=toy.OBSERVATION, control=toy.VELOCITY, extra_controls=(toy.VELOCITY,),
                     make_env=toy.TwoWayEnv)
    with pytest.raises(ValueError, match="the option 'control' is the core's"):
        PlatformSpec(name="bad", observation=toy.OBSERVATION, control=toy.VELOCITY, extra_controls=(toy.POSITION,),
                     make_env=toy.TwoWayEnv, options=(Option("control"),))


def test_pairing_picks_the_control_the_adapter_declares(registry):
    platform = registry.platform("twoway")
    pos = pair(registry.model("twoway-pos"), platform)
    assert pos.control is toy.POSITION and pos.platform_options == {"control": POS}
    vel = pair(registry.model("twoway-vel"), platform, platform_options={"step": 1})
    assert vel.control is toy.VELOCITY and vel.platform_options == {"step": 1}  # the default: nothing to choose


def test_a_control_chosen_by_hand_wins_and_a_mismatch_says_how_to_choose(registry):
    platform = registry.platform("twoway")
    with pytest.raises(IncompatiblePairError) as info:
        pair(registry.model("twoway-pos"), platform, platform_options={"control": VEL})
    text = str(info.value)
    assert "the model produces 'twoway.position.v1', the platform executes 'twoway.velocity.v1'" in text
    assert f"also executes '{POS}': choose it with --control {POS}" in text


def test_the_hint_names_the_default_control_too(registry):
    with pytest.raises(IncompatiblePairError, match=f"also executes '{VEL}': choose it with --control {VEL}"):
        pair(registry.model("twoway-vel"), registry.platform("twoway"), platform_options={"control": POS})


@pytest.mark.parametrize("space", ["twoway.effort.v1", "twoway.zoom.v1"])  # sorting before and after the controls'
def test_an_action_space_no_control_executes_is_refused_with_nothing_to_choose(registry, space):
    spec = registry.model("twoway-pos")
    adapter = spec.adapters[0]
    other = attrs.evolve(spec, name="twoway-other",
                         adapters=[attrs.evolve(adapter, contract=attrs.evolve(adapter.contract, action_space=space))])
    with pytest.raises(IncompatiblePairError) as info:
        pair(other, registry.platform("twoway"))
    text = str(info.value)
    assert f"the model produces '{space}', the platform executes '{VEL}'" in text and "--control" not in text


def test_bind_uses_the_control_of_the_env_options(registry):
    platform = registry.platform("twoway")
    service = ModelService(registry.model("twoway-pos"), ModelConfig(platform="twoway"))
    assert LocalModel(service).bind(platform, options={"control": POS}).control is toy.POSITION
    with pytest.raises(IncompatiblePairError, match=f"choose it with --control {POS}"):
        LocalModel(service).bind(platform)  # envs built without the option execute the default control


def test_an_env_of_another_control_never_executes_the_chunk(registry):
    platform = registry.platform("twoway")
    model = LocalModel(ModelService(registry.model("twoway-pos"), ModelConfig(platform="twoway"))).bind(
        platform, options={"control": POS})
    env = platform.create()  # the default control: velocity
    env.reset(seed=0)
    with pytest.raises(IncompatiblePairError, match=f"build the env with control='{POS}'"):
        wam_act(model, env)
    assert env.steps == 0


def test_open_model_pairs_and_binds_the_models_control(registry):
    platform = registry.platform("twoway")
    config = WorkerConfig.from_options(platform="twoway", am_backend="twoway-pos")
    with open_model(config, platform, registry=registry) as model:
        assert model.control is toy.POSITION
        env = platform.create(control=model.control.action_space)
        env.reset(seed=1)
        act = wam_act(model, env, max_chunks=3)
    assert act.success and act.steps < 12


def test_a_probe_refuses_a_model_of_another_control_than_the_interventions(registry, tmp_path):
    import attrs

    from wamcore.probe.runner import run_probe
    from wamcore.probe.sets import ProbeContext, ProbeSet
    from wamcore.specs import Intervention

    platform = attrs.evolve(registry.platform("twoway"), interventions=(Intervention("push", [[0.1]] * 4),))
    one = ProbeSet("one", "twoway", [ProbeContext("seed=0", reset={"seed": 0})])
    for backend, control in (("twoway-pos", toy.POSITION), ("twoway-vel", toy.VELOCITY)):
        config = WorkerConfig.from_options(platform="twoway", am_backend=backend)
        with open_model(config, platform, registry=registry) as model:
            options = {CONTROL_OPTION: control.action_space}
            if control is toy.POSITION:
                with pytest.raises(ConfigurationError, match="interventions are twoway.velocity.v1 chunks, but the "
                                                             "model commands twoway.position.v1"):
                    run_probe(one, platform, model, out=tmp_path / backend, platform_options=options)
                assert not (tmp_path / backend).exists()  # refused before any env was built or stepped
            else:
                report = run_probe(one, platform, model, out=tmp_path / backend, platform_options=options)
                context = report["contexts"][0]
                assert list(context["branches"]) == ["push", "model"] and context["picture"] is None  # no camera
                separation = report["metrics"]["branch_separation"]["horizons"]["2"]
                assert separation["distinct_pairs"] == 1 and separation["frame_mse_mean"] is None
                assert separation["state_distance_mean"] > 0


def test_wam_plugins_names_the_controls():
    result = wam("plugins")
    assert result.returncode == 0, result.stderr
    assert f"platform twoway (controls: {VEL} (default), {POS})" in result.stdout


def test_wam_run_builds_the_env_with_the_paired_control():
    result = wam("run", "--platform", "twoway", "--am-backend", "twoway-pos", "--json")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["success"] and record["instruction"] == f"reach 0.5 by {POS}"
    wrong = wam("run", "--platform", "twoway", "--am-backend", "twoway-pos", "--control", VEL)
    assert wrong.returncode == 2 and f"choose it with --control {POS}" in wrong.stderr


@pytest.mark.parametrize("num_envs", [1, 2])
def test_wam_eval_carries_the_control_to_env_processes_and_the_worker(tmp_path, num_envs):
    out = tmp_path / "out"
    result = wam("eval", "--platform", "twoway", "--am-backend", "twoway-pos", "--episodes", 4,
                 "--num-envs", num_envs, "--skip-memory-check", "--out", out, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["successes"] == 4
    assert json.loads((out / "config.json").read_text())["platform_options"]["control"] == POS
    rows = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert [r["instruction"] for r in rows] == [f"reach 0.5 by {POS}"] * 4  # every env executed the position control


def test_ray_env_actors_build_their_envs_with_the_paired_control(tmp_path, tag):
    out = tmp_path / "out"
    result = wam("eval", "--platform", "twoway", "--am-backend", "twoway-pos", "--episodes", 4, "--executor", "ray",
                 "--num-envs", 2, "--am-python", sys.executable, "--am-log-dir", tmp_path / "w", "--out", out, "--json",
                 timeout=300)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert [r["instruction"] for r in rows] == [f"reach 0.5 by {POS}"] * 4 and all(r["success"] for r in rows)
