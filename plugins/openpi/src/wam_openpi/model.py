"""The "native model" of ``openpi-remote``: a client of a running openpi policy server.

The server owns the policy, its weights and its normalisation; the wamcore worker holds
none of them. At load it connects and checks the server's metadata against the layout of
the platform it serves (a wamcore server says what it serves; openpi's own say little, but
an ALOHA policy's ``reset_pose`` is caught). Each prediction is one request.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from wamcore import IncompatiblePairError, ModelConfig, PredictRequest
from wamcore.specs import normalize_id

from .client import OpenpiClient
from .layouts import LAYOUTS
from .settings import API_KEY_ENV, OpenpiSettings


class OpenpiRemoteModel:
    """Sends the requests the adapter built; returns the server's answers."""

    def __init__(self, client: OpenpiClient, checkpoint: str):
        self.client = client
        self.checkpoint = checkpoint
        self.timeout_s = client.timeout_s + client.open_timeout_s + 5.0  # a reconnect may precede the request
        self.details = {"openpi_endpoint": client.url, "openpi_metadata": dict(client.metadata or {})}

    def predict_native(self, native_input: Mapping[str, Any], request: PredictRequest) -> Mapping[str, Any]:
        return self.client.infer(native_input)

    def close(self) -> None:
        self.client.close()


def load(config: ModelConfig) -> OpenpiRemoteModel:
    settings = OpenpiSettings.from_options(config.options)
    layout = LAYOUTS[normalize_id(config.platform)]
    chunk = settings.chunk_for(layout)

    def check(metadata: Mapping[str, Any]) -> None:
        problems = layout.check_metadata(metadata, chunk)
        if problems:
            raise IncompatiblePairError(f"the openpi server at {settings.endpoint} does not fit openpi-remote on "
                                        f"{layout.platform}:", problems)

    client = OpenpiClient(settings.endpoint, api_key=os.environ.get(API_KEY_ENV) or None, timeout_s=settings.timeout,
                          check_metadata=check)
    client.connect()
    return OpenpiRemoteModel(client, config.checkpoint or settings.endpoint)


__all__ = ["OpenpiRemoteModel", "load"]
