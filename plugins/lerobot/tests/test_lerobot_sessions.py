"""Sessions of one loaded policy (``wam eval --num-envs N`` sends one per env): Diffusion
Policy keeps observation and action queues and draws noise, so a session's actions depend on
its own past only, a reset starts it again, and its seed decides its noise. Run in the model
environment by ``lerobot_sessions_driver.py`` (the plugin's worker code, no RPC)."""

from __future__ import annotations

import json
import subprocess

from conftest import HERE, LEROBOT_PYTHON, require_model_environment


def test_sessions_keep_their_own_queues_and_random_streams(diffusion_libero, tmp_path):
    require_model_environment()
    out = tmp_path / "sessions.json"
    done = subprocess.run([LEROBOT_PYTHON, str(HERE / "lerobot_sessions_driver.py"), str(diffusion_libero), str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    got = json.loads(out.read_text())
    assert got["interleaved_a"] == got["alone"]  # another session between its steps changed nothing
    assert got["interleaved_b"] != got["alone"]
    assert got["other_seed"] != got["alone"]  # after a reset, another seed: other noise
    assert len({tuple(a) for a in got["alone"]}) == 6
