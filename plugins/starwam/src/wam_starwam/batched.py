"""Many observations in one forward pass, composed from upstream StarWAM's own modules.

Upstream's ``infer_action`` cannot serve a batch of independent requests: MoT draws its noise
as ``torch.randn(1, ...)`` (``starwam/wam/mot_wam.py``), and Shared-DiT and the
feature-conditioned model draw the whole batch's noise from one generator, so a request's
chunk would depend on who else is in the batch. Each composer here runs the same modules in
the same order as that family's ``infer_action``, with the batch dimension kept, and draws
each request's noise from its own ``torch.Generator`` seeded with that request's seed, in
the order upstream draws it (Shared-DiT: the video latents, then the actions). At batch 1
that is upstream's computation, call for call.

Every request of a batch has the same tensor shapes: images are the family's frame size and
text contexts are padded to ``text_len`` (128) with their masks, as upstream's
``load_text_cache`` and T5 encoder give them, so requests with different instructions are
stacked, not grouped; the masks keep each row's attention to its own tokens.

Each composer splits its work in two: :meth:`prepare` (each request's noise, eager: it needs
the request's own generator) and :meth:`core` (everything else, the VAE encode included, a pure
function of fixed-shape tensors), which ``wamcore.cuda_graphs`` captures as a CUDA graph where
the family allows it. Shared-DiT, never captured, encodes in :meth:`prepare`: its video noise
takes the latents' shape.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from starwam.modules.scheduler import FlowMatchScheduler
from starwam.training.flow import build_inference_schedule


def per_request_noise(seeds: Sequence[Optional[int]], shapes: Sequence[Tuple[int, ...]], device, dtype) -> List[Tensor]:
    """One tensor per shape, ``[B, *shape]``: row ``i`` drawn from request ``i``'s own
    generator (seeded as upstream seeds it), the shapes in upstream's order. A request
    without a seed draws from the global generator, as upstream does with ``seed=None``."""
    gens = [torch.Generator(device=device).manual_seed(int(s)) if s is not None else None for s in seeds]
    rows: List[List[Tensor]] = [[] for _ in shapes]
    for gen in gens:
        for k, shape in enumerate(shapes):
            rows[k].append(torch.randn(1, *shape, device=device, dtype=dtype, generator=gen))
    return [torch.cat(r, dim=0) for r in rows]


class Composer:
    """What the three families share: the model, its steps and schedules."""

    #: whether :meth:`core` is safe to capture as a CUDA graph (no host syncs, fixed shapes)
    graphable = False
    #: the upstream modules the composition calls, for the model identity
    modules: Tuple[str, ...] = ()

    def __init__(self, model: Any, *, horizon: int, steps: int, num_video_frames: int):
        self.model = model
        self.horizon = int(horizon)
        self.steps = int(steps)
        self.num_video_frames = int(num_video_frames)
        self.action_dim = int(model.config.action_dim)
        self.graphed = None  # a wamcore.cuda_graphs.GraphedCore of core, with --cuda-graphs
        self._schedules: dict = {}

    def use_cuda_graphs(self) -> None:
        from wamcore.cuda_graphs import GraphedCore

        if not self.graphable:
            raise ValueError(f"{type(self).__name__} is not captured as a CUDA graph")
        self.graphed = GraphedCore(self.core)

    def schedule(self, scheduler_config, steps: int, device, dtype) -> Tuple[Tensor, Tensor]:
        """``build_inference_schedule``, computed once: it syncs with the host, which a graph
        capture must not (the warm-up runs before a capture fill this)."""
        key = (id(scheduler_config), steps, str(device), dtype)
        if key not in self._schedules:
            self._schedules[key] = build_inference_schedule(scheduler_config, steps, device, dtype)
        return self._schedules[key]

    def prepare(self, images: Tensor, context: Tensor, mask: Tensor, proprio: Optional[Tensor],
                seeds: Sequence[Optional[int]]) -> tuple:
        """:meth:`core`'s inputs: the request's own, and each request's action noise."""
        (noise,) = per_request_noise(seeds, [(self.horizon, self.action_dim)], images.device, images.dtype)
        return images, context, mask, proprio, noise

    def core(self, *inputs: Optional[Tensor]) -> Tensor:
        raise NotImplementedError

    def __call__(self, images: Tensor, context: Tensor, mask: Tensor, proprio: Optional[Tensor],
                 seeds: Sequence[Optional[int]]) -> Tensor:
        """``[B, horizon, action_dim]`` normalised actions, as ``infer_action`` returns them."""
        with torch.no_grad():
            return (self.graphed or self.core)(*self.prepare(images, context, mask, proprio, seeds))

    def identity(self) -> dict:
        return {"composer": type(self).__name__, "upstream_modules": list(self.modules),
                "noise": "per request: torch.Generator(device).manual_seed(request seed)"}


class FirstFrameMoT(Composer):
    """``MoTWAM.infer_action`` with ``action_video_conditioning: first_frame`` (LIBERO MoT,
    RoboTwin MoT): VAE-encode the frame, prefill the video DiT's K/V once, then the action
    expert's steps against that cache."""

    graphable = True
    modules = ("MoTWAM._append_proprio_to_context", "backbone.encode_video", "get_dit().pre_dit",
               "mot.prefill_video_cache", "action_expert.pre_dit", "mot.forward_action_with_video_cache",
               "action_expert.post_dit", "FlowMatchScheduler.step")

    def core(self, images: Tensor, context: Tensor, mask: Tensor, proprio: Optional[Tensor], noise: Tensor) -> Tensor:
        model = self.model
        batch, device = images.shape[0], images.device
        context, mask = model._append_proprio_to_context(context, mask, proprio)
        latents = model.backbone.encode_video(images.unsqueeze(2))
        timesteps, deltas = self.schedule(model.config.action_scheduler, self.steps, device, noise.dtype)
        video_state = model.backbone.get_dit().pre_dit(latents, torch.zeros(batch, device=device, dtype=torch.long),
                                                       context, mask)
        cache = model.mot.prefill_video_cache(video_state)
        actions = noise
        for i in range(self.steps):
            state = model.action_expert.pre_dit(actions, timesteps[i].reshape(1).expand(batch), context, mask)
            out = model.mot.forward_action_with_video_cache(state, cache)
            actions = FlowMatchScheduler.step(model.action_expert.post_dit(out), deltas[i], actions)
        return actions


class SharedDiT(Composer):
    """``SharedDiTWAM.infer_action`` (its ``infer_joint`` without the video decode, whose
    output ``infer_action`` drops): encode the frame repeated over the clip, then joint
    video/action denoising through ``shared_dit``, the actions on their own schedule."""

    modules = ("backbone.encode_video", "SharedDiTWAM._state_from_proprio", "shared_dit", "FlowMatchScheduler.step")

    def __init__(self, model, *, action_steps: Optional[int] = None, **kw):
        super().__init__(model, **kw)
        self.action_steps = int(action_steps or self.steps)

    def prepare(self, images, context, mask, proprio, seeds):
        video = images.unsqueeze(2).expand(-1, -1, self.num_video_frames, -1, -1).contiguous()
        clean = self.model.backbone.encode_video(video)
        _, channels, latent_steps, height, width = clean.shape
        if latent_steps <= 1:
            raise ValueError(f"SharedDiT inference needs future latent steps, got latent_steps={latent_steps}")
        video_noise, action_noise = per_request_noise(
            seeds, [(channels, latent_steps, height, width), (self.horizon, self.action_dim)], images.device, images.dtype)
        return clean, context, mask, proprio, video_noise, action_noise

    def core(self, clean, context, mask, proprio, video_noise, action_noise):
        model = self.model
        batch, _, latent_steps = clean.shape[:3]
        device, dtype = clean.device, video_noise.dtype
        video, actions = video_noise.clone(), action_noise
        video[:, :, 0:1] = clean[:, :, 0:1]
        state, state_is_pad = model._state_from_proprio(proprio, batch, latent_steps, device, dtype)
        video_t, video_d = self.schedule(model.config.video_scheduler, self.steps, device, dtype)
        action_t, action_d = self.schedule(model.config.action_scheduler, self.action_steps, device, dtype)
        zero_t = torch.zeros(batch, device=device, dtype=dtype)  # a finished schedule's timestep
        for i in range(max(self.steps, self.action_steps)):
            denoise_video, denoise_action = i < self.steps, i < self.action_steps
            pred_video, pred_action = model.shared_dit(
                noisy_video=video, video_timestep=video_t[i].expand(batch) if denoise_video else zero_t,
                context=context, noisy_action=actions,
                action_timestep=action_t[i].expand(batch) if denoise_action else zero_t,
                state=state, context_mask=mask, clean_video=video, state_is_pad=state_is_pad,
            )
            if denoise_video:
                video = FlowMatchScheduler.step(pred_video, video_d[i], video)
                video[:, :, 0:1] = clean[:, :, 0:1]
            if denoise_action:
                actions = FlowMatchScheduler.step(pred_action, action_d[i], actions)
        return actions


class ObservationFeatures(Composer):
    """``FeatureConditionedActionModel.infer_action`` with observation features (the LIBERO
    recipe's ``feature_condition_input: observation``): the video DiT's features of the
    encoded frame become the action expert's context, then the action expert's steps."""

    modules = ("FeatureConditionedActionModel._append_proprio_to_context", "backbone.encode_video",
               "FeatureConditionedActionModel._extract_video_features", "FeatureConditionedActionModel._compose_action_context",
               "action_expert", "FlowMatchScheduler.step")

    def core(self, images, context, mask, proprio, noise):
        model = self.model
        batch, device, dtype = images.shape[0], images.device, noise.dtype
        context, mask = model._append_proprio_to_context(context, mask, proprio)
        latents = model.backbone.encode_video(images.unsqueeze(2))
        feature_t = torch.zeros(batch, device=device, dtype=dtype)
        features = model._extract_video_features(latents, feature_t, context, mask)
        action_context, action_mask = model._compose_action_context(features, feature_t, context, mask)
        timesteps, deltas = self.schedule(model.config.action_scheduler, self.steps, device, dtype)
        actions = noise
        for i in range(self.steps):
            velocity = model.action_expert(actions, timesteps[i].expand(batch), action_context, action_mask)
            actions = FlowMatchScheduler.step(velocity, deltas[i], actions)
        return actions


def composer_for(model: Any, *, horizon: int, steps: int, num_video_frames: int,
                 action_steps: Optional[int] = None) -> Tuple[Optional[Composer], str]:
    """The batched path of ``model``'s family, or ``(None, why)`` when it has none."""
    family = getattr(model, "taxonomy_model_family", None)
    kw = dict(horizon=horizon, steps=steps, num_video_frames=num_video_frames)
    if family == "mot_wam":
        if getattr(model, "action_video_conditioning", "first_frame") != "first_frame":
            return None, ("MoT with action_video_conditioning full_video denoises the whole video with the actions "
                          "(infer_action's joint loop); only first_frame, the released recipes', is batched")
        return FirstFrameMoT(model, **kw), ""
    if family == "shared_dit_wam":
        return SharedDiT(model, action_steps=action_steps, **kw), ""
    if family == "feature_conditioned_action_model":
        if model.feature_input == "generated_video" or model.feature_noise == "scheduler":
            return None, ("feature-conditioned with generated-video features runs a video denoising loop first; "
                          "only observation features, the released recipe's, are batched")
        return ObservationFeatures(model, **kw), ""
    return None, f"no batched path for the model family {family!r}"


__all__ = ["per_request_noise", "Composer", "FirstFrameMoT", "SharedDiT", "ObservationFeatures", "composer_for"]
