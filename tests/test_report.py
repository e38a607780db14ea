"""Evaluation output people read: per-task tables, CSV, videos, and report.html in a real browser."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers_browser import not_blank, render  # noqa: E402

from wamcore.report.tables import format_table, group_summaries, records_csv  # noqa: E402


def _record(suite, task, init, success, steps, stop="native_success"):
    return {"key": f"{suite}/task={task}/init={init}", "success": success, "steps": steps, "chunks": 1,
            "stop_reason": stop if success else "budget_exhausted", "labels": {"suite": suite, "task": task, "init": init, "seed": 0}}


def test_per_suite_and_per_task_blocks_table_and_csv():
    records = [_record("a", t, i, (t + i) % 2 == 0, 10 + i) for t in (0, 1, 10) for i in range(4)]
    records += [_record("b", 0, i, True, 5) for i in range(3)]
    groups = group_summaries(records)
    assert list(groups["per_suite"]) == ["a", "b"]
    assert list(groups["per_task"]) == ["a/0", "a/1", "a/10", "b/0"]  # task 10 after task 1: numbers compare as numbers
    a0 = groups["per_task"]["a/0"]
    assert (a0["episodes"], a0["successes"], a0["success_rate"]) == (4, 2, 0.5)
    assert a0["ci95"] == [0.15, 0.85] and a0["stop_reasons"] == {"native_success": 2, "budget_exhausted": 2}
    table = format_table({**groups, "episodes": 15, "successes": 9, "success_rate": 0.6, "ci95": [0.357, 0.802],
                          "mean_steps": 10.2, "stop_reasons": {}})
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["task", "episodes", "successes"] and lines[-1].startswith("all")
    assert any(line.startswith("a/10 ") for line in lines) and any(line.startswith("suite b") for line in lines)
    rows = list(csv.DictReader(io.StringIO(records_csv(records))))
    assert list(rows[0])[:5] == ["key", "suite", "task", "init", "seed"]
    assert (rows[0]["suite"], rows[0]["task"], rows[0]["init"], rows[0]["success"]) == ("a", "0", "0", "True")


def test_eval_writes_csv_videos_and_a_report_a_browser_renders(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "wamcore", "eval", "--episodes", "6", "--num-envs", "2", "--max-steps", "14",
         "--video", "2", "--report", "--out", str(out), "--json"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    filmed = [r for r in rows if r.get("video")]
    assert len(filmed) == 2 and all((out / r["video"]).stat().st_size > 1000 for r in filmed)
    assert next(csv.DictReader((out / "results.csv").open()))["seed"] in {str(i) for i in range(6)}
    dom, shot = render(out / "report.html", tmp_path)
    assert "<table id=\"per-task\"" in dom and dom.count("<svg") >= 2 and dom.count("<video") == 2
    assert "sha256:" in dom and "wam-pointmass" in dom  # what produced it: checkpoint identity, plugin versions
    assert not_blank(shot)
    # the plots really are drawn: the page has coloured (bar and line) pixels, not only text
    colourful = (np.ptp(shot.astype(int), axis=2) > 60).mean()
    assert colourful > 0.005


def test_wam_report_rewrites_the_page_of_an_earlier_run(tmp_path):
    out = tmp_path / "run"
    first = subprocess.run([sys.executable, "-m", "wamcore", "eval", "--episodes", "3", "--out", str(out)],
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "pointmass-wam on pointmass: 3/3 successes" in first.stdout
    again = subprocess.run([sys.executable, "-m", "wamcore", "report", str(out)], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    page = (out / "report.html").read_text()
    assert "3/3 successes, rate 1.000" in page and "<table id='per-task'>" in page
    bad = subprocess.run([sys.executable, "-m", "wamcore", "report", str(tmp_path)], capture_output=True, text=True)
    assert bad.returncode == 2 and "not a `wam eval` output folder" in bad.stderr
