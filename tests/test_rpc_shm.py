"""The same-host shared-memory path: same answers as frames, arrays the model keeps stay
intact, segments never leak, and a worker that cannot read them is fallen back from."""

from __future__ import annotations

import glob
import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # helpers beside the tests

from helpers_workers import no_leaks, scripted_env, served  # noqa: E402,F401

import wamtest_scripted as toy  # noqa: E402
from wamcore.contracts import PredictRequest  # noqa: E402
from wamcore.rpc import RemoteModel  # noqa: E402
from wamcore.rpc import shm  # noqa: E402
from wamcore.specs import PlatformSpec  # noqa: E402

pytestmark = [pytest.mark.usefixtures("no_leaks", "scripted_env"),
              pytest.mark.skipif(not shm.supported(), reason="shared memory needs Linux /dev/shm")]

BIG = PlatformSpec(name="toy-big", observation=toy.BIG_OBSERVATION, control=toy.TOY_CONTROL, make_env=toy.ToyEnv)


def expected_sums(obs):
    return {role: int(img.sum(dtype=np.int64)) for role, img in obs.images.items()}


def segments() -> set:
    return set(glob.glob(os.path.join(shm.SHM_DIR, "wamcore-*")))


@pytest.mark.parametrize("shared", [True, False])
def test_answers_are_the_same_through_shared_memory_and_frames(tmp_path, shared):
    before = segments()
    with served(tmp_path, backend="echo-wam", platform="toy-big") as w:
        model = RemoteModel(w.endpoint, shared_memory=shared).bind(BIG)
        try:
            assert model.shared_memory is shared
            for seed in range(3):
                obs = toy.big_observation(seed)
                assert model.predict(PredictRequest(obs)).info["sums"] == expected_sums(obs)
            if shared:  # the worker mapped the segment and unlinked its name: nothing can leak
                assert model._arena is not None and not os.path.exists(os.path.join(shm.SHM_DIR, model._arena.name))
        finally:
            model.close()
    assert segments() == before


def test_arrays_a_model_keeps_are_not_overwritten_by_the_next_request(tmp_path):
    with served(tmp_path, backend="echo-wam", platform="toy-big") as w:
        with RemoteModel(w.endpoint).bind(BIG) as model:
            model.predict(PredictRequest(toy.big_observation(1)))
            info = model.predict(PredictRequest(toy.big_observation(2))).info
            assert model.shared_memory  # the second request reused the segment the first one used
    assert info["kept_now"] == info["kept_then"] == expected_sums(toy.big_observation(1))


def test_a_worker_that_cannot_read_shared_memory_is_fallen_back_from(tmp_path):
    # bound beyond loopback (hence the token), the worker refuses shared-memory references
    with served(tmp_path, "--host", "0.0.0.0", "--token", "s3cret", backend="echo-wam", platform="toy-big") as w:
        endpoint = f"tcp://127.0.0.1:{w.port}"
        with RemoteModel(endpoint, token="s3cret").bind(BIG) as model:
            assert model.shared_memory
            obs = toy.big_observation(4)
            assert model.predict(PredictRequest(obs)).info["sums"] == expected_sums(obs)
            assert model.shared_memory is False and model._arena is None
            obs = toy.big_observation(5)
            assert model.predict(PredictRequest(obs)).info["sums"] == expected_sums(obs)


def test_the_arena_grows_for_larger_requests():
    arena = shm.Arena(256, "0" * 32)
    try:
        with pytest.raises(shm.ArenaFull) as full:
            arena.put(np.zeros(1024, np.uint8))
        assert full.value.needed == 64 + 1024
    finally:
        arena.close()
    assert not os.path.exists(os.path.join(shm.SHM_DIR, arena.name))


def test_references_are_checked_by_the_worker():
    from wamcore.errors import ProtocolError

    instance = "ab" * 16
    arena = shm.Arena(1 << 16, instance)
    segments_ = shm.SharedSegments(enabled=True, instance=instance, max_bytes=1 << 20)

    def resolve(ref, session="s"):
        args = {"x": shm.Reference(ref)}
        segments_.resolve(args, [args["x"]], session)
        return args["x"]

    try:
        arena.begin()
        ref = arena.put(np.arange(40000, dtype=np.uint8))
        assert np.array_equal(resolve(ref), np.arange(40000, dtype=np.uint8))
        import msgpack

        name, cookie, offset, dtype, shape = msgpack.unpackb(ref)
        for bad, message in [
            ((name, b"x" * 16, offset, dtype, shape), "another cookie"),
            (("../../etc/passwd", cookie, offset, dtype, shape), "bad shared-memory segment name"),
            ((name, cookie, 0, dtype, shape), "bad offset"),
            ((name, cookie, offset, "|O", shape), "cannot go on the wire"),
            ((name, cookie, offset, dtype, [1 << 20]), "truncated"),
            ((name, cookie, offset, dtype, [1 << 21]), "exceed 1048576 bytes"),
        ]:
            with pytest.raises(ProtocolError, match=message):
                resolve(msgpack.packb(bad))
        with pytest.raises(ProtocolError, match="session calls only"):
            resolve(ref, session=None)
        other = shm.Arena(1 << 16, "cd" * 16)  # made for another worker
        try:
            other.begin()
            with pytest.raises(shm.SharedMemoryUnavailable, match="another worker"):
                resolve(other.put(np.zeros(40000, np.uint8)))
        finally:
            other.close()
        with pytest.raises(shm.SharedMemoryUnavailable):
            shm.SharedSegments(enabled=False, instance=instance, max_bytes=1 << 20).resolve({}, [], "s")
    finally:
        segments_.close()
        arena.close()


def test_same_host_clients_use_the_local_channel_and_survive_its_loss(tmp_path):
    with served(tmp_path, backend="echo-wam", platform="toy-big") as w:
        with RemoteModel(w.endpoint).bind(BIG) as model:
            obs = toy.big_observation(6)
            assert model.predict(PredictRequest(obs)).info["sums"] == expected_sums(obs)
            assert model._channel is not None  # the call went over the worker's Unix socket
            model._channel.sock.close()  # the channel breaks between calls
            model._channel = None
            assert model.predict(PredictRequest(obs)).info["sums"] == expected_sums(obs)
        with RemoteModel(w.endpoint, local_channel=False).bind(BIG) as zmq_only:
            assert zmq_only.predict(PredictRequest(obs)).info["sums"] == expected_sums(obs)
            assert zmq_only._channel is None
