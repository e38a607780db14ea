"""A RoboTwin model for the ALOHA serving tests: answers a zero chunk and says, in
``Prediction.info``, what reached it (each camera's shape and sum, the instruction).

Loaded inside ``wam serve`` through ``WAMCORE_PLUGIN_MODULES=aloha_echo`` (this folder on
``PYTHONPATH``); numpy and wamcore only."""

from __future__ import annotations

import numpy as np

from wam_robotwin.spec import ACTION_SPACE
from wamcore import Adapter, AdapterContract, Capabilities, ModelSpec, Prediction, hookimpl

CHUNK = 4
CONTRACT = AdapterContract(platform="robotwin", action_space=ACTION_SPACE, action_dim=14,
                           cameras={"head": None, "left_wrist": None, "right_wrist": None},
                           state={"joint_targets": 14}, chunk_size=CHUNK)


class Echo:
    checkpoint = "aloha-echo"

    def predict_native(self, native, request):
        return native


def encode(request):
    obs = request.observation
    return {"cameras": {role: [list(img.shape), int(img.astype(np.int64).sum())] for role, img in obs.images.items()},
            "instruction": request.effective_instruction, "state": [float(x) for x in obs.state["joint_targets"]]}


def decode(native, request):
    return Prediction(actions=np.zeros((CHUNK, 14), np.float32), info=native)


MODEL = ModelSpec(name="aloha-echo", load=lambda config: Echo(),
                  adapters=[Adapter(contract=CONTRACT, encode=encode, decode=decode)],
                  capabilities=Capabilities(actions=True))


@hookimpl
def wam_register_models(register):
    register(MODEL)
