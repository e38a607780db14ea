"""``--vae-dtype`` (``wam_starwam.vae``) with the real upstream network, reduced depth,
generated weights, on CPU, in-process (no worker: the option acts at load, on the model):

* the default, float32, is upstream's VAE: its network stays float32 and the batched path at
  batch 1 still equals ``infer_action`` bit for bit;
* bfloat16 casts the VAE's network; every path sees the same VAE (batch 1 still equals that
  model's ``infer_action`` exactly), and its actions are float32's within :data:`BF16_ATOL`
  (measured: at most 3.7e-5 on the LIBERO actions; docs/models/starwam.md);
* the identity records the option; an unknown dtype, or one with ``--policy-server``, is
  refused with a typed error before anything loads.
"""

from __future__ import annotations

import numpy as np
import pytest

from wamcore.errors import ConfigurationError

from test_starwam_batching import request, service

BF16_ATOL = 2e-4


def answers(svc):
    """``infer_action`` alone, the batched path at batch 1, and a batch of three."""
    native, reqs = svc.native, [request(i, seed=10 + i) for i in range(3)]
    encoded = [svc.adapter.encode(r) for r in reqs]
    alone = native.predict_native(encoded[0], reqs[0])
    (batch_of_one,) = native.predict_native_batch(encoded[:1], reqs[:1])
    return alone, batch_of_one, native.predict_native_batch(encoded, reqs)


def vae_dtype(svc) -> str:
    return str(next(svc.native.model.backbone.vae._impl.model.parameters()).dtype).replace("torch.", "")


def test_a_bfloat16_vae_gives_float32_actions_within_tolerance_and_the_identity_records_it(test_weights):
    f32 = service(test_weights, "mot")
    assert vae_dtype(f32) == "float32"
    assert f32.info.details["vae_dtype"] == "float32" and f32.info.details["options"]["vae_dtype"] == "float32"
    alone32, one32, batch32 = answers(f32)
    np.testing.assert_array_equal(one32, alone32)  # the default is upstream's, bit for bit
    del f32

    bf16 = service(test_weights, "mot", vae_dtype="bfloat16")
    assert vae_dtype(bf16) == "bfloat16"
    assert bf16.info.details["vae_dtype"] == "bfloat16" and bf16.info.details["options"]["vae_dtype"] == "bfloat16"
    alone16, one16, batch16 = answers(bf16)
    np.testing.assert_array_equal(one16, alone16)  # infer_action and the batched path share the cast VAE
    differences = [np.abs(a - b).max() for a, b in zip([alone16, *batch16], [alone32, *batch32])]
    assert 0 < max(differences) <= BF16_ATOL, differences  # changed (the cast took effect), and only a little


@pytest.mark.parametrize("name, extra, message", [
    ("mot", {"vae_dtype": "float16"}, "--vae-dtype must be one of float32, bfloat16, got 'float16'"),
    ("robotwin", {"vae_dtype": "bfloat16", "policy_server": "5555"}, "--vae-dtype applies to a model loaded here"),
])
def test_a_bad_vae_dtype_is_refused_before_the_model_loads(test_weights, name, extra, message):
    with pytest.raises(ConfigurationError, match=message):
        service(test_weights, name, **extra)
