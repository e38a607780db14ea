"""Loading that other threads or other writers cannot subvert (issue 13, defects 13 and 16):
concurrent registry lookups while a plugin is still loading, and checkpoint hashes that
cover exactly the bytes that are loaded."""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # helpers beside the tests

from wamcore.checkpoints import read_verified, sha256_file  # noqa: E402
from wamcore.errors import CheckpointError  # noqa: E402
from wamcore.registry import Registry  # noqa: E402


def test_13_concurrent_lookups_wait_for_a_plugin_that_is_still_loading(monkeypatch):
    monkeypatch.setenv("WAMCORE_PLUGIN_MODULES", "wamtest_slowplugin")
    monkeypatch.setenv("WAMCORE_LOAD_PLUGINS", "")
    monkeypatch.delitem(sys.modules, "wamtest_slowplugin", raising=False)
    reg = Registry()
    start = threading.Barrier(80)
    found, failed = [], []

    def lookup():
        start.wait()
        try:
            found.append(reg.platform("slow-toy").name)
        except Exception as exc:
            failed.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=lookup) for _ in range(80)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert failed == [] and found == ["slow-toy"] * 80
    assert [r.name for r in reg.plugins()] == ["wamtest_slowplugin"]  # loaded once


def test_16_a_same_size_same_mtime_tamper_is_hashed_again(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"a" * 4096)
    first = sha256_file(path)
    st = path.stat()
    path.write_bytes(b"b" * 4096)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size, same mtime
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns
    assert sha256_file(path) == hashlib.sha256(b"b" * 4096).hexdigest() != first


def test_16_read_verified_returns_the_bytes_it_hashed(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"weights" * 1000)
    digest = hashlib.sha256(b"weights" * 1000).hexdigest()
    assert read_verified(path, digest.upper()) == b"weights" * 1000
    with pytest.raises(CheckpointError, match=f"{path}: sha256 {digest} does not match the pinned 000"):
        read_verified(path, "0" * 64)
