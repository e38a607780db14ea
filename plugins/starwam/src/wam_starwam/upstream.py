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

REPOSITORY = "https://github.com/shaohua-pan/StarWAM"
LIBERO_REVISION = "f6c771fc3be0a9bc271ea4f1531d8ea35efb0ec7"
ROBOTWIN_REVISION = "a7b05c8"
WEIGHTS_REPOSITORY = "panshaohua/starwam"
WEIGHTS_REVISION = "7d4bfe3ec76172ca17169fa959d21da099d386fe"
BACKBONE_REPOSITORY = "Wan-AI/Wan2.2-TI2V-5B"
ROOT_ENV = "STARWAM_ROOT"
MODULE = "starwam"

INSTALL = (
    f"git clone {REPOSITORY} StarWAM && git -C StarWAM checkout {ROBOTWIN_REVISION} && pip install -e ./StarWAM "
    "(Python 3.11, torch 2.6 per its README; LIBERO alone also runs at "
    f"{LIBERO_REVISION[:7]})"
)
DOWNLOAD = (
    f"modelscope download --model {WEIGHTS_REPOSITORY} --revision {WEIGHTS_REVISION} --local_dir starwam-weights"
)
BACKBONE_DOWNLOAD = f"huggingface-cli download {BACKBONE_REPOSITORY} --local-dir Wan2.2-TI2V-5B"
LABEL = f"StarWAM {ROBOTWIN_REVISION} (LIBERO audited at {LIBERO_REVISION[:7]})"


def module_available(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(purpose: str, *, robotwin: bool = False) -> None:
    """:class:`DependencyNotInstalled` naming the pinned revision and its install command."""
    for module in ("torch", MODULE):
        if not module_available(module):
            raise DependencyNotInstalled(f"{module} (StarWAM at {ROBOTWIN_REVISION})", INSTALL, purpose)
    if robotwin and not module_available("starwam.eval.policy"):
        raise DependencyNotInstalled(
            f"starwam.eval.policy (StarWAM's RoboTwin code arrived at {ROBOTWIN_REVISION}; the installed checkout is older)",
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
    "INSTALL",
    "DOWNLOAD",
    "BACKBONE_DOWNLOAD",
    "LABEL",
    "module_available",
    "require",
    "checkout_root",
    "weights_only_loads",
]
