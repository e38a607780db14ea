"""``--execution rtc`` (real-time chunking) with the PointMass reference WAM's weights trained
to condition on an action prefix (``--weights reach-rtc``): the prefix is honoured and the
chunk goes on from where it leaves the mass, a model without the ``action_prefix``
capability is refused, and a prefix is validated like actions before it reaches a model."""

from __future__ import annotations

import json
import os
import sys

import attrs
import numpy as np
import pytest

from wamcore import ActionError, Capabilities, CapabilityError, ModelConfig, ModelService, PredictRequest, PredictionError
from wamcore.execution import run_episode
from wamcore.realtime import NoActionPrefix, Realtime, WholeChunksOnly, strategy_for

from wam_pointmass import plugin
from wam_pointmass.data import prefixed_chunk
from wam_pointmass.env import PointMassEnv
from wam_pointmass.expert import expert_chunk

sys.path.insert(0, os.path.dirname(__file__))
from test_planning import Counted, RecordingEnv, _open, registry  # noqa: E402,F401  (registry: a fixture)
from test_realtime import CHUNK, pm  # noqa: E402

RTC = {"weights": "reach-rtc"}


@pytest.fixture(scope="module")
def rtc_wam(registry):
    client = _open(registry, "pointmass-wam", RTC)
    yield client
    client.close()


@pytest.fixture(scope="module")
def reach_wam(registry):
    client = _open(registry, "pointmass-wam")
    yield client
    client.close()


def _moving_env(seed: int, steps: int = 5) -> PointMassEnv:
    """An env a few expert steps into an episode: the mass is moving."""
    env = PointMassEnv()
    env.reset(seed=seed)
    for action in expert_chunk(env, steps):
        env.step(action)
    return env


def test_the_chunk_starts_with_the_prefix_and_goes_on_from_where_it_leaves_the_mass(rtc_wam):
    assert rtc_wam.info.capabilities.action_prefix
    errors, ignorant = [], []
    for seed in range(12):
        env = _moving_env(seed)
        d = 1 + seed % 5
        prefix = np.clip(expert_chunk(env, d)[::-1] * 0.7, -1, 1).astype(np.float32)  # not what the policy would do
        request = PredictRequest(observation=env.observe(), action_prefix=prefix)
        chunk = rtc_wam.predict(request).actions
        plain = rtc_wam.predict(PredictRequest(observation=env.observe())).actions
        np.testing.assert_allclose(chunk[:d], prefix, atol=1e-6)  # the executing actions, exactly
        target = prefixed_chunk(env, prefix, CHUNK)  # the expert from where the prefix leaves the mass
        errors.append(np.abs(chunk[d:] - target[d:]).mean())
        ignorant.append(np.abs(plain[d:] - target[d:]).mean())  # the same model not told the prefix
    assert np.mean(errors) < 0.03, errors  # measured: 0.008
    assert np.mean(errors) < 0.4 * np.mean(ignorant), (errors, ignorant)  # measured: 0.038


def test_rtc_requests_carry_the_actions_that_run_meanwhile(registry, rtc_wam):
    platform = registry.platform("pointmass")
    env = RecordingEnv()
    model = Counted(rtc_wam)
    execution = strategy_for(Realtime("rtc", 300), platform, env.control, rtc_wam.info.capabilities)
    result = run_episode(model, env, reset={"seed": 3}, seed=3, execution=execution)
    assert result.success
    chunks = result.realtime["chunks"]
    steps = [c["step"] for c in chunks]
    assert steps == [(CHUNK - 3) * i for i in range(len(chunks))]  # a request every 5 steps, as async
    assert all(c["skipped"] == 3 and c["waited"] == 3 for c in chunks)
    executed = np.stack(env.executed)
    for request, step in zip(model.requests, steps):
        # the prefix is exactly what the world executed while the chunk was computed (the
        # episode may succeed before the last one has run out)
        ran = executed[step:step + 3]
        assert len(request.action_prefix) == 3 and len(ran) >= 1
        np.testing.assert_array_equal(request.action_prefix[:len(ran)], ran)
    np.testing.assert_array_equal(model.requests[0].action_prefix, np.zeros((3, 2), np.float32))  # the hold action


def test_rtc_holds_up_where_async_degrades(tmp_path):
    """A small sweep at 400 ms with the 20-step budget: every rtc episode succeeds in about
    the steps of a paused run plus the first chunk's wait; async fails most."""
    out = tmp_path / "sweep"
    done = pm("eval", "--weights", "reach-rtc", "--episodes", 10, "--max-steps", 20, "--realtime",
              "--execution", "pause,async,rtc", "--latency-ms", "400", "--out", out, "--json")
    assert done.returncode == 0, done.stderr
    points = {p["execution"]: p for p in json.loads(done.stdout)["points"]}
    assert points["rtc"]["successes"] == 10 and points["async"]["successes"] <= 5
    assert points["rtc"]["mean_steps_to_success"] <= points["pause"]["mean_steps_to_success"] + 4 + 1


def test_a_model_without_the_capability_is_refused(registry, reach_wam, tmp_path):
    assert not reach_wam.info.capabilities.action_prefix
    platform = registry.platform("pointmass")
    with pytest.raises(NoActionPrefix, match="action_prefix capability.*--execution async or hold"):
        strategy_for(Realtime("rtc", 200), platform, platform.control, reach_wam.info.capabilities)
    env = _moving_env(0)
    with pytest.raises(CapabilityError, match="does not declare the action_prefix capability"):
        reach_wam.predict(PredictRequest(observation=env.observe(), action_prefix=np.zeros((2, 2), np.float32)))
    ran = pm("run", "--realtime", "--execution", "rtc", "--latency-ms", 200, "--json")
    assert ran.returncode != 0 and "needs a model that declares the action_prefix capability" in ran.stderr
    evaluated = pm("eval", "--realtime", "--execution", "rtc", "--latency-ms", 200, "--episodes", 2,
                   "--out", tmp_path / "refused")
    assert evaluated.returncode != 0 and "action_prefix capability" in evaluated.stderr
    assert not (tmp_path / "refused" / "episodes.jsonl").exists() or not (tmp_path / "refused" / "episodes.jsonl").read_text()


def test_a_model_declaring_whole_chunks_runs_under_pause_and_hold_only(registry):
    """``whole_chunks`` (a model whose state needs each chunk to run whole, as LingBot-VA's;
    its commands are tested in plugins/robotwin/tests/test_robotwin_lingbot_pair.py): the
    strategies that request mid-chunk are refused, even for a model that could take a prefix."""
    platform = registry.platform("pointmass")
    for caps in (Capabilities(whole_chunks=True), Capabilities(whole_chunks=True, action_prefix=True)):
        for execution in ("async", "rtc"):
            with pytest.raises(WholeChunksOnly, match=f"--execution {execution}: this model declares whole_chunks.*"
                                                      "use --execution hold .* or pause"):
                strategy_for(Realtime(execution, 200), platform, platform.control, caps)
        for execution in ("pause", "hold"):
            assert strategy_for(Realtime(execution, 200), platform, platform.control, caps).name == execution
    assert strategy_for(Realtime("async", 200), platform, platform.control, Capabilities()).name == "async"


@pytest.mark.parametrize("prefix,problem", [
    (np.array([[0.5, 2.0]], np.float32), "beyond the high bound"),
    (np.array([[np.nan, 0.0]], np.float32), "NaN or inf"),
    (np.zeros((2, 3), np.float32), "action dim must be 2"),
    (np.zeros((CHUNK + 1, 2), np.float32), "1 <= d <= 8"),
    (np.zeros((0, 2), np.float32), "1 <= d <= 8"),
    ([[0.0, 0.0]], "must be a float array"),
])
def test_a_prefix_is_validated_before_it_reaches_the_model(registry, prefix, problem):
    """On the client (nothing sent: the spawned worker never sees it) and, for a request
    sent straight to a worker, on the service."""
    env = _moving_env(1)
    worker = _open(registry, "pointmass-wam", RTC, am_python=sys.executable)  # a real worker process
    sent, send = [], worker._predict
    worker._predict = lambda request: sent.append(request) or send(request)  # what crosses the wire
    try:
        with pytest.raises(ActionError, match=problem):
            worker.predict(PredictRequest(observation=env.observe(), action_prefix=prefix))
        assert sent == []
        # a valid prefix is sent and honoured
        good = worker.predict(PredictRequest(observation=env.observe(), action_prefix=np.zeros((2, 2), np.float32)))
        assert len(sent) == 1
        np.testing.assert_array_equal(good.actions[:2], np.zeros((2, 2), np.float32))
    finally:
        worker.close()
    service = ModelService(plugin.POINTMASS_WAM, ModelConfig(platform="pointmass", options=RTC),
                           platform=registry.platform("pointmass"))
    request = attrs.evolve(PredictRequest(observation=env.observe()), action_prefix=prefix)
    with pytest.raises(ActionError, match=problem):
        service.predict(request)


def test_a_chunk_that_does_not_start_with_the_prefix_is_refused(registry):
    """The worker checks the answer: the real model made to ignore the prefix it was sent."""
    from wam_pointmass.model import load

    class IgnoresThePrefix:
        def __init__(self, inner):
            self.inner = inner

        def predict_native(self, native, request):
            return self.inner.predict_native({**native, "prefix": None, "mask": None}, request)

    config = ModelConfig(platform="pointmass", options=RTC)
    service = ModelService(plugin.POINTMASS_WAM, config, native=IgnoresThePrefix(load(config)),
                           platform=registry.platform("pointmass"))
    request = PredictRequest(observation=_moving_env(2).observe(), action_prefix=np.array([[1.0, -1.0]], np.float32))
    with pytest.raises(PredictionError, match="must start with the 1 actions of action_prefix"):
        service.predict(request)
