"""Pairing a model with a platform: one check, once per pair, one error naming every gap.

The check compares an adapter's :class:`AdapterContract` with the platform's
:class:`ObservationSpec` and :class:`ControlSpec`. It works the same on a registered
:class:`ModelSpec` (in-process) and on a :class:`ModelInfo` received from a worker.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import attrs

from .contracts import AdapterContract, ControlSpec, ModelInfo, ObservationSpec
from .errors import IncompatiblePairError
from .specs import CONTROL_OPTION, Adapter, ModelConfig, ModelSpec, PlatformSpec

_checked: set = set()


def _size(s) -> str:
    return "any size" if s is None else f"{s[0]}x{s[1]}"


def contract_problems(contract: AdapterContract, observation: ObservationSpec, control: ControlSpec) -> list:
    """Every way ``contract`` does not fit a platform with ``observation`` and ``control``."""
    problems = []
    if contract.action_space != control.action_space:
        problems.append(
            f"action space: the model produces {contract.action_space!r}, the platform executes {control.action_space!r}"
        )
    if contract.action_dim != control.action_dim:
        problems.append(f"action dim: the model produces {contract.action_dim}, the platform takes {control.action_dim}")
    have = ", ".join(f"{r} {_size(s)}" for r, s in observation.cameras.items()) or "none"
    for role, size in contract.cameras.items():
        if role not in observation.cameras:
            problems.append(f"camera {role!r} ({_size(size)}) is not provided by the platform (it has: {have})")
        elif size is not None and observation.cameras[role] is not None and tuple(observation.cameras[role]) != tuple(size):
            problems.append(
                f"camera {role!r} must be {_size(size)} (HxW); the platform renders {_size(observation.cameras[role])}"
            )
    for name, n in contract.state.items():
        if name not in observation.state:
            problems.append(f"state {name!r} ({n}) is not provided by the platform (it has: {sorted(observation.state) or 'none'})")
        elif int(observation.state[name]) != int(n):
            problems.append(f"state {name!r} must have {n} values; the platform gives {observation.state[name]}")
    if contract.chunk_size < control.chunk_min or (control.chunk_max is not None and contract.chunk_size > control.chunk_max):
        problems.append(
            f"chunk size {contract.chunk_size} is outside the platform's executable bounds [{control.chunk_min}, {control.chunk_max}]"
        )
    return problems


def check_contract(
    contract: Optional[AdapterContract],
    observation: ObservationSpec,
    control: ControlSpec,
    *,
    model: str = "model",
    platform: str = "platform",
    alternatives: str = "",
) -> None:
    """Raise :class:`IncompatiblePairError` unless the contract fits; cached per pair."""
    if contract is None:
        raise IncompatiblePairError(f"Model {model!r} has no adapter for platform {platform!r}.{alternatives}")
    key = (repr(contract), repr(observation), repr(control))
    if key in _checked:
        return
    problems = contract_problems(contract, observation, control)
    if problems:
        raise IncompatiblePairError(f"Model {model!r} does not fit platform {platform!r}:{alternatives}", problems)
    _checked.add(key)


@attrs.frozen
class Pairing:
    """A checked model/platform pair."""

    model: ModelSpec
    platform: PlatformSpec
    adapter: Adapter
    observation: ObservationSpec
    #: the platform control the pair uses, and the platform options that build envs for it
    control: Optional[ControlSpec] = None
    platform_options: dict = attrs.field(factory=dict)

    @property
    def contract(self) -> AdapterContract:
        return self.adapter.contract


def _alternatives(model_platforms: Sequence[str], platform_models: Sequence[str], model: str, platform: str) -> str:
    return (
        f"\n{model!r} supports: {', '.join(model_platforms) or 'no platforms'}."
        f"\nModels with an adapter for {platform!r}: {', '.join(platform_models) or 'none installed'}."
    )


def _control_hint(platform: PlatformSpec, contract: Optional[AdapterContract], control: ControlSpec) -> str:
    """Where a platform executes the model's action space under another control, say how to choose it."""
    if contract is None or contract.action_space == control.action_space:
        return ""
    if not any(c.action_space == contract.action_space for c in platform.controls):
        return ""
    return (f"\nPlatform {platform.name!r} also executes {contract.action_space!r}: choose it with "
            f"--control {contract.action_space} (platform option {CONTROL_OPTION}={contract.action_space!r}).")


def pair(
    model: ModelSpec,
    platform: PlatformSpec,
    *,
    platform_options: Optional[Mapping[str, Any]] = None,
    config: Optional[ModelConfig] = None,
    registry=None,
    observation: Optional[ObservationSpec] = None,
) -> Pairing:
    """Find ``model``'s adapter for ``platform`` and check it, or raise one clear error.

    ``registry`` (optional) is used to name the models that would fit instead;
    ``observation`` overrides the platform's schema (else built from ``platform_options``).
    On a platform with several controls, the one ``platform_options`` name is used, else the
    one the adapter declares; ``Pairing.platform_options`` then names it, for building envs."""
    config = config or ModelConfig(platform=platform.name)
    if not config.platform_options:  # what ModelSpec.configure may fit an options-dependent schema to
        config = attrs.evolve(config, platform_options=platform.with_defaults(platform_options))
    resolved = model.resolve(config)
    adapter = resolved.adapter_for(platform.name)
    contract = None if adapter is None else adapter.contract
    observation = observation or platform.observation_spec(platform_options)
    options = dict(platform_options or {})
    declared = contract is not None and any(c.action_space == contract.action_space for c in platform.extra_controls)
    if options.get(CONTROL_OPTION) is None and declared:
        options[CONTROL_OPTION] = contract.action_space
    control = platform.control_for(options)
    others = registry.models_for(platform.name) if registry is not None else []
    alternatives = _alternatives(resolved.platforms, others, resolved.name, platform.name)
    check_contract(
        contract,
        observation,
        control,
        model=resolved.name,
        platform=platform.name,
        alternatives=alternatives + _control_hint(platform, contract, control),
    )
    return Pairing(model=resolved, platform=platform, adapter=adapter, observation=observation, control=control,
                   platform_options=options)


def check_model_info(
    info: ModelInfo,
    platform: PlatformSpec,
    observation: Optional[ObservationSpec] = None,
    control: Optional[ControlSpec] = None,
) -> AdapterContract:
    """Client side, at connect: the worker's declared contract must fit this platform and
    the control its envs execute (default: the platform's default control)."""
    contract = info.contract_for(platform.name)
    control = control or platform.control
    check_contract(
        contract,
        observation or platform.observation,
        control,
        model=info.backend,
        platform=platform.name,
        alternatives=f"\nThe worker serves: {', '.join(c.platform for c in info.contracts) or 'nothing'}."
        + _control_hint(platform, contract, control),
    )
    return contract


__all__ = ["Pairing", "pair", "check_contract", "contract_problems", "check_model_info"]
