"""The documented plugin example runs and conforms; documented commands exist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from wamcore.execution import run_episode
from wamcore.runtime import WorkerConfig, open_model
from wamcore.testing import check_model_adapter, check_platform

ROOT = Path(__file__).resolve().parents[1]


def test_the_plugin_example_runs_an_episode(line_registry):
    platform = line_registry.platform("line")
    model = open_model(WorkerConfig.from_options(platform="line", am_backend="line-p"), platform, registry=line_registry)
    result = run_episode(model, platform.create(), reset={"seed": 0})
    assert result.success and 0 < result.steps < 40


def test_the_plugin_example_conforms(line_registry, line_plugin):
    platform = line_registry.platform("line")
    assert check_platform(platform)["snapshot"] == "bit-identical"
    report = check_model_adapter(line_registry.model("line-p"), platform, native=line_plugin.ProportionalModel())
    assert report["rejected"] == ["missing state", "NaN state", "wrong state length", "empty instruction"]


def test_docs_link_to_existing_files():
    for doc in (ROOT / "docs").rglob("*.md"):
        for target in re.findall(r"\]\(([^)#:]+\.md)\)", doc.read_text()):
            assert (doc.parent / target).exists(), f"{doc.name} links to missing {target}"


def test_the_evaluation_example_runs(docs_example, capsys):
    exec(compile(docs_example("research-eval", doc="docs/evaluation.md"), "docs/evaluation.md", "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 100 and sum(line.endswith("True") for line in lines) >= 95


def test_the_conformance_kit_example_runs_under_pytest(docs_example, tmp_path):
    """The packaged plugin (wam_line/plugin.py = the line-plugin example) and its conformance
    test module, run by pytest as a plugin author would: the fixtures come from wamcore's
    pytest11 entry point."""
    package = tmp_path / "wam_line"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "plugin.py").write_text(docs_example("line-plugin"))
    (tmp_path / "test_conformance.py").write_text(docs_example("conformance-kit"))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_conformance.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 passed" in result.stdout


def test_the_backend_options_example_runs(docs_example, capsys):
    exec(compile(docs_example("backend-options", doc="docs/workers.md"), "docs/workers.md", "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["{'device': 'cpu', 'threads': 1, 'weights_sha256': None, 'weights': 'reach'}", "cpu True"]


def test_every_option_type_is_documented():
    from wamcore.specs import OPTION_TYPES

    text = (ROOT / "docs/plugins.md").read_text()
    table = text[text.index("### Options"):text.index("## Platform plugins in detail")]
    assert set(re.findall(r'^\| `"(\w+)"` \|', table, re.M)) == set(OPTION_TYPES)


def test_the_pointmass_colours_are_documented_as_they_are():
    from wam_pointmass.spec import COLOURS

    rows = re.findall(r"^\| `(\w+)` \| \((\d+), (\d+), (\d+)\) \|$", (ROOT / "docs/platforms/pointmass.md").read_text(), re.M)
    assert [(name, tuple(map(int, rgb))) for name, *rgb in rows] == list(COLOURS.items())


def test_prediction_error_is_exported():
    import wamcore
    from wamcore.errors import PredictionError

    assert wamcore.PredictionError is PredictionError and "PredictionError" in wamcore.__all__


#: the reference notes, seeds and upstream archives beside the checkout are not shipped
_PRIVATE = re.compile(
    r"shared/|\b(rpent_rlinf_wam|wam_models|sim_feasibility|sglang_cosmos3|robotwin_starwam_lingbot"
    r"|real_upstream_on_gpu|rpc_perf|style_anchors)(\.md)?\b"
)


_UPSTREAM_SECTION = re.compile(r"[\w.-]+\.(?:md|rst)`*\s*§")


def test_no_doc_or_docstring_points_into_shared():
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *ROOT.glob("plugins/*/README.md"),
             *(ROOT / "wamcore").rglob("*.py"), *ROOT.glob("plugins/*/src/**/*.py"),
             *(ROOT / "bench").rglob("*.py")]
    hits = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        # a section sign must follow the upstream document it numbers (``LIBERO.md`` §8)
        if _PRIVATE.search(line) or line.count("§") > len(_UPSTREAM_SECTION.findall(line))
    ]
    assert not hits, "cite the upstream source (repository and path) instead:\n" + "\n".join(hits)


def test_the_cli_reference_is_current():
    # a fresh interpreter: commands other tests registered on the shared click group must not count
    done = subprocess.run([sys.executable, str(ROOT / "docs" / "cli_reference.py"), "--check"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, "docs/cli.md is stale: run python docs/cli_reference.py\n" + done.stdout + done.stderr


def _doc_commands(doc: str) -> dict:
    """``{name: [command, ...]}`` of the bash blocks marked ``<!-- commands: NAME -->``."""
    text = (ROOT / doc).read_text()
    blocks = re.findall(r"<!-- commands: ([\w-]+) -->\s*```bash\n(.*?)```", text, re.S)
    return {name: [line for line in body.splitlines() if line.strip() and not line.startswith("#")]
            for name, body in blocks}


def _run_doc_command(line: str, cwd: Path) -> subprocess.CompletedProcess:
    import shlex

    words = shlex.split(line)
    env = dict(os.environ)
    while "=" in words[0]:
        key, value = words.pop(0).split("=", 1)
        if key == "PYTHONPATH":  # relative to the folder the page works in, before this checkout's own path
            value = os.pathsep.join([str((cwd / value).resolve()), env.get("PYTHONPATH", "")])
        env[key] = value
    assert words[0] == "wam", line
    return subprocess.run([sys.executable, "-m", "wamcore", *words[1:]], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def test_the_quickstart_runs_as_written(docs_example, tmp_path):
    import json

    blocks = _doc_commands("docs/quickstart.md")
    assert list(blocks) == ["first-run", "first-eval", "first-report", "first-plugin"]
    (tmp_path / "wam_line").mkdir()
    (tmp_path / "wam_line" / "__init__.py").write_text("")
    (tmp_path / "wam_line" / "plugin.py").write_text(docs_example("line-plugin"))
    outputs = {}
    for name, commands in blocks.items():
        for line in commands:
            done = _run_doc_command(line, tmp_path)
            assert done.returncode == 0, f"{line}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
            outputs[line] = done.stdout
    assert (tmp_path / "ep.gif").stat().st_size > 1000
    first = [json.loads(r) for r in (tmp_path / "runs/first/episodes.jsonl").read_text().splitlines()]
    again = [json.loads(r) for r in (tmp_path / "runs/again/episodes.jsonl").read_text().splitlines()]
    assert len(first) == 20 and [dict(r, wall_s=0) for r in first] == [dict(r, wall_s=0) for r in again]
    assert len(list((tmp_path / "runs/first/videos").glob("*.mp4"))) == 2
    assert "reproduce: wam eval --platform pointmass" in outputs["wam report runs/first"]
    assert (tmp_path / "runs/first/report.html").exists()
    assert any("platform line" in out for out in outputs.values())  # the plugin, listed by `wam plugins`
    assert len((tmp_path / "runs/line/episodes.jsonl").read_text().splitlines()) == 5


def _user_docs() -> list:
    return [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *ROOT.glob("plugins/*/README.md")]


def test_user_docs_cite_no_issue_numbers():
    hits = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in _user_docs()
            for n, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"\bissues?\b", line, re.I)]
    assert not hits, "user docs say what and why, not which issue:\n" + "\n".join(hits)


def test_test_files_named_in_docs_exist():
    missing = []
    for doc in _user_docs():
        base = doc.parent if doc.parent.parent.name == "plugins" else ROOT  # a plugin's README: its own folder
        for path in re.findall(r"`((?:plugins/\w+/)?tests/[\w/.-]+?)(?:::[\w.\[\]-]+)?`", doc.read_text()):
            if not (base / path).exists():
                missing.append(f"{doc.relative_to(ROOT)}: {path}")
    assert not missing, "\n".join(missing)
