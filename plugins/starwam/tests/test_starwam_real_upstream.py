"""The real StarWAM inference code end to end, with random weights generated from its own
classes at reduced depth (``wam starwam-test-weights``): no stand-in anywhere.

* LIBERO: a ``wam serve`` worker spawned in the model environment ``.venv-starwam`` (StarWAM
  a7b05c8, torch CPU) builds the model with ``starwam.build_framework`` and calls the real
  ``infer_action``; the real LIBERO simulator runs here and executes two chunks.
* RoboTwin: upstream's ``StarwamPolicy`` in this process, against the same policy built
  directly as ``policy_server.py`` builds it: equal chunks for equal inputs and seed.
"""

from __future__ import annotations

import numpy as np

from wamcore import ModelConfig, ModelService, PredictRequest, wam_act
from wamcore.registry import Registry
from wamcore.runtime import WorkerConfig, open_model

import wam_libero.plugin
import wam_starwam.plugin
from starwam_standins import INSTRUCTION, STARWAM_PYTHON

from test_starwam_robotwin import JOINTS, observation as robotwin_observation


def options(weights, platform):
    return {"backbone": str(weights / "backbone"), "action_stats": str(weights / f"action_stats_{platform}.json"),
            "text_cache": str(weights / "text_cache")}


def test_real_starwam_drives_real_libero_through_a_spawned_worker(test_weights, tmp_path):
    registry = Registry(entry_points=False)
    registry.register(wam_libero.plugin, name="libero")
    registry.register(wam_starwam.plugin, name="starwam")
    platform = registry.platform("libero")
    config = WorkerConfig.from_options(
        platform="libero", am_backend="starwam", am_python=STARWAM_PYTHON,
        am_checkpoint=str(test_weights / "random_starwam_mot_libero.pt"),
        backend_options=dict(options(test_weights, "libero"), num_inference_steps=2, replan_steps=4),
        log_dir=str(tmp_path / "logs"), start_timeout_s=300,
    )
    env = platform.create(suite="libero_spatial", task="0", settle_steps=2)
    model = open_model(config, platform, registry=registry, observation=env.observation_spec)
    executed = []
    try:
        info = model.info
        env.reset(seed=0)
        start = env.observe().state["eef_position"].copy()
        act = wam_act(model, env, max_chunks=2, seed=3,
                      on_step=lambda step, action, result, prediction: executed.append(np.array(action)))
        moved = env.observe().state["eef_position"]
    finally:
        model.close()
        env.close()
    details = info.details
    assert details["entry"].startswith("MoTWAM") and details["random_test_weights"]["random"] is True
    assert details["worker"]["python"].startswith(str(STARWAM_PYTHON).rsplit("/bin/", 1)[0])  # the model's own venv
    assert set(details["weights_sha256"]) == {"random_starwam_mot_libero.pt", "action_stats_libero.json", "Wan2.2_VAE.pth"}
    assert (act.chunks, act.steps, act.stop_reason) == (2, 8, "completed")
    chunks = [p.actions for p in act.predictions]
    assert all(c.shape == (4, 7) and np.isfinite(c).all() for c in chunks)
    assert all(set(np.unique(c[:, 6])) <= {-1.0, 1.0} for c in chunks)  # rollout's gripper mapping
    np.testing.assert_array_equal(np.stack(executed), np.concatenate(chunks))  # the simulator ran exactly these
    assert not np.array_equal(start, moved)
    assert INSTRUCTION == env.observe().instruction  # the generated text-cache entry is the task's


def test_real_starwam_policy_on_robotwin_equals_upstreams_own_server_path(test_weights, starwam_root):
    """Our glue (frame, state, text entry, seed) around the real StarwamPolicy gives the chunk
    upstream's server path gives: its own _build_robotwin_image and its own text-cache reader."""
    import importlib

    from wam_starwam import upstream

    opts = dict(options(test_weights, "robotwin"), num_inference_steps=2)
    ckpt = str(test_weights / "random_starwam_mot_robotwin.pt")
    service = ModelService(wam_starwam.plugin.MODEL, ModelConfig(platform="robotwin", checkpoint=ckpt, options=opts))
    obs = robotwin_observation(4).select(service.contract.cameras, service.contract.state)
    ours = service.predict(PredictRequest(observation=obs, seed=11)).actions

    policy = service.native.policy
    server = importlib.import_module("examples.robotwin.policy_server")
    policy._text_cache.clear()  # upstream now reads the entry itself
    policy.config.data.text_embedding_cache_dir = opts["text_cache"]
    policy.seed = 11
    image = server._build_robotwin_image(*(obs.images[r] for r in ("head", "left_wrist", "right_wrist")),
                                         policy.device, policy.dtype)
    with upstream.weights_only_loads():
        theirs = policy.predict_chunk(image, JOINTS.astype(np.float32), obs.instruction)
    assert ours.shape == (24, 14) and np.isfinite(ours).all()
    np.testing.assert_array_equal(ours, theirs[:24])
    assert service.info.details["entry"] == "starwam.eval.policy.StarwamPolicy.predict_chunk"
    assert type(policy).__module__ == "starwam.eval.policy"
