"""The model side: load StarWAM in its own environment and call it at the upstream boundary.

* LIBERO: the model is built as ``examples/libero/rollout.py`` builds it (``load_config`` of
  the family's recipe with overrides, ``starwam.build_framework``, the checkpoint loaded
  non-strictly, ``eval()``); each prediction is one ``model.infer_action(...)`` call with
  rollout's arguments (``_predict_action_chunk``).
* RoboTwin: upstream's own ``starwam.eval.policy.StarwamPolicy`` (the core of
  ``examples/robotwin/policy_server.py``); each prediction is one ``policy.predict_chunk``.
* ``--policy-server``: no model here; a client of a running upstream policy server
  (``wam_starwam.server_client``).
* A batch of concurrent sessions' predictions (and, with ``--cuda-graphs``, every prediction)
  runs through the family's batched path, composed from upstream's modules with each
  request's own noise generator (``wam_starwam.batched``; ``wamcore.cuda_graphs``).

Start-up order: options, files and pins, stats, the upstream package, the recipe, then the
weights, each failure a typed error that says what to do. Every upstream call that loads a
file runs inside ``upstream.weights_only_loads``. torch and StarWAM are imported only here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import numpy as np

from wamcore.contracts import PredictRequest
from wamcore.errors import CheckpointError, ConfigurationError
from wamcore.specs import ModelConfig, normalize_id

from . import checkpoint, text_cache, upstream
from .families import LIBERO, ROBOTWIN
from .libero import ACTION_DIM as LIBERO_DIM
from .chunks import HORIZON, as_chunk
from .libero import gripper_to_libero
from .normalization import Stats, load_stats
from .robotwin import ACTION_DIM as ROBOTWIN_DIM
from .robotwin import compose_image
from .settings import Settings
from .vae import use_vae_dtype

#: a marker the test-weight generator writes beside what it generates (``testweights``)
RANDOM_MARKER = "STARWAM_RANDOM_TEST_WEIGHTS.json"
DIMS = {LIBERO: (LIBERO_DIM, 8), ROBOTWIN: (ROBOTWIN_DIM, 14)}
#: the most requests one batched call takes (the largest CUDA-graph bucket, ``wamcore.cuda_graphs.BUCKETS``)
MAX_BATCH = 32


def load(config: ModelConfig):
    """``ModelSpec.load``: the native model for ``config.platform``."""
    platform = normalize_id(config.platform)
    if platform not in DIMS:
        raise ConfigurationError(f"StarWAM has no adapter for {config.platform!r} (it serves libero and robotwin)")
    settings = Settings.from_options(platform, config.options)
    if settings.policy_server:
        from .server_client import PolicyServerClient

        return PolicyServerClient(*settings.policy_server, settings=settings)
    fam = settings.family
    try:
        files = checkpoint.resolve(config.checkpoint, fam, backbone=settings.backbone,
                                   action_stats=settings.action_stats, text_cache=settings.text_cache)
    except CheckpointError as exc:  # without the package too, say both: install, then download
        upstream.require(f"StarWAM on {platform}; then the files: {exc}", robotwin=platform == ROBOTWIN)
        raise
    checkpoint.verify(files, checkpoint.pins(settings.am_pins))
    action_dim, state_dim = DIMS[platform]
    stats = load_stats(files.stats, platform, action_dim=action_dim, state_dim=state_dim)
    upstream.require(f"StarWAM on {platform}", robotwin=platform == ROBOTWIN)
    recipe = Path(settings.recipe).expanduser() if settings.recipe else upstream.checkout_root(settings.starwam_root) / fam.recipe

    import torch

    device = torch.device(config.device or ("cuda:0" if torch.cuda.is_available() else "cpu"))
    if settings.cuda_graphs:
        from wamcore.cuda_graphs import require_cuda

        require_cuda(device)
    overrides = [
        f"backbone.pretrained_model_id={files.backbone}",
        "framework.action_expert_init_from=null",  # the checkpoint holds every weight
        f"data.action_stats_path={files.stats}",
        f"data.state_stats_path={files.stats}",
        "data.text_embedding_cache_dir=null",  # entries are read here, safely (text_cache)
        "data.dataset_dirs=[]",
    ]
    details = {
        "upstream": upstream.LABEL,
        "recipe": str(recipe),
        "weights_sha256": checkpoint.identity_hashes(files),
        "stats_sha256": stats.sha256,
        "text_cache": settings.text_cache,
        "random_test_weights": _random_marker(files),
        **settings.identity(),
    }
    with upstream.weights_only_loads():
        if platform == LIBERO:
            native = _load_libero(recipe, overrides, files, settings, stats, device)
        else:
            native = _load_robotwin(recipe, overrides, files, settings, device)
    native.details = {**details, **native.details}
    native.checkpoint = str(files.checkpoint[0])
    native.device = str(device)
    return native


def _random_marker(files) -> Optional[dict]:
    """The generator's record when these are generated random weights (never real ones)."""
    import json

    for folder in {files.checkpoint[0].parent, files.backbone}:
        marker = folder / RANDOM_MARKER
        if marker.is_file():
            return json.loads(marker.read_text())
    return None


def _check_recipe(cfg, settings: Settings, recipe: Path) -> None:
    fam = settings.family
    problems = []
    if tuple(int(x) for x in cfg.data.video_size) != fam.video_size:
        problems.append(f"data.video_size {list(cfg.data.video_size)} differs from the {fam.name} family's {list(fam.video_size)}")
    if str(cfg.taxonomy.model_family) != fam.taxonomy:
        problems.append(f"taxonomy.model_family {cfg.taxonomy.model_family!r} is not the {fam.name} family's {fam.taxonomy!r}")
    if int(cfg.framework.chunk_size) != HORIZON:
        problems.append(f"framework.chunk_size {cfg.framework.chunk_size} is not {HORIZON}")
    if problems:
        raise ConfigurationError(f"recipe {recipe}: " + "; ".join(problems) + " (choose --checkpoint-family or --recipe to match)")


class TextConditioning:
    """Instruction -> (context, mask) as upstream computes them: a cache entry read safely, else
    the backbone's UMT5 (built once, on the first miss), else a typed error."""

    def __init__(self, settings: Settings, backbone: Path, text_dim: int, device, dtype):
        self.cache_dir = Path(settings.text_cache).expanduser() if settings.text_cache else None
        self.backbone = backbone
        self.text_dim = text_dim
        self.device, self.dtype = device, dtype
        self._memo: dict = {}
        self._encoder = None

    def __call__(self, task: str):
        if task not in self._memo:
            self._memo[task] = self._lookup(task)
        return self._memo[task]

    def _lookup(self, task: str):
        path = text_cache.cache_path(self.cache_dir, task) if self.cache_dir else None
        if path is not None and path.is_file():
            return text_cache.read_entry(path, prompt=text_cache.prompt_for(task), text_len=text_cache.TEXT_LEN,
                                         text_dim=self.text_dim)
        if not text_cache.has_encoder(str(self.backbone)):
            raise text_cache.missing_entry_error(task, path, str(self.backbone))
        import torch

        if self._encoder is None:
            from starwam.backbone.wan22 import Wan22TextEncoder

            with upstream.weights_only_loads():
                self._encoder = Wan22TextEncoder(
                    ckpt_path=str(self.backbone / text_cache.T5_FILE),
                    tokenizer_path=str(self.backbone / text_cache.TOKENIZER_DIR),
                    text_len=text_cache.TEXT_LEN, device=str(self.device),
                    dtype=torch.bfloat16 if self.device.type == "cuda" else torch.float32,
                )
        with torch.no_grad():
            context, mask = self._encoder.encode([text_cache.prompt_for(task)])
        return context[0].cpu(), mask[0].cpu()


class BatchedModel:
    """What the LIBERO and RoboTwin models share: a batched path (``wam_starwam.batched``) for
    the family when it has one (``max_batch`` 32, else 1), optionally replayed from CUDA graphs.

    ``predict_native_batch`` conditions each request on its own first (image, text, state):
    one that fails there (an instruction without a text-cache entry) gets its own error in
    its slot and the others still run."""

    max_batch = 1
    composer = None

    def batch_with(self, composer, why: str, cuda_graphs: bool) -> None:
        """Serve batches through ``composer`` (``batched.composer_for``), or one at a time (``why``)."""
        self.composer = composer
        if cuda_graphs:
            if composer is None:
                raise ConfigurationError(f"--cuda-graphs captures the batched path, which this model has not: {why}")
            composer.use_cuda_graphs()
        self.max_batch = MAX_BATCH if composer is not None else 1
        self.details["batching"] = {"max_batch": self.max_batch, "why_not": why or None,
                                    **(self.composer.identity() if self.composer is not None else {})}

    def _conditioned(self, native: dict, request: PredictRequest):
        raise NotImplementedError

    def _restored(self, pred) -> np.ndarray:
        raise NotImplementedError

    def _batch_of_one(self, native: dict, request: PredictRequest) -> np.ndarray:
        (out,) = self.predict_native_batch([native], [request])
        if isinstance(out, Exception):
            raise out
        return out

    def predict_native_batch(self, natives: list, requests: list) -> list:
        import torch

        outputs: list = [None] * len(natives)
        rows = []
        for i, (native, request) in enumerate(zip(natives, requests)):
            try:
                rows.append((i, self._conditioned(native, request)))
            except Exception as exc:  # this request's own inputs: only it fails
                outputs[i] = exc
        if rows:
            parts = list(zip(*(r for _, r in rows)))
            stacked = [None if p[0] is None else torch.cat(p, dim=0) for p in parts[:4]]
            pred = self.composer(*stacked, list(parts[4])).float().cpu()  # one copy to the host, not one per row
            for (i, _), row in zip(rows, pred.split(1, dim=0)):
                outputs[i] = self._restored(row)
        return outputs


class LiberoModel(BatchedModel):
    """rollout.py's ``_predict_action_chunk`` with the adapter's inputs: one ``infer_action``
    call per prediction; a batch (or, with ``--cuda-graphs``, any prediction) through the
    family's batched path."""

    def __init__(self, model: Any, cfg: Any, settings: Settings, stats: Stats, text: TextConditioning, device, dtype):
        self.model, self.cfg, self.settings, self.stats, self.text = model, cfg, settings, stats, text
        self.torch_device, self.dtype = device, dtype
        self.num_video_frames = len(range(0, int(cfg.data.num_frames), max(1, int(cfg.data.action_freq_ratio))))
        self.details: dict = {}
        self._on_device: dict = {}  # instruction -> (context, mask) on the model's device: copied once, not per call

    def _text_on_device(self, task: str):
        if task not in self._on_device:
            context, mask = self.text(task)
            self._on_device[task] = (context.unsqueeze(0).to(device=self.torch_device, dtype=self.dtype),
                                     mask.unsqueeze(0).to(device=self.torch_device))
        return self._on_device[task]

    def _conditioned(self, native: dict, request: PredictRequest):
        """``(image [1,3,H,W], context [1,L,D], mask [1,L], proprio [1,8], seed)`` on the model's device.
        The frame travels as uint8 and is scaled there (the same float32 operations, a quarter
        of the bytes)."""
        import torch

        device, dtype = self.torch_device, self.dtype
        pixels = torch.as_tensor(np.ascontiguousarray(native["image"])).to(device)
        image = pixels.to(torch.float32).permute(2, 0, 1).unsqueeze(0) * (2.0 / 255.0) - 1.0
        context, mask = self._text_on_device(native["instruction"])
        proprio = torch.from_numpy(self.stats.normalize_state_minmax(native["proprio"])).view(1, -1)
        return (image.to(dtype=dtype), context, mask, proprio.to(device=device, dtype=dtype),
                self.settings.seed_for(request.seed))

    def _restored(self, pred) -> np.ndarray:
        return gripper_to_libero(self.stats.restore_action_minmax(as_chunk(pred, LIBERO_DIM)))

    def predict_native(self, native: dict, request: PredictRequest) -> np.ndarray:
        import torch

        if self.settings.cuda_graphs:
            return self._batch_of_one(native, request)
        image, context, mask, proprio, seed = self._conditioned(native, request)
        kwargs = {"proprio": proprio, "num_video_frames": self.num_video_frames}
        if self.settings.action_inference_steps:
            kwargs["action_num_inference_steps"] = self.settings.action_inference_steps
        with torch.no_grad():
            pred = self.model.infer_action(input_image=image, context=context, context_mask=mask, action_horizon=HORIZON,
                                           num_inference_steps=self.settings.num_inference_steps, seed=seed, **kwargs)
        return self._restored(pred)


def _model_dtype(cfg, device):
    import torch

    if device.type == "cpu":
        return torch.float32  # upstream: float32 on CPU whatever the recipe says
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get((cfg.training.mixed_precision or "no").lower(), torch.float32)


def _load_libero(recipe: Path, overrides: list, files, settings: Settings, stats: Stats, device) -> LiberoModel:
    from starwam import build_framework

    from .batched import composer_for
    from starwam.config import load_config
    from starwam.utils.config_cli import apply_overrides

    cfg = apply_overrides(load_config(recipe), overrides)
    _check_recipe(cfg, settings, recipe)
    dtype = _model_dtype(cfg, device)
    model = build_framework(cfg, device=str(device), dtype=dtype).to(device)
    loaded = checkpoint.load_into(model, files.checkpoint)
    model.eval()
    use_vae_dtype(model.backbone, settings.vae_dtype)
    text_dim = int(model.backbone.info.text_dim)
    native = LiberoModel(model, cfg, settings, stats, TextConditioning(settings, files.backbone, text_dim, device, dtype),
                         device, dtype)
    native.batch_with(*composer_for(model, horizon=HORIZON, steps=settings.num_inference_steps,
                                    num_video_frames=native.num_video_frames,
                                    action_steps=settings.action_inference_steps), cuda_graphs=settings.cuda_graphs)
    native.details.update({"entry": "MoTWAM/SharedDiTWAM/FeatureConditioned infer_action (rollout.py)",
                           "checkpoint_tensors": loaded, "dtype": str(dtype).replace("torch.", "")})
    return native


class RoboTwinModel(BatchedModel):
    """upstream ``StarwamPolicy``: one ``predict_chunk`` per prediction, its text cache filled
    here; a batch (or, with ``--cuda-graphs``, any prediction) through the MoT batched path on
    ``policy.model``, with StarwamPolicy's own state normalisation and action restoration."""

    def __init__(self, policy: Any, settings: Settings, text: TextConditioning):
        self.policy, self.settings, self.text = policy, settings, text
        self.details: dict = {}

    def _fill_text(self, task: str) -> None:
        if task not in self.policy._text_cache:  # StarwamPolicy looks here before its own (unsafe) reader
            context, mask = self.text(task)
            self.policy._text_cache[task] = (context.unsqueeze(0), mask.unsqueeze(0))

    def _conditioned(self, native: dict, request: PredictRequest):
        """``predict_chunk``'s inputs to ``infer_action``, as it builds them."""
        import torch
        from starwam.eval.policy import _normalize_vector

        policy = self.policy
        image = compose_image(native["head"], native["left"], native["right"], policy.device, policy.dtype)
        self._fill_text(native["instruction"])
        context, mask = policy._encode_context(native["instruction"])
        proprio, dim = None, getattr(policy.config.framework, "proprio_dim", None)
        if dim:
            proprio = torch.as_tensor(np.asarray(native["state"], dtype=np.float32)[:int(dim)]).view(1, int(dim))
            if policy._state_stats is not None:
                proprio = _normalize_vector(proprio, policy.config.data.state_norm_mode, policy._state_stats)
            proprio = proprio.to(device=policy.device, dtype=policy.dtype)
        return image, context, mask, proprio, self.settings.seed_for(request.seed)

    def _restored(self, pred) -> np.ndarray:
        from starwam.eval.policy import _denormalize_action

        action = pred.detach().float().cpu()
        if self.policy._action_stats is not None:
            action = _denormalize_action(action, self.policy.config.data.action_norm_mode, self.policy._action_stats)
        return as_chunk(action, ROBOTWIN_DIM)

    def predict_native(self, native: dict, request: PredictRequest) -> np.ndarray:
        if self.settings.cuda_graphs:
            return self._batch_of_one(native, request)
        task = native["instruction"]
        self._fill_text(task)
        self.policy.seed = self.settings.seed_for(request.seed)
        image = compose_image(native["head"], native["left"], native["right"], self.policy.device, self.policy.dtype)
        return as_chunk(self.policy.predict_chunk(image, native["state"], task), ROBOTWIN_DIM)

    def reset(self) -> None:
        self.policy.reset()


def _load_robotwin(recipe: Path, overrides: list, files, settings: Settings, device) -> RoboTwinModel:
    from starwam.eval.policy import StarwamPolicy

    from .batched import composer_for
    from starwam.config import load_config
    from starwam.utils.config_cli import apply_overrides

    _check_recipe(apply_overrides(load_config(recipe), overrides), settings, recipe)
    if len(files.checkpoint) != 1:
        raise ConfigurationError("StarWAM on RoboTwin loads one checkpoint file or folder; pass the folder as --am-checkpoint")
    policy = StarwamPolicy(
        config_path=str(recipe),
        checkpoint=str(files.checkpoint[0]),
        overrides=overrides,
        device=str(device),
        num_inference_steps=settings.num_inference_steps,
        replan_steps=settings.replan_steps,
        seed=settings.noise_seed,
    )
    expected = set(policy.model.state_dict())
    checkpoint.check_coverage(sorted(expected - set(checkpoint.load_state(files.checkpoint))), files.checkpoint)
    use_vae_dtype(policy.model.backbone, settings.vae_dtype)
    text_dim = int(policy.model.backbone.info.text_dim)
    native = RoboTwinModel(policy, settings, TextConditioning(settings, files.backbone, text_dim, policy.device, policy.dtype))
    native.batch_with(*composer_for(policy.model, horizon=HORIZON, steps=policy.num_inference_steps,
                                    num_video_frames=policy._sampled_video_frame_count()), cuda_graphs=settings.cuda_graphs)
    native.details.update({"entry": "starwam.eval.policy.StarwamPolicy.predict_chunk",
                           "dtype": str(policy.dtype).replace("torch.", "")})
    return native


__all__ = ["load", "BatchedModel", "LiberoModel", "RoboTwinModel", "TextConditioning", "RANDOM_MARKER", "MAX_BATCH"]
