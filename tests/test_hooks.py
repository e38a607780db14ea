"""Every hook is documented (exact signature heading) and has a test_hook_<name> test."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from wamcore import hookimpl, hookspecs
from wamcore.registry import Registry

ROOT = Path(__file__).resolve().parents[1]
HOOKS = [name for name, fn in vars(hookspecs).items() if name.startswith("wam_") and callable(fn)]


@pytest.mark.parametrize("name", HOOKS)
def test_every_hook_is_documented_with_its_signature(name):
    args = ", ".join(inspect.signature(getattr(hookspecs, name)).parameters)
    assert f"## {name}({args})" in (ROOT / "docs" / "hooks.md").read_text()
    assert getattr(hookspecs, name).__doc__.strip()


@pytest.mark.parametrize("name", HOOKS)
def test_every_hook_has_a_test(name):
    names = set()
    for path in [*(ROOT / "tests").glob("test_*.py"), *(ROOT / "plugins").glob("*/tests/test_*.py")]:
        names |= set(re.findall(r"^def (test_hook_\w+)", path.read_text(), re.M))
    assert f"test_hook_{name}" in names


def test_hook_wam_register_platforms(line_plugin):
    reg = Registry(entry_points=False)
    record = reg.register(line_plugin, name="line")
    assert record.platforms == ["line"] and "wam_register_platforms" in record.hooks
    assert reg.platform("line").control.action_space == "line.velocity.v1"


def test_hook_wam_register_models(line_plugin):
    reg = Registry(entry_points=False)
    record = reg.register(line_plugin, name="line")
    assert record.models == ["line-p"] and "wam_register_models" in record.hooks
    assert reg.model("line-p").platforms == ("line",)
    assert reg.models_for("line") == ["line-p", "random"]  # random: the core's baseline of every platform


def test_hook_wam_register_commands():
    from wamcore.cli import cli

    class Plugin:
        @hookimpl
        def wam_register_commands(self, cli):
            @cli.command(name="hello-plugin")
            def hello():
                """Say hello."""
                click.echo("hello from a plugin")

    class Broken:
        @hookimpl
        def wam_register_commands(self, cli):
            raise RuntimeError("no commands today")

    reg = Registry(entry_points=False)
    reg.register(Plugin(), name="hello")
    reg.register(Broken(), name="broken")
    try:
        reg.add_commands(cli)
        result = CliRunner().invoke(cli, ["hello-plugin"], obj=reg)
        assert result.exit_code == 0 and result.output == "hello from a plugin\n"
        assert "no commands today" in {r.name: r for r in reg.plugins()}["broken"].problems[0]
    finally:
        cli.commands.pop("hello-plugin", None)


def test_an_implementation_may_take_fewer_arguments():
    """pluggy's opt-in arguments: an impl that ignores `register` still loads."""

    class Quiet:
        @hookimpl
        def wam_register_models(self):
            return None

    record = Registry(entry_points=False).register(Quiet(), name="quiet")
    assert record.ok and record.models == []


def test_a_misspelled_hook_is_reported():
    class Typo:
        @hookimpl
        def wam_register_model(self, register):  # singular: not a hook
            pass

    record = Registry(entry_points=False).register(Typo(), name="typo")
    assert record.problems == ["wam_register_model is not a wamcore hook; did you mean wam_register_models?"]
