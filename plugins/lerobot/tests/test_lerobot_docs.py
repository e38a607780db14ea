"""The commands of docs/models/lerobot.md ("Run a LeRobot policy") run as written, in a fresh
folder where ``.venv-lerobot`` is the model environment of these tests."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from conftest import LEROBOT_PYTHON, REPO, require_model_environment

DOC = REPO / "docs" / "models" / "lerobot.md"


def doc_commands(name: str) -> list:
    block = re.search(rf"<!-- commands: {name} -->\s*```bash\n(.*?)```", DOC.read_text(), re.S)
    assert block, f"{DOC} has no commands block {name!r}"
    return [line for line in block.group(1).splitlines() if line.strip() and not line.startswith("#")]


def run(line: str, cwd: Path) -> subprocess.CompletedProcess:
    """``wam ...`` with the test environment's Python, ``.venv-lerobot/bin/wam ...`` with the
    model environment's (the folder's ``.venv-lerobot`` links to it)."""
    words = shlex.split(line)
    pythons = {"wam": sys.executable, ".venv-lerobot/bin/wam": LEROBOT_PYTHON}
    assert words[0] in pythons, line
    env = {**os.environ, "WAMCORE_LOAD_PLUGINS": "wam-libero,wam-lerobot"}
    return subprocess.run([pythons[words[0]], "-m", "wamcore", *words[1:]], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600, stdin=subprocess.DEVNULL)


def test_run_a_lerobot_policy_as_written(tmp_path):
    require_model_environment()
    (tmp_path / ".venv-lerobot").symlink_to(Path(LEROBOT_PYTHON).parents[1])
    commands = doc_commands("lerobot-run")
    assert len(commands) == 3
    outputs = []
    for line in commands:
        done = run(line, tmp_path)
        assert done.returncode == 0, f"{line}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        outputs.append(done.stdout)
    assert "random-weight act policy for libero" in outputs[0]
    assert (tmp_path / "policies/act-libero/model.safetensors").is_file()
    assert outputs[1].startswith("lerobot on libero") and "after 6 steps in 6 chunk(s)" in outputs[1]
    rows = [json.loads(r) for r in (tmp_path / "runs/lerobot-act/episodes.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r["steps"] == 4 and r["error"] is None for r in rows)
    assert json.loads((tmp_path / "runs/lerobot-act/summary.json").read_text())["episodes"] == 2
