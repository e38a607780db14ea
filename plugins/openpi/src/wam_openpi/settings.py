"""The ``openpi-remote`` backend's options and the deployment settings they make."""

from __future__ import annotations

import os
from typing import Any, Mapping, Optional

import attrs

from wamcore import ConfigurationError, Option

ENDPOINT_ENV = "WAM_OPENPI_ENDPOINT"
#: the policy server's api key: read from the environment only, so it never shows on a command line
API_KEY_ENV = "WAM_OPENPI_API_KEY"
DEFAULT_ENDPOINT = "ws://127.0.0.1:8000"  # openpi's scripts/serve_policy.py port
PREFIX = "openpi_"


@attrs.frozen
class OpenpiSettings:
    endpoint: str = DEFAULT_ENDPOINT
    chunk: Optional[int] = None  # None: the layout's default
    image_size: Optional[int] = None  # None: the layout's default; 0: as rendered
    timeout: float = 300.0

    def __attrs_post_init__(self):
        if not self.endpoint.startswith(("ws://", "wss://")):
            hint = " (tcp:// is a wamcore worker: give it to --am-endpoint)" if self.endpoint.startswith("tcp://") else ""
            raise ConfigurationError(f"--openpi-endpoint must be ws://HOST:PORT or wss://HOST:PORT, got {self.endpoint!r}{hint}")
        if self.chunk is not None and self.chunk < 1:
            raise ConfigurationError(f"--openpi-chunk must be >= 1, got {self.chunk}")
        if self.image_size is not None and self.image_size < 0:
            raise ConfigurationError(f"--openpi-image-size must be >= 0 (0: as rendered), got {self.image_size}")
        if self.timeout <= 0:
            raise ConfigurationError(f"--openpi-timeout must be > 0, got {self.timeout}")

    def chunk_for(self, layout) -> int:
        return self.chunk or layout.default_chunk

    def image_size_for(self, layout) -> int:
        return layout.default_image_size if self.image_size is None else self.image_size

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> "OpenpiSettings":
        """From ``ModelConfig.options``; values given as text (``--am-option``) are converted."""
        values = {k[len(PREFIX):]: v for k, v in options.items() if k.startswith(PREFIX) and v is not None}
        endpoint = values.pop("endpoint", None) or os.environ.get(ENDPOINT_ENV) or DEFAULT_ENDPOINT
        kinds = {"chunk": int, "image_size": int, "timeout": float}
        unknown = sorted(set(values) - set(kinds))
        if unknown:
            raise ConfigurationError(f"unknown openpi option(s): {', '.join('--openpi-' + u.replace('_', '-') for u in unknown)}")
        try:
            typed = {k: kinds[k](v) for k, v in values.items()}
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"openpi options: {exc}") from None
        return cls(endpoint=str(endpoint), **typed)


OPTIONS = (
    Option("openpi-endpoint", "str", None,
           f"ws://HOST:PORT of the openpi policy server (default ${ENDPOINT_ENV}, else {DEFAULT_ENDPOINT}). "
           f"Its api key, if it needs one, comes from ${API_KEY_ENV}."),
    Option("openpi-chunk", "int", None,
           "Actions executed per prediction: the first N of the served chunk (default: LIBERO 5, the replan_steps of "
           "openpi's LIBERO example; RoboTwin 50, the pi0_step of RoboTwin's openpi policy)."),
    Option("openpi-image-size", "int", None,
           "Cameras resized with padding to NxN before they are sent, as openpi-client's resize_with_pad; 0 sends "
           "them as rendered (default: LIBERO 224, as openpi's LIBERO example; RoboTwin 0, as RoboTwin's policy)."),
    Option("openpi-timeout", "float", 300.0,
           "Seconds to wait for one answer (a JAX policy compiles on its first call)."),
)

__all__ = ["OpenpiSettings", "OPTIONS", "ENDPOINT_ENV", "API_KEY_ENV", "DEFAULT_ENDPOINT"]
