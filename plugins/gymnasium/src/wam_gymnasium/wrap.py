"""Any wamcore platform as a ``gymnasium.Env``, for RL libraries (the other direction of the bridge).

Spaces come from the env's own specs: the observation is a Dict with ``images`` (one uint8
``HxWx3`` Box per camera role) and ``state`` (one float64 Box per state vector); the action a
float32 Box with the control's bounds. One Gymnasium step is one wamcore action; native success
terminates the episode (reward 1 unless the platform reports its own), the action budget
truncates it. The instruction travels in ``info["instruction"]``.
"""

from __future__ import annotations

from typing import Any, Optional, Union

import gymnasium
import numpy as np
from gymnasium import spaces

from wamcore.specs import PlatformSpec


def _observation_space(env: Any) -> spaces.Dict:
    spec = env.observation_spec
    cameras = dict(spec.cameras)
    if any(size is None for size in cameras.values()):  # "any size": read it from a real frame
        first = env.reset(seed=0)
        cameras = {role: first.images[role].shape[:2] for role in cameras}
    parts = {}
    if cameras:
        parts["images"] = spaces.Dict({role: spaces.Box(0, 255, (int(h), int(w), 3), np.uint8) for role, (h, w) in cameras.items()})
    if spec.state:
        parts["state"] = spaces.Dict({name: spaces.Box(-np.inf, np.inf, (int(n),), np.float64) for name, n in spec.state.items()})
    return spaces.Dict(parts)


def _action_space(control: Any) -> spaces.Box:
    dim = control.action_dim
    low = np.full(dim, -np.inf) if control.low is None else np.asarray(control.low)
    high = np.full(dim, np.inf) if control.high is None else np.asarray(control.high)
    return spaces.Box(low.astype(np.float32), high.astype(np.float32), (dim,), np.float32)


class WamcoreEnv(gymnasium.Env):
    """A wamcore env behind Gymnasium's API."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, platform: Union[str, PlatformSpec], render_mode: Optional[str] = None, **options: Any):
        if isinstance(platform, str):
            from wamcore import Registry

            platform = Registry().platform(platform)
        self.platform = platform
        self.env = platform.create(**options)
        self.observation_space = _observation_space(self.env)
        self.action_space = _action_space(self.env.control)
        if self.env.control.rate_hz:
            self.metadata = {**self.metadata, "render_fps": self.env.control.rate_hz}
        self.render_mode = render_mode
        self._last = None

    def _convert(self, observation: Any) -> dict:
        out = {}
        if "images" in self.observation_space.spaces:
            out["images"] = {role: np.asarray(observation.images[role], dtype=np.uint8) for role in self.observation_space["images"].spaces}
        if "state" in self.observation_space.spaces:
            out["state"] = {name: np.asarray(observation.state[name], dtype=np.float64) for name in self.observation_space["state"].spaces}
        return out

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        if seed is None:  # the episode still follows Gymnasium's generator, seeded or not
            seed = int(self.np_random.integers(2**31 - 1))
        self._last = self.env.reset(seed=seed, **(options or {}))
        return self._convert(self._last), {"instruction": self._last.instruction}

    def step(self, action: Any):
        result = self.env.step(np.asarray(action, dtype=np.float32))
        self._last = self.env.observe()
        success = bool(result.success)
        reward = float(result.reward) if result.reward else float(success)
        truncated = not success and self.env.steps >= self.env.max_steps
        info = {"success": success, "instruction": self._last.instruction, **result.info}
        return self._convert(self._last), reward, success, truncated, info

    def render(self):
        if self.render_mode != "rgb_array" or self._last is None or not self._last.images:
            return None
        return np.asarray(next(iter(self._last.images.values())), dtype=np.uint8)

    def close(self):
        self.env.close()


#: ``gymnasium.make(GYM_ID, platform="pointmass", ...)``, for libraries that take env ids
GYM_ID = "wamcore/Platform-v0"
if GYM_ID not in gymnasium.registry:
    gymnasium.register(GYM_ID, entry_point="wam_gymnasium.wrap:WamcoreEnv")


def make(platform: Union[str, PlatformSpec], **options: Any) -> WamcoreEnv:
    """A ``gymnasium.Env`` for ``platform`` built with its platform ``options`` (and ``render_mode``)."""
    return WamcoreEnv(platform, **options)


__all__ = ["GYM_ID", "WamcoreEnv", "make"]
