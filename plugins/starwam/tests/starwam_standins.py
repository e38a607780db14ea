"""Stand-ins for StarWAM's network at exactly its boundary (a module of its own, with a unique
name, because pytest imports test modules with --import-mode=importlib).

``InferActionStandIn`` is the model object ``infer_action`` is called on (LIBERO, as rollout.py
calls it); ``PolicyStandIn`` is ``StarwamPolicy`` as the RoboTwin worker uses it
(``predict_chunk``, ``seed``, ``_text_cache``, ``device``, ``dtype``, ``reset``). Each records
what it receives and answers a known, distinct chunk.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

#: the model environment of the end-to-end tests (.ci/install builds it)
STARWAM_PYTHON = os.environ.get("WAMCORE_TEST_STARWAM_PYTHON",
                                str(Path(__file__).resolve().parents[3] / ".venv-starwam" / "bin" / "python"))
#: libero_spatial task 0, the end-to-end tests' task; its text-cache entry is generated
INSTRUCTION = "pick up the black bowl between the plate and the ramekin and place it on the plate"


def normalized_chunk(dim: int) -> np.ndarray:
    """Distinct rows and columns inside [-1, 1]; the last column alternates around the 0.5
    gripper threshold once restored."""
    t = np.arange(32, dtype=np.float32)[:, None]
    d = np.arange(dim, dtype=np.float32)[None, :]
    chunk = np.sin(0.3 * t + 0.7 * d) * 0.9
    chunk[:, -1] = np.where(np.arange(32) % 3 == 0, 0.95, -0.95)
    return chunk.astype(np.float32)


class InferActionStandIn:
    """The StarWAM model object at ``infer_action``."""

    def __init__(self, dim: int = 7):
        self.dim = dim
        self.calls = []

    def infer_action(self, input_image, context, context_mask, action_horizon, num_inference_steps=10, seed=None,
                     **kwargs):
        import torch

        self.calls.append(dict(input_image=input_image, context=context, context_mask=context_mask,
                               action_horizon=action_horizon, num_inference_steps=num_inference_steps, seed=seed,
                               **kwargs))
        return torch.from_numpy(normalized_chunk(self.dim))[None]


class PolicyStandIn:
    """``StarwamPolicy`` at ``predict_chunk``: answers the restored 32x14 chunk."""

    def __init__(self):
        import torch

        self.device = torch.device("cpu")
        self.dtype = torch.float32
        self.seed = None
        self._text_cache = {}
        self.calls = []
        self.resets = 0

    def predict_chunk(self, image, state, instruction):
        self.calls.append(dict(image=image, state=np.array(state), instruction=instruction, seed=self.seed,
                               text=self._text_cache.get(instruction)))
        chunk = normalized_chunk(14) * 0.5
        chunk[:, [6, 13]] = 1.0  # grippers open, RoboTwin's [0, 1] scale
        return chunk

    def reset(self):
        self.resets += 1
