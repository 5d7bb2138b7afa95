"""The `doctor` probe of the history database: reachable, migrated, writable.

It never creates a database (a missing SQLite file is reported, not made) and never
changes one: writability is tested with a no-op UPDATE that is rolled back.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from ..errors import StoreError

UPGRADE_HINT = "slurm-colo db upgrade"


def sqlite_file(url: str) -> Path | None:
    """The database file of a plain ``sqlite:///PATH`` URL (None for other URLs)."""
    try:
        u = make_url(url)
    except ArgumentError:
        return None
    db = u.database or ""
    if u.get_backend_name() != "sqlite" or not db or db == ":memory:" or db.startswith("file:"):
        return None
    return Path(db)


def probe_store(url: str, busy_timeout_s: float = 10.0) -> str:
    """Describe the database at ``url`` when it is usable; raise :class:`StoreError` if not."""
    from ..store.engine import current_revision, db_errors, make_engine, require_schema, safe_url

    f = sqlite_file(url)
    if f is not None and not f.exists():
        raise StoreError(f"history database {f} does not exist", hint=UPGRADE_HINT)
    engine = make_engine(url, busy_timeout_s)
    try:
        require_schema(engine)
        with db_errors(engine), engine.connect() as conn:
            trans = conn.begin()
            try:
                conn.execute(text("UPDATE alembic_version SET version_num = version_num"))
            finally:
                trans.rollback()
        return f"{safe_url(engine)} is writable, schema {current_revision(engine)}"
    finally:
        engine.dispose()
