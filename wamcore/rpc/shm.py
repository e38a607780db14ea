"""Same-host fast path: large request arrays travel through shared memory, not the socket.

A LIBERO request is ~0.4 MB of images. Over a socket those bytes are copied into the kernel
and out again on every step; through a shared-memory segment they are copied once, and the
socket carries only the small header (``../shared/reference/rpc_perf.md``: shared memory with
a socket doorbell is the fastest robust same-host path; busy-polling is not).

* The client owns an :class:`Arena`, a segment in ``/dev/shm`` that only it writes, named
  after the worker it talks to (``wamcore-<worker instance>-<random>``). Each request's
  large arrays are copied into it; the header refers to (segment, cookie, offset, dtype,
  shape) instead of a frame.
* The worker resolves references only for an authenticated request of an open session
  (the token and the session are checked first). The first time a session names a
  segment, the worker opens it without following links and without blocking, and accepts
  only a regular file on ``/dev/shm`` owned by its own user with no other link, whose
  first 16 bytes are the cookie the client sent; then it **unlinks the name**, so the
  segment lives exactly as long as the two processes hold it.
* It reads each array out with ``pread`` into memory of its own, so a model may keep what
  it receives, and a client that truncates its segment meanwhile gets an error, not a
  worker killed by SIGBUS (what reading a mapping past its file's end does).
* A worker keeps a few segments per session (a client uses one at a time), a bounded
  number in all, and closes them with the session. Segments named for this worker that no request unlinked (a request
  queued when the client died) are unlinked when the worker stops.
* Only workers bound to loopback accept references. A worker that cannot open the segment
  (another host or container) answers :class:`SharedMemoryUnavailable`; the client then
  tries once with a fresh segment and otherwise falls back to frames for good.
* After a call that timed out or lost its worker, the client retires its arena, so a
  worker still reading a late request never sees bytes of the next one.
"""

from __future__ import annotations

import errno
import glob
import mmap
import os
import re
import stat
import sys
import uuid
import weakref
from collections import OrderedDict
from typing import Callable, List, NamedTuple, Optional

import msgpack
import numpy as np

from .. import wire
from ..errors import ProtocolError, WorkerError

SHM_DIR = "/dev/shm"
#: arrays at least this large go through the segment; smaller ones are cheaper as frames
THRESHOLD = 32 * 1024
#: segments a worker keeps open per session (a client's current arena and the one before)
PER_SESSION = 2
_COOKIE = 16
_ALIGN = 64
_NAME = re.compile(r"wamcore-([0-9a-f]{32})-[0-9a-f]{32}")
_packer = msgpack.Packer(use_bin_type=True)


class SharedMemoryUnavailable(WorkerError):
    """The worker cannot read the client's shared-memory segment (another host or container,
    a worker bound beyond loopback, no /dev/shm); the client falls back to socket frames."""


class ArenaFull(Exception):
    def __init__(self, needed: int):
        self.needed = needed


def supported() -> bool:
    return sys.platform.startswith("linux") and os.path.isdir(SHM_DIR)


def _release(path: str, mm: mmap.mmap) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:  # the worker unlinked it after opening it
        pass
    mm.close()


class Arena:
    """A client-owned segment that request arrays are copied into, one request at a time;
    ``owner`` is the instance id of the worker it is for (part of its name)."""

    threshold = THRESHOLD

    def __init__(self, size: int, owner: str):
        self.size = max(int(size), _ALIGN * 2)
        self.name = f"wamcore-{owner}-{uuid.uuid4().hex}"
        self.cookie = os.urandom(_COOKIE)
        path = os.path.join(SHM_DIR, self.name)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, self.size)
            self._mm = mmap.mmap(fd, self.size)
        finally:
            os.close(fd)
        self._mm[:_COOKIE] = self.cookie
        self._offset = _ALIGN
        self._finalizer = weakref.finalize(self, _release, path, self._mm)

    def begin(self) -> None:
        self._offset = _ALIGN

    def put(self, array: np.ndarray) -> bytes:
        """Copy ``array`` in; return the reference for the header."""
        start = self._offset
        end = start + array.nbytes
        if end > self.size:
            raise ArenaFull(end)
        dst = np.frombuffer(self._mm, dtype=array.dtype, count=array.size, offset=start)
        np.copyto(dst.reshape(array.shape), array)
        del dst  # no view may outlive a call: the mapping must stay closable
        self._offset = -(-end // _ALIGN) * _ALIGN
        return _packer.pack((self.name, self.cookie, start, array.dtype.str, array.shape))

    def close(self) -> None:
        self._finalizer()


class Reference:
    """A shared-memory reference as decoded, not yet read: the worker reads it only after
    the request is authenticated and its session known."""

    __slots__ = ("data",)

    def __init__(self, data: bytes):
        self.data = data


class _Segment(NamedTuple):
    cookie: bytes
    fd: int


def _refuse(fd: int, why: str) -> None:
    os.close(fd)
    raise ProtocolError(why)


class SharedSegments:
    """Worker side: reads references of a session's requests out of its segments. At most
    ``PER_SESSION`` segments per session and ``max_open`` in all stay open (least recently
    used closed first: a client whose segment was closed gets SharedMemoryUnavailable and
    sends the next request in a fresh one)."""

    def __init__(self, enabled: bool, instance: str, max_bytes: int, max_open: int = 1024):
        self.enabled = enabled and supported()
        self.instance = instance
        self.max_bytes = max_bytes
        self.max_open = max(1, max_open)
        self._segments: "OrderedDict[tuple, _Segment]" = OrderedDict()  # (session, name), least recently used first
        self._device = os.stat(SHM_DIR).st_dev if self.enabled else None

    def resolve(self, root: dict, refs: List[Reference], session: Optional[str]) -> None:
        """Replace every :class:`Reference` inside ``root`` by its array (``refs``: all the
        references the request's header held)."""
        if not self.enabled:
            raise SharedMemoryUnavailable("this worker does not read shared memory (not on loopback, or no /dev/shm)")
        if session is None:
            raise ProtocolError("shared-memory references are accepted in session calls only")
        budget = [self.max_bytes]
        replaced = _replace(root, lambda ref: self._read(ref, session, budget))
        if replaced != len(refs):
            raise ProtocolError("shared-memory references are accepted in a request's args only")

    def _read(self, ref: Reference, session: str, budget: list) -> np.ndarray:
        try:
            name, cookie, offset, dtype_s, shape = msgpack.unpackb(ref.data)
        except (ValueError, TypeError) as exc:
            raise ProtocolError(f"bad shared-memory reference: {exc}") from exc
        if not isinstance(offset, int) or offset < _COOKIE:
            raise ProtocolError("bad offset in a shared-memory reference")
        if not isinstance(shape, list):
            raise ProtocolError("bad shape in a shared-memory reference")
        nbytes = wire.array_nbytes(dtype_s, shape)  # checks dtype and shape
        budget[0] -= nbytes
        if budget[0] < 0:
            raise ProtocolError(f"a request's shared-memory arrays exceed {self.max_bytes} bytes (--max-message-mb)")
        fd = self._segment(name, cookie, session)
        out = np.empty(shape, dtype=wire.array_dtype(dtype_s))
        got = os.preadv(fd, [memoryview(out).cast("B")], offset) if nbytes else 0
        if got != nbytes:
            raise ProtocolError(f"shared-memory segment {name} was truncated: {got} of {nbytes} bytes at offset {offset}")
        return out

    def _segment(self, name, cookie, session: str) -> int:
        if not isinstance(name, str) or not isinstance(cookie, bytes):
            raise ProtocolError("bad shared-memory segment name")
        match = _NAME.fullmatch(name)
        if match is None:
            raise ProtocolError(f"bad shared-memory segment name {name[:80]!r}")
        if match.group(1) != self.instance:
            raise SharedMemoryUnavailable(f"segment {name} was made for another worker; use a fresh one")
        key = (session, name)
        known = self._segments.get(key)
        if known is not None:
            if known.cookie != cookie:
                raise ProtocolError(f"shared-memory segment {name} presented with another cookie")
            self._segments.move_to_end(key)
            return known.fd
        fd = self._open(name, cookie)
        self._segments[key] = _Segment(cookie, fd)
        mine = [k for k in self._segments if k[0] == session]
        for old in mine[: max(0, len(mine) - PER_SESSION)]:
            self._close(old)
        while len(self._segments) > self.max_open:
            self._close(next(iter(self._segments)))
        return fd

    def _close(self, key: tuple) -> None:
        os.close(self._segments.pop(key).fd)

    def _open(self, name: str, cookie: bytes) -> int:
        path = os.path.join(SHM_DIR, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            raise SharedMemoryUnavailable(
                f"no segment {name} in {SHM_DIR} (the client is on another host or in another container, "
                "or the worker released it)") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ProtocolError(f"{path} is not a regular file (a symbolic link)") from None
            raise SharedMemoryUnavailable(f"cannot open {path}: {exc.strerror}") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            _refuse(fd, f"{path} is not a regular file")
        if st.st_uid != os.geteuid() or st.st_dev != self._device or st.st_nlink != 1:
            _refuse(fd, f"{path} is not a segment of this worker's user (owner, file system or links differ)")
        if os.pread(fd, _COOKIE, 0) != cookie:
            os.close(fd)
            raise SharedMemoryUnavailable(f"{path} is not the client's segment (cookie mismatch)")
        try:
            os.unlink(path)  # from now on the segment lives exactly as long as the two processes hold it
        except OSError:
            pass
        return fd

    def drop_session(self, session: str) -> None:
        for key in [k for k in self._segments if k[0] == session]:
            self._close(key)

    def close(self) -> None:
        while self._segments:
            self._close(next(iter(self._segments)))
        if self.enabled:
            unlink_segments_of(self.instance)


def unlink_segments_of(instance: str) -> int:
    """Unlink segments named for worker ``instance`` that are still in /dev/shm (requests
    never read: their client died with them queued). Returns how many."""
    count = 0
    for path in glob.glob(os.path.join(SHM_DIR, f"wamcore-{instance}-*")):
        try:
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                os.unlink(path)
                count += 1
        except OSError:
            pass
    return count


def _replace(root, resolve: Callable[[Reference], np.ndarray]) -> int:
    """Replace References in nested dicts and lists (iteratively: depth cannot hurt); returns how many."""
    count, stack = 0, [root]
    while stack:
        node = stack.pop()
        for key, value in (node.items() if isinstance(node, dict) else enumerate(node)):
            if isinstance(value, Reference):
                node[key] = resolve(value)
                count += 1
            elif isinstance(value, (dict, list)):
                stack.append(value)
    return count


__all__ = ["Arena", "ArenaFull", "Reference", "SharedSegments", "SharedMemoryUnavailable", "THRESHOLD", "supported",
           "unlink_segments_of"]
