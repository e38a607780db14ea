"""Camera views -> the one image Cosmos3's LIBERO model was trained on, as a PNG data URI.

Orientation. wamcore's LIBERO observation is robosuite's render flipped vertically once
(``raw[::-1]``, top-left origin; ``wam_libero.spec``). RLinf's LIBERO env, whose frames
the Cosmos3 LIBERO evaluation feeds to SGLang, rotates both views by 180 degrees instead
(``raw[::-1, ::-1]``: RL#1487 ``rlinf/envs/libero/utils.py`` ``get_libero_image`` and
``get_libero_wrist_image``, "rotate 180 degrees to match train preprocessing"), and the
RLinf adapter adds no flip of its own. The model's input is therefore wamcore's view
mirrored left-right, each view on its own, before they are put side by side (mirroring
the composite would swap the views).

Layout and size (RL#1487 ``rlinf/models/embodiment/cosmos3/sglang_adapter.py``
``_encode_images``/``_resize_reflect_pad``):
third-person view on the left, wrist on the right; scaled by ``min(W/w, H/h, 1)`` (aspect
kept, never enlarged, sizes rounded half up) with PIL bicubic; padded at the bottom, then
on the right, by numpy ``reflect``, or by ``edge`` when a pad is at least as large as the
content it extends. With two 256x256 views and 320x192: 256x512 -> 160x320 -> 32 rows of
reflection. SGLang's own cover-resize and centre crop (sgl-project/sglang
``python/sglang/multimodal_gen/runtime/utils/vision.py`` ``preprocess_image``) are then no-ops.
"""

from __future__ import annotations

import base64
import io

import numpy as np


def to_model_orientation(view: np.ndarray) -> np.ndarray:
    """wamcore's top-left-origin view -> the orientation Cosmos3's LIBERO model expects."""
    return view[:, ::-1]


def compose_views(third_person: np.ndarray, wrist: np.ndarray) -> np.ndarray:
    """Side by side, third person on the left (both ``HxWx3`` of one size)."""
    if third_person.shape != wrist.shape:
        raise ValueError(f"views must have one shape to be composed, got {third_person.shape} and {wrist.shape}")
    return np.concatenate([third_person, wrist], axis=1)


def fit_to_canvas(image: np.ndarray, width: int, height: int) -> np.ndarray:
    """Scale down keeping the aspect (never up), then pad bottom and right to HxW."""
    from PIL import Image

    h, w = image.shape[:2]
    scale = min(width / w, height / h, 1.0)
    nh = max(1, min(int(scale * h + 0.5), height))
    nw = max(1, min(int(scale * w + 0.5), width))
    if (nh, nw) != (h, w):
        image = np.asarray(Image.fromarray(np.ascontiguousarray(image)).resize((nw, nh), resample=Image.BICUBIC))
    pad_h, pad_w = height - nh, width - nw
    mode = "edge" if (0 < pad_w and pad_w >= nw) or (0 < pad_h and pad_h >= nh) else "reflect"
    if pad_h > 0:
        image = np.pad(image, ((0, pad_h), (0, 0), (0, 0)), mode=mode)
    if pad_w > 0:
        image = np.pad(image, ((0, 0), (0, pad_w), (0, 0)), mode=mode)
    return np.ascontiguousarray(image, dtype=np.uint8)


def png_data_uri(image: np.ndarray) -> str:
    """``data:image/png;base64,...`` (lossless, so SGLang decodes these exact pixels)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(image)).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


__all__ = ["to_model_orientation", "compose_views", "fit_to_canvas", "png_data_uri"]
