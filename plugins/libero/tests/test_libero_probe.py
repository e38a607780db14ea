"""``wam probe --set libero-cf-mini`` on the real simulator with the smoke model, and the
snapshot state that makes LIBERO branches exact (controller, buffers, RNGs, saved files)."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("libero.libero", reason="needs the LIBERO simulator: pip install 'wam-libero[sim]'")

from wamcore.errors import ConfigurationError
from wamcore.probe import snapshots
from wamcore.probe.branches import Branch, difference, rollout

import wam_libero.env as libero_env
from wam_libero.env import LiberoEnv
from wam_libero.plugin import LIBERO_PLATFORM

RES = 64


@pytest.fixture(scope="module")
def env():
    env = LiberoEnv("libero_spatial", 0, resolution=RES, settle_steps=2)
    yield env
    env.close()


def test_libero_cf_mini_runs_with_the_smoke_model(tmp_path):
    out = tmp_path / "probe"
    result = subprocess.run(
        [sys.executable, "-m", "wamcore", "probe", "--set", "libero-cf-mini", "--am-backend", "libero-smoke",
         "--out", str(out), "--cache", str(tmp_path / "cache")],
        capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert [c["name"] for c in report["contexts"]] == [
        "libero_spatial/task=0", "libero_object/task=0", "libero_goal/task=0", "libero_10/task=0"]
    assert report["determinism"] == {"max_state_error": 0.0, "max_pixel_error": 0.0, "identical": True}
    separation = report["metrics"]["branch_separation"]
    assert separation["status"] == "ok" and separation["contexts"] == 4
    at8 = separation["horizons"]["8"]
    assert at8["pairs"] == 4 * 6 and at8["distinct_pairs"] == at8["pairs"] and at8["frame_mse_min"] > 0
    # up to its 4 steps the model's no-op chunk is the no-op intervention: one equal pair per context
    at4 = separation["horizons"]["4"]
    assert (at4["pairs"], at4["distinct_pairs"]) == (4 * 10, 4 * 10 - 4)
    for name, capability in (("future_frames", "future_observations"), ("candidate_futures", "action_conditioned_futures"),
                             ("branch_ranking", "action_conditioned_futures"), ("values", "values")):
        assert report["metrics"][name] == {"status": "skipped", "needs": capability,
                                           "reason": f"model 'libero-smoke' does not declare {capability}"}
    for context in report["contexts"]:
        assert list(context["branches"]) == ["no-op", "+x", "-x", "gripper-close", "model"]
        outcomes = context["metrics"]["branch_separation"]["outcomes"]
        assert outcomes["model"]["steps"] == 4 and outcomes["+x"]["steps"] == 8
        assert (out / "contexts" / f"{context['name'].replace('/', '_')}.png").stat().st_size > 1000
    assert report["cache"]["model_calls"] == 4
    print(result.stdout)


def _rotate_then(action):
    """8 steps: a rotation first (OSC sets its orientation goal), then ``action`` (no rotation)."""
    return np.array([[0, 0, 0, 0, 0, 0.8, -1]] + [action] * 7, dtype=np.float32)


def test_branch_order_does_not_leak_through_the_controller(env, monkeypatch):
    """OSC keeps its orientation goal while an action's rotation is zero: a branch that turns
    the hand must not change the next branch, which holds the pose."""
    env.reset(seed=0)
    snap = env.snapshot()
    hold = Branch("hold", np.tile(np.array([0.3, 0, 0, 0, 0, 0, -1], np.float32), (8, 1)), "intervention")
    turn = Branch("turn", _rotate_then([0, 0, 0, 0, 0, 0, -1]), "intervention")
    alone = rollout(env, snap, hold)
    rollout(env, snap, turn)
    after_turn = rollout(env, snap, hold)
    assert difference(alone, after_turn) == {"state": 0.0, "pixels": 0.0}
    # what that state is for: without it, the same branch order gives another future
    monkeypatch.setattr(libero_env, "CONTROLLER_STATE", ())
    env.reset(seed=0)
    leaky = env.snapshot()
    alone = rollout(env, leaky, hold)
    rollout(env, leaky, turn)
    assert difference(alone, rollout(env, leaky, hold))["pixels"] > 0


def test_restore_brings_back_the_python_and_numpy_generators(env):
    env.reset(seed=0)
    snap = env.snapshot()
    expected = (np.random.random(), random.random())
    np.random.seed(123)
    random.seed(123)
    env.restore(snap)
    assert (np.random.random(), random.random()) == expected


def test_a_saved_snapshot_replays_exactly_in_a_new_env(env, tmp_path):
    env.reset(seed=0, init_state=1)
    env.step(np.array([0.2, -0.1, 0.1, 0, 0, 0.3, 1], np.float32))
    snap = env.snapshot()
    address, path = snapshots.save(tmp_path, snap, {"platform": "libero"})
    branch = Branch("b", np.random.default_rng(0).uniform(-0.6, 0.6, (5, 7)).astype(np.float32), "intervention")
    original = rollout(env, snap, branch)
    fresh = LiberoEnv("libero_spatial", 0, resolution=RES, settle_steps=2)
    try:
        fresh.reset(seed=7)  # another episode until restored
        snapshots.restore_saved(fresh, snapshots.load(path))
        assert snapshots.address(fresh.snapshot()) == address
        assert difference(original, rollout(fresh, fresh.snapshot(), branch)) == {"state": 0.0, "pixels": 0.0}
    finally:
        fresh.close()


def test_a_snapshot_of_another_task_or_resolution_is_refused(env):
    env.reset(seed=0)
    snap = env.snapshot()
    other = LiberoEnv("libero_spatial", 1, resolution=RES, settle_steps=1)
    try:
        with pytest.raises(ConfigurationError, match="'task': 0.*not of this one.*'task': 1"):
            other.restore(snap)
    finally:
        other.close()


def test_the_pilots_interventions_are_registered():
    names = [i.name for i in LIBERO_PLATFORM.interventions]
    assert names == ["no-op", "+x", "-x", "gripper-close"]
    assert all(i.actions.shape == (8, 7) for i in LIBERO_PLATFORM.interventions)
    assert LIBERO_PLATFORM.intervention("gripper-close").actions[0].tolist() == [0, 0, 0, 0, 0, 0, 1]
