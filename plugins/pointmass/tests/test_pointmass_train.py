"""The training script on small data: it runs, learns, is reproducible, and writes a
checkpoint that wamcore loads through its pin (the full retrain is not a test: see
docs/models/pointmass-wam.md for its figures)."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from wamcore import ModelConfig, PredictRequest  # noqa: E402
from wamcore.checkpoints import sha256_file  # noqa: E402

from wam_pointmass.checkpoint import PINS_NAME, WEIGHTS_NAME  # noqa: E402
from wam_pointmass.data import collect  # noqa: E402
from wam_pointmass.env import PointMassEnv  # noqa: E402
from wam_pointmass.expert import expert_chunk  # noqa: E402
from wam_pointmass.model import load  # noqa: E402
from wam_pointmass.train import TrainConfig, main, train  # noqa: E402


@pytest.fixture(scope="module")
def demos():
    return collect(6, seed=3)


def test_demonstrations_are_consistent(demos):
    n = len(demos)
    assert n > 20
    assert demos.images.shape == (n, 64, 64, 3) and demos.future_images.shape == (n, 64, 64, 3)
    assert demos.expert.shape == demos.chunks.shape == (n, 8, 2)
    assert np.abs(demos.expert).max() <= 1.0 and np.abs(demos.chunks).max() <= 1.0
    assert set(np.unique(demos.reached)) <= {0.0, 1.0}
    # the first sample of the first episode: its expert chunk is the expert's plan from reset
    env = PointMassEnv()
    env.reset(seed=1_000_000 * 4)
    np.testing.assert_array_equal(demos.images[0], env.observe().images["primary"])
    np.testing.assert_array_equal(demos.expert[0], expert_chunk(env, 8))


def test_short_training_reduces_the_losses_and_is_reproducible(demos):
    cfg = TrainConfig(steps=40, batch_size=16, warmup=5, render_batch=4)
    log = []
    net = train(cfg, demos, log=log.append)
    first = dict(_pairs(log[1]))
    last = dict(_pairs(log[-1]))
    assert float(last["bc"]) < float(first["bc"]) and float(last["total"]) < float(first["total"])
    again = train(cfg, demos, log=lambda m: None)
    for (name, a), (_, b) in zip(net.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), name


def _pairs(line: str):
    words = line.split(": ", 1)[1].split()
    return list(zip(words[::2], words[1::2]))


def test_the_script_writes_pinned_weights_that_load(tmp_path, capsys):
    assert main(["--out", str(tmp_path), "--episodes", "4", "--steps", "10", "--batch-size", "8",
                 "--render-batch", "2", "--eval-episodes", "2"]) == 0
    out = capsys.readouterr().out
    assert "step 10/10" in out and "success rate" in out
    weights = tmp_path / WEIGHTS_NAME
    pins = json.loads((tmp_path / PINS_NAME).read_text())
    assert pins["pins"][WEIGHTS_NAME] == sha256_file(weights)
    model = load(ModelConfig(platform="pointmass", checkpoint=str(tmp_path)))
    assert model.checkpoint == f"sha256:{sha256_file(weights)}"
    assert model.details["trained"]["steps"] == 10
    from wam_pointmass.adapter import encode

    obs = PointMassEnv().reset(seed=0)
    native = model.predict_native(encode(PredictRequest(observation=obs)), PredictRequest(observation=obs))
    assert native["actions"].shape == (8, 2) and native["future"].shape == (64, 64, 3)


def test_saved_weights_are_byte_reproducible(tmp_path):
    """Same tensors, same file: the metadata must not depend on hash-map order."""
    from wam_pointmass.model import load_network, save_weights
    from wam_pointmass.checkpoint import shipped_weights

    net, about = load_network(shipped_weights())
    digests = set()
    for i in range(4):
        save_weights(net, tmp_path / f"{i}.safetensors", about["training"])
        digests.add(sha256_file(tmp_path / f"{i}.safetensors"))
    assert digests == {sha256_file(shipped_weights())}


def test_the_pit_family_script_trains_a_route_model_that_samples_and_values(tmp_path, capsys):
    from wam_pointmass.data import collect_routes
    from wam_pointmass.train import PitTrainConfig

    demos = collect_routes(5, seed=2)
    n = len(demos)
    assert demos.trajectories.shape == (n, 8, 4) and demos.expert.shape == (n, 8, 2)
    assert ((demos.values >= 0) & (demos.values <= 1)).all() and np.abs(demos.routes).max() <= 1
    cfg = PitTrainConfig(steps=20, batch_size=16, warmup=5, render_batch=4)
    net, again = train(cfg, demos, log=lambda m: None), train(cfg, demos, log=lambda m: None)
    for (name, a), (_, b) in zip(net.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), name
    assert main(["--family", "pit", "--out", str(tmp_path), "--episodes", "4", "--steps", "10", "--batch-size", "8",
                 "--render-batch", "2", "--eval-episodes", "2"]) == 0
    assert "step 10/10" in capsys.readouterr().out
    model = load(ModelConfig(platform="pointmass", checkpoint=str(tmp_path)))
    assert model.details["trained"]["family"] == "pit" and model.net.latent == 1 and model.net.trajectory


def test_the_reach_rtc_script_trains_a_model_that_declares_and_honours_a_prefix(tmp_path, capsys):
    """``--family reach-rtc``: prefixed demonstrations (the rest of the data unchanged), a
    prefix loss that falls, and weights whose header makes the model declare action_prefix."""
    from wamcore import ModelService, Registry
    from wam_pointmass import plugin
    from wam_pointmass.data import prefixed_chunk

    plain, prefixed = collect(3, seed=5), collect(3, seed=5, prefixes=True)
    np.testing.assert_array_equal(plain.expert, prefixed.expert)
    np.testing.assert_array_equal(plain.chunks, prefixed.chunks)
    assert plain.prefixed is None and set(np.unique(prefixed.prefix_steps)) <= set(range(8))
    zero = prefixed.prefix_steps == 0
    np.testing.assert_array_equal(prefixed.prefixed[zero], prefixed.expert[zero])  # no prefix: the expert's plan
    env = PointMassEnv()
    env.reset(seed=1_000_000 * 6)  # the first state of the first episode
    d = int(prefixed.prefix_steps[0])
    np.testing.assert_array_equal(prefixed.prefixed[0], prefixed_chunk(env, prefixed.prefixed[0][:d], 8))

    assert main(["--family", "reach-rtc", "--out", str(tmp_path), "--episodes", "4", "--steps", "20",
                 "--batch-size", "16", "--render-batch", "2", "--eval-episodes", "0"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if " step " in line]
    assert float(dict(_pairs(lines[-1]))["prefix"]) < float(dict(_pairs(lines[0]))["prefix"])
    registry = Registry(entry_points=False)
    registry.register(plugin, name="pointmass")
    service = ModelService(plugin.POINTMASS_WAM, ModelConfig(platform="pointmass", checkpoint=str(tmp_path)),
                           platform=registry.platform("pointmass"))
    assert service.info.capabilities.action_prefix
    obs = PointMassEnv().reset(seed=0)
    prefix = np.array([[0.3, -0.2], [0.1, 0.9]], np.float32)
    chunk = service.predict(PredictRequest(observation=obs, action_prefix=prefix)).actions
    np.testing.assert_array_equal(chunk[:2], prefix)
