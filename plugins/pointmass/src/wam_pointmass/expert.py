"""The scripted expert that demonstrates the task: a saturated PD controller on the goal.

It reads the goal's position from the simulator (privileged information the model never
gets: the model must find the named target in the image). Gains put the linearised
closed loop near critical damping, p'' + (2 KD MAX_ACCEL + DRAG) p' + KP MAX_ACCEL p = 0,
so the mass arrives without circling the target.

For the ``pit`` family two variants make the data: the route demonstrator
(:func:`route_action`), the expert pushed to one side by a route preference, which shows
many routes to the goal and ignores the pit; and the avoiding expert
(:func:`avoiding_action`), which goes around it and defines what a chunk is worth.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from .env import PointMassEnv

#: ``controller(env, position, velocity) -> action``: a scripted policy with privileged access to the env
Controller = Callable[[PointMassEnv, np.ndarray, np.ndarray], np.ndarray]

KP = 2.0
KD = 0.75


def expert_action(position: np.ndarray, velocity: np.ndarray, goal: np.ndarray) -> np.ndarray:
    """One command in [-1, 1]^2 towards ``goal``."""
    return np.clip(KP * (goal - position) - KD * velocity, -1.0, 1.0).astype(np.float32)


def expert_chunk(env: PointMassEnv, length: int, controller: Optional[Controller] = None) -> np.ndarray:
    """The next ``length`` actions of ``controller`` (default: the expert) from the env's
    current state, planned by running it in the simulator and rewinding (the env is left
    as it was)."""
    snap = env.snapshot()
    actions = np.empty((length, 2), dtype=np.float32)
    try:
        for i in range(length):
            state = env.observe().state
            if controller is None:
                actions[i] = expert_action(state["position"], state["velocity"], env.goal_position)
            else:
                actions[i] = controller(env, state["position"], state["velocity"])
            env.step(actions[i])
    finally:
        env.restore(snap)
    return actions


# ---------------------------------------------------------------------- pit family

#: The route demonstrator's sideways push (a fraction of full command) at ``route`` = +-1,
#: faded out quadratically within ROUTE_FADE metres of the goal so that every route arrives.
ROUTE_PUSH = 2.5
ROUTE_FADE = 0.8
#: The avoiding controller steers past the pit's centre at least this far.
PIT_CLEAR = 0.32


def route_action(position: np.ndarray, velocity: np.ndarray, goal: np.ndarray, route: float) -> np.ndarray:
    """The expert with a route preference ``route`` in [-1, 1]: pushed sideways (to the
    left of the direction to the goal for positive values), so routes curve on either side
    of the straight line. It does not look at pits: it demonstrates routes, not safety."""
    offset = goal - position
    distance = float(np.linalg.norm(offset))
    left = np.array([-offset[1], offset[0]]) / max(distance, 1e-9)
    push = ROUTE_PUSH * route * min(1.0, distance / ROUTE_FADE) ** 2 * left
    return np.clip(KP * offset - KD * velocity + push, -1.0, 1.0).astype(np.float32)


def avoiding_action(position: np.ndarray, velocity: np.ndarray, goal: np.ndarray, pit: Optional[np.ndarray]) -> np.ndarray:
    """The expert that goes around the pit: while the straight line to the goal passes
    within PIT_CLEAR of the pit's centre, it heads for a point beside the pit on the side
    the mass is on. Reaches the goal from 99 % of pit-family starts (``tests``)."""
    aim = goal
    if pit is not None:
        line = goal - position
        along = float(np.clip(np.dot(pit - position, line) / max(float(np.dot(line, line)), 1e-12), 0.0, 1.0))
        away = position + along * line - pit
        gap = float(np.linalg.norm(away))
        if gap < PIT_CLEAR and 0.0 < along < 1.0:
            side = away / gap if gap > 1e-9 else np.array([-line[1], line[0]]) / np.linalg.norm(line)
            aim = pit + (PIT_CLEAR + 0.08) * side
    return np.clip(KP * (aim - position) - KD * velocity, -1.0, 1.0).astype(np.float32)


__all__ = ["KP", "KD", "ROUTE_PUSH", "PIT_CLEAR", "expert_action", "expert_chunk", "route_action", "avoiding_action"]
