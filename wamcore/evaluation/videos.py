"""Which episodes of an evaluation are filmed (``wam eval --video``), and where the files go.

``--video N`` films the first N episodes of every task (in plan order); ``--video
failures`` films every episode and keeps the files of those that did not succeed;
``--video all`` keeps every one. Files go to ``OUT/videos/<episode key>.mp4``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, Iterable, Optional

from ..errors import ConfigurationError
from ..specs import Episode


def parse_video(value: Optional[str]) -> Optional[str]:
    """``None``, ``"failures"``, ``"all"`` or a count as text; anything else is refused."""
    if value is None:
        return None
    value = value.strip().lower()
    if value in ("failures", "all") or (value.isdigit() and int(value) > 0):
        return value
    raise ConfigurationError(f"--video {value!r}: give a number of episodes per task, 'failures' or 'all'")


def file_name(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", key).strip("_") + ".mp4"


def plan_videos(episodes: Iterable[Episode], spec: Optional[str], directory: Path) -> Dict[str, dict]:
    """Episode key -> ``{"path", "keep"}`` for the episodes to film."""
    if spec is None:
        return {}
    directory = Path(directory).absolute()  # env actors may run in another working directory
    keep = "failures" if spec == "failures" else "always"
    per_task: Dict[object, int] = {}
    plan = {}
    for ep in episodes:
        if spec.isdigit():
            task = (ep.labels.get("suite"), ep.labels.get("task"))
            per_task[task] = per_task.get(task, 0) + 1
            if per_task[task] > int(spec):
                continue
        plan[ep.key] = {"path": str(directory / file_name(ep.key)), "keep": keep}
    return plan


__all__ = ["parse_video", "plan_videos", "file_name"]
