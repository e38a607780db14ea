"""A bounded fuzz of a real worker (thousands of malformed requests over ZeroMQ, the Unix
channel and shared memory) and a bounded parent-kill stress; ``bench/fuzz_worker.py`` runs
the long versions (figures in docs/security.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from helpers_workers import no_leaks  # noqa: E402,F401

import fuzz_worker  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_leaks")


def test_thousands_of_malformed_requests_neither_crash_nor_hang_nor_reach_the_model(tmp_path):
    report = fuzz_worker.run_fuzz(3000, seed=20261130, tmp=tmp_path)
    print("\n" + json.dumps({k: v for k, v in report.items() if k != "crash_details"}))
    assert report["crashes"] == 0, report["crash_details"]
    assert report["hangs"] == 0, report["hang_kinds"]
    assert report["malformed_inputs_seen_by_model"] == 0, report["first_violation"]
    assert report["model_calls_from_fuzz"] == report["ok_predictions_from_fuzz"]  # each model call was a valid request
    assert report["canaries_wrong"] == 0 and report["worker_alive"]
    assert report["of_them_dropped_by_worker"] == report["partial_messages_left_open"] > 0
    assert report["rss_kib_after"] - report["rss_kib_before"] < 128 * 1024
    # decoding is bounded (a 15 MiB header of empty maps took ~1 GiB) and so is shared memory
    # (sealed sparse files of 64 TiB took the address space)
    assert report["rss_kib_peak"] - report["rss_kib_before"] < 256 * 1024
    assert report["vm_kib_peak"] - report["vm_kib_before"] < 4 << 20
    assert report["shared_mapped_kib_after"] <= fuzz_worker.MAX_SHARED_MB * 1024
    kinds = {k.split("/")[0] for k in report["cases_by_kind"]}
    assert kinds == {"envelope", "predict", "wire", "framing", "shm", "amplify", "address"}
    assert {k.split("/")[1] for k in report["cases_by_kind"] if "/" in k} == {"zmq", "local"}


def test_parent_kills_leave_no_orphan_and_no_segment(tmp_path):
    report = fuzz_worker.run_parent_kills(6, tmp=tmp_path)
    print("\n" + json.dumps(report))
    assert report["orphans"] == 0 and report["processes_left"] == 0
    assert report["segments_named_in_dev_shm"] == 0 and report["segments_still_held"] == 0
    assert report["modes"] == {"idle": 2, "busy": 2, "queued": 2}
