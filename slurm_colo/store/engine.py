"""Engine setup, schema version checks and programmatic migrations.

SQLite (the default) runs in WAL mode with a busy timeout, so the nightly retrain reads
while Epilogs write; a lock held longer than the timeout raises :class:`StoreError` (the
caller retries later) instead of waiting forever or corrupting anything. PostgreSQL works
by URL (``postgresql://...``, driver psycopg 3).
"""

from __future__ import annotations

import contextlib
import re
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, event, inspect
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError

from ..errors import StoreError

MIGRATIONS = Path(__file__).parent / "migrations"
UPGRADE_HINT = "slurm-colo db upgrade"
_checked: weakref.WeakSet[Engine] = weakref.WeakSet()


def safe_url(engine_or_url: Engine | str) -> str:
    """The URL with any password masked, for messages."""
    url = engine_or_url.url if isinstance(engine_or_url, Engine) else engine_or_url
    try:
        return make_url(str(url)).render_as_string(hide_password=True)
    except ArgumentError:
        return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", str(url))


def make_engine(url: str, busy_timeout_s: float = 10.0, create: bool = True) -> Engine:
    """An engine for ``url``: ``sqlite:///PATH`` (WAL, busy timeout) or ``postgresql://...``.
    ``create=False``: a SQLite file that is not there is an error (a command that only reads
    must not leave an empty database, and its directory, at a mistyped path)."""
    try:
        u = make_url(url)
    except ArgumentError:
        raise StoreError(
            f"store URL {url!r} is not a database URL",
            hint="set [store] url, e.g. sqlite:////var/lib/slurm-colo/history.db",
        ) from None
    if u.drivername in ("postgresql", "postgres"):
        u = u.set(drivername="postgresql+psycopg")
    if u.get_backend_name() == "sqlite":
        db = u.database or ""
        if db in ("", ":memory:"):
            raise StoreError(
                f"store URL {url!r} keeps the history in memory, gone when the command ends",
                hint="give a file, e.g. sqlite:////var/lib/slurm-colo/history.db",
            )
        if not db.startswith("file:"):
            if not create and not Path(db).is_file():
                raise StoreError(
                    f"no history database at {db}",
                    hint="check [store] url or --url; slurm-colo db upgrade creates it",
                )
            try:
                Path(db).parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StoreError(f"cannot create the directory of {db}: {e.strerror}") from None
        engine = create_engine(u, connect_args={"timeout": busy_timeout_s})
        ms = int(busy_timeout_s * 1000)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _rec: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute(f"PRAGMA busy_timeout = {ms}")
            if db not in ("", ":memory:"):
                cur.execute("PRAGMA journal_mode = WAL")
            cur.execute("PRAGMA synchronous = NORMAL")
            cur.execute("PRAGMA foreign_keys = ON")
            cur.close()

        return engine
    if u.get_backend_name() == "postgresql":
        try:
            return create_engine(
                u, pool_pre_ping=True, connect_args={"connect_timeout": max(1, int(busy_timeout_s))}
            )
        except ImportError:
            raise StoreError(
                "PostgreSQL needs the psycopg package", hint="pip install 'slurm-colo[postgres]'"
            ) from None
    raise StoreError(
        f"unsupported store URL scheme {u.drivername!r}; use sqlite:/// or postgresql://"
    )


def describe_db_error(engine: Engine, e: BaseException) -> StoreError:
    """Turn a driver error into a one-line :class:`StoreError`."""
    orig = getattr(e, "orig", None) or e
    text = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
    if "database is locked" in text or "database table is locked" in text:
        return StoreError(
            f"history database {safe_url(engine)} is locked by another writer; "
            "nothing was written, retry later"
        )
    if "file is not a database" in text or "malformed" in text:
        return StoreError(f"history database {safe_url(engine)} is corrupt ({text})")
    if "no such table" in text or "does not exist" in text and "relation" in text:
        return StoreError(
            f"history database {safe_url(engine)} lacks table(s): {text}", hint=UPGRADE_HINT
        )
    return StoreError(f"history database {safe_url(engine)}: {text}")


@contextlib.contextmanager
def db_errors(engine: Engine) -> Iterator[None]:
    """Re-raise driver errors as :class:`StoreError`."""
    try:
        yield
    except (DBAPIError, SQLAlchemyError) as e:
        raise describe_db_error(engine, e) from None


def _alembic_config(connection: Any | None = None) -> AlembicConfig:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    with db_errors(engine), engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> tuple[str | None, str]:
    """Bring the schema to ``revision``; returns (before, after)."""
    before = current_revision(engine)
    if before is not None and before not in _known_revisions():
        raise _newer_schema(engine, before)
    if before is None:
        with db_errors(engine), engine.connect() as conn:
            tables = set(inspect(conn).get_table_names())
        if "jobs" in tables:
            raise StoreError(
                f"history database {safe_url(engine)} has slurm-colo tables but no "
                "schema version (alembic_version); restore a backup or start a new file"
            )
    with db_errors(engine), engine.begin() as conn:
        command.upgrade(_alembic_config(conn), revision)
    _checked.discard(engine)
    return before, current_revision(engine) or ""


def require_schema(engine: Engine) -> None:
    """Refuse to work on a database whose schema is not the one this version needs."""
    if engine in _checked:
        return
    rev = current_revision(engine)
    head = head_revision()
    if rev == head:
        _checked.add(engine)
        return
    if rev is None:
        raise StoreError(
            f"history database {safe_url(engine)} has no slurm-colo schema yet", hint=UPGRADE_HINT
        )
    if rev in _known_revisions():
        raise StoreError(
            f"history database {safe_url(engine)} has schema {rev}, older than "
            f"this slurm-colo's {head}",
            hint=UPGRADE_HINT,
        )
    raise _newer_schema(engine, rev)


def _known_revisions() -> set[str]:
    return {s.revision for s in ScriptDirectory.from_config(_alembic_config()).walk_revisions()}


def _newer_schema(engine: Engine, rev: str) -> StoreError:
    return StoreError(
        f"history database {safe_url(engine)} has schema {rev}, unknown to this "
        f"slurm-colo (head {head_revision()}): it was written by a newer version; "
        "nothing was changed (run that version, or restore a backup)"
    )
