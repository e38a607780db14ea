"""``ModelSpec.configure``: the Fast-WAM spec adjusted to one deployment, cheaply (no torch).

* LIBERO: ``--am-checkpoint`` is the RLinf model YAML; it is validated here (the old RPent
  schema is refused with its migration) and its ``num_action_chunks`` becomes the adapter's
  chunk size, ``action_horizon`` its horizon.
* RoboTwin: ``--replan-steps`` (24) and ``--action-horizon`` (32) become chunk size and
  horizon.

Options that configure the other platform's path are refused with the key that does it.
"""

from __future__ import annotations

import attrs

from wamcore.errors import ConfigurationError
from wamcore.specs import ModelConfig, ModelSpec, normalize_id

from .libero import libero_adapter
from .rlinf_config import load_rlinf_config
from .robotwin import RoboTwinSettings, robotwin_adapter

#: RoboTwin-only options, and where the same setting lives in the RLinf YAML.
ROBOTWIN_ONLY = {
    "replan_steps": "num_action_chunks",
    "action_horizon": "action_horizon",
    "num_inference_steps": "num_inference_steps",
    "fastwam_config_dir": "fastwam.config_dir",
    "fastwam_override": "fastwam.overrides",
    "text_cache": "(none: RoboTwin only, RLinf's FastWAMPolicy loads its own text encoder)",
    "cuda_graphs": "(none: RoboTwin only, RLinf's predict_action_batch runs as it is)",
}


def _refuse_robotwin_options(config: ModelConfig) -> None:
    given = [k for k in ROBOTWIN_ONLY if config.options.get(k) not in (None, False, (), [])]
    if given:
        moves = ", ".join(f"--{k.replace('_', '-')} -> {ROBOTWIN_ONLY[k]}" for k in given)
        raise ConfigurationError(
            f"on LIBERO, Fast-WAM is configured by the RLinf model YAML (--am-checkpoint), not by these options: "
            f"set them in the YAML instead ({moves})"
        )


def _with_adapter(spec: ModelSpec, adapter) -> ModelSpec:
    return attrs.evolve(spec, adapters=tuple(adapter if a.platform == adapter.platform else a for a in spec.adapters))


def configure(spec: ModelSpec, config: ModelConfig) -> ModelSpec:
    platform = normalize_id(config.platform)
    if platform == "libero":
        if config.checkpoint:
            cfg = load_rlinf_config(config.checkpoint, dataset_stats=config.options.get("dataset_stats"))
            _refuse_robotwin_options(config)
            # without action_horizon in the YAML RLinf takes FastWAM's num_frames - 1: unknown here
            return _with_adapter(spec, libero_adapter(cfg.num_action_chunks, cfg.action_horizon))
        _refuse_robotwin_options(config)
        return spec
    if platform == "robotwin":
        settings = RoboTwinSettings.from_options(config.options)
        return _with_adapter(spec, robotwin_adapter(settings.replan_steps, settings.action_horizon))
    return spec


__all__ = ["configure", "ROBOTWIN_ONLY"]
