"""A real browser for the report tests: Debian's headless Chromium (installed by .ci/install)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.skip("needs Debian's chromium (apt-get install chromium; .ci/install does)")
    return found


def render(page: Path, tmp: Path, size=(1200, 2200)) -> tuple:
    """(the DOM after the page loaded, the screenshot as an RGB array)."""
    args = [chromium(), *FLAGS, f"--user-data-dir={tmp / 'profile'}", f"--window-size={size[0]},{size[1]}"]
    dom = subprocess.run(args + ["--dump-dom", page.resolve().as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    shot = tmp / "screenshot.png"
    done = subprocess.run(args + [f"--screenshot={shot}", page.resolve().as_uri()], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    from PIL import Image

    return dom.stdout, np.asarray(Image.open(shot).convert("RGB"))


def not_blank(image: np.ndarray) -> bool:
    """More than a sliver of the page differs from its background colour."""
    background = np.median(image.reshape(-1, 3), axis=0)
    differs = np.abs(image.astype(int) - background).sum(axis=2) > 30
    return differs.mean() > 0.02
