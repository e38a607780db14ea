"""``libero-cf-mini``: the probe set of LIBERO (``wam probe --set libero-cf-mini``)."""

from __future__ import annotations

from wamcore.probe import ProbeContext, ProbeSet

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

__all__ = ["LIBERO_CF_MINI"]
