"""Loading and running the reference WAM (runs where the model runs; imports torch lazily).

``load(config)`` is the ``ModelSpec.load`` of ``pointmass-wam``: it verifies the weights'
sha256 against their pin *before* reading them, rebuilds the network from the
configuration stored in the safetensors metadata, and returns a :class:`PointMassWAM`
that speaks the adapter's native format (see ``adapter``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

from wamcore import ConfigurationError, DependencyNotInstalled, ModelConfig, PredictRequest
from wamcore.checkpoints import read_verified
from wamcore.errors import CapabilityError, CheckpointError

from .checkpoint import FORMAT, METADATA_KEY, verified_weights
from .tokenizer import VOCAB

INSTALL = 'pip install "wam-pointmass[model]"'
DEVICES = ("auto", "cpu", "cuda")


def _torch():
    try:
        import torch
    except ImportError as exc:
        raise DependencyNotInstalled("torch", INSTALL, "the pointmass-wam model") from exc
    return torch


def choose_device(requested: Optional[str]) -> str:
    """``auto``: cuda when torch sees a GPU, else cpu; ``cuda`` without a GPU is an error."""
    torch = _torch()
    requested = (requested or "auto").lower()
    if requested not in DEVICES and not requested.startswith("cuda:"):
        raise ConfigurationError(f"--device must be one of {', '.join(DEVICES)} or cuda:N, got {requested!r}")
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigurationError(f"--device {requested}: torch {torch.__version__} sees no CUDA device; use --device cpu")
    return requested


def save_weights(net, path: Path, training: Optional[Dict[str, Any]] = None) -> None:
    """Write ``net`` as safetensors, with what is needed to rebuild it in the metadata."""
    from safetensors.torch import save_file

    tensors = {k: v.detach().cpu().contiguous() for k, v in net.state_dict().items()}
    about = {"format": FORMAT, "config": net.config, "vocab": list(VOCAB), "training": training or {}}
    save_file(tensors, str(path), metadata={METADATA_KEY: json.dumps(about, sort_keys=True)})


def load_network(path: Path, device: str = "cpu", sha256: Optional[str] = None):
    """The network stored in ``path`` (safetensors), in eval mode. With ``sha256``, the file
    is read once and those very bytes are hashed and loaded (nothing can change between
    the check and the load)."""
    try:
        from safetensors.torch import load as load_tensors
    except ImportError as exc:
        raise DependencyNotInstalled("safetensors", INSTALL, "reading pointmass-wam weights") from exc
    from .network import PointMassWAMNet

    data = read_verified(path, sha256) if sha256 else Path(path).read_bytes()
    try:
        header_len = int.from_bytes(data[:8], "little")
        metadata = json.loads(data[8 : 8 + header_len]).get("__metadata__") or {}
        about = json.loads(metadata.get(METADATA_KEY, "{}"))
        tensors = load_tensors(data)
    except Exception as exc:  # safetensors raises its own error types for corrupt files
        raise CheckpointError(f"{path} is not a readable safetensors file: {exc}") from exc
    if about.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a {FORMAT} checkpoint (format {about.get('format')!r})")
    if about.get("vocab") != list(VOCAB):
        raise CheckpointError(f"{path} was trained with another vocabulary than this wam-pointmass version's")
    net = PointMassWAMNet(about["config"])
    try:
        net.load_state_dict(tensors, strict=True)
    except RuntimeError as exc:
        raise CheckpointError(f"{path} does not match the pointmass-wam network: {exc}") from exc
    return net.to(device).eval(), about


class PointMassWAM:
    """The native model: numpy in, numpy out, torch inside. Batches: a worker groups
    predictions of concurrent sessions into one :meth:`predict_native_batch`."""

    max_batch = 64

    def __init__(self, net, device: str, checkpoint: str, details: Dict[str, Any]):
        self.net = net
        self.device = device
        self.checkpoint = checkpoint
        self.details = details
        self._torch = _torch()

    def latent(self, sample: Optional[list]) -> np.ndarray:
        """A network with a latent samples it uniformly in [-1, 1] from (seed, step); no
        seed gives 0, the demonstrations' middle route (the straight one)."""
        if sample is None:
            return np.zeros(self.net.latent, dtype=np.float32)
        return np.random.default_rng(sample).uniform(-1.0, 1.0, self.net.latent).astype(np.float32)

    def predict_native(self, native: Dict[str, Any], request: PredictRequest) -> Dict[str, Any]:
        return self.predict_native_batch([native], [request])[0]

    def predict_native_batch(self, natives: List[Dict[str, Any]], requests: List[PredictRequest]) -> List[Dict[str, Any]]:
        """One forward for the requests that let the policy act, one for those with
        candidate actions (the network takes a candidate for every row or for none)."""
        torch = self._torch
        if not self.net.prefix and any(n.get("prefix") is not None for n in natives):
            raise CapabilityError("these pointmass-wam weights were not trained to condition on an action prefix: "
                                  "load --weights reach-rtc (or weights trained with --family reach-rtc)")
        outs: List[Optional[Dict[str, Any]]] = [None] * len(natives)
        with_candidate = [i for i, n in enumerate(natives) if n["candidate"] is not None]
        without = [i for i, n in enumerate(natives) if n["candidate"] is None]
        with torch.inference_mode():
            for rows in (without, with_candidate):
                if not rows:
                    continue

                def stacked(key: str):
                    return torch.from_numpy(np.stack([natives[i][key] for i in rows])).to(self.device)

                latent = None
                if self.net.latent and rows is without:
                    latent = torch.from_numpy(np.stack([self.latent(natives[i]["sample"]) for i in rows])).to(self.device)
                prefix = mask = None
                if self.net.prefix and rows is without:  # rows without a prefix have an all-zero mask
                    prefix = torch.from_numpy(np.stack([_or_zeros(natives[i]["prefix"], (self.net.config["chunk"], 2))
                                                        for i in rows])).to(self.device)
                    mask = torch.from_numpy(np.stack([_or_zeros(natives[i]["mask"], (self.net.config["chunk"],))
                                                      for i in rows])).to(self.device)
                out = self.net(stacked("image"), stacked("state"), stacked("tokens"),
                               stacked("candidate") if rows is with_candidate else None, latent, prefix, mask)
                actions = out["actions"].float().cpu().numpy()
                future = (out["future_image"].permute(0, 2, 3, 1) * 255.0).round().to(torch.uint8).cpu().numpy()
                values = out["value"].float().cpu().numpy()
                for j, i in enumerate(rows):
                    outs[i] = {"actions": actions[j], "future": np.ascontiguousarray(future[j]), "value": float(values[j])}
        return outs  # type: ignore[return-value]


def _or_zeros(array: Optional[np.ndarray], shape: tuple) -> np.ndarray:
    return np.zeros(shape, np.float32) if array is None else array


def load(config: ModelConfig) -> PointMassWAM:
    """``ModelSpec.load`` of pointmass-wam: verify the pinned weights, then build the model."""
    _torch()
    from .plugin import POINTMASS_WAM

    options = POINTMASS_WAM.with_defaults(config.options)  # also when called without ModelService
    path, sha = verified_weights(config.checkpoint, options["weights_sha256"], options["weights"])
    device = choose_device(config.device or options["device"])
    threads = options["threads"]
    if device == "cpu" and threads:
        # a 3-ms network gains nothing from more threads and loses a lot when cores are
        # shared (measured: 2.5 ms with 1 thread, ~45 ms with 2 on a busy 2-core machine)
        _torch().set_num_threads(int(threads))
    net, about = load_network(path, device, sha256=sha)
    from .network import parameter_count

    details = {
        "weights": str(path),
        "sha256": sha,
        "parameters": parameter_count(net),
        "torch": _torch().__version__,
        "threads": _torch().get_num_threads() if device == "cpu" else None,
        "trained": about["training"],
    }
    return PointMassWAM(net, device, f"sha256:{sha}", details)


__all__ = ["load", "PointMassWAM", "choose_device", "save_weights", "load_network", "DEVICES"]
