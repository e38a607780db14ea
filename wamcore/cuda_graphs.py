"""``--cuda-graphs`` for any model plugin: a batched path's fixed-shape core captured once per
batch-size bucket as a CUDA graph and replayed.

A world action model's chunk is launch-bound at small batches: StarWAM's launches about
21,000 kernels at batch 1 on an H200, whose GPU time is a small part of the call. A CUDA graph
replays all of them with one launch. What a plugin hands :class:`GraphedCore` is a pure
function of fixed-shape tensors, batch first, with no host synchronisation (its "core"); what
cannot be captured (each request's noise, drawn from its own seeded generator) stays in front
of it, eager.

A batch of ``n`` runs in the smallest bucket ``>= n`` (:data:`BUCKETS`), its spare rows filled
with copies of the first row and dropped from the output; rows never mix, so the padding
changes no request's answer beyond the rounding of a different matrix shape. Each bucket is
captured on its first use (eager warm-up runs on a side stream, then the capture) into its
own memory pool.

CUDA graphs rather than ``torch.compile``: capture takes seconds where compiling a
multi-billion-parameter model takes minutes per batch shape, and the graph replays upstream's
own kernels, so its output equals the eager path at the same shape. torch is imported inside
the functions: the core never imports it at module level.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .errors import ConfigurationError

BUCKETS = (1, 2, 4, 8, 16, 32)


def bucket(n: int, buckets: Sequence[int] = BUCKETS) -> int:
    """The smallest bucket that holds ``n`` rows."""
    for size in buckets:
        if n <= size:
            return size
    raise ValueError(f"a batch of {n} exceeds the largest CUDA-graph bucket {buckets[-1]}")


def require_cuda(device: Any) -> None:
    """``--cuda-graphs`` is CUDA only: a typed error, before any weight is loaded."""
    import torch

    if torch.device(device).type != "cuda" or not torch.cuda.is_available():
        raise ConfigurationError(
            f"--cuda-graphs captures CUDA graphs and needs a CUDA device; this worker's device is {device} "
            f"(torch.cuda.is_available() is {torch.cuda.is_available()}): drop --cuda-graphs or run on a GPU"
        )


def padded(x: Any, size: int) -> Any:
    """``x`` (or ``None``) with rows appended up to ``size``: copies of its first row."""
    if x is None or x.shape[0] == size:
        return x
    import torch

    return torch.cat([x, x[:1].expand(size - x.shape[0], *x.shape[1:])], dim=0)


class GraphedCore:
    """``core(*tensors) -> Tensor`` (batch first; ``None`` inputs pass through), replayed from
    one CUDA graph per bucket."""

    def __init__(self, core: Callable[..., Any], warmup: int = 2, buckets: Sequence[int] = BUCKETS):
        self.core = core
        self.warmup = warmup
        self.buckets = tuple(buckets)
        self._graphs: Dict[int, Tuple[Any, List[Optional[Any]], Any]] = {}

    @property
    def captured(self) -> List[int]:
        return sorted(self._graphs)

    def __call__(self, *inputs: Optional[Any]) -> Any:
        n = next(x for x in inputs if x is not None).shape[0]
        size = bucket(n, self.buckets)
        if size not in self._graphs:
            self._capture(size, inputs)
        graph, static, out = self._graphs[size]
        for slot, x in zip(static, inputs):
            if slot is not None:
                slot.copy_(padded(x, size))
        graph.replay()
        return out[:n].clone()

    def _capture(self, size: int, inputs) -> None:
        import torch

        static = [None if x is None else padded(x, size).clone() for x in inputs]
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


def host_traffic(core: Callable[..., Any], *inputs: Optional[Any]) -> List[str]:
    """What in ``core`` would break a capture, found without a GPU: ``core`` and its model on
    the ``meta`` device, run once (as the warm-up before a capture fills lazy caches), then
    again while every operator is watched. Returned: each operator fed a CPU tensor (a copy
    per call, which waits for the host), or the first value read back (``.item()``, a
    data-dependent branch, a copy to the CPU: meta tensors hold no data, so it stops the run)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class Watch(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.found: List[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            cpu = [tuple(x.shape) for x in tree_leaves((args, kwargs))
                   if isinstance(x, torch.Tensor) and x.device.type == "cpu" and x.dim() > 0]
            if cpu:
                self.found.append(f"{func} fed CPU tensors of shapes {cpu}")
            return func(*args, **kwargs)

    watch = Watch()
    try:
        with torch.no_grad():
            core(*inputs)
            with watch:
                core(*inputs)
    except (RuntimeError, NotImplementedError) as exc:
        if "meta" not in str(exc):
            raise
        watch.found.append(f"a value read back: {exc}")
    return watch.found


__all__ = ["BUCKETS", "bucket", "require_cuda", "padded", "GraphedCore", "host_traffic"]
