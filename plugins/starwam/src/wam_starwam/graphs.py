"""``--cuda-graphs``: the batched path's denoising (and the video-DiT prefill) captured once
per batch-size bucket and replayed.

A StarWAM chunk is launch-bound: at batch 1 on an H200 it launches about 21,000 kernels
whose GPU time is a small part of the call. A CUDA graph replays all of them with one launch.
What is captured is a composer's ``core`` (``wam_starwam.batched``): for MoT the proprio
token, the video DiT's ``pre_dit`` and ``prefill_video_cache``, and every action-expert step.
The VAE encode and the per-request noise stay eager (the Wan VAE keeps Python-side feature
caches; the noise needs each request's own generator).

A batch of ``n`` runs in the smallest bucket ``>= n`` (:data:`BUCKETS`), its spare rows
filled with copies of the first request's inputs and dropped from the output; rows never
mix, so the padding changes no request's answer beyond the bf16 rounding of a different
matrix shape. Each bucket is captured on its first use (two eager warm-up runs on a side
stream, then the capture) into its own memory pool.

CUDA graphs were chosen over ``torch.compile``: capture takes seconds where compiling a
6B-parameter model takes minutes per batch shape, and the graph replays upstream's own
kernels, so its output equals the eager path at the same shape.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

import torch
from torch import Tensor

from wamcore.errors import ConfigurationError

BUCKETS = (1, 2, 4, 8, 16, 32)


def bucket(n: int) -> int:
    for size in BUCKETS:
        if n <= size:
            return size
    raise ValueError(f"a batch of {n} exceeds the largest CUDA-graph bucket {BUCKETS[-1]}")


def require_cuda(device) -> None:
    """``--cuda-graphs`` is CUDA only: a typed error, before any weight is loaded."""
    if torch.device(device).type != "cuda" or not torch.cuda.is_available():
        raise ConfigurationError(
            f"--cuda-graphs captures CUDA graphs and needs a CUDA device; this worker's device is {device} "
            f"(torch.cuda.is_available() is {torch.cuda.is_available()}): drop --cuda-graphs or run on a GPU"
        )


def _padded(x: Optional[Tensor], size: int) -> Optional[Tensor]:
    if x is None or x.shape[0] == size:
        return x
    return torch.cat([x, x[:1].expand(size - x.shape[0], *x.shape[1:])], dim=0)


class GraphedCore:
    """``core(*tensors) -> Tensor`` (batch first), replayed from a graph per bucket."""

    def __init__(self, core: Callable[..., Tensor], warmup: int = 2):
        self.core = core
        self.warmup = warmup
        self._graphs: Dict[int, Tuple[torch.cuda.CUDAGraph, List[Optional[Tensor]], Tensor]] = {}

    @property
    def captured(self) -> List[int]:
        return sorted(self._graphs)

    def __call__(self, *inputs: Optional[Tensor]) -> Tensor:
        n = next(x for x in inputs if x is not None).shape[0]
        size = bucket(n)
        if size not in self._graphs:
            self._capture(size, inputs)
        graph, static, out = self._graphs[size]
        for slot, x in zip(static, inputs):
            if slot is not None:
                slot.copy_(_padded(x, size))
        graph.replay()
        return out[:n].clone()

    def _capture(self, size: int, inputs) -> None:
        static = [None if x is None else _padded(x, size).clone() for x in inputs]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.no_grad(), torch.cuda.stream(side):
            for _ in range(self.warmup):  # fills upstream's lazy caches (RoPE tables) and picks the kernels
                self.core(*static)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(graph):
            out = self.core(*static)
        self._graphs[size] = (graph, static, out)


__all__ = ["BUCKETS", "bucket", "require_cuda", "GraphedCore"]
