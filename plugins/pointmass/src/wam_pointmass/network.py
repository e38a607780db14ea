"""The reference world action model's network (torch; imported only where the model runs).

Four learned parts share one encoding of (image, state, instruction):

* **encoder**: a small CNN over the image plus coordinate channels, modulated by the
  instruction (FiLM, as in language-conditioned behaviour cloning), ending in a spatial
  softmax that turns each of ``keypoints`` feature maps into an (x, y) point in metres
  (Levine et al., "End-to-end training of deep visuomotor policies", 2016); the first one
  is trained (an auxiliary loss on the demonstrations' privileged goal position) to sit on
  the target the instruction names, the others are free;
* **policy**: an MLP from keypoints, state and instruction to an action chunk in [-1, 1];
* **dynamics**: an MLP from state and an action chunk to the state at the chunk's end;
* **value**: an MLP giving the logit of "this chunk reaches the named target";
* **renderer**: a dilated CNN that redraws the current frame given Gaussian heat maps at the
  mass's current and predicted positions (keypoint-conditioned rendering as in Transporter,
  Kulkarni et al. 2019), i.e. the predicted camera frame at the chunk's end.

The heat maps use the platform's camera geometry (``spec``): the pixel grid in metres.

Two configuration keys, absent from the original weights (which therefore load and compute
exactly as before), make the variant trained for the ``pit`` family:

* ``latent`` (an int, 0: none): the policy also takes a latent ``z`` in [-1, 1]^latent,
  the demonstrations' route preference; sampling ``z`` samples routes;
* ``trajectory`` (0/1): each keypoint also reports how strongly its map fires (whether the
  thing it tracks is in the picture at all); the dynamics, given the keypoints, predicts the
  state after *every* action of the chunk; and the value reads that trajectory together
  with the distance of each predicted position to each keypoint (the pit's, the goal's).

A third key, ``prefix`` (0/1), makes the variant that conditions on an action prefix (the
``action_prefix`` capability, real-time chunking): the policy also takes the first ``d``
actions of the chunk, those that will execute while it is computed (zero-padded to the
chunk, with a mask), and plans the rest from where they leave the mass; the returned chunk
starts with the prefix itself (hard inpainting, as RTC freezes the executing actions).
"""

from __future__ import annotations

import math
from typing import Dict, Optional

import torch
from torch import nn
from torch.nn import functional as F

from .render import PIXELS_PER_METRE
from .spec import ARENA, IMAGE_SIZE
from .tokenizer import VOCAB

#: Heat-map width in pixels (the mass's disc has a radius of 2.56 px).
HEAT_SIGMA_PX = 2.0

DEFAULT_CONFIG: Dict[str, int] = {
    "chunk": 8,
    "keypoints": 4,
    "text_dim": 32,
    "channels": 32,
    "hidden": 256,
    "world_hidden": 128,
    "render_channels": 16,
    "vocab_size": len(VOCAB),
    "image_size": IMAGE_SIZE,
}


def _mlp(sizes) -> nn.Sequential:
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _pixel_grid(size: int) -> torch.Tensor:
    """[2, size, size]: the arena (x, y) in metres at the cell centres of a size x size
    grid over the camera image (row 0 = top, y = +ARENA)."""
    centres = (torch.arange(size, dtype=torch.float32) + 0.5) * (2.0 * ARENA / size) - ARENA
    ys, xs = torch.meshgrid(-centres, centres, indexing="ij")
    return torch.stack([xs, ys])


class PointMassWAMNet(nn.Module):
    def __init__(self, config: Optional[Dict[str, int]] = None):
        super().__init__()
        cfg = dict(DEFAULT_CONFIG, **(config or {}))
        self.config = cfg
        h, k, c, t = cfg["chunk"], cfg["keypoints"], cfg["channels"], cfg["text_dim"]
        self.embed = nn.Embedding(cfg["vocab_size"], t, padding_idx=0)
        self.conv1 = nn.Conv2d(5, c // 2, 5, stride=2, padding=2)
        self.conv2 = nn.Conv2d(c // 2, c, 3, stride=2, padding=1)
        self.film = nn.Linear(t, 2 * c)
        self.keypoint_maps = nn.Conv2d(c, k, 1)
        self.log_temperature = nn.Parameter(torch.zeros(()))
        self.latent = int(cfg.get("latent", 0))
        self.trajectory = bool(cfg.get("trajectory", 0))
        self.prefix = bool(cfg.get("prefix", 0))
        extra = self.latent + (3 * h if self.prefix else 0)  # the latent; the prefix, its mask
        w = cfg["world_hidden"]
        if self.trajectory:
            context = 3 * k + 4 + t  # keypoints, their presence, state, instruction
            self.policy = _mlp([context + extra, cfg["hidden"], cfg["hidden"], 2 * h])
            self.dynamics = _mlp([3 * k + 4 + 2 * h, w, w, 4 * h])
            self.value = _mlp([context + 2 * h + 4 * h + h * k, w, w, 1])
        else:
            context = 2 * k + 4 + t
            self.policy = _mlp([context + extra, cfg["hidden"], cfg["hidden"], 2 * h])
            self.dynamics = _mlp([4 + 2 * h, w, w, 4])
            self.value = _mlp([context + 2 * h + 4, w, w, 1])
        r = cfg["render_channels"]
        self.render1 = nn.Conv2d(5, r, 3, padding=1)
        self.render2 = nn.Conv2d(r, r, 3, padding=2, dilation=2)
        self.render3 = nn.Conv2d(r, r, 3, padding=4, dilation=4)
        self.render_out = nn.Conv2d(r, 3, 1)
        size = cfg["image_size"]
        self.register_buffer("grid", _pixel_grid(size), persistent=False)
        self.register_buffer("keypoint_grid", _pixel_grid(size // 4), persistent=False)

    # ------------------------------------------------------------------ parts

    def text(self, tokens: torch.Tensor) -> torch.Tensor:
        mask = (tokens != 0).float().unsqueeze(-1)
        return (self.embed(tokens) * mask).sum(1) / mask.sum(1).clamp(min=1.0)

    def keypoint_logits(self, image: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        """[B, K, N]: the keypoint maps' logits over the N cells of the coarse grid."""
        b = image.shape[0]
        x = F.relu(self.conv1(torch.cat([image, self.grid.expand(b, -1, -1, -1)], 1)))
        x = self.conv2(x)
        gamma, beta = self.film(text).chunk(2, dim=-1)
        x = F.relu(x * (1 + gamma[..., None, None]) + beta[..., None, None])
        return self.keypoint_maps(x).flatten(2)

    def keypoints(self, maps: torch.Tensor) -> torch.Tensor:
        """[B, K, 2]: the expected arena (x, y) in metres of each keypoint map."""
        attention = F.softmax(maps * self.log_temperature.exp() * 10.0, dim=-1)
        return torch.einsum("bkn,cn->bkc", attention, self.keypoint_grid.flatten(1))

    def context(self, image: torch.Tensor, state: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """[B, 2K (+ K) + 4 + T]: keypoints (the named target's first), with ``trajectory``
        their presence (each map's peak logit), state, instruction."""
        text = self.text(tokens)
        maps = self.keypoint_logits(image, text)
        parts = [self.keypoints(maps).flatten(1)]
        if self.trajectory:
            parts.append(maps.amax(-1))
        return torch.cat([*parts, state, text], -1)

    def act(self, context: torch.Tensor, latent: Optional[torch.Tensor] = None, prefix: Optional[torch.Tensor] = None,
            mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """A chunk [B, H, 2]. With ``prefix`` [B, H, 2] and ``mask`` [B, H] (1 where an
        action is given; a network with ``prefix`` only) the chunk starts with the given
        actions and the rest is planned from where they leave the mass."""
        b, h = context.shape[0], self.config["chunk"]
        if self.latent:
            if latent is None:
                latent = context.new_zeros(b, self.latent)
            context = torch.cat([context, latent], -1)
        if self.prefix:
            if prefix is None:
                prefix, mask = context.new_zeros(b, h, 2), context.new_zeros(b, h)
            context = torch.cat([context, (prefix * mask[..., None]).flatten(1), mask], -1)
        elif prefix is not None:
            raise ValueError("this network was not trained to condition on an action prefix (config 'prefix')")
        actions = torch.tanh(self.policy(context)).view(b, -1, 2)
        if prefix is not None:
            actions = torch.where(mask[..., None] > 0, prefix, actions)
        return actions

    def predict_state(self, state: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return state + self.dynamics(torch.cat([state, actions.flatten(1)], -1))

    def predict_trajectory(self, context: torch.Tensor, state: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """[B, H, 4]: the (normalised) state after each action of the chunk (``trajectory``)."""
        k = self.config["keypoints"]
        scene = context[:, : 3 * k]
        steps = self.dynamics(torch.cat([scene, state, actions.flatten(1)], -1))
        return state[:, None, :] + steps.view(state.shape[0], actions.shape[1], 4)

    def value_logit(self, context: torch.Tensor, actions: torch.Tensor, future: torch.Tensor) -> torch.Tensor:
        """``future``: the state at the chunk's end [B, 4], or with ``trajectory`` the predicted trajectory [B, H, 4]."""
        if not self.trajectory:
            return self.value(torch.cat([context, actions.flatten(1), future], -1)).squeeze(-1)
        k = self.config["keypoints"]
        points = context[:, : 2 * k].view(-1, 1, k, 2)
        distances = (future[:, :, None, :2] - points).norm(dim=-1)  # [B, H, K]
        features = [context, actions.flatten(1), future.flatten(1), distances.flatten(1)]
        return self.value(torch.cat(features, -1)).squeeze(-1)

    def heat(self, position: torch.Tensor) -> torch.Tensor:
        """[B, 1, H, W] Gaussian bump at ``position`` (metres)."""
        d2 = ((self.grid[None] - position[:, :, None, None]) ** 2).sum(1, keepdim=True)
        sigma = HEAT_SIGMA_PX / PIXELS_PER_METRE
        return torch.exp(-d2 / (2 * sigma * sigma))

    def render(self, image: torch.Tensor, position: torch.Tensor, future_position: torch.Tensor) -> torch.Tensor:
        """The frame ``image`` with the mass moved from ``position`` to ``future_position``."""
        x = torch.cat([image, self.heat(position), self.heat(future_position)], 1)
        x = F.relu(self.render1(x.contiguous(memory_format=torch.channels_last)))
        x = F.relu(self.render2(x))
        x = F.relu(self.render3(x))
        return (image + self.render_out(x)).clamp(0.0, 1.0)

    # ------------------------------------------------------------------ inference

    def forward(
        self, image: torch.Tensor, state: torch.Tensor, tokens: torch.Tensor, candidate: Optional[torch.Tensor] = None,
        latent: Optional[torch.Tensor] = None, prefix: Optional[torch.Tensor] = None, mask: Optional[torch.Tensor] = None,
    ) -> Dict[str, torch.Tensor]:
        """``image`` [B,3,H,W] in [0, 1]; ``state`` [B,4] normalised (``adapter.normalise_states``);
        ``candidate`` [B,H,2] or None (then the policy's chunk is used, for the ``latent``
        [B, latent] given, zero when None, and the action ``prefix`` [B,H,2] where ``mask``
        [B,H] is 1)."""
        context = self.context(image, state, tokens)
        actions = self.act(context, latent, prefix, mask) if candidate is None else candidate
        if self.trajectory:
            future = self.predict_trajectory(context, state, actions)
            future_state = future[:, -1]
        else:
            future = future_state = self.predict_state(state, actions)
        return {
            "actions": actions,
            "future_state": future_state,
            "value": torch.sigmoid(self.value_logit(context, actions, future)),
            "future_image": self.render(image, state[:, :2], future_state[:, :2]),
        }


def parameter_count(net: nn.Module) -> int:
    return sum(math.prod(p.shape) for p in net.parameters())


__all__ = ["DEFAULT_CONFIG", "PointMassWAMNet", "parameter_count"]
