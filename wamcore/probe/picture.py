"""One picture per context: a row per branch, the real frames at each horizon, and the
model's predicted frame beside them where it predicts one. Written as PNG with zlib, so a
probe needs no imaging library.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import List, Mapping, Optional

import numpy as np

from ..video import upscale

GAP = 2
MIN_TILE = 128  # smaller cameras are enlarged (nearest neighbour) to at least this
EMPTY = 48  # grey of a tile with nothing to show (a horizon beyond the branch, no prediction)


def png_bytes(image: np.ndarray) -> bytes:
    """``HxWx3 uint8`` -> PNG."""
    h, w, _ = image.shape
    raw = b"".join(b"\x00" + np.ascontiguousarray(image[row]).tobytes() for row in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")


def grid(rows: List[List[Optional[np.ndarray]]], tile_shape) -> np.ndarray:
    """Tiles (None: grey) in rows and columns, 2-pixel white gaps, enlarged when small."""
    h, w = tile_shape[:2]
    ncols = max(len(r) for r in rows)
    canvas = np.full((len(rows) * (h + GAP) - GAP, ncols * (w + GAP) - GAP, 3), 255, dtype=np.uint8)
    for i, row in enumerate(rows):
        for j in range(ncols):
            tile = row[j] if j < len(row) else None
            y, x = i * (h + GAP), j * (w + GAP)
            canvas[y:y + h, x:x + w] = EMPTY if tile is None or tile.shape[:2] != (h, w) else tile
    return upscale(canvas, min_height=canvas.shape[0] * max(1, -(-MIN_TILE // h)))


def write(path: Path, now: np.ndarray, role: str, rollouts: Mapping, predicted: Mapping, horizons) -> dict:
    """The context's picture; returns its layout for the report."""
    rows = []
    for name, rollout in rollouts.items():
        real = rollout.frames[role]
        row = [now] + [real[h - 1] if h <= len(real) else None for h in horizons]
        frame = predicted.get(name)
        row.append(None if frame is None else np.asarray(frame))
        rows.append(row)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png_bytes(grid(rows, now.shape)))
    return {"path": str(path), "camera": role, "rows": list(rollouts),
            "columns": ["now"] + [f"real@{h}" for h in horizons] + ["predicted@end"]}


__all__ = ["png_bytes", "grid", "write"]
