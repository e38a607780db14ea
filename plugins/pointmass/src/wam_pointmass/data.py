"""Scripted demonstrations for behaviour cloning and world-model training (numpy only).

Each sample is one state visited by a noisy expert (DART-style noise injection, so the data
covers the small mistakes a cloned policy makes), with:

* the clean expert's next chunk from that state (the policy's target) and the named
  target's position (privileged; it supervises the encoder's first keypoint);
* one chunk actually executed from that state through ``snapshot()``/``restore()``: the
  expert's, a perturbed one, uniformly random actions, or a constant push in a random
  direction (so the world model sees the outcome of actions the expert never takes);
* that chunk's outcome: the camera frame and state at its end, and whether the named
  target was reached during it (the value's label).

Episode layouts use seeds from ``SEED_OFFSET`` on, disjoint from evaluation seeds.
"""

from __future__ import annotations

from typing import Callable, Optional

import attrs
import numpy as np

from .env import PointMassEnv
from .expert import avoiding_action, expert_action, expert_chunk, route_action
from .spec import CAMERA

SEED_OFFSET = 1_000_000
DART_NOISE = 0.3
WANDER_PROBABILITY = 0.3
WANDER_MAX_STEPS = 15


@attrs.frozen(eq=False)
class Demonstrations:
    """Sample-aligned arrays; ``states`` are raw (position m, velocity m/s)."""

    images: np.ndarray  # uint8 [N, H, W, 3]
    states: np.ndarray  # float32 [N, 4]
    goals: np.ndarray  # int64 [N], index into PointMassEnv.colours
    goal_positions: np.ndarray  # float32 [N, 2], metres (privileged: for an auxiliary loss)
    expert: np.ndarray  # float32 [N, T, 2]
    chunks: np.ndarray  # float32 [N, T, 2]
    future_images: np.ndarray  # uint8 [N, H, W, 3]
    future_states: np.ndarray  # float32 [N, 4]
    reached: np.ndarray  # float32 [N]
    #: with ``collect(prefixes=True)``: how many actions of the chunk are given (0..T-1) ...
    prefix_steps: Optional[np.ndarray] = None  # int64 [N]
    #: ... and the chunk that starts with them and goes on as the expert from where they leave the mass
    prefixed: Optional[np.ndarray] = None  # float32 [N, T, 2]

    def __len__(self) -> int:
        return len(self.states)


def _state(env: PointMassEnv) -> np.ndarray:
    s = env.observe().state
    return np.concatenate([s["position"], s["velocity"]]).astype(np.float32)


def _probe_chunk(rng: np.random.Generator, expert: np.ndarray) -> np.ndarray:
    kind = rng.integers(4)
    if kind == 0:
        return expert.copy()
    if kind == 1:
        return np.clip(expert + rng.normal(0.0, 0.5, expert.shape), -1, 1).astype(np.float32)
    if kind == 2:
        return rng.uniform(-1, 1, expert.shape).astype(np.float32)
    direction = rng.uniform(-1, 1, 2)
    push = direction + rng.normal(0.0, 0.1, expert.shape)
    return np.clip(push, -1, 1).astype(np.float32)


def _outcome(env: PointMassEnv, chunk: np.ndarray) -> tuple:
    """Execute ``chunk`` from the current state, then rewind: (frame, state, reached)."""
    snap = env.snapshot()
    reached = False
    for action in chunk:
        reached |= env.step(action).success
    frame, state = env.observe().images[CAMERA], _state(env)
    env.restore(snap)
    return frame, state, reached


def _prefix(rng: np.random.Generator, plan: np.ndarray) -> np.ndarray:
    """Actions that execute while the next chunk is computed: in real-time chunking the rest
    of a chunk planned a moment ago, so mostly near the expert's plan, sometimes far off."""
    kind = rng.integers(4)
    if kind == 3:
        return rng.uniform(-1, 1, plan.shape).astype(np.float32)
    noise = 0.1 if kind < 2 else 0.4
    return np.clip(plan + rng.normal(0.0, noise, plan.shape), -1, 1).astype(np.float32)


def prefixed_chunk(env: PointMassEnv, prefix: np.ndarray, chunk: int) -> np.ndarray:
    """``prefix`` followed by the expert's plan from the state it leaves the mass in (the
    env is left as it was): the target of a model that conditions on an action prefix."""
    snap = env.snapshot()
    try:
        for action in prefix:
            env.step(action)
        tail = expert_chunk(env, chunk - len(prefix))
    finally:
        env.restore(snap)
    return np.concatenate([prefix, tail]).astype(np.float32)


def collect(
    episodes: int,
    *,
    seed: int = 0,
    chunk: int = 8,
    max_steps: int = 60,
    progress: Optional[Callable[[int, int], None]] = None,
    prefixes: bool = False,
) -> Demonstrations:
    """Roll out ``episodes`` noisy-expert episodes and label every visited state. With
    ``prefixes`` every state also gets a random action prefix and its ``prefixed`` chunk
    (drawn from a generator of their own: the rest of the data is the same either way)."""
    rng = np.random.default_rng(seed)
    prefix_rng = np.random.default_rng([seed, 1])
    env = PointMassEnv(max_steps=max_steps)
    rows: dict = {k: [] for k in attrs.fields_dict(Demonstrations)}
    for episode in range(episodes):
        env.reset(seed=SEED_OFFSET * (seed + 1) + episode)
        wander = int(rng.integers(WANDER_MAX_STEPS + 1)) if rng.random() < WANDER_PROBABILITY else 0
        push = rng.uniform(-1, 1, 2)
        while env.steps < env.max_steps:
            plan = expert_chunk(env, chunk)
            probe = _probe_chunk(rng, plan)
            future_image, future_state, reached = _outcome(env, probe)
            obs = env.observe()
            rows["images"].append(obs.images[CAMERA])
            rows["states"].append(_state(env))
            rows["goals"].append(env.colours.index(env.goal))
            rows["goal_positions"].append(env.goal_position)
            rows["expert"].append(plan)
            rows["chunks"].append(probe)
            rows["future_images"].append(future_image)
            rows["future_states"].append(future_state)
            rows["reached"].append(float(reached))
            if prefixes:
                d = int(prefix_rng.integers(chunk))
                rows["prefix_steps"].append(d)
                rows["prefixed"].append(prefixed_chunk(env, _prefix(prefix_rng, plan[:d]), chunk) if d else plan)
            if env.steps < wander:
                if env.steps % 4 == 0:
                    push = rng.uniform(-1, 1, 2)
                action = push
            else:
                s = obs.state
                action = expert_action(s["position"], s["velocity"], env.goal_position)
                action = np.clip(action + rng.normal(0.0, DART_NOISE, 2), -1, 1)
            if env.step(action).success:
                break
        if progress is not None:
            progress(episode + 1, episodes)
    return Demonstrations(
        images=np.stack(rows["images"]),
        states=np.stack(rows["states"]),
        goals=np.asarray(rows["goals"], dtype=np.int64),
        goal_positions=np.asarray(rows["goal_positions"], dtype=np.float32),
        expert=np.stack(rows["expert"]),
        chunks=np.stack(rows["chunks"]),
        future_images=np.stack(rows["future_images"]),
        future_states=np.stack(rows["future_states"]),
        reached=np.asarray(rows["reached"], dtype=np.float32),
        prefix_steps=np.asarray(rows["prefix_steps"], dtype=np.int64) if prefixes else None,
        prefixed=np.stack(rows["prefixed"]) if prefixes else None,
    )


# ---------------------------------------------------------------------- pit family

#: A chunk's value in the route data: GAMMA ** (steps until the goal is reached when the
#: chunk is executed and then the avoiding expert takes over; 0 if never within
#: CONTINUATION_STEPS more steps, as when the mass falls into the pit).
GAMMA = 0.97
CONTINUATION_STEPS = 50
#: How the states of an episode are visited: the route demonstrator (a new route every
#: chunk), the avoiding expert (the states of detours around the pit), or a wander first.
BEHAVIOURS = ("routes", "avoiding", "wander")
BEHAVIOUR_P = (0.5, 0.3, 0.2)


@attrs.frozen(eq=False)
class RouteDemonstrations:
    """Sample-aligned arrays for the ``pit`` family's model (``states`` raw, as above)."""

    images: np.ndarray  # uint8 [N, H, W, 3]
    states: np.ndarray  # float32 [N, 4]
    goals: np.ndarray  # int64 [N]
    goal_positions: np.ndarray  # float32 [N, 2] (privileged)
    pit_positions: np.ndarray  # float32 [N, 2], zeros without a pit (privileged)
    has_pit: np.ndarray  # float32 [N]
    routes: np.ndarray  # float32 [N]: the route preference of ``expert``
    expert: np.ndarray  # float32 [N, T, 2]: the route demonstrator's chunk for ``routes``
    chunks: np.ndarray  # float32 [N, T, 2]: the probe chunk
    future_images: np.ndarray  # uint8 [N, H, W, 3] after the probe chunk
    trajectories: np.ndarray  # float32 [N, T, 4]: the state after each probe action
    values: np.ndarray  # float32 [N]: the probe chunk's value (GAMMA ** steps to the goal)

    def __len__(self) -> int:
        return len(self.states)


def _route_controller(route: float):
    return lambda env, position, velocity: route_action(position, velocity, env.goal_position, route)


def _avoiding(env: PointMassEnv, position: np.ndarray, velocity: np.ndarray) -> np.ndarray:
    return avoiding_action(position, velocity, env.goal_position, env.pit_position)


def _route_probe(rng: np.random.Generator, env: PointMassEnv, plan: np.ndarray, chunk: int) -> np.ndarray:
    """Mostly what the policy will propose (other routes), also detours and the original probes."""
    kind = rng.choice(4, p=(0.35, 0.15, 0.15, 0.35))
    if kind == 0:
        return expert_chunk(env, chunk, _route_controller(float(rng.uniform(-1, 1))))
    if kind == 1:
        return expert_chunk(env, chunk, _avoiding)
    if kind == 2:
        return plan.copy()
    return _probe_chunk(rng, plan)


def _valued_outcome(env: PointMassEnv, chunk: np.ndarray, gamma: float, horizon: int) -> tuple:
    """Execute ``chunk``, then the avoiding expert; rewind. (frame and trajectory of the
    chunk, value)."""
    snap = env.snapshot()
    trajectory = np.empty((len(chunk), 4), dtype=np.float32)
    reached_at = None
    for i, action in enumerate(chunk):
        if env.step(action).success and reached_at is None:
            reached_at = i + 1
        trajectory[i] = _state(env)
    frame = env.observe().images[CAMERA]
    if reached_at is None:
        for j in range(horizon):
            if env.fallen:
                break
            if env.step(_avoiding(env, *_position_velocity(env))).success:
                reached_at = len(chunk) + j + 1
                break
    env.restore(snap)
    return frame, trajectory, 0.0 if reached_at is None else gamma ** reached_at


def _position_velocity(env: PointMassEnv) -> tuple:
    s = env.observe().state
    return s["position"], s["velocity"]


def collect_routes(
    episodes: int,
    *,
    seed: int = 0,
    chunk: int = 8,
    max_steps: int = 60,
    reach_fraction: float = 0.25,
    gamma: float = GAMMA,
    progress: Optional[Callable[[int, int], None]] = None,
) -> RouteDemonstrations:
    """Episodes of both families (``reach_fraction`` of them without a pit); every visited
    state is labelled with the route demonstrator's chunk for a random route preference
    and with the outcome and value of one probe chunk."""
    rng = np.random.default_rng(seed)
    envs = {family: PointMassEnv(max_steps=max_steps, family=family) for family in ("reach", "pit")}
    rows: dict = {k: [] for k in attrs.fields_dict(RouteDemonstrations)}
    for episode in range(episodes):
        env = envs["reach" if rng.random() < reach_fraction else "pit"]
        env.reset(seed=SEED_OFFSET * (seed + 1) + episode)
        behaviour = BEHAVIOURS[rng.choice(len(BEHAVIOURS), p=BEHAVIOUR_P)]
        wander = int(rng.integers(WANDER_MAX_STEPS + 1)) if behaviour == "wander" else 0
        push = rng.uniform(-1, 1, 2)
        route = 0.0
        while env.steps < env.max_steps and not env.fallen:
            label = float(rng.uniform(-1, 1))
            plan = expert_chunk(env, chunk, _route_controller(label))
            probe = _route_probe(rng, env, plan, chunk)
            future_image, trajectory, value = _valued_outcome(env, probe, gamma, CONTINUATION_STEPS)
            pit = env.pit_position
            obs = env.observe()
            for key, item in (
                ("images", obs.images[CAMERA]), ("states", _state(env)), ("goals", env.colours.index(env.goal)),
                ("goal_positions", env.goal_position), ("pit_positions", np.zeros(2) if pit is None else pit),
                ("has_pit", float(pit is not None)), ("routes", label), ("expert", plan), ("chunks", probe),
                ("future_images", future_image), ("trajectories", trajectory), ("values", value),
            ):
                rows[key].append(item)
            position, velocity = _position_velocity(env)
            if env.steps % chunk == 0:
                route = float(rng.uniform(-1, 1))
            if env.steps < wander:
                if env.steps % 4 == 0:
                    push = rng.uniform(-1, 1, 2)
                action = push
            elif behaviour == "avoiding":
                action = avoiding_action(position, velocity, env.goal_position, pit)
            else:
                action = route_action(position, velocity, env.goal_position, route)
            if env.step(np.clip(action + rng.normal(0.0, DART_NOISE, 2), -1, 1)).success:
                break
        if progress is not None:
            progress(episode + 1, episodes)
    dtypes = {"images": np.uint8, "future_images": np.uint8, "goals": np.int64}
    return RouteDemonstrations(**{k: np.asarray(v, dtype=dtypes.get(k, np.float32)) for k, v in rows.items()})


__all__ = ["Demonstrations", "RouteDemonstrations", "collect", "collect_routes", "SEED_OFFSET", "GAMMA"]
