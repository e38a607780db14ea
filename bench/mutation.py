"""Mutation testing of the core's logic with cosmic-ray: which one-line changes do the tests miss?

Each module below is mutated one operator occurrence at a time (cosmic-ray's operators:
comparison, boolean, arithmetic and number replacements, removed decorators, break/continue
swaps, ...), and the tests that guard it run against every mutant. A mutant the tests fail on
is *killed*; one they pass is a *survivor*: either a behaviour no test pins down, or an
equivalent change (the code means the same). The report gives the killed share per module and
lists every survivor (file:line, operator) so that each can be judged.

It never touches your checkout: it works in a detached git worktree of HEAD (committed code
only) under --workdir, with that worktree's code first on PYTHONPATH (the venvs' editable
installs point at the checkout).

    python3 -m venv /tmp/mut && /tmp/mut/bin/pip install cosmic-ray==8.7.0
    /tmp/mut/bin/python bench/mutation.py                         # every module (hours on 2 cores)
    /tmp/mut/bin/python bench/mutation.py --module validation --sample 60 --seed 0
    /tmp/mut/bin/python bench/mutation.py --list

Not part of CI (too slow); docs/testing.md has the figures and the survivors' verdicts.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: module -> (file to mutate, the tests that guard it)
MODULES = {
    "contracts": ("wamcore/contracts.py", ["tests/test_contracts.py", "tests/test_wire.py"]),
    "pairing": ("wamcore/pairing.py", ["tests/test_pairing.py"]),
    "validation": ("wamcore/validation.py", ["tests/test_validation.py"]),
    "execution": ("wamcore/execution.py", ["tests/test_execution.py"]),
    "scheduling": ("wamcore/evaluation/scheduling.py", ["tests/test_evaluation.py"]),
    "planning": ("wamcore/planning.py", ["tests/test_planning.py"]),
    "sessions": ("wamcore/rpc/server.py", ["tests/test_rpc_protocol.py", "tests/test_rpc_batching.py"]),
}


def worktree(workdir: Path) -> Path:
    tree = workdir / "tree"
    if not tree.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), "HEAD"], check=True,
                       capture_output=True)
        for venv in ROOT.glob(".venv*"):  # the tests find the model/client venvs beside the checkout
            (tree / venv.name).symlink_to(venv)
    return tree


def environment(tree: Path) -> dict:
    paths = [str(tree), *(str(p) for p in sorted((tree / "plugins").glob("*/src")))]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["HYPOTHESIS_PROFILE"] = "wamcore"
    return env


def sample(session: Path, keep: int, seed: int) -> int:
    """Keep ``keep`` mutants drawn with ``seed`` (a seeded share of a long module), drop the rest."""
    db = sqlite3.connect(session)
    ids = [row[0] for row in db.execute("SELECT job_id FROM work_items ORDER BY job_id")]
    drop = set(ids) - set(random.Random(seed).sample(ids, min(keep, len(ids))))
    db.executemany("DELETE FROM mutation_specs WHERE job_id = ?", [(i,) for i in drop])
    db.executemany("DELETE FROM work_items WHERE job_id = ?", [(i,) for i in drop])
    db.commit()
    db.close()
    return len(ids)


def run_module(name: str, tree: Path, workdir: Path, python: str, keep: int, seed: int, timeout: float) -> dict:
    path, tests = MODULES[name]
    config = workdir / f"{name}.toml"
    session = workdir / f"{name}.sqlite"
    command = f"{python} -m pytest -x -q -p no:cacheprovider {' '.join(tests)}"
    config.write_text(
        "[cosmic-ray]\n"
        f'module-path = "{path}"\n'
        f"timeout = {timeout}\n"
        "excluded-modules = []\n"
        f'test-command = "{command}"\n\n'
        "[cosmic-ray.distributor]\n"
        'name = "local"\n'
    )
    session.unlink(missing_ok=True)
    env = environment(tree)
    cosmic = [sys.executable, "-m", "cosmic_ray.cli"]
    subprocess.run([*cosmic, "init", str(config), str(session)], cwd=tree, env=env, check=True)
    total = sample(session, keep, seed) if keep else None
    t0 = time.monotonic()
    subprocess.run([*cosmic, "exec", str(config), str(session)], cwd=tree, env=env, check=True)
    dump = subprocess.run([*cosmic, "dump", str(session)], cwd=tree, env=env, check=True, capture_output=True, text=True)
    killed, survivors, incompetent = 0, [], 0
    for line in dump.stdout.splitlines():
        item, result = json.loads(line)
        outcome = (result or {}).get("test_outcome")
        if outcome == "killed":
            killed += 1
        elif outcome == "incompetent":
            incompetent += 1
        elif outcome == "survived":
            spec = item["mutations"][0]
            survivors.append({"line": spec["start_pos"][0], "operator": spec["operator_name"],
                              "occurrence": spec["occurrence"]})
    judged = killed + len(survivors)
    return {
        "module": name, "file": path, "tests": tests, "mutants_in_module": total, "run": judged + incompetent,
        "killed": killed, "survived": len(survivors), "incompetent": incompetent,
        "killed_share": round(killed / judged, 3) if judged else None, "wall_s": round(time.monotonic() - t0, 1),
        "survivors": sorted(survivors, key=lambda s: s["line"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--module", action="append", choices=sorted(MODULES), help="Mutate this module (repeatable; default: all).")
    ap.add_argument("--sample", type=int, default=0, help="Run this many mutants per module, drawn with --seed (0: all).")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=300.0, help="Seconds one test run may take (a hang counts as killed).")
    ap.add_argument("--python", default=str(ROOT / ".venv" / "bin" / "python"), help="The Python that runs the tests.")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "wamcore-mutation")
    ap.add_argument("--out", type=Path, help="Write the report as JSON here too.")
    ap.add_argument("--list", action="store_true", help="List the modules and their tests, and exit.")
    a = ap.parse_args()
    if a.list:
        for name, (path, tests) in MODULES.items():
            print(f"{name:<11} {path:<36} {' '.join(tests)}")
        return
    a.workdir.mkdir(parents=True, exist_ok=True)
    tree = worktree(a.workdir)
    report = []
    for name in a.module or list(MODULES):
        result = run_module(name, tree, a.workdir, a.python, a.sample, a.seed, a.timeout)
        report.append(result)
        print(f"{name}: {result['killed']}/{result['killed'] + result['survived']} killed "
              f"({result['killed_share']}), {result['incompetent']} incompetent, {result['wall_s']} s", flush=True)
        for s in result["survivors"]:
            print(f"  survived: {result['file']}:{s['line']} {s['operator']} #{s['occurrence']}")
    if a.out:
        a.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
