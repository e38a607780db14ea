"""Helpers of the wam-openpi tests: the stand-in openpi server process, `wam serve`, openpi-remote."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from wamcore import Observation, PredictRequest, Registry
from wamcore.runtime import WorkerConfig, open_model

HERE = Path(__file__).resolve().parent


class Standin:
    """``openpi_standin.py`` running in ``folder``; scripted through files there."""

    def __init__(self, folder: Path, layout: str, metadata=None):
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        if metadata is not None:
            (folder / "metadata.json").write_text(json.dumps(metadata))
        self.script(actions=[[0.0] * (7 if layout == "libero" else 14)], repeat=10 if layout == "libero" else 50)
        self.proc = subprocess.Popen([sys.executable, str(HERE / "openpi_standin.py"), str(folder), layout])
        deadline = time.monotonic() + 60
        while not (folder / "port").exists():
            assert self.proc.poll() is None, f"stand-in exited with {self.proc.returncode}"
            assert time.monotonic() < deadline, "stand-in did not start"
            time.sleep(0.02)
        self.port = int((folder / "port").read_text())
        self.url = f"ws://127.0.0.1:{self.port}"

    def script(self, **script) -> None:
        tmp = self.folder / "script.tmp"
        tmp.write_text(json.dumps(script))
        tmp.rename(self.folder / "script.json")

    def requests(self) -> list:
        """Every request the policy received, in order, as dicts of arrays."""
        found = sorted(self.folder.glob("request-*.npz"), key=lambda p: int(p.stem.split("-")[1]))
        return [{k: (v.item() if v.dtype.kind == "U" else v) for k, v in np.load(p).items()} for p in found]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


# ``wam serve`` processes, as the core's worker tests start them
sys.path.insert(0, str(HERE.parents[2] / "tests"))
from helpers_workers import served  # noqa: E402,F401

#: the plugins a `wam serve` of these tests loads (the others cannot interfere)
SERVE_ENV = {"WAMCORE_LOAD_PLUGINS": "wam-libero,wam-openpi", "PYTHONUNBUFFERED": "1"}


def remote(url: str, platform: str = "libero", **options):
    """openpi-remote in this process, bound to ``platform``."""
    registry = Registry()
    config = WorkerConfig.from_options(platform=platform, am_backend="openpi-remote",
                                       backend_options={"openpi_endpoint": url, **options})
    return open_model(config, registry.platform(platform), registry=registry)


def libero_request(seed: int = 0) -> PredictRequest:
    """A LIBERO observation of the platform's shapes (no simulator needed)."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(4)
    return PredictRequest(Observation(
        images={r: rng.integers(0, 256, (256, 256, 3), dtype=np.uint8) for r in ("primary", "wrist")},
        state={"eef_position": rng.standard_normal(3), "eef_quaternion_xyzw": q / np.linalg.norm(q),
               "gripper_qpos": rng.uniform(-0.04, 0.04, 2), "joint_positions": rng.standard_normal(7)},
        instruction="put the bowl on the plate"))
