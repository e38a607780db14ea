"""What every openpi layout shares, and the generic one.

openpi has no schema: each robot has its own keys and conventions (LIBERO's
``observation/image``, ``observation/state``; ALOHA's ``images``/``state`` with CHW
images), fixed by its example clients and policy transforms. A *layout* knows one of them
and turns a decoded openpi request back into our physical :class:`~wamcore.Observation`
(which then goes through the model's own validation, like any other request). A platform
without one (:func:`wam_openpi.layouts.layout_for`) is served in the :class:`GenericLayout`,
which mirrors our observation one key per camera and state vector.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Protocol

from wamcore import AdapterContract, Observation
from wamcore.errors import ObservationError

PROMPT = "prompt"
#: what a request without a prompt is told, as openpi's policy refuses one ("Prompt is required")
NO_PROMPT = "; openpi's policies need one too unless served with a default: wam serve --default-prompt TEXT"


class Layout(Protocol):
    """One platform's openpi request keys."""

    name: str

    def keys(self, contract: AdapterContract) -> Dict[str, str]:
        """Each request key and what it holds (sent in the metadata, named in errors)."""

    def check(self, contract: AdapterContract) -> None:
        """ConfigurationError unless the layout carries everything ``contract`` needs."""

    def observation(self, message: Mapping[str, Any], contract: AdapterContract) -> Observation:
        """The physical observation in ``message``; ObservationError naming the keys at fault."""


def inject_default_prompt(message: Any, prompt: Optional[str]) -> Any:
    """openpi's ``InjectDefaultPrompt`` (``src/openpi/transforms.py``): a request without a
    prompt gets the server's default one (``scripts/serve_policy.py --default_prompt``)."""
    if prompt is not None and isinstance(message, Mapping) and PROMPT not in message:
        return {**message, PROMPT: prompt}
    return message


def check_keys(message: Any, expected: Mapping[str, str]) -> List[str]:
    """Problems with the keys of a request: not a map, missing keys, keys no layout reads."""
    if not isinstance(message, Mapping):
        return [f"an openpi request must be a map of key to value, got {type(message).__name__}"]
    problems = [f"missing key {k!r} ({what})" + (NO_PROMPT if k == PROMPT else "")
                for k, what in expected.items() if k not in message]
    extra = sorted(repr(k)[:60] for k in message if k not in expected)
    if extra:
        problems.append(f"unexpected key(s) {', '.join(extra[:10])}; this server reads {', '.join(map(repr, expected))}")
    return problems


def raise_problems(problems: List[str], layout: str) -> None:
    if problems:
        raise ObservationError(problems, context=f"openpi request in the {layout} layout")


class GenericLayout:
    """``observation/images/<camera>`` (HxWx3 uint8 RGB, row 0 at the top),
    ``observation/state/<name>`` (1-D numbers, the platform's units) and ``prompt``: our
    observation, one key each, for platforms openpi has no convention for."""

    name = "generic"

    def keys(self, contract: AdapterContract) -> Dict[str, str]:
        keys = {}
        for role, size in contract.cameras.items():
            hw = "HxW" if size is None else f"{size[0]}x{size[1]}"
            keys[f"observation/images/{role}"] = f"camera {role!r}: {hw}x3 uint8 RGB, row 0 at the top"
        for name, n in contract.state.items():
            keys[f"observation/state/{name}"] = f"state {name!r}: ({n},) numbers"
        keys[PROMPT] = "the task instruction (str)"
        return keys

    def check(self, contract: AdapterContract) -> None:
        pass  # it carries every camera and state vector by construction

    def observation(self, message: Mapping[str, Any], contract: AdapterContract) -> Observation:
        raise_problems(check_keys(message, self.keys(contract)), self.name)
        return Observation(
            images={role: message[f"observation/images/{role}"] for role in contract.cameras},
            state={name: message[f"observation/state/{name}"] for name in contract.state},
            instruction=message[PROMPT],
        )


__all__ = ["Layout", "GenericLayout", "check_keys", "inject_default_prompt", "raise_problems", "PROMPT"]
