"""Progress of a long evaluation, on stderr.

On a terminal, one line redrawn in place by rich: the label, a bar that takes the width
the terminal leaves, episodes done, episodes running, the success rate so far, throughput
and time left; it never grows past the terminal's width (text is cut with an ellipsis
before the line would wrap). Elsewhere (a log file, CI), one line per finished episode, so
that a log shows what happened when.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Iterable, Mapping, Optional, TextIO

from ..terminal import printable

_REDRAW_S = 0.1


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


class Progress:
    """``started(key)`` / ``finished(record)`` as episodes run; ``close()`` at the end.

    ``width`` fixes the terminal's width (tests; default: the terminal's own)."""

    def __init__(self, total: int, finished: Iterable[Mapping[str, Any]] = (), *, label: str = "",
                 stream: Optional[TextIO] = None, tty: Optional[bool] = None, width: Optional[int] = None):
        self.stream = stream if stream is not None else sys.stderr
        self.tty = _isatty(self.stream) if tty is None else tty
        self.total = int(total)
        self.label = label
        earlier = list(finished)
        self.done = len(earlier)
        self.successes = sum(1 for r in earlier if r.get("success"))
        self.running = 0
        self._done_here = 0
        self._t0: Optional[float] = None  # the first episode's start: model loading is not throughput
        self._drawn = 0.0
        self._bar = self._task = None
        if self.tty:
            self._open_bar(width)

    def _open_bar(self, width: Optional[int]) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn
        from rich.progress import Progress as Bar
        from rich.table import Column

        console = Console(file=self.stream, force_terminal=True, width=width, highlight=False)
        cut = dict(no_wrap=True, overflow="ellipsis")
        self._bar = Bar(
            TextColumn("{task.description}", markup=False, table_column=Column(max_width=22, **cut)),
            BarColumn(bar_width=None, table_column=Column(min_width=8, ratio=1)),
            MofNCompleteColumn(table_column=Column(min_width=2 * len(str(self.total)) + 1, no_wrap=True)),
            TextColumn("{task.fields[status]}", markup=False, table_column=Column(ratio=3, **cut)),
            console=console, auto_refresh=False, expand=True, transient=False,
            redirect_stdout=False, redirect_stderr=False,
        )
        self._task = self._bar.add_task(printable(self.label, keep=""), total=self.total or None, completed=self.done, status=self._status(terminal=True))
        self._bar.start()

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

    def _status(self, terminal: bool = False) -> str:
        """Success so far, running, throughput, time left; on a terminal (where the bar shows
        what is done) the most useful first, since a narrow one cuts the end."""
        pct = f"({100.0 * self.successes / self.done:.1f}%)" if self.done else ""
        rate = f"{self.successes} ok {pct}" if terminal else (f"{self.successes}/{self.done} ok {pct}" if self.done else "0 ok")
        running, speed, eta = f"{self.running} running", None, None
        elapsed = time.monotonic() - self._t0 if self._t0 is not None else 0.0
        if self._done_here and elapsed > 0:
            per_min = 60.0 * self._done_here / elapsed
            left = self.total - self.done
            speed = f"{per_min:.1f} ep/min"
            eta = f"ETA {_clock(left / per_min * 60.0)}" if left > 0 else None
        parts = [rate.strip(), eta, speed, running] if terminal else [rate, running, speed, eta]
        return ", ".join(p for p in parts if p)

    def _draw(self, force: bool = False) -> None:
        if self._bar is None:
            return
        now = time.monotonic()
        if not force and now - self._drawn < _REDRAW_S:
            return
        self._drawn = now
        self._bar.update(self._task, completed=self.done, status=self._status(terminal=True))
        self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._draw(force=True)
            self._bar.stop()
            self._bar = None


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or wrapped stream
        return False


__all__ = ["Progress"]
