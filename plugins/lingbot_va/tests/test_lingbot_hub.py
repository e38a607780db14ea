"""LingBot-VA's pinned RoboTwin release fetched from a hub: a real local server that speaks the
Hugging Face routes (``wamcore.testing.hubserver``) serves weights generated from upstream's
own classes in the release's layout, at the pinned commit; ``wam weights pull`` and ``wam
doctor`` run as a user runs them (subprocesses, ``HF_ENDPOINT`` pointed at the server)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from wam_lingbot_va import upstream
from wamcore.testing.hubserver import HubServer

PIN = next(p for p in upstream.WEIGHTS if p.name == "lingbot-va-robotwin")
WAM = [sys.executable, "-m", "wamcore"]
VAE = "vae/diffusion_pytorch_model.safetensors"


@pytest.fixture
def hub(tmp_path, test_weights):
    server = HubServer(tmp_path)
    server.add_commit(PIN.repo, PIN.revision, test_weights)
    yield server
    server.close()


def wam(hub, tmp_path, *args, **env):
    """``wam ARGS`` with this test's hub, hub cache and pin file."""
    full = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    full.update({"HF_ENDPOINT": hub.endpoint, "HF_HOME": str(tmp_path / "hf"), "WAMCORE_PINS_FILE": str(tmp_path / "pins.json"),
                 "HF_HUB_DISABLE_PROGRESS_BARS": "1", **env})
    return subprocess.run([*WAM, *args], env=full, capture_output=True, text=True, timeout=300)


def fetched(hub) -> set:
    return {r["file"] for r in hub.requests() if r["method"] == "GET" and "file" in r}


def snapshot(tmp_path) -> Path:
    return tmp_path / "hf" / "hub" / "models--robbyant--lingbot-va-posttrain-robotwin" / "snapshots" / PIN.revision


def test_a_good_download_fetches_only_the_variants_files_and_records_what_nobody_published(hub, tmp_path, test_weights):
    done = wam(hub, tmp_path, "weights", "pull", "lingbot-va", "lingbot-va-robotwin")
    assert done.returncode == 0, done.stderr
    # only the four folders VA_Server reads: the generator's marker at the root is not fetched
    assert (test_weights / "LINGBOT_VA_RANDOM_TEST_WEIGHTS.json").is_file()
    assert fetched(hub) == {p.relative_to(test_weights).as_posix() for p in test_weights.rglob("*")
                            if p.is_file() and p.parent != test_weights}
    assert str(snapshot(tmp_path)) in done.stdout
    listed = {r["name"]: r for r in json.loads(wam(hub, tmp_path, "weights", "ls", "--json").stdout)}
    assert listed["lingbot-va-robotwin"]["cached"] == str(snapshot(tmp_path)) and listed["lingbot-va-libero-long"]["cached"] is None
    pins = json.loads((tmp_path / "pins.json").read_text())["checkpoints"][PIN.ref]["files"]
    # LFS files are checked against the sha256 the hub publishes; small files are recorded on first download
    assert pins[VAE]["from"] == "hub" and pins["vae/config.json"]["from"] == "first download"
    assert "nobody publishes a sha256 for 5 of these files" in done.stderr
    # the doctor resolves the name to the cached folder, hashes it, and the plugin's own checks pass on it
    doctor = wam(hub, tmp_path, "doctor", "--am-backend", "lingbot-va", "--am-checkpoint", "lingbot-va-robotwin",
                 "--verify-hashes", "--json")
    rows = {r["name"]: r for r in json.loads(doctor.stdout)["checks"]}
    assert rows["model lingbot-va: weights lingbot-va-robotwin"]["ok"], rows
    assert "8 files sha256-verified" in rows["model lingbot-va: weights lingbot-va-robotwin"]["detail"]
    assert rows["model lingbot-va: weights"]["ok"] and str(snapshot(tmp_path)) in rows["model lingbot-va: weights"]["detail"]


def test_a_changed_file_is_named_at_download_and_in_the_cache(hub, tmp_path):
    hub.configure(tamper=[VAE])  # served bytes differ from the sha256 the hub lists for that commit
    done = wam(hub, tmp_path, "weights", "pull", "lingbot-va-robotwin")
    assert done.returncode != 0
    assert "is not the pinned checkpoint" in done.stderr and f"{VAE}: sha256" in done.stderr and "published sha256" in done.stderr
    hub.configure(tamper=[])
    assert wam(hub, tmp_path, "weights", "pull", "lingbot-va-robotwin", "--force").returncode == 0
    # a file changed in the cache after its first download: its recorded sha256 names it
    config = (snapshot(tmp_path) / "transformer" / "config.json").resolve()
    config.write_text(config.read_text().replace('"', "'", 1))  # same size, other bytes
    again = wam(hub, tmp_path, "weights", "pull", "lingbot-va-robotwin")
    assert again.returncode != 0 and "transformer/config.json" in again.stderr and str(tmp_path / "pins.json") in again.stderr
    doctor = wam(hub, tmp_path, "doctor", "--am-backend", "lingbot-va", "--verify-hashes", "--json")
    row = {r["name"]: r for r in json.loads(doctor.stdout)["checks"]}["model lingbot-va: weights lingbot-va-robotwin"]
    assert not row["ok"] and "transformer/config.json" in row["detail"] and "--force" in row["fix"]


def test_a_moved_revision_is_refused_before_anything_downloads(hub, tmp_path, test_weights):
    hub.configure(resolve={f"{PIN.repo}@{PIN.revision}": "f" * 40})
    done = wam(hub, tmp_path, "weights", "pull", "lingbot-va-robotwin")
    assert done.returncode != 0 and "now resolves to" in done.stderr and "f" * 40 in done.stderr
    assert fetched(hub) == set()
    # a branch: recorded at its first fetch, refused once it names another commit
    hub.configure(resolve={})
    ref = f"hf://{PIN.repo}@main"
    assert wam(hub, tmp_path, "weights", "pull", ref).returncode == 0
    hub.add_commit(PIN.repo, "e" * 40, test_weights, ref="main")
    moved = wam(hub, tmp_path, "weights", "pull", ref)
    assert moved.returncode != 0 and "moved" in moved.stderr and PIN.revision in moved.stderr and "e" * 40 in moved.stderr


def test_an_interrupted_download_resumes_where_it_broke(hub, tmp_path):
    # past huggingface_hub's first 10 MiB read (DOWNLOAD_CHUNK_SIZE): those bytes are on disk when it breaks
    size = Path(hub.config["repos"][PIN.repo]["commits"][PIN.revision], VAE).stat().st_size
    assert size > 11_000_000
    hub.configure(cut={VAE: 11_000_000})
    done = wam(hub, tmp_path, "weights", "pull", "lingbot-va-robotwin")
    assert done.returncode == 0, done.stderr
    ranges = [r["range"] for r in hub.requests() if r["method"] == "GET" and r.get("file") == VAE]
    assert ranges[0] is None and len(ranges) == 2 and ranges[1] == f"bytes={10 * 1024 * 1024}-"
    assert f"{VAE}" in done.stdout  # verified against the hub's sha256 after the resumed transfer


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_offline_a_missing_checkpoint_names_the_command_and_a_cached_one_loads(hub, tmp_path):
    done = wam(hub, tmp_path, "weights", "pull", "lingbot-va-robotwin", HF_HUB_OFFLINE="1")
    assert done.returncode != 0 and "is not on this machine" in done.stderr
    assert "HF_HUB_OFFLINE=1" in done.stderr and "run: wam weights pull lingbot-va-robotwin" in done.stderr
    # no network at all (nothing listens there) is the same clear error
    nowhere = wam(hub, tmp_path, "weights", "pull", "lingbot-va-robotwin", HF_ENDPOINT=_closed_port())
    assert nowhere.returncode != 0 and "run: wam weights pull lingbot-va-robotwin" in nowhere.stderr
    assert wam(hub, tmp_path, "weights", "pull", "lingbot-va-robotwin").returncode == 0
    # cached: offline, a worker's --am-checkpoint NAME resolves to the verified folder, no request made
    hub.configure()
    code = ("from wamcore.hub import resolve_config; from wamcore.registry import default_registry; "
            "from wamcore.specs import ModelConfig; import json; "
            "c, w = resolve_config(default_registry().model('lingbot-va'), ModelConfig('robotwin', 'lingbot-va-robotwin'));"
            "print(json.dumps([c.checkpoint, w]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, HF_HUB_OFFLINE="1", HF_ENDPOINT=hub.endpoint, HF_HOME=str(tmp_path / "hf"),
                                  WAMCORE_PINS_FILE=str(tmp_path / "pins.json")))
    folder, weights = json.loads(out.stdout)
    assert Path(folder) == snapshot(tmp_path) and weights["checkpoint"]["ref"] == PIN.ref
    assert len(weights["checkpoint"]["sha256"]) == 8 and hub.requests() == []
    # offline, a file lost from the cache is a partial download, named
    (snapshot(tmp_path) / "vae" / "config.json").unlink()
    lost = wam(hub, tmp_path, "weights", "pull", "lingbot-va-robotwin", HF_HUB_OFFLINE="1")
    assert lost.returncode != 0 and "vae/config.json" in lost.stderr
