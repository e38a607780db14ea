"""``wam doctor`` rows for StarWAM: the pins, the checkout, and (with ``--am-checkpoint``) every
file a deployment reads, each missing one named with the command that downloads it.

The core reports the presence of ``starwam`` and ``torch`` from ``ModelSpec.requires``;
nothing heavy is imported here. Backend options come through ``--am-option KEY=VALUE``
(``backbone=DIR``, ``checkpoint_family=...``, ``action_stats=...``, ``text_cache=...``);
``platform=robotwin`` checks the RoboTwin release (default: LIBERO).
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

from wamcore.checkpoints import sha256_file
from wamcore.doctor import DoctorCheck
from wamcore.errors import WamError

from . import upstream
from .checkpoint import pins, resolve, verify
from .normalization import load_stats
from .settings import Settings

OWNER = "model starwam"


def doctor_checks(options: Mapping[str, Any]) -> Iterator[DoctorCheck]:
    yield DoctorCheck(f"{OWNER}: upstream pins", True,
                      f"code {upstream.REPOSITORY} {upstream.ROBOTWIN_REVISION[:7]} (LIBERO audited at "
                      f"{upstream.LIBERO_REVISION[:7]}); weights {upstream.WEIGHTS_REPOSITORY}@{upstream.WEIGHTS_REVISION[:7]}")
    if upstream.module_available(upstream.MODULE):
        try:
            root = upstream.checkout_root(options.get("starwam_root"))
            robotwin = (root / "starwam" / "eval" / "policy.py").is_file()
            yield DoctorCheck(f"{OWNER}: checkout", True,
                              f"{root} ({'LIBERO and RoboTwin' if robotwin else 'LIBERO only: RoboTwin needs ' + upstream.ROBOTWIN_REVISION[:7]})")
        except WamError as exc:
            yield DoctorCheck(f"{OWNER}: checkout", False, str(exc), upstream.INSTALL)
    if options.get("backend") != "starwam":
        return  # the deployment's files are checked when StarWAM is the backend asked about
    checkpoint = options.get("checkpoint")
    if not checkpoint:
        yield DoctorCheck(f"{OWNER}: checkpoint", False,
                          "no --am-checkpoint given; a deployment needs the StarWAM release and the Wan2.2-TI2V-5B folder",
                          f"{upstream.DOWNLOAD}; {upstream.BACKBONE_DOWNLOAD}", level="warning")
        return
    platform = str(options.get("platform") or "libero")
    try:
        settings = Settings.from_options(platform, options)
        files = resolve(checkpoint, settings.family, backbone=settings.backbone, action_stats=settings.action_stats,
                        text_cache=settings.text_cache)
        pin_set = pins(settings.am_pins)
        if options.get("verify_hashes"):
            verify(files, pin_set)
        dims = (7, 8) if platform == "libero" else (14, 14)
        load_stats(files.stats, platform, action_dim=dims[0], state_dim=dims[1])
    except WamError as exc:
        yield DoctorCheck(f"{OWNER}: checkpoint", False, str(exc), f"{upstream.DOWNLOAD}; {upstream.BACKBONE_DOWNLOAD}")
        return
    listed = ", ".join(f"{name} ({path})" for name, path in sorted(files.names.items()))
    hashed = "sha256 verified where pinned" if options.get("verify_hashes") else "present (--verify-hashes hashes them)"
    yield DoctorCheck(f"{OWNER}: checkpoint", True, f"{settings.family.name} on {platform}: {listed}; {hashed}")
    loose = sorted(name for name in files.names if not pin_set.files.get(name))
    if loose:
        paths = {name: str(files.names[name]) for name in loose}
        yield DoctorCheck(
            f"{OWNER}: pins", False,
            f"no sha256 pinned for {', '.join(loose)} (ModelScope and Hugging Face publish none)"
            + (f"; stats sha256 {sha256_file(files.stats)[:12]}" if files.stats.is_file() else ""),
            "pin your download once, then pass --am-pins starwam-pins.json: python -c \"from wamcore.checkpoints "
            f"import write_pins; write_pins('starwam-pins.json', {paths!r})\"",
            level="warning",
        )


__all__ = ["doctor_checks"]
