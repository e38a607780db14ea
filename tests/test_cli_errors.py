"""Errors a new user meets, each pointing the right way (and exit 2 for a configuration error)."""

from __future__ import annotations

import re

import attrs
import pytest
from click.testing import CliRunner

from wamcore import Option, hookimpl
from wamcore.cli import cli


def run(registry, *args):
    return CliRunner().invoke(cli, list(args), obj=registry)  # click 8.2+: stdout and stderr apart, output both


@pytest.fixture
def registry(line_registry, line_plugin):
    built = []

    class Extra:
        @hookimpl
        def wam_register_models(self, register):
            base = line_registry.model("line-p")
            register(attrs.evolve(base, name="line-choosy", aliases=(), options=(
                Option("mode", "str", "fast", choices=("fast", "slow")),
                Option("steps", "int", 4, choices=(4, 8)),
            )))

        @hookimpl
        def wam_register_platforms(self, register):
            base = line_registry.platform("line")
            register(attrs.evolve(base, name="slow-sim", aliases=(), make_env=lambda: built.append(1) or line_plugin.LineEnv()))

    line_registry.register(Extra(), name="extra")
    line_registry.built = built
    return line_registry


def test_an_option_of_a_backend_not_installed_here_suggests_am_option(registry, tmp_path):
    result = run(registry, "run", "--platform", "line", "--am-backend", "elsewhere", "--am-python", "python3", "--gain", "0.7")
    assert result.exit_code == 2
    assert "--am-option gain=VALUE" in result.stderr and "Usage: cli run" in result.stderr


def test_a_worker_without_the_backends_plugin_says_unknown_model_not_no_such_option(registry):
    result = run(registry, "serve", "--am-backend", "elsewhere", "--platform", "line", "--gain", "0.5")
    assert result.exit_code == 2
    assert "Unknown model 'elsewhere'" in result.stderr and "No such option" not in result.stderr


def test_choices_are_enforced_for_str_and_int_options(registry):
    bad_str = run(registry, "run", "--platform", "line", "--am-backend", "line-choosy", "--mode", "medium")
    assert bad_str.exit_code == 2 and "'medium' is not one of 'fast', 'slow'" in bad_str.stderr
    bad_int = run(registry, "run", "--platform", "line", "--am-backend", "line-choosy", "--steps", "5")
    assert bad_int.exit_code == 2 and "5 is not one of 4, 8" in bad_int.stderr
    assert run(registry, "run", "--platform", "line", "--am-backend", "line-choosy", "--steps", "8").exit_code == 0


def test_flags_that_change_nothing_say_so(registry):
    result = run(registry, "run", "--platform", "line", "--am-backend", "line-p", "--predict-future", "--am-cuda-device", "1")
    assert result.exit_code == 0, result.stderr
    assert "--predict-future: model 'line-p' predicts neither futures nor values" in result.stderr
    assert "the model runs in this process, so they change nothing" in result.stderr


def test_no_model_for_a_platform_is_said_before_its_simulator_is_built(registry):
    result = run(registry, "run", "--platform", "slow-sim")
    assert result.exit_code == 2 and "choose a model for platform 'slow-sim'" in result.stderr
    assert registry.built == []


def test_configuration_errors_exit_2_with_the_subcommands_usage(registry):
    for args in (["run", "--platform", "line", "--am-backend", "line-q"],  # unknown model
                 ["run", "--platform", "nowhere"],  # unknown platform
                 ["eval", "--platform", "line", "--num-envs", "2", "--ray-address", "x"]):  # options that do not go together
        result = run(registry, *args)
        assert result.exit_code == 2, (args, result.stderr)
        assert f"Usage: cli {args[0]}" in result.stderr


def test_am_timeout_bounds_the_wait_for_a_borrowed_workers_hello(registry):
    import socket

    with socket.socket() as silent:  # accepts connections (the kernel does), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        port = silent.getsockname()[1]
        result = run(registry, "run", "--platform", "line", "--am-endpoint", f"tcp://127.0.0.1:{port}", "--am-timeout", "1.5")
    assert result.exit_code == 1
    assert f"no answer to hello from the worker at tcp://127.0.0.1:{port} within 1.5 s" in result.stderr


def test_an_http_endpoint_is_told_what_workers_speak(registry):
    result = run(registry, "run", "--platform", "line", "--am-endpoint", "http://127.0.0.1:8000")
    assert result.exit_code == 2
    assert "speak ZeroMQ" in result.stderr and "server of another protocol" in result.stderr


def test_backend_options_set_from_python_are_checked_like_flags(registry):
    from wamcore.errors import ConfigurationError
    from wamcore.runtime import WorkerConfig, open_model

    platform = registry.platform("line")
    for options, message in (({"mdoe": "fast"}, "has no deployment option 'mdoe' (it has: mode, steps)"),
                             ({"steps": "8"}, "is a int, got '8'"),
                             ({"steps": 5}, "5 is not one of 4, 8")):
        config = WorkerConfig.from_options(platform="line", am_backend="line-choosy", backend_options=options)
        with pytest.raises(ConfigurationError, match=re.escape(message)):
            open_model(config, platform, registry=registry)
    config = WorkerConfig.from_options(platform="line", am_backend="line-choosy", backend_options={"steps": 8})
    open_model(config, platform, registry=registry).close()


def test_per_request_option_choices_are_checked_before_the_model(line_registry, line_plugin):
    from wamcore import LocalModel, ModelConfig, ModelService, ObservationError, PredictRequest

    spec = attrs.evolve(line_registry.model("line-p"), name="line-req",
                        options=(Option("speed", "str", None, choices=("slow", "fast"), deployment=False),))
    native = line_plugin.ProportionalModel()
    calls = []
    native.predict_native = (lambda f: (lambda *a, **k: calls.append(1) or f(*a, **k)))(native.predict_native)
    model = LocalModel(ModelService(spec, ModelConfig(platform="line"), native=native)).bind(line_registry.platform("line"))
    env = line_registry.platform("line").create()
    obs = env.reset(seed=0)
    with pytest.raises(ObservationError, match="option 'speed' must be one of slow, fast, got 'medium'"):
        model.predict(PredictRequest(observation=obs, options={"speed": "medium"}))
    assert calls == []
    model.predict(PredictRequest(observation=obs, options={"speed": "fast"}))
    assert calls == [1]
