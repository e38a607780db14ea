"""Episode videos: the real camera beside the model's predicted frame for the chunk's end,
with the instruction and the outcome written on the frames.

:class:`EpisodeRecorder` is fed by ``run_episode``'s callbacks and streams frames to an
MP4 file as the episode runs (H.264 through imageio-ffmpeg's own ffmpeg binary), or
collects them for a GIF (Pillow). Install with ``pip install "wamcore[video]"``; nothing
is imported unless a video is written.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, List, Optional

import numpy as np

from .errors import ConfigurationError, DependencyNotInstalled

VIDEO_INSTALL = 'pip install "wamcore[video]"'
_GAP = 2
#: frames shorter than this are enlarged by an integer factor (nearest neighbour), so a
#: 64-pixel camera stays legible in a viewer and its pixels stay sharp
MIN_HEIGHT = 256
_BANNER = 34  # pixels of text above the cameras
_BLOCK = 16  # H.264 wants frame sides in multiples of its macroblock


def side_by_side(real: np.ndarray, predicted: Optional[np.ndarray]) -> np.ndarray:
    """``[real | gap | predicted]``; a missing or differently sized prediction shows grey."""
    h, w = real.shape[:2]
    right = np.full_like(real, 64)
    if predicted is not None:
        pred = predicted[-1] if predicted.ndim == 4 else predicted
        if pred.shape[:2] == (h, w):
            right = pred
    gap = np.full((h, _GAP, 3), 255, dtype=np.uint8)
    return np.concatenate([real, gap, right], axis=1)


def upscale(frame: np.ndarray, min_height: int = MIN_HEIGHT) -> np.ndarray:
    """``frame`` enlarged by the smallest integer factor that makes it ``min_height`` tall."""
    factor = max(1, -(-min_height // frame.shape[0]))
    return frame if factor == 1 else np.repeat(np.repeat(frame, factor, axis=0), factor, axis=1)


def _pil():
    try:
        from PIL import Image, ImageDraw, ImageFont
    except ImportError as exc:
        raise DependencyNotInstalled("Pillow", VIDEO_INSTALL, "episode videos") from exc
    return Image, ImageDraw, ImageFont


_FONT_SIZE = 13
_fonts: dict = {}


def _font():
    """A TrueType font a wheel already ships: matplotlib's DejaVu Sans where matplotlib is
    installed (found without importing it), else Pillow's own (Pillow >= 10.1 with FreeType),
    else Pillow's bitmap font as the last resort."""
    if "font" in _fonts:
        return _fonts["font"]
    _, _, ImageFont = _pil()
    import importlib.util

    font = None
    spec = importlib.util.find_spec("matplotlib")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(folder) / "mpl-data" / "fonts" / "ttf" / "DejaVuSans.ttf"
        if path.is_file():
            font = ImageFont.truetype(str(path), _FONT_SIZE)
            break
    if font is None:
        try:
            font = ImageFont.load_default(size=_FONT_SIZE)
        except (TypeError, ImportError, OSError):  # an old Pillow, or one without FreeType
            font = ImageFont.load_default()
    _fonts["font"] = font
    return font


def _fitted(draw, text: str, font, width: int) -> str:
    """``text`` cut with an ellipsis to ``width`` pixels."""
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(text + "…", font=font) > width:
        text = text[:-1]
    return text + "…"


def captioned(frame: np.ndarray, top: str, bottom: str, colour=(255, 255, 255)) -> np.ndarray:
    """``frame`` under a black banner with two lines of text."""
    Image, ImageDraw, _ = _pil()
    h, w = frame.shape[:2]
    canvas = Image.new("RGB", (w, h + _BANNER), (0, 0, 0))
    canvas.paste(Image.fromarray(np.ascontiguousarray(frame)), (0, _BANNER))
    draw = ImageDraw.Draw(canvas)
    font = _font()
    draw.text((4, 1), _fitted(draw, top, font, w - 8), fill=(255, 255, 255), font=font)
    draw.text((4, 17), _fitted(draw, bottom, font, w - 8), fill=colour, font=font)
    return np.asarray(canvas)


def last_frame(path: str) -> Optional[np.ndarray]:
    """The last frame of an MP4 (the outcome: a report's poster), or None when it cannot be
    read here (no imageio-ffmpeg, a damaged file)."""
    try:
        import imageio_ffmpeg

        frames = imageio_ffmpeg.read_frames(str(path), pix_fmt="rgb24")
        meta = next(frames)
        last = None
        for last in frames:
            pass
    except (ImportError, OSError, RuntimeError, StopIteration):
        return None
    if last is None:
        return None
    w, h = meta["size"]
    return np.frombuffer(last, dtype=np.uint8).reshape(h, w, 3)


def _padded(frame: np.ndarray) -> np.ndarray:
    h, w = frame.shape[:2]
    ph, pw = -h % _BLOCK, -w % _BLOCK
    return frame if not (ph or pw) else np.pad(frame, ((0, ph), (0, pw), (0, 0)))


def require_video(path: str = "x.mp4") -> None:
    """DependencyNotInstalled now, not after an episode, when ``path``'s format cannot be written."""
    _pil()
    if Path(path).suffix.lower() != ".gif":
        EpisodeRecorder._ffmpeg()


class EpisodeRecorder:
    """Frames of one episode, written to ``path`` (``.mp4`` streamed, ``.gif`` at the end).

    Use ``on_reset``/``on_step`` as ``run_episode``'s callbacks, then :meth:`finish`.
    ``keep="failures"`` deletes the file of an episode that succeeded."""

    def __init__(self, env: Any, path: str, *, fps: int = 10, keep: str = "always", camera: Optional[str] = None):
        if keep not in ("always", "failures"):
            raise ValueError("keep must be 'always' or 'failures'")
        self.env, self.path, self.fps, self.keep, self.camera = env, Path(path), int(fps), keep, camera
        suffix = self.path.suffix.lower()
        if suffix not in (".mp4", ".gif"):
            raise ConfigurationError(f"video {path}: use a .mp4 or .gif file name")
        self._gif: Optional[List[np.ndarray]] = [] if suffix == ".gif" else None
        self._writer = None
        self._size = None
        self.instruction = ""
        self.frames = 0
        self._first = None
        self._with_future = False
        _pil()  # fail before the episode, not after it
        if self._gif is None:
            self._ffmpeg()

    @staticmethod
    def _ffmpeg():
        try:
            import imageio_ffmpeg
        except ImportError as exc:
            raise DependencyNotInstalled("imageio-ffmpeg", VIDEO_INSTALL, "MP4 videos") from exc
        return imageio_ffmpeg

    def _role(self, obs) -> str:
        return self.camera if self.camera in obs.images else next(iter(obs.images))

    def _add(self, frame: np.ndarray) -> None:
        frame = _padded(frame)
        self.frames += 1
        if self._gif is not None:
            self._gif.append(frame)
            return
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._size = (frame.shape[1], frame.shape[0])
            self._writer = self._ffmpeg().write_frames(
                str(self.path), self._size, fps=self.fps, codec="libx264", pix_fmt_out="yuv420p",
                quality=7, macro_block_size=_BLOCK, ffmpeg_log_level="error",
            )
            self._writer.send(None)
        self._writer.send(np.ascontiguousarray(frame))

    def _frame(self, obs, prediction, status: str, colour=(200, 200, 200)) -> np.ndarray:
        role = self._role(obs)
        if not self._with_future:
            return captioned(upscale(obs.images[role]), self.instruction, status, colour)
        future = None if prediction is None else (prediction.future_observations or {}).get(role)
        return captioned(upscale(side_by_side(obs.images[role], future)), self.instruction, status, colour)

    def on_reset(self, obs) -> None:
        self.instruction = obs.instruction
        self._last, self._first = obs, obs  # written with the first step, once the layout is known

    def _layout(self, prediction) -> None:
        """Camera beside the predicted future when the model predicts one, else the camera."""
        if self._first is None:
            return
        self._with_future = bool(prediction is not None and self._role(self._first) in (prediction.future_observations or {}))
        note = " | left: camera, right: predicted end of chunk" if self._with_future else ""
        self._add(self._frame(self._first, None, f"step 0{note}"))
        self._first = None

    def on_step(self, step, action, result, prediction) -> None:
        self._layout(prediction)
        obs = self.env.observe()
        self._last, self._prediction = obs, prediction
        self._add(self._frame(obs, prediction, f"step {step}"))

    def finish(self, success: bool, steps: int) -> Optional[Path]:
        """Hold the last frame a second with the outcome; close the file. Returns its path,
        or None when it was not kept."""
        self._layout(None)
        if self.frames:
            verdict, colour = ("SUCCESS", (90, 230, 90)) if success else ("NO SUCCESS", (240, 90, 90))
            last = self._frame(self._last, getattr(self, "_prediction", None), f"{verdict} after {steps} steps", colour)
            for _ in range(self.fps):
                self._add(last)
        self.close()
        if not self.frames or (self.keep == "failures" and success):
            self.discard()
            return None
        return self.path

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._gif:
            Image, _, _ = _pil()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            images = [Image.fromarray(f) for f in self._gif]
            images[0].save(self.path, save_all=True, append_images=images[1:], duration=int(1000 / self.fps), loop=0)
            self._gif = []

    def discard(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


__all__ = ["EpisodeRecorder", "require_video", "side_by_side", "upscale", "captioned", "last_frame", "VIDEO_INSTALL"]
