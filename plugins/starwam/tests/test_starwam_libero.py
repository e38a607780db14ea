"""The LIBERO adapter and worker against StarWAM's own ``examples/libero/rollout.py``, value by
value: what reaches ``infer_action`` must equal what rollout's ``_predict_action_chunk`` builds
from robosuite's raw observation, and the executed actions what its ``_denormalize_action``
returns. ``infer_action`` itself is a stand-in here (the real network runs in
test_starwam_real_upstream.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from wamcore import LocalModel, ModelConfig, ModelService, Observation, PredictRequest
from wamcore.errors import CheckpointError, ConfigurationError
from wamcore.testing import check_model_adapter
from wam_libero.plugin import LIBERO_PLATFORM
from wam_libero.suites import NOOP_ACTION

import wam_starwam.libero as libero
import wam_starwam.worker as worker
from starwam_standins import InferActionStandIn, normalized_chunk
from wam_starwam.normalization import Stats, load_stats
from wam_starwam.plugin import MODEL
from wam_starwam.settings import Settings
from wam_starwam.testweights import random_stats

TASK = "put the bowl on the plate"
STATS = random_stats("libero", seed=7)
STATS["action"]["min"][6], STATS["action"]["max"][6] = -1.0, 1.0  # LIBERO's gripper range


def observation(seed=0, quat=(0.1, -0.7, 0.2, 0.68)) -> Observation:
    """A physical LIBERO observation (images flipped vertically once, as wam_libero makes them)."""
    rng = np.random.default_rng(seed)
    return Observation(
        images={"primary": rng.integers(0, 256, (256, 256, 3), dtype=np.uint8),
                "wrist": rng.integers(0, 256, (256, 256, 3), dtype=np.uint8)},
        state={"eef_position": np.array([-0.21, 0.03, 1.17]), "eef_quaternion_xyzw": np.array(quat),
               "gripper_qpos": np.array([0.038, -0.039])},
        instruction=TASK,
    )


def raw(obs: Observation) -> dict:
    """robosuite's observation of the same moment (bottom-up renders)."""
    return {"agentview_image": obs.images["primary"][::-1], "robot0_eye_in_hand_image": obs.images["wrist"][::-1],
            "robot0_eef_pos": obs.state["eef_position"], "robot0_eef_quat": obs.state["eef_quaternion_xyzw"],
            "robot0_gripper_qpos": obs.state["gripper_qpos"]}


@pytest.fixture
def deployment(tmp_path, libero_recipe, rollout):
    """(upstream cfg with this deployment's files, our stats, a text cache holding TASK)."""
    from starwam.data.lerobot import save_text_cache
    from starwam.utils.config_cli import apply_overrides

    stats_path = tmp_path / "action_stats.json"
    stats_path.write_text(json.dumps(STATS))
    cache = tmp_path / "text_cache"

    def make(family="mot", stats=None):
        if stats is not None:
            stats_path.write_text(json.dumps(stats))
        cfg = apply_overrides(libero_recipe(family), [f"data.action_stats_path={stats_path}",
                                                      f"data.state_stats_path={stats_path}",
                                                      f"data.text_embedding_cache_dir={cache}", "data.dataset_dirs=[]"])
        return cfg, load_stats(stats_path, "libero", action_dim=7, state_dim=8)

    gen = torch.Generator().manual_seed(3)
    prompt = libero_recipe().data.text_prompt_template.format(task=TASK)
    save_text_cache(rollout.text_cache_path(cache, TASK, 128, libero_recipe().data.text_prompt_template, "wan22ti2v5b"),
                    torch.randn(17, 4096, generator=gen), torch.ones(17, dtype=torch.bool), prompt, TASK)
    return make, cache


def model(cfg, stats, cache, family="mot", standin=None, **options):
    settings = Settings.from_options("libero", {"checkpoint_family": family, "text_cache": str(cache), **options})
    text = worker.TextConditioning(settings, cache, 4096, torch.device("cpu"), torch.float32)
    standin = standin or InferActionStandIn()
    return worker.LiberoModel(standin, cfg, settings, stats, text, torch.device("cpu"), torch.float32), standin


def predict(native, family="mot", seed=None, obs=None, **options):
    config = ModelConfig(platform="libero", options={"checkpoint_family": family, **options})
    client = LocalModel(ModelService(MODEL, config, native=native)).bind(LIBERO_PLATFORM)
    return client.predict(PredictRequest(observation=obs or observation(), seed=seed))


def assert_matches_rollout(rollout, cfg, obs, call, actions, replan=10):
    """Everything ``_predict_action_chunk`` would hand ``infer_action`` and execute, compared."""
    device = torch.device("cpu")
    image, _ = rollout._obs_to_image(raw(obs), cfg)
    assert torch.equal(call["input_image"], image), "image differs from rollout._obs_to_image"
    state = rollout._normalize_state(rollout._extract_proprio(raw(obs), 8), cfg, rollout._load_state_stats(cfg))
    assert torch.equal(call["proprio"], state), "proprio differs from rollout._extract_proprio + _normalize_state"
    context, mask = rollout._load_context(obs.instruction, cfg, {}, object(), device, torch.float32)
    assert torch.equal(call["context"], context) and torch.equal(call["context_mask"], mask), "text context differs"
    assert call["num_video_frames"] == rollout._sampled_video_frame_count(cfg) == 9
    assert call["action_horizon"] == cfg.framework.chunk_size == 32
    expected = rollout._denormalize_action(torch.from_numpy(normalized_chunk(7))[None], cfg, rollout._load_action_stats(cfg))
    np.testing.assert_array_equal(actions, expected[:replan], err_msg="actions differ from rollout._denormalize_action")


@pytest.mark.parametrize("family", ["mot", "shared-dit", "feature-conditioned"])
def test_inputs_and_actions_equal_rollouts_value_by_value(deployment, rollout, family):
    make, cache = deployment
    cfg, stats = make(family)
    native, standin = model(cfg, stats, cache, family)
    obs = observation()
    pred = predict(native, family, seed=5, obs=obs)
    (call,) = standin.calls
    assert_matches_rollout(rollout, cfg, obs, call, pred.actions)
    assert call["num_inference_steps"] == {"mot": 8, "shared-dit": 16, "feature-conditioned": 10}[family]
    assert call.get("action_num_inference_steps") == (16 if family == "shared-dit" else None)
    assert tuple(call["input_image"].shape[-2:]) == {"shared-dit": (160, 320)}.get(family, (224, 448))


@pytest.mark.parametrize("quat", [(0.0, 0.0, 0.0, 1.0), (0.3, 0.1, -0.2, -0.92), (1.0, 0.0, 0.0, 0.0), (0.5, 0.5, 0.5, 0.5)])
def test_axis_angle_is_rollouts_float32_convention(rollout, quat):
    """No sign canonicalisation (w < 0 gives an angle above pi), zero only at w = +-1 exactly."""
    np.testing.assert_array_equal(libero.quat2axisangle(quat), rollout._quat2axisangle(np.asarray(quat)))
    assert libero.quat2axisangle(quat).dtype == np.float32


def _mutated(monkeypatch, name):
    if name == "no 180-degree rotation":
        monkeypatch.setattr(libero, "compose", lambda p, w, size: np.concatenate(
            [libero.resize(np.ascontiguousarray(p), size), libero.resize(np.ascontiguousarray(w), size)], axis=1))
    elif name == "cameras swapped":
        original = libero.compose
        monkeypatch.setattr(libero, "compose", lambda p, w, size: original(w, p, size))
    elif name == "proprio order":
        monkeypatch.setattr(libero, "proprio", lambda s: np.concatenate(
            [np.asarray(s["gripper_qpos"], np.float32), np.asarray(s["eef_position"], np.float32),
             libero.quat2axisangle(s["eef_quaternion_xyzw"])]))
    elif name == "gripper inverted":
        monkeypatch.setattr(worker, "gripper_to_libero", lambda a: -libero.gripper_to_libero(a))
    elif name == "state stats used for actions":
        def restore(self, y):
            lo, hi = self.state["min"][:7], self.state["max"][:7]
            return ((np.clip(y, -1, 1) + 1) * 0.5 * (hi - lo) + lo).astype(np.float32)

        monkeypatch.setattr(Stats, "restore_action_minmax", restore)


@pytest.mark.parametrize("mutation", ["no 180-degree rotation", "cameras swapped", "proprio order", "gripper inverted",
                                      "state stats used for actions"])
def test_each_convention_mistake_is_caught(deployment, rollout, monkeypatch, mutation):
    make, cache = deployment
    cfg, stats = make()
    _mutated(monkeypatch, mutation)
    native, standin = model(cfg, stats, cache)
    obs = observation()
    pred = predict(native, obs=obs)
    with pytest.raises(AssertionError):
        assert_matches_rollout(rollout, cfg, obs, standin.calls[0], pred.actions)


def test_a_state_beyond_the_clamp_is_clamped_as_rollout(deployment, rollout):
    """A state far outside the statistics normalises beyond +-5: rollout clamps it there."""
    make, cache = deployment
    cfg, stats = make()
    native, standin = model(cfg, stats, cache)
    far = observation()
    far = Observation(images=far.images, instruction=far.instruction,
                      state={**far.state, "eef_position": np.array([40.0, -40.0, 1.17])})
    pred = predict(native, obs=far)
    (call,) = standin.calls
    proprio = call["proprio"].flatten()
    assert proprio[0].item() == 5.0 and proprio[1].item() == -5.0  # clamped, not 2 (x - min) / (max - min) - 1
    assert_matches_rollout(rollout, cfg, far, call, pred.actions)


def test_longer_state_statistics_are_sliced_as_rollout(deployment, rollout, tmp_path):
    """``rollout._stat_tensor`` uses the first 8 of longer state statistics; fewer is an error."""
    make, cache = deployment
    longer = json.loads(json.dumps(STATS))
    for key in ("min", "max", "mean", "std", "count"):
        longer["state"][key] = longer["state"][key] + [-9.0, 9.0]
    cfg, stats = make(stats=longer)
    assert stats.state["min"].shape == (8,) and np.array_equal(stats.state["min"], np.float32(STATS["state"]["min"]))
    native, standin = model(cfg, stats, cache)
    obs = observation()
    pred = predict(native, obs=obs)
    assert_matches_rollout(rollout, cfg, obs, standin.calls[0], pred.actions)
    shorter = json.loads(json.dumps(STATS))
    shorter["state"]["max"] = shorter["state"]["max"][:7]
    path = tmp_path / "short.json"
    path.write_text(json.dumps(shorter))
    with pytest.raises(CheckpointError, match="state.max has 7 values, fewer than the 8 of the libero proprio"):
        load_stats(path, "libero", action_dim=7, state_dim=8)
    longer_actions = json.loads(json.dumps(STATS))
    longer_actions["action"]["max"] = longer_actions["action"]["max"] + [1.0]
    path.write_text(json.dumps(longer_actions))
    with pytest.raises(CheckpointError, match="action.max has shape \\(8,\\), expected \\(7,\\)"):
        load_stats(path, "libero", action_dim=7, state_dim=8)


def test_gripper_maps_starwam_open_to_libero_open(deployment):
    """> 0.5 in StarWAM's restored scale is open (-1 in LIBERO), else close (+1), as rollout."""
    make, cache = deployment
    cfg, stats = make()
    native, _ = model(cfg, stats, cache, replan_steps=32)
    restored = stats.restore_action_minmax(normalized_chunk(7))
    pred = predict(native, replan_steps=32)
    np.testing.assert_array_equal(pred.actions[:, 6], np.where(restored[:, 6] > 0.5, -1.0, 1.0))
    assert set(np.unique(pred.actions[:, 6])) == {-1.0, 1.0}


def test_seeds_follow_rollout(deployment):
    """The episode's seed for every chunk of it; --noise-seed (42) without one; --fixed-seed always."""
    make, cache = deployment
    cfg, stats = make()
    native, standin = model(cfg, stats, cache)
    predict(native, seed=7)
    predict(native, seed=None)
    fixed, fixed_standin = model(cfg, stats, cache, fixed_seed=True, noise_seed=3)
    predict(fixed, seed=7, fixed_seed=True, noise_seed=3)
    assert [c["seed"] for c in standin.calls] == [7, 42] and fixed_standin.calls[0]["seed"] == 3


def test_wait_steps_are_rollouts_dummy_action(rollout):
    """wam_libero's --settle-steps run StarWAM's LIBERO_DUMMY_ACTION (30 of them in the reported runs)."""
    assert tuple(rollout.LIBERO_DUMMY_ACTION) == libero.DUMMY_ACTION == tuple(NOOP_ACTION)


def test_missing_text_entry_without_encoder_is_a_typed_error(deployment):
    make, cache = deployment
    cfg, stats = make()
    native, standin = model(cfg, stats, cache)
    with pytest.raises(CheckpointError) as err:
        predict(native, obs=observation().replace(instruction="open the drawer"))
    message = str(err.value)
    assert "open the drawer" in message and "models_t5_umt5-xxl-enc-bf16.pth" in message
    assert "precompute_text_cache" in message and standin.calls == []


def test_tampered_text_entry_is_refused_without_running_it(deployment, tmp_path):
    import os

    make, cache = deployment
    cfg, stats = make()
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.makedirs, (str(marker),))

    entry = next(cache.glob("*.pt"))
    torch.save({"context": torch.zeros(3, 4096), "mask": torch.ones(3, dtype=torch.bool), "prompt": Payload()}, entry)
    native, _ = model(cfg, stats, cache)
    with pytest.raises(CheckpointError, match="not a plain tensor file"):
        predict(native)
    assert not marker.exists()


def test_recipe_of_another_family_is_refused(libero_recipe):
    settings = Settings.from_options("libero", {"checkpoint_family": "shared-dit"})
    with pytest.raises(ConfigurationError, match="video_size"):
        worker._check_recipe(libero_recipe("mot"), settings, "mot.yaml")


def test_conformance_kit(deployment):
    make, cache = deployment
    cfg, stats = make()
    native, _ = model(cfg, stats, cache)
    report = check_model_adapter(MODEL, LIBERO_PLATFORM, native=native,
                                 config=ModelConfig(platform="libero", options={"text_cache": str(cache)}),
                                 observation=observation())
    assert report["actions"] == (10, 7) and "missing camera" in report["rejected"]
