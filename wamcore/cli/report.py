"""``wam report``: a self-contained HTML page of an evaluation run."""

from __future__ import annotations

import click

from .common import cli


@cli.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Where to write it (default: RUN_DIR/report.html).")
def report(run_dir, out):
    """Write RUN_DIR/report.html for a `wam eval` output folder: what produced the results,
    the per-task table, plots and the filmed episodes, all in one file (pip install "wamcore[report]")."""
    from ..report.html import write_report

    click.echo(f"report: {write_report(run_dir, out)}")
