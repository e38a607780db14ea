"""``wam compare``: real evaluation runs paired by episode key, the statistics, the table,
the CSV and the page in a real browser."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers_browser import not_blank, render  # noqa: E402

from wamcore.errors import ConfigurationError  # noqa: E402
from wamcore.report.compare import compare_runs, mcnemar_exact, paired_bootstrap  # noqa: E402


def wam(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "wamcore", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def fake_run(path: Path, outcomes: dict, platform="libero") -> Path:
    """A run folder as `wam eval` writes it, from {(suite, task, init): success}."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"platform": platform, "backend": path.name}))
    rows = [{"key": f"{s}/task={t}/init={i}", "success": ok, "steps": 10, "stop_reason": "x",
             "labels": {"suite": s, "task": t, "init": i}} for (s, t, i), ok in outcomes.items()]
    (path / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_mcnemar_is_the_exact_binomial_test_of_the_discordant_pairs():
    assert mcnemar_exact(0, 5) == pytest.approx(2 / 32)  # 5 of 5 discordant one way
    assert mcnemar_exact(1, 4) == pytest.approx(2 * 6 / 32)  # P(X <= 1) = 6/32, doubled
    assert mcnemar_exact(3, 3) == 1.0 and mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(0, 19) == pytest.approx(2 / 2 ** 19)


def test_paired_bootstrap_is_seeded_and_covers_the_difference():
    rng = np.random.default_rng(7)
    a, b = rng.random(200) < 0.3, rng.random(200) < 0.6
    first = paired_bootstrap(a, b, np.random.default_rng(0), 4000)
    assert first == paired_bootstrap(a, b, np.random.default_rng(0), 4000)
    assert first != paired_bootstrap(a, b, np.random.default_rng(1), 4000)
    assert first[0] < b.mean() - a.mean() < first[1] and 0 < first[0]
    # pairing: the same outcomes give a zero-width interval, however variable they are
    assert paired_bootstrap(a, a, np.random.default_rng(0), 1000) == (0.0, 0.0)


def test_per_task_blocks_on_the_shared_episodes_only(tmp_path):
    base = {("s", t, i): i < 2 for t in (0, 1) for i in range(4)}
    other = {("s", 0, i): True for i in range(4)} | {("s", 1, i): i < 1 for i in range(3)} | {("s", 2, 0): True}
    result = compare_runs([fake_run(tmp_path / "base", base), fake_run(tmp_path / "other", other)], resamples=500)
    c = result["comparisons"][0]
    assert c["paired"] == 7 and c["unpaired"] == {"baseline": 1, "run": 1}
    assert list(c["per_task"]) == ["s/0", "s/1"]
    t0, t1 = c["per_task"]["s/0"], c["per_task"]["s/1"]
    assert (t0["pairs"], t0["baseline_successes"], t0["run_successes"], t0["difference"]) == (4, 2, 4, 0.5)
    assert (t0["only_baseline"], t0["only_run"]) == (0, 2)
    assert (t1["pairs"], t1["difference"], t1["only_baseline"], t1["only_run"]) == (3, pytest.approx(-1 / 3), 1, 0)
    assert c["overall"]["pairs"] == 7 and c["overall"]["difference"] == pytest.approx((5 - 4) / 7)
    assert result["method"]["test"].startswith("exact McNemar")


def test_runs_of_another_platform_or_too_few_are_refused(tmp_path):
    a = fake_run(tmp_path / "a", {("s", 0, 0): True})
    b = fake_run(tmp_path / "b", {("s", 0, 0): True}, platform="robotwin")
    with pytest.raises(ConfigurationError, match="compare runs of one platform"):
        compare_runs([a, b])
    with pytest.raises(ConfigurationError, match="at least two runs"):
        compare_runs([a])
    with pytest.raises(ConfigurationError, match="not a `wam eval` output folder"):
        compare_runs([a, tmp_path])


def test_compare_two_real_runs_table_csv_and_a_page_a_browser_renders(tmp_path):
    runs = {}
    for name, args in {"random": ["--am-backend", "random"], "wam": [], "late": ["--am-backend", "random",
                                                                                 "--seed", "100"]}.items():
        runs[name] = tmp_path / name
        done = wam("eval", "--episodes", 3 if name == "late" else 12, *args, "--out", runs[name])
        assert done.returncode == 0, done.stderr
    out = tmp_path / "cmp"
    done = wam("compare", runs["random"], runs["wam"], "--out", out)
    assert done.returncode == 0, done.stderr
    assert "pointmass-wam (wam) vs random (random): 12 paired episodes (unpaired: 0 baseline, 0 run)" in done.stdout
    assert "paired bootstrap, 95% percentile, 10000 resamples" in done.stdout
    row = next(csv.DictReader((out / "comparison.csv").open()))
    rates = {k: sum(json.loads(line)["success"] for line in (runs[k] / "episodes.jsonl").open()) for k in ("random", "wam")}
    assert row["task"] == "all" and row["pairs"] == "12"
    assert float(row["difference"]) == pytest.approx((rates["wam"] - rates["random"]) / 12)
    assert float(row["ci95_low"]) <= float(row["difference"]) <= float(row["ci95_high"])
    assert float(row["difference"]) > 0.5 and float(row["mcnemar_p"]) < 0.01  # the reference WAM does beat chance
    again = wam("compare", runs["random"], runs["wam"], "--out", tmp_path / "cmp2", "--json")
    assert json.loads(again.stdout) == json.loads((out / "comparison.json").read_text())  # seeded: the same figures

    refused = wam("compare", runs["random"], runs["late"], "--out", tmp_path / "none")
    assert refused.returncode == 2 and "share no episode key" in refused.stderr
    assert not (tmp_path / "none").exists()

    dom, shot = render(out / "comparison.html", tmp_path)
    assert "<table id=\"comparison-0\"" in dom and dom.count("<svg") == 1
    assert "12 paired episodes" in dom and "exact McNemar" in dom and "sha256:" in dom  # the WAM's checkpoint identity
    assert not_blank(shot) and (np.ptp(shot.astype(int), axis=2) > 60).mean() > 0.002  # the bars are drawn
