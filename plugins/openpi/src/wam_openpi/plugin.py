"""wamcore entry point of ``openpi-remote`` (``openpi = "wam_openpi.plugin"``).

Imports wamcore, numpy and this package's light modules only; ``websockets`` is imported
when a worker loads the model, Pillow when an image is resized.
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from wamcore import Adapter, Capabilities, ModelConfig, ModelSpec, Prediction, Requirement, hookimpl
from wamcore.errors import PredictionError

from .layouts import LAYOUTS
from .settings import OPTIONS, OpenpiSettings

DEFAULTS = OpenpiSettings()


def served_actions(answer: Any, chunk: int, action_dim: int) -> tuple:
    """The first ``chunk`` rows of the answer's ``actions`` as float32, and how many were served."""
    actions = answer.get("actions") if isinstance(answer, Mapping) else None
    if actions is None:
        keys = ", ".join(map(repr, list(answer)[:10])) if isinstance(answer, Mapping) else type(answer).__name__
        problem = f"the openpi server's answer has no 'actions' (it has {keys})"
    elif not (hasattr(actions, "dtype") and actions.dtype.kind == "f" and actions.ndim == 2):
        got = f"{getattr(actions, 'dtype', type(actions).__name__)} {getattr(actions, 'shape', '')}"
        problem = f"'actions' must be a 2-D float array [T, {action_dim}], got {got}"
    elif actions.shape[1] != action_dim or actions.shape[0] < chunk:
        problem = f"'actions' must be [T >= {chunk}, {action_dim}] (--openpi-chunk {chunk}), got {tuple(actions.shape)}"
    else:
        return actions[:chunk].astype("float32"), int(actions.shape[0])
    raise PredictionError([problem], context="openpi answer")


def adapter(layout, settings: OpenpiSettings) -> Adapter:
    chunk, size = settings.chunk_for(layout), settings.image_size_for(layout)

    def encode(request):
        return layout.request(request.observation, request.effective_instruction, size)

    def decode(answer, request):
        actions, served = served_actions(answer, chunk, layout.action_dim)
        timing = answer.get("server_timing")
        infer_ms = timing.get("infer_ms") if isinstance(timing, Mapping) else None
        return Prediction(actions=actions, info={"served_actions": served},
                          timing={"server_infer_ms": float(infer_ms)} if isinstance(infer_ms, (int, float)) else {})

    return Adapter(contract=layout.contract(chunk), encode=encode, decode=decode)


def configure(spec: ModelSpec, config: ModelConfig) -> ModelSpec:
    """The deployment's chunk and image size go into the adapters; the budget covers a reconnect."""
    settings = OpenpiSettings.from_options(config.options)
    return attrs.evolve(spec, adapters=tuple(adapter(layout, settings) for layout in LAYOUTS.values()),
                        timeout_s=settings.timeout + 15.0)


OPENPI_REMOTE = ModelSpec(
    name="openpi-remote",
    load="wam_openpi.model:load",
    adapters=tuple(adapter(layout, DEFAULTS) for layout in LAYOUTS.values()),
    capabilities=Capabilities(actions=True),
    options=OPTIONS,
    description="a running openpi policy server (pi0, pi0-FAST, pi0.5; openpi's websocket protocol); the worker holds no weights",
    install='pip install "./plugins/openpi"',
    requires=(Requirement("websockets", 'pip install "wamcore[openpi]"', "openpi's websocket protocol"),
              Requirement("PIL", "pip install Pillow", "resizing cameras as openpi's clients do")),
    timeout_s=DEFAULTS.timeout + 15.0,
    configure=configure,
)


@hookimpl
def wam_register_models(register):
    register(OPENPI_REMOTE)


@hookimpl
def wam_register_protocols(register):
    from .protocols import PROTOCOLS

    for protocol in PROTOCOLS:
        register(protocol)
