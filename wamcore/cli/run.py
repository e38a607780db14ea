"""``wam run``: one episode."""

from __future__ import annotations

import json
from typing import Any, List

import click

from .common import PairedCommand, _episode_options, _open, _resolve, cli, deployment_options

@cli.command(cls=PairedCommand, params=_episode_options() + deployment_options() + [
    click.Option(["--video"], type=click.Path(dir_okay=False), default=None,
                 help="Write the episode as .gif or .mp4: the camera beside the predicted future frame."),
])
@click.pass_context
def run(ctx, **kwargs):
    """Run one episode of a model on a platform.

    With no options: PointMass with its reference WAM, in this process.
    Choose --platform and --am-backend first; --help then lists their options.
    """
    seed, instruction, max_chunks = kwargs.pop("seed"), kwargs.pop("instruction"), kwargs.pop("max_chunks")
    as_json, video = kwargs.pop("as_json"), kwargs.pop("video")
    reg, platform, platform_opts, config, request, env = _resolve(
        ctx, kwargs, preflight=lambda p, options: p.create(**options)
    )
    from ..execution import run_episode

    frames: List[Any] = []
    try:
        model = _open(reg, platform, platform_opts, config)
    except BaseException:
        env.close()
        raise
    try:
        try:
            recorder = _VideoRecorder(env, frames) if video else None
            result = run_episode(
                model, env, key=f"seed={seed}", reset={"seed": seed}, instruction=instruction,
                max_chunks=max_chunks, seed=seed, options=request, platform=platform.name,
                on_step=recorder.on_step if recorder else None,
                on_reset=recorder.on_reset if recorder else None,
            )
        finally:
            env.close()
    finally:
        model.close()
    if video:
        from ..video import write_video

        write_video(video, frames)
    record = result.to_json()
    record.update(seed=seed, mode=config.mode, device=model.info.device)
    if "worker" in model.info.details:  # where a worker ran the model (pid, CUDA_VISIBLE_DEVICES)
        record["worker"] = model.info.details["worker"]
    if video:
        record["video"] = video
    if as_json:
        click.echo(json.dumps(record))
        return
    verdict = "success" if result.success else "no success"
    click.echo(
        f"{result.model} on {platform.name} (seed {seed}, {config.mode}): {verdict} after {result.steps} steps "
        f"in {result.chunks} chunk(s), stop: {result.stop_reason}, {result.wall_s:.2f} s"
    )
    click.echo(f"instruction: {result.instruction}")
    if result.error:
        click.echo(f"error: {result.error}")
    if video:
        click.echo(f"video: {video}")


class _VideoRecorder:
    """Collects [camera | predicted future] frames while an episode runs."""

    def __init__(self, env, frames: list):
        self.env, self.frames = env, frames

    def _role(self, obs) -> str:
        return next(iter(obs.images))

    def on_reset(self, obs) -> None:
        from ..video import side_by_side

        self.frames.append(side_by_side(obs.images[self._role(obs)], None))

    def on_step(self, step, action, result, prediction) -> None:
        from ..video import side_by_side

        obs = self.env.observe()
        role = self._role(obs)
        future = (prediction.future_observations or {}).get(role)
        self.frames.append(side_by_side(obs.images[role], future))


