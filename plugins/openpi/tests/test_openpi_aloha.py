"""``wam serve --protocol openpi`` with openpi's ALOHA keys, driven by openpi-client (the real
package, unmodified) with the observation openpi's real ALOHA client builds
(``examples/aloha_real/env.py``: four cameras, cam_low among them, and no prompt)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from openpi_client.websocket_client_policy import WebsocketClientPolicy
from openpi_helpers import HERE, served
from test_openpi_layouts import aloha_real_observation

pytestmark = pytest.mark.filterwarnings("ignore:connect\\(\\) must be used as a context manager:DeprecationWarning")
ENV = {**os.environ, "WAMCORE_LOAD_PLUGINS": "wam-openpi", "WAMCORE_PLUGIN_MODULES": "aloha_echo",
       "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]), "PYTHONUNBUFFERED": "1"}


def test_a_real_aloha_client_is_served_with_openpis_defaults(tmp_path):
    real = aloha_real_observation(3)
    with served(tmp_path, "--protocol", "openpi", "--default-prompt", "fold the towel", backend="aloha-echo",
                platform="robotwin", env=ENV) as worker:
        assert worker.ready["layout"] == "aloha"
        policy = WebsocketClientPolicy("127.0.0.1", worker.port)
        try:
            assert policy.get_server_metadata()["wamcore"]["default_prompt"] == "fold the towel"
            answer = policy.infer(real)
            only_head = policy.infer({**real, "images": {"cam_high": real["images"]["cam_high"]}, "prompt": "uncap the pen"})
        finally:
            policy._ws.close()
    assert answer["actions"].shape == (4, 14)
    seen = answer["info"]
    assert seen["instruction"] == "fold the towel"  # the default prompt, as openpi's InjectDefaultPrompt
    assert np.allclose(seen["state"], real["state"])
    for role, name in (("head", "cam_high"), ("left_wrist", "cam_left_wrist"), ("right_wrist", "cam_right_wrist")):
        assert seen["cameras"][role] == [[224, 224, 3], int(real["images"][name].astype(np.int64).sum())]
    assert only_head["info"]["instruction"] == "uncap the pen"
    assert only_head["info"]["cameras"]["left_wrist"] == [[224, 224, 3], 0]  # black, as AlohaInputs fills it


def test_without_a_default_prompt_a_request_without_one_is_refused(tmp_path):
    with served(tmp_path, "--protocol", "openpi", backend="aloha-echo", platform="robotwin", env=ENV) as worker:
        policy = WebsocketClientPolicy("127.0.0.1", worker.port)
        try:
            with pytest.raises(RuntimeError, match="missing key 'prompt'.*--default-prompt"):
                policy.infer(aloha_real_observation())
        finally:
            policy._ws.close()
