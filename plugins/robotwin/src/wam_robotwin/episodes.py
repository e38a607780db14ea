"""Evaluation episodes the way RoboTwin's ``script/eval_policy.py`` counts them.

Upstream evaluates ``--seed S`` as the first N seeds, from ``100000 * (1 + S)`` upward, that
the scripted expert solves (``script/eval_policy.py``: ``st_seed = 100000 * (1 + seed)``).
So an episode is a
(seed, index) pair, not a raw simulator seed: the env finds the index-th accepted seed itself
(and remembers accepted seeds, so a reused env scans each seed once, as upstream does).
"""

from __future__ import annotations

from typing import Any, List, Mapping

from wamcore.specs import Episode

SEED_STRIDE = 100_000


def first_candidate_seed(seed: int, stride: int = SEED_STRIDE) -> int:
    """Upstream's ``st_seed``: seed 0 starts at 100000, seed 1 at 200000 (``stride`` 100000;
    LingBot-VA's own client uses 10000: ``evaluation/robotwin/eval_polict_client_openpi.py``)."""
    if seed < 0:
        raise ValueError(f"RoboTwin seeds are >= 0, got {seed}")
    return int(stride) * (1 + int(seed))


def plan_episodes(options: Mapping[str, Any], count: int, seed: int) -> List[Episode]:
    """``count`` episodes of upstream seed ``seed``: the first ``count`` accepted simulator seeds."""
    return [
        Episode(key=f"seed={seed}/episode={i}", env_options=dict(options), reset={"seed": seed, "episode": i},
                labels={"task": options.get("task"), "seed": seed, "episode": i})
        for i in range(count)
    ]
