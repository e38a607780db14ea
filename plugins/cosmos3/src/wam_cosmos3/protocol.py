"""The ``POST /v1/actions/generations`` envelope: the request we build, the answer we read.

Request (SGLang 0.5.18+; sgl-project/sglang
``python/sglang/multimodal_gen/runtime/entrypoints/action/protocol.py``
``_action_request_to_observation`` and, from 0.5.19, ``action/cosmos3.py``
``build_cosmos3_action_sampling_params``): ``input`` holds
the text and one image, ``parameters`` the generation options, ``runtime`` asks for the
envelope. We send one observation per request with a plain string prompt and a plain
string image, which every SGLang with the action router accepts (0.5.18 handles only one
image, and 0.5.19+ caps a batch at ``--batching-max-size``, default 1); RLinf sends
one-element lists, which 0.5.19+ treats the same.

Answer (``action/protocol.py`` ``action_generation_response``): ``data[i].action.values`` is
``[H, D]`` float32 (a numpy array in msgpack),
one entry per input image, ``H = num_frames - 1``, ``D = raw_action_dim``.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import numpy as np

from wamcore.errors import PredictionError, ProtocolError

from .settings import Cosmos3Settings

ACTIONS_PATH = "/v1/actions/generations"


def action_request(prompt: str, image_uri: str, settings: Cosmos3Settings, *, raw_action_dim: int, seed: Optional[int]) -> dict:
    """One policy request (the keys RLinf's adapter sends, values from ``settings``)."""
    return {
        "input": {"prompt": prompt, "input_reference": image_uri},
        "parameters": {
            "action_mode": "policy",
            "domain_name": settings.domain,
            "raw_action_dim": int(raw_action_dim),
            "num_frames": settings.num_frames,
            "fps": settings.fps,
            "action_fps": settings.action_fps,
            "action_view_point": settings.view_point,
            "num_inference_steps": settings.inference_steps,
            "seed": int(settings.seed if seed is None else seed),
            "height": settings.height,
            "width": settings.width,
        },
        "runtime": {"response_format": "envelope", "output_format": "numpy"},
    }


def action_values(response: Any, raw_action_dim: int) -> tuple:
    """(``[H, D]`` float array, envelope fields worth keeping) from a one-image answer."""
    data = response.get("data") if isinstance(response, Mapping) else None
    if not isinstance(data, list) or len(data) != 1 or not isinstance(data[0], Mapping):
        n = len(data) if isinstance(data, list) else "no"
        raise ProtocolError(f"SGLang's action answer must hold exactly one data entry for one image, got {n}")
    action = data[0].get("action")
    values = action.get("values") if isinstance(action, Mapping) else None
    if values is None:
        raise ProtocolError("SGLang's action answer has no data[0].action.values (was action_mode 'policy' served?)")
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ProtocolError("SGLang's data[0].action.values is not a numeric array") from None
    if arr.ndim == 3 and arr.shape[0] == 1:  # SGLang 0.5.18 keeps the pipeline's [1, H, D]
        arr = arr[0]
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < raw_action_dim:
        raise ProtocolError(f"SGLang's action values must be [H>=1, D>={raw_action_dim}], got shape {arr.shape}")
    if not np.isfinite(arr).all():
        bad = np.argwhere(~np.isfinite(arr))[:5].tolist()
        raise PredictionError([f"Cosmos3 returned NaN or inf at [step, channel] {bad}"], context="cosmos3")
    usage = response.get("usage") if isinstance(response.get("usage"), Mapping) else {}
    meta = {"sglang_id": str(response.get("id", "")), "horizon": int(arr.shape[0])}
    if "denoise_steps" in usage:
        meta["denoise_steps"] = int(usage["denoise_steps"])
    return arr, meta


__all__ = ["ACTIONS_PATH", "action_request", "action_values"]
