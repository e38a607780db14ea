"""Which checkpoint and dataset-stats files a Fast-WAM deployment uses, and their pins.

The released files (HF ``yuanty/fastwam``: ``libero_uncond_2cam224.pt``,
``robotwin_uncond_3cam_384.pt`` and a ``<stem>_dataset_stats.json`` beside each;
FastWAM ``README.md``) are named in the shipped pin file
``pins/fastwam.json``. The upstream README gives no revision and the files could not be
downloaded where this plugin was written, so their sha256 are ``null`` (presence only) until a
user pins their download: ``wamcore.checkpoints.write_pins`` writes a pin file, and
``--am-pins FILE`` adds its entries to (or replaces) the shipped ones. A pinned hash that does
not match is a start-up :class:`CheckpointError` naming the file.

Stats are found the way RLinf's ``_resolve_dataset_stats_path`` looks for them
(RL#1398 ``rlinf/models/embodiment/fastwam/__init__.py``): an explicit path, else
``<checkpoint stem>_dataset_stats.json``
beside the checkpoint, else ``dataset_stats.json`` in up to four parent folders. Unlike RLinf,
an explicit path that does not exist is an error rather than a silent fallback, and the path
found is handed on explicitly, so the model loads exactly the file that was verified.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple, Union

from wamcore.checkpoints import Pins, verify_directory
from wamcore.errors import CheckpointError

from .rlinf_config import RLinfModelConfig

PIN_FILE = "fastwam.json"
LIBERO_CHECKPOINT = "libero_uncond_2cam224.pt"
ROBOTWIN_CHECKPOINT = "robotwin_uncond_3cam_384.pt"
STATS_SUFFIX = "_dataset_stats.json"
PARENT_STATS = "dataset_stats.json"


def shipped_pins() -> Pins:
    """The pin file that ships with the plugin."""
    with resources.as_file(resources.files("wam_fastwam") / "pins" / PIN_FILE) as path:
        return Pins.load(path)


def deployment_pins(extra: Union[str, Path, None] = None) -> Pins:
    """The shipped pins, extended by the user's pin file (``--am-pins``) when given."""
    return shipped_pins().extended(Pins.load(extra) if extra else None)


def stats_candidates(checkpoint: Path) -> List[Path]:
    return [checkpoint.with_name(checkpoint.stem + STATS_SUFFIX)] + [
        parent / PARENT_STATS for parent in list(checkpoint.parents)[:4]
    ]


def find_dataset_stats(checkpoint: Path, explicit: Optional[Path] = None) -> Path:
    """The dataset stats of ``checkpoint`` (see the module docstring for the search order)."""
    if not checkpoint.is_file():
        raise CheckpointError(f"checkpoint file {checkpoint} does not exist")
    if explicit is not None:
        if not explicit.is_file():
            raise CheckpointError(f"dataset stats file {explicit} does not exist (given explicitly)")
        return explicit
    tried = stats_candidates(checkpoint)
    for path in tried:
        if path.is_file():
            return path
    raise CheckpointError(
        f"no dataset stats found for {checkpoint.name}: expected {tried[0].name} beside it or {PARENT_STATS} "
        f"in a parent folder (tried: {', '.join(str(p) for p in tried)}); pass --dataset-stats FILE"
    )


def libero_files(cfg: RLinfModelConfig, dataset_stats: Optional[str] = None) -> Tuple[Path, Path]:
    """(checkpoint, dataset stats) of a LIBERO deployment: the YAML's ``model_path``; the
    ``--dataset-stats`` option over the YAML's ``dataset_stats_path``, else the sibling stats."""
    model_path = cfg.model_path()
    explicit = Path(dataset_stats).expanduser() if dataset_stats else cfg.dataset_stats_path()
    return model_path, find_dataset_stats(model_path, explicit)


def robotwin_checkpoint_file(path: Union[str, Path, None]) -> Path:
    """``--am-checkpoint`` for RoboTwin: the ``.pt`` file, or a folder holding the released one."""
    if path is None:
        raise CheckpointError(
            f"Fast-WAM on RoboTwin needs --am-checkpoint: the checkpoint .pt, or a folder holding {ROBOTWIN_CHECKPOINT} "
            f"and {ROBOTWIN_CHECKPOINT.replace('.pt', STATS_SUFFIX)} (from {shipped_pins().source})"
        )
    p = Path(path).expanduser()
    return p / ROBOTWIN_CHECKPOINT if p.is_dir() else p


def verify_files(files: Iterable[Path], pins: Pins, *, verify_hashes: bool = True) -> Dict[str, Path]:
    """Check that every file exists and matches its pin (when it has a hash); one error naming
    every problem. Files whose names are not pinned are checked for presence only."""
    by_dir: Dict[Path, Dict[str, Optional[str]]] = {}
    for f in files:
        by_dir.setdefault(f.parent, {})[f.name] = pins.files.get(f.name)
    found: Dict[str, Path] = {}
    problems = []
    for directory, names in by_dir.items():
        try:
            found.update(verify_directory(directory, Pins(files=names, source=pins.source), verify_hashes=verify_hashes))
        except CheckpointError as exc:
            problems.append(str(exc))
    if problems:
        raise CheckpointError("\n".join(problems))
    return found


def unpinned(files: Iterable[Path], pins: Pins) -> List[str]:
    """Names among ``files`` whose sha256 is not pinned (reported by ``wam doctor``)."""
    return [f.name for f in files if not pins.files.get(f.name)]


__all__ = [
    "shipped_pins",
    "deployment_pins",
    "find_dataset_stats",
    "stats_candidates",
    "robotwin_checkpoint_file",
    "libero_files",
    "verify_files",
    "unpinned",
    "LIBERO_CHECKPOINT",
    "ROBOTWIN_CHECKPOINT",
]
