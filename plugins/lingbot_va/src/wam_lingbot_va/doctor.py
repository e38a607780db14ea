"""``wam doctor`` rows for LingBot-VA: the pins, the checkout and flash-attn, and (with
``--am-checkpoint``) the weights folder, or (with ``--am-option lingbot_server=HOST:PORT``)
the running server's health route. Nothing heavy is imported here; the core reports the
packages of ``ModelSpec.requires``."""

from __future__ import annotations

from typing import Any, Iterator, Mapping

from wamcore.doctor import DoctorCheck
from wamcore.errors import WamError

from . import checkpoint, upstream
from .remote import check_health, parse_address

OWNER = "model lingbot-va"


def doctor_checks(options: Mapping[str, Any]) -> Iterator[DoctorCheck]:
    yield DoctorCheck(f"{OWNER}: upstream pins", True,
                      f"code {upstream.REPOSITORY} {upstream.REVISION[:7]} (the design's {upstream.DESIGN_REVISION} is not "
                      f"public); weights hf://{upstream.WEIGHTS_REPOSITORY}@{upstream.WEIGHTS_REVISION[:7]} (wam weights ls)")
    server = options.get("lingbot_server")
    if server:
        try:
            host, port = parse_address(server)
            check_health(host, port)
            yield DoctorCheck(f"{OWNER}: server", True, f"{host}:{port}/healthz answers 200")
        except WamError as exc:
            yield DoctorCheck(f"{OWNER}: server", False, str(exc), "start it: bash evaluation/robotwin/launch_server.sh")
        return
    try:
        root = upstream.checkout_root(options.get("lingbot_root"))
        yield DoctorCheck(f"{OWNER}: checkout", True, str(root))
    except WamError as exc:
        yield DoctorCheck(f"{OWNER}: checkout", False, str(exc), upstream.INSTALL, level="warning")
    if not (upstream.module_available("flash_attn") or upstream.module_available("flash_attn_interface")):
        yield DoctorCheck(f"{OWNER}: flash-attn", False,
                          f"wan_va/modules/model.py imports flash_attn unconditionally at {upstream.REVISION[:7]}",
                          "pip install flash-attn --no-build-isolation", level="warning")
    if options.get("backend") != "lingbot-va":
        return  # the deployment's files are checked when LingBot-VA is the backend asked about
    if not options.get("checkpoint"):
        yield DoctorCheck(f"{OWNER}: weights", False, "no --am-checkpoint given (or --am-option lingbot_server=...)",
                          upstream.DOWNLOAD, level="warning")
        return
    try:
        folder = checkpoint.resolve(options["checkpoint"], options.get("am_pins"),
                                    verify_hashes=bool(options.get("verify_hashes")))
    except WamError as exc:
        yield DoctorCheck(f"{OWNER}: weights", False, str(exc), upstream.DOWNLOAD)
        return
    marker = checkpoint.random_marker(folder)
    yield DoctorCheck(f"{OWNER}: weights", True,
                      f"{folder}: {', '.join(upstream.SUBFOLDERS)} present, safetensors"
                      + (" (RANDOM test weights)" if marker else ""))


__all__ = ["doctor_checks"]
