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

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
for path in (HERE, HERE / "stubs"):  # lingbot_standins; flash_attn for upstream's import
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from lingbot_standins import random_weights, stubs_for_workers  # noqa: E402


@pytest.fixture(scope="session")
def test_weights(tmp_path_factory) -> Path:
    return random_weights(tmp_path_factory.mktemp("lingbot-weights"))


@pytest.fixture
def worker_env(monkeypatch):
    stubs_for_workers(monkeypatch)
