"""``wam eval``: many episodes, per-episode records, a summary."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Dict

import click

from ..errors import ConfigurationError
from ..specs import PlatformSpec
from .common import PairedCommand, _episode_options, _open, _resolve, cli, deployment_options

@cli.command(name="eval", cls=PairedCommand, params=_episode_options() + deployment_options() + [
    click.Option(["--episodes"], type=int, default=10, show_default=True, help="Number of episodes."),
    click.Option(["--out"], type=click.Path(file_okay=False), default=None,
                 help="Output directory (default: runs/eval-PLATFORM-BACKEND)."),
    click.Option(["--resume"], is_flag=True, help="Continue an interrupted run in --out, skipping finished episodes."),
    click.Option(["--overwrite"], is_flag=True, help="Start over in an existing --out."),
])
@click.pass_context
def eval_(ctx, **kwargs):
    """Evaluate a model over many episodes: progress, per-episode JSON lines, a summary.

    Writes OUT/episodes.jsonl (one line per episode, appended as they finish) and
    OUT/summary.json (success rate with a 95% Wilson interval, mean steps).
    """
    from ..execution import evaluate, summarize

    seed, instruction, max_chunks = kwargs.pop("seed"), kwargs.pop("instruction"), kwargs.pop("max_chunks")
    as_json, count = kwargs.pop("as_json"), kwargs.pop("episodes")
    out_opt, resume, overwrite = kwargs.pop("out"), kwargs.pop("resume"), kwargs.pop("overwrite")
    first = {}

    def preflight(p: PlatformSpec, options) -> Any:
        first["episodes"] = p.plan_episodes(options, count, seed)
        return _EnvFactory(p, first["episodes"][0].env_options) if first["episodes"] else None

    reg, platform, platform_opts, config, request, make_env = _resolve(ctx, kwargs, preflight=preflight)
    backend = config.backend or "endpoint"
    out = Path(out_opt or f"runs/eval-{platform.name}-{backend}")
    episodes = first["episodes"]
    run_config = {
        "platform": platform.name,
        "backend": backend,
        "platform_options": {k: v for k, v in platform.with_defaults(platform_opts).items()},
        "request_options": request,
        "instruction": instruction,
        "max_chunks": max_chunks,
        "episodes": [e.key for e in episodes],
    }
    try:
        done = _prepare_out(out, run_config, resume=resume, overwrite=overwrite)
        model = _open(reg, platform, platform_opts, config)
    except BaseException:
        if make_env is not None:
            make_env.close()
        raise
    todo = [e for e in episodes if e.key not in done]
    results = list(done.values())
    t0 = time.perf_counter()
    try:
        with open(out / "episodes.jsonl", "a") as lines, click.progressbar(
            length=len(episodes), label=f"{backend} on {platform.name}", file=sys.stderr,
            show_pos=True, item_show_func=lambda r: None if r is None else f"{sum(x['success'] for x in results)}/{len(results)} ok",
        ) as bar:
            bar.update(len(done))
            stream = evaluate(
                model, make_env, todo, platform=platform.name,
                instruction=instruction, max_chunks=max_chunks, options=request,
            )
            for result in stream:
                row = result.to_json()
                results.append(row)
                lines.write(json.dumps(row) + "\n")
                lines.flush()
                bar.update(1, row)
    finally:
        model.close()
        if make_env is not None:
            make_env.close()
    summary = summarize(results)
    summary.update(platform=platform.name, model=backend, wall_s=round(time.perf_counter() - t0, 2), out=str(out))
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    if as_json:
        click.echo(json.dumps(summary))
        return
    lo, hi = summary["ci95"]
    click.echo(
        f"{backend} on {platform.name}: {summary['successes']}/{summary['episodes']} successes "
        f"(rate {summary['success_rate']:.3f}, 95% CI [{lo:.3f}, {hi:.3f}]), mean steps {summary['mean_steps']:.1f}"
    )
    click.echo(f"results: {out / 'episodes.jsonl'}, summary: {out / 'summary.json'}")


class _EnvFactory:
    """``make_env`` for ``evaluate``: the env built before the model started (so a missing
    simulator is reported first) serves the first episodes; others are built as needed."""

    def __init__(self, platform: PlatformSpec, options: dict):
        self.platform, self.options = platform, options
        self.env = platform.create(**options)

    def __call__(self, options: dict):
        if self.env is not None:
            env, self.env = self.env, None
            if options == self.options:
                return env
            env.close()
        return self.platform.create(**options)

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None


def _prepare_out(out: Path, run_config: dict, *, resume: bool, overwrite: bool) -> Dict[str, dict]:
    """Create ``out``; on resume, return finished episodes by key (config must match)."""
    cfg_path, lines_path = out / "config.json", out / "episodes.jsonl"
    if out.exists() and lines_path.exists() and not overwrite:
        if not resume:
            raise ConfigurationError(f"{out} already holds results: pass --resume to continue them or --overwrite to start over")
        previous = json.loads(cfg_path.read_text()) if cfg_path.exists() else None
        if previous != json.loads(json.dumps(run_config)):
            raise ConfigurationError(f"{out} holds a run with other settings; use another --out or --overwrite")
        done = {}
        for line in lines_path.read_text().splitlines():
            if line.strip():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue  # a line cut by the interruption
                done[row["key"]] = row
        lines_path.write_text("".join(json.dumps(r) + "\n" for r in done.values()))
        return done
    out.mkdir(parents=True, exist_ok=True)
    if overwrite and lines_path.exists():
        lines_path.unlink()
    cfg_path.write_text(json.dumps(run_config, indent=2) + "\n")
    return {}


