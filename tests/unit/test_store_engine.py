"""History store: engine setup, schema versions and migrations, locking."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from slurm_colo.contracts.records import JobRecord
from slurm_colo.errors import StoreError
from slurm_colo.store import (
    current_revision,
    head_revision,
    ingest_records,
    make_engine,
    require_schema,
    upgrade,
)
from slurm_colo.store.engine import safe_url


def rec(i: int) -> JobRecord:
    return JobRecord(
        job_id=i,
        node="n1",
        user="alice",
        uid=1000,
        cls="resnet18-bs64",
        start=1000.0 + i,
        end=2000.0 + i,
    )


def test_empty_database_is_refused_with_the_upgrade_command(tmp_path: Path) -> None:
    e = make_engine(f"sqlite:///{tmp_path}/h.db")
    with pytest.raises(StoreError) as ei:
        require_schema(e)
    assert "slurm-colo db upgrade" in str(ei.value)
    with pytest.raises(StoreError, match="slurm-colo db upgrade"):
        ingest_records(e, [rec(1)])


def test_older_schema_is_refused_then_migrated_keeping_data(tmp_path: Path) -> None:
    e = make_engine(f"sqlite:///{tmp_path}/h.db")
    assert upgrade(e, "0001") == (None, "0001")
    with e.begin() as c:  # a job stored by the older version
        c.execute(
            text(
                "INSERT INTO jobs VALUES ('c:1:n:1','c',1,'n','u',1,'x',1,2,'auto',0,NULL,"
                "NULL,NULL,'0','',0,'COMPLETED',0,NULL,NULL,NULL,1,0)"
            )
        )
    with pytest.raises(StoreError) as ei:
        require_schema(e)
    msg = str(ei.value)
    assert "0001" in msg and head_revision() in msg and "slurm-colo db upgrade" in msg
    assert upgrade(e) == ("0001", head_revision())
    require_schema(e)
    with e.connect() as c:
        assert c.execute(text("SELECT count(*) FROM jobs")).scalar() == 1
        assert c.execute(text("SELECT count(*) FROM score_sets")).scalar() == 0
    assert upgrade(e) == (head_revision(), head_revision())  # idempotent


def _newer_history(tmp_path: Path) -> Engine:
    """A history whose schema, 9999, a newer slurm-colo wrote; a fresh engine on it."""
    e = make_engine(f"sqlite:///{tmp_path}/h.db")
    upgrade(e)
    with e.begin() as c:
        c.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    return make_engine(f"sqlite:///{tmp_path}/h.db")


def test_schema_newer_than_this_version_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="newer version"):
        require_schema(_newer_history(tmp_path))


def test_upgrading_a_schema_newer_than_this_version_is_refused_and_changes_nothing(
    tmp_path: Path,
) -> None:
    """Expected: ``db upgrade`` run by an older slurm-colo on a newer history says so, as
    every other command does, and leaves the file alone (it ended in alembic's traceback,
    ``Can't locate revision identified by '9999'``)."""
    e2 = _newer_history(tmp_path)
    with pytest.raises(StoreError, match="schema 9999, unknown to this slurm-colo .* newer"):
        upgrade(e2)
    assert current_revision(e2) == "9999"


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_a_history_in_memory_is_refused(url: str) -> None:
    """Expected: ``db upgrade --url sqlite://`` said it had made the schema, in a database
    gone when the command ended; every command now refuses a history kept in memory."""
    with pytest.raises(StoreError, match="in memory"):
        make_engine(url)


def test_tables_without_version_are_not_touched(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE jobs (x int)")
    con.close()
    with pytest.raises(StoreError, match="no schema version"):
        upgrade(make_engine(f"sqlite:///{db}"))


def test_sqlite_runs_in_wal_mode_with_the_configured_busy_timeout(tmp_path: Path) -> None:
    e = make_engine(f"sqlite:///{tmp_path}/sub/dir/h.db", busy_timeout_s=2.5)
    with e.connect() as c:
        assert c.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert c.execute(text("PRAGMA busy_timeout")).scalar() == 2500
    assert (tmp_path / "sub" / "dir" / "h.db").exists()


def test_bad_urls_are_clear_errors() -> None:
    with pytest.raises(StoreError, match="not a database URL"):
        make_engine("not a url")
    with pytest.raises(StoreError, match="unsupported"):
        make_engine("mysql://u@h/db")


def test_password_is_masked_in_messages() -> None:
    assert "secret" not in safe_url("postgresql+psycopg://u:secret@h:5432/db")


def test_locked_database_raises_store_error_and_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    e = make_engine(f"sqlite:///{db}", busy_timeout_s=0.2)
    upgrade(e)
    ingest_records(e, [rec(1)])
    holder = sqlite3.connect(db, timeout=0)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreError, match="locked"):
            ingest_records(e, [rec(2), rec(3)])
    finally:
        holder.rollback()
        holder.close()
    with e.connect() as c:
        assert c.execute(text("SELECT count(*) FROM jobs")).scalar() == 1
        assert c.execute(text("PRAGMA integrity_check")).scalar() == "ok"
    assert ingest_records(e, [rec(2), rec(3)]) == 2  # the retry later succeeds


def test_corrupt_file_is_a_store_error(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    db.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="corrupt|not a database"):
        current_revision(make_engine(f"sqlite:///{db}"))
