"""The robotwin env through the plugin's real path (make_env -> checkout -> task class), on the
stand-in checkout (tests/standin_checkout), plus chunk execution through wamcore's wam_act."""

import os
import random

import numpy as np
import pytest

import robotwin_testmodels as models
from wamcore import ActionError, LocalModel, ModelConfig, ModelService, Registry
from wamcore.errors import ConfigurationError, EnvironmentFailure
from wamcore.execution import evaluate, run_episode, wam_act
from wamcore.testing import check_platform
import wam_robotwin.plugin as plugin
from wam_robotwin.spec import EE_ACTION_SPACE, ROBOTWIN_EE_CONTROL

OPEN, CLOSED = 1.0, 0.0


@pytest.fixture
def platform():
    reg = Registry(entry_points=False)
    reg.register(plugin, name="robotwin")
    return reg.platform("robotwin")


@pytest.fixture
def make(platform, robotwin_root):
    envs = []

    def build(**options):
        env = platform.create(robotwin_root=str(robotwin_root), **options)
        envs.append(env)
        return env

    yield build
    for env in envs:
        env.close()


def calls(env, name):
    return [c for c in env.task.calls if c[0] == name]


def action(left0=0.0, left_grip=OPEN, right_grip=OPEN):
    a = np.zeros(14, dtype=np.float32)
    a[0], a[6], a[13] = left0, left_grip, right_grip
    return a


def client(platform, chunks):
    native = models.ScriptedModel(chunks)
    service = ModelService(models.model_spec("scripted"), ModelConfig(platform="robotwin"), native=native)
    return LocalModel(service).bind(platform), native


def test_conformance(platform, robotwin_root):
    report = check_platform(platform, options={"robotwin_root": str(robotwin_root)})
    assert report["steps"] == 3 and report["snapshot"] == "not supported"


def test_episodes_are_upstream_expert_solved_seeds(make):
    env = make()
    env.reset(seed=0, episode=2)
    # 100001 is unstable (UnStableError), 100003 fails the expert's plan: both skipped
    assert env.sim_seed == 100004
    assert [c[1]["seed"] for c in calls(env, "play_once")] == [100000, 100002, 100003, 100004]
    env.reset(seed=0, episode=1)
    assert env.sim_seed == 100002
    assert len(calls(env, "play_once")) == 4  # accepted seeds are remembered, the expert is not rerun
    env.reset(seed=1)
    assert env.sim_seed == 200000


def test_seed_stride_is_lingbot_vas_own_client_range(make):
    """``--seed-stride 10000``: LingBot-VA's client counts from ``10000 * (1 + seed)``
    (its ``evaluation/robotwin/eval_polict_client_openpi.py``); the expert check is the same."""
    env = make(seed_stride=10_000)
    env.reset(seed=0, episode=0)
    assert env.sim_seed == 10000 and [c[1]["seed"] for c in calls(env, "play_once")] == [10000]
    env.reset(seed=2)
    assert env.sim_seed == 30000
    with pytest.raises(ConfigurationError, match="seed_stride must be >= 1"):
        make(seed_stride=0)


def test_expert_check_errors_stop_after_a_bound(make):
    env = make()
    env.task.fail_setup = "name 'CuroboPlanner' is not defined"
    with pytest.raises(EnvironmentFailure, match="raised on 20 seeds.*CuroboPlanner"):
        env.reset(seed=0)
    assert len(calls(env, "setup_demo")) == 20 and calls(env, "play_once") == []


def test_reset_runs_robotwin_from_its_root_and_restores_the_cwd(make, robotwin_root):
    cwd = os.getcwd()
    env = make()
    env.reset(seed=0)  # the stand-in opens ./task_config and ./assets relatively, like RoboTwin
    assert os.getcwd() == cwd
    last = calls(env, "setup_demo")[-1][1]
    assert last == {"seed": 100000, "now_ep_num": 0}


def test_instruction_is_filled_reproducible_and_leaves_random_alone(make):
    state = random.getstate()
    first = make().reset(seed=0, episode=1).instruction
    assert random.getstate() == state
    again = make().reset(seed=0, episode=1).instruction
    assert first == again and first.strip()
    assert "{" not in first and "hammer" in first
    seen = make(instruction_type="seen").reset(seed=0, episode=1).instruction
    assert seen.strip() and "{" not in seen


def test_step_counts_like_take_action_and_observes_targets_and_measured(make):
    env = make()
    obs = env.reset(seed=0)
    assert env.steps == 0 and env.max_steps == 400 and env.task.step_lim == 400
    np.testing.assert_array_equal(obs.state["joint_targets"], [0] * 6 + [OPEN] + [0] * 6 + [OPEN])
    result = env.step(action(left0=0.3))
    assert env.steps == 1 == env.task.take_action_cnt and not result.success
    assert result.info["sim_seed"] == 100000 and result.info["step_lim"] == 400
    obs = env.observe()
    assert obs.step == 1
    assert obs.state["joint_targets"][0] == pytest.approx(0.3)  # drive target: the command
    assert 0.0 < obs.state["joint_positions"][0] < 0.3  # measured: still on its way
    sent = calls(env, "take_action")[-1][1]
    assert sent["action_type"] == "qpos" and sent["action"].dtype == np.float64


def test_observation_is_rendered_once_per_request(make):
    env = make()
    env.reset(seed=0)
    renders = len(calls(env, "get_obs"))
    for _ in range(3):
        env.step(action(left0=0.1))
    assert len(calls(env, "get_obs")) == renders  # stepping renders nothing
    env.observe()
    env.observe()
    assert len(calls(env, "get_obs")) == renders + 1


@pytest.mark.parametrize(
    "bad",
    [np.full(14, np.nan, dtype=np.float32), np.zeros(13, dtype=np.float32), np.zeros((2, 14), dtype=np.float32), np.zeros(14, dtype=np.int64)],
    ids=["nan", "13 values", "two actions", "integers"],
)
def test_malformed_action_never_reaches_take_action(make, bad):
    env = make()
    env.reset(seed=0)
    with pytest.raises(ActionError):
        env.step(bad)
    assert calls(env, "take_action") == [] and env.steps == 0


def ee_pose(env, **moves):
    """The observed end-effector poses as one ee16 action, with some values moved."""
    state = env.observe().state
    a = np.concatenate([state["left_eef_pose"], state["left_gripper"], state["right_eef_pose"], state["right_gripper"]])
    for index, value in moves.items():
        a[int(index[1:])] = value
    return a.astype(np.float32)


def test_the_ee_control_is_take_action_ee(make, platform):
    env = make(control=EE_ACTION_SPACE)
    assert env.control == ROBOTWIN_EE_CONTROL == platform.control_for({"control": EE_ACTION_SPACE})
    env.reset(seed=0)
    yaw = 0.4
    target = ee_pose(env, i1=-0.2 + 0.05 * 0.5, i3=np.cos(yaw / 2), i6=np.sin(yaw / 2), i7=CLOSED)
    env.step(target)
    sent = calls(env, "take_action")[-1][1]
    assert sent["action_type"] == "ee" and sent["action"].dtype == np.float64
    np.testing.assert_array_equal(sent["action"], target.astype(np.float64))
    joints = env.observe().state["joint_targets"]
    np.testing.assert_allclose(joints[[0, 1, 6]], [yaw, 0.5, CLOSED], atol=1e-6)  # the stand-in planned to the pose


@pytest.mark.parametrize("quaternion", [(0, 0, 0, 0), (2, 0, 0, 0), (0.99, 0, 0, 0)], ids=["zero", "twice", "0.99"])
def test_an_ee_pose_without_a_unit_quaternion_never_reaches_take_action(make, quaternion):
    env = make(control=EE_ACTION_SPACE)
    env.reset(seed=0)
    bad = ee_pose(env)
    bad[11:15] = quaternion
    with pytest.raises(ActionError, match="right quaternion has norm"):
        env.step(bad)
    with pytest.raises(ActionError):
        env.step(np.zeros(14, dtype=np.float32))  # a qpos14 row on the ee control
    assert calls(env, "take_action") == [] and env.steps == 0


def test_step_before_reset_is_refused(make):
    with pytest.raises(EnvironmentFailure, match="reset"):
        make().step(action())


def test_success_stops_execution_inside_the_chunk(platform, make):
    env = make()
    env.reset(seed=0)
    goal = env.task.goal
    reach = [action(left0=goal) for _ in range(5)]
    grasp = [action(left0=goal, left_grip=CLOSED) for _ in range(11)]
    model, native = client(platform, [np.stack(reach + grasp)])
    act = wam_act(model, env, max_chunks=3)
    assert act.stop_reason == "native_success" and act.success
    assert act.steps == 6 == env.steps and act.chunks == 1
    assert len(calls(env, "take_action")) == 6  # the 10 actions after success never ran
    assert env.task.eval_success
    with pytest.raises(EnvironmentFailure, match="episode is over"):
        env.step(action())


def test_budget_stops_execution_inside_the_chunk(platform, make):
    env = make(step_limit=8)
    env.reset(seed=0)
    assert env.max_steps == 8 == env.task.step_lim
    model, _ = client(platform, [np.stack([action(left0=0.2)] * models.CHUNK)] * 3)
    act = wam_act(model, env, max_chunks=3)
    assert act.stop_reason == "budget_exhausted" and not act.success
    assert act.steps == 8 and act.chunks == 1 and len(act.predictions) == 1
    assert env.task.take_action_cnt == env.task.step_lim == 8
    assert len(calls(env, "take_action")) == 8


def test_chunk_boundary_then_budget(platform, make):
    env = make(step_limit=20)
    env.reset(seed=0)
    model, _ = client(platform, [np.stack([action(left0=0.2)] * models.CHUNK)] * 2)
    first = wam_act(model, env, max_chunks=1)
    assert first.stop_reason == "completed" and first.steps == 16
    second = wam_act(model, env, max_chunks=1)
    assert second.stop_reason == "budget_exhausted" and second.steps == 4 and env.steps == 20


def test_take_action_error_is_a_runtime_failure(platform, make):
    env = make()
    env.reset(seed=0)
    env.task.fail_on_action = 3
    model, _ = client(platform, [np.stack([action(left0=0.2)] * models.CHUNK)])
    act = wam_act(model, env)
    assert act.stop_reason == "runtime_failure" and act.steps == 2
    assert "TOPP failed" in act.error


def test_episode_and_evaluation_through_one_env(platform, robotwin_root):
    env_options = {"robotwin_root": str(robotwin_root)}
    model = LocalModel(ModelService(models.model_spec(), ModelConfig(platform="robotwin"))).bind(platform)
    episodes = platform.plan_episodes(env_options, 3, 0)
    assert [e.key for e in episodes] == ["seed=0/episode=0", "seed=0/episode=1", "seed=0/episode=2"]
    built = []

    def make_env(options):
        built.append(platform.create(**dict(options, step_limit=5)))
        return built[-1]

    results = list(evaluate(model, make_env, episodes, platform="robotwin"))
    assert len(built) == 1  # one task instance for all episodes, as upstream
    assert [r.stop_reason for r in results] == ["budget_exhausted"] * 3 and [r.steps for r in results] == [5, 5, 5]
    task = built[0].task
    episode_seeds = [c[1]["seed"] for c in task.calls if c[0] == "setup_demo"]
    # expert check, then the episode (100001: unstable at set-up, 100003: the expert fails)
    assert episode_seeds == [100000, 100000, 100001, 100002, 100002, 100003, 100004, 100004]
    clears = [c[1]["clear_cache"] for c in task.calls if c[0] == "close_env"]
    assert clears.count(True) == 1  # clear_cache_freq 2: after the second finished episode
    assert all(r.instruction.strip() for r in results)


def test_run_episode_reaches_native_success(platform, make):
    env = make()
    probe = make()
    probe.reset(seed=0)
    goal = probe.task.goal
    chunk = np.stack([action(left0=goal)] * 8 + [action(left0=goal, left_grip=CLOSED)] * 8)
    model, native = client(platform, [chunk])
    result = run_episode(model, env, reset={"seed": 0}, platform="robotwin")
    assert result.success and result.stop_reason == "native_success" and result.steps == 9
    assert result.instruction == env.task.get_instruction()
    np.testing.assert_array_equal(native.inputs[0], [0] * 6 + [OPEN] + [0] * 6 + [OPEN])
