"""``wamcore.cuda_graphs``, the part both model plugins' ``--cuda-graphs`` share. Capturing
needs a GPU (the device benchmarks measure it: bench/device/starwam_speed.py,
plugins/fastwam/bench/batch_latency.py); here: the buckets, the padding rule and the refusal
off CUDA, what ``host_traffic`` finds in a core without a GPU, with torch imported only when
called."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from wamcore.cuda_graphs import BUCKETS, GraphedCore, bucket, host_traffic, padded, require_cuda
from wamcore.errors import ConfigurationError


def test_a_batch_runs_in_the_smallest_bucket_that_holds_it():
    assert [bucket(n) for n in (1, 2, 3, 5, 8, 9, 17, 32)] == [1, 2, 4, 8, 8, 16, 32, 32]
    assert bucket(5, (1, 2, 4, 8, 16)) == 8
    with pytest.raises(ValueError, match="exceeds the largest CUDA-graph bucket 16"):
        bucket(17, (1, 2, 4, 8, 16))
    assert BUCKETS[-1] == 32


def test_padding_repeats_the_first_row_and_leaves_the_rows_it_has():
    import torch
    x = torch.arange(12.0).view(3, 4)
    out = padded(x, 8)
    assert out.shape == (8, 4)
    np.testing.assert_array_equal(out[:3].numpy(), x.numpy())
    np.testing.assert_array_equal(out[3:].numpy(), np.repeat(x[:1].numpy(), 5, axis=0))
    assert padded(x, 3) is x and padded(None, 8) is None


def test_cuda_graphs_are_refused_off_cuda_with_what_to_do():
    with pytest.raises(ConfigurationError, match="needs a CUDA device; this worker's device is cpu .*drop --cuda-graphs"):
        require_cuda("cpu")
    graphed = GraphedCore(lambda x: x * 2)
    assert graphed.captured == [] and graphed.buckets == BUCKETS


def test_the_module_imports_no_torch():
    code = "import sys, wamcore.cuda_graphs; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_host_traffic_finds_a_copy_from_the_cpu_and_a_value_read_back():
    import torch

    table = torch.arange(4.0)  # a constant table kept on the CPU, copied to the device per call
    assert host_traffic(lambda x: x * 2, torch.ones(2, 4, device="meta")) == []
    found = host_traffic(lambda x: x * table.to(x.device), torch.ones(2, 4, device="meta"))
    assert found and "fed CPU tensors of shapes [(4,)]" in found[0]
    (read,) = host_traffic(lambda x: x * float(x.sum()), torch.ones(2, 4, device="meta"))
    assert read.startswith("a value read back: ") and "meta" in read
    (copy,) = host_traffic(lambda x: x.cpu(), torch.ones(2, 4, device="meta"))
    assert copy.startswith("a value read back: ")
