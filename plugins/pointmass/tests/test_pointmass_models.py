"""pointmass-wam and random: conformance, capabilities, checkpoint pins, and the WAM's claims
about future frames (measured against the simulator)."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from wamcore import ActionError, CapabilityError, ModelConfig, ModelService, PredictRequest  # noqa: E402
from wamcore.checkpoints import sha256_file  # noqa: E402
from wamcore.errors import CheckpointError, ConfigurationError  # noqa: E402
from wamcore.runtime import WorkerConfig, open_model  # noqa: E402
from wamcore.testing import check_model_adapter  # noqa: E402

from wam_pointmass import plugin  # noqa: E402
from wam_pointmass.adapter import CHUNK  # noqa: E402
from wam_pointmass.checkpoint import PINS_NAME, SHIPPED_SHA256, WEIGHTS_NAME, shipped_weights  # noqa: E402
from wam_pointmass.env import PointMassEnv  # noqa: E402
from wam_pointmass.model import load  # noqa: E402
from wam_pointmass.spec import CAMERA  # noqa: E402


@pytest.fixture(scope="module")
def registry():
    from wamcore import Registry

    reg = Registry(entry_points=False)
    reg.register(plugin, name="pointmass")
    return reg


@pytest.fixture(scope="module")
def wam(registry):
    platform = registry.platform("pointmass")
    client = open_model(WorkerConfig.from_options(platform="pointmass", am_backend="pointmass-wam"), platform, registry=registry)
    yield client
    client.close()


def test_reference_model_conforms():
    report = check_model_adapter(plugin.POINTMASS_WAM, plugin.POINTMASS_PLATFORM)
    assert report["actions"] == (CHUNK, 2)
    assert len(report["rejected"]) == 7


def test_random_baseline_conforms():
    report = check_model_adapter(plugin.RANDOM, plugin.POINTMASS_PLATFORM)
    assert report["actions"] == (CHUNK, 2)


def test_model_info_reports_checkpoint_device_and_capabilities(wam):
    info = wam.info
    assert info.checkpoint == f"sha256:{SHIPPED_SHA256}" == f"sha256:{sha256_file(shipped_weights())}"
    assert info.device == ("cuda" if torch.cuda.is_available() else "cpu")
    assert info.capabilities.names() == ["actions", "future_observations", "values", "action_conditioned_futures"]
    assert info.details["parameters"] > 10_000
    assert shipped_weights().stat().st_size < 3_000_000


def test_device_option_is_honoured():
    model = load(ModelConfig(platform="pointmass", options={"device": "cpu"}))
    assert model.device == "cpu" and next(model.net.parameters()).device.type == "cpu"
    assert model.details["threads"] == 1  # the registered default applies without CLI options
    if not torch.cuda.is_available():
        with pytest.raises(ConfigurationError, match="no CUDA device"):
            load(ModelConfig(platform="pointmass", options={"device": "cuda"}))


def test_prediction_carries_future_and_value(wam):
    env = PointMassEnv()
    obs = env.reset(seed=0)
    pred = wam.predict(PredictRequest(observation=obs))
    assert pred.actions.shape == (CHUNK, 2) and pred.actions.dtype == np.float32
    assert np.abs(pred.actions).max() <= 1.0
    future = pred.future_observations[CAMERA]
    assert future.shape == (64, 64, 3) and future.dtype == np.uint8
    assert pred.values.shape == (1,) and 0.0 <= pred.values[0] <= 1.0
    assert pred.info["future_of"] == "predicted_actions"
    # deterministic: the same request gives the same prediction
    again = wam.predict(PredictRequest(observation=obs))
    np.testing.assert_array_equal(again.actions, pred.actions)
    np.testing.assert_array_equal(again.future_observations[CAMERA], future)


def test_candidate_actions_are_returned_with_their_future(wam):
    env = PointMassEnv()
    obs = env.reset(seed=1)
    candidate = np.tile(np.array([[0.5, -0.5]], dtype=np.float32), (CHUNK, 1))
    pred = wam.predict(PredictRequest(observation=obs, candidate_actions=candidate))
    np.testing.assert_array_equal(pred.actions, candidate)
    assert pred.info["future_of"] == "candidate_actions"


@pytest.mark.parametrize(
    "candidate, match",
    [(np.zeros((3, 2), np.float32), "shape"), (np.full((CHUNK, 2), 2.0, np.float32), "beyond the high bound")],
)
def test_malformed_candidates_are_refused_before_the_model_runs(candidate, match):
    calls = []
    service = ModelService(plugin.POINTMASS_WAM, ModelConfig(platform="pointmass"))
    inner = service.native.predict_native
    service.native.predict_native = lambda native, request: calls.append(1) or inner(native, request)
    obs = PointMassEnv().reset(seed=0)
    with pytest.raises(ActionError, match=match):
        service.predict(PredictRequest(observation=obs, candidate_actions=candidate))
    assert calls == []


def test_a_batch_answers_each_request_as_a_single_prediction_would():
    """Batched and single forwards agree to float32 rounding (not bit for bit: docs/models/
    pointmass-wam.md), requests with and without candidates mixed, order kept, and a
    malformed candidate fails only its own request."""
    service = ModelService(plugin.POINTMASS_WAM, ModelConfig(platform="pointmass", options={"device": "cpu"}))
    assert service.max_batch == 64
    env, rng = PointMassEnv(), np.random.default_rng(0)
    requests = []
    for seed in range(10):
        candidate = rng.uniform(-1, 1, size=(CHUNK, 2)).astype(np.float32) if seed % 3 == 0 else None
        requests.append(PredictRequest(observation=env.reset(seed=seed), candidate_actions=candidate))
    requests[4] = PredictRequest(observation=env.reset(seed=4), candidate_actions=np.full((CHUNK, 2), 2.0, np.float32))
    batched = service.predict_batch([(r, "s") for r in requests])
    assert isinstance(batched[4], ActionError) and "beyond the high bound" in str(batched[4])
    for i, (request, pred) in enumerate(zip(requests, batched)):
        if i == 4:
            continue
        single = service.predict(request)
        assert pred.timing["batch_size"] == 9 and pred.info == single.info
        np.testing.assert_allclose(pred.actions, single.actions, rtol=0, atol=1e-5)
        np.testing.assert_allclose(pred.values, single.values, rtol=0, atol=1e-5)
        diff = np.abs(pred.future_observations[CAMERA].astype(int) - single.future_observations[CAMERA].astype(int))
        assert diff.max() <= 1
        if request.candidate_actions is not None:
            np.testing.assert_array_equal(pred.actions, request.candidate_actions)


def test_random_baseline_refuses_candidates():
    service = ModelService(plugin.RANDOM, ModelConfig(platform="pointmass"))
    obs = PointMassEnv().reset(seed=0)
    with pytest.raises(CapabilityError):
        service.predict(PredictRequest(observation=obs, candidate_actions=np.zeros((CHUNK, 2), np.float32)))


# ----------------------------------------------------------------------------- checkpoint pins


def test_shipped_weights_match_their_pin():
    assert sha256_file(shipped_weights()) == SHIPPED_SHA256


def _copy_weights(tmp_path, corrupt: bool):
    path = tmp_path / WEIGHTS_NAME
    shutil.copyfile(shipped_weights(), path)
    if corrupt:
        data = bytearray(path.read_bytes())
        data[-1] ^= 0xFF  # one bit pattern in the last tensor's bytes
        path.write_bytes(bytes(data))
    return path


def test_sha256_mismatch_is_rejected(tmp_path):
    path = _copy_weights(tmp_path, corrupt=True)
    (tmp_path / PINS_NAME).write_text(json.dumps({"pins": {WEIGHTS_NAME: SHIPPED_SHA256}}))
    with pytest.raises(CheckpointError, match="does not match the pinned"):
        load(ModelConfig(platform="pointmass", checkpoint=str(tmp_path)))
    with pytest.raises(CheckpointError, match="does not match the pinned"):
        load(ModelConfig(platform="pointmass", checkpoint=str(path), options={"weights_sha256": SHIPPED_SHA256}))


def test_weights_tampered_after_they_were_verified_are_refused(tmp_path):
    """The bytes that are loaded are the bytes that were hashed: a same-size tamper that
    keeps the mtime, after a first load verified the file, does not load."""
    path = _copy_weights(tmp_path, corrupt=False)
    (tmp_path / PINS_NAME).write_text(json.dumps({"pins": {WEIGHTS_NAME: SHIPPED_SHA256}}))
    assert load(ModelConfig(platform="pointmass", checkpoint=str(tmp_path))).checkpoint == f"sha256:{SHIPPED_SHA256}"
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # a weight, not the header: the file still parses
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(CheckpointError, match="does not match the pinned"):
        load(ModelConfig(platform="pointmass", checkpoint=str(tmp_path)))


def test_unpinned_weights_are_rejected_and_pinned_copies_load(tmp_path):
    corrupt = _copy_weights(tmp_path, corrupt=True)
    with pytest.raises(CheckpointError, match="no sha256 pin"):
        load(ModelConfig(platform="pointmass", checkpoint=str(corrupt)))
    clean_dir = tmp_path / "clean"
    clean_dir.mkdir()
    clean = _copy_weights(clean_dir, corrupt=False)
    assert load(ModelConfig(platform="pointmass", checkpoint=str(clean))).checkpoint == f"sha256:{SHIPPED_SHA256}"
    with pytest.raises(CheckpointError, match="do not exist"):
        load(ModelConfig(platform="pointmass", checkpoint=str(tmp_path / "nothing.safetensors")))


def test_a_file_that_is_not_safetensors_is_a_checkpoint_error(tmp_path):
    path = tmp_path / WEIGHTS_NAME
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="not a readable safetensors"):
        load(ModelConfig(platform="pointmass", checkpoint=str(path), options={"weights_sha256": sha256_file(path)}))


# ----------------------------------------------------------------------------- future frames


def _real_outcome(env, chunk):
    snap = env.snapshot()
    for a in chunk:
        env.step(a)
    frame = env.observe().images[CAMERA].astype(np.float32)
    env.restore(snap)
    return frame


def _sample_states(n, seed=0):
    """Start states plus states after a few random actions, over ``n`` layouts."""
    env = PointMassEnv()
    rng = np.random.default_rng(seed)
    for i in range(n):
        env.reset(seed=500 + i)
        for _ in range(int(rng.integers(0, 12))):
            env.step(rng.uniform(-1, 1, 2))
        yield env


def test_predicted_future_is_closer_to_the_real_future_than_the_current_frame(wam):
    """Over 100 predictions: the mean absolute pixel error of the predicted frame against
    the real frame after executing the predicted chunk, vs. that of the current frame."""
    predicted_err, current_err = [], []
    for env in _sample_states(100):
        obs = env.observe()
        pred = wam.predict(PredictRequest(observation=obs))
        real = _real_outcome(env, pred.actions)
        predicted_err.append(np.abs(pred.future_observations[CAMERA].astype(np.float32) - real).mean())
        current_err.append(np.abs(obs.images[CAMERA].astype(np.float32) - real).mean())
    predicted_err, current_err = np.array(predicted_err), np.array(current_err)
    print(f"mean abs pixel error: predicted {predicted_err.mean():.3f}, current frame {current_err.mean():.3f}")
    assert predicted_err.mean() < 0.5 * current_err.mean()
    assert (predicted_err < current_err).mean() >= 0.9


def test_two_candidate_chunks_give_futures_that_differ_like_the_real_ones(wam):
    rng = np.random.default_rng(3)
    correlations, own_closer = [], []
    for env in _sample_states(40, seed=1):
        obs = env.observe()
        a, b = (np.clip(rng.uniform(-1, 1, 2) + rng.normal(0, 0.2, (CHUNK, 2)), -1, 1).astype(np.float32) for _ in range(2))
        pa = wam.predict(PredictRequest(observation=obs, candidate_actions=a)).future_observations[CAMERA].astype(np.float32)
        pb = wam.predict(PredictRequest(observation=obs, candidate_actions=b)).future_observations[CAMERA].astype(np.float32)
        ra, rb = _real_outcome(env, a), _real_outcome(env, b)
        real_diff, pred_diff = (ra - rb).ravel(), (pa - pb).ravel()
        if np.abs(real_diff).sum() == 0:
            continue  # both chunks end in the same place (e.g. pinned in a corner)
        correlations.append(np.corrcoef(real_diff, pred_diff)[0, 1])
        own_closer.append(np.abs(pa - ra).mean() < np.abs(pa - rb).mean() and np.abs(pb - rb).mean() < np.abs(pb - ra).mean())
    print(f"correlation of predicted and real differences: mean {np.mean(correlations):.3f}; own future closer: {np.mean(own_closer):.2f}")
    assert len(correlations) >= 30
    assert np.mean(correlations) > 0.7
    assert np.mean(own_closer) >= 0.9


def test_value_tracks_reaching_the_target_within_the_chunk(wam):
    """Values are probabilities of success of the returned chunk: check them against outcomes."""
    env = PointMassEnv()
    values, reached = [], []
    for seed in range(60):
        env.reset(seed=700 + seed)
        for _ in range(3):
            pred = wam.predict(PredictRequest(observation=env.observe()))
            hit = any([env.step(a).success for a in pred.actions])  # the whole chunk, as the value assumes
            values.append(float(pred.values[0]))
            reached.append(hit)
            if hit:
                break
    values, reached = np.array(values), np.array(reached)
    brier = np.mean((values - reached) ** 2)
    print(f"value Brier score {brier:.3f} over {len(values)} chunks ({reached.mean():.2f} reached)")
    assert brier < 0.1
    assert values[reached].mean() > values[~reached].mean() + 0.5
