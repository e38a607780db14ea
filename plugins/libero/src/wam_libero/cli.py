"""``wam libero-suites``: the suites the installed LIBERO benchmark provides, with task counts."""

from __future__ import annotations

import contextlib
import json
import sys

import click


@click.command("libero-suites")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per suite, in a list.")
def suites_command(as_json):
    """List the LIBERO and LIBERO-Pro suites of the installed benchmark: kind, tasks, step budget."""
    from .suites import MAX_STEPS, resolve_suite
    from .upstream import import_simulator

    sim = import_simulator()
    rows = []
    with contextlib.redirect_stdout(sys.stderr):  # LIBERO prints as it builds each suite
        table = sim.benchmark.get_benchmark_dict()
        for name in sorted(table):
            suite = resolve_suite(name)
            budget = MAX_STEPS.get(suite.base) if suite.base else None
            try:
                tasks = int(table[name]().get_num_tasks())
            except Exception as exc:  # a suite the benchmark lists but cannot build
                tasks = f"unavailable: {type(exc).__name__}"
            rows.append({"suite": name, "kind": suite.kind, "tasks": tasks, "max_steps": budget})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    width = max(len(r["suite"]) for r in rows)
    click.echo(f"{'suite'.ljust(width)}  {'kind':8}  {'tasks':>5}  max steps")
    for r in rows:
        click.echo(f"{r['suite'].ljust(width)}  {r['kind']:8}  {str(r['tasks']):>5}  {r['max_steps'] or '-'}")
    click.echo(f"{len(rows)} suites; `wam eval --platform libero --suite NAME[,NAME...] --task all` runs them "
               "(a suite without a step budget needs --max-steps)")
