"""``pointmass-cf``: the probe set of PointMass (``wam probe --set pointmass-cf``)."""

from __future__ import annotations

from wamcore.probe import ProbeContext, ProbeSet

#: warm-up push per seed (None: at rest)
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

__all__ = ["POINTMASS_CF"]
