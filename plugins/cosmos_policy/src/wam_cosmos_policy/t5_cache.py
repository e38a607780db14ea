"""Reading upstream's T5 instruction cache without trusting the pickle.

Upstream stores ``{instruction: torch.Tensor (1, 512, 1024)}`` with ``pickle.dump`` and reads
it back with a plain ``pickle.load`` (``init_t5_text_embeddings_cache`` in
NVlabs/cosmos-policy ``cosmos_policy/experiments/robot/cosmos_utils.py``). A plain unpickler
runs whatever callable the file names, so a tampered cache would run code in the worker.

This module reads the same file with an unpickler that resolves only the globals a
pickled dict of tensors needs:

* ``torch._utils._rebuild_tensor_v2`` (builds a tensor view over a storage),
* ``torch.storage._load_from_bytes`` -- replaced by a loader that calls
  ``torch.load(..., weights_only=True)``, because torch's own version uses
  ``weights_only=False`` on the embedded bytes,
* ``collections.OrderedDict`` (the tensors' empty backward-hook table).

Anything else is refused with a :class:`CheckpointError` naming the file and the global.
The result must be a dict of ``str -> Tensor``; the worker then fills upstream's in-memory
cache with it instead of calling ``init_t5_text_embeddings_cache``, and leaves upstream's
write-back path unset so an instruction encoded on the fly never rewrites the pinned file.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Dict, Union

from wamcore.errors import CheckpointError


def _load_storage(data: bytes):
    import torch

    return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")


class _TensorDictUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) == ("torch.storage", "_load_from_bytes"):
            return _load_storage
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            import torch._utils

            return torch._utils._rebuild_tensor_v2
        if (module, name) == ("collections", "OrderedDict"):
            import collections

            return collections.OrderedDict
        raise pickle.UnpicklingError(f"refused global {module}.{name} (only tensors, dicts and strings are allowed)")


def load_embeddings(path: Union[str, Path]) -> Dict[str, "object"]:
    """``{instruction: tensor}`` from an upstream T5 cache file, read without running code."""
    import torch

    path = Path(path)
    try:
        with open(path, "rb") as f:
            data = _TensorDictUnpickler(f).load()
    except Exception as exc:  # any failure of an untrusted file is a checkpoint problem
        raise CheckpointError(f"{path.name} ({path}) is not a safe T5 embeddings cache: {exc}") from exc
    if not isinstance(data, dict):
        raise CheckpointError(f"{path.name} ({path}) must hold a dict of instruction -> tensor, got {type(data).__name__}")
    bad = [repr(k)[:60] for k, v in data.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
    if bad:
        raise CheckpointError(f"{path.name} ({path}): entries that are not str -> tensor: {', '.join(bad[:5])}")
    return data


__all__ = ["load_embeddings"]
