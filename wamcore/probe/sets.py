"""The fixed probe sets: which contexts, at which horizons.

A set is plain data (platform id, env options, reset arguments, warm-up), so that two runs
of one set on one machine start from the same snapshots, whatever model they probe.
"""

from __future__ import annotations

from typing import Dict, Tuple

import attrs

from ..errors import ConfigurationError


@attrs.frozen
class ProbeContext:
    """One starting point: the env built with ``env_options``, ``reset(**reset)``, then
    ``warmup``: ``(intervention, steps)`` pairs executed in order (steps of the named
    intervention's actions, cycling), e.g. to start with the mass already moving."""

    name: str
    env_options: dict = attrs.field(factory=dict)
    reset: dict = attrs.field(factory=dict)
    warmup: tuple = attrs.field(default=(), converter=tuple)

    def to_json(self) -> dict:
        return {"name": self.name, "env_options": dict(self.env_options), "reset": dict(self.reset),
                "warmup": [list(w) for w in self.warmup]}


@attrs.frozen
class ProbeSet:
    name: str
    platform: str
    contexts: Tuple[ProbeContext, ...] = attrs.field(converter=tuple)
    #: steps after the snapshot at which real futures are compared across branches
    horizons: Tuple[int, ...] = attrs.field(default=(2, 4, 8), converter=tuple)
    description: str = ""


_WARMUPS = (None, None, "+x", "-y", "-x", "+y", "+x", "-y")

POINTMASS_CF = ProbeSet(
    name="pointmass-cf",
    platform="pointmass",
    contexts=[
        ProbeContext(
            name=f"seed={seed}",
            env_options={"action_noise": 0.05 if seed >= 6 else 0.0},
            reset={"seed": seed},
            warmup=() if push is None else ((push, 3),),
        )
        for seed, push in enumerate(_WARMUPS)
    ],
    description="PointMass, seeds 0-7: two at rest, six after a 3-step push, the last two with action noise "
                "(its generator is part of the snapshot)",
)

LIBERO_CF_MINI = ProbeSet(
    name="libero-cf-mini",
    platform="libero",
    contexts=[
        ProbeContext(name=f"{suite}/task=0", env_options={"suite": suite, "task": "0", "resolution": 128},
                     reset={"seed": 0, "init_state": 0})
        for suite in ("libero_spatial", "libero_object", "libero_goal", "libero_10")
    ],
    description="LIBERO, task 0 of each family (spatial, object, goal, long), init state 0 after the 10 "
                "settle steps, 128-pixel cameras",
)

PROBE_SETS: Dict[str, ProbeSet] = {s.name: s for s in (POINTMASS_CF, LIBERO_CF_MINI)}


def probe_set(name: str) -> ProbeSet:
    try:
        return PROBE_SETS[name]
    except KeyError:
        raise ConfigurationError(f"no probe set {name!r}; there are: {', '.join(PROBE_SETS)}") from None


__all__ = ["ProbeContext", "ProbeSet", "PROBE_SETS", "probe_set", "POINTMASS_CF", "LIBERO_CF_MINI"]
