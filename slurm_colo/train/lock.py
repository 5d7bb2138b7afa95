"""One retrain at a time per history store.

Two retrains on one database (the nightly timer and an admin's manual run, or timers on two
hosts) would rebuild the same episodes and race to publish. :func:`retrain_lock` makes the
second one stop at once, having changed nothing, with a message that says who holds the
lock:

* SQLite: ``flock`` on ``<database file>.retrain.lock`` (it holds the holder's pid); the
  kernel drops the lock when the holder dies, so a killed retrain never blocks the next
  night;
* PostgreSQL: a session advisory lock (``pg_try_advisory_lock``), held on one connection
  for the whole retrain; it also ends with the holder's session.

An in-memory SQLite database is private to its process and needs no lock.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from slurm_colo.errors import ModelError
from slurm_colo.fsutil import read_small, try_lock, unlock
from slurm_colo.store.engine import db_errors

#: advisory lock key on PostgreSQL (an arbitrary constant: "colo" in ASCII)
PG_LOCK_KEY = 0x636F6C6F
_BUSY = "another retrain is running on this history store"


def lock_path(engine: Engine) -> str | None:
    """The lock file of a SQLite store; None for an in-memory database or another dialect."""
    if engine.dialect.name != "sqlite":
        return None
    db = engine.url.database
    if not db or db == ":memory:" or db.startswith("file::memory:"):
        return None
    return f"{db}.retrain.lock"


@contextmanager
def retrain_lock(engine: Engine) -> Iterator[None]:
    """Hold the store's retrain lock, or raise :class:`ModelError` if another run has it."""
    if engine.dialect.name == "postgresql":
        with _pg_lock(engine):
            yield
        return
    path = lock_path(engine)
    if path is None:
        yield
        return
    with _file_lock(path):
        yield


@contextmanager
def _file_lock(path: str) -> Iterator[None]:
    try:
        fd = try_lock(Path(path), 0.0)
    except OSError as e:
        raise ModelError(
            f"cannot open the retrain lock {path}: {e.strerror}",
            hint="check the permissions of the database's directory",
        ) from None
    if fd is None:
        holder = (read_small(Path(path), 32) or b"").decode(errors="replace").strip() or "?"
        raise ModelError(
            f"{_BUSY} (pid {holder}, lock {path}); this run changed nothing",
            hint="wait for it to finish; a dead holder releases the lock by itself",
        )
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        unlock(fd)


@contextmanager
def _pg_lock(engine: Engine) -> Iterator[None]:
    with db_errors(engine), engine.connect() as conn:
        got = conn.scalar(text("SELECT pg_try_advisory_lock(:k)"), {"k": PG_LOCK_KEY})
        conn.commit()
        if not got:
            holder = conn.scalar(
                text(
                    "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
                    "AND objid = :k LIMIT 1"
                ),
                {"k": PG_LOCK_KEY},
            )
            raise ModelError(
                f"{_BUSY} (PostgreSQL backend pid {holder or '?'}); this run changed nothing",
                hint="wait for it to finish",
            )
        try:
            yield
        finally:
            # a lost connection has dropped the lock with its session: nothing to undo
            with suppress(SQLAlchemyError):
                conn.scalar(text("SELECT pg_advisory_unlock(:k)"), {"k": PG_LOCK_KEY})
                conn.commit()
