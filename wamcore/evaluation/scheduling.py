"""The episode queue the driver hands out from.

Episodes leave in plan order, except that an env worker gets the next episode that can
reuse its env (same env options) when one is pending: building a simulator for a task
takes seconds, resetting it a fraction of that. Which worker runs an episode never
changes its record: every episode starts from its own reset (seed, init state).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import Dict, Iterable, List, Optional

from ..execution import env_key
from ..specs import Episode


class EpisodeQueue:
    def __init__(self, episodes: Iterable[Episode]):
        self._pending: "OrderedDict[str, Episode]" = OrderedDict((e.key, e) for e in episodes)
        self._keys: Dict[str, str] = {e.key: env_key(e.env_options) for e in self._pending.values()}

    def __len__(self) -> int:
        return len(self._pending)

    def peek(self, n: int) -> List[Episode]:
        """The next ``n`` episodes in plan order, left in the queue."""
        return list(itertools.islice(self._pending.values(), n))

    def take(self, env: Optional[str] = None) -> Optional[Episode]:
        """The next episode, preferring one whose env options have key ``env``."""
        if not self._pending:
            return None
        chosen = None
        if env is not None:
            chosen = next((k for k in self._pending if self._keys[k] == env), None)
        key = chosen if chosen is not None else next(iter(self._pending))
        return self._pending.pop(key)

    def put_back(self, episode: Episode) -> None:
        """Return an episode that was handed out but never ran (it goes first)."""
        self._pending[episode.key] = episode
        self._pending.move_to_end(episode.key, last=False)


__all__ = ["EpisodeQueue"]
