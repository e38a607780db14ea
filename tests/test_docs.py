"""The documented plugin example runs and conforms; documented commands exist."""

from __future__ import annotations

import re
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
