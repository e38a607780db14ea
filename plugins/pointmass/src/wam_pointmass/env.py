"""The PointMass environment: a point mass on a square floor among coloured targets.

Physics (one action, ``DT`` seconds, semi-implicit Euler)::

    v <- v + DT * (MAX_ACCEL * clip(u + noise, -1, 1) - DRAG * v)
    p <- p + DT * v          (then clamped to the walls; the velocity into a wall is zeroed)

The instruction names one target by colour; native success is the mass's centre inside
that target's disc. In the ``pit`` family a pit lies across the direct route from the start
to the goal: a mass whose centre ends a step inside it is stuck there (no success possible).
Everything random (layout, goal, start, pit, optional actuation noise) comes from
generators seeded by ``reset(seed=...)``, and :meth:`PointMassEnv.snapshot` captures them
too, so a restored episode replays bit-identically, images included.
"""

from __future__ import annotations

import copy
from typing import Optional

import attrs
import numpy as np

from wamcore import ActionError, ConfigurationError, Observation, StepResult

from .render import draw_background, draw_frame, locate_mass
from .spec import (
    CAMERA,
    COLOURS,
    DEFAULT_MAX_STEPS,
    DRAG,
    DT,
    FAMILIES,
    MAX_ACCEL,
    PIT_COLOUR,
    PIT_RADIUS,
    POINTMASS_CONTROL,
    POINTMASS_OBSERVATION,
    TARGET_RADIUS,
    WALL,
    instruction_for,
)

#: Layout sampling: targets inside [-TARGET_SPAN, TARGET_SPAN]^2, at least TARGET_GAP apart;
#: the mass starts at least START_GAP from every target.
TARGET_SPAN = 0.75
TARGET_GAP = 0.5
START_GAP = 0.4
#: Pit family: the start is at least PIT_ROUTE_MIN from the goal, and the pit's centre lies
#: on the straight route at a fraction in PIT_ALONG of its length, at most PIT_OFFSET to its
#: side, with PIT_CLEARANCE between the pit's edge and the start and every target's edge.
PIT_ROUTE_MIN = 0.9
PIT_ALONG = (0.4, 0.6)
PIT_OFFSET = 0.05
PIT_CLEARANCE = 0.1


@attrs.frozen(eq=False)
class PointMassSnapshot:
    """Everything that determines the future of an episode, the generators of action noise
    and of the next unseeded reset included (arrays are private copies)."""

    position: np.ndarray
    velocity: np.ndarray
    targets: np.ndarray
    goal: int
    steps: int
    noise_rng: dict
    layout_rng: dict
    background: np.ndarray
    pit: Optional[np.ndarray] = None
    fallen: bool = False


def _readonly(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


class PointMassEnv:
    """One PointMass arena. ``max_steps`` is the action budget of an episode;
    ``action_noise`` the std of Gaussian noise added to each command (0: deterministic);
    ``family`` the task family (``reach`` or ``pit``)."""

    observation_spec = POINTMASS_OBSERVATION
    control = POINTMASS_CONTROL
    colours = tuple(COLOURS)

    def __init__(self, max_steps: int = DEFAULT_MAX_STEPS, action_noise: float = 0.0, family: str = "reach"):
        if int(max_steps) < 1:
            raise ConfigurationError(f"max_steps must be >= 1, got {max_steps}")
        if not float(action_noise) >= 0.0:
            raise ConfigurationError(f"action_noise must be >= 0, got {action_noise}")
        if family not in FAMILIES:
            raise ConfigurationError(f"family must be one of {', '.join(FAMILIES)}, got {family!r}")
        self.max_steps = int(max_steps)
        self.action_noise = float(action_noise)
        self.family = family
        self._layout_rng = np.random.default_rng(0)
        self.reset()

    # ------------------------------------------------------------------ episode

    def reset(self, *, seed: Optional[int] = None, goal: Optional[str] = None) -> Observation:
        """Sample a new layout (targets, goal, start). ``seed`` makes it reproducible;
        ``goal`` (a colour) fixes which target the instruction names."""
        if seed is not None:
            self._layout_rng = np.random.default_rng(seed)
        rng = self._layout_rng
        targets = self._sample_targets(rng)
        goal_index = int(rng.integers(len(self.colours)))
        if goal is not None:
            if goal not in self.colours:
                raise ConfigurationError(f"goal must be one of {', '.join(self.colours)}, got {goal!r}")
            goal_index = self.colours.index(goal)
        self._targets = _readonly(targets)
        self._goal = goal_index
        self._pit: Optional[np.ndarray] = None
        self._fallen = False
        if self.family == "pit":
            self._position, self._pit = self._sample_pit_route(rng, targets, targets[goal_index])
        else:
            self._position = self._sample_start(rng, targets)
        self._velocity = np.zeros(2)
        self._noise_rng = np.random.default_rng(rng.integers(2**63))
        discs = list(zip(targets, COLOURS.values()))
        if self._pit is not None:
            discs.insert(0, (self._pit, PIT_COLOUR, PIT_RADIUS))
        self._background = _readonly(draw_background(discs))
        self.steps = 0
        self._obs: Optional[Observation] = None
        return self.observe()

    @staticmethod
    def _sample_targets(rng: np.random.Generator) -> np.ndarray:
        while True:
            targets = rng.uniform(-TARGET_SPAN, TARGET_SPAN, size=(len(COLOURS), 2))
            gaps = np.linalg.norm(targets[:, None] - targets[None], axis=-1)
            if gaps[np.triu_indices(len(targets), 1)].min() >= TARGET_GAP:
                return targets

    @staticmethod
    def _sample_start(rng: np.random.Generator, targets: np.ndarray) -> np.ndarray:
        while True:
            start = rng.uniform(-WALL, WALL, size=2)
            if np.linalg.norm(targets - start, axis=-1).min() >= START_GAP:
                return start

    @classmethod
    def _sample_pit_route(cls, rng: np.random.Generator, targets: np.ndarray, goal: np.ndarray) -> tuple:
        """(start, pit centre): a start far enough from the goal, and a pit across the route."""
        while True:
            start = cls._sample_start(rng, targets)
            route = goal - start
            length = float(np.linalg.norm(route))
            if length < PIT_ROUTE_MIN:
                continue
            side = np.array([-route[1], route[0]]) / length
            pit = start + rng.uniform(*PIT_ALONG) * route + rng.uniform(-PIT_OFFSET, PIT_OFFSET) * side
            clear = PIT_RADIUS + PIT_CLEARANCE
            if (np.linalg.norm(targets - pit, axis=-1).min() >= clear + TARGET_RADIUS
                    and np.linalg.norm(start - pit) >= clear and np.abs(pit).max() <= WALL):
                return start, pit

    # ------------------------------------------------------------------ queries

    @property
    def goal(self) -> str:
        return self.colours[self._goal]

    @property
    def goal_position(self) -> np.ndarray:
        return self._targets[self._goal].copy()

    @property
    def target_positions(self) -> dict:
        return {c: self._targets[i].copy() for i, c in enumerate(self.colours)}

    @property
    def pit_position(self) -> Optional[np.ndarray]:
        """The pit's centre (metres), or None in the ``reach`` family."""
        return None if self._pit is None else self._pit.copy()

    @property
    def fallen(self) -> bool:
        """Whether the mass is stuck in the pit."""
        return self._fallen

    def distance_to_goal(self) -> float:
        return float(np.linalg.norm(self._position - self._targets[self._goal]))

    def goal_distance(self, observation: Observation) -> float:
        """Metres from the mass seen in ``observation``'s camera frame (real or predicted) to
        the goal target; infinite when no mass is seen. What ``--score goal`` plans with."""
        position = locate_mass(observation.images[CAMERA])
        return float("inf") if position is None else float(np.linalg.norm(position - self._targets[self._goal]))

    def observe(self) -> Observation:
        """The current observation; rendered once per state and then reused (read-only)."""
        if self._obs is None:
            self._obs = Observation(
                images={CAMERA: _readonly(draw_frame(self._background, self._position))},
                state={"position": _readonly(self._position.copy()), "velocity": _readonly(self._velocity.copy())},
                instruction=instruction_for(self.goal),
                step=self.steps,
            )
        return self._obs

    # ------------------------------------------------------------------ control

    def step(self, action) -> StepResult:
        """Execute one action (commands beyond [-1, 1] saturate there)."""
        u = np.asarray(action, dtype=np.float64)
        if u.shape != (2,) or not np.isfinite(u).all():
            raise ActionError([f"a PointMass action is 2 finite numbers (accel_x, accel_y), got {u.tolist()}"])
        if self._fallen:
            self.steps += 1
            self._obs = None
            return StepResult(success=False, reward=0.0, info={"distance": self.distance_to_goal(), "fallen": True})
        if self.action_noise > 0.0:
            u = u + self._noise_rng.normal(0.0, self.action_noise, size=2)
        u = np.clip(u, -1.0, 1.0)
        velocity = self._velocity + DT * (MAX_ACCEL * u - DRAG * self._velocity)
        position = self._position + DT * velocity
        hit = np.abs(position) > WALL
        position = np.clip(position, -WALL, WALL)
        velocity[hit] = 0.0
        if self._pit is not None and np.linalg.norm(position - self._pit) <= PIT_RADIUS:
            self._fallen = True
            velocity = np.zeros(2)
        self._position, self._velocity = position, velocity
        self.steps += 1
        self._obs = None
        distance = self.distance_to_goal()
        success = distance <= TARGET_RADIUS and not self._fallen
        info = {"distance": distance}
        if self._pit is not None:
            info["fallen"] = self._fallen
        return StepResult(success=success, reward=float(success), info=info)

    # ------------------------------------------------------------------ snapshots

    def snapshot(self) -> PointMassSnapshot:
        return PointMassSnapshot(
            position=self._position.copy(),
            velocity=self._velocity.copy(),
            targets=self._targets,
            goal=self._goal,
            steps=self.steps,
            noise_rng=copy.deepcopy(self._noise_rng.bit_generator.state),
            layout_rng=copy.deepcopy(self._layout_rng.bit_generator.state),
            background=self._background,
            pit=self._pit,
            fallen=self._fallen,
        )

    def restore(self, snapshot: PointMassSnapshot) -> None:
        if not isinstance(snapshot, PointMassSnapshot):
            raise TypeError(f"restore() takes a PointMassSnapshot, got {type(snapshot).__name__}")
        self._position = snapshot.position.copy()
        self._velocity = snapshot.velocity.copy()
        self._targets = snapshot.targets
        self._goal = snapshot.goal
        self.steps = snapshot.steps
        self._noise_rng = _generator(snapshot.noise_rng)
        self._layout_rng = _generator(snapshot.layout_rng)  # a reset without a seed continues it
        self._background = snapshot.background
        self._pit = snapshot.pit
        self._fallen = snapshot.fallen
        self._obs = None

    def close(self) -> None:
        pass


def _generator(state: dict) -> np.random.Generator:
    rng = np.random.default_rng()
    rng.bit_generator.state = copy.deepcopy(state)
    return rng


def make_env(max_steps: int = DEFAULT_MAX_STEPS, action_noise: float = 0.0, family: str = "reach") -> PointMassEnv:
    """The platform's env factory (``PlatformSpec.make_env``)."""
    return PointMassEnv(max_steps=max_steps, action_noise=action_noise, family=family)


__all__ = ["PointMassEnv", "PointMassSnapshot", "make_env"]
