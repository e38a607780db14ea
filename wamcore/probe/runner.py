"""Run a probe set: per context, a snapshot, the determinism checks, every branch, the metrics.

Per context, in this order: build (or reuse) the env, reset, warm up, snapshot and save it;
restore it once from memory and once from the saved file (the two must be identical); ask
the model for its chunk and, where it declares ``action_conditioned_futures``, for each
intervention's future; execute every branch forward, then in reverse order, then the first
branch again (all must be identical); score; draw the picture.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional

import attrs
import numpy as np

from .. import __version__
from ..contracts import PredictRequest, Prediction
from ..errors import ConfigurationError
from ..execution import ReusedEnv
from ..service import ModelClient
from ..specs import PlatformSpec
from . import counterfactual, metrics, picture, snapshots
from .branches import Branch, capture, capture_difference, difference, rollout
from .sets import ProbeContext, ProbeSet

REPORT_TYPE = "wamcore.probe_report"


def _warm_up(env, platform: PlatformSpec, context: ProbeContext) -> None:
    for name, steps in context.warmup:
        actions = platform.intervention(name).actions
        for i in range(int(steps)):
            env.step(actions[i % len(actions)])


def _worst(checks) -> dict:
    return {"state": max(c["state"] for c in checks), "pixels": max(c["pixels"] for c in checks)}


def _candidates(model: ModelClient, platform: PlatformSpec, request: PredictRequest) -> Dict[str, object]:
    """Each intervention's prediction as candidate actions, or why it cannot be asked."""
    contract = model.contract
    out: Dict[str, object] = {}
    for i in platform.interventions:
        if i.actions.shape != (contract.chunk_size, contract.action_dim):
            out[i.name] = f"{len(i.actions)} steps, the model's chunk is {contract.chunk_size}"
            continue
        out[i.name] = model.predict(attrs.evolve(request, candidate_actions=i.actions.copy()))
    return out


def probe_context(env, platform: PlatformSpec, model: ModelClient, context: ProbeContext, *, horizons,
                  out: Path, request_args: Mapping[str, Any]) -> dict:
    """One context's report; ``request_args`` (seed, instruction, options) go into every
    prediction request, all of them about the snapshot's observation; their seed (0 when
    None) also seeds the permutation test."""
    seed = request_args.get("seed") or 0
    env.reset(**context.reset)
    _warm_up(env, platform, context)
    try:
        snap = env.snapshot()
    except NotImplementedError:
        raise ConfigurationError(f"platform {platform.name!r} cannot snapshot its env; a probe needs "
                                 "Env.snapshot()/restore()") from None
    address, path = snapshots.save(out / "snapshots", snap, {"platform": platform.name, "context": context.to_json()})

    env.restore(snap)
    from_memory = capture(env)
    snapshots.restore_saved(env, snapshots.load(path))
    restores = capture_difference(from_memory, capture(env))
    now = env.observe()

    model.reset()
    if hasattr(model, "episode"):  # a cache records where its artifacts came from
        model.episode = {"context": context.name, "seed": context.reset.get("seed")}
    request = PredictRequest(observation=now, **request_args)
    own = model.predict(request)
    caps = model.info.capabilities
    candidates = _candidates(model, platform, request) if caps.action_conditioned_futures else {}

    branches = [Branch(i.name, i.actions, "intervention") for i in platform.interventions]
    branches.append(Branch("model", np.asarray(own.actions), "model"))
    forward = {b.name: rollout(env, snap, b) for b in branches}
    reverse = {b.name: rollout(env, snap, b) for b in reversed(branches)}
    repeat = rollout(env, snap, branches[0])
    determinism = {
        "restores": restores,
        "repeat": {"branch": branches[0].name, **difference(forward[branches[0].name], repeat)},
        "order": {"branches": len(branches), **_worst([difference(forward[n], reverse[n]) for n in forward])},
    }

    backend = model.info.backend
    scored = {"model": own, **{n: p for n, p in candidates.items() if isinstance(p, Prediction)}}
    found = {
        "branch_separation": metrics.branch_separation(forward, horizons),
        "future_frames": metrics.future_frames(caps, backend, own, forward["model"], now),
        "candidate_futures": metrics.candidate_futures(caps, backend, candidates, forward, now),
        "branch_ranking": metrics.branch_ranking(caps, backend, candidates, forward, now),
        "values": metrics.values(caps, backend, scored, forward),
        "action_dependence": counterfactual.action_dependence(
            caps, backend, candidates, forward, now, seed=counterfactual.context_seed(seed, context.name)),
        "counterfactual_direction": counterfactual.counterfactual_direction(caps, backend, candidates, forward, now),
        "noop_stability": counterfactual.noop_stability(caps, backend, candidates, forward, now),
        "top1_regret": counterfactual.top1_regret(caps, backend, candidates, forward),
    }
    layout = None  # a platform without cameras has no picture
    if now.images:
        role = next(iter(now.images))
        predicted = {n: (p.future_observations or {}).get(role) for n, p in scored.items()}
        predicted = {n: (f[-1] if np.asarray(f).ndim == 4 else f) for n, f in predicted.items() if f is not None}
        layout = picture.write(out / "contexts" / f"{_file_name(context.name)}.png", np.asarray(now.images[role]),
                               role, forward, predicted, horizons)
    return {
        **context.to_json(),
        "snapshot": {"address": address, "path": str(path)},
        "branches": {b.name: {"source": b.source, "actions": b.actions.tolist()} for b in branches},
        "determinism": determinism,
        "metrics": found,
        "picture": layout,
    }


def _file_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_=." else "_" for c in name)


def run_probe(probe_set: ProbeSet, platform: PlatformSpec, model: ModelClient, *, out, seed: Optional[int] = 0,
              instruction: Optional[str] = None, request_options: Optional[Mapping[str, Any]] = None,
              platform_options: Optional[Mapping[str, Any]] = None, on_context: Optional[Callable[[dict], None]] = None, first_env=None) -> dict:
    """Probe ``model`` (bound to ``platform``) on every context of ``probe_set``; writes the
    snapshots and pictures under ``out`` and returns the report (``out/report.json`` is the
    caller's to write). ``first_env``: an env already built for the first context."""
    from ..artifacts import model_identity

    out = Path(out)
    t0 = time.perf_counter()
    overrides = {k: v for k, v in (platform_options or {}).items() if v is not None}
    envs = ReusedEnv(lambda options: platform.create(**options))
    if first_env is not None:
        envs.adopt(first_env, {**probe_set.contexts[0].env_options, **overrides})
    request_args = {"seed": seed, "instruction": instruction, "options": dict(request_options or {})}
    contexts = []
    try:
        if platform.name != probe_set.platform:
            raise ConfigurationError(f"probe set {probe_set.name!r} is for platform {probe_set.platform!r}, "
                                     f"not {platform.name!r}")
        if platform.interventions and model.control is not None and model.control != platform.control:
            raise ConfigurationError(
                f"platform {platform.name!r}'s interventions are {platform.control.action_space} chunks, but the model "
                f"commands {model.control.action_space}: probe it with a model of the default control"
            )
        for context in probe_set.contexts:
            env = envs.get({**context.env_options, **overrides})
            report = probe_context(env, platform, model, context, horizons=probe_set.horizons, out=out,
                                   request_args=request_args)
            contexts.append(report)
            if on_context is not None:
                on_context(report)
    finally:
        envs.close()
    checks = [c["determinism"][k] for c in contexts for k in ("restores", "repeat", "order")]
    worst = _worst(checks) if checks else {"state": 0.0, "pixels": 0.0}
    return json_safe({
        "type": REPORT_TYPE,
        "set": probe_set.name,
        "description": probe_set.description,
        "platform": platform.name,
        "platform_options": overrides,
        "horizons": list(probe_set.horizons),
        "interventions": {i.name: i.description for i in platform.interventions},
        "seed": seed,
        "instruction": instruction,
        "request_options": dict(request_options or {}),
        "model_identity": model_identity(model.info, model.contract),
        "determinism": {"max_state_error": worst["state"], "max_pixel_error": worst["pixels"],
                        "identical": worst == {"state": 0.0, "pixels": 0.0}},
        "metrics": metrics.summarise(contexts, seed=seed or 0),
        "bootstrap": {"resamples": metrics.BOOTSTRAP_RESAMPLES, "seed": seed or 0, "unit": "context",
                      "interval": "95% percentile"},
        "contexts": contexts,
        "wamcore": __version__,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "wall_s": round(time.perf_counter() - t0, 2),
    })


def json_safe(value: Any) -> Any:
    """Plain JSON: numpy scalars as numbers, infinities (a structure that did not match) as
    the string "inf"."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return "inf" if value > 0 else ("-inf" if value < 0 else "nan")
    return value


__all__ = ["run_probe", "probe_context", "json_safe", "REPORT_TYPE"]
