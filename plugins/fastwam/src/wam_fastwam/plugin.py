"""wamcore hooks for Fast-WAM. Imports only wamcore and this package's light modules; torch,
RLinf, FastWAM and Hydra are imported by ``wam_fastwam.worker`` inside the model's own
environment. Upstream: RLinf/RLinf PR #1398 (``rlinf/models/embodiment/fastwam/``) and
yuantianyuan01/FastWAM at 45d8e14 (``experiments/``, ``configs/``).
"""

from __future__ import annotations

from wamcore import Capabilities, ModelSpec, Option, Requirement, hookimpl

from . import upstream
from .deployment import configure
from .doctor import doctor_checks
from .libero import libero_adapter
from .robotwin import DEFAULT_HORIZON, DEFAULT_INFERENCE_STEPS, DEFAULT_REPLAN, robotwin_adapter

NAME = "fast-wam"

OPTIONS = (
    Option(
        "dataset-stats",
        type="path",
        help="Fast-WAM *_dataset_stats.json (default: <checkpoint stem>_dataset_stats.json beside the checkpoint, "
        "else dataset_stats.json in a parent folder). LIBERO: replaces the YAML's dataset_stats_path.",
    ),
    Option("am-pins", type="path", help="Pin file {\"pins\": {name: sha256}} adding to the shipped Fast-WAM pins."),
    Option(
        "replan-steps",
        type="int",
        help=f"RoboTwin: actions executed per prediction (the chunk size), at most the horizon [default: {DEFAULT_REPLAN}].",
    ),
    Option("action-horizon", type="int", help=f"RoboTwin: actions predicted per call [default: {DEFAULT_HORIZON}]."),
    Option(
        "num-inference-steps",
        type="int",
        help=f"RoboTwin: flow-matching denoising steps [default: {DEFAULT_INFERENCE_STEPS}].",
    ),
    Option(
        "fastwam-config-dir",
        type="path",
        help="RoboTwin: FastWAM's configs/ folder (default: $FASTWAM_CONFIG_DIR, else the installed FastWAM checkout's).",
    ),
)

INSTALL = (
    "pip install \"wam-fastwam[model]\" into the model's own environment, then the upstream code:\n"
    f"  LIBERO (through RLinf): {upstream.RLINF.install}\n"
    f"  RoboTwin (official path): {upstream.FASTWAM_OFFICIAL.install}\n"
    "Run the worker there with --am-python; checkpoints from hf://yuanty/fastwam (docs/models/fast-wam.md)."
)

MODEL = ModelSpec(
    name=NAME,
    aliases=("fastwam", "fast_wam"),
    load="wam_fastwam.worker:load",
    adapters=(libero_adapter(), robotwin_adapter()),
    capabilities=Capabilities(actions=True),
    options=OPTIONS,
    description="Fast-WAM (Wan2.2 world action model): LIBERO through RLinf, RoboTwin through the official FastWAM path",
    install=INSTALL,
    # RLinf is needed on LIBERO only: reported by doctor_checks, per deployment
    requires=(
        Requirement("fastwam", install=upstream.FASTWAM_OFFICIAL.install, purpose=f"{upstream.FASTWAM_OFFICIAL.label} model code"),
        Requirement("torch", install="pip install \"torch>=2.1\"", purpose="the model's tensors"),
    ),
    timeout_s=180.0,
    configure=configure,
    doctor=doctor_checks,
)


@hookimpl
def wam_register_models(register):
    register(MODEL)
