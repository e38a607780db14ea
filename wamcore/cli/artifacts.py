"""``wam artifacts ls|show|gc``: the typed predictions a cache holds (``wamcore.artifacts``)."""

from __future__ import annotations

import json

import click

from ..terminal import printable
from .common import cli

DEFAULT_DIR = "runs/artifacts"


def _dir_argument():
    return click.argument("directory", type=click.Path(file_okay=False), default=DEFAULT_DIR, required=False)


@cli.group()
def artifacts():
    """Inspect and clean a cache of typed predictions (wam probe, wam run/eval --cache)."""


@artifacts.command(name="ls")
@_dir_argument()
@click.option("--json", "as_json", is_flag=True, help="One JSON object per artifact (its sidecar).")
def ls(directory, as_json):
    """List the artifacts in DIRECTORY (default runs/artifacts), oldest first."""
    from ..artifacts import ArtifactStore

    rows = sorted(ArtifactStore(directory).metadata(), key=lambda m: m.get("created", ""))
    broken = sum("broken" in m for m in rows)
    for m in rows:
        if as_json:
            click.echo(json.dumps(m))
            continue
        if "broken" in m:  # reported, and the rest still listed
            click.echo(printable(f"{m['key'][:16]}  {m['broken']}"), err=True)
            continue
        ident, req = m.get("identity", {}), m.get("request", {})
        kind = "candidate" if req.get("candidate_actions") else "chunk"
        click.echo(printable(f"{m['key'][:16]}  {m.get('created', '?')}  {ident.get('backend')}  "
                             f"{str(ident.get('checkpoint'))[:24]}  {kind:<9}  seed={req.get('seed')}  {m.get('bytes', 0)} B"))
    if not as_json:
        unreadable = f", {broken} unreadable (`wam artifacts gc` removes those it can)" if broken else ""
        click.echo(printable(f"{len(rows) - broken} artifact(s) in {directory}{unreadable}"), err=True)


@artifacts.command()
@_dir_argument()
@click.argument("key")
def show(directory, key):
    """Verify one artifact (KEY or a unique prefix) and print its metadata and contents."""
    from ..artifacts import ArtifactStore
    from ..contracts import Prediction

    store = ArtifactStore(directory)
    artifact = store.load(store.resolve(key))
    prediction = Prediction.from_wire(artifact["prediction"])
    contents = {"actions": list(prediction.actions.shape)}
    for name in ("future_observations", "world_features"):
        extra = getattr(prediction, name)
        if extra:
            contents[name] = {k: list(v.shape) for k, v in extra.items()}
    if prediction.values is not None:
        contents["values"] = prediction.values.tolist()
    click.echo(json.dumps({"key": artifact["key"], "verified": True, "meta": artifact["meta"], "prediction": contents},
                          indent=1))


@artifacts.command()
@_dir_argument()
@click.option("--older-than-days", type=click.FloatRange(min=0), default=None,
              help="Also remove valid artifacts last written more than this many days ago.")
@click.option("--dry-run", is_flag=True, help="Say what would be removed, remove nothing.")
def gc(directory, older_than_days, dry_run):
    """Remove artifacts that cannot be used (modified, incomplete, interrupted writes)."""
    from ..artifacts import ArtifactStore

    removed, left = ArtifactStore(directory).gc(
        older_than_s=None if older_than_days is None else older_than_days * 86400, dry_run=dry_run)
    for path, reason in removed:
        click.echo(printable(f"{'would remove' if dry_run else 'removed'} {path}: {reason}"))
    for path, reason in left:
        click.echo(printable(f"left alone {path}: {reason}"), err=True)
    click.echo(printable(f"{len(removed)} file(s) {'to remove' if dry_run else 'removed'} in {directory}"), err=True)
