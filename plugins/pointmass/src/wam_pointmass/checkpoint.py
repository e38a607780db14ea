"""Which weights file to load and which sha256 it must have (no torch here).

The package ships three weights files, pinned in ``SHIPPED``: one per task family
(``--weights reach``, the default, and ``--weights pit``), and ``--weights reach-rtc``, the
reach family's trained to also condition on an action prefix (``--execution rtc``). Another file
(``--am-checkpoint FILE`` or a directory holding ``pointmass_wam.safetensors``) needs a pin
too, from the first of: ``--weights-sha256 HEX``; a ``pins.json`` beside it (``python -m
wam_pointmass.train`` writes one, in wamcore's pin-file format); or being byte-identical
to a shipped file. A file without a pin, or whose hash differs from its pin, is a
:class:`~wamcore.errors.CheckpointError` raised before anything is deserialised.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Tuple

from wamcore.checkpoints import Pins, sha256_file
from wamcore.errors import CheckpointError

WEIGHTS_NAME = "pointmass_wam.safetensors"
PINS_NAME = "pins.json"
FORMAT = "wam-pointmass/1"
#: the one safetensors metadata key; safetensors writes metadata from a hash map in random
#: order, so a single key holding canonical JSON keeps the file byte-reproducible
METADATA_KEY = "wam_pointmass"
SHIPPED_SHA256 = "4e37451d824508eed064706dbe1f04aa505602bb5a7fb4f8c8ce26ed553f6dd2"
#: task family -> (file name in ``weights/``, pinned sha256)
SHIPPED = {
    "reach": (WEIGHTS_NAME, SHIPPED_SHA256),
    "pit": ("pointmass_wam_pit.safetensors", "f1e2318bbdf302198c3d13a34162bd61af34135bcab3ae5a56289995e0fc21df"),
    "reach-rtc": ("pointmass_wam_rtc.safetensors", "a683bdbd1c569f12a34ccbbccb0d85466b496944f5bf0848e581a93672f23277"),
}


def shipped_weights(family: str = "reach") -> Path:
    if family not in SHIPPED:
        raise CheckpointError(f"no shipped pointmass-wam weights for {family!r}; there are: {', '.join(SHIPPED)}")
    return Path(__file__).resolve().parent / "weights" / SHIPPED[family][0]


def weights_path(checkpoint: Optional[str], family: str = "reach") -> Path:
    """The weights file named by ``--am-checkpoint`` (a file or a directory), or the shipped
    one for ``family``."""
    if checkpoint is None:
        return shipped_weights(family)
    path = Path(checkpoint).expanduser()
    if path.is_dir():
        path = path / WEIGHTS_NAME
    if not path.is_file():
        raise CheckpointError(f"pointmass-wam weights {path} do not exist (expected a .safetensors file or a directory holding {WEIGHTS_NAME})")
    return path


def network_config(path: Path) -> dict:
    """The network configuration stored in a weights file's safetensors header (read
    without torch; nothing else of the file is read). Its ``prefix`` key: the network
    conditions on an action prefix."""
    try:
        with open(path, "rb") as f:
            header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
        return json.loads((header.get("__metadata__") or {}).get(METADATA_KEY, "{}")).get("config") or {}
    except (OSError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"{path} is not a readable safetensors file: {exc}") from exc


def expected_sha256(path: Path, explicit: Optional[str] = None) -> Tuple[str, str]:
    """(pinned sha256, where the pin came from)."""
    if explicit:
        return explicit.strip().lower(), "--weights-sha256"
    shipped = {shipped_weights(family): sha for family, (_, sha) in SHIPPED.items()}
    if path.resolve() in shipped:
        return shipped[path.resolve()], "the pin shipped with wam-pointmass"
    pins_file = path.parent / PINS_NAME
    if pins_file.is_file():
        pinned = Pins.load(pins_file).files.get(path.name)
        if pinned:
            return pinned.lower(), str(pins_file)
    actual = sha256_file(path)
    if actual in shipped.values():
        return actual, "the pin shipped with wam-pointmass"
    raise CheckpointError(
        f"no sha256 pin for {path}: pass --weights-sha256 HEX, or put a {PINS_NAME} beside it "
        f"(python -m wam_pointmass.train writes one; wamcore.checkpoints.write_pins makes one)"
    )


def verified_weights(checkpoint: Optional[str], explicit_sha256: Optional[str] = None, family: str = "reach") -> Tuple[Path, str]:
    """The weights file and its sha256, after checking it against its pin."""
    path = weights_path(checkpoint, family)
    if not path.is_file():
        raise CheckpointError(f"the shipped weights {path} are missing: reinstall wam-pointmass")
    pinned, source = expected_sha256(path, explicit_sha256)
    actual = sha256_file(path)
    if actual != pinned:
        raise CheckpointError(f"{path}: sha256 {actual} does not match the pinned {pinned} (pin from {source})")
    return path, actual


__all__ = ["WEIGHTS_NAME", "PINS_NAME", "FORMAT", "METADATA_KEY", "network_config", "SHIPPED_SHA256", "SHIPPED", "shipped_weights", "weights_path", "verified_weights"]
