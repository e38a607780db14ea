"""The upstream LingBot-VA code and weights this plugin runs, pinned, and how the worker runs
upstream's ``VA_Server`` in its own process.

* Code: Robbyant/lingbot-va at ``6f092cb`` (2026-01-30, the public HEAD when this was
  written). The revision the design named, ``7c6ffa9``, is not in the public repository, so
  it cannot be fetched or checked. At ``6f092cb`` the package metadata is not installable
  (``pyproject.toml`` declares a package ``lingbot_va`` that does not exist; the code is the
  ``wan_va`` folder, run from the checkout: ``evaluation/robotwin/launch_server.sh``), so the
  checkout goes on the path: ``--lingbot-root``, ``$LINGBOT_VA_ROOT``, or a ``.pth`` file.
* Weights: Hugging Face ``robbyant/lingbot-va-posttrain-robotwin`` (also ModelScope
  ``Robbyant/lingbot-va-posttrain-robotwin``); the README names no revision and no hashes.
  ``VA_Server`` reads four subfolders of it with ``from_pretrained``: ``vae/``
  (diffusers ``AutoencoderKLWan``), ``tokenizer/`` (``T5TokenizerFast``), ``text_encoder/``
  (``UMT5EncoderModel``) and ``transformer/`` (``wan_va.modules.model.WanTransformer3DModel``).

``wan_va/wan_va_server.py`` appends its own folder to ``sys.path`` and imports ``configs``,
``distributed``, ``modules`` and ``utils`` as top-level modules; :func:`import_server` refuses
to run where other modules of those names are already imported. ``run()`` always calls
``init_distributed`` (NCCL, ``env://``), so upstream runs under ``torch.distributed.run``;
:func:`build_server` sets up the same single-process rendezvous on a GPU and then builds
``VA_Server`` exactly as ``run()`` does. On a CPU (tests) there is no NCCL, so no process group
and no FSDP (``_configure_model`` then moves the model to the device, as upstream does without
one), and the ``cuda:<local_rank>`` device ``VA_Server`` hard-codes is redirected to the CPU.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import os
import socket
import sys
from pathlib import Path
from typing import Any, Optional

from wamcore.doctor import module_available
from wamcore.errors import ConfigurationError, DependencyNotInstalled
from wamcore.upstream import UpstreamSource
from wamcore.weights import WeightsPin

REPOSITORY = "https://github.com/Robbyant/lingbot-va"
REVISION = "6f092cb358a0fe3aacf9ed0346d4703d76c189b7"
DESIGN_REVISION = "7c6ffa9"
WEIGHTS_REPOSITORY = "robbyant/lingbot-va-posttrain-robotwin"
CONFIG_NAME = "robotwin"
ROOT_ENV = "LINGBOT_VA_ROOT"
MODULE = "wan_va"
SUBFOLDERS = ("vae", "tokenizer", "text_encoder", "transformer")
#: what upstream imports (README at 6f092cb: diffusers 0.36.0, transformers 5.0.0, flash-attn)
PACKAGES = ("torch", "diffusers", "transformers", "easydict", "einops", "ftfy")
#: top-level names wan_va_server.py imports from its own folder
TOP_LEVEL = ("configs", "distributed", "modules", "utils")

#: the commit of the RoboTwin release recorded by FlashDreams' LingBot-VA port (the README names none)
WEIGHTS_REVISION = "8c9dea8abbc5c91cc9e18bc3264b8915083bbe70"
SOURCE = UpstreamSource("lingbot-va", REPOSITORY, REVISION, folder="lingbot-va", archive="lingbot-va-6f092cb.tar.gz",
                        install="path", note="not pip-installable at this commit: the checkout goes on sys.path")
WEIGHTS = (
    WeightsPin("lingbot-va-robotwin", "hf", WEIGHTS_REPOSITORY, WEIGHTS_REVISION,
               allow_patterns=tuple(f"{folder}/*" for folder in SUBFOLDERS),
               files=("vae/config.json", "tokenizer/tokenizer_config.json", "text_encoder/config.json", "transformer/config.json"),
               description="RoboTwin 2.0 post-train, the folder VA_Server reads (vae/, tokenizer/, text_encoder/, transformer/)"),
    WeightsPin("lingbot-va-libero-long", "hf", "robbyant/lingbot-va-posttrain-libero-long",
               "0e89d1e753019988aba484e8da2dc0810e264d9f", option=None,
               description="LIBERO-Long post-train (the product brief's pin); this plugin serves RoboTwin only at 6f092cb"),
)
PACKAGES_INSTALL = ("pip install torch websockets einops diffusers==0.36.0 \"transformers>=4.55.4\" accelerate msgpack ftfy "
                    "easydict flash-attn")
INSTALL = (f"wam upstream install lingbot-va  (from the model environment, or with --python ENV/bin/python), then "
           f"{PACKAGES_INSTALL}  (upstream README: Python 3.10, torch 2.9, CUDA 12.6)")
DOWNLOAD = "wam weights pull lingbot-va lingbot-va-robotwin  (then --am-checkpoint lingbot-va-robotwin)"
LABEL = f"LingBot-VA {REVISION[:7]}"


def checkout_root(explicit: Optional[str] = None) -> Path:
    """The checkout holding ``wan_va/``: ``--lingbot-root``, else ``$LINGBOT_VA_ROOT``, else
    where ``wan_va`` is importable from."""
    given = explicit or os.environ.get(ROOT_ENV)
    if given:
        root = Path(given).expanduser()
    else:
        spec = importlib.util.find_spec(MODULE) if module_available(MODULE) else None
        origin = spec.origin if spec else None
        root = Path(origin).resolve().parents[1] if origin else Path("lingbot-va")
    if not (root / MODULE / "wan_va_server.py").is_file():
        raise DependencyNotInstalled(f"LingBot-VA at {REVISION[:7]} (no {MODULE}/wan_va_server.py in {root})", INSTALL,
                                     "LingBot-VA's VA_Server")
    return root


def require(purpose: str) -> None:
    """:class:`DependencyNotInstalled` naming the first missing package and the install command."""
    for module in PACKAGES:
        if not module_available(module):
            raise DependencyNotInstalled(module, INSTALL, purpose)


def import_server(root: Path):
    """``wan_va.wan_va_server`` from the checkout at ``root``."""
    loaded = {name: getattr(sys.modules[name], "__file__", None) for name in TOP_LEVEL if name in sys.modules}
    here = root.resolve() / MODULE
    clashes = {n: f for n, f in loaded.items() if not (f and Path(f).resolve().is_relative_to(here))}
    if clashes:
        raise ConfigurationError(
            f"LingBot-VA's server imports {', '.join(TOP_LEVEL)} as top-level modules from {here}, but other modules of "
            f"those names are already imported here ({clashes}); run it in a process of its own"
        )
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    if not module_available("flash_attn_interface") and not module_available("flash_attn"):
        raise DependencyNotInstalled(
            "flash_attn", "pip install flash-attn --no-build-isolation",
            f"wan_va/modules/model.py imports it unconditionally at {REVISION[:7]} (attention itself uses it only with "
            "attn_mode 'flashattn' in transformer/config.json)",
        )
    module = importlib.import_module(f"{MODULE}.wan_va_server")
    if not Path(module.__file__).resolve().is_relative_to(here):
        raise ConfigurationError(f"{MODULE}.wan_va_server was imported from {module.__file__}, not from {root}")
    return module


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _DeviceRedirect:
    """``torch`` as ``wan_va_server`` sees it, with ``torch.device("cuda:N")`` read as ``device``:
    upstream hard-codes ``cuda:<local_rank>``; on a CPU-only host it would not load."""

    def __init__(self, torch_module, device):
        self._torch, self._device = torch_module, device

    def __getattr__(self, name):
        return getattr(self._torch, name)

    def device(self, *args, **kwargs):
        asked = self._torch.device(*args, **kwargs)
        return self._device if asked.type == "cuda" else asked


def job_config(server_module, checkpoint: Path, save_root: Path, overrides: dict):
    """``VA_CONFIGS["robotwin"]`` as ``run()`` completes it (a copy: the module's stays as it is)."""
    config = copy.deepcopy(server_module.VA_CONFIGS[CONFIG_NAME])
    config.wan22_pretrained_model_name_or_path = str(checkpoint)
    config.save_root = str(save_root)
    config.rank, config.local_rank, config.world_size = 0, 0, 1
    for key, value in overrides.items():
        if value is not None:
            config[key] = value
    return config


def build_server(root: Path, checkpoint: Path, *, device: str, save_root: Path, overrides: dict) -> Any:
    """Upstream's ``VA_Server`` for ``checkpoint``, built as ``run()`` builds it."""
    import torch

    module = import_server(root)
    config = job_config(module, checkpoint, save_root, overrides)
    if device == "cuda":  # the GPU CUDA_VISIBLE_DEVICES names first (--am-cuda-device), as local rank 0
        if not torch.distributed.is_initialized():  # torchrun --nproc_per_node 1, in this process
            os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
                              MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
            module.init_distributed(1, 0, 0)
    else:  # for the rest of this process: the module is imported once
        module.torch = _DeviceRedirect(torch, torch.device(device))
    return module.VA_Server(config)


__all__ = ["REPOSITORY", "REVISION", "DESIGN_REVISION", "WEIGHTS_REPOSITORY", "WEIGHTS_REVISION", "SOURCE", "WEIGHTS", "SUBFOLDERS", "INSTALL", "DOWNLOAD",
           "LABEL", "checkout_root", "require", "import_server", "build_server", "job_config", "module_available"]
