"""The model side: the client loop (``session``) in front of upstream's ``VA_Server``, loaded in
this worker, or of a running LingBot-VA websocket server (``--lingbot-server``).

Start-up order: options, then the weights folder and its pins, then the upstream packages and
the checkout, then the weights; each failure a typed error that says what to do. torch and
upstream are imported only here, in the model's environment.
"""

from __future__ import annotations

from pathlib import Path

from wamcore.errors import ConfigurationError
from wamcore.specs import ModelConfig, normalize_id

from . import checkpoint, upstream
from .remote import WebsocketServer
from .robotwin import PLATFORM
from .session import LingbotModel
from .settings import Settings


def load(config: ModelConfig) -> LingbotModel:
    """``ModelSpec.load``: the native model for ``config.platform``."""
    if normalize_id(config.platform) != PLATFORM:
        raise ConfigurationError(f"LingBot-VA has no adapter for {config.platform!r}: it serves robotwin (end-effector "
                                 f"control) only; the pinned {upstream.REVISION[:7]} has no LIBERO inference path")
    settings = Settings.from_options(config.options, config.checkpoint)
    details = {"upstream": upstream.LABEL, "config": upstream.CONFIG_NAME}
    if settings.server:
        server = WebsocketServer(*settings.server, timeout_s=settings.server_timeout)
        details.update(deployment="websocket client", server=server.uri, server_metadata=server.metadata,
                       noise="drawn by the remote server (a request seed does not reach it)")
        return LingbotModel(server, details=details)
    folder = checkpoint.resolve(config.checkpoint, settings.am_pins)
    upstream.require(f"LingBot-VA's VA_Server ({upstream.REVISION[:7]})")
    root = upstream.checkout_root(settings.lingbot_root)

    import torch

    device = settings.device or config.device or ("cuda" if torch.cuda.is_available() else "cpu")
    server = upstream.build_server(root, folder, device=device, save_root=Path(settings.save_root),
                                   overrides=settings.overrides())
    job = server.job_config
    details.update(
        deployment="in-process VA_Server", checkout=str(root), checkpoint=str(folder), save_root=settings.save_root,
        num_inference_steps=job.num_inference_steps, action_num_inference_steps=job.action_num_inference_steps,
        guidance_scale=job.guidance_scale, action_guidance_scale=job.action_guidance_scale,
        dtype=str(job.param_dtype).replace("torch.", ""), random_test_weights=checkpoint.random_marker(folder),
        noise="torch.manual_seed(chunk_seed(request seed, chunk)) before each chunk; unseeded requests draw freely",
    )
    return LingbotModel(server, details=details, device=str(server.device), seed_noise=torch.manual_seed)


__all__ = ["load"]
