"""Evaluation over many episodes, on one env or many in parallel.

The pieces, each reusable on its own (a Ray executor wraps the same env worker):

* :class:`EnvWorker` (``env_worker``): one platform env and one model client; runs the
  episodes it is handed and turns each into a record;
* env processes (``env_process``): an ``EnvWorker`` in a process of its own, driven over
  JSON lines;
* :class:`SharedModel` (``shared_model``): the model worker env workers share, restarted
  when it dies;
* :class:`LocalEvaluation` (``local``): the driver's side on one host: the episode queue,
  N env workers, faults;
* :class:`ResultsDir`, :class:`Progress`, :func:`check_num_envs`: the output directory,
  progress on stderr, the memory check.

In research code::

    from wamcore.evaluation import run_evaluation
    from wamcore.runtime import WorkerConfig

    config = WorkerConfig.from_options(platform="pointmass", am_backend="pointmass-wam")
    episodes = registry.platform("pointmass").plan_episodes({}, 100, seed=0)
    records = list(run_evaluation(config, episodes, num_envs=4, registry=registry))

docs/evaluation.md has the whole picture.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence

from ..registry import Registry, default_registry
from ..runtime import WorkerConfig
from ..specs import Episode
from .env_worker import EnvWorker, EpisodeSettings, failure_record
from .local import Finished, LocalEvaluation, Started
from .memory import check_num_envs
from .progress import Progress
from .results import ResultsDir, RunFolderError, RunLocked, read_records
from .shared_model import ModelWorkerLost, SharedModel


def run_evaluation(
    model: WorkerConfig,
    episodes: Iterable[Episode],
    *,
    num_envs: int = 1,
    registry: Optional[Registry] = None,
    platform_options: Optional[Mapping[str, Any]] = None,
    instruction: Optional[str] = None,
    max_chunks: Optional[int] = None,
    request_options: Optional[Mapping[str, Any]] = None,
    am_restarts: int = 1,
    log_dir: Optional[str] = None,
    plugin_modules: Sequence[str] = (),
    planning: Optional[Mapping[str, Any]] = None,
) -> Iterator[dict]:
    """Run ``episodes`` on ``model.platform`` with ``num_envs`` env workers; yield each
    episode's record as it finishes (in completion order).

    ``plugin_modules`` are importable modules that env processes and a spawned model
    worker register as plugins (what this process registered in-process does not travel).
    ``planning``: ``{"best_of": N, "score": "value"}`` plans every chunk (docs/planning.md)."""
    registry = registry or default_registry()
    platform = registry.platform(model.platform)
    settings = EpisodeSettings(
        platform=platform.name,
        platform_options=platform.with_defaults(platform_options),
        instruction=instruction,
        max_chunks=max_chunks,
        request_options=dict(request_options or {}),
        planning=dict(planning) if planning else None,
    )
    evaluation = LocalEvaluation(platform, settings, model, registry=registry, num_envs=num_envs,
                                 am_restarts=am_restarts, log_dir=log_dir, plugin_modules=plugin_modules)
    for event in evaluation.run(episodes):
        if isinstance(event, Finished):
            yield event.record


__all__ = [
    "run_evaluation",
    "EnvWorker",
    "EpisodeSettings",
    "LocalEvaluation",
    "SharedModel",
    "ModelWorkerLost",
    "Started",
    "Finished",
    "ResultsDir",
    "Progress",
    "check_num_envs",
    "failure_record",
    "read_records",
    "RunFolderError",
    "RunLocked",
]
