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
import pytest

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


# ----------------------------------------------------------------------------- hostile or broken run folders


def wam(*args, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "wamcore", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def _run_folder(root: Path, records, config=None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(config if config is not None else
                                                 {"platform": "pointmass", "backend": "x", "episodes": []}))
    (root / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return root


def test_the_report_embeds_only_regular_files_inside_the_runs_videos(tmp_path):
    import base64
    import os

    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"SECRET-" * 40)
    run = tmp_path / "run"
    (run / "videos").mkdir(parents=True)
    (run / "videos" / "ok.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"V" * 200)
    (run / "videos" / "link.mp4").symlink_to(secret)
    os.mkfifo(run / "videos" / "pipe.mp4")
    (run / "inside.mp4").write_bytes(b"OUTSIDE-VIDEOS" * 20)  # in the run, not in videos/
    videos = {"ok": "videos/ok.mp4", "absolute": str(secret), "dotdot": "../secret.txt",
              "climb": "videos/../../secret.txt", "link": "videos/link.mp4", "fifo": "videos/pipe.mp4",
              "notvideos": "inside.mp4"}
    _run_folder(run, [{**_record("a", i, 0, True, 5), "key": key, "video": path} for i, (key, path) in enumerate(videos.items())])
    done = wam("report", run, timeout=60)  # a FIFO must not hang it
    assert done.returncode == 0, done.stderr
    page = (run / "report.html").read_text()
    assert page.count("<video") == 1 and base64.b64encode((run / "videos" / "ok.mp4").read_bytes()).decode() in page
    for data in (secret.read_bytes(), (run / "inside.mp4").read_bytes()):
        assert base64.b64encode(data[:60]).decode()[:40] not in page
    warned = [line for line in done.stderr.splitlines() if "not embedding the video" in line]
    assert len(warned) == 6, done.stderr
    assert "a symbolic link" in done.stderr and "a FIFO" in done.stderr and "Traceback" not in done.stderr
    # a videos folder that is itself a link is not read at all
    os.rename(run / "videos", tmp_path / "elsewhere")
    (run / "videos").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    again = wam("report", run, timeout=60)
    assert again.returncode == 0 and "<video" not in (run / "report.html").read_text()
    assert "not embedding any video" in again.stderr


GOOD = {**_record("a", 0, 0, True, 5), "wall_s": 1.0, "instruction": "go", "values": [0.1, 0.5]}
MALFORMED = {
    "config not JSON": ("config.json", "{platform"),
    "config a list": ("config.json", "[1, 2]"),
    "config episodes a number": ("config.json", json.dumps({"platform": "p", "episodes": 7})),
    "config options a string": ("config.json", json.dumps({"platform": "p", "platform_options": "x"})),
    "record not JSON": ("episodes.jsonl", "{oops\n" + json.dumps(GOOD) + "\n"),
    "record a list": ("episodes.jsonl", "[1]\n"),
    "record without a key": ("episodes.jsonl", json.dumps({k: v for k, v in GOOD.items() if k != "key"}) + "\n"),
    "record steps as text": ("episodes.jsonl", json.dumps({**GOOD, "steps": "5"}) + "\n"),
    "record success as text": ("episodes.jsonl", json.dumps({**GOOD, "success": "yes"}) + "\n"),
    "record labels a list": ("episodes.jsonl", json.dumps({**GOOD, "labels": [1]}) + "\n"),
    "record values of text": ("episodes.jsonl", json.dumps({**GOOD, "values": ["a"]}) + "\n"),
    "record video a number": ("episodes.jsonl", json.dumps({**GOOD, "video": 3}) + "\n"),
    "summary not JSON": ("summary.json", "{"),
    "summary model_info a list": ("summary.json", json.dumps({"model_info": [1]})),
    "summary capabilities a string": ("summary.json", json.dumps({"model_info": {"capabilities": "all"}})),
    "summary versions a string": ("summary.json", json.dumps({"versions": "1.0"})),
    "summary worker a list": ("summary.json", json.dumps({"model_info": {"details": {"worker": [1]}}})),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_run_folder_gives_one_typed_line(tmp_path, case):
    name, text = MALFORMED[case]
    run = _run_folder(tmp_path / "run", [GOOD])
    (run / name).write_text(text)
    done = wam("report", run, timeout=60)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("Error: ") and str(run / name) in lines[0]
    assert any(word in lines[0] for word in ("remove", "restore")), lines[0]  # and how to recover
    assert not (run / "report.html").exists()


def test_the_report_drops_a_cut_last_line_with_a_warning(tmp_path):
    run = _run_folder(tmp_path / "run", [GOOD])
    with (run / "episodes.jsonl").open("a") as f:
        f.write(json.dumps({**GOOD, "key": "b"})[:30])  # killed in the middle of an append
    done = wam("report", run, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "dropped its last line" in done.stderr and "1/1 successes" in (run / "report.html").read_text()


def test_csv_cells_a_spreadsheet_would_evaluate_are_neutralised():
    from wamcore.report.tables import csv_cell

    evil = {"=HYPERLINK(\"http://x\")": "'=HYPERLINK(\"http://x\")", "+1+cmd|' /C calc'!A0": "'+1+cmd|' /C calc'!A0",
            "-2+3": "'-2+3", "@SUM(A1)": "'@SUM(A1)", "\tx": "'\tx", "\r=1": "'\r=1", "-inf": "'-inf"}
    for text, safe in evil.items():
        assert csv_cell(text) == safe
    for number in (-3, -0.25, 7, "-3", "-0.25", "+4", "-1e-3", "12"):
        assert csv_cell(number) == number  # a number, even a negative one, stays a number
    rows = [{**_record("=a", 0, 0, True, 5), "key": "=cmd", "instruction": "@go", "error": "-x", "wall_s": -1.5,
             "labels": {"suite": "=a", "task": -1, "init": "+2", "seed": 0}}]
    parsed = list(csv.DictReader(io.StringIO(records_csv(rows))))[0]
    assert (parsed["key"], parsed["suite"], parsed["instruction"], parsed["error"]) == ("'=cmd", "'=a", "'@go", "'-x")
    assert (parsed["task"], parsed["init"], parsed["wall_s"]) == ("-1", "+2", "-1.5")


def test_the_terminal_table_shows_control_sequences_instead_of_running_them():
    records = [_record("s\x1b[2J", 0, 0, True, 5), _record("s", "t\x1b]0;owned\x07\r", 0, False, 9)]
    summary = {**group_summaries(records), "episodes": 2, "successes": 1, "success_rate": 0.5, "ci95": [0.1, 0.9],
               "mean_steps": 7.0, "stop_reasons": {"x\x9bq": 1}}
    table = format_table(summary)
    assert not any(c in table for c in "\x1b\x07\r\x9b")
    assert "s\\x1b[2J/0" in table and "t\\x1b]0;owned\\x07\\x0d" in table and "x\\x9bq 1" in table


def test_an_error_echoing_a_path_shows_its_control_sequences(tmp_path):
    odd = tmp_path / "run\x1b[2J\x1b]0;owned\x07"
    odd.mkdir()
    done = wam("report", odd, timeout=60)
    assert done.returncode == 2 and "not a `wam eval` output folder" in done.stderr
    assert "\x1b" not in done.stderr and "\x07" not in done.stderr and "\\x1b[2J" in done.stderr
