"""``wam upstream install MODEL``: the model's upstream code at its pinned commit, into the model's
environment; ``wam upstream ls``: what each model plugin pins."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

from ..upstream import commands
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


@upstream_group.command()
@click.argument("model")
@click.option("--python", "python", default=sys.executable, show_default=True,
              help="The model environment's python (pip installs there).")
@click.option("--into", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the checkouts go [default: src/ beside that python's environment].")
@click.option("--archives", type=click.Path(file_okay=False, exists=True, path_type=Path), default=None,
              help="A folder of `git archive` files of the pinned commits, used instead of git (offline machines, CI).")
@click.option("--print", "dry", is_flag=True, help="Print the commands, run nothing.")
@click.pass_context
def install(ctx, model, python, into, archives, dry):
    """Install MODEL's upstream code at its pinned commit (git, or --archives), editable, for --python."""
    spec = _registry(ctx).model(model)
    if not spec.upstream:
        raise click.UsageError(f"{spec.name} pins no upstream code")
    into = into or Path(python).absolute().parent.parent / "src"  # the venv's, not the interpreter's
    for source in spec.upstream:
        click.echo(f"# {source.label}: {source.repository}@{source.commit}" + (f" ({source.note})" if source.note else ""))
        for command in commands(source, python, into, archives):
            click.echo(command)
            if not dry:
                done = subprocess.run(command, shell=True)
                if done.returncode:
                    origin = str(archives / source.archive) if archives else f"{source.repository}@{source.commit} (git)"
                    raise click.ClickException(f"{source.label} did not install from {origin}: exit {done.returncode}")

__all__ = ["upstream_group"]
