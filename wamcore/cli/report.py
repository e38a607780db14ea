"""``wam report``: a self-contained HTML page of an evaluation run."""

from __future__ import annotations

import json
from pathlib import Path

import click

from .common import cli


@cli.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Where to write it (default: RUN_DIR/report.html).")
@click.option("--all-videos", is_flag=True,
              help="Embed every filmed episode (default: the first 24, at most 64 MB; the page says how many it shows).")
def report(run_dir, out, all_videos):
    """Write RUN_DIR/report.html for a `wam eval` output folder: what produced the results and
    the command that reproduces them, the per-task table, plots, every episode in a sortable
    table, links to the raw files and the filmed episodes, all in one file
    (pip install "wamcore[report]")."""
    from ..report.html import reproduce_command, write_report

    path = write_report(run_dir, out, all_videos=all_videos)
    config_path = Path(run_dir) / "config.json"
    command = reproduce_command(Path(run_dir), json.loads(config_path.read_text())) if config_path.exists() else None
    if command:
        click.echo(f"reproduce: {command}  (or: wam eval --from {run_dir})")
    click.echo(f"report: {path}")
