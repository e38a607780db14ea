"""``wam serve``: a model worker."""

from __future__ import annotations

import json
import sys
from typing import List

import click

from ..errors import ConfigurationError, WamError
from .common import PairedCommand, PrimaryFlagOption, _parse_am_options, _registry, cli, split_plugin_options

def _serve_options() -> List[click.Option]:
    def o(*decls, **kw):
        return PrimaryFlagOption(list(decls), **kw)

    return [
        o("--am-backend", "--vla-backend", "--wam-backend", "am_backend", required=True,
          help="Model backend id to serve (see `wam plugins`)."),
        click.Option(["--platform"], required=True, help="Platform whose adapter the worker serves."),
        o("--am-checkpoint", "--vla-model-path", "--wam-checkpoint", "am_checkpoint", default=None,
          help="Checkpoint file or directory."),
        click.Option(["--predict-future"], is_flag=True, default=False,
                     help="Predict future observations and values (where the backend supports it)."),
        click.Option(["--platform-options"], default=None, metavar="JSON",
                     help="The options of the platform's envs, as a JSON object, for a model fitted to them "
                          "(ModelConfig.platform_options; wam run/eval pass them to the workers they start)."),
        click.Option(["--am-option", "am_option"], multiple=True, metavar="KEY=VALUE",
                     help="Backend option as text (typed by the backend's own option list)."),
        click.Option(["--protocol"], type=click.Choice(["wamcore", "openpi"]), default="wamcore", show_default=True,
                     help="wamcore: our ZeroMQ worker protocol (docs/workers.md); openpi: openpi's websocket policy "
                          "protocol, for openpi clients (docs/openpi.md; needs wamcore[openpi])."),
        click.Option(["--default-prompt"], default=None, metavar="TEXT",
                     help="--protocol openpi: the prompt of requests that carry none, as openpi's serve_policy.py "
                          "--default_prompt (without one, such a request is refused, as openpi's policies do)."),
        click.Option(["--host"], default="127.0.0.1", show_default=True,
                     help="Address to bind. Anything but loopback needs --token."),
        click.Option(["--port"], type=click.IntRange(0, 65535), default=0, show_default=True,
                     help="Port to bind; 0 lets the kernel pick a free one (printed on stdout)."),
        click.Option(["--token"], envvar="WAMCORE_TOKEN", default=None,
                     help="Shared token every client must present (env WAMCORE_TOKEN; prefer the env over argv)."),
        click.Option(["--parent-watch"], is_flag=True, default=False,
                     help="Exit when the parent process dies (stdin EOF; PR_SET_PDEATHSIG on Linux)."),
        click.Option(["--ready-file"], type=click.Path(dir_okay=False), default=None,
                     help="Also write the ready line (JSON: endpoint, port, device, pid) to this file."),
        click.Option(["--session-ttl"], type=float, default=3600.0, show_default=True,
                     help="Seconds after which an idle client session is dropped."),
        click.Option(["--batch-window-ms"], type=click.FloatRange(min=0.0), default=2.0, show_default=True,
                     help="For a model that batches: how long a prediction waits for those of other sessions "
                          "to share one model call (0 turns batching off)."),
        click.Option(["--max-batch"], type=click.IntRange(min=1), default=None,
                     help="Most predictions in one model call (default and cap: the model's own max_batch)."),
        click.Option(["--max-sessions"], type=click.IntRange(min=1), default=256, show_default=True,
                     help="Most open client sessions; at the limit a new one replaces the oldest never used."),
        click.Option(["--max-local-connections"], type=click.IntRange(min=1), default=128, show_default=True,
                     help="Most connections to the same-host Unix channel (more clients use ZeroMQ)."),
        click.Option(["--max-message-mb"], type=click.FloatRange(min=0.001), default=256.0, show_default=True,
                     help="Largest request, in MiB (frames, or shared-memory arrays of one request)."),
        click.Option(["--max-shared-mb"], type=click.FloatRange(min=0.001), default=4096.0, show_default=True,
                     help="Address space the worker maps for clients' shared-memory segments in all, in MiB "
                          "(least recently used unmapped first; at least --max-message-mb)."),
        click.Option(["--idle-grace"], type=click.FloatRange(min=0.0), default=30.0, show_default=True,
                     help="openpi: at --max-sessions, a new client takes the place of the least recently active "
                          "connection idle this long (one that never sent a request: after 1 s)."),
        click.Option(["--message-timeout"], type=click.FloatRange(min=0.001), default=10.0, show_default=True,
                     help="Seconds one message may take to arrive on the Unix channel."),
        o("--cuda-device", "--am-cuda-device", "cuda_device", default=None,
          help="CUDA_VISIBLE_DEVICES for this worker (set before the model loads; default: inherited)."),
    ]


def _platform_options(text):
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"--platform-options must be a JSON object: {exc}") from None
    if not isinstance(value, dict):
        raise ConfigurationError(f"--platform-options must be a JSON object, got {text!r}")
    return value


@cli.command(cls=PairedCommand, platform_options=False, params=_serve_options())
@click.pass_context
def serve(ctx, **kwargs):
    """Serve a model to platforms in other processes or environments.

    Prints one JSON line when ready (endpoint, port, device, pid). Binds 127.0.0.1 by
    default; port 0 picks a free port. Choose --am-backend first; --help then lists its
    options. docs/workers.md describes the protocol.
    """
    import logging
    import os

    from ..rpc import server as rpc_server
    from ..runtime import typed_options
    from ..service import ModelService
    from ..specs import ModelConfig

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    if kwargs.pop("parent_watch"):
        rpc_server.watch_parent()  # first: loading a model can take minutes
    cuda_device = kwargs.pop("cuda_device")
    if cuda_device is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = cuda_device  # before anything imports torch
    host, port, token = kwargs.pop("host"), kwargs.pop("port"), kwargs.pop("token")
    rpc_server.check_bind(host, token)
    reg = _registry(ctx)
    spec = reg.model(kwargs.pop("am_backend"))
    platform, platform_spec = kwargs.pop("platform"), None
    try:
        platform_spec = reg.platform(platform)
        platform = platform_spec.name
    except WamError:
        pass  # the platform plugin need not be installed where the model runs (then candidate actions are refused)
    _, deploy, request, _ = split_plugin_options(ctx, kwargs, platform, spec.name)
    per_request = [p.opts[0] for p in ctx.command.params
                   if getattr(p, "wam_option", None) is not None and not p.wam_option.deployment
                   and ctx.get_parameter_source(p.name) == click.core.ParameterSource.COMMANDLINE]
    if per_request:
        raise ConfigurationError(f"{', '.join(per_request)} are per-request options: give them to `wam run`/`wam eval`")
    deploy.update(typed_options(spec, _parse_am_options(kwargs.pop("am_option"))))
    config = ModelConfig(platform=platform, checkpoint=kwargs.pop("am_checkpoint"),
                         predict_future=kwargs.pop("predict_future"), options=deploy,
                         platform_options=_platform_options(kwargs.pop("platform_options")))
    default_prompt = kwargs.pop("default_prompt")
    if kwargs.pop("protocol") == "openpi":
        _serve_openpi(ctx, spec, config, platform_spec, host=host, port=port, token=token, ready_file=kwargs.pop("ready_file"),
                      default_prompt=default_prompt,
                      max_connections=kwargs.pop("max_sessions"), idle_grace_s=kwargs.pop("idle_grace"),
                      max_message_bytes=int(kwargs.pop("max_message_mb") * (1 << 20)))
        return
    if default_prompt is not None:
        raise ConfigurationError("--default-prompt applies to --protocol openpi (wamcore requests always carry the "
                                 "task's instruction)")
    if ctx.get_parameter_source("idle_grace") == click.core.ParameterSource.COMMANDLINE:
        click.echo("warning: --idle-grace applies to --protocol openpi; the wamcore protocol drops sessions after "
                   "--session-ttl", err=True)
    kwargs.pop("idle_grace")
    service = ModelService(spec, config, platform=platform_spec)
    rpc_server.serve(service, host=host, port=port, token=token, session_ttl_s=kwargs.pop("session_ttl"),
                     ready_file=kwargs.pop("ready_file"), aliases=spec.aliases,
                     batch_window_s=kwargs.pop("batch_window_ms") / 1000.0, max_batch=kwargs.pop("max_batch"),
                     max_sessions=kwargs.pop("max_sessions"), max_connections=kwargs.pop("max_local_connections"),
                     max_message_bytes=int(kwargs.pop("max_message_mb") * (1 << 20)),
                     message_timeout_s=kwargs.pop("message_timeout"),
                     max_shared_bytes=int(kwargs.pop("max_shared_mb") * (1 << 20)))


#: options of the ZeroMQ worker that mean nothing to an openpi server
_ZMQ_ONLY = ("session_ttl", "batch_window_ms", "max_batch", "max_local_connections", "message_timeout", "max_shared_mb")


def _serve_openpi(ctx, spec, config, platform_spec, **kw) -> None:
    """The layout is checked against the model's contract before the model loads (that can take minutes)."""
    import attrs

    from ..errors import DependencyNotInstalled
    from ..openpi.layouts import layout_for
    from ..service import ModelService

    try:
        from ..openpi import server as openpi_server
    except ImportError as exc:
        raise DependencyNotInstalled("websockets", 'pip install "wamcore[openpi]"', "--protocol openpi") from exc
    for name in _ZMQ_ONLY:
        if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE:
            click.echo(f"warning: --{name.replace('_', '-')} applies to the wamcore protocol; with --protocol openpi "
                       "it changes nothing", err=True)
    layout = layout_for(config.platform)
    adapter = spec.resolve(attrs.evolve(config, options=spec.with_defaults(config.options))).adapter_for(config.platform)
    if adapter is not None:  # else ModelService says which platforms the model has adapters for
        layout.check(adapter.contract)
    openpi_server.serve(ModelService(spec, config, platform=platform_spec), layout, **kw)
