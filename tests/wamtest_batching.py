"""A batching model for the worker tests, on the ``toy`` platform of ``wamtest_scripted``.

Loaded like ``wamtest_scripted`` (``WAMCORE_PLUGIN_MODULES=wamtest_scripted,wamtest_batching``).
Model ``batch-wam`` declares ``max_batch = 8``. Every answer says which native call served
it (``call``: a number per call, ``batch``: that call's size, absent for a single
``predict_native``), which session asked, and the position it saw, and its actions depend
on that position: so a test can tell that concurrent sessions shared one call and that
each answer went back to the session whose observation produced it.
"""

from __future__ import annotations

import numpy as np

from wamcore import Adapter, Capabilities, ModelSpec, Option, Prediction, hookimpl

import wamtest_scripted as toy


class BatchModel:
    uses_sessions = True
    max_batch = 8
    timeout_s = 20.0

    def __init__(self):
        self.calls = 0  # native calls, single or batched
        self.inputs = 0  # observations that reached the model

    def _answer(self, position, session, call, batch):
        actions = np.repeat(np.clip(toy.TARGET - position, -1.0, 1.0)[None, :], toy.CHUNK, axis=0)
        return {"actions": actions, "session": session, "position": position.tolist(), "call": call, "batch": batch,
                "inputs": self.inputs}

    def predict_native(self, position, request, session="default"):
        if request.options.get("behaviour") == "raise-value-error":
            raise ValueError("scripted failure inside the model")
        self.calls += 1
        self.inputs += 1
        return self._answer(position, session, self.calls, None)

    def predict_native_batch(self, positions, requests, sessions):
        if any(r.options.get("behaviour") == "raise-value-error" for r in requests):
            raise ValueError("scripted failure inside the batched model")
        self.calls += 1
        self.inputs += len(positions)
        if any(r.options.get("behaviour") == "drop-one" for r in requests):
            positions = positions[:-1]
        return [self._answer(p, s, self.calls, len(positions)) for p, s in zip(positions, sessions)]

    def reset(self, session="default"):
        pass


def encode(request):
    return np.array(request.observation.state["position"], dtype=np.float64)


def decode(native, request):
    info = {k: native[k] for k in ("session", "position", "call", "batch", "inputs")}
    return Prediction(actions=native["actions"], info=info)


@hookimpl
def wam_register_models(register):
    register(ModelSpec(
        name="batch-wam", load=lambda config: BatchModel(), capabilities=Capabilities(actions=True),
        adapters=[Adapter(contract=toy.CONTRACT, encode=encode, decode=decode)], timeout_s=20.0,
        options=(Option("behaviour", type="choice", choices=("ok", "raise-value-error", "drop-one"), default=None,
                        deployment=False, help="What the prediction does (per request)."),),
    ))
