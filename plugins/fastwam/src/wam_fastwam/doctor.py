"""``wam doctor`` rows for Fast-WAM: the pinned upstream revisions (and what is installed), and,
with ``--am-checkpoint``, the deployment's files against their pins.

``--am-checkpoint`` ending in ``.yaml``/``.yml`` is checked as the LIBERO RLinf model YAML;
anything else as a RoboTwin checkpoint (``.pt`` or a folder holding the released one).
``--am-option text_cache=DIR`` adds a row for the text-embedding cache folder.
Nothing heavy is imported: presence via ``find_spec``, revisions from git metadata.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Mapping

from wamcore.doctor import DoctorCheck
from wamcore.errors import WamError

from . import upstream
from .checkpoint_files import (
    deployment_pins,
    find_dataset_stats,
    libero_files,
    robotwin_checkpoint_file,
    unpinned,
    verify_files,
)
from .normalization import load_dataset_stats
from .rlinf_config import load_rlinf_config
from .robotwin import ACTION_DIM as ROBOTWIN_DIM
from .text_cache import TextCache

NAME = "model fast-wam"


def doctor_checks(options: Mapping[str, Any]) -> Iterator[DoctorCheck]:
    yield DoctorCheck(
        f"{NAME}: upstream pins",
        True,
        f"LIBERO: {upstream.RLINF.label} with {upstream.FASTWAM_FOR_RLINF.label} "
        f"(get_model / predict_action_batch; RLinf PR #1398 public head {upstream.RLINF_PUBLIC_HEAD[:9]}); "
        f"RoboTwin: {upstream.FASTWAM_OFFICIAL.label} (official path, infer_action)",
    )
    checkpoint = options.get("checkpoint")
    libero = bool(checkpoint) and str(checkpoint).endswith((".yaml", ".yml"))
    if not upstream.module_available(upstream.RLINF.module):
        yield DoctorCheck(
            f"{NAME}: rlinf",
            False,
            f"not installed ({upstream.RLINF.label}: needed on LIBERO, not on RoboTwin)",
            upstream.RLINF.install,
            level="error" if libero else "warning",
        )
    for pin in (upstream.RLINF, upstream.FASTWAM_OFFICIAL):
        if not upstream.module_available(pin.module):
            continue  # absence is reported with the install command (above, or the requirement rows)
        installed = upstream.installed_revision(pin.module)
        ok = upstream.revision_matches(installed, pin.revision)
        detail = f"installed at {installed[:9]}, pinned {pin.revision[:7]}" if installed else (
            f"installed, revision unknown (not a git checkout); pinned {pin.revision[:7]}"
        )
        yield DoctorCheck(f"{NAME}: {pin.name} revision", ok, detail, "" if ok else pin.install, level="warning")
    if checkpoint:
        yield from _checkpoint_checks(str(checkpoint), bool(options.get("verify_hashes")))
    if options.get("text_cache"):  # --am-option text_cache=DIR
        yield _text_cache_check(str(options["text_cache"]))


def _text_cache_check(folder: str) -> DoctorCheck:
    """The ``--text-cache`` folder: entries present (hashed; nothing is loaded)."""
    try:
        identity = TextCache(folder).identity
    except WamError as exc:
        return DoctorCheck(f"{NAME}: text cache", False, str(exc))  # the message says how to make entries
    return DoctorCheck(f"{NAME}: text cache", True, f"{identity['entries']} entries in {folder} (sha256 "
                       f"{identity['sha256'][:12]}); the UMT5-XXL is not loaded, an instruction without an entry is an error")


def _checkpoint_checks(checkpoint: str, verify_hashes: bool) -> Iterator[DoctorCheck]:
    pins = deployment_pins()
    try:
        if checkpoint.endswith((".yaml", ".yml")):
            cfg = load_rlinf_config(checkpoint)
            files = list(libero_files(cfg))
            what = f"LIBERO RLinf YAML {Path(checkpoint).name} (num_action_chunks {cfg.num_action_chunks})"
        else:
            ckpt = robotwin_checkpoint_file(checkpoint)
            files = [ckpt, find_dataset_stats(ckpt)]
            load_dataset_stats(files[1], dim=ROBOTWIN_DIM)
            what = "RoboTwin checkpoint"
        verify_files(files, pins, verify_hashes=verify_hashes)
    except WamError as exc:
        yield DoctorCheck(f"{NAME}: checkpoint", False, str(exc))
        return
    hashed = "sha256 verified where pinned" if verify_hashes else "present (pass --verify-hashes to hash them)"
    yield DoctorCheck(f"{NAME}: checkpoint", True, f"{what}: {', '.join(str(f) for f in files)} {hashed}")
    loose = unpinned(files, pins)
    if loose:
        paths = {f.name: str(f) for f in files}
        yield DoctorCheck(
            f"{NAME}: checkpoint pins",
            False,
            f"no sha256 pinned for {', '.join(loose)} ({pins.source} publishes no revision or hashes)",
            "pin your download, then pass --am-pins fastwam-pins.json: python -c \"from wamcore.checkpoints import "
            f"write_pins; write_pins('fastwam-pins.json', {paths!r})\"",
            level="warning",
        )


__all__ = ["doctor_checks"]
