"""Start-up and ``wam`` commands: files, pins, stats, safe loading, doctor, and what a user
without the upstream package or the weights is told."""

from __future__ import annotations

import json
import os

import pytest
import torch
from click.testing import CliRunner

from wamcore.cli import cli
from wamcore.doctor import run_checks
from wamcore.errors import CheckpointError, DependencyNotInstalled
from wamcore.registry import Registry
from wamcore.specs import ModelConfig

import wam_libero.plugin
import wam_starwam.plugin
from wam_starwam import checkpoint, upstream
from wam_starwam.families import family
from wam_starwam.normalization import load_stats
from wam_starwam.testweights import random_stats
from wam_starwam.worker import load

MOT = family("mot", "libero")


@pytest.fixture
def release(tmp_path):
    """A ModelScope download laid out as released (placeholder weights) and a backbone folder."""
    root = tmp_path / "starwam"
    for rel in (MOT.release, family("mot", "robotwin").release):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        torch.save({"model_state_dict": {"w": torch.zeros(2)}}, root / rel)
    (root / MOT.release_stats).write_text(json.dumps(random_stats("libero", 0)))
    backbone = tmp_path / "Wan2.2-TI2V-5B"
    (backbone / "google" / "umt5-xxl").mkdir(parents=True)
    for name in ("Wan2.2_VAE.pth", "models_t5_umt5-xxl-enc-bf16.pth"):
        (backbone / name).write_bytes(b"placeholder")
    return root, backbone


def test_release_layout_resolves_to_the_familys_files(release):
    root, backbone = release
    files = checkpoint.resolve(str(root), MOT, backbone=str(backbone), action_stats=None, text_cache=None)
    assert files.checkpoint == (root / MOT.release,) and files.stats == root / MOT.release_stats
    assert set(files.names) == {MOT.release, MOT.release_stats, "Wan2.2_VAE.pth", "models_t5_umt5-xxl-enc-bf16.pth"}
    assert set(files.names) <= set(checkpoint.shipped_pins().files)  # every release file has a (presence) pin


def test_missing_files_are_named_with_their_download(release):
    root, backbone = release
    (backbone / "models_t5_umt5-xxl-enc-bf16.pth").unlink()
    with pytest.raises(CheckpointError) as err:
        checkpoint.resolve(str(root), MOT, backbone=str(backbone), action_stats=None, text_cache=None)
    assert "models_t5_umt5-xxl-enc-bf16.pth" in str(err.value) and upstream.BACKBONE_DOWNLOAD in str(err.value)
    # with a text cache the T5 is optional
    checkpoint.resolve(str(root), MOT, backbone=str(backbone), action_stats=None, text_cache=str(root))
    with pytest.raises(CheckpointError, match="wam weights pull starwam starwam-libero-mot"):
        checkpoint.resolve(str(root / "nowhere"), MOT, backbone=str(backbone), action_stats=None, text_cache=None)


def test_a_pinned_hash_that_differs_names_the_file(release, tmp_path):
    root, backbone = release
    files = checkpoint.resolve(str(root), MOT, backbone=str(backbone), action_stats=None, text_cache=None)
    pins = tmp_path / "pins.json"
    pins.write_text(json.dumps({"pins": {MOT.release_stats: "0" * 64}}))
    with pytest.raises(CheckpointError) as err:
        checkpoint.verify(files, checkpoint.pins(str(pins)))
    assert MOT.release_stats in str(err.value) and MOT.release not in str(err.value).replace(MOT.release_stats, "")


def test_a_checkpoint_that_would_run_code_is_refused(tmp_path):
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.makedirs, (str(marker),))

    path = tmp_path / "evil.pt"
    torch.save({"model_state_dict": {"w": torch.zeros(1)}, "meta": Payload()}, path)
    with pytest.raises(CheckpointError, match="not a plain tensor file"):
        checkpoint.load_state((path,))
    assert not marker.exists()


def test_prefixes_are_stripped_as_upstream(rollout):
    state = {"module.model.a": 1, "_orig_mod.b": 2, "c": 3}
    assert checkpoint.strip_prefixes(state) == rollout._strip_known_prefixes(state) == {"a": 1, "b": 2, "c": 3}


@pytest.mark.parametrize("change, problem", [
    (lambda s: s["state"].pop("min"), "state.min is missing"),
    (lambda s: s["action"].update(max=[1.0] * 6), "action.max has shape (6,)"),
    (lambda s: s["action"].update(min=[2.0] * 7), "action.max is below action.min"),
])
def test_unusable_stats_are_named(tmp_path, change, problem):
    stats = random_stats("libero", 0)
    change(stats)
    path = tmp_path / "action_stats.json"
    path.write_text(json.dumps(stats))
    with pytest.raises(CheckpointError) as err:
        load_stats(path, "libero", action_dim=7, state_dim=8)
    assert problem in str(err.value) and str(path) in str(err.value)


@pytest.fixture
def registry():
    reg = Registry(entry_points=False)
    reg.register(wam_libero.plugin, name="libero")
    reg.register(wam_starwam.plugin, name="starwam")
    reg.add_commands(cli)
    return reg


@pytest.fixture
def no_upstream(monkeypatch):
    real = upstream.module_available
    monkeypatch.setattr(upstream, "module_available", lambda m: False if m.split(".")[0] == "starwam" else real(m))


def test_wam_plugins_lists_both_platforms(registry):
    out = CliRunner().invoke(cli, ["plugins"], obj=registry, catch_exceptions=False).output
    assert "starwam -> libero, robotwin" in out


def test_wam_run_without_upstream_or_weights_prints_install_and_download(registry, no_upstream):
    result = CliRunner().invoke(cli, ["run", "--platform", "libero", "--am-backend", "starwam"], obj=registry,
                                catch_exceptions=False)
    assert result.exit_code == 1
    assert upstream.INSTALL in result.output and upstream.DOWNLOAD in result.output
    assert "Traceback" not in result.output


def test_load_without_upstream_names_the_pinned_revision(no_upstream, release):
    root, backbone = release
    with pytest.raises(DependencyNotInstalled) as err:
        load(ModelConfig(platform="libero", checkpoint=str(root), options={"backbone": str(backbone),
                                                                             "action_stats": str(root / MOT.release_stats)}))
    assert upstream.ROBOTWIN_REVISION[:7] in str(err.value) and "wam upstream install starwam" in str(err.value)


def test_doctor_checks_every_file_and_asks_for_pins(release):
    root, backbone = release
    checks = run_checks(Registry(entry_points=False), checkpoint=str(root), backend="starwam",
                        extra={"backbone": str(backbone)})
    rows = {c.name: c for c in wam_starwam.plugin.doctor_checks(
        {"checkpoint": str(root), "backend": "starwam", "backbone": str(backbone), "verify_hashes": True})}
    assert rows["model starwam: checkpoint"].ok and MOT.release in rows["model starwam: checkpoint"].detail
    assert not rows["model starwam: pins"].ok and "write_pins" in rows["model starwam: pins"].fix
    (backbone / "Wan2.2_VAE.pth").unlink()
    rows = {c.name: c for c in wam_starwam.plugin.doctor_checks(
        {"checkpoint": str(root), "backend": "starwam", "backbone": str(backbone)})}
    assert not rows["model starwam: checkpoint"].ok and "Wan2.2_VAE.pth" in rows["model starwam: checkpoint"].detail
    assert checks  # the core report runs with the plugin's rows
