"""``wam run``: one episode."""

from __future__ import annotations

import json

import click

from .common import (DEVICE_STORY, PairedCommand, _episode_options, _open, _resolve, cache_option, checked_env,
                     check_writable_dir, check_writable_file, cli, deployment_options, realtime_options,
                     realtime_points, with_cache)


@cli.command(cls=PairedCommand, epilog=DEVICE_STORY, params=_episode_options() + deployment_options() + [
    click.Option(["--video"], type=click.Path(dir_okay=False), default=None,
                 help="Write the episode as .mp4 or .gif: the camera beside the predicted future frame, instruction and outcome on the frames."),
    cache_option(),
    *realtime_options(),
])
@click.pass_context
def run(ctx, **kwargs):
    """Run one episode of a model on a platform.

    With no options: PointMass with its reference WAM, in this process.
    Choose --platform and --am-backend first; --help then lists their options.
    """
    seed, instruction, max_chunks = kwargs.pop("seed"), kwargs.pop("instruction"), kwargs.pop("max_chunks")
    as_json, video, cache = kwargs.pop("as_json"), kwargs.pop("video"), kwargs.pop("cache")
    [realtime] = realtime_points(kwargs, sweep=False)
    check_writable_file(video, "--video", suffixes=(".mp4", ".gif"))  # not after the episode ran
    check_writable_dir(cache, "--cache")
    check_writable_dir(kwargs.get("am_log_dir"), "--am-log-dir")
    reg, platform, platform_opts, config, request, env = _resolve(
        ctx, kwargs, preflight=lambda p, options: checked_env(realtime, p, options),
        executions=[realtime.execution] if realtime else (),
    )
    from ..execution import run_episode
    from ..realtime import strategy_for

    model = None
    try:
        recorder = None
        if video:
            from ..video import EpisodeRecorder

            recorder = EpisodeRecorder(env, video)  # a missing video library is reported before the model loads
        model = with_cache(_open(reg, platform, platform_opts, config), cache)
        execution = strategy_for(realtime, platform, env.control, model.info.capabilities, env) if realtime else None
    except BaseException:
        env.close()
        if model is not None:  # the strategy refused the model
            model.close()
        raise
    try:
        try:
            result = run_episode(
                model, env, key=f"seed={seed}", reset={"seed": seed}, instruction=instruction,
                max_chunks=max_chunks, seed=seed, options=request, platform=platform.name,
                on_step=recorder.on_step if recorder else None,
                on_reset=recorder.on_reset if recorder else None, execution=execution,
            )
            if recorder is not None:
                recorder.finish(result.success, result.steps)
        finally:
            env.close()
    finally:
        model.close()
        if recorder is not None:
            recorder.close()  # after an error: what was recorded so far
    record = result.to_json()
    from ..artifacts import model_identity

    record.update(seed=seed, mode=config.mode, device=model.info.device,
                  model_identity=model_identity(model.info, model.contract))
    if cache:
        record["cache"] = model.stats()
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

