"""``wam probe`` on PointMass as a user runs it (real env, the real reference WAM and the
random baseline, the CLI in a subprocess), and the pieces it is built from."""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from pathlib import Path

import attrs
import numpy as np
import pytest
from click.testing import CliRunner

from wamcore import ConfigurationError, LocalModel, ModelConfig, ModelService, Registry, hookimpl
from wamcore.baselines import random_model_spec
from wamcore.canonical import max_difference, plain
from wamcore.cli import cli
from wamcore.errors import ArtifactError
from wamcore.probe import metrics, snapshots
from wamcore.probe.branches import Branch, rollout
from wamcore.probe.sets import ProbeContext, ProbeSet
from wamcore.probe.runner import run_probe
from wamcore.specs import Intervention

from wam_pointmass.env import PointMassEnv
from wam_pointmass.plugin import POINTMASS_PLATFORM
from wam_pointmass.probe_sets import POINTMASS_CF


def wam(*args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "wamcore", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def probe(tmp_path, name, *extra, cache=None):
    out = tmp_path / name
    result = wam("probe", "--set", "pointmass-cf", "--out", out, "--cache", cache or tmp_path / "cache", *extra)
    return result, out


def report_of(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def png_size(path: Path) -> tuple:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    idat = data[data.index(b"IDAT") + 4:data.index(b"IEND") - 8]
    assert len(zlib.decompress(idat)) == height * (1 + 3 * width)
    return width, height


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One probe of the reference WAM, then the same command again."""
    tmp = tmp_path_factory.mktemp("probe")
    first, out = probe(tmp, "first", "--am-backend", "pointmass-wam")
    assert first.returncode == 0, first.stderr
    second, again = probe(tmp, "second", "--am-backend", "pointmass-wam")
    assert second.returncode == 0, second.stderr
    return tmp, first, report_of(out), report_of(again)


def test_the_reference_wam_gets_every_metric(reference):
    _, result, report, _ = reference
    m = report["metrics"]
    assert {k: v["status"] for k, v in m.items()} == dict.fromkeys(metrics.METRICS, "ok")
    contexts = len(POINTMASS_CF.contexts)
    # its predicted futures are closer to the real ones than the current frame is
    assert m["future_frames"]["frames"] == contexts
    assert m["future_frames"]["mse"] < m["future_frames"]["current_mse"] / 4
    assert m["future_frames"]["closer_than_current"] >= contexts - 1
    assert m["candidate_futures"]["closer_than_current"] > 0.8 * m["candidate_futures"]["frames"]
    # it ranks the interventions like reality in most contexts, and tells them apart
    assert m["branch_ranking"]["agreeing_contexts"] > contexts / 2
    assert m["branch_ranking"]["identified"] > 0.8 * m["branch_ranking"]["candidates"]
    assert m["values"]["pairs"] == contexts * 6 and m["values"]["brier"] < 0.1
    assert report["determinism"] == {"max_state_error": 0.0, "max_pixel_error": 0.0, "identical": True}
    # WAMProbe's metrics: its futures separate as the actions do, beyond the permutation null
    assert m["action_dependence"]["score"] > 0.8 and m["action_dependence"]["permutation_p_value"] < 0.05
    assert m["counterfactual_direction"]["direction"] > 0.9 and m["noop_stability"]["stable"] >= 0.75
    assert m["top1_regret"]["regret"] >= 0
    for name, summary in m.items():  # a seeded context-block interval on every figure
        assert summary["ci95"], name
        for figure, (lo, hi) in summary["ci95"].items():
            assert lo <= hi, (name, figure)
            if name not in _SUMMED:  # the figure is the mean of the contexts' figures
                assert lo - 1e-9 <= summary[figure] <= hi + 1e-9, (name, figure)
    assert report["bootstrap"] == {"resamples": 1000, "seed": 0, "unit": "context", "interval": "95% percentile"}
    assert "future_frames             ok" in result.stdout and "determinism: " in result.stdout
    print(result.stdout)


#: summaries whose figures are pooled over frames rather than a mean of the contexts' figures
_SUMMED = {"branch_separation", "future_frames", "candidate_futures", "branch_ranking", "values"}


def test_every_context_has_branches_checks_a_snapshot_and_a_picture(reference):
    _, _, report, _ = reference
    assert report["model_identity"]["backend"] == "pointmass-wam"
    assert report["model_identity"]["checkpoint"].startswith("sha256:")
    for context in report["contexts"]:
        assert list(context["branches"]) == ["no-op", "+x", "-x", "+y", "-y", "model"]
        assert {k: (c["state"], c["pixels"]) for k, c in context["determinism"].items()} == dict.fromkeys(
            ("restores", "repeat", "order"), (0.0, 0.0))
        saved = snapshots.load(context["snapshot"]["path"])
        assert saved["address"] == context["snapshot"]["address"]
        assert saved["about"]["context"]["name"] == context["name"]
        # 6 rows of 5 columns (now, 3 horizons, predicted) of 64-pixel frames, enlarged twice
        assert png_size(Path(context["picture"]["path"])) == (2 * (5 * 66 - 2), 2 * (6 * 66 - 2))
        assert context["picture"]["rows"] == list(context["branches"])


def test_a_second_identical_run_calls_the_model_zero_times(reference):
    tmp, _, first, second = reference
    assert first["cache"]["model_calls"] == 6 * len(POINTMASS_CF.contexts)  # own chunk + 5 candidates each
    assert second["cache"]["model_calls"] == 0 and second["cache"]["hits"] == first["cache"]["model_calls"]
    assert second["metrics"] == first["metrics"]
    # the snapshots are content-addressed: the same contexts give the same addresses
    assert [c["snapshot"]["address"] for c in second["contexts"]] == [c["snapshot"]["address"] for c in first["contexts"]]


def test_a_changed_option_or_checkpoint_misses_and_a_tampered_artifact_is_detected(reference, tmp_path):
    tmp, _, first, _ = reference
    calls = first["cache"]["model_calls"]
    threads, out = probe(tmp, "threads", "--am-backend", "pointmass-wam", "--threads", "2")
    assert threads.returncode == 0, threads.stderr
    assert report_of(out)["cache"]["model_calls"] == calls  # another option: another identity
    checkpoint = _retrained_copy(tmp_path)
    other, out = probe(tmp, "other", "--am-backend", "pointmass-wam", "--am-checkpoint", checkpoint)
    assert other.returncode == 0, other.stderr
    assert report_of(out)["cache"]["model_calls"] == calls
    assert report_of(out)["model_identity"]["checkpoint"] != first["model_identity"]["checkpoint"]

    artifact = next(p.with_suffix(".wam") for p in (tmp / "cache").glob("??/*.json")
                    if json.loads(p.read_text())["identity"]["options"]["threads"] == 2)
    data = bytearray(artifact.read_bytes())
    data[-1] ^= 1
    artifact.write_bytes(bytes(data))
    tampered, _ = probe(tmp, "tampered", "--am-backend", "pointmass-wam", "--threads", "2")
    assert tampered.returncode != 0
    assert "was modified after it was written" in tampered.stderr and "wam artifacts gc" in tampered.stderr
    gc = wam("artifacts", "gc", tmp / "cache")
    assert gc.returncode == 0 and f"removed {artifact}" in gc.stdout
    again, out = probe(tmp, "after-gc", "--am-backend", "pointmass-wam", "--threads", "2")
    assert again.returncode == 0, again.stderr
    assert report_of(out)["cache"]["model_calls"] == 1  # only the removed one is asked again


def _retrained_copy(tmp_path: Path) -> Path:
    """Weights that differ from the shipped ones in one bias, with their own pins.json."""
    import torch

    from wamcore.checkpoints import write_pins
    from wam_pointmass.checkpoint import WEIGHTS_NAME, shipped_weights
    from wam_pointmass.model import load_network, save_weights

    net, about = load_network(shipped_weights())
    with torch.no_grad():
        next(p for p in net.parameters() if p.ndim == 1).add_(1e-3)
    folder = tmp_path / "ckpt"
    folder.mkdir()
    save_weights(net, folder / WEIGHTS_NAME, about["training"])
    write_pins(folder / "pins.json", {WEIGHTS_NAME: folder / WEIGHTS_NAME}, source="test")
    return folder


def test_random_reports_the_model_metrics_as_skipped_with_the_capability(tmp_path):
    result, out = probe(tmp_path, "random", "--am-backend", "random", "--action-noise", "0.1")
    assert result.returncode == 0, result.stderr
    assert report_of(out)["platform_options"] == {"action_noise": 0.1}  # overrides every context's
    m = report_of(out)["metrics"]
    assert m["branch_separation"]["status"] == "ok"
    at8 = m["branch_separation"]["horizons"]["8"]
    # with noise in every context even a push into a wall moves the mass: every pair differs
    assert at8["distinct_pairs"] == at8["pairs"] == 8 * 15 and at8["frame_mse_min"] > 0
    assert report_of(out)["determinism"]["identical"]
    needs = {"future_frames": "future_observations", "values": "values",
             **dict.fromkeys(("candidate_futures", "branch_ranking", "action_dependence", "counterfactual_direction",
                              "noop_stability", "top1_regret"), "action_conditioned_futures")}
    for name, capability in needs.items():
        assert m[name] == {"status": "skipped", "needs": capability,
                           "reason": f"model 'random' does not declare {capability}"}
        assert f"{name:<26}skipped   needs {capability}" in result.stdout
    assert report_of(out)["cache"]["model_calls"] == len(POINTMASS_CF.contexts)


def test_a_probe_set_names_its_platform_and_must_exist(tmp_path):
    unknown = wam("probe", "--set", "pointmas-cf", "--out", tmp_path / "o")
    assert unknown.returncode == 2 and "Unknown probe set 'pointmas-cf'." in unknown.stderr
    assert "Did you mean: 'pointmass-cf'?" in unknown.stderr
    assert "Installed: libero-cf-mini, pointmass-cf" in unknown.stderr
    listed = wam("probe", "--set", "list")
    assert listed.returncode == 0 and listed.stdout.split("\n")[0].split() == [
        "set", "platform", "plugin", "contexts", "description"]
    rows = {line.split()[0]: line.split()[1:4] for line in listed.stdout.splitlines()[1:]}
    assert rows == {"libero-cf-mini": ["libero", "libero", "4"], "pointmass-cf": ["pointmass", "pointmass", "8"]}
    wrong = wam("probe", "--set", "pointmass-cf", "--platform", "libero", "--out", tmp_path / "o")
    assert wrong.returncode == 2 and "runs on platform 'pointmass'" in wrong.stderr


# ----------------------------------------------------------------------------- determinism checks


class ForgetfulEnv(PointMassEnv):
    """A platform bug the probe must catch: restore() forgets the action-noise generator."""

    def restore(self, snapshot):
        super().restore(snapshot)
        self._noise_rng = np.random.default_rng()


def test_a_platform_whose_restore_forgets_state_fails_the_determinism_checks(tmp_path):
    forgetful = attrs.evolve(POINTMASS_PLATFORM, make_env=ForgetfulEnv)

    class Plugin:
        @hookimpl
        def wam_register_platforms(self, register):
            register(forgetful)

        @hookimpl
        def wam_register_probe_sets(self, register):
            register(POINTMASS_CF)

    registry = Registry(entry_points=False)
    registry.register(Plugin(), name="forgetful")
    result = CliRunner().invoke(cli, ["probe", "--set", "pointmass-cf", "--am-backend", "random", "--no-cache",
                                      "--out", str(tmp_path / "o")], obj=registry)
    assert result.exit_code == 1
    assert "the branches are not reproducible on this platform" in result.output
    report = report_of(tmp_path / "o")
    noisy = [c for c in report["contexts"] if c["env_options"]["action_noise"] > 0]
    quiet = [c for c in report["contexts"] if c["env_options"]["action_noise"] == 0]
    assert noisy and all(c["determinism"]["repeat"]["pixels"] > 0 and c["determinism"]["order"]["state"] > 0
                         for c in noisy)
    # without noise the frames agree, but the forgotten generator is still seen in the state
    assert all(c["determinism"]["order"]["pixels"] == 0 and c["determinism"]["order"]["state"] > 0 for c in quiet)
    assert report["determinism"]["identical"] is False


# ----------------------------------------------------------------------------- snapshots


def test_a_saved_snapshot_restores_into_another_env_and_replays_exactly(tmp_path):
    env = PointMassEnv(action_noise=0.2)
    env.reset(seed=5)
    env.step(np.array([0.4, -0.3]))
    snap = env.snapshot()
    address, path = snapshots.save(tmp_path, snap, {"platform": "pointmass"})
    assert path.name == f"{address}.snapshot" and address == snapshots.address(snap)
    branch = Branch("b", np.random.default_rng(0).uniform(-1, 1, (10, 2)), "intervention")
    original = rollout(env, snap, branch)

    other = PointMassEnv(action_noise=0.2)  # another env, another layout until restored
    other.reset(seed=99)
    snapshots.restore_saved(other, snapshots.load(path))
    assert snapshots.address(other.snapshot()) == address
    replay = rollout(other, other.snapshot(), branch)
    assert all(np.array_equal(original.frames[k], replay.frames[k]) for k in original.frames)
    assert max_difference(original.end, replay.end) == 0.0

    data = bytearray(path.read_bytes())
    data[-3] ^= 1  # inside the last array of the state
    path.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="was modified"):
        snapshots.load(path)


def test_a_cut_or_forged_snapshot_is_a_typed_error(tmp_path):
    from wamcore import wire
    from wamcore.canonical import digest

    env = PointMassEnv(action_noise=0.2)
    env.reset(seed=5)
    state = plain(env.snapshot())

    def saved(name, content):
        path = tmp_path / name
        path.write_bytes(wire.packb({"type": "wamcore.snapshot", "v": 1, **content}))
        return path

    no_state = saved(f"{digest(state)}.snapshot", {"address": digest(state), "about": {}})
    with pytest.raises(ArtifactError, match="has no state"):
        snapshots.load(no_state)
    with pytest.raises(ArtifactError, match="has no address"):
        snapshots.load(saved("x.snapshot", {"state": state}))
    for forged in ("9" * 5000, "12abc", 12):  # beyond int()'s digit limit, not a decimal, not text
        bad = {**state, "steps": {"__wamcore_int__": forged}}
        path = saved(f"{digest(bad)}.snapshot", {"address": digest(bad), "about": {}, "state": bad})
        with pytest.raises(ArtifactError, match="not a decimal of at most 4300 digits"):
            snapshots.load(path)
    big = {**state, "steps": {"__wamcore_int__": "9" * 400}}  # valid, but beyond any float
    assert max_difference(big, big) == 0.0 and max_difference(big, state) == float("inf")


def test_the_address_covers_every_field_and_only_content():
    env = PointMassEnv()
    env.reset(seed=1)
    snap = env.snapshot()
    assert snapshots.address(snap) == snapshots.address(attrs.evolve(snap, position=snap.position.copy()))
    assert snapshots.address(snap) != snapshots.address(attrs.evolve(snap, position=snap.position + 1e-12))
    rng = dict(snap.noise_rng, state={**snap.noise_rng["state"], "state": snap.noise_rng["state"]["state"] + 1})
    assert snapshots.address(snap) != snapshots.address(attrs.evolve(snap, noise_rng=rng))  # 128-bit ints count too
    assert max_difference(plain(snap), plain(attrs.evolve(snap, steps=snap.steps + 2))) == 2.0


# ----------------------------------------------------------------------------- metrics


def test_kendall_tau_and_psnr():
    assert metrics.kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert metrics.kendall_tau([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
    assert metrics.kendall_tau([1, 2, 3], [5, 5, 5]) is None
    assert metrics.kendall_tau([1, 2, 3, 4, 5], [1, 2, 3, 5, 4]) == pytest.approx(0.8)
    assert metrics.psnr(0.0) is None and metrics.psnr(255.0 ** 2) == 0.0


def test_blurred_distance_keeps_growing_where_pixel_distance_saturates():
    from wam_pointmass.render import draw_background, draw_frame

    background = draw_background([])
    start = draw_frame(background, (0.0, 0.0))
    moved = [draw_frame(background, (d, 0.0)) for d in (0.3, 0.5, 0.7)]
    raw = [metrics.mse(m, start) for m in moved]
    smooth = [metrics.mse(metrics.blurred(m), metrics.blurred(start)) for m in moved]
    assert max(raw) - min(raw) < 0.02 * max(raw)  # the disc left its place: all about equally far
    assert smooth[0] < smooth[1] < smooth[2]


def test_a_perfect_predictor_ranks_and_identifies_every_branch():
    env = PointMassEnv()
    env.reset(seed=2)
    snap, now = env.snapshot(), env.observe()
    rollouts = {i.name: rollout(env, snap, Branch(i.name, i.actions, "intervention"))
                for i in POINTMASS_PLATFORM.interventions}
    from wamcore import Capabilities, Prediction

    perfect = {n: Prediction(actions=np.asarray(POINTMASS_PLATFORM.intervention(n).actions),
                             future_observations={"primary": r.frames["primary"][-1]}) for n, r in rollouts.items()}
    caps = Capabilities(actions=True, future_observations=True, action_conditioned_futures=True)
    ranking = metrics.branch_ranking(caps, "oracle", perfect, rollouts, now)
    assert ranking["kendall_tau"] == 1.0 and ranking["agrees"] and ranking["identified"] == 5
    futures = metrics.candidate_futures(caps, "oracle", perfect, rollouts, now)
    assert all(c["frames"]["primary@8"]["mse"] == 0 and c["frames"]["primary@8"]["psnr"] is None
               for c in futures["candidates"].values())


def test_predicted_frames_are_placed_by_the_step_they_show():
    from wamcore import Prediction

    frames = np.zeros((4, 2, 2, 3), np.uint8)
    pred = Prediction(actions=np.zeros((8, 2), np.float32), future_observations={"primary": frames})
    assert sorted(metrics.predicted_frames(pred, "primary", 8)) == [2, 4, 6, 8]
    assert sorted(metrics.predicted_frames(pred.replace(future_observations={"primary": frames[0]}), "primary", 8)) == [8]


# ----------------------------------------------------------------------------- sets and interventions


def test_hook_wam_register_probe_sets(tmp_path):
    """A third party's set on an installed platform: registered, listed, probed; a plugin that
    registers something else fails alone."""
    two = ProbeSet("pm-two", "pointmass", [ProbeContext(f"s{s}", reset={"seed": s}) for s in (3, 4)],
                   horizons=(2,), aliases=("pm2",))

    class Plugin:
        @hookimpl
        def wam_register_platforms(self, register):
            register(POINTMASS_PLATFORM)

        @hookimpl
        def wam_register_probe_sets(self, register):
            register(two)

    class Broken:
        @hookimpl
        def wam_register_probe_sets(self, register):
            register({"name": "not-a-set"})

    registry = Registry(entry_points=False)
    record = registry.register(Plugin(), name="third")
    broken = registry.register(Broken(), name="broken")
    assert record.probe_sets == ["pm-two"] and "wam_register_probe_sets" in record.hooks
    assert record.to_json()["probe_sets"] == ["pm-two"]
    assert "register() for probe sets takes a ProbeSet, got dict" in broken.error
    assert registry.probe_set("PM2") is two and list(registry.probe_sets()) == ["pm-two"]
    listed = CliRunner().invoke(cli, ["probe", "--set", "list"], obj=registry)
    assert listed.exit_code == 0 and listed.output.splitlines()[1].split()[:4] == ["pm-two", "pointmass", "third", "2"]
    result = CliRunner().invoke(cli, ["probe", "--set", "pm2", "--am-backend", "random", "--no-cache",
                                      "--out", str(tmp_path / "o")], obj=registry)
    assert result.exit_code == 0, result.output
    report = report_of(tmp_path / "o")
    assert report["set"] == "pm-two" and [c["name"] for c in report["contexts"]] == ["s3", "s4"]
    assert report["horizons"] == [2] and report["determinism"]["identical"]


def test_interventions_are_checked_against_the_control_when_registered():
    control = POINTMASS_PLATFORM.control
    with pytest.raises(ValueError, match=r"must be \[T, 2\]"):
        attrs.evolve(POINTMASS_PLATFORM, interventions=(Intervention("x", [[1.0, 0.0, 0.0]]),))
    with pytest.raises(ValueError, match="leaves the control bounds"):
        attrs.evolve(POINTMASS_PLATFORM, interventions=(Intervention("x", [[control.high[0] + 0.5, 0.0]]),))
    with pytest.raises(ValueError, match="names an intervention twice"):
        attrs.evolve(POINTMASS_PLATFORM, interventions=(Intervention("x", [[0, 0]]), Intervention("x", [[1, 0]])))
    with pytest.raises(ConfigurationError, match=r"no intervention 'up' \(it has: no-op, \+x, -x, \+y, -y\)"):
        POINTMASS_PLATFORM.intervention("up")


def test_a_platform_without_interventions_still_probes_the_models_chunk(tmp_path):
    bare = attrs.evolve(POINTMASS_PLATFORM, interventions=())
    model = LocalModel(ModelService(random_model_spec([bare]), ModelConfig(platform="pointmass"))).bind(bare)
    one = ProbeSet("one", "pointmass", [ProbeContext("seed=0", reset={"seed": 0})])
    report = run_probe(one, bare, model, out=tmp_path)
    assert report["metrics"]["branch_separation"] == {
        "status": "skipped", "reason": "needs at least two branches; the platform names no interventions"}
    assert list(report["contexts"][0]["branches"]) == ["model"] and report["determinism"]["identical"]
