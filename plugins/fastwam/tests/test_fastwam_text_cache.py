"""``--text-cache``: upstream's text-embedding cache read safely, handed to ``infer_action`` as
``context``/``context_mask``; ``--fastwam-override``; the architecture check of the checkpoint.

The cache format is upstream's (FastWAM ``scripts/precompute_text_embeds.py``: one
``torch.save({"context": bf16 [128, 4096], "mask": bool [128]})`` per prompt, named
``<sha256(prompt)>.t5_len128.wan22ti2v5b.pt``; read back by ``RobotVideoDataset.
_get_cached_text_context``, padded positions zeroed, mask set to ones). ``infer_action`` is a
stand-in here; the real one runs in test_fastwam_real_upstream.py.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest
import torch

from wamcore import ModelConfig, ModelService, PredictRequest
from wamcore.errors import CheckpointError, ConfigurationError

from fastwam_standins import PROMPT, FastWAMStandIn
from test_fastwam_robotwin import make_model, normalized_answer, observation
from wam_fastwam.plugin import MODEL
from wam_fastwam.robotwin import RoboTwinSettings
from wam_fastwam.text_cache import PROMPT_TEMPLATE, TextCache, entry_name, read_entry

TASK = "hand the block over"


def write_entry(folder, task, n=12, seed=0):
    gen = torch.Generator().manual_seed(seed)
    context = torch.randn(128, 4096, generator=gen).to(torch.bfloat16)  # padding garbage, as a T5 may leave
    mask = torch.zeros(128, dtype=torch.bool)
    mask[:n] = True
    prompt = PROMPT_TEMPLATE.format(task=task)
    path = folder / f"{hashlib.sha256(prompt.encode()).hexdigest()}.t5_len128.wan22ti2v5b.pt"
    torch.save({"context": context, "mask": mask}, path)
    return path, context, mask


def test_entry_name_is_upstreams():
    assert PROMPT_TEMPLATE == PROMPT
    prompt = PROMPT.format(task=TASK)
    assert entry_name(prompt) == hashlib.sha256(prompt.encode("utf-8")).hexdigest() + ".t5_len128.wan22ti2v5b.pt"


def test_an_entry_is_read_as_upstreams_dataset_reads_it(tmp_path):
    path, context, mask = write_entry(tmp_path, TASK)
    got, got_mask = read_entry(path)
    assert got.dtype == torch.float32 and tuple(got.shape) == (128, 4096)
    assert torch.equal(got[:12], context[:12].float()) and not got[12:].any()  # padded positions zeroed
    assert got_mask.all() and got_mask.dtype == torch.bool  # "to keep consistent with wan2.2's behavior"


def test_an_entry_that_would_run_code_is_refused(tmp_path):
    path = tmp_path / entry_name(PROMPT.format(task=TASK))
    torch.save({"context": torch.zeros(128, 4096), "mask": torch.ones(128, dtype=torch.bool), "x": np.dtype}, path)
    with pytest.raises(CheckpointError, match="not a plain tensor file"):
        read_entry(path)


def test_an_entry_of_the_wrong_shape_is_refused(tmp_path):
    path = tmp_path / "e.pt"
    torch.save({"context": torch.zeros(64, 4096), "mask": torch.ones(64, dtype=torch.bool)}, path)
    with pytest.raises(CheckpointError, match=r"context has shape \(64, 4096\), expected \(128, 4096\)"):
        read_entry(path)


def test_folder_identity_and_a_changed_entry(tmp_path):
    path, *_ = write_entry(tmp_path, TASK)
    cache = TextCache(tmp_path)
    assert cache.identity["entries"] == 1 and cache.identity["dir"] == str(tmp_path)
    write_entry(tmp_path, TASK, seed=1)  # rewritten after the load
    with pytest.raises(CheckpointError, match="changed after the model was loaded"):
        cache.context(TASK)
    assert TextCache(tmp_path).identity["sha256"] != cache.identity["sha256"]


def test_an_empty_or_missing_folder_is_an_error(tmp_path):
    with pytest.raises(CheckpointError, match="holds no"):
        TextCache(tmp_path)
    with pytest.raises(CheckpointError, match="is not a folder"):
        TextCache(tmp_path / "nope")


def test_a_missing_instruction_names_it_and_the_command(tmp_path):
    write_entry(tmp_path, TASK)
    with pytest.raises(CheckpointError) as info:
        TextCache(tmp_path).context("lift the pot")
    message = str(info.value)
    assert "'lift the pot'" in message and entry_name(PROMPT.format(task="lift the pot")) in message
    assert "scripts/precompute_text_embeds.py" in message and f"text_embedding_cache_dir={tmp_path}" in message


class ContextStandIn(FastWAMStandIn):
    """``infer_action`` with upstream's ``context``/``context_mask`` parameters."""

    def infer_action(self, prompt, input_image, action_horizon, proprio=None, context=None, context_mask=None, **kwargs):
        self.text = dict(prompt=prompt, context=context, context_mask=context_mask)
        return super().infer_action(prompt=prompt, input_image=input_image, action_horizon=action_horizon,
                                    proprio=proprio, **kwargs)


def test_the_worker_passes_the_cached_context_instead_of_the_prompt(tmp_path):
    write_entry(tmp_path, TASK)
    standin = ContextStandIn(normalized_answer())
    model, _ = make_model(standin=standin)
    model.text = TextCache(tmp_path)
    service = ModelService(MODEL, ModelConfig(platform="robotwin"), native=model)

    def request(task):
        return PredictRequest(observation=observation(task).select(service.contract.cameras, service.contract.state))

    service.predict(request(TASK))
    assert standin.text["prompt"] is None
    assert tuple(standin.text["context"].shape) == (1, 128, 4096) and tuple(standin.text["context_mask"].shape) == (1, 128)
    assert standin.text["context_mask"].all() and not standin.text["context"][0, 12:].any()
    with pytest.raises(CheckpointError, match="'another task'"):
        service.predict(request("another task"))


def test_overrides_are_checked():
    assert RoboTwinSettings.from_options({"fastwam_override": ("a.b=1",)}).overrides == ("a.b=1",)
    with pytest.raises(ConfigurationError, match="KEY=VALUE"):
        RoboTwinSettings.from_options({"fastwam_override": ("num_layers",)})


def _configs(tmp_path):
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "sim_robotwin.yaml").write_text(
        "model:\n  _target_: fastwam.runtime.create_fastwam\n  load_text_encoder: true\n  num_layers: 30\n"
        "  proprio_dim: ${data.train.proprio}\n"
        "data:\n  train:\n    proprio: 14\n    num_frames: 33\n    action_video_freq_ratio: 4\n"
    )
    return configs


class CheckpointStandIn(FastWAMStandIn):
    """``load_checkpoint`` returns the payload as upstream's does; ``mot`` holds 2 blocks."""

    def __init__(self, payload_keys):
        super().__init__(normalized_answer())
        self.payload_keys = payload_keys

        class Mot:
            def state_dict(self):
                return {"blocks.0.w": 0, "blocks.1.w": 0}

        self.mot = Mot()

    def load_checkpoint(self, path):
        super().load_checkpoint(path)
        return {"mot": {k: 0 for k in self.payload_keys}}


def test_text_cache_and_overrides_reach_the_official_loader(robotwin_checkpoint, fake_upstream, tmp_path):
    import fastwam.runtime

    write_entry(tmp_path, TASK)
    standin = CheckpointStandIn(["blocks.0.w", "blocks.1.w"])
    fastwam.runtime.FACTORY = lambda kwargs: standin
    options = {"fastwam_config_dir": str(_configs(tmp_path)), "text_cache": str(tmp_path),
               "fastwam_override": ("model.num_layers=2",)}
    service = ModelService(MODEL, ModelConfig(platform="robotwin", checkpoint=str(robotwin_checkpoint), options=options))
    (kwargs,) = fastwam.runtime.RECEIVED
    assert kwargs["load_text_encoder"] is False and kwargs["num_layers"] == 2
    details = service.info.details
    assert details["text_encoder"] == "text-cache" and details["text_cache"]["entries"] == 1
    assert details["fastwam_overrides"] == ["model.num_layers=2"] and details["random_test_weights"] is None
    assert len(details["checkpoint_sha256"]) == len(details["stats_sha256"]) == 64
    other = ModelService(MODEL, ModelConfig(platform="robotwin", checkpoint=str(robotwin_checkpoint),
                                            options={**options, "fastwam_override": ("model.num_layers=3",)}))
    from wamcore.artifacts import model_identity

    assert model_identity(other.info)["pins"]["fastwam_overrides_sha256"] != model_identity(service.info)["pins"][
        "fastwam_overrides_sha256"]


def test_a_checkpoint_of_another_depth_is_refused(robotwin_checkpoint, fake_upstream, tmp_path):
    """FastWAM loads ``mot`` with strict=False: a 30-layer checkpoint in a 2-layer model (or
    the reverse) would run with random layers; the worker refuses it."""
    import fastwam.runtime

    fastwam.runtime.FACTORY = lambda kwargs: CheckpointStandIn(["blocks.0.w"] + [f"blocks.{i}.w" for i in range(2, 30)])
    config = ModelConfig(platform="robotwin", checkpoint=str(robotwin_checkpoint),
                         options={"fastwam_config_dir": str(_configs(tmp_path))})
    with pytest.raises(CheckpointError, match=r"1 model tensors not in it .* 28 of its tensors not in the model"):
        ModelService(MODEL, config)


def test_an_unknown_override_is_a_configuration_error(robotwin_checkpoint, fake_upstream, tmp_path):
    config = ModelConfig(platform="robotwin", checkpoint=str(robotwin_checkpoint),
                         options={"fastwam_config_dir": str(_configs(tmp_path)), "fastwam_override": ("model.nope.x=1",)})
    with pytest.raises(ConfigurationError, match="--fastwam-override model.nope.x=1"):
        ModelService(MODEL, config)


@pytest.mark.parametrize("options, where", [({"text_cache": "/cache"}, "--text-cache -> (none: RoboTwin only"),
                                            ({"fastwam_override": ("model.x=1",)}, "--fastwam-override -> fastwam.overrides")])
def test_robotwin_only_options_are_refused_on_libero(options, where):
    from wam_fastwam.deployment import configure

    with pytest.raises(ConfigurationError, match=re.escape(where)):
        configure(MODEL, ModelConfig(platform="libero", options=options))


def test_doctor_reports_the_text_cache(tmp_path):
    from wam_fastwam.doctor import doctor_checks

    write_entry(tmp_path, TASK)
    (row,) = [c for c in doctor_checks({"text_cache": str(tmp_path)}) if c.name.endswith("text cache")]
    assert row.ok and "1 entries" in row.detail
    (row,) = [c for c in doctor_checks({"text_cache": str(tmp_path / "nope")}) if c.name.endswith("text cache")]
    assert not row.ok and "precompute_text_embeds.py" in row.detail
