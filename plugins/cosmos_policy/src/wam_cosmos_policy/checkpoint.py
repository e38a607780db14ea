"""The checkpoint directory this plugin needs, its pins, and the start-up check.

A LIBERO checkpoint directory holds the three files of the upstream release
``nvidia/Cosmos-Policy-LIBERO-Predict2-2B`` (NVlabs/cosmos-policy ``LIBERO.md``; the directory
layout is the one RPent's server used, RLinf/RPent
``rpent/robots/components/cosmos_policy/server.py``): the policy weights, the dataset statistics
used to normalise proprio and un-normalise actions, and the T5 instruction embeddings.

Upstream downloads them with no revision pinned, so the shipped pin file
(``pins/libero.json``) names the files and leaves their sha256 open. Users pin their own
download once (``wam cosmos-policy-pin DIR``) and pass the result with ``--am-pins`` (or
``$WAM_COSMOS_POLICY_PINS``): its entries add to or replace the shipped ones, and every
start-up then checks every file against its hash, naming any file that differs.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Union

import attrs
import numpy as np

from wamcore.checkpoints import Pins, verify_directory, write_pins
from wamcore.errors import CheckpointError

from .libero_adapter import ACTION_DIM, PROPRIO_DIM

CHECKPOINT_FILE = "Cosmos-Policy-LIBERO-Predict2-2B.pt"
DATASET_STATISTICS_FILE = "libero_dataset_statistics.json"
T5_EMBEDDINGS_FILE = "libero_t5_embeddings.pkl"
#: statistics ``get_action`` reads (``rescale_proprio``, ``unnormalize_actions``) and their length
STATISTICS = {"actions_min": ACTION_DIM, "actions_max": ACTION_DIM, "proprio_min": PROPRIO_DIM, "proprio_max": PROPRIO_DIM}
WHAT = "Cosmos Policy LIBERO checkpoint"


def shipped_pins() -> Pins:
    return Pins.load(resources.files(__package__) / "pins" / "libero.json")


def pins(user_pins: Union[str, Path, None] = None) -> Pins:
    """The shipped pins, extended by the user's pin file when one is given."""
    base = shipped_pins()
    return base.extended(Pins.load(user_pins)) if user_pins else base


@attrs.frozen
class CheckpointFiles:
    """The verified files of one checkpoint directory (absolute paths)."""

    directory: Path
    checkpoint: Path
    dataset_statistics: Path
    t5_embeddings: Path


def verify(
    directory: Union[str, Path, None],
    user_pins: Union[str, Path, None] = None,
    *,
    verify_hashes: bool = True,
) -> CheckpointFiles:
    """Every pinned file present (and matching its sha256 where pinned), statistics usable.

    Raises :class:`CheckpointError` naming each file at fault. Needs neither torch nor the
    upstream package, so it runs before either is imported."""
    found = verify_directory(directory, pins(user_pins), verify_hashes=verify_hashes, what=WHAT)
    files = CheckpointFiles(
        directory=Path(directory).expanduser().resolve(),
        checkpoint=found[CHECKPOINT_FILE].resolve(),
        dataset_statistics=found[DATASET_STATISTICS_FILE].resolve(),
        t5_embeddings=found[T5_EMBEDDINGS_FILE].resolve(),
    )
    check_dataset_statistics(files.dataset_statistics)
    return files


def check_dataset_statistics(path: Path) -> None:
    """The statistics upstream's ``get_action`` divides by: present, right length, finite,
    and a non-empty proprio range (an empty one turns normalised proprio into NaN)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{Path(path).name}: not readable as JSON ({exc})") from exc
    problems = []
    arrays = {}
    for key, n in STATISTICS.items():
        if not isinstance(data, dict) or key not in data:
            problems.append(f"missing {key!r}")
            continue
        try:
            arr = np.asarray(data[key], dtype=np.float64)
        except (TypeError, ValueError):
            problems.append(f"{key!r} is not a numeric list")
            continue
        if arr.shape != (n,):
            problems.append(f"{key!r} must have {n} values, has shape {arr.shape}")
        elif not np.isfinite(arr).all():
            problems.append(f"{key!r} is not finite")
        else:
            arrays[key] = arr
    if "proprio_min" in arrays and "proprio_max" in arrays and not (arrays["proprio_max"] > arrays["proprio_min"]).all():
        problems.append("proprio_max must exceed proprio_min in every dimension")
    if "actions_min" in arrays and "actions_max" in arrays and not (arrays["actions_max"] >= arrays["actions_min"]).all():
        problems.append("actions_max must not be below actions_min")
    if problems:
        raise CheckpointError(f"{Path(path).name} ({path}) is not usable: " + "; ".join(problems))


def write_user_pins(directory: Union[str, Path], out: Union[str, Path], source: str = "") -> Pins:
    """Hash the pinned files of ``directory`` into a pin file at ``out`` (for ``--am-pins``)."""
    root = Path(directory).expanduser()
    names = sorted(shipped_pins().files)
    missing = [n for n in names if not (root / n).is_file()]
    if missing:
        raise CheckpointError(f"cannot pin {root}: missing {', '.join(missing)}")
    return write_pins(out, {n: root / n for n in names}, source=source or shipped_pins().source.split(" ")[0])


__all__ = [
    "CHECKPOINT_FILE",
    "DATASET_STATISTICS_FILE",
    "T5_EMBEDDINGS_FILE",
    "CheckpointFiles",
    "pins",
    "shipped_pins",
    "verify",
    "check_dataset_statistics",
    "write_user_pins",
]
