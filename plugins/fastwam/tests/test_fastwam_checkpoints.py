"""Checkpoint and dataset-stats files with their pins, the start-up errors when files or the
upstream packages are missing, and what ``wam doctor`` reports."""

from __future__ import annotations

import json
import subprocess

import pytest
from click.testing import CliRunner

from wamcore import ModelConfig, ModelService, Registry
from wamcore.checkpoints import sha256_file, write_pins
from wamcore.cli import cli
from wamcore.doctor import run_checks
from wamcore.errors import CheckpointError, DependencyNotInstalled

import wam_fastwam.plugin as fastwam_plugin
from wam_fastwam import upstream
from wam_fastwam.checkpoint_files import find_dataset_stats, shipped_pins
from wam_fastwam.plugin import MODEL

LIBERO_PT = "libero_uncond_2cam224.pt"
LIBERO_STATS = "libero_uncond_2cam224_dataset_stats.json"
ROBOTWIN_PT = "robotwin_uncond_3cam_384.pt"
ROBOTWIN_STATS = "robotwin_uncond_3cam_384_dataset_stats.json"


def registry() -> Registry:
    import wam_libero.plugin as libero_plugin
    import wam_robotwin.plugin as robotwin_plugin

    reg = Registry(entry_points=False)
    reg.register(libero_plugin, name="libero")
    reg.register(robotwin_plugin, name="robotwin")
    reg.register(fastwam_plugin, name="fastwam")
    return reg


def pin_file(tmp_path, files: dict) -> str:
    path = tmp_path / "my-pins.json"
    path.write_text(json.dumps({"pins": files, "source": "my download"}))
    return str(path)


# ----------------------------------------------------------------------------- pins and files


def test_shipped_pins_name_the_released_files():
    pins = shipped_pins()
    assert set(pins.files) == {LIBERO_PT, LIBERO_STATS, ROBOTWIN_PT, ROBOTWIN_STATS}
    assert pins.source == "hf://yuanty/fastwam"
    assert all(v is None for v in pins.files.values())  # no published hashes: presence only until pinned


def test_a_user_pin_with_the_right_hash_loads(rlinf_yaml, libero_release, fake_upstream):
    import rlinf.models

    from fastwam_standins import RLinfPolicyStandIn

    rlinf.models.FACTORY = lambda cfg: RLinfPolicyStandIn(chunks=10)
    pins = libero_release.parent / "pins.json"
    write_pins(pins, {LIBERO_PT: libero_release / LIBERO_PT, LIBERO_STATS: libero_release / LIBERO_STATS})
    service = ModelService(MODEL, ModelConfig(platform="libero", checkpoint=str(rlinf_yaml()), options={"am_pins": str(pins)}))
    assert service.info.checkpoint.endswith(LIBERO_PT)


def test_a_hash_mismatch_names_the_file(rlinf_yaml, libero_release, tmp_path):
    pins = pin_file(tmp_path, {LIBERO_STATS: "0" * 64, LIBERO_PT: sha256_file(libero_release / LIBERO_PT)})
    with pytest.raises(CheckpointError) as err:
        ModelService(MODEL, ModelConfig(platform="libero", checkpoint=str(rlinf_yaml()), options={"am_pins": pins}))
    text = str(err.value)
    assert f"{LIBERO_STATS}: sha256 " in text and "does not match the pinned 000" in text
    assert f"{LIBERO_PT}:" not in text
    assert "from my download" in text  # the pin file's source


def test_robotwin_hash_mismatch_names_the_file(robotwin_checkpoint, tmp_path):
    pins = pin_file(tmp_path, {ROBOTWIN_PT: "f" * 64})
    with pytest.raises(CheckpointError, match=f"{ROBOTWIN_PT}: sha256 .* does not match the pinned f{{64}}"):
        ModelService(MODEL, ModelConfig(platform="robotwin", checkpoint=str(robotwin_checkpoint), options={"am_pins": pins}))


def test_stats_are_found_as_rlinf_finds_them(tmp_path):
    ckpt_dir = tmp_path / "runs" / "exp" / "checkpoints"
    ckpt_dir.mkdir(parents=True)
    ckpt = ckpt_dir / "step_1000.pt"
    ckpt.write_bytes(b"w")
    with pytest.raises(CheckpointError, match="no dataset stats found for step_1000.pt.*pass --dataset-stats"):
        find_dataset_stats(ckpt)
    (tmp_path / "runs" / "dataset_stats.json").write_text("{}")
    assert find_dataset_stats(ckpt) == tmp_path / "runs" / "dataset_stats.json"
    (ckpt_dir / "step_1000_dataset_stats.json").write_text("{}")
    assert find_dataset_stats(ckpt) == ckpt_dir / "step_1000_dataset_stats.json"  # the sibling wins
    with pytest.raises(CheckpointError, match="nowhere.json does not exist \\(given explicitly\\)"):
        find_dataset_stats(ckpt, tmp_path / "nowhere.json")  # no silent fallback


def test_libero_dataset_stats_option_replaces_the_yaml_path(rlinf_yaml, libero_release, tmp_path):
    with pytest.raises(CheckpointError, match="other.json does not exist"):
        ModelService(MODEL, ModelConfig(platform="libero", checkpoint=str(rlinf_yaml()),
                                        options={"dataset_stats": str(tmp_path / "other.json")}))


def test_robotwin_checkpoint_missing_or_stats_malformed(robotwin_checkpoint, tmp_path):
    with pytest.raises(CheckpointError, match="needs --am-checkpoint"):
        ModelService(MODEL, ModelConfig(platform="robotwin"))
    with pytest.raises(CheckpointError, match="checkpoint file .*absent.pt does not exist"):
        ModelService(MODEL, ModelConfig(platform="robotwin", checkpoint=str(tmp_path / "absent.pt")))
    (robotwin_checkpoint / ROBOTWIN_STATS).write_text(json.dumps({"state": {"default": {"global_mean": [0] * 7, "global_std": [1] * 7}},
                                                                  "action": {"default": {"global_mean": [0] * 14, "global_std": [1] * 14}}}))
    with pytest.raises(CheckpointError, match=f"{ROBOTWIN_STATS}: state statistics have shapes \\(7,\\)"):
        ModelService(MODEL, ModelConfig(platform="robotwin", checkpoint=str(robotwin_checkpoint)))


# ----------------------------------------------------------------------------- upstream packages


def test_libero_without_rlinf_names_package_revision_and_install(rlinf_yaml):
    if upstream.module_available("rlinf"):
        pytest.skip("RLinf is installed here")
    with pytest.raises(DependencyNotInstalled) as err:
        ModelService(MODEL, ModelConfig(platform="libero", checkpoint=str(rlinf_yaml())))
    text = str(err.value)
    assert text.startswith("rlinf (RLinf at 357f85b) is not installed (needed for Fast-WAM on LIBERO through RLinf)")
    assert "git fetch origin pull/1398/head && git checkout 357f85b && bash requirements/install.sh embodied --model fastwam" in text
    assert "FastWAM 45d8e14" in text


def test_robotwin_without_fastwam_names_package_revision_and_install(robotwin_checkpoint):
    if upstream.module_available("fastwam"):
        pytest.skip("FastWAM is installed here")
    with pytest.raises(DependencyNotInstalled) as err:
        ModelService(MODEL, ModelConfig(platform="robotwin", checkpoint=str(robotwin_checkpoint)))
    text = str(err.value)
    assert text.startswith("fastwam (FastWAM at 45d8e14) is not installed (needed for Fast-WAM on RoboTwin (official FastWAM path))")
    assert "wam upstream install fast-wam" in text


def test_wam_run_reports_the_missing_package_at_start_up(robotwin_checkpoint):
    if upstream.module_available("fastwam"):
        pytest.skip("FastWAM is installed here")
    # the worker's start-up (`wam run` builds the RoboTwin env first, which cannot exist here)
    result = CliRunner().invoke(
        cli, ["serve", "--platform", "robotwin", "--am-backend", "fast-wam", "--am-checkpoint", str(robotwin_checkpoint)],
        obj=registry(),
    )
    assert result.exit_code == 1
    assert "fastwam (FastWAM at 45d8e14) is not installed" in result.output and "Install it with: wam upstream install fast-wam" in result.output


# ----------------------------------------------------------------------------- doctor


def rows(checks, prefix="model fast-wam"):
    return {c.name: c for c in checks if c.name.startswith(prefix)}


def test_doctor_shows_the_pins_and_checks_a_libero_yaml(rlinf_yaml):
    checks = rows(run_checks(registry(), checkpoint=str(rlinf_yaml()), verify_hashes=True, backend="fast-wam"))
    pins = checks["model fast-wam: upstream pins"]
    assert pins.ok and "RLinf 357f85b with FastWAM 45d8e14" in pins.detail and "RoboTwin: FastWAM 45d8e14" in pins.detail
    assert checks["model fast-wam: checkpoint"].ok and "num_action_chunks 10" in checks["model fast-wam: checkpoint"].detail
    unpinned = checks["model fast-wam: checkpoint pins"]
    assert unpinned.level == "warning" and LIBERO_PT in unpinned.detail and "write_pins('fastwam-pins.json'" in unpinned.fix
    for req in ("rlinf", "fastwam", "torch"):
        assert f"model fast-wam: {req}" in checks


def test_doctor_needs_rlinf_only_for_a_libero_deployment(rlinf_yaml, robotwin_checkpoint):
    if upstream.module_available("rlinf"):
        pytest.skip("RLinf is installed here")
    libero = rows(run_checks(registry(), checkpoint=str(rlinf_yaml()), backend="fast-wam"))["model fast-wam: rlinf"]
    assert not libero.ok and libero.level == "error" and "git checkout 357f85b" in libero.fix
    robotwin = rows(run_checks(registry(), checkpoint=str(robotwin_checkpoint), backend="fast-wam"))["model fast-wam: rlinf"]
    assert robotwin.level == "warning" and "needed on LIBERO, not on RoboTwin" in robotwin.detail


def test_doctor_reports_an_old_schema_yaml_with_its_migration(write_yaml):
    path = write_yaml({"execute_steps": 8, "inference_options": {"num_inference_steps": 5}})
    check = rows(run_checks(registry(), checkpoint=str(path)))["model fast-wam: checkpoint"]
    assert not check.ok and "execute_steps: 8 is now num_action_chunks: 8" in check.detail


def test_doctor_checks_a_robotwin_checkpoint(robotwin_checkpoint):
    check = rows(run_checks(registry(), checkpoint=str(robotwin_checkpoint)))["model fast-wam: checkpoint"]
    assert check.ok and ROBOTWIN_PT in check.detail and ROBOTWIN_STATS in check.detail


def test_doctor_compares_the_installed_revision_with_the_pin(fake_upstream):
    git = ["git", "-C", str(fake_upstream), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "stand-in"], check=True)
    head = subprocess.run(git + ["rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    checks = rows(run_checks(registry(), backend="fast-wam"))
    for name, pinned in (("RLinf", "357f85b"), ("FastWAM", "45d8e14")):
        row = checks[f"model fast-wam: {name} revision"]
        assert not row.ok and row.level == "warning"
        assert row.detail == f"installed at {head[:9]}, pinned {pinned}" and pinned in row.fix


def test_wam_doctor_cli_lists_the_pins():
    result = CliRunner().invoke(cli, ["doctor", "--am-backend", "fast-wam"], obj=registry())
    assert "[ok  ] model fast-wam: upstream pins: LIBERO: RLinf 357f85b with FastWAM 45d8e14" in result.output
