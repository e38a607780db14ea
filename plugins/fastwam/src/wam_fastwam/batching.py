"""Fast-WAM's first-frame action inference for several observations in one pass.

Upstream's ``FastWAM.infer_action`` (yuantianyuan01/FastWAM ``src/fastwam/models/wan22/fastwam.py``
at ``45d8e14``) takes one observation: it refuses an ``input_image`` whose batch is not 1, its
VAE helper ``_encode_input_image_latents_tensor`` does too, and it draws the action noise as
``torch.randn((1, horizon, dim), generator=...)`` from one generator. What it calls after that
is batch-generic: ``encode_prompt``/the cached context, ``_append_proprio_to_context``,
``video_expert.pre_dit``, ``_build_mot_attention_mask``, ``mot.prefill_video_cache``,
``infer_action_scheduler.build_inference_schedule``, ``_predict_action_noise_with_cache`` (the
action expert's ``pre_dit``, ``mot.forward_action_with_video_cache``, ``post_dit``) and
``infer_action_scheduler.step``. :class:`BatchedInference` calls those same methods, in the
same order, on B observations stacked on the batch axis; each observation's noise comes from
its own generator seeded with its own seed, exactly as upstream draws it for one, and the
frames are encoded in one call of the VAE's ``single_encode`` (what upstream's ``vae.encode``
calls per frame). At batch 1 every tensor is the one upstream computes, so the chunk equals
``infer_action``'s bit for bit; at batch B each row is that observation's chunk up to the
kernels' reduction order (docs/models/fast-wam.md gives the tolerance).

The work is split as StarWAM's is (``wam_starwam.batched``): :meth:`BatchedInference.prepare`
draws each observation's noise (eager: it needs the observation's own generator) and stacks the
inputs on the device; :meth:`BatchedInference.core` is everything else, the VAE encode included,
a pure function of fixed-shape tensors that ``--cuda-graphs`` captures per batch-size bucket
(``wamcore.cuda_graphs``). Upstream keeps three constant tables on the CPU and copies them to
the GPU on every call (the video and action experts' RoPE ``freqs``, the VAE's ``scale``); a
copy from pageable memory synchronises with the host, which a capture forbids, so
:meth:`BatchedInference.use_cuda_graphs` moves those tables to the device once. Their values
are unchanged (a copy), so the eager and captured paths compute the same numbers.

torch is imported inside the methods: the plugin's light side never imports it.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

#: the buckets Fast-WAM's batches are captured in (its ``MAX_BATCH`` is 16)
GRAPH_BUCKETS = (1, 2, 4, 8, 16)


class BatchedInference:
    """``infer_action`` for B observations: ``[B, horizon, action_dim]`` float32 on the CPU."""

    def __init__(self, model: Any, *, action_horizon: int, num_inference_steps: int,
                 sigma_shift: Optional[float] = None, rand_device: str = "cpu"):
        self.model = model
        self.action_horizon = int(action_horizon)
        self.num_inference_steps = int(num_inference_steps)
        self.sigma_shift = sigma_shift
        self.rand_device = rand_device
        self.graphed = None  # a wamcore.cuda_graphs.GraphedCore of core, with --cuda-graphs

    def use_cuda_graphs(self) -> None:
        """Replay :meth:`core` from CUDA graphs, after moving upstream's CPU tables to the device."""
        from wamcore.cuda_graphs import GraphedCore

        model, device = self.model, self.model.device
        model.video_expert.freqs = tuple(f.to(device) for f in model.video_expert.freqs)
        model.action_expert.freqs = model.action_expert.freqs.to(device)
        model.vae.scale = [s.to(device) for s in model.vae.scale]
        self.graphed = GraphedCore(self.core, buckets=GRAPH_BUCKETS)

    def __call__(self, *, images: Sequence[Any], contexts: Sequence[Any], context_masks: Sequence[Any],
                 proprios: Sequence[Optional[Any]], seeds: Sequence[Optional[int]]):
        """``images``: ``[1, 3, H, W]`` at the model's dtype, in [-1, 1]; ``contexts``/``context_masks``:
        ``[1, L, D]``/``[1, L]`` (the text cache's entry, or ``model.encode_prompt``'s output);
        ``proprios``: ``[1, D]`` normalised states (or ``None`` for every item); ``seeds``: one per
        observation (``None``: torch's global generator, as upstream)."""
        import torch

        with torch.no_grad():
            actions = (self.graphed or self.core)(*self.prepare(images, contexts, context_masks, proprios, seeds))
        return actions.detach().to(device="cpu", dtype=torch.float32)

    def prepare(self, images, contexts, context_masks, proprios, seeds) -> tuple:
        """:meth:`core`'s inputs on the device: frames, context, mask, proprio (or ``None``) and
        each observation's noise, drawn as upstream draws it for one."""
        import torch

        model = self.model
        if str(getattr(model.video_expert, "video_attention_mask_mode", "")) != "first_frame_causal":
            raise ValueError("`infer_action` requires `video_attention_mask_mode='first_frame_causal'`.")
        device, dtype = model.device, model.torch_dtype
        noise = [
            torch.randn((1, self.action_horizon, model.action_expert.action_dim),
                        generator=None if seed is None else torch.Generator(device=self.rand_device).manual_seed(seed),
                        device=self.rand_device, dtype=torch.float32)
            for seed in seeds
        ]
        latents_action = torch.cat(noise).to(device=device, dtype=dtype)
        frames = torch.cat(list(images)).to(device=device, dtype=dtype).unsqueeze(2)  # [B, 3, 1, H, W]
        context = torch.cat(list(contexts)).to(device=device, dtype=dtype)
        context_mask = torch.cat(list(context_masks)).to(device=device, dtype=torch.bool)
        proprio = None
        if any(p is not None for p in proprios):
            proprio = torch.cat(list(proprios)).to(device=device, dtype=dtype)
        return frames, context, context_mask, proprio, latents_action

    def core(self, frames, context, context_mask, proprio, latents_action):
        """Upstream's ``infer_action`` after its noise, on the batch: ``[B, horizon, dim]`` on the device."""
        import torch

        model = self.model
        device = model.device
        first_frame_latents = model.vae.single_encode(frames, device)
        if proprio is not None:
            context, context_mask = model._append_proprio_to_context(
                context=context, context_mask=context_mask, proprio=proprio)
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
            num_inference_steps=self.num_inference_steps, device=device, dtype=latents_action.dtype,
            shift_override=self.sigma_shift)
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
        return latents_action

    def identity(self) -> dict:
        return {"entry": BATCH_ENTRY, "cuda_graphs": self.graphed is not None,
                "graph_buckets": list(GRAPH_BUCKETS) if self.graphed is not None else None}


#: what the identity names as the batched entry (the methods it composes are upstream's)
BATCH_ENTRY = "wam_fastwam.batching.BatchedInference"

__all__ = ["BatchedInference", "BATCH_ENTRY", "GRAPH_BUCKETS"]
