"""The command line: ``wam run`` fails at start-up with what to do, ``wam doctor`` reports
the upstream package, torch/CUDA and the checkpoint, ``wam cosmos-policy-pin`` pins a download."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from wamcore.cli import cli
from wamcore.doctor import run_checks
from wamcore.registry import Registry

import wam_cosmos_policy.plugin
import wam_libero.plugin
from wam_cosmos_policy import checkpoint, doctor, upstream


@pytest.fixture
def registry():
    reg = Registry(entry_points=False)
    reg.register(wam_libero.plugin, name="libero")
    reg.register(wam_cosmos_policy.plugin, name="cosmos_policy")
    reg.add_commands(cli)
    return reg


def _wam(registry, *args):
    return CliRunner().invoke(cli, list(args), obj=registry, catch_exceptions=False)


def test_alias_cosmos_names_the_same_model(registry):
    assert registry.model("cosmos") is registry.model("cosmos-policy")
    assert "cosmos-policy" in registry.models_for("libero") and "cosmos" not in registry.models_for("libero")


def test_wam_run_without_upstream_fails_at_start_up_naming_package_version_and_install(
    registry, no_upstream, checkpoint_dir
):
    result = _wam(registry, "run", "--platform", "libero", "--am-backend", "cosmos-policy", "--am-checkpoint", str(checkpoint_dir))
    assert result.exit_code == 1
    assert "cosmos-policy 1.0.0" in result.output and upstream.REVISION in result.output
    assert "uv sync --extra cu128 --group libero --python 3.10" in result.output
    assert "Traceback" not in result.output


def test_wam_run_with_a_wrong_hash_names_the_file(registry, tmp_path, checkpoint_dir):
    pins = tmp_path / "pins.json"
    assert _wam(registry, "cosmos-policy-pin", str(checkpoint_dir), "-o", str(pins)).exit_code == 0
    stats = checkpoint_dir / checkpoint.DATASET_STATISTICS_FILE
    stats.write_text(stats.read_text().replace("0.9375", "0.9376", 1))
    result = _wam(registry, "run", "--platform", "libero", "--am-backend", "cosmos", "--am-checkpoint", str(checkpoint_dir),
                  "--am-pins", str(pins))
    assert result.exit_code == 1
    assert f"{checkpoint.DATASET_STATISTICS_FILE}: sha256" in result.output
    assert checkpoint.CHECKPOINT_FILE + ": sha256" not in result.output


def test_pin_command_writes_a_pin_file_of_the_three_files(registry, tmp_path, checkpoint_dir):
    out = tmp_path / "pins.json"
    result = _wam(registry, "cosmos-policy-pin", str(checkpoint_dir), "-o", str(out), "--source", "hf://x@rev")
    assert result.exit_code == 0
    data = json.loads(out.read_text())
    assert set(data["pins"]) == set(checkpoint.shipped_pins().files) and data["source"] == "hf://x@rev"
    assert all(len(h) == 64 for h in data["pins"].values())
    (checkpoint_dir / checkpoint.T5_EMBEDDINGS_FILE).unlink()
    result = CliRunner().invoke(cli, ["cosmos-policy-pin", str(checkpoint_dir), "-o", str(out)], obj=registry)
    assert result.exit_code != 0 and checkpoint.T5_EMBEDDINGS_FILE in result.output


def test_backend_options_show_in_help(registry):
    result = _wam(registry, "run", "--platform", "libero", "--am-backend", "cosmos-policy", "--help")
    for flag in ("--denoising-steps", "--sampling-seed", "--deterministic", "--cached-instructions-only", "--am-pins"):
        assert flag in result.output


def test_doctor_reports_upstream_with_provisioning_and_the_checkpoint(registry, no_upstream, checkpoint_dir):
    result = _wam(registry, "doctor", "--am-backend", "cosmos-policy", "--am-checkpoint", str(checkpoint_dir))
    assert result.exit_code == 1  # strict for the named backend: the upstream package is missing
    line = next(l for l in result.output.splitlines() if "model cosmos-policy: cosmos_policy" in l)
    assert line.startswith("[FAIL]") and "cosmos-policy 1.0.0" in line
    assert "uv sync --extra cu128 --group libero --python 3.10" in result.output
    assert "--am-python" in result.output
    checkpoint_line = next(l for l in result.output.splitlines() if "model cosmos-policy: checkpoint" in l)
    assert checkpoint_line.startswith("[ok  ]") and "no sha256 pinned" in checkpoint_line


def test_doctor_names_a_file_whose_hash_differs(registry, tmp_path, monkeypatch, checkpoint_dir):
    pins = tmp_path / "pins.json"
    pins.write_text(json.dumps({"pins": {checkpoint.CHECKPOINT_FILE: "1" * 64}}))
    monkeypatch.setenv("WAM_COSMOS_POLICY_PINS", str(pins))
    checks = run_checks(registry, checkpoint=str(checkpoint_dir), verify_hashes=True, backend="cosmos-policy")
    (row,) = [c for c in checks if c.name.startswith("model cosmos-policy: checkpoint")]
    assert not row.ok and row.level == "error" and checkpoint.CHECKPOINT_FILE in row.detail
    checks = run_checks(registry, checkpoint=str(checkpoint_dir), verify_hashes=False, backend="cosmos-policy")
    (row,) = [c for c in checks if c.name.startswith("model cosmos-policy: checkpoint")]
    assert row.ok and "hashes not checked" in row.detail


def test_doctor_without_a_checkpoint_says_what_to_download(registry):
    checks = run_checks(registry, backend="cosmos-policy")
    (row,) = [c for c in checks if c.name == "model cosmos-policy: checkpoint"]
    assert not row.ok and row.level == "warning" and "nvidia/Cosmos-Policy-LIBERO-Predict2-2B" in row.fix


def test_doctor_reads_torch_cuda_build_without_importing_torch():
    import torch

    assert doctor.torch_cuda_build() == torch.version.cuda
