"""Real-time execution composed with the rest of ``wam eval``: Ray (a real local cluster, as
``test_evaluation_ray``), ``--best-of`` (its extra predictions count in the latency)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers_workers import worker_python  # noqa: E402
from test_evaluation import records, wam  # noqa: E402
from test_evaluation_ray import RAY, tag, wamcore_processes  # noqa: E402,F401,F811  (tag: the fixture that clears Ray's processes)
from test_realtime import CHUNK, pm, pointmass_env, without_timing  # noqa: E402


def _same(record: dict) -> dict:
    """What must not depend on where an episode ran: outcome, and when each chunk was
    requested with its latency, waits and skips (not the values' last bits: the worker runs
    its own torch build, and batches the two envs' requests)."""
    realtime = record["realtime"]
    kept = {k: v for k, v in without_timing(record).items() if k != "values"}
    return {**kept, "chunks_at": realtime["chunks"], "skipped": realtime["skipped"]}


def test_ray_runs_a_realtime_evaluation_as_the_local_executor_does(tmp_path, tag):
    base = ["eval", "--episodes", 4, "--weights", "reach-rtc", "--realtime", "--execution", "rtc", "--latency-ms", 300]
    local = pm(*base, "--out", tmp_path / "local")
    distributed = wam(*base, *RAY, "--num-envs", 2, "--am-python", worker_python(), "--json",
                      "--am-log-dir", tmp_path / "w", "--out", tmp_path / "ray", env=pointmass_env(), timeout=300)
    assert local.returncode == 0, local.stderr
    assert distributed.returncode == 0, distributed.stderr
    summary = json.loads(distributed.stdout)
    assert summary["executor"] == "ray" and summary["realtime"]["execution"] == "rtc"
    a, b = records(tmp_path / "local"), records(tmp_path / "ray")
    assert {k: _same(r) for k, r in a.items()} == {k: _same(r) for k, r in b.items()}
    assert all(r["realtime"]["skipped"] > 0 and r["success"] for r in b.values())
    assert not wamcore_processes(tag, also=("ray::IDLE",))


def test_best_of_pays_an_injected_latency_for_every_prediction_it_makes(tmp_path):
    """best-of-3 with the value scorer: 3 sampled chunks and 3 conditioned predictions per
    decision, so a 100 ms latency per prediction makes each chunk wait 600 ms (6 steps)."""
    base = ["eval", "--episodes", 2, "--weights", "pit", "--family", "pit", "--realtime", "--execution", "hold",
            "--latency-ms", 100]
    plain = pm(*base, "--out", tmp_path / "plain")
    best = pm(*base, "--best-of", 3, "--out", tmp_path / "best")
    assert plain.returncode == 0 and best.returncode == 0, plain.stderr + best.stderr
    for one in records(tmp_path / "plain").values():
        assert {(c["latency_ms"], c["latency_steps"]) for c in one["realtime"]["chunks"]} == {(100.0, 1)}
    for three in records(tmp_path / "best").values():
        assert {(c["latency_ms"], c["latency_steps"], c["waited"]) for c in three["realtime"]["chunks"]} == {(600.0, 6, 6)}
        assert [p["predictions"] for p in three["plans"]] == [6] * three["chunks"]
        steps = [c["step"] for c in three["realtime"]["chunks"]]
        assert steps == [(6 + CHUNK) * i for i in range(len(steps))]  # each wait costs the world 6 steps
