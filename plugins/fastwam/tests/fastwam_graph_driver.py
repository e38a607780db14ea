"""What Fast-WAM's ``--cuda-graphs`` captures (``BatchedInference.core``), checked without a GPU
in the model environment: the reduced-depth model loaded as the worker loads it, moved to the
``meta`` device, then ``wamcore.cuda_graphs.host_traffic`` on the core before and after
``use_cuda_graphs`` moves upstream's CPU tables to the model's device. Writes both lists and
the output shape as JSON.

Run by ``test_fastwam_batching.py`` with the model environment's Python.
Usage: python fastwam_graph_driver.py ARGS.json OUT.json, ARGS = {fastwam_python, weights_root}.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

from wamcore import ModelConfig
from wamcore.cuda_graphs import host_traffic

import wam_fastwam.testweights as generator
from wam_fastwam.robotwin import IMAGE_SIZE
from wam_fastwam.worker import load_robotwin

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fastwam_batch_driver import INSTRUCTION  # noqa: E402
from fastwam_real_driver import test_weights  # noqa: E402


def main(args_path: str, out_path: str) -> None:
    import torch

    args = json.loads(Path(args_path).read_text())
    weights = test_weights(args["fastwam_python"], Path(args["weights_root"]), INSTRUCTION)
    marker = json.loads((weights / "FASTWAM_RANDOM_TEST_WEIGHTS.json").read_text())
    os.environ["DIFFSYNTH_MODEL_BASE_PATH"] = str(weights / "diffsynth")
    os.environ["DIFFSYNTH_SKIP_DOWNLOAD"] = "true"
    native = load_robotwin(ModelConfig(
        platform="robotwin", checkpoint=str(weights / generator.CHECKPOINT), device="cpu",
        options={"text_cache": str(weights / "text_cache"), "fastwam_override": marker["fastwam_overrides"],
                 "num_inference_steps": 2}))
    batched, model = native.batched, native.model
    rng = np.random.default_rng(0)
    images = [torch.from_numpy(rng.uniform(-1, 1, (1, 3, *IMAGE_SIZE)).astype(np.float32)).to(torch.bfloat16)
              for _ in range(3)]
    context, mask = native.text.context(INSTRUCTION)
    proprios = [torch.from_numpy(rng.uniform(-1, 1, (1, 14)).astype(np.float32)) for _ in range(3)]
    inputs = batched.prepare(images, [context] * 3, [mask] * 3, proprios, [1, 2, 3])
    model.to("meta")
    model.device = torch.device("meta")  # upstream records its device here and moves inputs to it
    meta = [x.to("meta") for x in inputs]
    before = host_traffic(batched.core, *meta)
    batched.use_cuda_graphs()  # moves the tables to model.device (a GraphedCore is only built here)
    after = host_traffic(batched.core, *meta)
    shape = list(batched.core(*meta).shape)
    Path(out_path).write_text(json.dumps({"before": before, "after": after, "shape": shape}))


if __name__ == "__main__":
    main(*sys.argv[1:3])
