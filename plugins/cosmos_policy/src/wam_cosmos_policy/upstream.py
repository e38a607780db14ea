"""The boundary to the official Cosmos Policy package: its pinned identity, how to provision
it, and the few upstream names the worker calls.

Everything the worker needs from upstream goes through :class:`UpstreamAPI`, imported by
:func:`import_api` only inside the model's own environment. The names are those of
NVlabs/cosmos-policy at the pinned revision (``cosmos_policy/experiments/robot/cosmos_utils.py``,
``cosmos_policy/experiments/robot/libero/run_libero_eval.py``):

* ``cosmos_policy.experiments.robot.cosmos_utils``: ``get_model(cfg)``,
  ``get_action(cfg, model, dataset_stats, obs, task_label_or_embedding, seed,
  randomize_seed, num_denoising_steps_action, generate_future_state_and_value_in_parallel)``,
  ``load_dataset_stats(path)``, the module-level ``t5_text_embeddings_cache`` and ``DEVICE``;
* ``cosmos_policy.utils.utils.set_seed_everywhere(seed)``;
* ``cosmos_policy.constants`` (``ACTION_DIM``, ``NUM_ACTIONS_CHUNK``, ``PROPRIO_DIM``).
"""

from __future__ import annotations

import importlib
import importlib.util
from importlib import metadata
from types import SimpleNamespace
from typing import Any, Optional

import attrs

from wamcore.errors import DependencyNotInstalled, WorkerError
from wamcore.upstream import UpstreamSource

DISTRIBUTION = "cosmos-policy"
MODULE = "cosmos_policy"
VERSION = "1.0.0"
REPOSITORY = "https://github.com/NVlabs/cosmos-policy"
REVISION = "18a2accadf4e7a3531e56754102af5a24d2316da"
INFERENCE_MODULE = "cosmos_policy.experiments.robot.cosmos_utils"
#: upstream's inference config for the LIBERO checkpoint (run_libero_eval.py usage)
EXPERIMENT = "cosmos_predict2_2b_480p_libero__inference_only"
CONFIG_FILE = "cosmos_policy/config/config.py"

PINNED = f"{DISTRIBUTION} {VERSION} ({REPOSITORY} @ {REVISION})"
SOURCE = UpstreamSource(DISTRIBUTION, REPOSITORY, REVISION, folder="cosmos-policy",
                        note="upstream provisions its environment with uv sync --extra cu128 --group libero (PROVISION)")
#: provisioning of the model's own environment, per upstream ``LIBERO.md`` and ``pyproject.toml``:
#: Python 3.10, the cu128 extra (torch==2.7.0, flash-attn, transformer-engine) from uv.lock
PROVISION = (
    f"git clone {REPOSITORY} cosmos-policy",
    f"cd cosmos-policy && git checkout {REVISION}",
    "uv sync --extra cu128 --group libero --python 3.10",
    'uv pip install --python .venv/bin/python "wamcore>=0.1,<0.2" wam-cosmos-policy',
)
INSTALL = " && ".join(PROVISION)
#: the install command plus how to use the environment it makes
PROVISION_HINT = (
    f"{INSTALL}; then run the model in that environment: wam run --platform libero --am-backend cosmos-policy "
    "--am-python cosmos-policy/.venv/bin/python --am-checkpoint DIR"
)


def module_present(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def installed_version() -> Optional[str]:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None


def require_installed() -> None:
    """Raise :class:`DependencyNotInstalled` naming the pinned package and its install
    command, without importing anything heavy."""
    if not module_present(MODULE):
        raise DependencyNotInstalled(
            PINNED, PROVISION_HINT, purpose="Cosmos Policy inference (its official get_model/get_action)"
        )
    if not module_present("torch"):
        raise DependencyNotInstalled(
            "torch (cosmos-policy's cu128 extra pins torch==2.7.0)", "uv sync --extra cu128 --group libero --python 3.10",
            purpose="Cosmos Policy inference",
        )


@attrs.frozen
class UpstreamAPI:
    """The upstream callables and modules the worker uses, nothing else."""

    get_model: Any
    get_action: Any
    load_dataset_stats: Any
    set_seed_everywhere: Any
    cosmos_utils: Any
    constants: Any

    @property
    def device(self) -> str:
        return str(getattr(self.cosmos_utils, "DEVICE", "unknown"))

    def install_t5_cache(self, embeddings: dict, device: str) -> None:
        """Fill the in-memory cache ``get_action`` reads; leave the write-back path unset
        so an instruction encoded on the fly never rewrites the pinned file."""
        cache = self.cosmos_utils.t5_text_embeddings_cache
        cache.clear()
        cache.update({k: v.to(device) for k, v in embeddings.items()})
        self.cosmos_utils.t5_text_embeddings_path_global = None


def import_api() -> UpstreamAPI:
    """Import the official package (torch comes with it). Call :func:`require_installed` first."""
    try:
        cosmos_utils = importlib.import_module(INFERENCE_MODULE)
        utils = importlib.import_module("cosmos_policy.utils.utils")
        constants = importlib.import_module("cosmos_policy.constants")
    except ImportError as exc:
        raise DependencyNotInstalled(
            f"{PINNED} (importing {INFERENCE_MODULE} failed: {exc})", INSTALL,
            purpose="Cosmos Policy inference",
        ) from exc
    api = UpstreamAPI(
        get_model=cosmos_utils.get_model,
        get_action=cosmos_utils.get_action,
        load_dataset_stats=cosmos_utils.load_dataset_stats,
        set_seed_everywhere=utils.set_seed_everywhere,
        cosmos_utils=cosmos_utils,
        constants=constants,
    )
    check_constants(api)
    return api


def check_constants(api: UpstreamAPI) -> None:
    """Upstream picks its chunk and dims from ``sys.argv`` (``constants.detect_robot_platform``
    looks for 'libero'/'robocasa'/'aloha'); a worker whose command line says otherwise would
    silently get ALOHA's 50x14 chunks. Refuse that at start-up."""
    from .libero_adapter import ACTION_DIM, CHUNK_SIZE, PROPRIO_DIM

    got = (api.constants.NUM_ACTIONS_CHUNK, api.constants.ACTION_DIM, api.constants.PROPRIO_DIM)
    if got != (CHUNK_SIZE, ACTION_DIM, PROPRIO_DIM):
        raise WorkerError(
            f"cosmos_policy.constants chose chunk/action/proprio {got}, LIBERO needs {(CHUNK_SIZE, ACTION_DIM, PROPRIO_DIM)}: "
            "upstream detects the platform from the command line; start the worker with 'libero' in its arguments "
            "(wam serve ... --platform libero) and not 'robocasa' or 'aloha'"
        )


def eval_config(files, options) -> SimpleNamespace:
    """The fields of upstream's ``PolicyEvalConfig`` that ``get_model``/``get_action`` read,
    set as upstream's LIBERO evaluation command sets them (``run_libero_eval.py`` usage:
    wrist image and proprio on, proprio normalised, actions un-normalised, JPEG compression,
    trained with image augmentation, chunk 16, images flipped by the caller).

    Built here rather than imported: ``PolicyEvalConfig`` lives in ``run_libero_eval.py``,
    whose import pulls in the LIBERO simulator, wandb and h5py, none of which a worker needs."""
    return SimpleNamespace(
        suite="libero",
        model_family="cosmos",
        config=EXPERIMENT,
        ckpt_path=str(files.checkpoint),
        config_file=CONFIG_FILE,
        use_third_person_image=True,
        num_third_person_images=1,
        use_wrist_image=True,
        num_wrist_images=1,
        use_proprio=True,
        flip_images=True,
        use_variance_scale=False,
        use_jpeg_compression=True,
        normalize_proprio=True,
        unnormalize_actions=True,
        dataset_stats_path=str(files.dataset_statistics),
        t5_text_embeddings_path=str(files.t5_embeddings),
        trained_with_image_aug=True,
        chunk_size=16,
        num_open_loop_steps=16,
        deterministic=bool(options.deterministic),
        randomize_seed=False,
        seed=int(options.sampling_seed),
        num_denoising_steps_action=int(options.denoising_steps),
    )


__all__ = [
    "DISTRIBUTION",
    "MODULE",
    "VERSION",
    "REVISION",
    "PINNED",
    "PROVISION",
    "INSTALL",
    "PROVISION_HINT",
    "UpstreamAPI",
    "require_installed",
    "installed_version",
    "import_api",
    "eval_config",
]
