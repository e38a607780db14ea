"""Evaluation on a Ray cluster: env actors and model actors across GPUs and hosts.

Ray (``pip install "wamcore[ray]"``) does the scheduling, placement and restarts; this module
only maps wamcore's pieces onto it:

* a **model actor** (``num_gpus=1`` when the cluster has GPUs, no CPU reserved: its worker
  process is outside Ray's accounting) starts and owns one wamcore model worker
  (``wam serve`` in the model's own environment, ``--am-python``: that path must exist on
  every node) and publishes its endpoint. The worker watches the actor as its parent, so it
  goes when the actor goes; the actor watches its worker and exits when it dies, so that
  Ray restarts the actor (``max_restarts`` = ``--am-restarts``) with a fresh worker;
* an **env actor** (``num_cpus=1``) holds an :class:`~.env_worker.EnvHost`: one platform
  env and one client session, bound to one model actor (env actor ``i`` to model actor
  ``i mod K``). An env actor that dies is restarted by Ray and its episode retried once
  (``max_task_retries=1``); if it dies again, the episode is recorded as
  ``runtime_failure``;
* the **driver** (this process) hands out episodes and is the only writer of results, as
  in a local run. After an episode lost its model worker, it asks that model actor for its
  endpoint again (which waits for Ray's restart) and rebinds its env actors; a model actor
  that Ray gave up on ends the run with :class:`~.shared_model.ModelWorkerLost`.

On one node the worker binds 127.0.0.1 and env actors use the same-host fast path. Across
nodes it binds all interfaces of its node with a token generated for the run (as ``wam
serve`` demands off loopback), and env actors connect to the node's address.

When the driver dies, Ray ends the actors it owns, and each worker goes with its actor.
"""

from __future__ import annotations

import logging
import os
import secrets
import sys
import threading
import time
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence

import attrs

from ..contracts import ModelInfo
from ..errors import ConfigurationError, DependencyNotInstalled, WamError
from ..registry import Registry
from ..runtime import DEFAULT_LOG_DIR, DEFAULT_START_TIMEOUT_S, ENDPOINT, IN_PROCESS, WorkerConfig
from ..specs import Episode, PlatformSpec
from .env_worker import ENV_FAULT, MODEL_FAULT, EpisodeSettings, episode_to_json, failure_record
from .local import Event, Finished, Started, _child_environment
from .scheduling import EpisodeQueue
from .shared_model import SETTLE_S, ModelWorkerLost

log = logging.getLogger("wamcore.evaluation")

RAY_INSTALL = 'pip install "wamcore[ray]"'
_WAIT_S = 0.5


def import_ray():
    try:
        import ray
    except ImportError as exc:
        raise DependencyNotInstalled("ray", RAY_INSTALL, "--executor ray") from exc
    return ray


# ----------------------------------------------------------------------------- actors
# Plain classes; ``_actor_classes`` wraps them with ray.remote once ray is imported.


class ModelActor:
    """Owns one model worker; exits when the worker dies, so that Ray restarts it."""

    def __init__(self, config: Mapping[str, Any], bind_host: str):
        from ..registry import default_registry
        from ..runtime import spawn_worker

        cfg = WorkerConfig(**config)
        self.host = bind_host
        self.worker = spawn_worker(cfg, registry=default_registry() if cfg.options else None, host=bind_host)
        self._node_ip = _node_ip()
        threading.Thread(target=self._watch, name="wamcore-worker-watch", daemon=True).start()

    def _watch(self) -> None:
        while self.worker.alive():
            time.sleep(0.2)
        log.error("model worker exited; ending the actor so that Ray restarts it\n%s", self.worker.describe_exit())
        os._exit(1)

    def endpoint(self, after_fault: bool = False) -> Dict[str, Any]:
        """Where env actors connect: loopback on one node, the node's address across nodes.

        ``after_fault``: an env actor just lost this worker; if it is dying, end the actor
        now (the call fails, Ray restarts the actor) instead of handing out a dead address."""
        if after_fault and not self.worker.alive(settle_s=SETTLE_S):
            os._exit(1)
        port = self.worker.ready["port"]
        address = "127.0.0.1" if self.host == "127.0.0.1" else self._node_ip
        return {"endpoint": f"tcp://{address}:{port}", "pid": self.worker.pid, "node": _node_id()}

    def kill_worker(self) -> int:
        """For tests: SIGKILL the worker (as a CUDA fault or the OOM killer would)."""
        import signal

        pid = self.worker.pid
        os.kill(pid, signal.SIGKILL)
        return pid


class EnvActor:
    """An :class:`~.env_worker.EnvHost` in a Ray actor."""

    def __init__(self, settings: Mapping[str, Any], first_env_options: Mapping[str, Any],
                 model_options: Mapping[str, Any]):
        from .env_worker import EnvHost

        self.host = EnvHost(settings, first_env_options, model_options)

    def run(self, episode: Mapping[str, Any], model: Mapping[str, Any], video: Optional[Mapping[str, Any]] = None) -> dict:
        same_node = model.get("node") == _node_id()
        return self.host.run(episode, model["endpoint"], model["pid"] if same_node else None, video)

    def pid(self) -> int:
        return os.getpid()


def _node_id() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


def _node_ip() -> str:
    import ray

    return ray.util.get_node_ip_address()


_CLASSES: Dict[str, Any] = {}


def _actor_classes(ray) -> tuple:
    if not _CLASSES:
        _CLASSES["model"] = ray.remote(ModelActor)
        _CLASSES["env"] = ray.remote(EnvActor)
    return _CLASSES["model"], _CLASSES["env"]


# ----------------------------------------------------------------------------- driver


class RayEvaluation:
    """The driver of a Ray evaluation; the same events as :class:`~.local.LocalEvaluation`."""

    def __init__(
        self,
        platform: PlatformSpec,
        settings: EpisodeSettings,
        model: WorkerConfig,
        *,
        registry: Registry,
        num_envs: int = 1,
        num_model_workers: int = 1,
        ray_address: Optional[str] = None,
        am_restarts: int = 1,
        env_retries: int = 1,
        plugin_modules: Sequence[str] = (),
        ray_init: Optional[Mapping[str, Any]] = None,
        videos: Optional[Mapping[str, Mapping[str, Any]]] = None,
    ):
        if num_envs < 1 or num_model_workers < 1:
            raise ValueError("num_envs and num_model_workers must be >= 1")
        if model.cuda_device is not None:
            raise ConfigurationError("--am-cuda-device/--cuda-device do not apply with --executor ray: Ray gives each "
                                     "model actor its GPU")
        self.ray = import_ray()
        self.platform = platform
        self.settings = settings
        self.registry = registry
        self.num_envs = int(num_envs)
        self.num_models = 0 if model.mode == ENDPOINT else int(num_model_workers)
        self.ray_address = ray_address
        self.ray_init = dict(ray_init or {})
        self.am_restarts = int(am_restarts)
        self.env_retries = int(env_retries)
        self.videos = dict(videos or {})  # written by env actors: the path must be shared across nodes
        # what actors need in their environment: plugin modules, and this process's
        # PYTHONPATH (paths must exist on every node, as --am-python's must)
        self.child_env = _child_environment(plugin_modules)
        if os.environ.get("PYTHONPATH"):
            self.child_env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        if model.mode == IN_PROCESS:
            model = attrs.evolve(model, python=sys.executable)
        if model.mode != ENDPOINT:  # actors run elsewhere: absolute paths for the worker's log
            model = attrs.evolve(model, log_dir=os.path.abspath(model.log_dir or DEFAULT_LOG_DIR))
        self.config = model
        self.model_info: Optional[ModelInfo] = None
        self.model_restarts = 0
        self._models: List[Any] = []
        self._endpoints: List[Dict[str, Any]] = []
        self._envs: List[Any] = []
        self._started_ray = False

    # ------------------------------------------------------------------ start

    def _start(self, firsts: Sequence[Episode]) -> None:
        ray = self.ray
        if not ray.is_initialized():
            options = {"log_to_driver": False, **self.ray_init}
            if self.ray_address is None:
                options.setdefault("include_dashboard", False)  # a local cluster for this run only
            ray.init(address=self.ray_address, **options)
            self._started_ray = True
        model_actor, env_actor = _actor_classes(ray)
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        gpus = sum(n.get("Resources", {}).get("GPU", 0) for n in nodes)
        config, bind_host = self.config, "127.0.0.1"
        if len(nodes) > 1 and self.num_models:
            bind_host = "0.0.0.0"
            config = attrs.evolve(config, token=config.token or secrets.token_hex(16))
        self.config = config
        runtime_env = {"env_vars": self.child_env}
        for _ in range(self.num_models):
            self._models.append(model_actor.options(
                num_cpus=0, num_gpus=1 if gpus else 0, max_restarts=self.am_restarts, max_task_retries=0,
                runtime_env=runtime_env,
            ).remote(_config_dict(config), bind_host))
        model_options = {"token": config.token, "timeout_s": config.timeout_s}
        for i in range(self.num_envs):
            first = firsts[i].env_options if i < len(firsts) else self.settings.platform_options
            self._envs.append(env_actor.options(
                num_cpus=1, max_restarts=-1, max_task_retries=self.env_retries, runtime_env=runtime_env,
            ).remote(self.settings.to_json(), dict(first), model_options))
        if self.num_models:
            self._endpoints = [self._get(m.endpoint.remote()) for m in self._models]
            self._deaths = [0] * self.num_models
        else:
            self._endpoints = [{"endpoint": config.endpoint, "pid": None, "node": None}]
        self.model_info = self._probe_info(self._endpoints[0]["endpoint"])

    def _probe_info(self, endpoint: str) -> ModelInfo:
        """The model's identity, and its contract checked against the platform once."""
        from ..rpc import RemoteModel

        client = RemoteModel(endpoint, token=self.config.token, timeout_s=self.config.timeout_s)
        try:
            options = self.settings.platform_options
            return client.bind(self.platform, self.platform.observation_spec(options), options).info
        finally:
            client.close()

    def _get(self, ref):
        """``ray.get``, with an error raised by wamcore code re-raised as itself."""
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as exc:
            cause = exc.cause if isinstance(getattr(exc, "cause", None), BaseException) else None
            if isinstance(cause, WamError):
                raise cause from None
            raise

    # ------------------------------------------------------------------ run

    def run(self, episodes) -> Iterator[Event]:
        ray = self.ray
        queue = EpisodeQueue(episodes)
        pending: Dict[Any, tuple] = {}
        env_keys: List[Optional[str]] = [None] * self.num_envs
        try:
            self._start(queue.first_episodes(self.num_envs))
            from ..execution import env_key

            while len(queue) or pending:
                busy = {i for i, _ in pending.values()}
                for i, actor in enumerate(self._envs):
                    if i in busy or not len(queue):
                        continue
                    held = [k for j, k in enumerate(env_keys) if j != i and k is not None]
                    episode = queue.take(env_keys[i], held)
                    env_keys[i] = env_key(episode.env_options)
                    ref = actor.run.remote(episode_to_json(episode), self._endpoints[self._model_of(i)],
                                           self.videos.get(episode.key))
                    pending[ref] = (i, episode)
                    yield Started(episode.key, i)
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=_WAIT_S)
                for ref in ready:
                    i, episode = pending.pop(ref)
                    record = self._record(ref, episode)
                    if record.get("fault") == MODEL_FAULT:
                        self._rebind(self._model_of(i))
                    yield Finished(record, i)
        finally:
            self.close()

    def _model_of(self, env_index: int) -> int:
        return env_index % len(self._endpoints)

    def _record(self, ref, episode: Episode) -> dict:
        ray = self.ray
        try:
            return self._get(ref)
        except ray.exceptions.ActorDiedError as exc:  # died again on the retry: the episode is lost
            why = f"the env actor died ({exc.__class__.__name__}), also on the retry: {str(exc).splitlines()[0]}"
        except ray.exceptions.RayActorError as exc:
            why = f"the env actor is gone ({exc.__class__.__name__}): {str(exc).splitlines()[0]}"
        backend = self.model_info.backend if self.model_info is not None else ""
        return failure_record(episode, self.settings, why, fault=ENV_FAULT, model=backend)

    def _rebind(self, k: int) -> None:
        """After an episode lost model worker ``k``: its (possibly restarted) endpoint."""
        if not self.num_models:
            from ..rpc import RemoteModel

            try:
                RemoteModel(self._endpoints[0]["endpoint"], token=self.config.token, connect_timeout_s=5.0).close()
                return
            except WamError:
                raise ModelWorkerLost(
                    f"the model worker at {self._endpoints[0]['endpoint']} no longer answers; it was started elsewhere, "
                    "so it is not restarted here. Start it again, then rerun with --resume."
                ) from None
        fresh = None
        deadline = time.monotonic() + (self.config.start_timeout_s or DEFAULT_START_TIMEOUT_S)
        while fresh is None:  # a restarting actor answers once Ray brought it back and its worker is ready
            try:
                fresh = self.ray.get(self._models[k].endpoint.remote(after_fault=True))
            except self.ray.exceptions.ActorDiedError:  # it died during the call (ending itself, or for good)
                self._deaths[k] += 1
                if self._deaths[k] > self.am_restarts:
                    break  # more deaths than Ray may restart: it is gone
            except self.ray.exceptions.RayActorError:  # unavailable while Ray restarts it
                if time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        if fresh is None:
            raise ModelWorkerLost(
                f"model actor {k} died and Ray gave up restarting it (--am-restarts {self.am_restarts}); finished "
                "episodes are kept: fix the cause (the worker log is in --am-log-dir), then rerun with --resume."
            )
        if fresh != self._endpoints[k]:
            self.model_restarts += 1
            log.warning("model actor %d restarted; its env actors now use %s", k, fresh["endpoint"])
            self._endpoints[k] = fresh

    # ------------------------------------------------------------------ stop

    def close(self) -> None:
        ray = self.ray
        for actor in self._envs + self._models:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:
                pass
        self._envs, self._models = [], []
        if self._started_ray and ray.is_initialized():
            ray.shutdown()
            self._started_ray = False


def _config_dict(config: WorkerConfig) -> dict:
    return attrs.asdict(config, recurse=False)


__all__ = ["RayEvaluation", "ModelActor", "EnvActor", "import_ray", "RAY_INSTALL"]
