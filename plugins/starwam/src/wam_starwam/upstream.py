"""The upstream StarWAM code and weights this plugin runs, pinned, and how to get them.

* Code: shaohua-pan/StarWAM. LIBERO was audited at ``f6c771f`` (``examples/libero/rollout.py``);
  RoboTwin arrived later, at ``a7b05c8`` (``starwam/eval/policy.py`` ``StarwamPolicy``,
  ``examples/robotwin/``). ``a7b05c8`` leaves the LIBERO inference code of ``f6c771f``
  unchanged (``rollout.py``, the model classes and the recipes' settings are identical; it adds
  ``build_text_encoder`` and stores text-cache entries without padding, which
  ``load_text_cache`` reads either way), so one checkout at ``a7b05c8`` serves both platforms.
* Weights: ModelScope ``panshaohua/starwam`` at ``7d4bfe3``; the backbone files come from
  Hugging Face ``Wan-AI/Wan2.2-TI2V-5B``.

Upstream installs itself with ``pip install -e .`` from its checkout (``RoboTwin.md`` §2.1,
``LIBERO.md``); its recipes live in ``examples/``, which that package does not include, so
the checkout itself is found: ``--starwam-root``, else ``$STARWAM_ROOT``, else the checkout
the editable install points at.

Upstream loads ``.pt``/``.pth`` files with ``torch.load(..., weights_only=False)``
(``rollout._load_checkpoint``, ``eval.policy.load_checkpoint_into``, the Wan VAE and T5
loaders in ``backbone/wan22.py``). :func:`weights_only_loads` makes every such call inside
it load tensors only: a file that is a plain state dict loads the same, one that would run
code is refused.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Optional

from wamcore.checkpoints import weights_only_loads
from wamcore.errors import ConfigurationError, DependencyNotInstalled
from wamcore.upstream import UpstreamSource
from wamcore.weights import PinnedFile, WeightsPin

REPOSITORY = "https://github.com/shaohua-pan/StarWAM"
LIBERO_REVISION = "f6c771fc3be0a9bc271ea4f1531d8ea35efb0ec7"
ROBOTWIN_REVISION = "a7b05c8da8f8c88bf4888aa737b938af3b67ab48"
WEIGHTS_REPOSITORY = "panshaohua/starwam"
WEIGHTS_REVISION = "7d4bfe3ec76172ca17169fa959d21da099d386fe"
BACKBONE_REPOSITORY = "Wan-AI/Wan2.2-TI2V-5B"
#: the Wan2.2-TI2V-5B commit the StarWAM release was audited with (myheart521/WAMProbe
#: ``configs/models/upstream_models.json``)
BACKBONE_REVISION = "921dbaf3f1674a56f47e83fb80a34bac8a8f203e"
ROOT_ENV = "STARWAM_ROOT"
MODULE = "starwam"

SOURCE = UpstreamSource("StarWAM", REPOSITORY, ROBOTWIN_REVISION, folder="StarWAM", archive="starwam-a7b05c8.tar.gz",
                        note=f"LIBERO also runs at {LIBERO_REVISION[:7]}")
INSTALL = ("wam upstream install starwam  (from the model environment, or with --python ENV/bin/python: StarWAM "
           f"{ROBOTWIN_REVISION[:7]} from git, editable; Python 3.11, torch 2.6 per its README)")
#: Where the sha256 of the LIBERO release files come from: ModelScope publishes none; they were
#: recorded from a download of this revision (myheart521/WAMProbe ``configs/models/upstream_models.json``).
_RECORDED = "sha256 and sizes of the LIBERO files recorded at 7d4bfe3 by myheart521/WAMProbe (configs/models/upstream_models.json)"
_LIBERO_STATS = PinnedFile("starwam-libero/action_stats.json",
                           "9f65fb518ca446e0d5ca9e8127e960fe3d11e6466e4f48ba9bb1135b1e0fb4f0", 1742)
WEIGHTS = (
    WeightsPin("starwam-libero-mot", "ms", WEIGHTS_REPOSITORY, WEIGHTS_REVISION,
               allow_patterns=("starwam-libero/mot/*", "starwam-libero/action_stats.json"),
               files=(PinnedFile("starwam-libero/mot/starwam_wan225b_mot.pt",
                                 "d24edea01579880327cfd9dc84d24adab82e420dca9652e614ad697bc8cc5378", 12042005132), _LIBERO_STATS),
               description="LIBERO, MoT family (--checkpoint-family mot)", hashes_from=_RECORDED),
    WeightsPin("starwam-libero-sharedit", "ms", WEIGHTS_REPOSITORY, WEIGHTS_REVISION,
               allow_patterns=("starwam-libero/sharedit/*", "starwam-libero/action_stats.json"),
               files=(PinnedFile("starwam-libero/sharedit/starwam_wan225b_shareddit.pt",
                                 "76effa606b4954ba79ae53755e1a3baf412b6d88ed64db50ba9d896bd0ac5c40", 20076857590),
                      _LIBERO_STATS),
               description="LIBERO, Shared-DiT family (--checkpoint-family shared-dit)", hashes_from=_RECORDED),
    WeightsPin("starwam-robotwin-mot", "ms", WEIGHTS_REPOSITORY, WEIGHTS_REVISION,
               allow_patterns=("starwam-robotwin/mot/*", "starwam-robotwin/action_stats.json"),
               files=("starwam-robotwin/mot/starwam_wan225b_robotwin_mot.pt", "starwam-robotwin/action_stats.json"),
               description="RoboTwin 2.0, MoT family (--platform robotwin)"),
    WeightsPin("wan2.2-ti2v-5b", "hf", BACKBONE_REPOSITORY, BACKBONE_REVISION, option="backbone",
               allow_patterns=("Wan2.2_VAE.pth", "models_t5_umt5-xxl-enc-bf16.pth", "google/umt5-xxl/*", "config.json"),
               files=("Wan2.2_VAE.pth", "models_t5_umt5-xxl-enc-bf16.pth", "config.json"),
               description="the Wan2.2-TI2V-5B backbone files StarWAM reads (--backbone); its DiT weights are not "
                           "fetched, the StarWAM checkpoint overwrites every one"),
)
DOWNLOAD = "wam weights pull starwam starwam-libero-mot  (or starwam-libero-sharedit, starwam-robotwin-mot)"
BACKBONE_DOWNLOAD = "wam weights pull starwam wan2.2-ti2v-5b  (then --backbone wan2.2-ti2v-5b)"
LABEL = f"StarWAM {ROBOTWIN_REVISION[:7]} (LIBERO audited at {LIBERO_REVISION[:7]})"


def module_available(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(purpose: str, *, robotwin: bool = False) -> None:
    """:class:`DependencyNotInstalled` naming the pinned revision and its install command."""
    for module in ("torch", MODULE):
        if not module_available(module):
            raise DependencyNotInstalled(f"{module} (StarWAM at {ROBOTWIN_REVISION[:7]})", INSTALL, purpose)
    if robotwin and not module_available("starwam.eval.policy"):
        raise DependencyNotInstalled(
            f"starwam.eval.policy (StarWAM's RoboTwin code arrived at {ROBOTWIN_REVISION[:7]}; the installed checkout is older)",
            INSTALL,
            purpose,
        )


def checkout_root(explicit: Optional[str] = None) -> Path:
    """The StarWAM checkout holding ``examples/`` (see the module docstring for the order)."""
    given = explicit or os.environ.get(ROOT_ENV)
    if given:
        root = Path(given).expanduser()
    else:
        spec = importlib.util.find_spec(MODULE) if module_available(MODULE) else None
        root = Path(spec.origin).resolve().parents[1] if spec and spec.origin else Path("StarWAM")
    if not (root / "examples").is_dir() or not (root / MODULE).is_dir():
        raise ConfigurationError(
            f"StarWAM checkout not found at {root} (no examples/ and starwam/ there): pass --starwam-root or set "
            f"${ROOT_ENV} to the checkout, or install it editable: {INSTALL}"
        )
    return root


__all__ = [
    "REPOSITORY",
    "LIBERO_REVISION",
    "ROBOTWIN_REVISION",
    "WEIGHTS_REPOSITORY",
    "WEIGHTS_REVISION",
    "BACKBONE_REPOSITORY",
    "BACKBONE_REVISION",
    "SOURCE",
    "WEIGHTS",
    "INSTALL",
    "DOWNLOAD",
    "BACKBONE_DOWNLOAD",
    "LABEL",
    "module_available",
    "require",
    "checkout_root",
    "weights_only_loads",
]
