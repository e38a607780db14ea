"""A toy serving protocol for the hook tests: ``wam serve --protocol toy``.

Loaded in ``wam serve`` workers through ``WAMCORE_PLUGIN_MODULES=wamtest_scripted,wamtest_serving``
(with ``tests/`` on ``PYTHONPATH``). The protocol is JSON lines over TCP: a client sends
``{"seed": N}``, the server builds the toy platform's observation for that seed
(``wamtest_scripted.ToyEnv``), asks the model, and answers ``{"greeting", "actions"}``
(or ``{"error"}``). Its options: ``--greeting`` (echoed in every answer) and ``--max-chunk``
(its check refuses, before the model loads, a model whose chunks are longer).
"""

from __future__ import annotations

import json
import socketserver
import sys
import threading
import time

from wamcore import ConfigurationError, Option, PredictRequest, hookimpl
from wamcore.rpc.server import install_signal_handlers, remove_ready, stop_requested, write_ready
from wamcore.serving import ServingProtocol

import wamtest_scripted as toy


def check(contract, *, greeting, max_chunk):
    if max_chunk is not None and contract.chunk_size > max_chunk:
        raise ConfigurationError(f"protocol toy carries at most {max_chunk} actions per answer (--max-chunk); "
                                 f"this model's chunk is {contract.chunk_size}")


def serve(service, settings, *, greeting, max_chunk):
    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            for line in self.rfile:
                try:
                    obs = toy.ToyEnv().reset(seed=int(json.loads(line)["seed"]))
                    answer = {"greeting": greeting, "actions": service.predict(PredictRequest(obs)).actions.tolist()}
                except Exception as exc:
                    answer = {"error": f"{type(exc).__name__}: {exc}"}
                self.wfile.write(json.dumps(answer).encode() + b"\n")

    install_signal_handlers()
    server = socketserver.ThreadingTCPServer((settings.host, settings.port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        write_ready({"event": "ready", "protocol": "toy", "endpoint": f"toy://{settings.host}:{port}", "port": port,
                     "backend": service.info.backend, "max_sessions": settings.max_sessions},
                    sys.stdout, settings.ready_file)
        while not stop_requested():
            time.sleep(0.05)
    finally:
        server.shutdown()
        server.server_close()
        service.close()
        remove_ready(settings.ready_file)


TOY = ServingProtocol(
    name="toy", serve=serve, check=check, help="JSON lines over TCP, for the hook tests",
    options=(Option("greeting", default="hello", help="Said in every answer."),
             Option("max-chunk", type="int", default=None, minimum=1, help="Longest chunk the protocol carries.")),
)


@hookimpl
def wam_register_serving_protocols(register):
    register(TOY)
