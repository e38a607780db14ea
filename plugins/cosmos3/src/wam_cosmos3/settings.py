"""The Cosmos3 backend's deployment settings and the command-line options that set them.

Defaults are RLinf's LIBERO evaluation settings (RL#1487
``evaluations/libero/libero_spatial_cosmos3_eval_sglang.yaml`` and the code defaults of
``rlinf/models/embodiment/cosmos3/sglang_adapter.py``): size 320x192,
17 frames, fps 20, action fps 20, 30 denoising steps, seed 1140, ``quantile_rot``
de-normalisation, 16-action chunks, HTTP retries 5 with a 1 s backoff step.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Optional

import attrs

from wamcore import ConfigurationError, Option

ENDPOINT_ENV = "WAM_COSMOS3_SGLANG_ENDPOINT"
DEFAULT_ENDPOINT = "http://127.0.0.1:30000"
NORMALIZATIONS = ("quantile_rot", "quantile", "none")
VIEW_POINTS = ("ego_view", "third_person_view", "wrist_view", "concat_view")
PREFIX = "cosmos3_"


def _positive(instance, attribute, value):
    if value <= 0:
        raise ConfigurationError(f"--cosmos3-{attribute.name.replace('_', '-')} must be > 0, got {value}")


def parse_size(text: str) -> tuple:
    """``"WxH"`` -> (width, height). Unlike RLinf (which falls back to 832x480 on a typo),
    a malformed size is an error."""
    parts = str(text).lower().replace(",", "x").split("x")
    try:
        width, height = (int(p) for p in parts)
    except ValueError:
        raise ConfigurationError(f"--cosmos3-size must be WIDTHxHEIGHT such as 320x192, got {text!r}") from None
    if width <= 0 or height <= 0:
        raise ConfigurationError(f"--cosmos3-size must be positive, got {text!r}")
    return width, height


@attrs.frozen
class Cosmos3Settings:
    """One deployment of the Cosmos3 backend (what the worker was started with)."""

    endpoint: str = DEFAULT_ENDPOINT
    width: int = attrs.field(default=320, validator=_positive)
    height: int = attrs.field(default=192, validator=_positive)
    num_frames: int = 17
    fps: int = attrs.field(default=20, validator=_positive)
    action_fps: float = attrs.field(default=20.0, validator=_positive)
    inference_steps: int = attrs.field(default=30, validator=_positive)
    seed: int = 1140
    domain: str = "libero"
    view_point: str = "ego_view"
    action_normalization: str = "quantile_rot"
    action_stats: Optional[str] = None
    chunk_size: int = attrs.field(default=16, validator=_positive)
    http_timeout: float = attrs.field(default=120.0, validator=_positive)
    http_retries: int = 5
    retry_backoff: float = 1.0

    def __attrs_post_init__(self):
        # SGLang's own rules (its ``action/cosmos3.py`` ``build_cosmos3_action_sampling_params``),
        # checked here so a bad value fails at start-up with the flag's name instead of as a
        # 400 at the first prediction.
        if self.num_frames <= 1 or (self.num_frames - 1) % 4 != 0:
            raise ConfigurationError(
                f"--cosmos3-num-frames must be 4k+1 and > 1 (SGLang's rule), got {self.num_frames}"
            )
        if self.action_normalization not in NORMALIZATIONS:
            raise ConfigurationError(
                f"--cosmos3-action-normalization must be one of {', '.join(NORMALIZATIONS)}, got {self.action_normalization!r}"
            )
        if self.view_point not in VIEW_POINTS:
            raise ConfigurationError(f"--cosmos3-view-point must be one of {', '.join(VIEW_POINTS)}, got {self.view_point!r}")
        if self.http_retries < 0 or self.retry_backoff < 0:
            raise ConfigurationError("--cosmos3-http-retries and --cosmos3-retry-backoff must be >= 0")
        if not self.domain:
            raise ConfigurationError("--cosmos3-domain must name the action domain (e.g. libero)")

    @property
    def horizon(self) -> int:
        """Actions SGLang returns per request: one per generated frame after the first."""
        return self.num_frames - 1

    @property
    def prediction_budget_s(self) -> float:
        """Worst case of one prediction: every attempt times out, plus the backoff sleeps."""
        attempts = self.http_retries + 1
        backoff = self.retry_backoff * sum(range(1, attempts))
        return self.http_timeout * attempts + backoff + 5.0

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> "Cosmos3Settings":
        """From ``ModelConfig.options`` (keys are the options' ``dest``). Values given as
        strings (``--am-option KEY=VALUE`` for a worker whose plugin is not installed on the
        client side) are converted; unknown ``cosmos3_*`` keys are refused."""
        values = {k[len(PREFIX):]: v for k, v in options.items() if k.startswith(PREFIX) and v is not None}
        size = values.pop("size", None)
        endpoint = values.pop("sglang_endpoint", None) or os.environ.get(ENDPOINT_ENV) or DEFAULT_ENDPOINT
        fields = {f.name: f for f in attrs.fields(cls)}
        unknown = sorted(set(values) - set(fields))
        if unknown:
            raise ConfigurationError(f"unknown Cosmos3 option(s): {', '.join('--cosmos3-' + u.replace('_', '-') for u in unknown)}")
        kwargs = {}
        for name, value in values.items():
            kind = type(fields[name].default) if fields[name].default is not None else str
            try:
                kwargs[name] = kind(value)
            except (TypeError, ValueError):
                raise ConfigurationError(f"--cosmos3-{name.replace('_', '-')}: expected {kind.__name__}, got {value!r}") from None
        if size is not None:
            kwargs["width"], kwargs["height"] = parse_size(size)
        return cls(endpoint=str(endpoint), **kwargs)


def _o(name: str, type: str, default: Any, help: str, **kw) -> Option:
    return Option(name="cosmos3-" + name, type=type, default=default, help=help, **kw)


OPTIONS = (
    _o("sglang-endpoint", "str", None,
       f"URL of the SGLang server that serves Cosmos3 (default ${ENDPOINT_ENV} or {DEFAULT_ENDPOINT}). "
       "--am-endpoint still addresses the wamcore worker."),
    _o("size", "str", "320x192", "WIDTHxHEIGHT of the composed image sent to SGLang."),
    _o("num-frames", "int", 17, "Frames Cosmos3 generates (4k+1); it returns num_frames-1 actions."),
    _o("fps", "int", 20, "Video fps written into Cosmos3's caption."),
    _o("action-fps", "float", 20.0, "Action rate passed to Cosmos3."),
    _o("inference-steps", "int", 30, "Denoising steps per prediction."),
    _o("seed", "int", 1140, "Sampling seed when a request carries none."),
    _o("domain", "str", "libero", "Cosmos3 action domain (selects the action head)."),
    _o("view-point", "choice", "ego_view", "Caption framing sent as action_view_point (RLinf sends ego_view).",
       choices=VIEW_POINTS),
    _o("action-normalization", "choice", "quantile_rot",
       "How the model's actions are de-normalised: quantile_rot (stats 'global_raw'), quantile (stats 'global'), "
       "or none (SGLang already de-normalises).", choices=NORMALIZATIONS),
    _o("action-stats", "path", None,
       "Dataset statistics JSON (e.g. cosmos-framework's libero_native_frame_wise_relative_rot6d.json)."),
    _o("chunk-size", "int", 16, "Actions per executed chunk (the returned actions are padded or truncated)."),
    _o("http-timeout", "float", 120.0, "Seconds to wait for one SGLang response."),
    _o("http-retries", "int", 5, "Retries of a request that got HTTP 500/502/503/504 or lost its connection."),
    _o("retry-backoff", "float", 1.0, "Seconds of backoff: retry k sleeps k times this."),
)

__all__ = ["Cosmos3Settings", "OPTIONS", "parse_size", "ENDPOINT_ENV", "DEFAULT_ENDPOINT", "NORMALIZATIONS"]
