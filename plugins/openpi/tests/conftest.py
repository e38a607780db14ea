"""Fixtures of the wam-openpi tests: a stand-in openpi policy server in its own process."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # openpi_helpers, openpi_standin
    sys.path.insert(0, str(HERE))

from openpi_helpers import Standin  # noqa: E402


@pytest.fixture
def standin(tmp_path):
    """``standin(layout, metadata=None)`` -> a running :class:`Standin`, stopped after the test."""
    started = []

    def start(layout: str = "libero", metadata=None) -> Standin:
        server = Standin(tmp_path / f"standin-{len(started)}", layout, metadata)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
