"""wamcore: run any world action model on any robot platform through one typed contract.

Importing wamcore is light (numpy, attrs, pluggy); torch and simulators are only imported
by plugins, lazily, where they run.
"""

from .contracts import (
    PROTOCOL_VERSION,
    AdapterContract,
    CameraInfo,
    Capabilities,
    ControlSpec,
    GripperSpec,
    ModelInfo,
    Observation,
    ObservationSpec,
    PredictRequest,
    Prediction,
)
from .errors import (
    ActionError,
    CapabilityError,
    CheckpointError,
    ConfigurationError,
    DependencyNotInstalled,
    IncompatiblePairError,
    ObservationError,
    PluginLoadError,
    PredictionError,
    UnknownModelError,
    UnknownPlatformError,
    WamError,
)
from .execution import ActResult, EpisodeResult, run_episode, wam_act
from .hookspecs import hookimpl
from .pairing import pair
from .registry import Registry, default_registry
from .service import LocalModel, ModelClient, ModelService
from .specs import (
    Adapter,
    Env,
    Episode,
    Intervention,
    ModelConfig,
    ModelSpec,
    NativeModel,
    Option,
    PlatformSpec,
    Requirement,
    StepResult,
)
from .validation import validate_actions, validate_observation

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "PROTOCOL_VERSION",
    "AdapterContract",
    "CameraInfo",
    "Capabilities",
    "ControlSpec",
    "GripperSpec",
    "ModelInfo",
    "Observation",
    "ObservationSpec",
    "PredictRequest",
    "Prediction",
    "ActionError",
    "CapabilityError",
    "CheckpointError",
    "ConfigurationError",
    "DependencyNotInstalled",
    "IncompatiblePairError",
    "ObservationError",
    "PluginLoadError",
    "PredictionError",
    "UnknownModelError",
    "UnknownPlatformError",
    "WamError",
    "ActResult",
    "EpisodeResult",
    "run_episode",
    "wam_act",
    "hookimpl",
    "pair",
    "Registry",
    "default_registry",
    "LocalModel",
    "ModelClient",
    "ModelService",
    "Adapter",
    "Env",
    "Episode",
    "Intervention",
    "ModelConfig",
    "ModelSpec",
    "NativeModel",
    "Option",
    "PlatformSpec",
    "Requirement",
    "StepResult",
    "validate_actions",
    "validate_observation",
]
