"""The real Fast-WAM inference code end to end, with random weights generated from its own
classes at reduced depth (``wam fastwam-test-weights``): no stand-in at the model.

A ``wam serve`` worker spawned in the model environment ``.venv-fastwam`` (FastWAM 45d8e14
from the pinned source archive, torch CPU; ``bash .ci/install``) composes ``sim_robotwin``
with Hydra, instantiates it through ``fastwam.runtime.create_fastwam`` (the loader checks the
generated VAE against its key/shape hash registry), loads the generated checkpoint with
``FastWAM.load_checkpoint`` and answers each request with ``FastWAM.infer_action``, conditioned
on an entry of upstream's text-embedding cache (``--text-cache``, no UMT5-XXL). The client side
runs the robotwin platform on the stand-in checkout, in a process of its own
(``fastwam_real_driver.py``), which executes two chunks. Without the model environment these
tests fail: the driver cannot start the worker.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from wam_fastwam.text_cache import PROMPT_TEMPLATE, entry_name, prompt_for
from wam_fastwam.worker import ROBOTWIN_ENTRY

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
#: the model environment of these tests (.ci/install builds it)
FASTWAM_PYTHON = os.environ.get("WAMCORE_TEST_FASTWAM_PYTHON", str(REPO / ".venv-fastwam" / "bin" / "python"))
VENV = Path(FASTWAM_PYTHON).parents[1]
MISSING = "stack the cups in a pyramid"  # no text-cache entry is generated for it


def require_model_environment() -> None:
    """Fail (never skip) without the model environment, saying how to build it."""
    assert Path(FASTWAM_PYTHON).is_file(), (
        f"the Fast-WAM model environment is missing ({FASTWAM_PYTHON}): run `bash .ci/install` "
        "(or set WAMCORE_TEST_FASTWAM_PYTHON to a Python with FastWAM 45d8e14 and wam-fastwam[model])")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    """One episode fragment through a spawned worker (see the module docstring)."""
    require_model_environment()
    tmp = tmp_path_factory.mktemp("fastwam_real")
    root = tmp / "RoboTwin"
    shutil.copytree(REPO / "plugins" / "robotwin" / "tests" / "standin_checkout", root)
    for rel in ("assets/objects", "assets/background_texture"):
        (root / rel).mkdir(parents=True, exist_ok=True)
    args = {"robotwin_root": str(root), "fastwam_python": FASTWAM_PYTHON, "weights_root": str(VENV / "test-weights"),
            "log_dir": str(tmp / "logs"), "missing_instruction": MISSING, "observation_out": str(tmp / "first.npz")}
    (tmp / "args.json").write_text(json.dumps(args))
    env = {k: v for k, v in os.environ.items() if k not in ("ROBOTWIN_ROOT", "DIFFSYNTH_MODEL_BASE_PATH")}
    proc = subprocess.run([sys.executable, str(HERE / "fastwam_real_driver.py"), str(tmp / "args.json"),
                           str(tmp / "out.json")], env=env, capture_output=True, text=True, timeout=900)
    logs = "".join(p.read_text()[-3000:] for p in sorted((tmp / "logs").glob("*")) if p.is_file())
    assert proc.returncode == 0, f"{proc.stderr[-4000:]}\nworker log:\n{logs}"
    record = json.loads((tmp / "out.json").read_text())
    record["first_observation"] = str(tmp / "first.npz")
    return record


def test_real_fastwam_drives_robotwin_through_a_spawned_worker(run):
    details = run["details"]
    # the upstream code itself, from the model environment's FastWAM checkout
    assert details["entry"] == ROBOTWIN_ENTRY == "fastwam.models.wan22.fastwam.FastWAM.infer_action"
    upstream_file = Path(details["upstream_file"])
    assert upstream_file == VENV / "src" / "FastWAM" / "src" / "fastwam" / "models" / "wan22" / "fastwam.py"
    assert details["upstream"] == "FastWAM 45d8e14" and details["path"] == "official"
    assert details["worker"]["python"].startswith(str(VENV))  # the model's own environment
    # generated random weights, marked as such, conditioned through the text cache
    assert details["random_test_weights"]["random"] is True
    assert details["random_test_weights"]["fastwam_overrides"] == details["fastwam_overrides"]
    weights = Path(run["weights"])
    assert details["checkpoint_sha256"] == hashlib.sha256((weights / "random_fastwam_robotwin.pt").read_bytes()).hexdigest()
    pins = run["identity"]["pins"]  # what wam eval --resume and the artifact cache compare
    assert {"checkpoint_sha256", "stats_sha256", "fastwam_overrides_sha256", "text_cache.sha256"} <= set(pins)
    assert details["text_encoder"] == "text-cache" and details["text_cache"]["entries"] == 1
    assert (Path(run["weights"]) / "text_cache" / entry_name(prompt_for(run["instruction"]))).is_file()
    # the declared contract: 32x14 predicted (the worker refuses any other shape), 8 executed (--replan-steps)
    assert run["contract"] == {"chunk_size": 8, "horizon": 32, "action_dim": 14}
    assert run["act"]["chunks"] == 2 and run["act"]["stop_reason"] in ("completed", "native_success")
    chunks = [np.asarray(c) for c in run["chunks"]]
    assert len(chunks) == 2 and all(c.shape == (8, 14) and np.isfinite(c).all() for c in chunks)
    assert not np.array_equal(chunks[0], chunks[1])  # the second chunk saw the moved arm
    # the platform executed exactly these actions (all of them, unless the task succeeded first)
    executed = np.asarray(run["executed"])
    assert len(executed) == run["act"]["steps"] == (16 if run["act"]["stop_reason"] == "completed" else len(executed))
    np.testing.assert_array_equal(executed, np.concatenate(chunks)[:len(executed)])
    np.testing.assert_allclose(np.asarray(run["sent"]), executed, rtol=1e-6, atol=1e-6)
    assert not np.array_equal(run["start_state"], run["end_state"])


def test_the_first_chunk_is_upstreams_own_call_on_the_same_files(run, tmp_path):
    """Upstream's model built and called directly in a fresh process (fastwam_direct_call.py:
    FastWAM's compose/instantiate/load_checkpoint/infer_action, the inputs as its deploy_policy.py
    builds them, written out independently of the plugin) gives the chunk the worker gave."""
    out = tmp_path / "direct.npy"
    proc = subprocess.run([FASTWAM_PYTHON, str(HERE / "fastwam_direct_call.py"), run["weights"], run["first_observation"],
                           "3", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    direct = np.load(out)
    assert direct.shape == (32, 14) and np.isfinite(direct).all()
    np.testing.assert_allclose(np.asarray(run["chunks"][0]), direct[:8], rtol=1e-5, atol=1e-5)


def test_an_instruction_without_a_text_cache_entry_is_a_typed_actionable_error(run):
    missing = run["missing"]
    assert missing is not None and missing["type"] == "CheckpointError" and missing["module"] == "wamcore.errors"
    message = missing["message"]
    assert repr(MISSING) in message and entry_name(prompt_for(MISSING)) in message
    assert "scripts/precompute_text_embeds.py" in message and f"+override_instruction=\"{MISSING}\"" in message


def test_the_prompt_template_is_upstreams(run):
    """The worker carries FastWAM's DEFAULT_PROMPT as a constant (importing it would pull
    upstream's dataset stack); it must be upstream's text, read from the installed checkout."""
    source = Path(run["details"]["upstream_file"]).parents[2] / "datasets" / "lerobot" / "robot_video_dataset.py"
    values = [node.value.value for node in ast.parse(source.read_text()).body
              if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "DEFAULT_PROMPT" for t in node.targets)]
    assert values == [PROMPT_TEMPLATE]


def test_the_text_encoder_files_of_the_generator_are_what_upstream_reads(tmp_path):
    """``--text-encoder`` (the default deployment, for a GPU machine): the generated tokenizer
    folder is read by upstream's HuggingfaceTokenizer as the loader reads it, and the encoder
    the generator builds (WanTextEncoder()) has the key/shape hash of the loader's registry.
    The 11.4 GB file itself is not written here (a CPU machine of 24 GB)."""
    require_model_environment()
    script = f"""
import hashlib, json
from pathlib import Path
import torch
from fastwam.models.wan22.helpers import io
from fastwam.models.wan22.helpers.loader import WAN22_MODEL_REGISTRY
from fastwam.models.wan22.wan_video_text_encoder import HuggingfaceTokenizer, WanTextEncoder
from wam_fastwam.testweights import TOKENIZER_DIR, write_tokenizer
from wam_fastwam.text_cache import prompt_for
folder = write_tokenizer(Path({str(tmp_path)!r}) / TOKENIZER_DIR, [prompt_for("lift the pot")])
tok = HuggingfaceTokenizer(name=str(folder), seq_len=128, clean="whitespace")  # loader.py's call
ids, mask = tok(prompt_for("lift the pot"), return_mask=True, add_special_tokens=True)
with torch.device("meta"):
    keys = io._convert_state_dict_to_keys_dict(WanTextEncoder().state_dict())
digest = hashlib.md5(io._convert_keys_dict_to_single_str(keys).encode()).hexdigest()
print(json.dumps({{"ids": ids.tolist(), "mask": mask.tolist(), "hash": digest,
                  "registry": [e["model_hash"] for e in WAN22_MODEL_REGISTRY if e["model_name"] == "wan_video_text_encoder"]}}))
"""
    proc = subprocess.run([FASTWAM_PYTHON, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    ids, mask = np.asarray(out["ids"]), np.asarray(out["mask"])
    n = int(mask.sum())
    assert ids.shape == mask.shape == (1, 128) and n == len(re.findall(r"\w+|[^\w\s]", prompt_for("lift the pot"))) + 1
    assert ids[0, n - 1] == 1 and not ids[0, n:].any() and (ids[0, :n - 1] > 2).all()  # words, </s>, <pad>...
    assert out["registry"] == [out["hash"]]
