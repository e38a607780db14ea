"""The episode queue the driver hands out from.

Episodes leave in plan order, except that an env worker gets the next episode that can
reuse its env (same env options) when one is pending, and otherwise one whose env no other
worker holds (so that two workers do not build the same task's env while another task
waits): building a simulator for a task takes seconds, resetting it a fraction of that. Which worker runs an episode never
changes its record: every episode starts from its own reset (seed, init state).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Dict, Iterable, List, Optional, Set

from ..execution import env_key
from ..specs import Episode


class EpisodeQueue:
    def __init__(self, episodes: Iterable[Episode]):
        self._pending: "OrderedDict[str, Episode]" = OrderedDict((e.key, e) for e in episodes)
        self._keys: Dict[str, str] = {e.key: env_key(e.env_options) for e in self._pending.values()}

    def __len__(self) -> int:
        return len(self._pending)

    def first_episodes(self, n: int) -> List[Episode]:
        """What ``n`` fresh workers would take first (left in the queue): each builds the
        env of its first episode before the model starts."""
        held: Set[str] = set()
        firsts = []
        for _ in range(min(n, len(self._pending))):
            key = self._choose(None, held, exclude={e.key for e in firsts})
            firsts.append(self._pending[key])
            held.add(self._keys[key])
        return firsts

    def take(self, env: Optional[str] = None, held: Iterable[str] = ()) -> Optional[Episode]:
        """The next episode for a worker whose env has key ``env``; ``held`` are the env
        keys of the other workers."""
        if not self._pending:
            return None
        return self._pending.pop(self._choose(env, set(held), exclude=()))

    def _choose(self, env: Optional[str], held: Set[str], exclude) -> str:
        candidates = [k for k in self._pending if k not in exclude]
        for wanted in (lambda k: self._keys[k] == env, lambda k: self._keys[k] not in held):
            found = next((k for k in candidates if wanted(k)), None)
            if found is not None:
                return found
        return candidates[0]

    def put_back(self, episode: Episode) -> None:
        """Return an episode that was handed out but never ran (it goes first)."""
        self._pending[episode.key] = episode
        self._pending.move_to_end(episode.key, last=False)


__all__ = ["EpisodeQueue"]
