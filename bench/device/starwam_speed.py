"""StarWAM at GPU speed, in one device call: upstream's chunk against the plugin's batched
path (``wam_starwam.batched``), eager and with ``--cuda-graphs`` (``wamcore.cuda_graphs``: the
whole chunk after the noise, the VAE encode included, replayed from one graph per bucket).

Full-size StarWAM a7b05c8 (``--layers 0``: the Wan2.2-TI2V-5B defaults upstream falls back
to) with weights generated from upstream's own classes, bf16, nothing downloaded. Stages,
each written to ``--out`` as soon as it is done (a timeout still returns what was measured):

  env        torch, GPU, what the image has
  peak       the bf16 matmul rate of this GPU (8192^3, median of 20), the utilisation baseline
  libero     build the LIBERO MoT recipe (build time, parameters, memory)
  base       upstream ``examples/libero/rollout.py`` ``_predict_action_chunk`` p50: the baseline
  exact      the batched path at batch 1 against upstream ``infer_action``, same seed (max abs diff)
  flops      FLOPs of one chunk (torch.utils.flop_counter), the utilisation numerator
  eager      the batched path per batch size: ms per call and per observation, utilisation,
             peak memory, and how far request 0's chunk moves from its batch-1 chunk
  graphs     the same with CUDA graphs (capture time of each bucket), and the difference to eager
  vae        the VAE encode alone per batch size, eager and captured: its share of a chunk
  plugin     the worker's whole path with CUDA graphs per batch size (``--plugin-batches``):
             adapter-encoded uint8 frames through ``LiberoModel.predict_native_batch`` (frames to
             the device, text lookup, noise, replay, one copy back, action restoration)
  vae_bf16   ``--vae-dtype bfloat16`` (``--vae-bf16-batches``; not run by default): the LIBERO chunks
             with CUDA graphs (off CUDA: eager) at float32, then the VAE cast to bfloat16 and the
             same sweep; per batch size the max abs difference of the bf16 chunks from float32's
             (same inputs, same seeds) and the speed-up against the float32 sweep of this run
  robotwin   the RoboTwin MoT recipe: exactness at batch 1, eager and graphs at a few batch sizes
             (``--robotwin-batches ''`` skips it)

``--skip`` names stages not to run (``--skip base,flops,libero_eager,vae,plugin`` with
``--robotwin-batches ''`` leaves build, exactness, graphs and ``vae_bf16``).

Run on the H200 (see docs/models/starwam.md for the device call)::

    PYTHONPATH=$PWD:$PWD/plugins/starwam/src python3 bench/device/starwam_speed.py \\
        --tarball .upstream/starwam-a7b05c8.tar.gz --out $OUT/starwam_speed.json

On a CPU at reduced depth (a check that it runs; the figures mean nothing)::

    python bench/device/starwam_speed.py --tarball starwam-a7b05c8.tar.gz --layers 1 --n 1 --warm 0 \\
        --batches 1,2 --robotwin-batches "" --plugin-batches 1,2 --steps 2 --budget-s 5000 --out /tmp/starwam_speed.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tarfile
import time
import types
from pathlib import Path

import numpy as np
import torch

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--tarball", required=True, help="starwam-a7b05c8.tar.gz (git archive of StarWAM a7b05c8)")
ap.add_argument("--out", default="starwam_speed.json")
ap.add_argument("--work", default="/tmp/starwam-speed", help="where the source is unpacked and the VAE generated")
ap.add_argument("--layers", type=int, default=0, help="DiT depth; 0: full size (30 layers, 5B)")
ap.add_argument("--width", type=int, default=256, help="DiT width at reduced depth")
ap.add_argument("--batches", default="1,2,4,8,16,32")
ap.add_argument("--robotwin-batches", default="1,4,16")
ap.add_argument("--plugin-batches", default="1,16,32")
ap.add_argument("--vae-bf16-batches", default="", help="batch sizes of the vae_bf16 stage ('': not run)")
ap.add_argument("--skip", default="", help="stages not to run, comma-separated (peak, base, exact, flops, "
                                           "libero_eager, libero_graphs, vae, plugin)")
ap.add_argument("--steps", type=int, default=0, help="denoising steps; 0: the family's (LIBERO MoT 8, RoboTwin 4)")
ap.add_argument("--n", type=int, default=8, help="timed calls per figure (p50)")
ap.add_argument("--warm", type=int, default=2, help="untimed calls before them")
ap.add_argument("--budget-s", type=float, default=480, help="stop starting new measurements after this")
args = ap.parse_args()
SKIPPABLE = {"peak", "base", "exact", "flops", "libero_eager", "libero_graphs", "vae", "plugin"}
SKIP = {s for s in args.skip.split(",") if s}
if SKIP - SKIPPABLE:
    ap.error(f"--skip: unknown stages {sorted(SKIP - SKIPPABLE)}; these can be skipped: {sorted(SKIPPABLE)}")

T0 = time.time()
CUDA = torch.cuda.is_available()
DEV = torch.device("cuda:0" if CUDA else "cpu")
DTYPE = torch.bfloat16 if CUDA else torch.float32  # upstream runs float32 on CPU
SYNC = torch.cuda.synchronize if CUDA else (lambda: None)
TASK = "pick up the black bowl between the plate and the ramekin and place it on the plate"
res: dict = {"args": vars(args)}


def save() -> None:
    res["elapsed_s"] = round(time.time() - T0, 1)
    Path(args.out).write_text(json.dumps(res, indent=1))
    print(json.dumps(res)[-1200:], flush=True)


def stage(name: str):
    """Run a stage, record its error instead of stopping, save after it."""
    def wrap(fn):
        if name in SKIP:
            res[name] = "not run: --skip"
            save()
            return fn
        try:
            fn()
        except Exception as exc:  # a failed stage must not cost the others' figures
            res.setdefault(name, {})["error"] = repr(exc)[:600]
            if CUDA:
                torch.cuda.empty_cache()
        save()
        return fn
    return wrap


def over_budget() -> bool:
    return time.time() - T0 > args.budget_s


def p50(fn, n=None, warm=None) -> float:
    n, warm = n or args.n, args.warm if warm is None else warm
    times = []
    for i in range(n + warm):
        SYNC(); t = time.perf_counter(); fn(i); SYNC()
        if i >= warm:
            times.append((time.perf_counter() - t) * 1000)
    return round(float(np.percentile(times, 50)), 2)


def peak_gb():
    return round(torch.cuda.max_memory_allocated() / 2 ** 30, 2) if CUDA else None


def reset_peak():
    if CUDA:
        torch.cuda.reset_peak_memory_stats()


# ----------------------------------------------------------------------------- env, peak
res["env"] = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0) if CUDA else "cpu",
              "dtype": str(DTYPE), "image_has": {m: importlib.util.find_spec(m) is not None
                                                 for m in ("pyarrow", "einops", "safetensors", "triton", "flash_attn")}}
if importlib.util.find_spec("pyarrow") is None:  # starwam.data.lerobot imports it at module level; inference never uses it
    sys.modules["pyarrow"] = types.ModuleType("pyarrow")
    sys.modules["pyarrow.parquet"] = sys.modules["pyarrow"].parquet = types.ModuleType("pyarrow.parquet")
save()


@stage("peak")
def _peak():
    m = 8192 if CUDA else 512
    x = torch.randn(m, m, device=DEV, dtype=torch.bfloat16)
    y = torch.randn(m, m, device=DEV, dtype=torch.bfloat16)
    ms = p50(lambda i: x @ y, n=20, warm=5)
    res["peak"] = {"matmul_ms": ms, "M": m, "tflops": round(2 * m ** 3 / (ms / 1000) / 1e12, 2)}


# ----------------------------------------------------------------------------- upstream and the plugin
work = Path(args.work)
work.mkdir(parents=True, exist_ok=True)
src = work / "StarWAM"
if not (src / "starwam").is_dir():
    with tarfile.open(args.tarball) as tar:
        tar.extractall(work, filter="data")
sys.path.insert(0, str(src))

from starwam import build_framework  # noqa: E402
from starwam.backbone.wan22 import WanVAE_  # noqa: E402
from starwam.config import load_config  # noqa: E402
from starwam.data.lerobot import save_text_cache, text_cache_path  # noqa: E402
from starwam.utils.config_cli import apply_overrides  # noqa: E402

from wam_starwam.batched import composer_for  # noqa: E402
from wam_starwam.families import family  # noqa: E402
from wam_starwam.testweights import VAE_KWARGS, dit_config, random_stats  # noqa: E402

backbone = work / f"backbone-l{args.layers}"
backbone.mkdir(exist_ok=True)
if args.layers:
    (backbone / "config.json").write_text(json.dumps(dit_config(args.layers, args.width)))
if not (backbone / "Wan2.2_VAE.pth").is_file():
    torch.manual_seed(0)
    with torch.device(DEV):
        vae = WanVAE_(**VAE_KWARGS)
    torch.save({k: v.cpu() for k, v in vae.state_dict().items()}, backbone / "Wan2.2_VAE.pth")
    del vae
cache_dir = work / "text_cache"


def build(platform: str):
    """upstream's model for the family's recipe, random weights (no checkpoint: every weight is random)."""
    fam = family("mot", platform)
    stats = work / f"stats_{platform}.json"
    stats.write_text(json.dumps(random_stats(platform, 0)))
    cfg = apply_overrides(load_config(src / fam.recipe), [
        f"backbone.pretrained_model_id={backbone}", "framework.action_expert_init_from=null",
        f"data.action_stats_path={stats}", f"data.state_stats_path={stats}",
        f"data.text_embedding_cache_dir={cache_dir}", "data.dataset_dirs=[]"])
    reset_peak()
    t = time.time()
    torch.manual_seed(0)
    model = build_framework(cfg, device=str(DEV), dtype=DTYPE).to(DEV).eval()
    SYNC()
    path = text_cache_path(cache_dir, TASK, 128, cfg.data.text_prompt_template, cfg.data.text_cache_encoder_id)
    save_text_cache(path, torch.randn(30, 4096, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16),
                    torch.ones(30, dtype=torch.bool), cfg.data.text_prompt_template.format(task=TASK), TASK)
    steps = args.steps or fam.steps
    frames = len(range(0, int(cfg.data.num_frames), max(1, int(cfg.data.action_freq_ratio))))
    composer, why = composer_for(model, horizon=32, steps=steps, num_video_frames=frames)
    if composer is None:
        raise RuntimeError(why)
    res[platform] = {"recipe": fam.recipe, "steps": steps, "build_s": round(time.time() - t, 1),
                     "params_b": round(sum(p.numel() for p in model.parameters()) / 1e9, 3), "peak_gb": peak_gb()}
    return model, cfg, composer, steps


def inputs(model, cfg, platform: str, batch: int):
    """Real-shaped inputs of ``batch`` requests: distinct frames and states, the task's text entry."""
    h, w = family("mot", platform).composed_size
    gen = torch.Generator().manual_seed(batch)
    images = (torch.rand(batch, 3, h, w, generator=gen) * 2 - 1).to(DEV, DTYPE)
    from starwam.data.lerobot import load_text_cache

    ctx, mask = load_text_cache(text_cache_path(cache_dir, TASK, 128, cfg.data.text_prompt_template,
                                                cfg.data.text_cache_encoder_id), 128, 4096)
    dim = int(cfg.framework.proprio_dim)
    proprio = (torch.rand(batch, dim, generator=gen) * 2 - 1).to(DEV, DTYPE)
    return (images, ctx.unsqueeze(0).expand(batch, -1, -1).to(DEV, DTYPE).contiguous(),
            mask.unsqueeze(0).expand(batch, -1).to(DEV).contiguous(), proprio)


def upstream_chunk(model, steps, image, ctx, mask, proprio, seed, frames=9):
    with torch.no_grad():
        return model.infer_action(input_image=image, context=ctx, context_mask=mask, action_horizon=32,
                                  num_inference_steps=steps, seed=seed, proprio=proprio, num_video_frames=frames)


def sweep(platform, model, cfg, composer, batches, label, flops=None):
    """p50 per batch size through ``composer``; request 0's chunk against its batch-1 chunk."""
    out = res[platform].setdefault(label, {})
    for b in batches:
        if over_budget():
            out[f"B{b}"] = "skipped: time budget"
            save()
            break
        try:
            x = inputs(model, cfg, platform, b)
            seeds = list(range(100, 100 + b))
            reset_peak()
            t = time.perf_counter()
            with torch.no_grad():
                first = composer(*x, seeds)  # with graphs: this call captures the bucket
            SYNC()
            first_ms = round((time.perf_counter() - t) * 1000, 1)
            with torch.no_grad():
                alone = composer(*(v[:1] for v in x), seeds[:1]).float()
            with torch.no_grad():
                ms = p50(lambda i: composer(*x, seeds))
            row = {"ms": ms, "per_obs_ms": round(ms / b, 2), "first_call_ms": first_ms, "peak_gb": peak_gb(),
                   "req0_vs_alone_max_abs": float((first[:1].float() - alone).abs().max())}
            if flops and res.get("peak", {}).get("tflops"):
                row["tflops"] = round(flops * b / (ms / 1000) / 1e12, 2)
                row["utilisation"] = round(row["tflops"] / res["peak"]["tflops"], 4)
            out[f"B{b}"] = row
        except Exception as exc:
            out[f"B{b}"] = {"error": repr(exc)[:600]}
            if CUDA:
                torch.cuda.empty_cache()
        save()
    return out


def graph_diff(platform, model, cfg, composer, eager, batches):
    """The graphed path against eager at the same batch size (same kernels, same shapes)."""
    diffs = {}
    for b in batches:
        x = inputs(model, cfg, platform, b)
        seeds = list(range(100, 100 + b))
        with torch.no_grad():
            diffs[f"B{b}"] = float((composer(*x, seeds).float() - eager.core(*eager.prepare(*x, seeds)).float()).abs().max())
    return diffs


# ----------------------------------------------------------------------------- LIBERO MoT
batches = [int(b) for b in args.batches.split(",")]
lib = {}


@stage("libero")
def _libero():
    lib["model"], lib["cfg"], lib["composer"], lib["steps"] = build("libero")


@stage("base")
def _base():
    import examples.libero.rollout as ro

    model, cfg, steps = lib["model"], lib["cfg"], lib["steps"]
    rng = np.random.default_rng(0)
    obs = {"agentview_image": rng.integers(0, 255, (256, 256, 3), dtype=np.uint8),
           "robot0_eye_in_hand_image": rng.integers(0, 255, (256, 256, 3), dtype=np.uint8),
           "robot0_eef_pos": np.array([0.1, 0.0, 1.0]), "robot0_eef_quat": np.array([0.0, 0.0, 0.0, 1.0]),
           "robot0_gripper_qpos": np.array([0.04, -0.04])}
    a_stats, s_stats = ro._load_action_stats(cfg), ro._load_state_stats(cfg)
    with torch.no_grad():
        ms = p50(lambda i: ro._predict_action_chunk(model, obs, TASK, cfg, {}, a_stats, s_stats, DEV, DTYPE,
                                                    steps, steps, 42 + i))
    res["base"] = {"what": "examples/libero/rollout.py _predict_action_chunk (one infer_action per chunk)",
                   "p50_ms": ms, "steps": steps}


@stage("exact")
def _exact():
    model, cfg, composer, steps = lib["model"], lib["cfg"], lib["composer"], lib["steps"]
    image, ctx, mask, proprio = inputs(model, cfg, "libero", 1)
    ref = upstream_chunk(model, steps, image, ctx, mask, proprio, 7)
    with torch.no_grad():
        mine = composer(image, ctx, mask, proprio, [7])
    res["exact"] = {"batch1_vs_infer_action_max_abs": float((ref.float() - mine.float()).abs().max()),
                    "bitwise_equal": bool(torch.equal(ref, mine))}


@stage("flops")
def _flops():
    from torch.utils.flop_counter import FlopCounterMode

    model, cfg, composer = lib["model"], lib["cfg"], lib["composer"]
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        composer(*inputs(model, cfg, "libero", 1), [0])
    total = counter.get_total_flops()
    res["flops"] = {"per_chunk_gflop": round(total / 1e9, 1)}
    lib["flops"] = total
    if res.get("peak", {}).get("tflops"):  # none, or 0.0 on a CPU
        res["flops"]["compute_bound_ms_at_peak"] = round(total / (res["peak"]["tflops"] * 1e12) * 1000, 3)
        if res.get("base", {}).get("p50_ms"):
            res["flops"]["base_utilisation"] = round(total / (res["base"]["p50_ms"] / 1000) / 1e12 / res["peak"]["tflops"], 4)


@stage("libero_eager")
def _libero_eager():
    sweep("libero", lib["model"], lib["cfg"], lib["composer"], batches, "eager", lib.get("flops"))


@stage("libero_graphs")
def _libero_graphs():
    if not CUDA:
        res["libero"]["graphs"] = "not run: no CUDA (--cuda-graphs is refused off CUDA)"
        return
    from wam_starwam.batched import FirstFrameMoT

    model, cfg, steps = lib["model"], lib["cfg"], lib["steps"]
    graphed = FirstFrameMoT(model, horizon=32, steps=steps, num_video_frames=9)
    graphed.use_cuda_graphs()
    lib["graphed"] = graphed
    sweep("libero", model, cfg, graphed, batches, "graphs", lib.get("flops"))
    res["libero"]["graphs_vs_eager_max_abs"] = graph_diff("libero", model, cfg, graphed, lib["composer"],
                                                         [b for b in batches if b in graphed.graphed.captured])


@stage("vae")
def _vae():
    """``backbone.encode_video`` alone (the first thing a chunk does), eager and captured."""
    from wamcore.cuda_graphs import GraphedCore

    model, cfg = lib["model"], lib["cfg"]
    encode = lambda images: model.backbone.encode_video(images.unsqueeze(2))  # noqa: E731
    graphed = GraphedCore(encode) if CUDA else None
    out = res.setdefault("vae", {})
    for b in batches:
        if over_budget():
            out[f"B{b}"] = "skipped: time budget"
            break
        images = inputs(model, cfg, "libero", b)[0]
        with torch.no_grad():
            row = {"eager_ms": p50(lambda i: encode(images))}
            if graphed is not None:
                graphed(images)  # the capture
                row["graphs_ms"] = p50(lambda i: graphed(images))
        row["eager_per_obs_ms"] = round(row["eager_ms"] / b, 2)
        out[f"B{b}"] = row
        save()


@stage("plugin")
def _plugin():
    """The worker's path: ``LiberoModel`` (wam_starwam.worker) around the same model, every
    prediction through the batched path (with CUDA graphs: the composer captured above)."""
    from wamcore import Observation, PredictRequest
    from wam_starwam.libero import STATE, libero_adapter
    from wam_starwam.normalization import load_stats
    from wam_starwam.settings import Settings
    from wam_starwam.worker import LiberoModel, TextConditioning

    model, cfg, steps = lib["model"], lib["cfg"], lib["steps"]
    settings = Settings.from_options("libero", {"text_cache": str(cache_dir), "num_inference_steps": steps,
                                                "cuda_graphs": CUDA})
    stats = load_stats(work / "stats_libero.json", "libero", action_dim=7, state_dim=8)
    native = LiberoModel(model, cfg, settings, stats, TextConditioning(settings, backbone, 4096, DEV, DTYPE), DEV, DTYPE)
    native.batch_with(lib.get("graphed") or lib["composer"], "", cuda_graphs=False)  # reuses the captured buckets
    adapter = libero_adapter(settings.family, 10)
    rng = np.random.default_rng(0)
    requests = [PredictRequest(observation=Observation(
        images={r: rng.integers(0, 256, (256, 256, 3), dtype=np.uint8) for r in ("primary", "wrist")},
        state={k: rng.uniform(-0.5, 0.5, n) for k, n in STATE.items()}, instruction=TASK), seed=200 + i)
        for i in range(max(int(b) for b in args.plugin_batches.split(",")))]
    natives = [adapter.encode(r) for r in requests]
    out = res.setdefault("plugin", {"graphs": "graphed" in lib})
    for b in (int(x) for x in args.plugin_batches.split(",")):
        if over_budget():
            out[f"B{b}"] = "skipped: time budget"
            break
        ms = p50(lambda i: native.predict_native_batch(natives[:b], requests[:b]))
        got = native.predict_native_batch(natives[:b], requests[:b])
        out[f"B{b}"] = {"ms": ms, "per_obs_ms": round(ms / b, 2), "ok": all(not isinstance(g, Exception) for g in got)}
        if not out[f"B{b}"]["ok"]:
            out[f"B{b}"]["error"] = repr(next(g for g in got if isinstance(g, Exception)))[:400]
        save()


@stage("vae_bf16")
def _vae_bf16():
    """float32 chunks first (the cast frees the float32 VAE weights the float32 graphs read),
    then ``wam_starwam.vae.use_vae_dtype`` as the worker applies it, and the same sweep."""
    if not args.vae_bf16_batches:
        res["vae_bf16"] = "not run: --vae-bf16-batches ''"
        return
    from wam_starwam.batched import FirstFrameMoT
    from wam_starwam.vae import use_vae_dtype

    model, cfg, steps = lib["model"], lib["cfg"], lib["steps"]
    vae_batches = [int(b) for b in args.vae_bf16_batches.split(",")]
    label = "graphs" if CUDA else "eager"

    def composer():
        made = FirstFrameMoT(model, horizon=32, steps=steps, num_video_frames=lib["composer"].num_video_frames)
        if CUDA:
            made.use_cuda_graphs()
        return made

    def chunks(run, b):
        x = inputs(model, cfg, "libero", b)
        with torch.no_grad():
            return run(*x, list(range(100, 100 + b))).float().cpu()

    float32 = lib.pop("graphed", None) if CUDA else lib["composer"]
    float32 = float32 or composer()
    reference = {b: chunks(float32, b) for b in vae_batches}
    del float32
    use_vae_dtype(model.backbone, "bfloat16")
    bf16 = composer()
    out = res["vae_bf16"] = {"what": f"LIBERO MoT chunks, {label}, VAE in bfloat16 (--vae-dtype bfloat16)",
                             "vs_float32_max_abs": {}, "speedup_vs_float32": {}}
    rows = sweep("libero", model, cfg, bf16, vae_batches, f"{label}_vae_bf16", lib.get("flops"))
    for b in vae_batches:
        if not isinstance(rows.get(f"B{b}"), dict) or "ms" not in rows[f"B{b}"]:
            continue
        out["vs_float32_max_abs"][f"B{b}"] = float((chunks(bf16, b) - reference[b]).abs().max())
        base = res["libero"].get(label, {}).get(f"B{b}")
        if isinstance(base, dict) and "ms" in base:
            out["speedup_vs_float32"][f"B{b}"] = round(base["ms"] / rows[f"B{b}"]["ms"], 3)
        save()


# ----------------------------------------------------------------------------- RoboTwin MoT
rt = {}


@stage("robotwin")
def _robotwin():
    lib.clear()
    if not args.robotwin_batches:
        res["robotwin"] = "not run: --robotwin-batches ''"
        return
    if time.time() - T0 > args.budget_s - 150:  # building the second model alone takes a minute
        res["robotwin"] = "skipped: time budget"
        return
    if CUDA:
        torch.cuda.empty_cache()
    model, cfg, composer, steps = build("robotwin")
    image, ctx, mask, proprio = inputs(model, cfg, "robotwin", 1)
    ref = upstream_chunk(model, steps, image, ctx, mask, proprio, 7)
    with torch.no_grad():
        mine = composer(image, ctx, mask, proprio, [7])
    res["robotwin"]["batch1_vs_infer_action_max_abs"] = float((ref.float() - mine.float()).abs().max())
    rt.update(model=model, cfg=cfg, composer=composer, steps=steps)
    rt_batches = [int(b) for b in args.robotwin_batches.split(",")]
    sweep("robotwin", model, cfg, composer, rt_batches, "eager")
    if CUDA:
        from wam_starwam.batched import FirstFrameMoT

        graphed = FirstFrameMoT(model, horizon=32, steps=steps, num_video_frames=composer.num_video_frames)
        graphed.use_cuda_graphs()
        sweep("robotwin", model, cfg, graphed, rt_batches, "graphs")
        res["robotwin"]["graphs_vs_eager_max_abs"] = graph_diff("robotwin", model, cfg, graphed, composer,
                                                               [b for b in rt_batches if b in graphed.graphed.captured])


res["done"] = True
save()
