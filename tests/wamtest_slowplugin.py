"""A plugin whose import takes a while (as a real one importing a simulator does), so that
concurrent lookups meet a registry that is still loading it (``test_loading_hardening``)."""

from __future__ import annotations

import time

from wamcore import PlatformSpec, hookimpl

import wamtest_scripted as toy

time.sleep(0.5)


@hookimpl
def wam_register_platforms(register):
    register(PlatformSpec(name="slow-toy", observation=toy.TOY_OBSERVATION, control=toy.TOY_CONTROL, make_env=toy.ToyEnv))
