"""``--vae-dtype``: the precision of the Wan2.2 VAE's encoder.

Upstream builds the VAE in float32 whatever the DiT runs in (``Wan22Backbone``:
``Wan22VAE(..., dtype=torch.float32)``), and on the H200 the encode is then the largest
compute-bound stage of a batched chunk. ``bfloat16`` casts the VAE's network once, at load,
and sets the dtype upstream's ``Wan22VAE.encode`` casts its input to; the encoder's output
``mu`` meets the float32 latent mean and scale, so the latents come out in float32 and
``Wan22Backbone.encode_video`` casts them to the backbone's dtype as before. Every path
(``infer_action``, ``StarwamPolicy.predict_chunk``, the batched and captured ones) goes
through that one ``encode``, so each sees the same VAE. ``float32`` changes nothing.
"""

from __future__ import annotations

from typing import Any

from wamcore.errors import ConfigurationError

VAE_DTYPES = ("float32", "bfloat16")


def use_vae_dtype(backbone: Any, name: str) -> None:
    """Cast ``backbone``'s VAE to ``name`` (one of :data:`VAE_DTYPES`); float32 is upstream's own."""
    if name == "float32":
        return
    import torch

    vae = getattr(backbone, "vae", None)
    impl = getattr(vae, "_impl", None)
    if impl is None:  # no Wan2.2_VAE.pth loaded: upstream's encode raises anyway; say why here, at load
        raise ConfigurationError(f"--vae-dtype {name} casts the backbone's Wan2.2 VAE, which this model has not "
                                 f"loaded ({type(vae).__name__}); check --backbone has Wan2.2_VAE.pth")
    dtype = getattr(torch, name)
    impl.model.to(dtype=dtype)  # upstream keeps the network outside the module tree (Wan2_2_VAE.model)
    vae._dtype = dtype  # Wan22VAE.encode (and decode) cast their input to it


__all__ = ["VAE_DTYPES", "use_vae_dtype"]
