"""Fast-WAM's first-frame action inference for several observations in one pass.

Upstream's ``FastWAM.infer_action`` (yuantianyuan01/FastWAM ``src/fastwam/models/wan22/fastwam.py``
at ``45d8e14``) takes one observation: it refuses an ``input_image`` whose batch is not 1, its
VAE helper ``_encode_input_image_latents_tensor`` does too, and it draws the action noise as
``torch.randn((1, horizon, dim), generator=...)`` from one generator. What it calls after that
is batch-generic: ``encode_prompt``/the cached context, ``_append_proprio_to_context``,
``video_expert.pre_dit``, ``_build_mot_attention_mask``, ``mot.prefill_video_cache``,
``infer_action_scheduler.build_inference_schedule``, ``_predict_action_noise_with_cache`` (the
action expert's ``pre_dit``, ``mot.forward_action_with_video_cache``, ``post_dit``) and
``infer_action_scheduler.step``. :func:`infer_action_batch` calls those same methods, in the
same order, on B observations stacked on the batch axis; each observation's noise comes from
its own generator seeded with its own seed, exactly as upstream draws it for one, and the
frames are encoded in one call of the VAE's ``single_encode`` (what upstream's ``vae.encode``
calls per frame). At batch 1 every tensor is the one upstream computes, so the chunk equals
``infer_action``'s bit for bit; at batch B each row is that observation's chunk up to the
kernels' reduction order (docs/models/fast-wam.md gives the tolerance).

torch is imported inside the function: the plugin's light side never imports it.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence


def infer_action_batch(
    model: Any,
    *,
    images: Sequence[Any],
    contexts: Sequence[Any],
    context_masks: Sequence[Any],
    proprios: Sequence[Optional[Any]],
    seeds: Sequence[Optional[int]],
    action_horizon: int,
    num_inference_steps: int,
    sigma_shift: Optional[float] = None,
    rand_device: str = "cpu",
):
    """``[B, action_horizon, action_dim]`` float32 on the CPU, one row per observation.

    ``images``: ``[1, 3, H, W]`` at the model's dtype, in [-1, 1]; ``contexts``/``context_masks``:
    ``[1, L, D]``/``[1, L]`` (the text cache's entry, or ``model.encode_prompt``'s output);
    ``proprios``: ``[1, D]`` normalised states (or ``None`` for every item); ``seeds``: one per
    observation (``None``: torch's global generator, as upstream)."""
    import torch

    if str(getattr(model.video_expert, "video_attention_mask_mode", "")) != "first_frame_causal":
        raise ValueError("`infer_action` requires `video_attention_mask_mode='first_frame_causal'`.")
    device, dtype = model.device, model.torch_dtype
    noise = [
        torch.randn((1, action_horizon, model.action_expert.action_dim),
                    generator=None if seed is None else torch.Generator(device=rand_device).manual_seed(seed),
                    device=rand_device, dtype=torch.float32)
        for seed in seeds
    ]
    latents_action = torch.cat(noise).to(device=device, dtype=dtype)
    frames = torch.cat(list(images)).to(device=device, dtype=dtype).unsqueeze(2)  # [B, 3, 1, H, W]
    with torch.no_grad():
        first_frame_latents = model.vae.single_encode(frames, device)
        context = torch.cat(list(contexts)).to(device=device, dtype=dtype)
        context_mask = torch.cat(list(context_masks)).to(device=device, dtype=torch.bool)
        if any(p is not None for p in proprios):
            context, context_mask = model._append_proprio_to_context(
                context=context, context_mask=context_mask,
                proprio=torch.cat(list(proprios)).to(device=device, dtype=dtype))
        video_pre = model.video_expert.pre_dit(
            x=first_frame_latents,
            timestep=torch.zeros((first_frame_latents.shape[0],), dtype=first_frame_latents.dtype, device=device),
            context=context,
            context_mask=context_mask,
            action=None,
            fuse_vae_embedding_in_latents=bool(getattr(model.video_expert, "fuse_vae_embedding_in_latents", False)),
        )
        video_seq_len = int(video_pre["tokens"].shape[1])
        attention_mask = model._build_mot_attention_mask(
            video_seq_len=video_seq_len,
            action_seq_len=latents_action.shape[1],
            video_tokens_per_frame=int(video_pre["meta"]["tokens_per_frame"]),
            device=video_pre["tokens"].device,
        )
        video_kv_cache = model.mot.prefill_video_cache(
            video_tokens=video_pre["tokens"],
            video_freqs=video_pre["freqs"],
            video_t_mod=video_pre["t_mod"],
            video_context_payload={"context": video_pre["context"], "mask": video_pre["context_mask"]},
            video_attention_mask=attention_mask[:video_seq_len, :video_seq_len],
        )
        timesteps, deltas = model.infer_action_scheduler.build_inference_schedule(
            num_inference_steps=num_inference_steps, device=device, dtype=latents_action.dtype,
            shift_override=sigma_shift)
        for step_t, step_delta in zip(timesteps, deltas):
            pred = model._predict_action_noise_with_cache(
                latents_action=latents_action,
                timestep_action=step_t.unsqueeze(0).to(dtype=latents_action.dtype, device=device),  # [1]: pre_dit expands it
                context=context,
                context_mask=context_mask,
                video_kv_cache=video_kv_cache,
                attention_mask=attention_mask,
                video_seq_len=video_seq_len,
            )
            latents_action = model.infer_action_scheduler.step(pred, step_delta, latents_action)
    return latents_action.detach().to(device="cpu", dtype=torch.float32)


#: what the identity names as the batched entry (the methods it composes are upstream's)
BATCH_ENTRY = "wam_fastwam.batching.infer_action_batch"

__all__ = ["infer_action_batch", "BATCH_ENTRY"]
