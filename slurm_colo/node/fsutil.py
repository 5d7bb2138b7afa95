"""Small file-system helpers shared by the node side: atomic writes, locks, ownership."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o600, fsync: bool = True) -> None:
    """Write ``data`` to ``path`` so readers see the old file or the new one, never a part.

    The temporary file lives in the same directory (same file system) and is renamed over
    the target; on any error the temporary file is removed and the error re-raised.
    """
    tmp = path.with_name(f".tmp-{path.name}-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        try:
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


def atomic_write_json(path: Path, obj: Any, mode: int = 0o600, fsync: bool = True) -> None:
    atomic_write_bytes(path, json.dumps(obj, sort_keys=True).encode() + b"\n", mode, fsync)


def read_json(path: Path) -> Any | None:
    """The JSON in ``path``, or None when it is missing or unreadable/corrupt."""
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def locked(path: Path, timeout_s: float = 5.0) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the block.

    Waits up to ``timeout_s``; raises TimeoutError after that, so a stuck holder cannot
    stall a Prolog forever.
    """
    import time

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"lock {path} held for more than {timeout_s:.1f}s") from None
                time.sleep(0.005)
        yield
    finally:
        os.close(fd)


def chown_if_root(path: Path, uid: int, gid: int = -1) -> None:
    """Give ``path`` to ``uid`` when running as root (the real Prolog); no-op otherwise."""
    if os.geteuid() == 0 and uid >= 0:
        os.chown(path, uid, gid)


def ensure_dir(path: Path, mode: int = 0o755) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=mode)
    return path
