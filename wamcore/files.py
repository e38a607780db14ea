"""Files written so that a kill leaves the old or the new content, and read so that a
planted file cannot hang, redirect or fool the reader.

:func:`atomic_write` writes a temp file created exclusively (``O_CREAT|O_EXCL|O_NOFOLLOW``,
a random name, in the target's own directory, so a symlink planted at a predictable name is
never followed), fsyncs it, renames it over the target and fsyncs the directory: after a
crash the target holds either its old or its new bytes, never half of them.
:func:`read_regular` opens without following a final symlink and without blocking (a FIFO
would wait for a writer forever), and reads only a regular file.
"""

from __future__ import annotations

import os
import secrets
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional, Union

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
TEMP_SUFFIX = ".tmp"


class NotRegularFile(OSError):
    """A path that names a symlink, FIFO, socket, device or directory where a regular file
    (or a real directory) belongs; ``what`` says which, in words."""

    def __init__(self, path, what: str, wanted: str = "a regular file"):
        super().__init__(f"{path} is {what}, not {wanted}")
        self.path, self.what = str(path), what


def kind(mode: int) -> str:
    """What a ``st_mode`` is, in words (for messages)."""
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISREG, "a regular file")):
        if test(mode):
            return name
    return "not a regular file"


@contextmanager
def open_dir(path: Union[str, Path], *, follow: bool = True) -> Iterator[int]:
    """A descriptor of the directory ``path``; with ``follow=False`` a symlink there is
    refused (:class:`NotRegularFile`) instead of followed."""
    try:
        fd = os.open(path, os.O_RDONLY | _DIRECTORY | _CLOEXEC | (0 if follow else _NOFOLLOW))
    except OSError:
        st = _lstat(path, None)
        if st is not None and not stat.S_ISDIR(st.st_mode):
            raise NotRegularFile(path, kind(st.st_mode), "a directory") from None
        raise
    try:
        yield fd
    finally:
        os.close(fd)


def read_regular(path: Union[str, Path], *, dir_fd: Optional[int] = None, limit: Optional[int] = None) -> bytes:
    """The bytes of the regular file ``path`` (relative to ``dir_fd`` when given). A symlink,
    FIFO, socket, device or directory raises :class:`NotRegularFile` without blocking; a
    file larger than ``limit`` bytes raises ``ValueError``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW | _CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        st = _lstat(path, dir_fd)
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(path, kind(st.st_mode)) from None
        raise exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(path, kind(st.st_mode))
        if limit is not None and st.st_size > limit:
            raise ValueError(f"{path} is {st.st_size} bytes, more than the {limit} allowed")
        os.set_blocking(fd, True)
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def _lstat(path, dir_fd: Optional[int]) -> Optional[os.stat_result]:
    try:
        return os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None


def atomic_write(path: Union[str, Path], data: Union[bytes, str], *, durable: bool = True,
                 dir_fd: Optional[int] = None) -> None:
    """Replace ``path`` (a name in ``dir_fd`` when given) with ``data`` in one rename.
    ``durable`` fsyncs the file and its directory, so the rename survives a power cut."""
    if isinstance(data, str):
        data = data.encode()
    path = Path(path)
    if dir_fd is None:
        with open_dir(path.parent if str(path.parent) else ".") as fd:
            return atomic_write(path.name, data, durable=durable, dir_fd=fd)
    name = path.name
    tmp = f".{name}.{secrets.token_hex(8)}{TEMP_SUFFIX}"
    # the mode is narrowed by the umask, as open() would; O_EXCL|O_NOFOLLOW: never an existing file or a link
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o666, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise
    if durable:
        os.fsync(dir_fd)


__all__ = ["atomic_write", "read_regular", "open_dir", "NotRegularFile", "kind", "TEMP_SUFFIX"]
