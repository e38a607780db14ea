"""Cosmos3's adapter for the ``libero`` platform (LIBERO and the LIBERO-Pro suites).

``encode``: mirror both views into the model's orientation, put them side by side, fit
them to the configured canvas, and build the policy request with the two-view prompt.
``decode``: read the action values and restore a LIBERO ``libero.osc_pose.delta.v1``
chunk (``wam_cosmos3.actions``). Cosmos3's policy reads no proprioception, so the
contract asks for no state. The cameras are declared at 256x256, the size RLinf's
Cosmos3 LIBERO evaluation renders (RL#1487 ``examples/embodiment/config/env/libero_spatial.yaml``).
"""

from __future__ import annotations

import functools
from typing import Any

from wam_libero.spec import ACTION_SPACE, LIBERO_CONTROL, PLATFORM
from wamcore import Adapter, AdapterContract, PredictRequest, Prediction

from . import actions, images, protocol
from .settings import Cosmos3Settings

CAMERA_SIZE = (256, 256)

#: Appended to the task when both views are sent (RLinf ``_augment_prompt``): the first
#: sentence is SGLang's concat_view framing, the second NVIDIA/cosmos-framework's LIBERO
#: ``additional_view_description`` (its LIBERO dataset, ``libero_lerobot_dataset.py``).
TWO_VIEW_SENTENCES = (
    " This video contains concatenated views from multiple camera perspectives."
    " The left half shows the third-person view; the right half shows the wrist-mounted camera."
)


def two_view_prompt(task: str) -> str:
    """The task as one sentence ending in '.', then the two-view description."""
    text = task.rstrip()
    if not text.endswith("."):
        text += "."
    return text + TWO_VIEW_SENTENCES


def composed_image(request: PredictRequest, settings: Cosmos3Settings):
    """The exact pixels sent to SGLang (HxWx3 uint8, H, W from ``--cosmos3-size``)."""
    views = request.observation.images
    side_by_side = images.compose_views(
        images.to_model_orientation(views["primary"]), images.to_model_orientation(views["wrist"])
    )
    return images.fit_to_canvas(side_by_side, settings.width, settings.height)


@functools.lru_cache(maxsize=8)
def stats_for(path, normalization: str):
    """Statistics read once per worker (``load`` reads them first, to fail at start-up)."""
    return actions.load_stats(path, normalization)


def libero_adapter(settings: Cosmos3Settings) -> Adapter:
    """The adapter for one deployment's settings."""

    def encode(request: PredictRequest) -> dict:
        uri = images.png_data_uri(composed_image(request, settings))
        prompt = two_view_prompt(request.effective_instruction)
        return protocol.action_request(prompt, uri, settings, raw_action_dim=actions.RAW_ACTION_DIM, seed=request.seed)

    def decode(response: Any, request: PredictRequest) -> Prediction:
        values, meta = protocol.action_values(response, actions.RAW_ACTION_DIM)
        stats = stats_for(settings.action_stats, settings.action_normalization)
        chunk, clipped = actions.restore(values, stats, LIBERO_CONTROL, settings.chunk_size)
        return Prediction(actions=chunk, info={**meta, "clipped_values": clipped})

    horizon = settings.horizon if settings.horizon >= settings.chunk_size else None
    contract = AdapterContract(
        platform=PLATFORM,
        action_space=ACTION_SPACE,
        action_dim=LIBERO_CONTROL.action_dim,
        cameras={"primary": CAMERA_SIZE, "wrist": CAMERA_SIZE},
        state={},
        chunk_size=settings.chunk_size,
        horizon=horizon,
    )
    return Adapter(contract=contract, encode=encode, decode=decode)


__all__ = ["libero_adapter", "two_view_prompt", "composed_image", "stats_for", "TWO_VIEW_SENTENCES", "CAMERA_SIZE"]
