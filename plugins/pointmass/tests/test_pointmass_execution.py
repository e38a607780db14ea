"""wamcore's execution and CLI driven through PointMass: stopping inside a chunk, episodes,
evaluation, and the ``wam run`` / ``wam eval`` commands a new user runs first."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from wamcore import Adapter, Capabilities, ModelSpec, PredictRequest, Prediction, Registry, hookimpl
from wamcore.cli import cli
from wamcore.execution import NATIVE_SUCCESS, run_episode, wam_act
from wamcore.runtime import WorkerConfig, open_model

from wam_pointmass import plugin
from wam_pointmass.adapter import CHUNK, CONTRACT
from wam_pointmass.env import PointMassEnv
from wam_pointmass.expert import expert_action, expert_chunk


class ScriptedChunk:
    """A native model that returns one fixed chunk (the test decides what it does)."""

    checkpoint = "scripted"

    def __init__(self, chunk):
        self.chunk = chunk
        self.calls = 0

    def predict_native(self, native, request):
        self.calls += 1
        return self.chunk


class ScriptedPlugin:
    def __init__(self, native):
        self.native = native

    @hookimpl
    def wam_register_models(self, register):
        register(ModelSpec(
            name="scripted",
            load=lambda config: self.native,
            adapters=[Adapter(contract=CONTRACT, encode=lambda r: None, decode=lambda n, r: Prediction(actions=n))],
            capabilities=Capabilities(actions=True),
        ))


def _registry(*extra):
    reg = Registry(entry_points=False)
    reg.register(plugin, name="pointmass")
    for i, p in enumerate(extra):
        reg.register(p, name=f"extra{i}")
    return reg


def _open(reg, backend, **kw):
    platform = reg.platform("pointmass")
    return open_model(WorkerConfig.from_options(platform="pointmass", am_backend=backend, **kw), platform, registry=reg)


def _state_three_actions_before_success(seed):
    """An env, rewound to exactly three expert actions before native success."""
    env = PointMassEnv()
    env.reset(seed=seed)
    snapshots = []
    while True:
        snapshots.append(env.snapshot())
        s = env.observe().state
        if env.step(expert_action(s["position"], s["velocity"], env.goal_position)).success:
            break
    assert len(snapshots) >= 3
    env.restore(snapshots[-3])
    return env


def test_wam_act_stops_inside_the_chunk_at_native_success():
    env = _state_three_actions_before_success(seed=4)
    start = env.steps
    chunk = expert_chunk(env, CHUNK)
    # the chunk reaches the target at its third action and would move on after it
    probe = env.snapshot()
    outcomes = [env.step(a).success for a in chunk]
    env.restore(probe)
    assert outcomes[:3] == [False, False, True]
    native = ScriptedChunk(chunk)
    model = _open(_registry(ScriptedPlugin(native)), "scripted")
    result = wam_act(model, env, max_chunks=5)
    assert (result.success, result.stop_reason, result.steps, result.chunks) == (True, NATIVE_SUCCESS, 3, 1)
    assert env.steps == start + 3 and native.calls == 1
    assert len(result.predictions) == 1 and result.predictions[0].actions.shape == (CHUNK, 2)
    replay = PointMassEnv()
    replay.restore(probe)
    for a in chunk[:3]:
        replay.step(a)
    assert replay.observe() == env.observe()  # the env holds the state after exactly 3 actions


def test_wam_act_returns_the_model_extras_unchanged():
    reg = _registry()
    model = _open(reg, "pointmass-wam")
    env = PointMassEnv()
    env.reset(seed=9)
    obs = env.observe()
    result = wam_act(model, env, max_chunks=1)
    direct = model.predict(PredictRequest(observation=obs))
    pred = result.predictions[0]
    np.testing.assert_array_equal(pred.actions, direct.actions)
    np.testing.assert_array_equal(pred.future_observations["primary"], direct.future_observations["primary"])
    np.testing.assert_array_equal(pred.values, direct.values)


def test_instruction_override_steers_the_reference_model():
    """The model reads the instruction: naming another target leads it there instead."""
    reg = _registry()
    model = _open(reg, "pointmass-wam")
    env = PointMassEnv()
    reached = 0
    for seed in range(10):
        env.reset(seed=seed)
        other = next(c for c in env.colours if c != env.goal)
        run_episode(model, env, reset={"seed": seed}, instruction=f"go to the {other} target")
        reached += np.linalg.norm(env.observe().state["position"] - env.target_positions[other]) < 0.15
    assert reached >= 8


def test_reference_model_beats_random_on_the_same_seeds():
    reg = _registry()
    rates = {}
    for backend in ("pointmass-wam", "random"):
        model = _open(reg, backend)
        env = PointMassEnv()
        rates[backend] = np.mean([run_episode(model, env, reset={"seed": s}).success for s in range(30)])
    assert rates["pointmass-wam"] >= 0.85 and rates["random"] <= 0.3, rates


# ----------------------------------------------------------------------------- CLI


@pytest.fixture
def runner():
    return CliRunner()


def test_wam_run_json_and_human_summary(runner):
    reg = _registry()
    out = runner.invoke(cli, ["run", "--json"], obj=reg)
    assert out.exit_code == 0, out.output
    record = json.loads(out.output)
    assert record["success"] is True and record["stop_reason"] == NATIVE_SUCCESS
    assert record["platform"] == "pointmass" and record["model"] == "pointmass-wam"
    assert record["steps"] > 0 and record["chunks"] >= 1
    human = runner.invoke(cli, ["run", "--seed", "3"], obj=reg)
    assert human.exit_code == 0, human.output
    assert "pointmass-wam on pointmass (seed 3, in-process): success" in human.output


def test_wam_run_video(runner, tmp_path):
    pil = pytest.importorskip("PIL.Image")
    path = tmp_path / "episode.gif"
    out = runner.invoke(cli, ["run", "--video", str(path), "--json"], obj=_registry())
    assert out.exit_code == 0, out.output
    record = json.loads(out.output)
    with pil.open(path) as gif:
        # the reset frame, one per step, then the outcome held for a second (GIF merges the
        # ten identical frames into one that lasts 1000 ms)
        assert gif.n_frames == record["steps"] + 2
        gif.seek(gif.n_frames - 1)
        assert gif.info["duration"] == 1000
        width, height = gif.size
    # camera | gap | predicted future, enlarged x4, under a 34-pixel caption, padded to 16-pixel blocks
    assert (width, height) == (528, 304) and 4 * (64 + 2 + 64) <= width and 256 + 34 <= height


def test_wam_eval_json_and_resume(runner, tmp_path):
    reg = _registry()
    out_dir = tmp_path / "eval"
    args = ["eval", "--episodes", "6", "--out", str(out_dir), "--json"]
    first = runner.invoke(cli, args + ["--am-backend", "random"], obj=reg)
    assert first.exit_code == 0, first.output
    summary = json.loads(first.output.strip().splitlines()[-1])
    assert summary["episodes"] == 6 and 0 <= summary["successes"] <= 6
    lines = (out_dir / "episodes.jsonl").read_text().splitlines()
    assert [json.loads(x)["key"] for x in lines] == [f"seed={i}" for i in range(6)]
    # an interrupted run: drop the last two episodes, then resume
    (out_dir / "episodes.jsonl").write_text("\n".join(lines[:4]) + "\n")
    resumed = runner.invoke(cli, args + ["--am-backend", "random", "--resume"], obj=reg)
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.output.strip().splitlines()[-1])["successes"] == summary["successes"]
    assert len((out_dir / "episodes.jsonl").read_text().splitlines()) == 6
