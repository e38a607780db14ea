"""Fixtures of the LingBot-VA tests.

The real upstream code is installed (``bash .ci/install``: LingBot-VA 6f092cb on the path of
``.venv``, with diffusers and transformers), so the real ``VA_Server`` runs here on weights
generated from upstream's own classes (``wam lingbot-va-test-weights``), at reduced size.
``stubs/flash_attn`` stands in for flash-attn, which ``wan_va/modules/model.py`` imports
unconditionally and which a CPU cannot have; the generated transformer uses torch's SDPA.
Tests that need the RoboTwin platform live with the robotwin plugin
(``plugins/robotwin/tests/test_robotwin_lingbot_pair.py``): a process holds one RoboTwin
checkout, the stand-in one of those tests.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
STUBS = HERE / "stubs"
for path in (HERE, STUBS):  # lingbot_standins; flash_attn for upstream's import
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))


@pytest.fixture(scope="session")
def test_weights(tmp_path_factory) -> Path:
    """Random weights at reduced size, the four subfolders VA_Server reads (a few MB, seconds)."""
    from wam_lingbot_va.testweights import generate

    out = tmp_path_factory.mktemp("lingbot-weights")
    generate(out, layers=1, seed=0)
    return out


@pytest.fixture
def worker_env(monkeypatch):
    """What a spawned worker needs here: the flash_attn stub on its path."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(STUBS), os.environ.get("PYTHONPATH")])))
