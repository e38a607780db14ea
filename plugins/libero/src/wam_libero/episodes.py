"""``wam eval`` episodes: suites x tasks x init states, one env per (suite, task).

Consecutive episodes of one task share ``env_options``, so wamcore's ``evaluate`` reuses
one env for them and only resets it (``hard_reset=False``); the init state travels in
``Episode.reset``. Without ``--init-state``, each task runs its first ``count``
(``--episodes``) init states, as LIBERO evaluations do (50 per task is the standard).
"""

from __future__ import annotations

from typing import Any, List, Mapping

from wamcore.errors import ConfigurationError
from wamcore.specs import Episode

from .suites import parse_selection, parse_suites, within
from .upstream import import_simulator, task_count


def plan_episodes(options: Mapping[str, Any], count: int, seed: int) -> List[Episode]:
    if count < 1:
        raise ConfigurationError("--episodes must be >= 1")
    sim = import_simulator()
    tasks_wanted = parse_selection(options.get("task", "0"), "task")
    inits_given = options.get("init_state")
    inits_wanted = parse_selection(inits_given, "init-state") if inits_given is not None else list(range(count))
    episodes: List[Episode] = []
    for suite in parse_suites(options.get("suite", "libero_spatial")):
        for task in within(tasks_wanted, task_count(sim, suite), "task", suite.name):
            env_options = {**options, "suite": suite.name, "task": str(task), "init_state": None}
            for init in _init_states(sim, suite, task, inits_wanted):
                episodes.append(
                    Episode(
                        key=f"{suite.name}/task={task}/init={init}/seed={seed}",
                        env_options=env_options,
                        reset={"seed": seed, "init_state": init},
                        labels={"suite": suite.name, "task": task, "init": init, "seed": seed},
                    )
                )
    return episodes


def _init_states(sim: Any, suite, task: int, wanted) -> List[int]:
    from .upstream import load_task

    available = len(load_task(sim, suite, task).init_states)
    return within(wanted, available, "init state", f"{suite.name} task {task}")


__all__ = ["plan_episodes"]
