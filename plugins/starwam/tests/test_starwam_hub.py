"""StarWAM's pinned ModelScope release fetched from a hub: a real local server speaking the
ModelScope routes ``modelscope``'s client calls (``wamcore.testing.hubserver``, the client
pointed at it with ``MODELSCOPE_ENDPOINT``) serves a release laid out as ModelScope's
``panshaohua/starwam`` (random weights in StarWAM's checkpoint format, stats from the plugin's
generator); ``wam weights pull`` runs as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from wam_starwam import upstream
from wam_starwam.testweights import random_stats
from wamcore.testing.hubserver import HubServer

PIN = next(p for p in upstream.WEIGHTS if p.name == "starwam-robotwin-mot")
CKPT = "starwam-robotwin/mot/starwam_wan225b_robotwin_mot.pt"


@pytest.fixture
def hub(tmp_path):
    release = tmp_path / "release"
    (release / CKPT).parent.mkdir(parents=True)
    torch.save({"model_state_dict": {"blocks.0.weight": torch.randn(64, 1024, generator=torch.Generator().manual_seed(0))}},
               release / CKPT)
    (release / "starwam-robotwin" / "action_stats.json").write_text(json.dumps(random_stats("robotwin", 0)))
    (release / "starwam-libero").mkdir()
    (release / "starwam-libero" / "action_stats.json").write_text(json.dumps(random_stats("libero", 0)))
    server = HubServer(tmp_path)
    server.add_commit(PIN.repo, PIN.revision, release, ref="master")
    yield server
    server.close()


def wam(hub, tmp_path, *args, **env):
    full = {k: v for k, v in os.environ.items() if k != "MODELSCOPE_OFFLINE"}
    full.update({"MODELSCOPE_ENDPOINT": hub.endpoint, "MODELSCOPE_CACHE": str(tmp_path / "ms"),
                 "WAMCORE_PINS_FILE": str(tmp_path / "pins.json"), **env})
    return subprocess.run([sys.executable, "-m", "wamcore", *args], env=full, capture_output=True, text=True, timeout=300)


def test_pull_from_modelscope_fetches_the_variant_and_checks_the_listed_sha256(hub, tmp_path):
    done = wam(hub, tmp_path, "weights", "pull", "starwam", "robotwin-mot")
    assert done.returncode == 0, done.stderr
    fetched = {r["file"] for r in hub.requests() if r.get("file")}
    assert fetched == {CKPT, "starwam-robotwin/action_stats.json"}  # not the LIBERO stats
    recorded = json.loads((tmp_path / "pins.json").read_text())["checkpoints"][PIN.ref]["files"]
    assert {entry["from"] for entry in recorded.values()} == {"hub"}  # ModelScope lists every file's sha256
    folder = Path(done.stdout.strip().splitlines()[-2])
    assert (folder / CKPT).is_file() and "use: --am-checkpoint starwam-robotwin-mot" in done.stdout
    # changed in the cache: offline, the recorded sha256 names it; online, ModelScope's client
    # fetches it again (it checks cached files against its listing) and the check passes
    good = (folder / CKPT).read_bytes()
    (folder / CKPT).write_bytes(good[:-1] + bytes([good[-1] ^ 0xFF]))
    changed = wam(hub, tmp_path, "weights", "pull", "starwam-robotwin-mot", MODELSCOPE_OFFLINE="1")
    assert changed.returncode != 0 and f"{CKPT}: sha256" in changed.stderr and "your pin file" in changed.stderr
    assert wam(hub, tmp_path, "weights", "pull", "starwam-robotwin-mot", "--force").returncode == 0
    assert (folder / CKPT).read_bytes() == good


def test_a_file_served_changed_and_offline_use_are_typed_errors(hub, tmp_path):
    hub.configure(tamper=[CKPT])
    served = wam(hub, tmp_path, "weights", "pull", "starwam-robotwin-mot")
    assert served.returncode != 0 and CKPT in served.stderr and "Traceback" not in served.stderr
    offline = wam(hub, tmp_path, "weights", "pull", "starwam-robotwin-mot", MODELSCOPE_OFFLINE="1",
                  MODELSCOPE_CACHE=str(tmp_path / "empty"))
    assert offline.returncode != 0 and "MODELSCOPE_OFFLINE=1" in offline.stderr
    assert "run: wam weights pull starwam-robotwin-mot" in offline.stderr
