"""Pinned checkpoint files: every missing file and hash mismatch is named at start-up."""

from __future__ import annotations

import hashlib
import json

import pytest

from wamcore.checkpoints import Pins, sha256_file, verify_directory, write_pins
from wamcore.errors import CheckpointError


@pytest.fixture
def ckpt(tmp_path):
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "model.safetensors").write_bytes(b"weights" * 1000)
    (d / "stats.json").write_text('{"mean": 0}')
    return d


def pins_for(d, **override):
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in d.iterdir()}
    files.update(override)
    return Pins(files=files, source="hf://org/model@abc123")


def test_matching_directory_returns_the_paths(ckpt):
    found = verify_directory(ckpt, pins_for(ckpt))
    assert set(found) == {"model.safetensors", "stats.json"}


def test_every_problem_names_its_file(ckpt):
    pins = pins_for(ckpt, **{"stats.json": "0" * 64, "t5_cache.pkl": None})
    with pytest.raises(CheckpointError) as info:
        verify_directory(ckpt, pins)
    message = str(info.value)
    assert "missing file t5_cache.pkl" in message
    assert "stats.json: sha256 " in message and "does not match the pinned 000" in message
    assert message.endswith("\nDownload the checkpoint from hf://org/model@abc123.")
    verify_directory(ckpt, Pins(files={"model.safetensors": "0" * 64}), verify_hashes=False)


def test_no_directory_or_a_missing_one(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint directory given; pass --am-checkpoint DIR holding: a.bin"):
        verify_directory(None, Pins(files={"a.bin": None}))
    with pytest.raises(CheckpointError, match="does not exist"):
        verify_directory(tmp_path / "nope", Pins(files={}))


def test_user_pins_extend_the_shipped_ones(ckpt, tmp_path):
    path = tmp_path / "pins.json"
    written = write_pins(path, {"model.safetensors": ckpt / "model.safetensors"}, source="mine")
    loaded = Pins.load(path)
    assert loaded == written and json.loads(path.read_text())["source"] == "mine"
    merged = Pins(files={"model.safetensors": "0" * 64, "stats.json": None}).extended(loaded)
    assert merged.files["model.safetensors"] == sha256_file(ckpt / "model.safetensors") and merged.source == "mine"
    (tmp_path / "bad.json").write_text("[1]")
    with pytest.raises(CheckpointError, match="bad.json holds a JSON list, not an object"):
        Pins.load(tmp_path / "bad.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(CheckpointError, match="cannot read pin file"):
        Pins.load(tmp_path / "bad.json")


def test_hash_cache_notices_a_changed_file(ckpt):
    path = ckpt / "stats.json"
    first = sha256_file(path)
    path.write_text('{"mean": 1, "longer": true}')
    assert sha256_file(path) != first
