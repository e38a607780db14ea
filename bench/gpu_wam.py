"""``bench-dit``: a GPU model sized like a real world action model, for benchmarks only.

A wamcore model plugin module (not a distribution): load it with

    PYTHONPATH=$PYTHONPATH:bench WAMCORE_PLUGIN_MODULES=gpu_wam wam serve --am-backend bench-dit --platform libero
    PYTHONPATH=$PYTHONPATH:bench WAMCORE_PLUGIN_MODULES=gpu_wam wam eval --platform libero --am-backend bench-dit ...

The network is a DiT-style transformer with RANDOM weights (fixed seed): it costs what a
~1B-parameter WAM costs and predicts nothing useful. Per chunk it embeds the conditioning once
(16x16 patches of every camera, one state token, byte tokens of the instruction) and runs
``steps`` flow-matching forward passes over [conditioning tokens; noisy action tokens] with
joint self-attention and adaLN time modulation (adaLN-single, as PixArt), integrating
``x += v / steps`` from Gaussian noise; the chunk is ``tanh(x)``.

Defaults (``--am-option KEY=VALUE``, or ``--KEY`` where this module is importable):
``layers=20 width=2048`` (heads = width/128 = 16): 1.04e9 parameters; ``steps=8``;
bf16 on cuda, float32 on cpu; LIBERO: 2 cameras at 256 px -> 2 x 256 patch tokens + 1 state +
32 text + 16 action tokens = 561 tokens. PointMass: 1 camera at 64 px -> 16 patch tokens.

Contracts: ``libero`` as ``libero-smoke`` (both cameras, 9-D proprio gripper_qpos, eef_pos,
eef_quat; ``chunk`` actions x 7, default 16); ``pointmass`` as ``wam_pointmass.adapter.CONTRACT``
without its future camera (``chunk`` default 8). Actions are mapped into the platform's bounds
(tanh, then [low, high]); a gripper dimension is exactly ``open``/``close`` by the sign.

Determinism: the initial noise of a request comes from numpy seeded by (request seed, step)
or, without a seed, by a CRC of the observation, so it does not depend on batching; the
weights come from ``init-seed``. Outputs are identical for identical requests processed in
the same batch composition; across batch sizes bf16 kernels may differ in the last bits
(a gripper sign could flip at |x| ~ 1e-3). Run the worker with ``--batch-window-ms 0`` for
bit-reproducible runs.

Dynamic batching: ``max_batch`` (16, option ``batch-limit``) and
``predict_native_batch(native_inputs, requests) -> list`` (one output per input, in order);
``predict_native(native_input, request)`` is the batch of one.

torch is imported only by the loader (``load``), in the model's process.
"""

from __future__ import annotations

import time
import zlib
from typing import Any, Dict, List

import attrs
import numpy as np

from wamcore import Adapter, AdapterContract, Capabilities, ModelSpec, Prediction, hookimpl
from wamcore.errors import ConfigurationError, DependencyNotInstalled
from wamcore.specs import Option

NAME = "bench-dit"
DEFAULT_LAYERS = 20
DEFAULT_WIDTH = 2048
HEAD_DIM = 128
DEFAULT_STEPS = 8
MAX_BATCH = 16
TEXT_VOCAB = 257  # bytes + padding
PAD = 256


@attrs.frozen
class Layout:
    """What the network sees on one platform."""

    cameras: tuple
    state_keys: tuple
    state_dim: int
    action_dim: int
    chunk: int
    image_size: int
    low: tuple
    high: tuple
    gripper: Any  # GripperSpec or None


LAYOUTS: Dict[str, Layout] = {}
ADAPTERS: List[Adapter] = []


# ----------------------------------------------------------------------------- adapters


def _tokens(text: str, n: int) -> np.ndarray:
    raw = np.frombuffer(text.encode("utf-8")[:n], dtype=np.uint8).astype(np.int64)
    out = np.full(n, PAD, dtype=np.int64)
    out[: len(raw)] = raw
    return out


def _entropy(request, images, state) -> list:
    step = int(request.observation.step)
    if request.seed is not None:
        return [int(request.seed) & 0xFFFFFFFF, step]
    crc = zlib.crc32(state.tobytes())
    for img in images:
        crc = zlib.crc32(np.ascontiguousarray(img).tobytes(), crc)
    return [crc, step]


def _make_encode(layout: Layout):
    def encode(request) -> dict:
        obs = request.observation
        images = [obs.images[c] for c in layout.cameras]
        state = np.concatenate([np.asarray(obs.state[k], dtype=np.float32).ravel() for k in layout.state_keys])
        return {
            "images": images,
            "state": state,
            "text": request.effective_instruction,
            "entropy": _entropy(request, images, state),
        }

    return encode


def _make_decode(layout: Layout):
    low = np.asarray(layout.low, dtype=np.float32)
    high = np.asarray(layout.high, dtype=np.float32)

    def decode(native, request) -> Prediction:
        unit = np.clip(np.asarray(native, dtype=np.float32), -1.0, 1.0)  # tanh output
        actions = low + (unit + 1.0) * 0.5 * (high - low)
        if layout.gripper is not None:
            for i in layout.gripper.indices:
                actions[:, i] = np.where(unit[:, i] >= 0.0, layout.gripper.close, layout.gripper.open)
        actions = np.clip(actions, low, high).astype(np.float32)
        return Prediction(actions=actions, info={"bench_dit": True})

    return decode


def _register_layout(platform: str, layout: Layout, contract: AdapterContract) -> None:
    LAYOUTS[platform] = layout
    ADAPTERS.append(Adapter(contract=contract, encode=_make_encode(layout), decode=_make_decode(layout)))


try:  # LIBERO: the libero-smoke contract (wam_libero.scripted), chunk 16
    from wam_libero.spec import ACTION_SPACE as _LIBERO_SPACE
    from wam_libero.spec import LIBERO_CONTROL as _LIBERO_CONTROL
    from wam_libero.spec import PLATFORM as _LIBERO
    from wam_libero.spec import STATE_SIZES as _LIBERO_STATE
except ImportError:  # wam-libero not installed here: no libero adapter
    pass
else:
    _keys = ("gripper_qpos", "eef_position", "eef_quaternion_xyzw")
    _register_layout(
        _LIBERO,
        Layout(
            cameras=("primary", "wrist"),
            state_keys=_keys,
            state_dim=sum(_LIBERO_STATE[k] for k in _keys),
            action_dim=7,
            chunk=16,
            image_size=256,
            low=_LIBERO_CONTROL.low,
            high=_LIBERO_CONTROL.high,
            gripper=_LIBERO_CONTROL.gripper,
        ),
        AdapterContract(
            platform=_LIBERO,
            action_space=_LIBERO_SPACE,
            action_dim=7,
            cameras={"primary": None, "wrist": None},
            state={k: _LIBERO_STATE[k] for k in _keys},
            chunk_size=16,
        ),
    )

try:  # PointMass: the reference WAM's contract without its future camera
    from wam_pointmass.adapter import CONTRACT as _PM_CONTRACT
    from wam_pointmass.spec import POINTMASS_CONTROL as _PM_CONTROL
except ImportError:
    pass
else:
    _register_layout(
        _PM_CONTRACT.platform,
        Layout(
            cameras=tuple(_PM_CONTRACT.cameras),
            state_keys=tuple(_PM_CONTRACT.state),
            state_dim=sum(_PM_CONTRACT.state.values()),
            action_dim=_PM_CONTRACT.action_dim,
            chunk=_PM_CONTRACT.chunk_size,
            image_size=64,
            low=_PM_CONTROL.low,
            high=_PM_CONTROL.high,
            gripper=_PM_CONTROL.gripper,
        ),
        attrs.evolve(_PM_CONTRACT, future_cameras=()),
    )


def _chunk_for(layout: Layout, options) -> int:
    chunk = options.get("chunk")
    return int(chunk) if chunk else layout.chunk


def _configure(spec: ModelSpec, config) -> ModelSpec:
    """``chunk`` is a deployment option: the contracts declare it."""
    adapters = []
    for a in spec.adapters:
        chunk = _chunk_for(LAYOUTS[a.platform], config.options)
        if chunk < 1:
            raise ConfigurationError(f"--chunk must be >= 1, got {chunk}")
        adapters.append(attrs.evolve(a, contract=attrs.evolve(a.contract, chunk_size=chunk, horizon=chunk)))
    return attrs.evolve(spec, adapters=tuple(adapters), configure=None)


# ----------------------------------------------------------------------------- network (torch, lazily)


def _torch():
    try:
        import torch
    except ImportError as exc:
        raise DependencyNotInstalled("torch", "pip install torch", "the bench-dit model") from exc
    return torch


def _build_network(torch, *, layers, width, heads, cameras, patch, image_size, state_dim, text_tokens, action_dim, chunk):
    nn = torch.nn
    F = torch.nn.functional

    def modulate(x, shift, scale):
        return x * (1 + scale[:, None]) + shift[:, None]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.heads = heads
            self.norm1 = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
            self.qkv = nn.Linear(width, 3 * width)
            self.proj = nn.Linear(width, width)
            self.norm2 = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
            self.fc1 = nn.Linear(width, 4 * width)
            self.fc2 = nn.Linear(4 * width, width)
            self.table = nn.Parameter(torch.randn(6, width) / width**0.5)

        def forward(self, x, mod):
            b, n, d = x.shape
            shift1, scale1, gate1, shift2, scale2, gate2 = (mod + self.table).unbind(1)
            qkv = self.qkv(modulate(self.norm1(x), shift1, scale1)).view(b, n, 3, self.heads, d // self.heads)
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
            a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d)
            x = x + gate1[:, None] * self.proj(a)
            h = self.fc2(F.gelu(self.fc1(modulate(self.norm2(x), shift2, scale2)), approximate="tanh"))
            return x + gate2[:, None] * h

    class BenchDiTNet(nn.Module):
        def __init__(self):
            super().__init__()
            n_patch = (image_size // patch) ** 2
            self.patch = nn.Conv2d(3, width, patch, stride=patch)
            self.image_pos = nn.Parameter(torch.randn(cameras, n_patch, width) * 0.02)
            self.state_in = nn.Linear(state_dim, width)
            self.text = nn.Embedding(TEXT_VOCAB, width)
            self.text_pos = nn.Parameter(torch.randn(text_tokens, width) * 0.02)
            self.action_in = nn.Linear(action_dim, width)
            self.action_pos = nn.Parameter(torch.randn(chunk, width) * 0.02)
            self.time = nn.Sequential(nn.Linear(256, width), nn.SiLU(), nn.Linear(width, width))
            self.time_mod = nn.Sequential(nn.SiLU(), nn.Linear(width, 6 * width))  # adaLN-single
            self.blocks = nn.ModuleList([Block() for _ in range(layers)])
            self.final_norm = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
            self.final_mod = nn.Linear(width, 2 * width)
            self.action_out = nn.Linear(width, action_dim)

        def condition(self, images, state, text):
            """[B, N_cond, width]: patch tokens of each camera, one state token, text tokens."""
            tokens = [self.patch(img).flatten(2).transpose(1, 2) + self.image_pos[c] for c, img in enumerate(images)]
            tokens.append(self.state_in(state)[:, None])
            tokens.append(self.text(text) + self.text_pos)
            return torch.cat(tokens, 1)

        def forward(self, x, t, cond):
            """Velocity of the action chunk ``x`` [B, chunk, action_dim] at flow time ``t`` [B]."""
            half = 128
            freqs = torch.exp(-np.log(10000.0) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
            angles = (t.float() * 1000.0)[:, None] * freqs[None]
            temb = self.time(torch.cat([angles.cos(), angles.sin()], -1).to(x.dtype))
            mod = self.time_mod(temb).view(x.shape[0], 6, -1)
            h = torch.cat([cond, self.action_in(x) + self.action_pos], 1)
            for block in self.blocks:
                h = block(h, mod)
            shift, scale = self.final_mod(F.silu(temb)).chunk(2, -1)
            return self.action_out(modulate(self.final_norm(h[:, -chunk:]), shift, scale))

    return BenchDiTNet()


class BenchDiT:
    """The native model: numpy in, numpy out; batches up to ``max_batch`` requests per call."""

    max_batch = MAX_BATCH
    uses_sessions = False

    def __init__(self, config):
        torch = self._torch = _torch()
        opts = config.options
        platform = config.platform
        if platform not in LAYOUTS:
            raise ConfigurationError(f"bench-dit has no layout for platform {platform!r} (it has {sorted(LAYOUTS)})")
        self.layout = layout = LAYOUTS[platform]
        self.layers = int(opts.get("layers") or DEFAULT_LAYERS)
        self.width = int(opts.get("width") or DEFAULT_WIDTH)
        self.heads = int(opts.get("heads") or max(1, self.width // HEAD_DIM))
        self.steps = int(opts.get("steps") or DEFAULT_STEPS)
        self.patch = int(opts.get("patch") or 16)
        self.image_size = int(opts.get("image_size") or layout.image_size)
        self.text_tokens = int(opts.get("text_tokens") or 32)
        self.chunk = _chunk_for(layout, opts)
        self.max_batch = int(opts.get("batch_limit") or MAX_BATCH)
        init_seed = int(opts.get("init_seed") or 0)
        if self.width % self.heads or self.image_size % self.patch or min(self.layers, self.steps, self.max_batch) < 1:
            raise ConfigurationError(
                f"bench-dit: width {self.width} must be a multiple of heads {self.heads}, image-size {self.image_size} "
                f"of patch {self.patch}; layers, steps and batch-limit must be >= 1")

        requested = str(opts.get("device") or "auto").lower()
        if requested == "auto":
            requested = "cuda" if torch.cuda.is_available() else "cpu"
        if requested.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigurationError(f"--device {requested}: torch {torch.__version__} sees no CUDA device")
        self.device = requested
        dtype = str(opts.get("dtype") or "auto")
        if dtype == "auto":
            dtype = "bfloat16" if self.device.startswith("cuda") else "float32"
        self.dtype = getattr(torch, dtype)

        t0 = time.perf_counter()
        torch.manual_seed(init_seed)
        with torch.device(self.device):
            net = _build_network(
                torch, layers=self.layers, width=self.width, heads=self.heads, cameras=len(layout.cameras),
                patch=self.patch, image_size=self.image_size, state_dim=layout.state_dim,
                text_tokens=self.text_tokens, action_dim=layout.action_dim, chunk=self.chunk,
            )
        self.net = net.to(self.dtype).eval().requires_grad_(False)
        self.params = sum(p.numel() for p in self.net.parameters())
        self.tokens = len(layout.cameras) * (self.image_size // self.patch) ** 2 + 1 + self.text_tokens + self.chunk
        self.checkpoint = f"random-init:L{self.layers}-W{self.width}-seed{init_seed}"
        self.timeout_s = 120.0 if self.device.startswith("cuda") else 600.0
        self.details = {
            "params": int(self.params), "layers": self.layers, "width": self.width, "heads": self.heads,
            "steps": self.steps, "tokens": self.tokens, "dtype": dtype, "max_batch": self.max_batch,
            "image_size": self.image_size,
        }
        if opts.get("warmup", True):
            self._warmup()
        self.details["load_s"] = round(time.perf_counter() - t0, 2)

    # -- wamcore NativeModel

    def predict_native(self, native_input: dict, request=None) -> np.ndarray:
        return self.predict_native_batch([native_input], [request])[0]

    def predict_native_batch(self, native_inputs: list, requests: list) -> list:
        out: list = []
        for i in range(0, len(native_inputs), self.max_batch):
            out.extend(self._run(native_inputs[i : i + self.max_batch]))
        return out

    def close(self) -> None:
        self.net = None
        if self.device.startswith("cuda"):
            self._torch.cuda.empty_cache()

    # -- internals

    def _images(self, batch: list, c: int):
        torch = self._torch
        arrays = [np.asarray(n["images"][c]) for n in batch]
        for a in arrays:
            if a.dtype != np.uint8 or a.ndim != 3 or a.shape[2] != 3:
                raise ValueError(f"bench-dit: camera {self.layout.cameras[c]!r} must be HxWx3 uint8, got {a.dtype} {a.shape}")
        same = all(a.shape == arrays[0].shape for a in arrays)
        groups = [np.stack(arrays)] if same else [a[None] for a in arrays]
        parts = []
        for g in groups:
            x = torch.from_numpy(g).to(self.device, non_blocking=True).permute(0, 3, 1, 2).to(self.dtype)
            x = x / 127.5 - 1.0
            if x.shape[-2:] != (self.image_size, self.image_size):
                x = torch.nn.functional.interpolate(x, size=(self.image_size, self.image_size), mode="bilinear", align_corners=False)
            parts.append(x)
        return torch.cat(parts) if len(parts) > 1 else parts[0]

    def _run(self, batch: list) -> list:
        torch = self._torch
        layout = self.layout
        states = np.stack([np.asarray(n["state"], dtype=np.float32) for n in batch])
        if states.shape[1] != layout.state_dim or not np.isfinite(states).all():
            raise ValueError(f"bench-dit: state must be {layout.state_dim} finite floats")
        text = np.stack([_tokens(str(n["text"]), self.text_tokens) for n in batch])
        noise = np.stack([
            np.random.default_rng(n["entropy"]).standard_normal((self.chunk, layout.action_dim)).astype(np.float32)
            for n in batch
        ])
        with torch.inference_mode():
            images = [self._images(batch, c) for c in range(len(layout.cameras))]
            state = torch.from_numpy(states).to(self.device).to(self.dtype)
            cond = self.net.condition(images, state, torch.from_numpy(text).to(self.device))
            x = torch.from_numpy(noise).to(self.device).to(self.dtype)
            b = len(batch)
            for k in range(self.steps):  # Euler steps of the flow from noise (t=0) to actions (t=1)
                t = torch.full((b,), k / self.steps, device=self.device)
                x = x + self.net(x, t, cond) / self.steps
            unit = torch.tanh(x.float()).cpu().numpy()
        return [unit[i] for i in range(b)]

    def _warmup(self) -> None:
        layout = self.layout
        dummy = {
            "images": [np.zeros((self.image_size, self.image_size, 3), np.uint8) for _ in layout.cameras],
            "state": np.zeros(layout.state_dim, np.float32),
            "text": "warm up",
            "entropy": [0, 0],
        }
        self._run([dummy])
        if self.device.startswith("cuda"):
            self._torch.cuda.synchronize()


def load(config) -> BenchDiT:
    return BenchDiT(config)


BENCH_DIT = ModelSpec(
    name=NAME,
    load=load,
    adapters=ADAPTERS,
    capabilities=Capabilities(actions=True),
    configure=_configure,
    options=(
        Option("layers", "int", DEFAULT_LAYERS, help="Transformer blocks (default 20: ~1.04B parameters at width 2048)."),
        Option("width", "int", DEFAULT_WIDTH, help="Hidden size (heads = width / 128 unless --heads)."),
        Option("heads", "int", None, help="Attention heads (default width / 128)."),
        Option("steps", "int", DEFAULT_STEPS, help="Denoising forward passes per chunk."),
        Option("device", "choice", "auto", choices=("auto", "cpu", "cuda"), help="auto: cuda when torch sees a GPU."),
        Option("dtype", "choice", "auto", choices=("auto", "bfloat16", "float16", "float32"),
               help="auto: bfloat16 on cuda, float32 on cpu."),
        Option("chunk", "int", None, help="Actions per chunk (default: 16 for libero, 8 for pointmass)."),
        Option("image-size", "int", None, help="Cameras are resized to this square (default: 256 libero, 64 pointmass)."),
        Option("patch", "int", 16, help="Patch size of the image tokens."),
        Option("text-tokens", "int", 32, help="Instruction byte tokens (truncated/padded)."),
        Option("batch-limit", "int", MAX_BATCH, help="Largest batch one forward pass takes (the worker batches up to it)."),
        Option("init-seed", "int", 0, help="Seed of the random weights."),
        Option("warmup", "bool", True, help="Run one prediction at load time (CUDA kernels and cuBLAS initialised)."),
    ),
    description="Benchmark-only DiT-style WAM with random weights (~1B parameters by default; torch, GPU).",
    install="PYTHONPATH=bench WAMCORE_PLUGIN_MODULES=gpu_wam (a module of the wamcore repo's bench/)",
    timeout_s=120.0,
)


@hookimpl
def wam_register_models(register):
    register(BENCH_DIT)
