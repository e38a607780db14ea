"""Serving protocols as plugins: ``wam_register_serving_protocols`` and ``wam serve --protocol``.

A test plugin (``wamtest_serving``) registers a toy protocol, JSON lines over TCP, and a real
``wam serve --protocol toy`` worker serves the scripted model with it; its options, its check
before the model loads, unknown protocols and registrations the registry refuses.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))  # helpers beside the tests

import wamtest_scripted  # noqa: E402
import wamtest_serving  # noqa: E402
from helpers_workers import PLUGIN_MODULE, no_leaks, served, worker_env  # noqa: E402,F401

from wamcore import ModelConfig, ModelService, Option, PredictRequest, Requirement, hookimpl  # noqa: E402
from wamcore.cli import cli  # noqa: E402
from wamcore.errors import DependencyNotInstalled, UnknownServingProtocolError  # noqa: E402
from wamcore.registry import Registry  # noqa: E402
from wamcore.serving import WAMCORE, ServingProtocol  # noqa: E402

TOY_ENV = {"WAMCORE_PLUGIN_MODULES": f"{PLUGIN_MODULE},wamtest_serving"}


@pytest.fixture
def registry():
    reg = Registry(entry_points=False)
    reg.register(wamtest_scripted, name="wamtest_scripted")
    reg.register(wamtest_serving, name="wamtest_serving")
    return reg


def invoke(registry, *args):
    return CliRunner().invoke(cli, ["serve", *args], obj=registry)


def ask(port: int, seed: int) -> dict:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(json.dumps({"seed": seed}).encode() + b"\n")
        return json.loads(conn.makefile().readline())


@pytest.mark.usefixtures("no_leaks")
def test_hook_wam_register_serving_protocols(registry, tmp_path):
    record = registry.plugins()[-1]
    assert record.serving_protocols == ["toy"] and "wam_register_serving_protocols" in record.hooks
    assert sorted(registry.serving_protocols()) == ["toy", "wamcore"]  # the core's own, registered the same way
    assert registry.owner("serving_protocol", "toy").name == "wamtest_serving"
    local = ModelService(registry.model("scripted-wam"), ModelConfig(platform="toy"))
    with served(tmp_path, "--protocol", "toy", "--greeting", "hi there", "--max-sessions", "3",
                env=worker_env(**TOY_ENV)) as worker:
        assert worker.ready["protocol"] == "toy" and worker.ready["max_sessions"] == 3  # wam serve's own options
        for seed in range(3):
            answer = ask(worker.port, seed)
            expected = local.predict(PredictRequest(wamtest_scripted.ToyEnv().reset(seed=seed))).actions
            assert answer["greeting"] == "hi there" and answer["actions"] == expected.tolist()
        worker.proc.send_signal(signal.SIGTERM)
        assert worker.proc.wait(20) == 0 and not worker.ready_file.exists()
    local.close()


def test_a_protocols_check_refuses_the_model_before_it_loads():
    # --fail-load would fail the load: the check's error shows the model was never loaded
    args = ["-m", "wamcore", "serve", "--protocol", "toy", "--am-backend", "scripted-wam", "--platform", "toy"]
    result = subprocess.run([sys.executable, *args, "--max-chunk", "2", "--fail-load"], env=worker_env(**TOY_ENV),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "protocol toy carries at most 2 actions per answer (--max-chunk); this model's chunk is 4" in result.stderr
    assert "scripted load failure" not in result.stderr


def test_each_protocol_has_its_own_options(registry):
    shown = invoke(registry, "--protocol", "toy", "--am-backend", "scripted-wam", "--platform", "toy", "--help")
    assert shown.exit_code == 0
    assert "Serving protocol options (toy):" in shown.output and "--greeting" in shown.output
    assert "--session-ttl" not in shown.output  # the wamcore protocol's, hidden
    plain = invoke(registry, "--am-backend", "scripted-wam", "--platform", "toy", "--help")
    assert "Serving protocol options (wamcore):" in plain.output and "--greeting" not in plain.output
    for protocol, flag, owner in (("wamcore", ["--greeting", "hi"], "toy"), ("toy", ["--session-ttl", "5"], "wamcore")):
        refused = invoke(registry, "--protocol", protocol, *flag, "--am-backend", "scripted-wam", "--platform", "toy")
        assert refused.exit_code == 2
        assert f"{flag[0]} is an option of --protocol {owner}, not of the chosen --protocol {protocol}" in refused.output


def test_protocol_list_shows_each_with_its_provider(registry):
    listed = invoke(registry, "--protocol", "list")
    assert listed.exit_code == 0
    lines = listed.output.splitlines()
    assert lines[0].split()[:2] == ["toy", "wamtest_serving"] and "JSON lines over TCP" in lines[0]
    assert lines[1].split()[:4] == ["wamcore", "wamcore", "(built", "in)"]


def test_an_unknown_protocol_says_what_is_close_and_what_to_install(registry):
    close = invoke(registry, "--protocol", "tyo", "--am-backend", "scripted-wam", "--platform", "toy", "--greeting", "x")
    assert close.exit_code == 2
    assert "Unknown serving protocol 'tyo'." in close.output and "Did you mean: 'toy'?" in close.output
    assert "Installed: toy, wamcore" in close.output and "no such option" not in close.output
    openpi = invoke(registry, "--protocol", "openpi", "--am-backend", "scripted-wam", "--platform", "toy")
    assert openpi.exit_code == 2
    assert 'It is provided by a plugin that is not installed: pip install "wam-openpi"' in openpi.output
    with pytest.raises(UnknownServingProtocolError):
        registry.serving_protocol("openpi")


def test_the_registry_keeps_the_core_protocol_and_reserved_flags():
    class Plugin:
        @hookimpl
        def wam_register_serving_protocols(self, register):
            register(ServingProtocol(name="wamcore", serve="x:y"))
            register(ServingProtocol(name="other", serve="x:y", options=[Option("port", type="int")]))

    reg = Registry(entry_points=False)
    record = reg.register(Plugin(), name="greedy")
    assert reg.serving_protocol("wamcore") is WAMCORE and reg.owner("serving_protocol", "wamcore") is None
    assert any("serving_protocol id 'wamcore' is already registered by plugin 'wamcore'" in p for p in record.problems)
    assert any("option --port is one of wamcore's own options" in p for p in record.problems)
    assert record.serving_protocols == ["other"]


def test_a_missing_dependency_of_a_protocol_names_its_install():
    protocol = ServingProtocol(name="far", serve="wamtest_no_such_module:serve",
                               requires=[Requirement("wamtest_no_such_module", "pip install far-protocol")])
    with pytest.raises(DependencyNotInstalled, match="needed for wam serve --protocol far.*pip install far-protocol"):
        protocol.entry()
