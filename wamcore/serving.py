"""Serving protocols: how clients talk to a model worker (``wam serve --protocol NAME``).

A protocol is registered like a platform or a model (``wam_register_serving_protocols``):
its name, its own ``wam serve`` options, an optional check of the model's contract that
runs before the model loads, and ``serve``, imported only when the protocol is spoken. The
core registers its own, ``wamcore`` (the ZeroMQ worker protocol, docs/workers.md), the same
way; any other protocol (openpi's websocket one: ``wam-openpi``) comes from a plugin.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Tuple, Union

import attrs

from .errors import DependencyNotInstalled
from .specs import Option, Requirement, resolve_callable

#: the protocol ``wam serve`` speaks unless told otherwise
DEFAULT = "wamcore"


@attrs.frozen
class ServeSettings:
    """What ``wam serve``'s own options give every protocol."""

    #: address to bind (``check_bind`` has refused anything but loopback without a token)
    host: str
    #: port to bind; 0: a free one, announced in the ready line
    port: int
    #: most open client sessions (connections, for a connection-per-session protocol)
    max_sessions: int
    #: largest request, in bytes
    max_message_bytes: int
    #: the shared token every client presents, if any
    token: Optional[str] = None
    #: where the ready line (JSON) is also written
    ready_file: Optional[str] = None


def _tuple(values) -> tuple:
    return tuple(values)


@attrs.frozen
class ServingProtocol:
    """One serving protocol, as a plugin registers it.

    ``serve(service, settings, **options)`` binds, writes the ready line (stdout and
    ``settings.ready_file``), answers clients until a stop is requested, then closes
    ``service`` (a loaded :class:`wamcore.ModelService`); ``options`` are this protocol's
    own ``options`` by dest. ``check(contract, **options)``, if given, refuses before the
    model loads (that can take minutes) a model whose :class:`wamcore.AdapterContract` the
    protocol cannot carry. Both are ``"module:attr"`` strings or callables; ``requires``
    names what ``serve`` imports (``wam doctor`` checks it without importing it).
    """

    #: ``wam serve --protocol NAME``
    name: str
    #: ``serve(service, settings, **options)``: ``"module:attr"`` (imported only when spoken) or a callable
    serve: Union[str, Callable[..., None]]
    #: one line for ``wam serve --protocol list``
    help: str = ""
    #: its own ``wam serve`` options (shown by ``wam serve --protocol NAME --help``)
    options: Tuple[Option, ...] = attrs.field(default=(), converter=_tuple)
    #: ``check(contract, **options)``, run before the model loads; raises ``ConfigurationError``
    check: Optional[Union[str, Callable[..., None]]] = None
    #: modules ``serve`` imports, with their install commands (``wam doctor``)
    requires: Tuple[Requirement, ...] = attrs.field(default=(), converter=_tuple)
    #: other names ``--protocol`` accepts
    aliases: Tuple[str, ...] = attrs.field(default=(), converter=_tuple)

    def entry(self, what: str = "serve") -> Callable[..., Any]:
        """``serve`` or ``check``, imported; a missing dependency named with its install command."""
        try:
            return resolve_callable(getattr(self, what))
        except ImportError as exc:
            missing = (exc.name or "").split(".")[0]
            install = next((r.install_command for r in self.requires if r.module.split(".")[0] == missing),
                           f"pip install {missing}")
            raise DependencyNotInstalled(missing or str(exc), install, f"wam serve --protocol {self.name}") from exc


def _serve_wamcore(service, settings: ServeSettings, *, session_ttl: float, batch_window_ms: float,
                   max_batch: Optional[int], max_local_connections: int, message_timeout: float,
                   max_shared_mb: float) -> None:
    from .rpc import server

    server.serve(service, host=settings.host, port=settings.port, token=settings.token, ready_file=settings.ready_file,
                 aliases=service.spec.aliases, session_ttl_s=session_ttl, batch_window_s=batch_window_ms / 1000.0,
                 max_batch=max_batch, max_sessions=settings.max_sessions, max_connections=max_local_connections,
                 max_message_bytes=settings.max_message_bytes, message_timeout_s=message_timeout,
                 max_shared_bytes=int(max_shared_mb * (1 << 20)))


#: the core's own protocol; its options are flags of ``wam serve`` (``RESERVED_OPTION_NAMES``)
WAMCORE = ServingProtocol(
    name=DEFAULT,
    serve=_serve_wamcore,
    help="wamcore's own worker protocol: ZeroMQ, or a Unix socket with shared memory on the same host "
         "(docs/workers.md); what wam run and wam eval speak",
    options=(
        Option("session-ttl", type="float", default=3600.0,
               help="Seconds after which an idle client session is dropped."),
        Option("batch-window-ms", type="float", default=2.0, minimum=0.0,
               help="For a model that batches: how long a prediction waits for those of other sessions to share "
                    "one model call (0 turns batching off)."),
        Option("max-batch", type="int", default=None, minimum=1,
               help="Most predictions in one model call (default and cap: the model's own max_batch)."),
        Option("max-local-connections", type="int", default=128, minimum=1,
               help="Most connections to the same-host Unix channel (more clients use ZeroMQ)."),
        Option("message-timeout", type="float", default=10.0, minimum=0.001,
               help="Seconds one message may take to arrive on the Unix channel."),
        Option("max-shared-mb", type="float", default=4096.0, minimum=0.001,
               help="Address space the worker maps for clients' shared-memory segments in all, in MiB "
                    "(least recently used unmapped first; at least --max-message-mb)."),
    ),
    requires=(Requirement("zmq", "pip install pyzmq", "the ZeroMQ transport"),),
)


def format_serving_protocols(protocols: Mapping[str, ServingProtocol], owners: Mapping[str, str]) -> str:
    """``wam serve --protocol list``: one line per protocol, with the plugin it comes from."""
    rows = [(name, owners.get(name, ""), p.help) for name, p in sorted(protocols.items())]
    widths = [max(len(r[i]) for r in rows) for i in range(2)]
    return "\n".join(f"{n.ljust(widths[0])}  {o.ljust(widths[1])}  {h}".rstrip() for n, o, h in rows)


__all__ = ["DEFAULT", "ServeSettings", "ServingProtocol", "WAMCORE", "format_serving_protocols"]
