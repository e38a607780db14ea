"""The real LingBot-VA server code, no stand-in: upstream's ``VA_Server`` (6f092cb) on random
weights generated from its own classes at reduced size (``wam lingbot-va-test-weights``), driven
by the worker's client loop in this process and through upstream's own websocket server.
The server's real state (``frame_st_id``) advances exactly as the stand-in's model of it."""

from __future__ import annotations

import numpy as np
import pytest

from wamcore import LocalModel, ModelConfig, ModelService, Registry
import wam_lingbot_va.plugin as lingbot
import wam_robotwin.plugin as robotwin
from wam_lingbot_va.remote import WebsocketServer
from wam_lingbot_va.robotwin import ACTION_SPACE
from wam_lingbot_va.session import LingbotModel

from lingbot_standins import UpstreamWebsocketServer, expected_rows
from test_lingbot_session import PROMPT, init_pose, run

STEPS = {"num_inference_steps": 2, "action_num_inference_steps": 2}


class Recorder:
    """Passes each request to the real server and notes the mode and the server's frame index after it."""

    def __init__(self, server):
        self.server, self.log, self.chunks = server, [], []

    def infer(self, request):
        reply = self.server.infer(request)
        mode = "reset" if request.get("reset") else "compute_kv_cache" if request.get("compute_kv_cache") else "infer"
        self.log.append((mode, self.server.frame_st_id))
        if "action" in reply:
            self.chunks.append(np.array(reply["action"]))
        return reply


@pytest.fixture(scope="module")
def platform():
    reg = Registry(entry_points=False)
    reg.register(robotwin, name="robotwin")
    return reg.platform("robotwin")


@pytest.fixture(scope="module")
def service(test_weights, tmp_path_factory):
    options = dict(STEPS, device="cpu", save_root=str(tmp_path_factory.mktemp("lingbot-save")))
    return ModelService(lingbot.MODEL, ModelConfig(platform="robotwin", checkpoint=str(test_weights), options=options))


def test_the_real_server_in_the_worker_follows_the_client_loop(service, platform):
    native = service.native
    assert type(native.server).__name__ == "VA_Server" and type(native.server).__module__ == "wan_va.wan_va_server"
    recorder = native.server = Recorder(native.server)
    model = LocalModel(service, session="real").bind(platform, options={"control": ACTION_SPACE})
    try:
        observations, executed = run(model, 13)  # 16 + 32 actions, then the third chunk's first 4
    finally:
        native.server = recorder.server
        model.reset()
    assert recorder.log == [("reset", 0), ("infer", 0), ("compute_kv_cache", 2), ("infer", 2), ("compute_kv_cache", 4),
                            ("infer", 4)]
    assert [c.shape for c in recorder.chunks] == [(16, 2, 16)] * 3 and all(c.dtype == np.float32 for c in recorder.chunks)
    np.testing.assert_array_equal(executed, expected_rows(recorder.chunks, init_pose(observations[0]))[:52])
    details = service.info.details
    assert details["deployment"] == "in-process VA_Server" and details["random_test_weights"]["random"] is True
    assert (details["num_inference_steps"], details["action_num_inference_steps"], details["dtype"]) == (2, 2, "bfloat16")
    assert service.info.device == "cpu"


def test_a_request_seed_makes_the_real_servers_episodes_reproducible(service, platform):
    model = LocalModel(service, session="seeded").bind(platform, options={"control": ACTION_SPACE})

    def episode(request_seed):
        try:
            return run(model, 5, request_seed=request_seed)[1]  # two chunks
        finally:
            model.reset()

    first, again, other = episode(11), episode(11), episode(12)
    np.testing.assert_array_equal(first, again)
    assert not np.allclose(first, other)
    assert "manual_seed" in service.info.details["noise"]


def test_the_real_server_behind_upstreams_websocket_server(service, platform):
    va_server = service.native.server
    server = UpstreamWebsocketServer(va_server)
    native = LingbotModel(WebsocketServer("127.0.0.1", server.port, timeout_s=120))
    try:
        model = LocalModel(ModelService(lingbot.MODEL, ModelConfig(platform="robotwin"), native=native)).bind(
            platform, options={"control": ACTION_SPACE})
        observations, executed = run(model, 5, seed=3)  # the first chunk, its keyframes fed back, a second chunk
    finally:
        native.close()
        server.stop()
    assert va_server.frame_st_id == 2 and va_server.prompt_embeds is not None
    assert executed.shape == (20, 16) and np.isfinite(executed).all()
    for arm in (slice(3, 7), slice(11, 15)):
        np.testing.assert_allclose(np.linalg.norm(executed[:, arm], axis=1), 1.0, atol=1e-6)
    assert PROMPT in str(va_server.exp_save_root)  # upstream's own reset ran with the episode's prompt
