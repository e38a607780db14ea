"""``wam eval --executor ray`` on Ray's own local cluster: real actors, real model workers,
faults injected on cue (``wamtest_eval``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason='needs ray: pip install "wamcore[ray]"')

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers_workers import TAG_ENV, client_python, pid_gone, tagged_pids, worker_python  # noqa: E402
from test_evaluation import EVALTOY, eval_env, marker_pid, outcomes, records, start_wam, wait_for, wam  # noqa: E402

RAY = ["--executor", "ray"]


@pytest.fixture
def tag(monkeypatch):
    """Tags every process a test starts. Afterwards an env actor, model actor or model worker
    still running after a generous grace is a failure (it outlived the run that owned it);
    Ray's own agents, which outlive a killed driver by up to a minute or two, are cleared
    so that tests do not pile them up."""
    import uuid

    value = uuid.uuid4().hex
    monkeypatch.setenv(TAG_ENV, value)
    yield value
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    while (ours := {p: _cmdline(p) for p in wamcore_processes(value)}) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in tagged_pids(value):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if ours:
        pytest.fail(f"{len(ours)} process(es) of ours outlived the test by {LEFTOVER_GRACE_S:g} s: "
                    + "; ".join(f"{pid}: {cmd[:120]}" for pid, cmd in ours.items()))


#: how long our actors and workers may take to exit after their run ended (on a loaded 2-core machine)
LEFTOVER_GRACE_S = 60.0


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


OURS = ("ray::EnvActor", "ray::ModelActor", "wamcore serve")


def wamcore_processes(tag: str, also=()) -> list:
    """Env actors, model actors and model workers still running (not Ray's own daemons:
    pass ``also=("ray::IDLE",)`` to count Ray's pooled idle workers too)."""
    return [p for p in tagged_pids(tag) if any(k in _cmdline(p) for k in (*OURS, *also))]


def test_ray_records_equal_the_sequential_run(tmp_path, tag):
    env = {k: v for k, v in os.environ.items() if k not in ("WAMCORE_PLUGIN_MODULES", "WAMCORE_LOAD_PLUGINS")}
    one = wam("eval", "--episodes", 8, "--out", tmp_path / "one", env=env)
    distributed = wam("eval", "--episodes", 8, *RAY, "--num-envs", 2, "--am-python", worker_python(), "--json",
                      "--am-log-dir", tmp_path / "w", "--out", tmp_path / "ray", env=env, timeout=300)
    assert one.returncode == 0, one.stderr
    assert distributed.returncode == 0, distributed.stderr
    assert outcomes(tmp_path / "one") == outcomes(tmp_path / "ray")
    summary = json.loads(distributed.stdout)
    assert summary["executor"] == "ray" and summary["num_envs"] == 2
    worker = summary["model_info"]["details"]["worker"]
    assert worker["python"] == worker_python()  # the model ran in its own environment, started by the model actor
    assert not wamcore_processes(tag, also=("ray::IDLE",))  # a clean run shuts Ray's own pool down too


def test_ray_env_actor_killed_mid_episode_is_retried_and_completes(tmp_path, tag):
    markers = tmp_path / "markers"
    markers.mkdir()
    proc = start_wam("eval", *EVALTOY, *RAY, "--episodes", 8, "--num-envs", 2, "--hang-seed", 3,
                     "--marker-dir", markers, "--out", tmp_path / "o")
    hanging = marker_pid(markers, "env-hang")
    assert "ray::EnvActor" in _cmdline(hanging)
    os.kill(hanging, signal.SIGKILL)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    rows = records(tmp_path / "o")
    assert len(rows) == 8 and all(r["success"] for r in rows.values())  # seed=3 ran again on the restarted actor
    assert len(list(markers.glob("env-hang-*"))) == 2  # the episode started twice: killed, then retried


def test_ray_model_actor_restarts_when_its_worker_dies(tmp_path, tag):
    markers = tmp_path / "markers"
    markers.mkdir()
    proc = start_wam("eval", *EVALTOY, *RAY, "--episodes", 8, "--num-envs", 2, "--step-delay", 0.005, "--json",
                     "--model-hang-seed", 2, "--model-marker-dir", markers, "--out", tmp_path / "o")
    first = marker_pid(markers, "model-hang")
    os.kill(first, signal.SIGKILL)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    summary = json.loads(out)
    assert summary["model_restarts"] == 1
    rows = records(tmp_path / "o")
    assert len(rows) == 8
    failed = {k: r for k, r in rows.items() if not r["success"]}
    assert "seed=2" in failed and all(r["fault"] == "model" for r in failed.values()) and len(failed) <= 2


def test_ray_driver_killed_leaves_no_wamcore_process(tmp_path, tag):
    """Our actors and their model worker go within seconds of a SIGKILLed driver. Ray's own
    idle pool workers follow their raylet, which can take a minute under load; the ``tag``
    fixture clears those."""
    markers = tmp_path / "markers"
    markers.mkdir()
    proc = start_wam("eval", *EVALTOY, *RAY, "--episodes", 8, "--num-envs", 2, "--hang-seed", 3,
                     "--marker-dir", markers, "--out", tmp_path / "o")
    marker_pid(markers, "env-hang")
    running = wait_for(lambda: len(wamcore_processes(tag)) >= 4 and wamcore_processes(tag),
                       what="2 env actors, a model actor and its worker")
    proc.kill()
    proc.wait()
    for pid in running:
        wait_for(lambda: pid_gone(pid), 30, f"{_cmdline(pid)[:60]!r} ({pid}) to exit within 30 s")


def test_ray_missing_names_the_install_command(tmp_path):
    env = {**eval_env(), "WAMCORE_LOAD_PLUGINS": "wam-pointmass", "WAMCORE_PLUGIN_MODULES": ""}
    done = subprocess.run([client_python(), "-m", "wamcore", "eval", "--am-backend", "random", *RAY,
                           "--out", str(tmp_path / "o")], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert 'pip install "wamcore[ray]"' in done.stderr


def test_ray_model_actor_that_ray_gives_up_on_stops_the_run(tmp_path, tag):
    markers = tmp_path / "markers"
    markers.mkdir()
    proc = start_wam("eval", *EVALTOY, *RAY, "--episodes", 8, "--num-envs", 2, "--step-delay", 0.005, "--am-restarts", 0,
                     "--model-hang-seed", 2, "--model-marker-dir", markers, "--out", tmp_path / "o")
    os.kill(marker_pid(markers, "model-hang"), signal.SIGKILL)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1
    assert "Ray gave up restarting it (--am-restarts 0)" in err and "--resume" in err
