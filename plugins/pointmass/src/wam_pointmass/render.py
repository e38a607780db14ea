"""Top-down camera of the arena, drawn with numpy.

The static part (floor and targets) is drawn once per episode; a frame is a copy of it with
the mass drawn on top, touching only a small window, so rendering costs microseconds.
Discs are anti-aliased (pixel coverage from the distance to the edge), so the image moves
smoothly with sub-pixel motion: a model can read positions finer than a pixel.
"""

from __future__ import annotations

from typing import Iterable, Optional, Tuple

import numpy as np

from .spec import AGENT_COLOUR, AGENT_RADIUS, ARENA, FLOOR_COLOUR, IMAGE_SIZE, TARGET_RADIUS

PIXELS_PER_METRE = IMAGE_SIZE / (2.0 * ARENA)


def to_pixel(xy) -> Tuple[float, float]:
    """Arena (x right, y up, metres) -> image (row, column) of the pixel centre grid.

    Row 0 is the top of the picture (y = +ARENA), column 0 the left (x = -ARENA)."""
    x, y = float(xy[0]), float(xy[1])
    col = (x + ARENA) * PIXELS_PER_METRE - 0.5
    row = (ARENA - y) * PIXELS_PER_METRE - 0.5
    return row, col


def locate_mass(image: np.ndarray) -> Optional[np.ndarray]:
    """Arena (x, y) of the white mass in a camera frame, real or predicted: the centroid of
    its whiteness (no target, floor or pit has a channel above 60); None if none is seen."""
    whiteness = np.clip((image.min(-1).astype(np.float32) - 100.0) / 155.0, 0.0, 1.0)
    total = float(whiteness.sum())
    if total <= 0.0:
        return None
    rows, cols = np.indices(whiteness.shape, dtype=np.float32)
    row, col = float((rows * whiteness).sum()) / total, float((cols * whiteness).sum()) / total
    return np.array([(col + 0.5) / PIXELS_PER_METRE - ARENA, ARENA - (row + 0.5) / PIXELS_PER_METRE])


def draw_disc(canvas: np.ndarray, centre_xy, radius_m: float, colour) -> None:
    """Blend an anti-aliased disc into ``canvas`` (HxWx3 uint8) in place."""
    row, col = to_pixel(centre_xy)
    r = radius_m * PIXELS_PER_METRE
    h, w = canvas.shape[:2]
    r0, r1 = max(int(np.floor(row - r - 1)), 0), min(int(np.ceil(row + r + 2)), h)
    c0, c1 = max(int(np.floor(col - r - 1)), 0), min(int(np.ceil(col + r + 2)), w)
    if r0 >= r1 or c0 >= c1:
        return
    rows = np.arange(r0, r1, dtype=np.float32)[:, None] - np.float32(row)
    cols = np.arange(c0, c1, dtype=np.float32)[None, :] - np.float32(col)
    coverage = np.clip(np.float32(r + 0.5) - np.sqrt(rows * rows + cols * cols), 0.0, 1.0)[..., None]
    window = canvas[r0:r1, c0:c1].astype(np.float32)
    blended = window + coverage * (np.asarray(colour, dtype=np.float32) - window)
    canvas[r0:r1, c0:c1] = np.rint(blended).astype(np.uint8)


def draw_background(discs: Iterable[tuple]) -> np.ndarray:
    """The floor with every ``(position, colour)`` target disc on it; a disc of another
    radius (the pit) is ``(position, colour, radius)``."""
    canvas = np.empty((IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
    canvas[:] = FLOOR_COLOUR
    for position, colour, *radius in discs:
        draw_disc(canvas, position, radius[0] if radius else TARGET_RADIUS, colour)
    return canvas


def draw_frame(background: np.ndarray, agent_xy) -> np.ndarray:
    """A new frame: ``background`` with the point mass at ``agent_xy``."""
    frame = background.copy()
    draw_disc(frame, agent_xy, AGENT_RADIUS, AGENT_COLOUR)
    return frame


__all__ = ["PIXELS_PER_METRE", "to_pixel", "locate_mass", "draw_disc", "draw_background", "draw_frame"]
