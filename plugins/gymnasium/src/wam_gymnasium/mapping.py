"""The declared mapping from a Gymnasium env's spaces to wamcore's ObservationSpec and ControlSpec.

A Box action space becomes the control (its bounds the control bounds); a Box observation a
state vector named ``observation``, a Dict of Boxes one state vector per key; ``render()``
frames a camera where the mapping asks for one. Anything else is refused with
:class:`UnsupportedSpaceError` naming the space, before an episode starts.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping, Optional

import attrs
import numpy as np

from wamcore import ControlSpec, ObservationSpec
from wamcore.errors import ConfigurationError
from wamcore.specs import resolve_callable

#: the state vector of a Box observation space
OBSERVATION = "observation"
#: the camera role of ``render()`` frames
RENDER_CAMERA = "render"


class UnsupportedSpaceError(ConfigurationError):
    """A Gymnasium space the bridge cannot map (Discrete actions, Tuple, Text...)."""


@attrs.frozen
class GymStep:
    """What a success function sees after one step (``--gym-success module:function``)."""

    env: Any
    observation: Any
    reward: float
    terminated: bool
    truncated: bool
    info: dict
    steps: int


@attrs.frozen
class GymMapping:
    """How one Gymnasium env appears in wamcore. Give it as ``--gym-mapping module:object``;
    the ``--gym-*`` flags set or override its fields.

    ``success(step: GymStep) -> bool``: None reads ``info["success"]`` / ``info["is_success"]``.
    ``state``: Dict observation keys to expose (None: every Box key).
    """

    camera: bool = False
    instruction: str = ""
    success: Optional[Callable[[GymStep], bool]] = None
    action_names: Optional[tuple] = None
    state: Optional[tuple] = None
    kwargs: dict = attrs.field(factory=dict)


def mapping_from_options(options: Mapping[str, Any]) -> GymMapping:
    """The mapping ``--gym-mapping`` names (else the default), with the ``--gym-*`` flags applied."""
    import json

    target = options.get("gym_mapping")
    mapping = GymMapping()
    if target:
        mapping = resolve_callable(target) if ":" in target else None
        if not isinstance(mapping, GymMapping):
            raise ConfigurationError(f"--gym-mapping {target!r} must name a wam_gymnasium.GymMapping as 'module:object'")
    changes: dict = {}
    if options.get("gym_camera"):
        changes["camera"] = True
    if options.get("gym_instruction"):
        changes["instruction"] = options["gym_instruction"]
    if options.get("gym_success"):
        changes["success"] = resolve_callable(options["gym_success"])
    if options.get("gym_kwargs"):
        try:
            kwargs = json.loads(options["gym_kwargs"])
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"--gym-kwargs must be a JSON object: {exc}") from None
        if not isinstance(kwargs, dict):
            raise ConfigurationError(f"--gym-kwargs must be a JSON object, got {options['gym_kwargs']!r}")
        changes["kwargs"] = {**mapping.kwargs, **kwargs}
    return attrs.evolve(mapping, **changes)


def action_space_id(gym_id: str) -> str:
    """A versioned wamcore action-space id per Gymnasium env: ``gymnasium.invertedpendulum_v5.box.v1``."""
    return "gymnasium." + re.sub(r"[^a-z0-9_]+", "_", gym_id.lower()).strip("_") + ".box.v1"


def _bound(values: np.ndarray) -> Optional[tuple]:
    return None if not np.isfinite(values).any() else tuple(float(v) for v in values)


def control_spec(gym_id: str, space: Any, mapping: GymMapping) -> ControlSpec:
    from gymnasium import spaces

    if not isinstance(space, spaces.Box) or not np.issubdtype(space.dtype, np.floating):
        raise UnsupportedSpaceError(
            f"{gym_id}: action space {space} is not supported: the bridge maps a float Box action space only "
            "(a Discrete, MultiDiscrete, MultiBinary, Tuple, Dict or Text action space has no continuous control)"
        )
    dim = int(np.prod(space.shape))
    names = mapping.action_names or tuple(f"a{i}" for i in range(dim))
    if len(names) != dim:
        raise ConfigurationError(f"{gym_id}: the mapping names {len(names)} actions, the action space has {dim}")
    low, high = _bound(space.low.ravel()), _bound(space.high.ravel())
    if (low is None) != (high is None):  # one-sided: keep both, the infinite side as it is
        low, high = tuple(map(float, space.low.ravel())), tuple(map(float, space.high.ravel()))
    return ControlSpec(action_space=action_space_id(gym_id), action_names=names, low=low, high=high,
                       description=f"the action of Gymnasium's {gym_id}, as its Box action space defines it")


def state_keys(gym_id: str, space: Any, mapping: GymMapping) -> dict:
    """State vector name -> (Dict key or None for a Box observation, length)."""
    from gymnasium import spaces

    def box_length(name: str, box: Any) -> int:
        if not isinstance(box, spaces.Box):
            raise UnsupportedSpaceError(
                f"{gym_id}: observation {name!r} is a {type(box).__name__} space ({box}): the bridge maps Box "
                "observations (and Dicts of Boxes) to state vectors only"
            )
        return int(np.prod(box.shape))

    if isinstance(space, spaces.Dict):
        keys = mapping.state or tuple(space.spaces)
        missing = [k for k in keys if k not in space.spaces]
        if missing:
            raise ConfigurationError(f"{gym_id}: the mapping names observation keys {missing} the env lacks ({list(space.spaces)})")
        return {k: (k, box_length(k, space.spaces[k])) for k in keys}
    return {OBSERVATION: (None, box_length(OBSERVATION, space))}


def observation_spec(state: Mapping[str, tuple], camera: Optional[tuple]) -> ObservationSpec:
    return ObservationSpec(cameras={RENDER_CAMERA: camera} if camera else {},
                           state={name: n for name, (_key, n) in state.items()})


__all__ = ["GymMapping", "GymStep", "UnsupportedSpaceError", "OBSERVATION", "RENDER_CAMERA", "mapping_from_options",
           "action_space_id", "control_spec", "state_keys", "observation_spec"]
