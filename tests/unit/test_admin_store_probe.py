"""The doctor's database probe on real SQLite files: missing, empty, migrated, read-only."""

from __future__ import annotations

import sqlite3

import pytest

from slurm_colo.admin import doctor as doc
from slurm_colo.admin.check import FAIL, OK
from slurm_colo.admin.store_probe import probe_store, sqlite_file
from slurm_colo.errors import StoreError
from slurm_colo.store.engine import head_revision, make_engine, upgrade


def _dump(db) -> list[str]:
    con = sqlite3.connect(db)
    try:
        return list(con.iterdump())
    finally:
        con.close()


def test_missing_file_is_reported_not_created(tmp_path):
    db = tmp_path / "history.db"
    with pytest.raises(StoreError) as e:
        probe_store(f"sqlite:///{db}")
    assert "does not exist" in str(e.value) and e.value.hint == "slurm-colo db upgrade"
    assert not db.exists()


def test_unmigrated_database_fails_with_upgrade_hint(tmp_path):
    url = f"sqlite:///{tmp_path / 'history.db'}"
    make_engine(url).connect().close()
    with pytest.raises(StoreError) as e:
        probe_store(url)
    assert "no slurm-colo schema" in str(e.value) and e.value.hint == "slurm-colo db upgrade"


def test_migrated_database_is_ok_and_unchanged(tmp_path):
    db = tmp_path / "history.db"
    url = f"sqlite:///{db}"
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    before = _dump(db)
    msg = probe_store(url)
    assert "is writable" in msg and head_revision() in msg
    c = doc.check_store(lambda: probe_store(url), url)
    assert c.status == OK
    assert _dump(db) == before  # the no-op write was rolled back: same content


def test_read_only_database_fails(tmp_path):
    db = tmp_path / "history.db"
    upgrade(make_engine(f"sqlite:///{db}"))
    ro = f"sqlite:///file:{db}?mode=ro&uri=true"
    c = doc.check_store(lambda: probe_store(ro), ro)
    assert c.status == FAIL and "readonly" in c.message


def test_sqlite_file():
    assert str(sqlite_file("sqlite:////var/lib/x.db")) == "/var/lib/x.db"
    assert sqlite_file("sqlite://") is None
    assert sqlite_file("postgresql://u@h/db") is None
    assert sqlite_file("not a url") is None
