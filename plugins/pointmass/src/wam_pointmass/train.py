"""Train the reference WAM by behaviour cloning on scripted demonstrations.

    python -m wam_pointmass.train --out DIR                # the reach family's model
    python -m wam_pointmass.train --family pit --out DIR   # the pit family's (routes, values for planning)
    python -m wam_pointmass.train --family reach-rtc --out DIR  # reach, conditioning on an action prefix

writes ``DIR/pointmass_wam.safetensors`` and ``DIR/pins.json`` (its sha256), then
evaluates the result on fresh seeds. With the defaults it reproduces the weights shipped
in the package (same data, same seed, same schedule) in about four minutes on one thread
of a 2-core CPU; the file is byte-identical for the same torch version, thread count and
CPU instruction set, and of the same quality elsewhere. ``wam eval --am-checkpoint DIR`` evaluates it.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Callable, Dict, Optional, Union

import attrs
import numpy as np

from .checkpoint import PINS_NAME, WEIGHTS_NAME
from .data import Demonstrations, RouteDemonstrations, collect, collect_routes
from .tokenizer import TEMPLATES, tokenize


@attrs.frozen
class TrainConfig:
    episodes: int = 1500
    steps: int = 3000
    batch_size: int = 64
    lr: float = 3e-3
    weight_decay: float = 1e-4
    warmup: int = 100
    seed: int = 0
    threads: int = 1
    #: loss weights: behaviour cloning, goal keypoint, dynamics, value, rendering
    w_bc: float = 10.0
    w_goal: float = 10.0
    w_dynamics: float = 10.0
    w_value: float = 0.5
    w_render: float = 1.0
    #: samples of each batch whose rendering is trained (the renderer is the costly part)
    render_batch: int = 8
    #: extra weight of pixels that change during the chunk (the mass's old and new place)
    changed_pixel_weight: float = 20.0


@attrs.frozen
class PitTrainConfig(TrainConfig):
    """The ``pit`` family's model: demonstrations of routes (``data.collect_routes``), a
    latent route input, a trajectory world model, and a value worth planning with."""

    episodes: int = 1200
    w_value: float = 2.0
    #: loss weight of the pit's keypoint and of its presence
    w_pit: float = 10.0
    gamma: float = 0.97
    reach_fraction: float = 0.25

    @property
    def network(self) -> dict:
        return {"latent": 1, "trajectory": 1}

    @property
    def value(self) -> str:
        return (f"gamma**steps until the goal is reached executing the chunk and then a controller that goes "
                f"around the pit (gamma {self.gamma}; 0: never, e.g. fallen into the pit)")


@attrs.frozen
class PrefixTrainConfig(TrainConfig):
    """The reach family's model that also conditions on an action prefix (the
    ``action_prefix`` capability, for ``--execution rtc``): the reach data, each state also
    with a random prefix of 0..7 actions and the expert's plan from where it leaves the mass."""

    #: loss weight of the chunk planned after a prefix (the ``bc`` loss keeps the plain policy)
    w_prefix: float = 10.0

    @property
    def network(self) -> dict:
        return {"prefix": 1}


def _tensors(demos: Union[Demonstrations, RouteDemonstrations]):
    import torch

    from .adapter import normalise_states
    from .env import PointMassEnv

    def norm(states):
        return torch.from_numpy(normalise_states(states))

    # every phrasing of every goal: [templates, colours, MAX_TOKENS]
    table = torch.from_numpy(np.stack([[tokenize(t.format(c)) for c in PointMassEnv.colours] for t in TEMPLATES]))
    images = {k: torch.from_numpy(getattr(demos, k)).permute(0, 3, 1, 2).contiguous() for k in ("images", "future_images")}
    if isinstance(demos, RouteDemonstrations):
        plain = ("goals", "goal_positions", "pit_positions", "has_pit", "routes", "expert", "chunks", "values")
        return {**images, "states": norm(demos.states), "trajectories": norm(demos.trajectories),
                **{k: torch.from_numpy(getattr(demos, k)) for k in plain}, "token_table": table}
    prefixes = {}
    if demos.prefixed is not None:
        chunk = demos.expert.shape[1]
        mask = (np.arange(chunk)[None, :] < demos.prefix_steps[:, None]).astype(np.float32)
        prefixes = {"prefixed": torch.from_numpy(demos.prefixed), "prefix_mask": torch.from_numpy(mask)}
    return {
        **images,
        **prefixes,
        "states": norm(demos.states),
        "future_states": norm(demos.future_states),
        "goals": torch.from_numpy(demos.goals),
        "goal_positions": torch.from_numpy(demos.goal_positions),
        "expert": torch.from_numpy(demos.expert),
        "chunks": torch.from_numpy(demos.chunks),
        "reached": torch.from_numpy(demos.reached),
        "token_table": table,
    }


def losses(net, batch: Dict, cfg: TrainConfig) -> Dict:
    """The training losses on one batch (also used by the tests on tiny data)."""
    import torch
    from torch.nn import functional as F

    image = batch["images"].float() / 255.0
    future = batch["future_images"].float() / 255.0
    state, future_state = batch["states"], batch["future_states"]
    context = net.context(image, state, batch["tokens"])
    bc = F.mse_loss(net.act(context), batch["expert"])
    goal = F.mse_loss(context[:, :2], batch["goal_positions"])
    predicted_state = net.predict_state(state, batch["chunks"])
    dynamics = F.mse_loss(predicted_state, future_state)
    logit = net.value_logit(context, batch["chunks"], predicted_state.detach())
    value = F.binary_cross_entropy_with_logits(logit, batch["reached"])
    render = _render_loss(net, image, future, state, future_state, cfg)
    total = cfg.w_bc * bc + cfg.w_goal * goal + cfg.w_dynamics * dynamics + cfg.w_value * value + cfg.w_render * render
    with torch.no_grad():
        accuracy = ((logit > 0).float() == batch["reached"]).float().mean()
    out = {"total": total, "bc": bc, "goal": goal, "dynamics": dynamics, "value": value, "render": render, "value_acc": accuracy}
    if isinstance(cfg, PrefixTrainConfig):  # the chunk after a prefix: the given actions are copied, the rest planned
        mask = batch["prefix_mask"]
        planned = net.act(context, prefix=batch["prefixed"], mask=mask)
        free = (1.0 - mask)[..., None]
        prefix = (((planned - batch["prefixed"]) ** 2) * free).sum() / (free.sum() * 2.0).clamp(min=1.0)
        out.update(total=total + cfg.w_prefix * prefix, prefix=prefix)
    return out


def _render_loss(net, image, future, state, future_state, cfg: TrainConfig):
    """Pixel loss of the predicted frame on ``cfg.render_batch`` samples, changed pixels weighted up."""
    r = cfg.render_batch
    image, future = image[:r], future[:r]
    rendered = net.render(image, state[:r, :2], future_state[:r, :2])
    changed = ((future - image).abs().amax(1, keepdim=True) > 0).float()
    weight = 1.0 + cfg.changed_pixel_weight * changed
    return ((rendered - future) ** 2 * weight).mean() * 3.0


def route_losses(net, batch: Dict, cfg: PitTrainConfig) -> Dict:
    """The pit family's losses: as ``losses``, with the policy given the demonstrated route,
    the second keypoint (and its presence) trained on the pit, dynamics over the whole
    trajectory, and a soft value target."""
    import torch
    from torch.nn import functional as F

    k = net.config["keypoints"]
    image = batch["images"].float() / 255.0
    future = batch["future_images"].float() / 255.0
    state, trajectory = batch["states"], batch["trajectories"]
    context = net.context(image, state, batch["tokens"])
    bc = F.mse_loss(net.act(context, batch["routes"][:, None]), batch["expert"])
    goal = F.mse_loss(context[:, :2], batch["goal_positions"])
    has_pit = batch["has_pit"]
    pit_error = ((context[:, 2:4] - batch["pit_positions"]) ** 2).sum(-1)
    pit = (pit_error * has_pit).sum() / has_pit.sum().clamp(min=1.0) / 2.0
    presence = F.binary_cross_entropy_with_logits(context[:, 2 * k + 1], has_pit)
    predicted = net.predict_trajectory(context, state, batch["chunks"])
    dynamics = F.mse_loss(predicted, trajectory)
    logit = net.value_logit(context, batch["chunks"], predicted.detach())
    value = F.binary_cross_entropy_with_logits(logit, batch["values"])
    render = _render_loss(net, image, future, state, trajectory[:, -1], cfg)
    total = (cfg.w_bc * bc + cfg.w_goal * goal + cfg.w_pit * (pit + presence) + cfg.w_dynamics * dynamics
             + cfg.w_value * value + cfg.w_render * render)
    with torch.no_grad():
        value_error = (torch.sigmoid(logit) - batch["values"]).abs().mean()
    return {"total": total, "bc": bc, "goal": goal, "pit": pit, "presence": presence, "dynamics": dynamics,
            "value": value, "render": render, "value_mae": value_error}


def train(
    cfg: TrainConfig,
    demos: Optional[Demonstrations] = None,
    log: Callable[[str], None] = print,
):
    """Train a network on ``demos`` (collected from ``cfg`` when not given); returns it."""
    import torch

    from .network import PointMassWAMNet, parameter_count

    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.threads)
    torch.use_deterministic_algorithms(True)
    pit = isinstance(cfg, PitTrainConfig)
    prefixed = isinstance(cfg, PrefixTrainConfig)
    if demos is None:
        t0 = time.perf_counter()
        every = max(1, cfg.episodes // 10)

        def progress(i, n):
            if i % every == 0 or i == n:
                log(f"  demonstrations: {i}/{n} episodes")

        if pit:
            demos = collect_routes(cfg.episodes, seed=cfg.seed, reach_fraction=cfg.reach_fraction, gamma=cfg.gamma,
                                   progress=progress)
            labels = f"mean value {demos.values.mean():.2f}, zero values {(demos.values == 0).mean():.2f}"
        else:
            demos = collect(cfg.episodes, seed=cfg.seed, progress=progress, prefixes=prefixed)
            labels = f"value positives {demos.reached.mean():.2f}"
        log(f"collected {len(demos)} samples from {cfg.episodes} episodes in {time.perf_counter() - t0:.1f} s ({labels})")
    data = _tensors(demos)
    net = PointMassWAMNet(cfg.network) if pit or prefixed else PointMassWAMNet()
    loss_fn = route_losses if pit else losses
    log(f"network: {parameter_count(net)} parameters")
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)

    def lr_at(step: int) -> float:
        if step < cfg.warmup:
            return cfg.lr * (step + 1) / cfg.warmup
        progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
        return cfg.lr * 0.5 * (1 + math.cos(math.pi * progress))

    gen = torch.Generator().manual_seed(cfg.seed)
    n = len(demos)
    t0 = time.perf_counter()
    running: Dict[str, float] = {}
    every = max(1, cfg.steps // 20)
    net.train()
    for step in range(cfg.steps):
        idx = torch.randint(n, (cfg.batch_size,), generator=gen)
        template = torch.randint(len(TEMPLATES), (cfg.batch_size,), generator=gen)
        batch = {k: v[idx] for k, v in data.items() if k != "token_table"}
        batch["tokens"] = data["token_table"][template, batch["goals"]]
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        out = loss_fn(net, batch, cfg)
        opt.zero_grad(set_to_none=True)
        out["total"].backward()
        opt.step()
        for k, v in out.items():
            running[k] = running.get(k, 0.0) + float(v.detach())
        if (step + 1) % every == 0 or step + 1 == cfg.steps:
            count = every if (step + 1) % every == 0 else (step + 1) % every
            shown = " ".join(f"{k} {v / count:.4f}" for k, v in running.items())
            log(f"  step {step + 1}/{cfg.steps} ({time.perf_counter() - t0:.0f} s): {shown}")
            running = {}
    return net.eval()


def evaluate_weights(directory: Path, episodes: int, seed: int = 0, platform_options: Optional[dict] = None) -> dict:
    """Success rate of the weights in ``directory`` through wamcore's own evaluation loop."""
    from wamcore import Registry
    from wamcore.execution import evaluate, summarize
    from wamcore.runtime import WorkerConfig, open_model

    from . import plugin

    registry = Registry(entry_points=False)
    registry.register(plugin, name="pointmass")
    platform = registry.platform("pointmass")
    config = WorkerConfig.from_options(platform="pointmass", am_backend="pointmass-wam", am_checkpoint=str(directory))
    model = open_model(config, platform, registry=registry)
    try:
        planned = platform.plan_episodes(platform_options or {}, episodes, seed)
        rows = [r.to_json() for r in evaluate(model, lambda o: platform.create(**o), planned)]
    finally:
        model.close()
    return summarize(rows)


CONFIGS = {"reach": TrainConfig, "pit": PitTrainConfig, "reach-rtc": PrefixTrainConfig}
#: the platform's task family a model family is evaluated on
PLATFORM_FAMILY = {"reach-rtc": "reach"}


def main(argv: Optional[list] = None) -> int:
    family_arg = argparse.ArgumentParser(add_help=False)
    family_arg.add_argument("--family", choices=sorted(CONFIGS), default="reach",
                            help="the task family to train for (its own defaults below)")
    family = family_arg.parse_known_args(argv)[0].family
    config_class = CONFIGS[family]
    p = argparse.ArgumentParser(prog="python -m wam_pointmass.train", description=__doc__.split("\n\n")[0],
                                parents=[family_arg])
    p.add_argument("--out", type=Path, default=Path("pointmass-wam-weights"), help="output directory")
    for field in attrs.fields(config_class):
        p.add_argument("--" + field.name.replace("_", "-"), type=type(field.default),
                       default=field.default, help=f"default {field.default}")
    p.add_argument("--eval-episodes", type=int, default=100, help="episodes to evaluate the result on (0: none)")
    args = p.parse_args(argv)
    cfg = config_class(**{f.name: getattr(args, f.name) for f in attrs.fields(config_class)})

    def log(message: str) -> None:
        print(message, flush=True)

    import torch
    from wamcore.checkpoints import write_pins

    from .model import save_weights

    t0 = time.perf_counter()
    net = train(cfg, log=log)
    args.out.mkdir(parents=True, exist_ok=True)
    weights = args.out / WEIGHTS_NAME
    about = attrs.asdict(cfg)
    if isinstance(cfg, PitTrainConfig):
        about.update(family=family, value=cfg.value)
    elif isinstance(cfg, PrefixTrainConfig):
        about.update(family=family)
    save_weights(net, weights, {**about, "torch": torch.__version__})
    pins = write_pins(args.out / PINS_NAME, {WEIGHTS_NAME: weights}, source="python -m wam_pointmass.train")
    log(f"wrote {weights} ({weights.stat().st_size / 1e6:.2f} MB, sha256 {pins.files[WEIGHTS_NAME]}) "
        f"after {time.perf_counter() - t0:.0f} s")
    if args.eval_episodes > 0:
        summary = evaluate_weights(args.out, args.eval_episodes, platform_options={"family": PLATFORM_FAMILY.get(family, family)})
        log(f"evaluation on seeds 0..{args.eval_episodes - 1}: success rate {summary['success_rate']:.3f} "
            f"(95% CI {summary['ci95']}), mean steps {summary['mean_steps']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
