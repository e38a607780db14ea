"""``wam upstream``: the upstream model code each model plugin runs, at its pinned git commit.
``ls`` lists the pins, ``fetch`` gets the checkouts, ``install`` gets and installs them into
the model's environment."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Optional

import click

from ..upstream import commands, fetch_commands
from .common import _registry, cli


@cli.group(name="upstream")
def upstream_group():
    """Upstream model code the plugins run, pinned by git commit (docs/weights.md)."""


@upstream_group.command(name="ls")
@click.pass_context
def ls(ctx):
    """Each model's upstream repositories and pinned commits."""
    for name, spec in sorted(_registry(ctx).models().items()):
        for source in spec.upstream:
            click.echo(f"{name:12} {source.name:10} {source.repository}@{source.commit}" + (f"  ({source.note})" if source.note else ""))


def _run(ctx, model: str, dry: bool, build) -> None:
    spec = _registry(ctx).model(model)
    if not spec.upstream:
        raise click.UsageError(f"{spec.name} pins no upstream code")
    for source in spec.upstream:
        click.echo(f"# {source.label}: {source.repository}@{source.commit}" + (f" ({source.note})" if source.note else ""))
        for command in build(source):
            click.echo(command)
            if not dry and subprocess.run(command, shell=True).returncode:
                raise click.ClickException(f"{source.label}: this command failed: {command}")


_ARCHIVES = click.option("--archives", type=click.Path(file_okay=False, exists=True, path_type=Path), default=None,
                         help="A folder of `git archive` files of the pinned commits, used instead of git (offline "
                              "machines, CI).")
_PRINT = click.option("--print", "dry", is_flag=True, help="Print the commands, run nothing.")


@upstream_group.command()
@click.argument("model")
@click.option("--into", type=click.Path(file_okay=False, path_type=Path), required=True, help="Where the checkouts go.")
@_ARCHIVES
@_PRINT
@click.pass_context
def fetch(ctx, model, into, archives, dry):
    """Put MODEL's upstream code at its pinned commit into --into (git, or --archives); nothing is installed."""
    _run(ctx, model, dry, lambda source: fetch_commands(source, into, archives))


@upstream_group.command()
@click.argument("model")
@click.option("--python", "python", default=sys.executable, show_default="the python running wam",
              help="The model environment's python (pip installs there).")
@click.option("--into", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the checkouts go [default: src/ in that python's environment].")
@_ARCHIVES
@_PRINT
@click.pass_context
def install(ctx, model, python, into: Optional[Path], archives, dry):
    """Install MODEL's upstream code at its pinned commit (git, or --archives), editable, for --python."""
    into = into or Path(python).absolute().parent.parent / "src"  # the venv's, not the interpreter's
    _run(ctx, model, dry, lambda source: commands(source, python, into, archives))


__all__ = ["upstream_group"]
