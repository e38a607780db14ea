"""Evaluation output people read: per-task tables, CSV, videos, and report.html in a real browser."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers_browser import FLAGS, chromium, not_blank, render  # noqa: E402

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
    # how to get it again, where it ran, how fast
    assert "wam eval --platform pointmass --am-backend pointmass-wam --episodes 6 --num-envs 2 --video 2 --report " \
           "--max-steps 14" in dom
    assert re.search(r"<dt>host</dt><dd>[^<]+CPUs", dom) and "<dt>GPUs</dt>" in dom
    assert re.search(r"<dt>git revisions</dt><dd>\{[^<]*\"wamcore\": \"[0-9a-f]{12}", dom)
    assert re.search(r"<dt>throughput</dt><dd>\d+ episodes/hour \(6 episodes in", dom)
    # the raw files, every episode with a link to its video, videos with posters
    for name in ("results.csv", "episodes.jsonl", "summary.json", "config.json"):
        assert f'<a href="{name}">{name}</a>' in dom
    table = dom[dom.index('<table id="episodes"'):]
    table = table[:table.index("</table>")]
    assert table.count("<tr>") == 7  # a header and six episodes
    for r in filmed:
        anchor = "video-" + re.sub(r"[^A-Za-z0-9_-]", "_", r["key"])
        assert f'href="#{anchor}"' in table and f'href="{r["video"]}"' in table and f'id="{anchor}"' in dom
    assert dom.count("poster=\"data:image/png;base64,") == 2 and "2 of 2 filmed shown" in dom


def _column(dom: str, name: str) -> list:
    """The cells of column ``name`` of the episode table, top to bottom, as the browser has them."""
    table = dom[dom.index('<table id="episodes"'):]
    table = table[:table.index("</table>")]
    heads = re.findall(r"<th data-col=\"([^\"]+)\"", table)
    rows = re.findall(r"<tr>(.*?)</tr>", table[table.index("<tbody>"):], re.S)
    return [re.sub(r"<[^>]+>", "", re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)[heads.index(name)]) for row in rows]


def test_the_episode_table_sorts_in_the_browser_and_videos_say_how_many_are_shown(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "wamcore", "eval", "--episodes", "5", "--max-steps", "14", "--video", "all",
         "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    shown = subprocess.run([sys.executable, "-m", "wamcore", "report", str(out), "--max-videos", "2"],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("reproduce: wam eval --platform pointmass --am-backend pointmass-wam --episodes 5")
    page = out / "report.html"
    plain = subprocess.run([chromium(), *FLAGS, f"--user-data-dir={tmp_path / 'p'}", "--dump-dom", page.as_uri()],
                           capture_output=True, text=True, timeout=120).stdout
    assert "2 of 5 filmed shown" in plain and "--all-videos" in plain and plain.count("<video") == 2
    steps = [int(v) for v in _column(plain, "steps")]
    assert sorted(steps, reverse=True) != steps  # else sorting would prove nothing
    by_steps = subprocess.run([chromium(), *FLAGS, f"--user-data-dir={tmp_path / 'p'}", "--dump-dom",
                               page.as_uri() + "#sort=-steps"], capture_output=True, text=True, timeout=120).stdout
    assert [int(v) for v in _column(by_steps, "steps")] == sorted(steps, reverse=True)
    assert 'data-col="steps" aria-sort="descending"' in by_steps
    every = subprocess.run([sys.executable, "-m", "wamcore", "report", str(out), "--all-videos"],
                           capture_output=True, text=True, timeout=120)
    assert every.returncode == 0 and "5 of 5 filmed shown" in page.read_text()


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


def test_video_captions_are_drawn_in_a_truetype_font():
    from PIL import ImageFont

    from wamcore.video import _font, captioned

    font = _font()
    assert isinstance(font, ImageFont.FreeTypeFont) and font.path.endswith("DejaVuSans.ttf")  # matplotlib's
    frame = captioned(np.zeros((64, 200, 3), np.uint8), "go to the blue target and stay there for a while", "step 3")
    banner = frame[:34, :, 0]
    assert len(np.unique(banner)) > 20  # anti-aliased outlines; PIL's bitmap font draws two levels only
    # a long instruction is cut with an ellipsis inside the frame, not run off its edge
    assert banner[:, -4:].max() == 0
