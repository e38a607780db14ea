"""Progress of a long evaluation, on stderr.

On a terminal, one line redrawn in place: a bar, episodes done, episodes running, the
success rate so far, throughput and time left. Elsewhere (a log file, CI), one line per
finished episode, so that a log shows what happened when.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Iterable, Mapping, Optional, TextIO

from ..terminal import printable

_BAR = 24
_REDRAW_S = 0.1


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


class Progress:
    def __init__(self, total: int, finished: Iterable[Mapping[str, Any]] = (), *, label: str = "",
                 stream: Optional[TextIO] = None, tty: Optional[bool] = None):
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.total = int(total)
        self.label = label
        earlier = list(finished)
        self.done = len(earlier)
        self.successes = sum(1 for r in earlier if r.get("success"))
        self.running = 0
        self._done_here = 0
        self._t0: Optional[float] = None  # the first episode's start: model loading is not throughput
        self._drawn = 0.0
        self._closed = False

    def started(self, key: str) -> None:
        if self._t0 is None:
            self._t0 = time.monotonic()
        self.running += 1
        self._draw()

    def finished(self, record: Mapping[str, Any]) -> None:
        self.running = max(0, self.running - 1)
        self.done += 1
        self._done_here += 1
        self.successes += bool(record.get("success"))
        if self.tty:
            self._draw(force=True)
            return
        outcome = "success" if record.get("success") else "no success"
        error = f" ({str(record['error']).splitlines()[0][:160]})" if record.get("error") else ""
        line = (f"[{self.done}/{self.total}] {record.get('key')}: {outcome} after {record.get('steps')} steps, "
                f"{record.get('stop_reason')}{error} | {self._status()}")
        self.stream.write(printable(line, keep="") + "\n")
        self.stream.flush()

    def _status(self) -> str:
        rate = f"{self.successes}/{self.done} ok ({100.0 * self.successes / self.done:.1f}%)" if self.done else "0 ok"
        parts = [rate, f"{self.running} running"]
        elapsed = time.monotonic() - self._t0 if self._t0 is not None else 0.0
        if self._done_here and elapsed > 0:
            per_min = 60.0 * self._done_here / elapsed
            left = self.total - self.done
            parts.append(f"{per_min:.1f} ep/min")
            if left > 0:
                parts.append(f"ETA {_clock(left / per_min * 60.0)}")
        return ", ".join(parts)

    def _draw(self, force: bool = False) -> None:
        if not self.tty:
            return
        now = time.monotonic()
        if not force and now - self._drawn < _REDRAW_S:
            return
        self._drawn = now
        filled = int(_BAR * self.done / self.total) if self.total else _BAR
        bar = "#" * filled + "-" * (_BAR - filled)
        self.stream.write(f"\r{printable(self.label, keep='')} [{bar}] {self.done}/{self.total} {self._status()}\x1b[K")
        self.stream.flush()

    def close(self) -> None:
        if self.tty and not self._closed:
            self._closed = True
            self._draw(force=True)
            self.stream.write("\n")
            self.stream.flush()


__all__ = ["Progress"]
