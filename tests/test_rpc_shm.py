"""The same-host shared-memory path: same answers as frames, arrays the model keeps stay
intact, segments are anonymous (nothing to leak), the worker takes only sealed memory files,
and a segment the worker does not have is sent again."""

from __future__ import annotations

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


@pytest.mark.parametrize("shared", [True, False])
def test_answers_are_the_same_through_shared_memory_and_frames(tmp_path, shared):
    with served(tmp_path, backend="echo-wam", platform="toy-big") as w:
        model = RemoteModel(w.endpoint, shared_memory=shared).bind(BIG)
        try:
            assert model.shared_memory is shared
            for seed in range(3):
                obs = toy.big_observation(seed)
                assert model.predict(PredictRequest(obs)).info["sums"] == expected_sums(obs)
            if shared:  # an anonymous memory file, sent once: no name anywhere that could leak
                assert model._arena.sent and os.readlink(f"/proc/self/fd/{model._arena.fd}").startswith("/memfd:")
            else:
                assert model._arena is None
        finally:
            model.close()


def test_arrays_a_model_keeps_are_not_overwritten_by_the_next_request(tmp_path):
    with served(tmp_path, backend="echo-wam", platform="toy-big") as w:
        with RemoteModel(w.endpoint).bind(BIG) as model:
            model.predict(PredictRequest(toy.big_observation(1)))
            info = model.predict(PredictRequest(toy.big_observation(2))).info
            assert model.shared_memory  # the second request reused the segment the first one used
    assert info["kept_now"] == info["kept_then"] == expected_sums(toy.big_observation(1))


def test_a_worker_without_the_local_channel_gets_frames(tmp_path):
    # bound beyond loopback (hence the token), the worker offers no local channel: no shared memory
    with served(tmp_path, "--host", "0.0.0.0", "--token", "s3cret", backend="echo-wam", platform="toy-big") as w:
        with RemoteModel(f"tcp://127.0.0.1:{w.port}", token="s3cret").bind(BIG) as model:
            obs = toy.big_observation(4)
            assert model.predict(PredictRequest(obs)).info["sums"] == expected_sums(obs)
            assert model._channel is None and model._arena is None


def test_a_segment_the_worker_does_not_have_is_sent_again(tmp_path):
    with served(tmp_path, backend="echo-wam", platform="toy-big") as w:
        with RemoteModel(w.endpoint).bind(BIG) as model:
            model._arena = shm.Arena(1 << 20)
            model._arena.sent = True  # as if the worker had it (it released it, say): it has not
            obs = toy.big_observation(5)
            assert model.predict(PredictRequest(obs)).info["sums"] == expected_sums(obs)
            assert model.shared_memory and model._arena.sent and model._shm_refusals == 0


def test_the_arena_grows_for_larger_requests():
    arena = shm.Arena(256)
    fd = arena.fd
    with pytest.raises(shm.ArenaFull) as full:
        arena.put(np.zeros(1024, np.uint8))
    assert full.value.needed == 64 + 1024
    with pytest.raises(OSError):
        os.ftruncate(fd, 0)  # sealed: it can never shrink under a worker that maps it
    arena.close()
    with pytest.raises(OSError):
        os.fstat(fd)


def test_only_sealed_memory_files_are_taken_and_references_are_checked():
    from wamcore.errors import ProtocolError

    arena = shm.Arena(1 << 16)
    segments_ = shm.SharedSegments(enabled=True, max_bytes=1 << 20)

    def resolve(ref, session="s"):
        args = {"x": shm.Reference(ref)}
        segments_.resolve(args, [args["x"]], session)
        return args["x"]

    try:
        arena.begin()
        ref = arena.put(np.arange(40000, dtype=np.uint8))
        with pytest.raises(shm.SharedMemoryUnavailable, match="unknown shared-memory segment"):
            resolve(ref)
        sent = os.dup(arena.fd)
        segments_.adopt("s", [sent])
        with pytest.raises(OSError):
            os.fstat(sent)  # the worker keeps the mapping, not the descriptor
        assert np.array_equal(resolve(ref), np.arange(40000, dtype=np.uint8))
        with pytest.raises(shm.SharedMemoryUnavailable):
            resolve(ref, session="another")  # segments belong to the session that sent them
        import msgpack

        sid, offset, dtype, shape = msgpack.unpackb(ref)
        for bad, error, message in [
            ((sid, 0, dtype, shape), ProtocolError, "bad shared-memory reference"),
            ((sid, offset, "|O", shape), ProtocolError, "cannot go on the wire"),
            ((sid, offset, dtype, [1 << 16]), ProtocolError, "beyond its segment"),
            ((sid, offset, dtype, [1 << 21]), ProtocolError, "exceed 1048576 bytes"),
            (("wamcore-" + "0" * 32, b"c" * 16, offset, dtype, shape), shm.SharedMemoryUnavailable, "local channel only"),
        ]:
            with pytest.raises(error, match=message):
                resolve(msgpack.packb(bad))
        with pytest.raises(ProtocolError, match="session calls only"):
            resolve(ref, session=None)
        read_end, write_end = os.pipe()
        regular = os.open(__file__, os.O_RDONLY)
        for fd, message in [(read_end, "not a pipe"), (regular, "sealed against shrinking")]:
            with pytest.raises(ProtocolError, match=message):
                segments_.adopt("s", [fd])
            with pytest.raises(OSError):
                os.fstat(fd)  # closed, taken or not
        os.close(write_end)
        with pytest.raises(shm.SharedMemoryUnavailable):
            shm.SharedSegments(enabled=False, max_bytes=1 << 20).resolve({}, [], "s")
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
