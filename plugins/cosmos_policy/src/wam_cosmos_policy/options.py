"""The backend's worker options, declared once for the CLI and resolved once in the worker.

Defaults follow upstream's LIBERO evaluation (``run_libero_eval.py`` ``PolicyEvalConfig`` and
the command line in upstream's ``LIBERO.md``): 5 action denoising steps, deterministic mode
on. The sampling seed defaults to 1, ``get_action``'s own default (and RPent's server default,
RLinf/RPent ``rpent/robots/components/cosmos_policy/server.py``); a request that carries a
seed (``wam run --seed N`` sends one) uses that seed instead, as upstream's ``--seed`` drives
both the episode and sampling.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Optional

import attrs

from wamcore import Option
from wamcore.errors import ConfigurationError

#: fallback for ``--am-pins`` (also read by ``wam doctor``, which has no backend options)
PINS_ENV = "WAM_COSMOS_POLICY_PINS"

OPTIONS = (
    Option("denoising-steps", type="int", default=5,
           help="Action denoising steps per query (get_action num_denoising_steps_action; upstream LIBERO: 5)."),
    Option("sampling-seed", type="int", default=1,
           help="Sampling seed for requests that carry none (get_action seed; a request's seed wins)."),
    Option("deterministic", type="bool", default=True,
           help="Upstream deterministic mode: DETERMINISTIC=True and set_seed_everywhere(0) before every query."),
    Option("cached-instructions-only", type="bool", default=False,
           help="Refuse instructions absent from libero_t5_embeddings.pkl instead of encoding them with T5 on the fly."),
    Option("am-pins", type="path", default=None,
           help=f"Extra pin file (JSON {{\"pins\": {{name: sha256}}}}) adding to or replacing the shipped pins "
                f"(default: ${PINS_ENV}); write one with `wam cosmos-policy-pin DIR`."),
)

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _coerce(option: Option, value: Any) -> Any:
    """Typed value of an option; strings come from ``--am-option KEY=VALUE``."""
    if value is None:
        return None
    try:
        if option.type == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(value)
            return int(value)
        if option.type == "bool":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in _TRUE or text in _FALSE:
                return text in _TRUE
            raise ValueError(value)
        return str(value)
    except (TypeError, ValueError):
        raise ConfigurationError(f"cosmos-policy option --{option.name} expects {option.type}, got {value!r}") from None


@attrs.frozen
class CosmosOptions:
    denoising_steps: int = 5
    sampling_seed: int = 1
    deterministic: bool = True
    cached_instructions_only: bool = False
    am_pins: Optional[str] = None

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> "CosmosOptions":
        by_dest = {o.dest: o for o in OPTIONS}
        unknown = sorted(set(raw) - set(by_dest))
        if unknown:
            raise ConfigurationError(
                f"unknown cosmos-policy option(s) {unknown}; known: {sorted('--' + o.name for o in OPTIONS)}"
            )
        values = {dest: _coerce(o, raw.get(dest)) for dest, o in by_dest.items()}
        values = {k: (v if v is not None else by_dest[k].default) for k, v in values.items()}
        if values["am_pins"] is None:
            values["am_pins"] = os.environ.get(PINS_ENV) or None
        if values["denoising_steps"] < 1:
            raise ConfigurationError(f"--denoising-steps must be >= 1, got {values['denoising_steps']}")
        return cls(**values)


__all__ = ["OPTIONS", "PINS_ENV", "CosmosOptions"]
