"""The artifact cache and model identity: keys, tamper detection, ``wam run/eval --cache``,
``wam artifacts``, and ``wam eval --resume`` refusing another model."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import attrs
import numpy as np
import pytest

from wamcore import ConfigurationError, LocalModel, ModelConfig, ModelService, PredictRequest
from wamcore.artifacts import ArtifactStore, CachedModel, identity_digest, model_identity, request_key
from wamcore.errors import ArtifactError

from wam_pointmass.checkpoint import WEIGHTS_NAME, shipped_weights
from wam_pointmass.env import PointMassEnv
from wam_pointmass.plugin import POINTMASS_PLATFORM, POINTMASS_WAM


def wam(*args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "wamcore", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def counted():
    """The reference WAM in-process, with every call of its network counted."""
    service = ModelService(POINTMASS_WAM, ModelConfig(platform="pointmass"))
    calls = []
    predict = service.native.predict_native_batch

    def spy(natives, requests):
        calls.append(len(natives))
        return predict(natives, requests)

    service.native.predict_native_batch = spy
    return LocalModel(service).bind(POINTMASS_PLATFORM), calls


def test_a_cached_request_never_reaches_the_model(counted, tmp_path):
    model, calls = counted
    obs = PointMassEnv().reset(seed=3)
    request = PredictRequest(observation=obs, seed=1)
    cached = CachedModel(model, ArtifactStore(tmp_path))
    first = cached.predict(request)
    assert (len(calls), cached.hits, cached.misses) == (1, 0, 1)
    again = CachedModel(model, ArtifactStore(tmp_path)).predict(request)  # another client, the same store
    assert len(calls) == 1 and again == first
    np.testing.assert_array_equal(again.future_observations["primary"], first.future_observations["primary"])
    candidate = np.full((8, 2), 0.5, np.float32)
    cached.predict(attrs.evolve(request, candidate_actions=candidate))
    assert len(calls) == 2  # a candidate is another request


def test_the_key_covers_every_part_of_the_request_and_the_identity():
    obs = PointMassEnv().reset(seed=3)
    base = PredictRequest(observation=obs, seed=1)
    key = request_key("a" * 64, base)
    moved = obs.replace(state={**obs.state, "position": obs.state["position"] + 1e-9})
    image = obs.images["primary"].copy()
    image[0, 0, 0] ^= 1
    variants = [
        request_key("b" * 64, base),
        request_key("a" * 64, attrs.evolve(base, observation=moved)),
        request_key("a" * 64, attrs.evolve(base, observation=obs.replace(images={"primary": image}))),
        request_key("a" * 64, attrs.evolve(base, observation=obs.replace(step=1))),
        request_key("a" * 64, attrs.evolve(base, instruction="go to the red target")),
        request_key("a" * 64, attrs.evolve(base, seed=2)),
        request_key("a" * 64, attrs.evolve(base, options={"noise": 0.1})),
        request_key("a" * 64, attrs.evolve(base, candidate_actions=np.zeros((8, 2), np.float32))),
    ]
    assert len(set(variants)) == len(variants) and key not in variants
    assert request_key("a" * 64, PredictRequest(observation=PointMassEnv().reset(seed=3), seed=1)) == key


def test_the_identity_holds_what_decides_outputs(counted):
    model, _ = counted
    identity = model_identity(model.info, model.contract)
    assert identity["checkpoint"] == f"sha256:{identity['pins']['sha256']}"
    assert identity["options"] == {"device": "auto", "threads": 1, "weights": "reach"} and identity["device"] == "cpu"
    assert identity["contract"]["chunk_size"] == 8
    neutral = attrs.evolve(model.info, details={**model.info.details, "neutral_options": ["threads"]})
    assert "threads" not in model_identity(neutral, model.contract)["options"]
    other = attrs.evolve(model.info, details={**model.info.details, "stats_sha256": "0" * 64, "worker": {"pid": 1}})
    assert model_identity(other, model.contract)["pins"] == {"sha256": identity["pins"]["sha256"], "stats_sha256": "0" * 64}
    assert identity_digest(model_identity(other, model.contract)) != identity_digest(identity)


def test_the_identity_keeps_hash_tables_and_repeated_options():
    from wamcore.specs import Option

    spec = attrs.evolve(POINTMASS_WAM, options=POINTMASS_WAM.options + (Option("override", multiple=True),))
    service = ModelService(spec, ModelConfig(platform="pointmass", options={"override": ("a=1", "b=2")}))
    info = attrs.evolve(service.info, details={**service.info.details, "weights_sha256": {"dit.pt": "1" * 64}})
    identity = model_identity(info)
    assert identity["options"]["override"] == ["a=1", "b=2"]  # a repeated option decides outputs too
    assert identity["pins"]["weights_sha256"] == {"dit.pt": "1" * 64}  # a table of hashes, kept whole
    other = attrs.evolve(info, details={**info.details, "weights_sha256": {"dit.pt": "2" * 64}})
    assert identity_digest(model_identity(other)) != identity_digest(identity)


def test_a_modified_or_misfiled_artifact_is_refused_and_collected(counted, tmp_path):
    model, calls = counted
    store = ArtifactStore(tmp_path)
    cached = CachedModel(model, store)
    requests = [PredictRequest(observation=PointMassEnv().reset(seed=s)) for s in range(3)]
    keys = [request_key(cached.identity_sha256, r) for r in requests]
    for r in requests:
        cached.predict(r)
    payload = lambda k: tmp_path / k[:2] / f"{k}.wam"  # noqa: E731
    data = bytearray(payload(keys[0]).read_bytes())
    data[len(data) // 2] ^= 0xFF
    payload(keys[0]).write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="was modified after it was written"):
        cached.predict(requests[0])
    # a valid artifact copied under another key (with its sidecar) is not that key's answer
    shutil.copy(payload(keys[1]), payload(keys[2]))
    meta = json.loads((tmp_path / keys[1][:2] / f"{keys[1]}.json").read_text())
    (tmp_path / keys[2][:2] / f"{keys[2]}.json").write_text(json.dumps(meta))
    with pytest.raises(ArtifactError, match="is not the artifact"):
        store.get(keys[2])
    (tmp_path / "ab").mkdir(exist_ok=True)
    leftover = f"ab{'0' * 62}.wam.123.tmp"  # an interrupted write of an earlier version
    (tmp_path / "ab" / leftover).write_bytes(b"x")
    os.utime(tmp_path / "ab" / leftover, (0, 0))  # long ago: a write in progress would be younger
    (tmp_path / "ab" / f".ab{'1' * 62}.wam.0123abcd.tmp").write_bytes(b"x")  # being written right now: kept
    (tmp_path / "ab" / "notes.wam.123.tmp").write_bytes(b"x")  # not named by a key: never the cache's
    removed, left = store.gc()
    removed = {Path(p).name: why for p, why in removed}
    assert set(removed) == {f"{keys[0]}.json", f"{keys[0]}.wam", f"{keys[2]}.json", f"{keys[2]}.wam", leftover}
    assert left == [] and (tmp_path / "ab" / "notes.wam.123.tmp").exists()
    assert (tmp_path / "ab" / f".ab{'1' * 62}.wam.0123abcd.tmp").exists()
    assert store.get(keys[1]) is not None and store.get(keys[0]) is None
    n = len(calls)
    cached.predict(requests[0])
    assert len(calls) == n + 1  # recomputed once, then cached again
    assert store.get(keys[0]) is not None


def test_a_stateful_model_is_not_cached():
    from wamcore import Adapter, AdapterContract, Capabilities, ModelSpec, Prediction

    class Stateful:
        uses_sessions = True

        def predict_native(self, native, request, session):
            return np.zeros((1, 2), np.float32)

    contract = AdapterContract(platform="pointmass", action_space="pointmass.acceleration.v1", action_dim=2,
                               cameras={}, state={"position": 2})
    spec = ModelSpec(name="stateful", load=lambda c: Stateful(), capabilities=Capabilities(),
                     adapters=[Adapter(contract, lambda r: None, lambda n, r: Prediction(actions=n))])
    client = LocalModel(ModelService(spec, ModelConfig(platform="pointmass"))).bind(POINTMASS_PLATFORM)
    with pytest.raises(ConfigurationError, match="keeps state between predictions"):
        CachedModel(client, ArtifactStore("unused"))


def test_wam_run_with_a_cache_replays_the_episode_from_artifacts(tmp_path):
    first = wam("run", "--json", "--seed", 4, "--cache", tmp_path / "c")
    second = wam("run", "--json", "--seed", 4, "--cache", tmp_path / "c")
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    assert a["cache"]["misses"] == a["chunks"] > 0 and a["cache"]["hits"] == 0
    assert b["cache"] == {"dir": str(tmp_path / "c"), "hits": a["chunks"], "misses": 0}
    assert (b["success"], b["steps"], b["values"]) == (a["success"], a["steps"], a["values"])
    assert a["model_identity"] == b["model_identity"] and a["model_identity"]["backend"] == "pointmass-wam"
    listed = wam("artifacts", "ls", tmp_path / "c")
    head, *rows = listed.stdout.splitlines()
    assert listed.returncode == 0 and head.startswith("KEY") and len(rows) == a["chunks"]
    assert f"{a['chunks']} artifact(s)" in listed.stderr and "pointmass-wam" in listed.stdout
    shown = wam("artifacts", "show", tmp_path / "c", rows[0].split()[0])
    assert shown.returncode == 0, shown.stderr
    details = json.loads(shown.stdout)
    assert details["verified"] and details["prediction"]["actions"] == [8, 2]
    assert details["prediction"]["future_observations"] == {"primary": [64, 64, 3]}
    assert details["meta"]["request"]["seed"] == 4 and details["meta"]["wamcore"]
    unknown = wam("artifacts", "show", tmp_path / "c", "zz")
    assert unknown.returncode == 2 and "no artifact in" in unknown.stderr and "wam artifacts ls" in unknown.stderr


def test_wam_eval_with_a_cache_in_env_processes(tmp_path):
    args = ["eval", "--episodes", 4, "--num-envs", 2, "--json", "--cache", tmp_path / "c"]
    first = wam(*args, "--out", tmp_path / "a")
    second = wam(*args, "--out", tmp_path / "b")
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    assert a["cache"]["misses"] > 0 and a["cache"]["hits"] == 0
    assert b["cache"]["misses"] == 0 and b["cache"]["hits"] == a["cache"]["misses"]
    assert b["model_identity"] == a["model_identity"] and a["model_identity"]["checkpoint"].startswith("sha256:")
    rows = [json.loads(line) for line in (tmp_path / "b" / "episodes.jsonl").read_text().splitlines()]
    assert all(r["cache"]["misses"] == 0 and r["cache"]["hits"] == r["chunks"] for r in rows)


def test_eval_resume_refuses_another_checkpoint(tmp_path):
    out = tmp_path / "o"
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    shutil.copy(shipped_weights(), ckpt / WEIGHTS_NAME)
    first = wam("eval", "--episodes", 2, "--out", out, "--am-checkpoint", ckpt)
    assert first.returncode == 0, first.stderr
    before = (out / "episodes.jsonl").read_text()
    # another checkpoint asked for: refused before anything starts
    other = wam("eval", "--episodes", 3, "--out", out, "--resume")
    assert other.returncode == 2
    assert f"holds a run with other settings (model.checkpoint: \"{ckpt.resolve()}\" there, null here)" in other.stderr
    # the same path, other weights in it: refused once the model has loaded, before any episode is recorded
    from wamcore.checkpoints import write_pins

    _perturbed(ckpt / WEIGHTS_NAME)
    write_pins(ckpt / "pins.json", {WEIGHTS_NAME: ckpt / WEIGHTS_NAME}, source="test")
    swapped = wam("eval", "--episodes", 3, "--out", out, "--am-checkpoint", ckpt, "--resume")
    assert swapped.returncode == 2
    assert "holds episodes of another model (checkpoint: \"sha256:4e37451d" in swapped.stderr
    assert "pins.sha256: \"4e37451d" in swapped.stderr and "resume with the model that produced them" in swapped.stderr
    assert (out / "episodes.jsonl").read_text() == before
    # the model that produced them resumes
    shutil.copy(shipped_weights(), ckpt / WEIGHTS_NAME)
    (ckpt / "pins.json").unlink()
    resumed = wam("eval", "--episodes", 3, "--out", out, "--am-checkpoint", ckpt, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert len((out / "episodes.jsonl").read_text().splitlines()) == 3


def _perturbed(path: Path) -> None:
    import torch

    from wam_pointmass.model import load_network, save_weights

    net, about = load_network(path)
    with torch.no_grad():
        next(p for p in net.parameters() if p.ndim == 1).add_(1e-3)
    save_weights(net, path, about["training"])


# ----------------------------------------------------------------------------- a hostile or unlucky cache


def _filled(counted, root: Path, n: int = 2) -> list:
    """``n`` real artifacts in ``root``; their keys."""
    model, _ = counted
    cached = CachedModel(model, ArtifactStore(root))
    requests = [PredictRequest(observation=PointMassEnv().reset(seed=s)) for s in range(n)]
    for r in requests:
        cached.predict(r)
    return [request_key(cached.identity_sha256, r) for r in requests]


def test_gc_touches_only_key_named_regular_files_in_real_folders(counted, tmp_path):
    cache, outside = tmp_path / "cache", tmp_path / "outside"
    keys = _filled(counted, cache)
    outside.mkdir()
    victims = {"notes.json": b"{}", "draft.tmp": b"x", "model.wam": b"w",  # what gc used to delete anywhere
               f"cd{'1' * 62}.wam": b"w", f"cd{'1' * 62}.wam.7.tmp": b"x"}  # named like the cache's own files
    for name, data in victims.items():
        (outside / name).write_bytes(data)
    (cache / "cd").symlink_to(outside, target_is_directory=True)  # a shard folder that is a link
    secret = tmp_path / "secret.json"
    secret.write_text("keep me")
    shard = cache / keys[0][:2]
    (shard / f"{keys[0][:2]}{'2' * 62}.json").symlink_to(secret)  # a sidecar that is a link
    (shard / "mine.wam").write_bytes(b"not the cache's")  # no key: never touched
    removed, left = ArtifactStore(cache).gc()
    assert removed == []
    assert {Path(p).name for p, _ in left} == {"cd", f"{keys[0][:2]}{'2' * 62}.json"}
    assert all("left alone" in why for _, why in left)
    assert sorted(p.name for p in outside.iterdir()) == sorted(victims) and secret.read_text() == "keep me"
    assert (shard / "mine.wam").exists() and all(ArtifactStore(cache).get(k) is not None for k in keys)
    shown = wam("artifacts", "gc", cache)
    assert shown.returncode == 0 and "0 file(s) removed" in shown.stderr
    assert "left alone" in shown.stderr and "a symbolic link" in shown.stderr
    assert sorted(os.listdir(outside)) == sorted(victims)


def test_a_fifo_in_the_cache_hangs_nothing(counted, tmp_path):
    cache = tmp_path / "cache"
    keys = _filled(counted, cache, 3)
    sidecar, payload = cache / keys[0][:2] / f"{keys[0]}.json", cache / keys[1][:2] / f"{keys[1]}.wam"
    for path in (sidecar, payload):
        path.unlink()
        os.mkfifo(path)  # nobody will ever write to them: opening one to read would wait forever
    listed = wam("artifacts", "ls", cache, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert keys[2][:16] in listed.stdout and keys[1][:16] in listed.stdout  # the others are still listed
    assert "a FIFO, not a regular file" in listed.stderr and keys[0][:16] in listed.stderr
    shown = wam("artifacts", "show", cache, keys[1][:12], timeout=60)
    assert shown.returncode == 1 and "a FIFO, not a regular file" in shown.stderr and "Traceback" not in shown.stderr
    collected = wam("artifacts", "gc", cache, timeout=60)
    assert collected.returncode == 0 and collected.stderr.count("a FIFO") == 2  # left alone, reported
    assert sidecar.is_fifo() and payload.is_fifo()
    with pytest.raises(ArtifactError, match="a FIFO"):
        ArtifactStore(cache).get(keys[0])


def test_wam_eval_with_a_fifo_at_a_cached_answer_stops_with_a_typed_error(tmp_path):
    args = ["eval", "--episodes", 1, "--max-chunks", 2, "--cache", tmp_path / "c"]
    first = wam(*args, "--out", tmp_path / "a")
    assert first.returncode == 0, first.stderr
    sidecars = sorted((tmp_path / "c").glob("??/*.json"))
    assert sidecars
    for path in sidecars:
        path.unlink()
        os.mkfifo(path)
    again = wam(*args, "--out", tmp_path / "b", timeout=120)  # before: waited for a writer forever
    assert again.returncode == 1
    assert "a FIFO, not a regular file; remove it yourself" in again.stderr and "Traceback" not in again.stderr


def test_put_never_follows_a_link_planted_at_a_temp_name(counted, tmp_path):
    model, _ = counted
    store = ArtifactStore(tmp_path / "cache")
    request = PredictRequest(observation=PointMassEnv().reset(seed=5))
    identity = CachedModel(model, store).identity_sha256
    key = request_key(identity, request)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    folder = tmp_path / "cache" / key[:2]
    folder.mkdir(parents=True)
    for suffix in (".wam", ".json"):  # the names every earlier version wrote to, for this process
        (folder / f"{key}{suffix}.{os.getpid()}.tmp").symlink_to(victim)
    CachedModel(model, store).predict(request)
    assert victim.read_text() == "precious"
    assert store.get(key) is not None and not (folder / f"{key}.wam").is_symlink()
    assert [p.name for p in folder.iterdir() if p.name.startswith(".")] == []  # no temp file left behind
    # a shard folder that is a link is refused, not written through
    other = PredictRequest(observation=PointMassEnv().reset(seed=6))
    okey = request_key(identity, other)
    outside = tmp_path / "outside"
    outside.mkdir()
    if not (tmp_path / "cache" / okey[:2]).exists():
        (tmp_path / "cache" / okey[:2]).symlink_to(outside, target_is_directory=True)
        with pytest.raises(ArtifactError, match="never a link"):
            CachedModel(model, store).predict(other)
        assert list(outside.iterdir()) == []


def test_one_bad_sidecar_does_not_hide_the_rest_of_the_cache(counted, tmp_path):
    keys = _filled(counted, tmp_path, 3)
    bad = {keys[0]: "{not json", keys[1]: json.dumps(["a", "list"])}
    for key, text in bad.items():
        (tmp_path / key[:2] / f"{key}.json").write_text(text)
    odd = f"{keys[2][:2]}{'3' * 62}"
    (tmp_path / keys[2][:2] / f"{odd}.json").write_text(json.dumps({"key": odd, "created": 5, "identity": "x"}))
    listed = wam("artifacts", "ls", tmp_path)
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split()[:2] == ["KEY", "CREATED"] and len(rows) == 1 and rows[0].startswith(keys[2][:16])
    assert "1 artifact(s)" in listed.stderr and "3 unreadable" in listed.stderr and "Traceback" not in listed.stderr
    assert "unreadable sidecar" in listed.stderr and "is list, not an object" in listed.stderr
    as_json = [json.loads(line) for line in wam("artifacts", "ls", tmp_path, "--json").stdout.splitlines()]
    assert sorted(m["key"] for m in as_json if "broken" in m) == sorted([keys[0], keys[1], odd])


def test_ls_shows_no_control_sequence_from_a_sidecar(counted, tmp_path):
    keys = _filled(counted, tmp_path, 1)
    path = tmp_path / keys[0][:2] / f"{keys[0]}.json"
    meta = json.loads(path.read_text())
    meta["identity"]["backend"] = "evil\x1b]0;owned\x07\x1b[2J\x9b31m"
    path.write_text(json.dumps(meta))
    listed = wam("artifacts", "ls", tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "\x1b" not in listed.stdout and "\x07" not in listed.stdout and "\x9b" not in listed.stdout
    assert "evil\\x1b]0;owned\\x07\\x1b[2J\\x9b31m" in listed.stdout  # shown, not run
