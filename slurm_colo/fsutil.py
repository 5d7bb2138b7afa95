"""Small file-system helpers (node hooks, store, agent): atomic writes, locks, ownership."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO


def temp_name(name: str) -> str:
    """The temporary name :func:`atomic_write_bytes` writes ``name`` under: its own for
    each process and thread, so two writers of one file never share one."""
    return f".tmp-{name}-{os.getpid()}-{threading.get_native_id()}"


def atomic_write_bytes(
    path: Path, data: bytes, mode: int = 0o600, fsync: bool = True, strict: bool = False
) -> None:
    """Write ``data`` to ``path`` so readers see the old file or the new one, never a part.

    The temporary file lives in the same directory (same file system) and is renamed over
    the target, so a symlink planted at ``path`` is replaced, never written through; the
    file gets ``mode`` exactly, whatever the umask. On any error the temporary file is
    removed and the error re-raised. With ``fsync`` the data and then the directory are
    flushed to disk, so the new file outlives a power cut that comes after the call
    (without, the rename may be lost, or the file found empty). A directory that cannot
    be flushed is no error (the file is in place), unless ``strict``: then it is raised,
    for a caller that must say the file may not outlive a power cut.
    """
    tmp = path.with_name(temp_name(path.name))
    try:
        os.unlink(tmp)  # a leftover of a killed writer with our pid and thread id
    except FileNotFoundError:
        pass
    # O_EXCL | O_NOFOLLOW: never write through a planted file or symlink
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if fsync:
        try:
            fsync_dir(path.parent)
        except OSError:
            if strict:
                raise  # else the file is in place: that is written


def fsync_dir(path: Path) -> None:
    """Flush the directory ``path`` (its entries: a file created or renamed in it)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_json(path: Path, obj: Any, mode: int = 0o600, fsync: bool = True) -> None:
    atomic_write_bytes(path, json.dumps(obj, sort_keys=True).encode() + b"\n", mode, fsync)


def open_regular(path: str | Path, pipe: bool = False) -> BinaryIO:
    """``path`` opened for reading in binary mode, if it is a regular file (a symlink to one
    will do) or, with ``pipe``, a pipe; OSError otherwise, ``IsADirectoryError`` for a
    directory.

    For the files a site names on the command line or in the config: ``/dev/zero`` would
    be read until memory ran out, and a FIFO would make a plain ``open`` wait for a writer
    for ever. A command's input may be a pipe (``--sacct <(sacct ...)``): it is read as it
    comes, and a named FIFO without a writer reads as empty instead of waiting. A file
    read by a daemon or a hook (the config's score set) may not.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # O_NONBLOCK: a FIFO opens at once
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if pipe and stat.S_ISFIFO(mode):
            os.set_blocking(fd, True)  # wait for what the writer sends, not for a writer
        elif not stat.S_ISREG(mode):
            kind = "a regular file or a pipe" if pipe else "a regular file"
            raise OSError(errno.EINVAL, f"not {kind}", str(path))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | Path, pipe: bool = False) -> bytes:
    """All of the file :func:`open_regular` opens (and its errors)."""
    with open_regular(path, pipe) as f:
        return f.read()


def read_small(path: Path, limit: int | None = 1024 * 1024) -> bytes | None:
    """Up to ``limit`` bytes of a regular file (None: all of it), not following a symlink
    at ``path``; None when it is missing, bigger or not a regular file.

    Safe for root to call on files in directories a job user can write (the user could
    plant a symlink to a device or a secret, or a FIFO that would block a plain ``open``).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # before fdopen: it refuses a directory
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read() if limit is None else f.read(limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if limit is None or len(data) <= limit else None


def read_json(path: Path, limit: int = 1024 * 1024) -> Any | None:
    """The JSON in ``path``, or None when missing, not a regular file, too big or corrupt
    (nested too deeply included: a job writes some of these files)."""
    raw = read_small(path, limit)
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested too deeply
        return None


def try_lock(path: Path, timeout_s: float) -> int | None:
    """Take an exclusive ``flock`` on ``path`` (created if missing), waiting up to
    ``timeout_s``. Returns the held fd (release with :func:`unlock`) or None on timeout,
    so a stuck holder cannot stall a hook forever; the caller decides what to do."""
    import time

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            time.sleep(0.005)


def unlock(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


@contextlib.contextmanager
def locked(path: Path, timeout_s: float = 5.0) -> Iterator[None]:
    """Hold the lock of :func:`try_lock` for the block; TimeoutError if it cannot be had."""
    fd = try_lock(path, timeout_s)
    if fd is None:
        raise TimeoutError(f"lock {path} held for more than {timeout_s:.1f}s")
    try:
        yield
    finally:
        unlock(fd)


def chown_if_root(path: Path, uid: int, gid: int = -1) -> None:
    """Give ``path`` to ``uid`` when running as root (the real Prolog); no-op otherwise.

    A symlink is given, never what it names: where the user can already write the
    directory (a job's files written again), they could swap the file for a link to a
    file of root's between root's write and this call."""
    if os.geteuid() == 0 and uid >= 0:
        os.chown(path, uid, gid, follow_symlinks=False)


def ensure_dir(path: Path, mode: int = 0o755) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=mode)
    return path
