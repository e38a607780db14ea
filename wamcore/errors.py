"""Typed errors. Every failure a user can act on has its own class and says what to do.

Errors raised inside a model worker travel back over RPC by class name (see
``wamcore.rpc``); any class defined here is rebuilt on the client with the server's
message and traceback text, so ``except ObservationError`` works the same in-process
and across processes.
"""

from __future__ import annotations

from typing import Iterable, Sequence


class WamError(Exception):
    """Base class of every error wamcore raises on purpose."""

    #: traceback text of the worker that raised it, when it came over RPC
    remote_traceback: str | None = None


class ConfigurationError(WamError):
    """Options that cannot work together (another backend's option, endpoint plus spawn options...)."""


class PluginError(WamError):
    """Something about installed plugins."""


class UnknownIdError(PluginError, LookupError):
    """An id no installed plugin provides; says what is close and what to install."""

    kind = "id"

    def __init__(
        self,
        requested: str,
        available: Sequence[str] = (),
        suggestions: Sequence[str] = (),
        install: str | None = None,
        failures: Sequence[str] = (),
    ):
        self.requested = requested
        self.available = tuple(available)
        self.suggestions = tuple(suggestions)
        self.install = install
        lines = [f"Unknown {self.kind} {requested!r}."]
        if suggestions:
            lines.append("Did you mean: " + ", ".join(repr(s) for s in suggestions) + "?")
        if install:
            lines.append(f"It is provided by a plugin that is not installed: {install}")
        lines.append(
            "Installed: " + (", ".join(self.available) if self.available else "none")
            + " (`wam plugins` lists them)."
        )
        for failure in failures:
            lines.append(f"Note: {failure}")
        super().__init__("\n".join(lines))


class UnknownModelError(UnknownIdError):
    kind = "model"


class UnknownPlatformError(UnknownIdError):
    kind = "platform"


class UnknownProtocolError(UnknownIdError):
    kind = "evaluation protocol"


class UnknownProbeSetError(UnknownIdError):
    kind = "probe set"


class UnknownServingProtocolError(UnknownIdError):
    kind = "serving protocol"


class PluginLoadError(PluginError):
    """A plugin failed to import or register; raised when one of its ids is asked for."""


class DuplicateIdError(PluginError):
    """Two registrations claim the same id or alias."""


class DependencyNotInstalled(WamError, ImportError):
    """An optional dependency is missing; the message has the exact install command."""

    def __init__(self, package: str, install: str, purpose: str = ""):
        self.package = package
        self.install = install
        what = f" (needed for {purpose})" if purpose else ""
        super().__init__(f"{package} is not installed{what}. Install it with: {install}")


class IncompatiblePairError(WamError):
    """A model's adapter contract does not fit a platform; lists every mismatch."""

    def __init__(self, message: str, problems: Iterable[str] = ()):
        self.problems = tuple(problems)
        if self.problems:
            message = message + "\n" + "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(message)


class ValidationError(WamError, ValueError):
    """Data that breaks a contract. ``problems`` lists every problem found, not only the first."""

    what = "data"

    def __init__(self, problems: Iterable[str], context: str = ""):
        self.problems = tuple(problems)
        head = f"Invalid {self.what}" + (f" ({context})" if context else "")
        super().__init__(head + ":\n" + "\n".join(f"  - {p}" for p in self.problems))

    def __reduce__(self):  # keep problems when copied
        return (type(self), (self.problems,))


class ObservationError(ValidationError):
    """An observation that must not reach a model."""

    what = "observation"


class ActionError(ValidationError):
    """An action chunk that must not reach a simulator or robot."""

    what = "action chunk"


class PredictionError(ValidationError):
    """A prediction whose extras (futures, values) break the declared contract."""

    what = "prediction"


class CapabilityError(WamError):
    """A request asks for something the model does not declare (e.g. candidate actions)."""


class ProtocolError(WamError):
    """A message that is not of our protocol, or of another protocol version."""


class RemoteError(WamError):
    """An error raised inside a worker whose class is not a wamcore error."""

    def __init__(self, remote_type: str, message: str, traceback: str | None = None):
        self.remote_type = remote_type
        self.remote_traceback = traceback
        super().__init__(f"{remote_type} in model worker: {message}")


class WorkerError(WamError):
    """A model worker could not be started or reached."""


class WorkerTimeout(WorkerError, TimeoutError):
    """A worker did not answer within its declared budget."""


class CheckpointError(WamError):
    """Checkpoint files missing, unreadable, or not matching their pinned hash."""


class WeightsMismatchError(CheckpointError):
    """A downloaded weight file whose size or sha256 is not the pinned one (changed or cut)."""


class RevisionMovedError(CheckpointError):
    """A hub revision that now names another commit than the one pinned or recorded."""


class WeightsUnavailableError(CheckpointError):
    """Weights that are not on this machine and cannot be fetched here (offline, no network)."""


class ArtifactError(WamError):
    """A cached artifact that cannot be trusted (modified, cut, or filed under another key)."""


class EnvironmentFailure(WamError):
    """The platform (simulator or robot) failed while executing an action."""
