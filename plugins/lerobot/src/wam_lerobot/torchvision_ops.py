"""torchvision's import on a CPU torch with torchvision's CUDA build.

LeRobot's ACT and Diffusion Policy use torchvision's Python parts only (the ResNet backbone,
``FrozenBatchNorm2d``, ``IntermediateLayerGetter``). Where the only torchvision at hand was
built for CUDA torch (this project's machines: torch 2.13.0+cpu, torchvision 0.28.0+cu130),
its compiled ops cannot load (``libc10_cuda.so`` is missing), and ``import torchvision`` then
fails on an unguarded fake-kernel registration of ``torchvision::nms``/``qnms``
(``torchvision/_meta_registrations.py``: "operator torchvision::nms does not exist").
Here, and only when the compiled ops cannot load, the two operators' schemas are declared
first (no kernels: calling ``torchvision.ops.nms`` then fails, and no LeRobot policy this
plugin runs calls it). With a matching torchvision nothing is done.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

#: the two operators torchvision registers fake kernels for without checking its ops loaded
SCHEMAS = {
    "torchvision::nms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "torchvision::qnms": "(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor",
}
declared: list = []  # the operators declared here (the model's identity reports them)


def ensure_torchvision_importable() -> None:
    if "torchvision" in sys.modules or declared:
        return
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        return  # lerobot's import names what is missing
    import torch

    compiled = sorted(Path(spec.origin).parent.glob("_C*.so"))
    if not compiled:
        return
    try:
        torch.ops.load_library(str(compiled[0]))
    except OSError:
        for name, schema in SCHEMAS.items():
            torch.library.define(name, schema)
            declared.append(name)


__all__ = ["ensure_torchvision_importable", "declared", "SCHEMAS"]
