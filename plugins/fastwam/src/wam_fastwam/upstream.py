"""The upstream code each Fast-WAM path runs, at which revision, and how to install it.

* LIBERO runs through RLinf's Fast-WAM integration (RLinf PR #1398): ``rlinf.models.get_model``
  and ``FastWAMPolicy.predict_action_batch``. The revision validated with it is RLinf
  ``357f85b`` with the FastWAM revision RLinf pins, ``45d8e14`` (the product brief; RLinf's
  ``requirements/install.sh`` ``install_fastwam_deps``). ``357f85b`` was not in RLinf/RLinf's
  public refs (no branch, tag or ``refs/pull/*``) on 2026-08-22, when the PR's head
  (``refs/pull/1398/head``) was ``c42619879ae7e21c6a49992a3740d836e08381d6``.
* RoboTwin runs on FastWAM's own model API (``FastWAM.infer_action``), because RLinf's wrapper
  has no three-camera / qpos14 support (RL#1398 ``fastwam_policy.py`` takes
  ``main_images``/``wrist_images`` and an 8-D LIBERO state). Its
  conventions were read from FastWAM ``45d8e14``.

Nothing here imports the upstream packages: presence is read with ``find_spec`` and the
installed revision from the checkout's git metadata (both are editable installs of checkouts).
"""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path
from typing import Iterable, Optional

import attrs

from wamcore.checkpoints import weights_only_loads  # FastWAM's load_checkpoint runs inside it
from wamcore.errors import DependencyNotInstalled
from wamcore.upstream import UpstreamSource
from wamcore.weights import PinnedFile, WeightsPin


@attrs.frozen
class UpstreamPin:
    """One upstream checkout: where it comes from, the pinned revision, how to install it."""

    name: str
    module: str
    repository: str
    revision: str
    install: str

    @property
    def label(self) -> str:
        return f"{self.name} {self.revision[:7]}"


FASTWAM_REVISION = "45d8e1458921d83f8ad6cf9ce993d371208dabd0"
RLINF_REVISION = "357f85b"
#: The public head of RLinf PR #1398 on 2026-08-22 (for users whose
#: clone cannot reach 357f85b); shown by ``wam doctor`` and the docs, never installed silently.
RLINF_PUBLIC_HEAD = "c42619879ae7e21c6a49992a3740d836e08381d6"

SOURCE = UpstreamSource("FastWAM", "https://github.com/yuantianyuan01/FastWAM", FASTWAM_REVISION, folder="FastWAM",
                        archive="fastwam-45d8e14.tar.gz", note="its pyproject pins torch 2.7.1+cu128 and its training stack")
WEIGHTS_REPOSITORY = "yuanty/fastwam"
#: the audited revision of the release (the product brief); the README names none
WEIGHTS_REVISION = "139eebb6d90cdd9bdbbe465f72c6edc9ad5a518a"
WEIGHTS = (
    WeightsPin("fastwam-robotwin", "hf", WEIGHTS_REPOSITORY, WEIGHTS_REVISION,
               allow_patterns=("robotwin_uncond_3cam_384.pt", "robotwin_uncond_3cam_384_dataset_stats.json"),
               files=("robotwin_uncond_3cam_384.pt", "robotwin_uncond_3cam_384_dataset_stats.json"),
               description="RoboTwin 2.0, 3 cameras 384x320 (--platform robotwin)"),
    WeightsPin("fastwam-libero", "hf", WEIGHTS_REPOSITORY, WEIGHTS_REVISION, option=None,
               allow_patterns=("libero_uncond_2cam224.pt", "libero_uncond_2cam224_dataset_stats.json"),
               files=(PinnedFile("libero_uncond_2cam224.pt", size=12041735140), "libero_uncond_2cam224_dataset_stats.json"),
               description="LIBERO, 2 cameras 224x448: the RLinf model YAML's model_path names the pulled file "
                           "(--am-checkpoint is the YAML on LIBERO)"),
)

RLINF = UpstreamPin(
    name="RLinf",
    module="rlinf",
    repository="https://github.com/RLinf/RLinf",
    revision=RLINF_REVISION,
    install=(
        "git clone https://github.com/RLinf/RLinf && cd RLinf && git fetch origin pull/1398/head && "
        f"git checkout {RLINF_REVISION} && bash requirements/install.sh embodied --model fastwam "
        f"(installs FastWAM {FASTWAM_REVISION[:7]} too)"
    ),
)
FASTWAM_FOR_RLINF = UpstreamPin(
    name="FastWAM",
    module="fastwam",
    repository="https://github.com/yuantianyuan01/FastWAM",
    revision=FASTWAM_REVISION,
    install=RLINF.install,
)
FASTWAM_OFFICIAL = UpstreamPin(
    name="FastWAM",
    module="fastwam",
    repository="https://github.com/yuantianyuan01/FastWAM",
    revision=FASTWAM_REVISION,
    install=f"wam upstream install fast-wam  (from the model environment, or with --python ENV/bin/python: FastWAM "
            f"{FASTWAM_REVISION[:7]} from git, editable; Python 3.10, torch 2.7.1+cu128 per its README)",
)

#: Per platform, what the worker imports, in the order it is checked.
LIBERO_STACK = (RLINF, FASTWAM_FOR_RLINF)
ROBOTWIN_STACK = (FASTWAM_OFFICIAL,)
#: Other modules each path imports (installed by the commands above).
LIBERO_MODULES = ("torch", "omegaconf")
ROBOTWIN_MODULES = ("torch", "hydra", "omegaconf")


def module_available(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(stack: Iterable[UpstreamPin], modules: Iterable[str], purpose: str) -> None:
    """Raise :class:`DependencyNotInstalled` for the first missing piece, naming the package,
    its pinned revision and the command that installs it."""
    stack = tuple(stack)
    for pin in stack:
        if not module_available(pin.module):
            raise DependencyNotInstalled(f"{pin.module} ({pin.name} at {pin.revision[:7]})", pin.install, purpose)
    for module in modules:
        if not module_available(module):
            first = stack[0]
            raise DependencyNotInstalled(
                f"{module} (installed with {first.name} at {first.revision[:7]})", first.install, purpose
            )


def installed_revision(module: str) -> Optional[str]:
    """The git commit of the checkout a module is installed from (editable installs), or None."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    here = Path(spec.origin).resolve().parent
    for directory in (here, *here.parents):
        if (directory / ".git").exists():
            try:
                out = subprocess.run(
                    ["git", "-C", str(directory), "rev-parse", "HEAD"],
                    capture_output=True, text=True, timeout=10, check=True,
                )
            except (OSError, subprocess.SubprocessError):
                return None
            return out.stdout.strip() or None
    return None


def revision_matches(installed: Optional[str], pinned: str) -> bool:
    return installed is not None and installed.startswith(pinned)


__all__ = [
    "weights_only_loads",
    "SOURCE",
    "WEIGHTS",
    "WEIGHTS_REPOSITORY",
    "WEIGHTS_REVISION",
    "UpstreamPin",
    "RLINF",
    "FASTWAM_FOR_RLINF",
    "FASTWAM_OFFICIAL",
    "LIBERO_STACK",
    "ROBOTWIN_STACK",
    "LIBERO_MODULES",
    "ROBOTWIN_MODULES",
    "FASTWAM_REVISION",
    "RLINF_REVISION",
    "RLINF_PUBLIC_HEAD",
    "require",
    "installed_revision",
    "revision_matches",
    "module_available",
]
