"""Fixtures for the wam-lerobot tests: the model environment, and small LeRobot policies with
random weights saved in LeRobot's format by LeRobot's own code (``wam lerobot-test-policy``).

The policies are generated once per version of the generator, in the model environment
``.venv-lerobot`` (``bash .ci/install``), and kept under it (``test-policies/``).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
#: the model environment of these tests (.ci/install builds it)
LEROBOT_PYTHON = os.environ.get("WAMCORE_TEST_LEROBOT_PYTHON", str(REPO / ".venv-lerobot" / "bin" / "python"))
RESOLUTION = 64


def require_model_environment() -> None:
    """Fail (never skip) without the model environment, saying how to build it."""
    assert Path(LEROBOT_PYTHON).is_file(), (
        f"the LeRobot model environment is missing ({LEROBOT_PYTHON}): run `bash .ci/install` "
        "(or set WAMCORE_TEST_LEROBOT_PYTHON to a Python with lerobot 0.4.4 and wam-lerobot)")


def generated_policy(policy_type: str, platform: str) -> Path:
    """A random-weight ``policy_type`` policy for ``platform`` (64 px cameras on LIBERO)."""
    require_model_environment()
    source = (REPO / "plugins/lerobot/src/wam_lerobot/testpolicy.py").read_bytes()
    key = hashlib.sha256(source).hexdigest()[:12]
    out = Path(LEROBOT_PYTHON).parents[1] / "test-policies" / f"{policy_type}-{platform}-{RESOLUTION}-{key}"
    if not (out / "complete").is_file():
        subprocess.run([LEROBOT_PYTHON, "-m", "wamcore", "lerobot-test-policy", policy_type, str(out), "--platform",
                        platform, "--resolution", str(RESOLUTION)], check=True, timeout=600, stdout=subprocess.DEVNULL)
        (out / "complete").write_text("ok")
    return out


@pytest.fixture(scope="session")
def act_libero() -> Path:
    return generated_policy("act", "libero")


@pytest.fixture(scope="session")
def diffusion_libero() -> Path:
    return generated_policy("diffusion", "libero")


@pytest.fixture(scope="session")
def act_pointmass() -> Path:
    return generated_policy("act", "pointmass")
