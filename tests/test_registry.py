"""Plugin discovery through real entry points (dist-info directories on sys.path)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from wamcore.errors import DuplicateIdError, PluginLoadError, UnknownModelError, UnknownPlatformError
from wamcore.registry import Registry

GOOD = '''
from wamcore import hookimpl
import wam_docs_line_plugin_copy as line

@hookimpl
def wam_register_platforms(register):
    register(line.PlatformSpec(name="line", aliases=["line_world"], observation=line.LINE_OBSERVATION,
                               control=line.LINE_CONTROL, make_env=line.LineEnv))

@hookimpl
def wam_register_models(register):
    register(line.ModelSpec(name="line-p", aliases=["line_p", "linep"], load=lambda c: line.ProportionalModel(),
                            adapters=[line.LINE_ADAPTER]))
'''


def make_site(root: Path, example: str) -> Path:
    """A site directory with installed-looking distributions: good, broken, and first-party-named broken."""
    site = root / "site"
    site.mkdir()
    (site / "wam_docs_line_plugin_copy.py").write_text(example)
    (site / "good_plugin.py").write_text(GOOD)
    (site / "broken_plugin.py").write_text("import not_a_real_module_xyz\n")
    (site / "hook_raises.py").write_text(textwrap.dedent('''
        from wamcore import hookimpl
        @hookimpl
        def wam_register_models(register):
            raise RuntimeError("bad registration")
    '''))
    for dist, version, ep, module in [
        ("wam-good", "1.2.0", "good", "good_plugin"),
        ("wam-broken", "0.3.0", "broken", "broken_plugin"),
        ("wam-cosmos3", "0.9.0", "cosmos3", "broken_plugin"),
        ("wam-hook-raises", "0.1.0", "raises", "hook_raises"),
    ]:
        info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        (info / "entry_points.txt").write_text(f"[wamcore]\n{ep} = {module}\n")
    return site


@pytest.fixture
def site(tmp_path, monkeypatch, docs_example):
    path = make_site(tmp_path, docs_example("line-plugin"))
    monkeypatch.syspath_prepend(str(path))
    monkeypatch.setenv("WAMCORE_LOAD_PLUGINS", "wam-good,wam-broken,wam-cosmos3,wam-hook-raises")
    return path


def test_broken_plugins_are_recorded_and_others_work(site):
    reg = Registry()
    records = {r.name: r for r in reg.plugins()}
    assert set(records) == {"good", "broken", "cosmos3", "raises"}
    assert records["good"].ok and records["good"].models == ["line-p"] and records["good"].version == "1.2.0"
    assert records["broken"].error == "ModuleNotFoundError: No module named 'not_a_real_module_xyz'"
    assert "bad registration" in records["raises"].error
    assert reg.platform("line").name == "line"


def test_aliases_and_normalised_ids(site):
    reg = Registry()
    assert reg.model("LINE_P").name == reg.model("linep").name == reg.model("line-p").name == "line-p"
    assert reg.platform("line-world").name == "line"


def test_a_failed_plugins_id_raises_its_import_error(site):
    reg = Registry()
    with pytest.raises(PluginLoadError, match="plugin 'broken'.*wam-broken 0.3.0.*not_a_real_module_xyz"):
        reg.model("broken")
    with pytest.raises(PluginLoadError, match="plugin 'cosmos3'.*failed to load"):
        reg.model("cosmos3")


def test_unknown_id_suggests_close_names(site):
    with pytest.raises(UnknownModelError) as info:
        Registry().model("line-q")
    message = str(info.value)
    assert "Did you mean: 'line-p'?" in message
    assert "plugin 'broken' failed to load" in message


def test_unknown_first_party_id_names_the_pip_command(site):
    with pytest.raises(UnknownModelError) as info:
        Registry().model("cosmos-policy")
    assert 'pip install "wam-cosmos-policy"' in str(info.value)
    with pytest.raises(UnknownPlatformError, match=r'pip install "wam-libero\[sim\]"'):
        Registry().platform("libero")


def test_load_none(site, monkeypatch):
    monkeypatch.setenv("WAMCORE_LOAD_PLUGINS", "")
    assert Registry().plugins() == []


def test_load_by_entry_point_name(site, monkeypatch):
    monkeypatch.setenv("WAMCORE_LOAD_PLUGINS", "good")
    assert [r.name for r in Registry().plugins()] == ["good"]


def test_plugin_modules_env(site, monkeypatch):
    monkeypatch.setenv("WAMCORE_LOAD_PLUGINS", "")
    monkeypatch.setenv("WAMCORE_PLUGIN_MODULES", "good_plugin, broken_plugin")
    reg = Registry()
    assert {r.name: r.ok for r in reg.plugins()} == {"good_plugin": True, "broken_plugin": False}
    assert reg.model("line-p")


def test_duplicates_are_refused_and_recorded(line_plugin):
    reg = Registry(entry_points=False)
    reg.register(line_plugin, name="first")

    class Again:
        wam_register_platforms = staticmethod(line_plugin.wam_register_platforms)

    record = reg.register(Again(), name="second")
    assert record.platforms == [] and "already registered by plugin 'first'" in record.problems[0]
    assert DuplicateIdError.__name__  # the typed error behind the record


def test_unregister_removes_everything(line_registry):
    line_registry.unregister("line")
    with pytest.raises(UnknownPlatformError):
        line_registry.platform("line")


def test_registering_the_wrong_type_is_a_plugin_error():
    from wamcore import hookimpl

    class Wrong:
        @hookimpl
        def wam_register_models(self, register):
            register("not a spec")

    reg = Registry(entry_points=False)
    record = reg.register(Wrong(), name="wrong")
    assert "takes a ModelSpec, got str" in record.error


def test_plugins_json_cli_shows_errors_and_still_works(site):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *sys.path])}
    out = subprocess.run([sys.executable, "-m", "wamcore", "plugins", "--json"], env=env, capture_output=True, text=True)
    assert out.returncode == 1  # a plugin failed to load: the listing says so, and so does the exit status
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert rows["good"]["kind"] == ["model", "platform"] and rows["good"]["version"] == "1.2.0"
    assert rows["good"]["distribution"] == "wam-good" and rows["good"]["error"] is None
    assert "not_a_real_module_xyz" in rows["broken"]["error"]
    assert "Traceback (most recent call last)" in rows["broken"]["traceback"]  # where `wam doctor` sends people
    assert rows["good"]["traceback"] is None
    run = subprocess.run([sys.executable, "-m", "wamcore", "run", "--platform", "line", "--am-backend", "line-p", "--json"],
                         env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["success"] is True
