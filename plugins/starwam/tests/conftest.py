"""Fixtures of the StarWAM tests.

The real upstream code is installed (``bash .ci/install``: StarWAM a7b05c8 editable, in the
test environment and in the model environment ``.venv-starwam``), so the adapters are
compared with upstream's own functions, value by value. What cannot exist here is a released
checkpoint: the stand-ins in ``starwam_standins`` replace the network at exactly its boundary
(``infer_action``, ``StarwamPolicy.predict_chunk``), and the end-to-end tests run the real
network with random weights generated from upstream's classes (``wam starwam-test-weights``).
"""

from __future__ import annotations

import hashlib
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
if str(HERE) not in sys.path:  # starwam_standins
    sys.path.insert(0, str(HERE))

from starwam_standins import INSTRUCTION, STARWAM_PYTHON  # noqa: E402


@pytest.fixture(scope="session")
def starwam_root() -> Path:
    from wam_starwam import upstream

    root = upstream.checkout_root()
    if str(root) not in sys.path:  # upstream's examples/ (rollout.py, policy_server.py) are not a package of the wheel
        sys.path.insert(0, str(root))
    return root


@pytest.fixture(scope="session")
def rollout(starwam_root):
    return importlib.import_module("examples.libero.rollout")


@pytest.fixture(scope="session")
def libero_recipe(starwam_root):
    from starwam.config import load_config

    def load(family: str = "mot"):
        from wam_starwam.families import family as fam

        return load_config(starwam_root / fam(family, "libero").recipe)

    return load


@pytest.fixture(scope="session")
def test_weights() -> Path:
    """Reduced-depth random weights for LIBERO and RoboTwin (one VAE), generated once by the
    model environment and kept beside it, keyed by the generator's source."""
    import wam_starwam.testweights as generator

    key = hashlib.sha256(Path(generator.__file__).read_bytes()).hexdigest()[:12]
    out = Path(STARWAM_PYTHON).parents[1] / "test-weights" / f"seed0-l2-w256-{key}"
    _generate(out, "complete", [["--platform", "libero"], ["--platform", "robotwin"]])
    return out


@pytest.fixture(scope="session")
def family_weights(test_weights) -> Path:
    """``test_weights`` plus the LIBERO Shared-DiT and feature-conditioned checkpoints (same VAE)."""
    _generate(test_weights, "complete-families",
              [["--platform", "libero", "--checkpoint-family", f] for f in ("shared-dit", "feature-conditioned")])
    return test_weights


def _generate(out: Path, marker: str, runs) -> None:
    done = out / marker
    if not done.is_file():
        for extra in runs:
            subprocess.run(
                [STARWAM_PYTHON, "-m", "wamcore", "starwam-test-weights", str(out), *extra,
                 "--instruction", INSTRUCTION, "--instruction", "hand the block over"],
                check=True, timeout=600, stdout=subprocess.DEVNULL,
            )
        done.write_text("ok")
