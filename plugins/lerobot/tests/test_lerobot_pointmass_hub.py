"""A LeRobot ACT policy for PointMass (random weights, LeRobot's format) served from a Hugging
Face repository through wamcore's hub layer: ``wam run --am-checkpoint hf://ORG/REPO@SHA`` as a
user runs it, the worker spawned in ``.venv-lerobot`` fetching the files with its
``huggingface_hub`` from a local server speaking the Hub's routes
(``wamcore.testing.hubserver``), verifying them, and loading the policy from the hub cache."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from conftest import LEROBOT_PYTHON, require_model_environment
from wamcore.testing.hubserver import HubServer

REPO_ID = "wamcore-tests/act-pointmass"
SHA = "5" * 40


@pytest.fixture
def hub(tmp_path, act_pointmass):
    server = HubServer(tmp_path)
    server.add_commit(REPO_ID, SHA, act_pointmass)
    yield server
    server.close()


def test_a_hub_policy_drives_pointmass_and_the_identity_names_its_files(hub, tmp_path, act_pointmass):
    require_model_environment()
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env.update({"HF_ENDPOINT": hub.endpoint, "HF_HOME": str(tmp_path / "hf"), "WAMCORE_PINS_FILE": str(tmp_path / "pins.json"),
                "HF_HUB_DISABLE_PROGRESS_BARS": "1", "WAMCORE_LOAD_PLUGINS": "wam-pointmass,wam-lerobot"})
    done = subprocess.run([sys.executable, "-m", "wamcore", "run", "--platform", "pointmass", "--am-backend", "lerobot",
                           "--am-checkpoint", f"hf://{REPO_ID}@{SHA}", "--am-python", LEROBOT_PYTHON, "--max-steps", "6",
                           "--seed", "1", "--json", "--am-log-dir", str(tmp_path / "logs")],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    logs = "".join(p.read_text()[-3000:] for p in (tmp_path / "logs").glob("*") if p.is_file())
    assert done.returncode == 0, f"{done.stderr[-3000:]}\n{logs}"
    record = json.loads(done.stdout)
    assert (record["model"], record["platform"], record["steps"], record["chunks"]) == ("lerobot", "pointmass", 6, 6)
    fetched = {r["file"] for r in hub.requests() if r["method"] == "GET" and "file" in r}
    assert {"config.json", "model.safetensors", "policy_preprocessor.json", "policy_postprocessor.json"} <= fetched
    pins = record["model_identity"]["pins"]
    weights = hashlib.sha256((act_pointmass / "model.safetensors").read_bytes()).hexdigest()
    assert pins["weights_sha256"]["model.safetensors"] == weights  # the plugin's record of what it loaded
    assert pins["weights.checkpoint.sha256"]["model.safetensors"] == weights  # the hub layer's, verified at fetch
    assert record["model_identity"]["checkpoint"] == str(tmp_path / "hf/hub/models--wamcore-tests--act-pointmass/snapshots" / SHA)
    assert record["model_identity"]["contract"]["cameras"] == {"primary": [64, 64]}
